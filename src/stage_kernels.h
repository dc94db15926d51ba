/* The input stage's vector work (stage.h) written once against an ISA
 * vocabulary. An ISA folder includes its vocabulary header, defines
 * LA_STAGE_OPS (the name of the ops struct to define), then includes this
 * file. Beyond the kernels' words it uses:
 *
 *   vf_widen_bf16(p) vf_widen_f16(p)       LA_VW 16-bit values as floats
 *   vf_narrow_bf16(p, x) vf_narrow_f16(p, x)  LA_VW floats rounded to
 *                                          nearest even into 16 bits
 *   vf_narrow2_bf16(p, lo, hi)             2 LA_VW floats, lo then hi, the
 *                                          same way (one store where the
 *                                          ISA can: state_rows.h)
 *   vf_sigmoid(x)                          for finite x
 *   vf_transpose(r)                        LA_VW vectors r[0..LA_VW) as a
 *                                          tile, transposed in registers
 *   vf_flag_outside(flags, x, lo, hi)      flags with the lanes set where
 *                                          x is NaN or outside [lo, hi]
 *   vf_any_flag(flags)                     nonzero when a lane is set
 *
 * Elements past the last whole vector go through half.h one at a time
 * (the same values: the conversions are exact or correctly rounded). */

#ifndef LA_STAGE_OPS
#error "define LA_STAGE_OPS (and include an ISA vocabulary) before stage_kernels.h"
#endif

#include <math.h>
#include <string.h>

#include "half.h"
#include "outside.h"
#include "stage.h"
#include "state_rows.h"

static void stage_load(linattn_dtype t, const void *x, int64_t n, float *out)
{
    const uint16_t *h = x;
    int64_t i = 0;
    switch (t) {
    case LINATTN_BF16:
        for (; i + LA_VW <= n; i += LA_VW)
            vf_store(out + i, vf_widen_bf16(h + i));
        for (; i < n; i++)
            out[i] = la_bf16_to_f32(h[i]);
        break;
    case LINATTN_F16:
        for (; i + LA_VW <= n; i += LA_VW)
            vf_store(out + i, vf_widen_f16(h + i));
        for (; i < n; i++)
            out[i] = la_f16_to_f32(h[i]);
        break;
    default: memcpy(out, x, (size_t)n * sizeof(float));
    }
}

static void stage_store(linattn_dtype t, const float *x, int64_t n, void *y)
{
    uint16_t *h = y;
    int64_t i = 0;
    switch (t) {
    case LINATTN_BF16:
        for (; i + 2 * LA_VW <= n; i += 2 * LA_VW)
            vf_narrow2_bf16(h + i, vf_load(x + i), vf_load(x + i + LA_VW));
        for (; i + LA_VW <= n; i += LA_VW)
            vf_narrow_bf16(h + i, vf_load(x + i));
        for (; i < n; i++)
            h[i] = la_f32_to_bf16(x[i]);
        break;
    case LINATTN_F16:
        for (; i + LA_VW <= n; i += LA_VW)
            vf_narrow_f16(h + i, vf_load(x + i));
        for (; i < n; i++)
            h[i] = la_f32_to_f16(x[i]);
        break;
    default: memcpy(y, x, (size_t)n * sizeof(float));
    }
}

/* LA_VW elements of row x from element c, widened to floats. */
LA_INLINE la_vf stage_widen(linattn_dtype t, const void *x, int64_t c)
{
    return t == LINATTN_BF16  ? vf_widen_bf16((const uint16_t *)x + c)
           : t == LINATTN_F16 ? vf_widen_f16((const uint16_t *)x + c)
                              : vf_load((const float *)x + c);
}

/* stage_features with the type and phi constants: each vector widened,
 * mapped and stored in one pass (no float copy of the row first), the sum
 * of squares only for the norm. A bfloat16 additive forward (q, k, v, o;
 * dk = 64, T = 1024, one head, Zen 4) over its float32 twin: elu+1
 * 1.11-1.14x -> 1.08x, identity 1.13-1.15x -> 1.08-1.09x. */
