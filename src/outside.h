/* Private, included after an ISA vocabulary: whether floats hold a NaN or
 * a value outside [lo, hi]. The gate check's stage op (stage_kernels.h)
 * scans a run with it; the kernel templates scan a block's v rows with it,
 * to keep a scaled tile (gate.h) only where v / d stays finite. */
#ifndef LINATTN_OUTSIDE_H
#define LINATTN_OUTSIDE_H

#include <stdint.h>

#include "gate.h"

/* Floats ahead of the scan that la_any_outside asks memory for: 4 KiB.
 * On a Xeon model 207 (one core) a scan of 64 MiB took 6.2 ms with it
 * against 8.1 from memory (the hardware prefetchers alone keep too few
 * lines in flight), and a channel gate's check 2.9 ms against 3.2 from
 * L3. Fetched into every level (a non-temporal hint made a T = 4096
 * channel-gated forward 7% slower: the kernels read g again after the
 * check, and found it in L3 no more). */
#define LA_SCAN_AHEAD 1024

/* 1 if x[0, n) holds a NaN or a value outside [lo, hi]. Two flag
 * vectors, so that the compares of one load need not wait for the
 * previous one's (the gate check runs at the speed of memory), then the
 * tail one float at a time. */
LA_INLINE int la_any_outside(const float *x, int64_t n, float lo, float hi)
{
    const la_vf vlo = vf_set1(lo), vhi = vf_set1(hi);
    la_vf f0 = vf_zero(), f1 = vf_zero();
    int64_t i = 0;
    for (; i + 2 * LA_VW <= n; i += 2 * LA_VW) {
        if (i + LA_SCAN_AHEAD + 2 * LA_VW <= n)
            /* once per 16 floats (a 64-byte line), whatever the width */
            for (int64_t b = (16 - i % 16) % 16; b < 2 * LA_VW; b += 16)
                __builtin_prefetch(x + i + LA_SCAN_AHEAD + b, 0, 3);
        f0 = vf_flag_outside(f0, vf_load(x + i), vlo, vhi);
        f1 = vf_flag_outside(f1, vf_load(x + i + LA_VW), vlo, vhi);
    }
    int bad = vf_any_flag(f0) | vf_any_flag(f1);
    for (; i < n; i++)
        bad |= !(x[i] >= lo) | !(x[i] <= hi);
    return bad;
}

/* 1 if a value of rows x + i * ts, i < rows, n floats each, lies outside
 * +-LA_SCALED_V_MAX or is NaN. Whole rows, so that the answer does not
 * depend on which columns a unit works on. */
LA_INLINE int la_rows_too_large(const float *x, int64_t ts, int64_t rows, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < rows; i++)
        bad |= la_any_outside(x + i * ts, n, -LA_SCALED_V_MAX, LA_SCALED_V_MAX);
    return bad;
}

/* la_rows_too_large, remembered in *flag: -1 until asked, then 1 or 0.
 * A sweep's first tile asks for a pair's or quad's rows just before it
 * reads them, and the block's other tiles take the answer: tested ahead of
 * the sweeps, for a whole block at once, the rows cost a token-gated
 * forward about 3% on a Xeon. */
LA_INLINE int la_rows_too_large_once(float *flag, const float *x, int64_t ts, int64_t rows,
                                     int64_t n)
{
    if (*flag < 0.0f)
        *flag = (float)la_rows_too_large(x, ts, rows, n);
    return *flag != 0.0f;
}

#endif
