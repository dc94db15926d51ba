/* A double-precision oracle of the delta rule, written from the maths and
 * not from the kernels: per value head, token by token,
 *   S = L_t S;  u = beta_t (v_t - S^T kh_t);  S += kh_t u^T;  o_t = S^T qh_t
 * with qh = scale * nrm(phi(q)), kh = nrm(phi(k)), every operation in
 * double, inputs addressed through the config's strides, q/k heads through
 * qk_heads and head_map. */
#ifndef LA_TEST_ORACLE_DELTA_H
#define LA_TEST_ORACLE_DELTA_H

#include "linattn.h"

/* o_ref: [B][H][T][dv]; s_ref: [B][H][dk][dv]. s_in (floats, NULL = zero)
 * is the initial state. With step = 1 the call is one decode step (T = 1,
 * token strides ignored). */
void oracle_delta(const linattn_config *cfg, int step, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, const float *s_in,
                  double *o_ref, double *s_ref);

#endif