LA_INLINE void stage_features_as(linattn_dtype t, const void *x, int64_t dk, linattn_phi phi,
                                 int l2norm, float *out)
{
    la_vf ss = vf_zero();
    int64_t c = 0;
    for (; c + LA_VW <= dk; c += LA_VW) {
        const la_vf y = vf_phi(phi, stage_widen(t, x, c));
        vf_store(out + c, y);
        if (l2norm)
            ss = vf_fma(y, y, ss);
    }
    if (c < dk) {
        const int64_t w = dk - c;
        if (t != LINATTN_F32) /* the tail one element at a time (half.h), then as floats */
            stage_load(t, (const uint16_t *)x + c, w, out + c);
        const la_vf y = vf_phi(phi, vf_loadn(t != LINATTN_F32 ? out + c : (const float *)x + c, w));
        vf_storen(out + c, y, w);
        /* lanes past dk: phi(0) may be 1 (elu+1); keep them out of the sum */
        ss = vf_fma(vf_keep(y, w), y, ss);
    }
    if (!l2norm)
        return;
    const la_vf inv = vf_set1((float)(1.0 / sqrt((double)vf_hsum(ss) + 1e-6)));
    for (c = 0; c < dk; c += LA_VW)
        vf_storen(out + c, vf_mul(inv, vf_loadn(out + c, dk - c)), dk - c);
}

LA_INLINE void stage_features_phi(linattn_dtype t, const void *x, int64_t dk, linattn_phi phi,
                                  int l2norm, float *out)
{
    switch (phi) {
    case LINATTN_PHI_ELU1: stage_features_as(t, x, dk, LINATTN_PHI_ELU1, l2norm, out); break;
    case LINATTN_PHI_RELU: stage_features_as(t, x, dk, LINATTN_PHI_RELU, l2norm, out); break;
    default: stage_features_as(t, x, dk, LINATTN_PHI_IDENTITY, l2norm, out); break;
    }
}

/* phi of a q or k row, converted to float, and its L2 norm if asked. */
static void stage_features(linattn_dtype t, const void *x, int64_t dk, linattn_phi phi,
                           int l2norm, float *out)
{
    switch (t) {
    case LINATTN_BF16: stage_features_phi(LINATTN_BF16, x, dk, phi, l2norm, out); break;
    case LINATTN_F16: stage_features_phi(LINATTN_F16, x, dk, phi, l2norm, out); break;
    default: stage_features_phi(LINATTN_F32, x, dk, phi, l2norm, out); break;
    }
}

/* log(1 + t) for t in [0, 1], the same algorithm on every table. With
 * s = t / (2 + t), log(1 + t) = 2 atanh(s) = 2s + s R(s^2), where
 * R(z) = 2z/3 + 2z^2/5 + ... + 2z^7/15 (z <= 1/9: the first term left out
 * is below 2^-29 of the result), and 2s = t - ts, so log(1 + t) =
 * t - s (t - R): t, exact, leads and the roundings sit in the smaller
 * term. Every float in [0, 1] checked against double: at most 1.06 ulp,
 * as SLEEF's log1p (1 ulp) was, in a third of its instructions and with
 * no call per vector (docs/kernels.md: KDA's gate, 4 Mi values a call). */
LA_INLINE la_vf stage_log1p_unit(la_vf t)
{
    const la_vf s = vf_div(t, vf_add(vf_set1(2.0f), t)), z = vf_mul(s, s);
    la_vf r = vf_fma(vf_set1(2.0f / 15.0f), z, vf_set1(2.0f / 13.0f));
    r = vf_fma(r, z, vf_set1(2.0f / 11.0f));
    r = vf_fma(r, z, vf_set1(2.0f / 9.0f));
    r = vf_fma(r, z, vf_set1(2.0f / 7.0f));
    r = vf_fma(r, z, vf_set1(2.0f / 5.0f));
    r = vf_fma(r, z, vf_set1(2.0f / 3.0f));
    return vf_fma(s, vf_sub(vf_mul(r, z), t), t);
}

