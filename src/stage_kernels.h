/* The input stage's vector work (stage.h) written once against an ISA
 * vocabulary. An ISA folder includes its vocabulary header, defines
 * LA_STAGE_OPS (the name of the ops struct to define), then includes this
 * file. Beyond the kernels' words it uses:
 *
 *   vf_widen_bf16(p) vf_widen_f16(p)       LA_VW 16-bit values as floats
 *   vf_narrow_bf16(p, x) vf_narrow_f16(p, x)  LA_VW floats rounded to
 *                                          nearest even into 16 bits
 *   vf_sigmoid(x) vf_softplus(x)           for finite x
 *
 * Elements past the last whole vector go through half.h one at a time
 * (the same values: the conversions are exact or correctly rounded). */

#ifndef LA_STAGE_OPS
#error "define LA_STAGE_OPS (and include an ISA vocabulary) before stage_kernels.h"
#endif

#include <math.h>
#include <string.h>

#include "half.h"
#include "stage.h"

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

/* Converted, then phi and the sum of squares in one pass over the row
 * (in L1), then the norm. */
static void stage_features(linattn_dtype t, const void *x, int64_t dk, linattn_phi phi,
                           int l2norm, float *out)
{
    if (t != LINATTN_F32 || phi != LINATTN_PHI_IDENTITY || l2norm) {
        stage_load(t, x, dk, out);
        x = out;
    }
    const float *in = x;
    la_vf ss = vf_zero();
    for (int64_t c = 0; c < dk; c += LA_VW) {
        const la_vf y = vf_phi(phi, vf_loadn(in + c, dk - c));
        vf_storen(out + c, y, dk - c);
        /* lanes past dk: phi(0) may be 1 (elu+1); keep them out of the sum */
        ss = vf_fma(vf_keep(y, dk - c), y, ss);
    }
    if (!l2norm)
        return;
    const la_vf inv = vf_set1((float)(1.0 / sqrt((double)vf_hsum(ss) + 1e-6)));
    for (int64_t c = 0; c < dk; c += LA_VW)
        vf_storen(out + c, vf_mul(inv, vf_loadn(out + c, dk - c)), dk - c);
}

LA_INLINE la_vf stage_gate_one(linattn_gate_act act, la_vf x, la_vf a_exp, la_vf lb)
{
    /* softplus: -exp(A_log) softplus(x); bounded: lb sigmoid(exp(A_log) x) */
    return act == LINATTN_GATE_ACT_SOFTPLUS ? vf_mul(vf_sub(vf_zero(), a_exp), vf_softplus(x))
                                            : vf_mul(lb, vf_sigmoid(vf_mul(a_exp, x)));
}

static float stage_clamp_gate(float g)
{
    /* -inf (an overflowing product) and anything below is a full reset;
     * -0 and rounding above 0 read as no decay */
    return g < LA_G_RESET ? LA_G_RESET : g < 0.0f ? g : 0.0f;
}

static void stage_gate(linattn_gate_act act, float *g, const float *bias, int64_t bias_step,
                       int64_t n, float a_exp, float lower_bound)
{
    const la_vf ae = vf_set1(a_exp), lb = vf_set1(lower_bound);
    const int per_elem = bias && bias_step != 0;
    const la_vf b0 = vf_set1(bias && !per_elem ? bias[0] : 0.0f);
    for (int64_t i = 0; i < n; i += LA_VW) {
        const int64_t w = n - i; /* the last vector: its first w lanes */
        la_vf x = vf_loadn(g + i, w);
        x = vf_add(x, per_elem ? vf_loadn(bias + i, w) : b0);
        vf_storen(g + i, stage_gate_one(act, x, ae, lb), w);
    }
    for (int64_t i = 0; i < n; i++)
        g[i] = stage_clamp_gate(g[i]);
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

const la_stage_ops LA_STAGE_OPS = {
    .load = stage_load,
    .store = stage_store,
    .features = stage_features,
    .gate = stage_gate,
    .beta = stage_beta,
};
