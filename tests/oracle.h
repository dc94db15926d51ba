/* A double-precision oracle of the additive family (docs/maths.md), written
 * from the maths and not from the kernels: the plain recurrence S_t = L_t S_{t-1} + kh_t v_t^T,
 * token by token (or the plain sums for non-causal), every operation in
 * double, inputs addressed through the config's strides. */
#ifndef LA_TEST_ORACLE_H
#define LA_TEST_ORACLE_H

#include "linattn.h"

/* o_ref: [B][H][T][dv]; s_ref: [B][H][dk][dv]; z_ref: [B][H][dk]. s_in and
 * z_in (floats, may be NULL = zero) are the initial state. With step = 1 the
 * call is one decode step (T = 1, token strides ignored). */
void oracle_forward(const linattn_config *cfg, int step, const float *q, const float *k,
                    const float *v, const float *g, const float *s_in, const float *z_in,
                    double *o_ref, double *s_ref, double *z_ref);

#endif