/* log(1 + e^x) = max(x, 0) + log1p(e^-|x|) for finite x; x - 2 max(x, 0)
 * is -|x| exactly. e^-|x| is 0 below e^-80 (vf_decay): an absolute error
 * under 2e-35. */
LA_INLINE la_vf stage_softplus(la_vf x)
{
    const la_vf pos = vf_phi(LINATTN_PHI_RELU, x);
    return vf_add(pos, stage_log1p_unit(vf_decay(vf_sub(x, vf_add(pos, pos)))));
}

LA_INLINE la_vf stage_gate_one(linattn_gate_act act, la_vf x, la_vf a_exp, la_vf lb)
{
    /* softplus: -exp(A_log) softplus(x); bounded: lb sigmoid(exp(A_log) x) */
    return act == LINATTN_GATE_ACT_SOFTPLUS ? vf_mul(vf_sub(vf_zero(), a_exp), stage_softplus(x))
                                            : vf_mul(lb, vf_sigmoid(vf_mul(a_exp, x)));
}

/* The gate clamped into [LA_G_RESET, 0]: -inf (an overflowing product)
 * and anything below LA_G_RESET is a full reset; -0, rounding above 0 and
 * NaN (0 times an infinite exp(A_log)) read as no decay, +0. In the vector
 * loop, not a pass of its own over g: KDA's gate (dk values a token and
 * head) took 41 cycles a zmm vector with the pass, 33.5 without, on Zen 5. */
LA_INLINE la_vf stage_clamp_gate(la_vf g)
{
    return vf_max(vf_min(g, vf_zero()), vf_set1(LA_G_RESET));
}

static void stage_gate(linattn_gate_act act, const float *a, float *g, const float *bias,
                       int64_t bias_step, int64_t n, float a_exp, float lower_bound)
{
    const la_vf ae = vf_set1(a_exp), lb = vf_set1(lower_bound);
    const int per_elem = bias && bias_step != 0;
    const la_vf b0 = vf_set1(bias && !per_elem ? bias[0] : 0.0f);
    for (int64_t i = 0; i < n; i += LA_VW) {
        const int64_t w = n - i; /* the last vector: its first w lanes */
        la_vf x = vf_loadn(a + i, w);
        x = vf_add(x, per_elem ? vf_loadn(bias + i, w) : b0);
        vf_storen(g + i, stage_clamp_gate(stage_gate_one(act, x, ae, lb)), w);
    }
}

static void stage_beta(linattn_beta_act act, float *b, int64_t n)
{
    const la_vf m = vf_set1(act == LINATTN_BETA_ACT_SIGMOID2 ? 2.0f : 1.0f);
    int64_t i = 0;
    for (; i + LA_VW <= n; i += LA_VW)
        vf_store(b + i, vf_mul(m, vf_sigmoid(vf_load(b + i))));
    if (i < n)
        vf_storen(b + i, vf_mul(m, vf_sigmoid(vf_loadn(b + i, n - i))), n - i);
}

/* ---- transposes: a V-first state pool against the K-first tile ---------- */

/* x's rows are taken STAGE_TR_ROWS at a time and each such panel is swept
 * across its columns one register tile after another: x is read as that
 * many sequential streams, and y is written STAGE_TR_ROWS elements of a
 * row at a time (whole cache lines), with few enough lines in flight on
 * either side for L1's sets (a whole column of y at once touches cols
 * lines ldy apart, which share a handful of sets). The plan calls these
 * once per unit and call on the unit's whole tile (at dk = dv = 128, 64
 * KiB of floats, which stays in L2 for the kernels). */
