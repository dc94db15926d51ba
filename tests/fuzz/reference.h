/* A double-precision reference of one (batch, head) problem, written from the
 * recurrences, with a running error bound: every value carries the same
 * computation in absolute values (a) and an absolute slack for flushed or
 * subnormal operands (m). Whatever order a kernel sums in, its fp32 result
 * differs from v by at most gamma * a + m (gamma: a few ulps per operation
 * in the longest chain), so the fuzzer can compare any shape and value range
 * without a fixed tolerance. */
#ifndef FUZZ_REFERENCE_H
#define FUZZ_REFERENCE_H

#include <stdint.h>

typedef struct {
    double v, a, m;
} ref_num;

typedef struct {
    int delta;     /* 0: additive family (normaliser optional), 1: delta rule */
    int causal;    /* additive only; 0 = every query sees the whole sequence */
    int normalize; /* additive only */
    int phi;       /* linattn_phi */
    int gated;     /* g below is given */
    int ftz;       /* the kernel may flush subnormal intermediates to 0 (x86, CHANNEL) */
    int qk_l2norm;
    int64_t T, dk, dv;
    double scale, eps;
} ref_cfg;

typedef struct {
    /* Token-major, dense: q, k [T][dk], v [T][dv], g [T][dk] (a per-token or
     * per-head gate repeated over channels), beta [T]; s0 [dk][dv] and z0
     * [dk] may be NULL (zero initial state). */
    const float *q, *k, *v, *g, *beta, *s0, *z0;
} ref_in;

typedef struct {
    ref_num *o;   /* [T][dv]: numerators */
    ref_num *den; /* [T]: normalisers (qh . z + eps); additive with normalize */
    ref_num *s;   /* [dk][dv]: final state */
    ref_num *z;   /* [dk] */
    double gate_sum; /* largest sum over tokens of min(|g|, 200) of one channel */
    int overflow;    /* some magnitude passed 1e30: fp32 may overflow, no comparison */
    /* absolute error allowed for decays flushed to 0 and for subnormal or
     * underflowed products: in o, in the normalisers, in the final z */
    double flush_o, flush_den, flush_z;
} ref_out;

void ref_head(const ref_cfg *c, const ref_in *in, ref_out *out);

#endif
