/* Private, included by the kernel templates after an ISA vocabulary: the
 * test that lets a sweep take rows divided by a scaled tile's d (gate.h)
 * only where they stay finite. */
#ifndef LINATTN_SCALED_ROWS_H
#define LINATTN_SCALED_ROWS_H

#include <stdint.h>

#include "gate.h"

/* 1 if a value of rows x + i * ts, i < rows, n floats each, lies outside
 * +-LA_SCALED_V_MAX or is NaN. Whole rows, so that the answer does not
 * depend on which columns a unit works on. */
LA_INLINE int la_rows_too_large(const float *x, int64_t ts, int64_t rows, int64_t n)
{
    const la_vf hi = vf_set1(LA_SCALED_V_MAX), lo = vf_set1(-LA_SCALED_V_MAX);
    la_vf flags = vf_zero();
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < n; c += LA_VW)
            flags = vf_flag_outside(flags, vf_loadn(x + i * ts + c, n - c), lo, hi);
    return vf_any_flag(flags);
}

#endif