enum { STAGE_TR_ROWS = LA_VW > 32 ? LA_VW : 32 };

/* One tile: rows [0, nr) x columns [0, nc) of x from element xo (nr, nc <=
 * LA_VW; missing rows read as 0 and are never stored) transposed to
 * element yo of y. in: x of the state's type, y float; out: the reverse.
 * Whole tiles are instantiated with constant nr = nc = LA_VW. */
LA_INLINE void stage_tile(const void *x, int64_t xo, int64_t ldx, int64_t nr, int64_t nc, void *y,
                          int64_t yo, int64_t ldy, int in, int bf16)
{
    la_vf v[LA_VW];
    for (int i = 0; i < LA_VW; i++)
        v[i] = i >= nr ? vf_zero()
               : in    ? vf_load_row(x, xo + i * ldx, nc, bf16)
                       : vf_load_row(x, xo + i * ldx, nc, 0);
    vf_transpose(v);
    for (int i = 0; i < LA_VW && i < nc; i++) {
        if (in)
            vf_store_row(y, yo + i * ldy, v[i], nr, 0);
        else
            vf_store_row(y, yo + i * ldy, v[i], nr, bf16);
    }
}

/* in: the state comes from memory (a pool of many sequences is not in the
 * cache), in rows too short for the hardware prefetchers to follow (dk =
 * 128 floats: 8 lines), so the lines of the next panel are asked for, one
 * per row each 64 bytes of columns, while this panel is transposed (Zen 3,
 * dk = dv = 128: 8.5 -> 7.2 us per head, against 5 us to read it). */
LA_INLINE void stage_transpose(const void *x, int64_t ldx, int64_t rows, int64_t cols, void *y,
                               int64_t ldy, int in, int bf16)
{
    const int64_t es = in && bf16 ? 2 : 4;
    for (int64_t rb = 0; rb < rows; rb += STAGE_TR_ROWS) {
        const int64_t re = rows - rb < STAGE_TR_ROWS ? rows : rb + STAGE_TR_ROWS;
        const int64_t ne = rows - re < STAGE_TR_ROWS ? rows : re + STAGE_TR_ROWS;
        for (int64_t c = 0; c < cols; c += LA_VW) {
            if (in && (c * es) % 64 < LA_VW * es)
                for (int64_t r = re; r < ne; r++)
                    __builtin_prefetch((const char *)x + (r * ldx + c) * es);
            for (int64_t r = rb; r < re; r += LA_VW) {
                const int64_t xo = r * ldx + c, yo = c * ldy + r;
                if (re - r >= LA_VW && cols - c >= LA_VW)
                    stage_tile(x, xo, ldx, LA_VW, LA_VW, y, yo, ldy, in, bf16);
                else
                    stage_tile(x, xo, ldx, re - r, cols - c, y, yo, ldy, in, bf16);
            }
        }
    }
}

static void stage_transpose_in(linattn_dtype t, const void *x, int64_t ldx, int64_t rows,
                               int64_t cols, float *y, int64_t ldy)
{
    if (t == LINATTN_BF16)
        stage_transpose(x, ldx, rows, cols, y, ldy, 1, 1);
    else
        stage_transpose(x, ldx, rows, cols, y, ldy, 1, 0);
}

static void stage_transpose_out(linattn_dtype t, const float *x, int64_t ldx, int64_t rows,
                                int64_t cols, void *y, int64_t ldy)
{
    if (t == LINATTN_BF16)
        stage_transpose(x, ldx, rows, cols, y, ldy, 0, 1);
    else
        stage_transpose(x, ldx, rows, cols, y, ldy, 0, 0);
}

const la_stage_ops LA_STAGE_OPS = {
    .load = stage_load,
    .store = stage_store,
    .features = stage_features,
    .gate = stage_gate,
    .beta = stage_beta,
    .transpose_in = stage_transpose_in,
    .transpose_out = stage_transpose_out,
    .any_outside = la_any_outside,
};
