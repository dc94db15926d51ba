/* Private: the input stage both families share.
 *
 * Kernels read float32 panels only. Per block of tokens of one value head
 * the stage turns the caller's operands into what the kernels read:
 *   q, k  converted to float, phi and unit L2 norm applied (qk_l2norm);
 *   v     converted to float;
 *   g     log-decays, computed from raw projections when a gate activation
 *         is asked (-exp(A_log) softplus(a + dt_bias), or the bounded
 *         sigmoid), else the caller's;
 *   beta  converted, and sigmoid (or 2 sigmoid) of logits when asked;
 *   o     a float panel the kernels write, narrowed to o's type after them.
 * An operand that is float32 and needs nothing is not copied: the view
 * points into the caller's array. q and k panels are kept while the next
 * value head reads the same q/k head and block, so with grouped heads they
 * are made once per q/k head.
 *
 * The vector work (conversions, phi, norms, activations, the transposes
 * that move a V-first state pool into and out of the plan's K-first
 * working copy, and the argument check's scan of the gate values) is each
 * table's la_stage_ops, written once in stage_kernels.h against the ISA
 * vocabulary; this file's la_stage_in/la_stage_out drive the input side,
 * plan.c and delta_driver.c the transposes, check.c the scan.
 *
 * A new input type is a case in stage_kernels.h's load, store, widen and
 * features and two vocabulary words, vf_widen_X and vf_narrow_X (the
 * other places: docs/architecture.md); a new activation is a case in its
 * gate or beta op and a check in check.c. */
#ifndef LINATTN_STAGE_H
#define LINATTN_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "gate.h"
#include "head.h"
#include "linattn.h"

typedef struct la_stage_ops {
    /* n values of type t at x as floats into out */
    void (*load)(linattn_dtype t, const void *x, int64_t n, float *out);
    /* n floats into type t at y, rounded to nearest even */
    void (*store)(linattn_dtype t, const float *x, int64_t n, void *y);
    /* out[0..dk) = nrm(phi(x)) of a row of type t (nrm: unit L2 norm when
     * l2norm, else the identity) */
    void (*features)(linattn_dtype t, const void *x, int64_t dk, linattn_phi phi, int l2norm,
                     float *out);
    /* g[i] = act(a[i] + bias[i * bias_step]) (bias NULL: 0; a may be g),
     * with a_exp = exp(A_log) and the bounded sigmoid's lower bound;
     * clamped to [LA_G_RESET, 0] as the kernels clamp a caller's log-decay.
     * A channel gate's row is read from the caller's tensor, not copied
     * first (in a profile the copy was a third of the activation's cost). */
    void (*gate)(linattn_gate_act act, const float *a, float *g, const float *bias,
                 int64_t bias_step, int64_t n, float a_exp, float lower_bound);
    /* b[i] = act(b[i]) in place */
    void (*beta)(linattn_beta_act act, float *b, int64_t n);
    /* Transposes between a state pool and the kernels' float tile:
     * y[c * ldy + r] = x[r * ldx + c] for r < rows, c < cols, x of type t
     * (float32 or bfloat16, widened) into floats, or floats into y of type
     * t (rounded to nearest even). A V-first state (value column j is a
     * row of dk elements) against the K-first working copy: in register
     * tiles of LA_VW x LA_VW, so both sides are read and written a vector
     * at a time. Nothing outside the rows x cols elements is touched. */
    void (*transpose_in)(linattn_dtype t, const void *x, int64_t ldx, int64_t rows, int64_t cols,
                         float *y, int64_t ldy);
    void (*transpose_out)(linattn_dtype t, const float *x, int64_t ldx, int64_t rows,
                          int64_t cols, void *y, int64_t ldy);
    /* Nonzero when one of x[0..n) is NaN or outside [lo, hi]: the argument
     * check's scan of the gate values (a channel gate has as many as q) */
    int (*any_outside)(const float *x, int64_t n, float lo, float hi);
} la_stage_ops;

/* One value head's operands as the caller gave them: pointers at (b, h)
 * (q and k at the q/k head it reads), token strides in elements. */
typedef struct la_source {
    int64_t T, dk, dv;
    const void *q, *k, *v, *beta;
    const float *g;
    void *o;
    int64_t q_ts, k_ts, v_ts, g_ts, beta_ts, o_ts;
    linattn_dtypes dt;
    linattn_phi phi;
    int l2norm;
    la_gate gate;
    linattn_gate_act gate_act;
    float a_exp, lower_bound;
    const float *dt_bias; /* this head's: 1 float (TOKEN) or dk (CHANNEL); NULL: 0 */
    linattn_beta_act beta_act;
} la_source;

struct la_call;
/* Value head i = b * H + h of a validated call, all its tokens. */
la_source la_source_at(const struct la_call *c, int64_t i);
/* The same advanced to token t0 with T tokens (a packed sequence). */
la_source la_source_tokens(const la_source *s, int64_t t0, int64_t T);

/* 1 when every operand of s is read as it is (float32, nothing to apply):
 * a driver may then give the kernels the whole head (pointers at token 0)
 * and let them prefetch ahead, instead of block views. */
int la_stage_passthrough(const la_source *s);

/* Bytes of stage buffer for blocks of up to n tokens (64-byte aligned;
 * saturating). */
size_t la_stage_bytes(const la_source *s, int64_t n);
/* Forget the q/k panels a buffer holds: call it where a buffer starts
 * serving another call (a unit's start). */
void la_stage_reset(void *buf);
/* Tokens [t0, t0 + n) of s as a head view of n tokens: h's q, k, v, g,
 * beta, o, their token strides, phi and gate are set (the rest of *h is
 * kept). buf is la_stage_bytes(s, >= n) bytes. */
void la_stage_in(const la_stage_ops *ops, const la_source *s, int64_t t0, int64_t n, void *buf,
                 la_head *h);
/* The same for a pass that reads only some operands (LA_STAGE_*): the
 * others' panels are not made and must not be read (the non-causal form
 * reads k and v into the state, then q for the outputs). */
enum { LA_STAGE_Q = 1, LA_STAGE_KV = 2, LA_STAGE_ALL = 3 }; /* KV: k, v, g, beta */
void la_stage_in_parts(const la_stage_ops *ops, const la_source *s, int64_t t0, int64_t n,
                       void *buf, la_head *h, unsigned parts);
/* Asks for the caller's rows of those parts (q; k and v) of tokens
 * [t0, t0 + n) into L2, where t0 < T: a pass that stages a block at a
 * time and then computes on it fetches the next block meanwhile, as one
 * stream through the arrays would have had them. */
void la_stage_prefetch(const la_source *s, int64_t t0, int64_t n, unsigned parts);
/* After the kernels wrote columns [j0, j0 + nj) of the view's o rows:
 * narrow them into the caller's o (nothing when o is float32). */
void la_stage_out(const la_stage_ops *ops, const la_source *s, int64_t t0, int64_t n,
                  const la_head *h, int64_t j0, int64_t nj);

#endif
