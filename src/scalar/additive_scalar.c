/* The portable table: plain C, no -m flags, the reference every SIMD table
 * is compared with besides the double oracle of the tests. Loops are written
 * for clarity; the compiler may vectorise them for the baseline ISA. */
#include <math.h>
#include <string.h>

#include "../table.h"
#include "simd1.h"

/* Pack layout for chunks of up to C rows (C = the chunk given to pack_bytes):
 *   qh [C][dk]  scale * phi(q)
 *   kh [C][dk]  phi(k)
 *   b  [C][dk]  prefix sums of g from the chunk start, in double so that the
 *               differences b_i - b_j keep the precision of the g they sum
 *               (TOKEN uses column 0 only)
 * The pointers are found from the head's chunk and dk, as in every table. */
typedef struct {
    float *qh, *kh;
    double *b;
} pack_view;

static size_t pack_bytes_scalar(int64_t chunk, int64_t dk, int64_t dv)
{
    (void)dv;
    const size_t per_row = la_size_mul(la_size_of_dim(dk), 2 * sizeof(float) + sizeof(double));
    return la_size_mul(la_size_of_dim(chunk), per_row);
}

static pack_view view_of(const la_head *h, const void *pack)
{
    float *qh = (float *)(uintptr_t)pack, *kh = qh + h->chunk * h->dk;
    return (pack_view){qh, kh, (double *)(kh + h->chunk * h->dk)};
}

static float phi_scalar(linattn_phi phi, float x)
{
    switch (phi) {
    case LINATTN_PHI_ELU1: return x > 0.0f ? x + 1.0f : expf(x);
    case LINATTN_PHI_RELU: return x > 0.0f || isnan(x) ? x : 0.0f; /* NaN propagates */
    default: return x;
    }
}

/* e^x for a non-positive exponent; exactly 0 below LA_EXP_ZERO_BELOW (no
 * subnormals downstream). */
static float decay_of(double x) { return x < LA_EXP_ZERO_BELOW ? 0.0f : expf((float)x); }

/* A gate below LA_G_RESET is a reset: clamped before any prefix sum. */
static float clamp_gate(float g) { return g < LA_G_RESET ? LA_G_RESET : g; }


static void chunk_pack_scalar(const la_head *h, int64_t t0, int64_t n, void *pack)
{
    const int64_t dk = h->dk;
    const pack_view p = view_of(h, pack);
    float *qh = p.qh, *kh = p.kh;
    double *b = p.b;
    for (int64_t i = 0; i < n; i++) {
        const float *q = h->q + (t0 + i) * h->q_ts;
        const float *k = h->k + (t0 + i) * h->k_ts;
        for (int64_t c = 0; c < dk; c++) {
            qh[i * dk + c] = h->scale * phi_scalar(h->phi, q[c]);
            kh[i * dk + c] = phi_scalar(h->phi, k[c]);
        }
        if (h->gate == LA_GATE_TOKEN) {
            const double g = clamp_gate(h->g[(t0 + i) * h->g_ts]);
            b[i * dk] = i ? b[(i - 1) * dk] + g : g;
        } else if (h->gate == LA_GATE_CHANNEL) {
            const float *g = h->g + (t0 + i) * h->g_ts;
            for (int64_t c = 0; c < dk; c++)
                b[i * dk + c] = i ? b[(i - 1) * dk + c] + clamp_gate(g[c]) : clamp_gate(g[c]);
        }
    }
}

/* e^(b_i - b_j) for j <= i, as one exp of a non-positive difference. */
static float decay_between(const double *b, int64_t dk, int64_t i, int64_t j, int64_t c)
{
    return decay_of(b[i * dk + c] - b[j * dk + c]);
}

static void chunk_output_scalar(const la_head *h, const void *pack, int64_t t0, int64_t n,
                                const float *s, const float *z)
{
    const int64_t dk = h->dk, dv = h->dv;
    const pack_view p = view_of(h, pack);
    const float *qh = p.qh, *kh = p.kh;
    const double *b = p.b;
    for (int64_t i = 0; i < n; i++) {
        float *o = h->o + (t0 + i) * h->o_ts;
        const float *qi = qh + i * dk;
        float den = 0.0f;
        memset(o, 0, (size_t)dv * sizeof(float));
        /* inter-chunk: diag(e^b) Qh S */
        for (int64_t c = 0; c < dk; c++) {
            float w = qi[c];
            if (h->gate == LA_GATE_TOKEN)
                w *= decay_of(b[i * dk]);
            else if (h->gate == LA_GATE_CHANNEL)
                w *= decay_of(b[i * dk + c]);
            for (int64_t d = 0; d < dv; d++)
                o[d] += w * s[c * dv + d];
            if (z)
                den += w * z[c];
        }
        /* intra-chunk: ((Qh Kh^T) o D) V */
        for (int64_t j = 0; j <= i; j++) {
            const float *kj = kh + j * dk;
            const float *v = h->v + (t0 + j) * h->v_ts;
            float a = 0.0f;
            if (h->gate == LA_GATE_CHANNEL) {
                for (int64_t c = 0; c < dk; c++)
                    a += qi[c] * kj[c] * decay_between(b, dk, i, j, c);
            } else {
                for (int64_t c = 0; c < dk; c++)
                    a += qi[c] * kj[c];
                if (h->gate == LA_GATE_TOKEN)
                    a *= decay_between(b, dk, i, j, 0);
            }
            for (int64_t d = 0; d < dv; d++)
                o[d] += a * v[d];
            den += a;
        }
        if (z) {
            const float inv = 1.0f / (den + h->eps);
            for (int64_t d = 0; d < dv; d++)
                o[d] *= inv;
        }
    }
}

static void chunk_state_scalar(const la_head *h, const void *pack, int64_t t0, int64_t n,
                               float *u, float *uz)
{
    const int64_t dk = h->dk, dv = h->dv, last = n - 1;
    const pack_view p = view_of(h, pack);
    const float *kh = p.kh;
    const double *b = p.b;
    memset(u, 0, (size_t)(dk * dv) * sizeof(float));
    if (h->z)
        memset(uz, 0, (size_t)dk * sizeof(float));
    for (int64_t j = 0; j < n; j++) {
        const float *v = h->v + (t0 + j) * h->v_ts;
        for (int64_t c = 0; c < dk; c++) {
            float w = kh[j * dk + c];
            if (h->gate == LA_GATE_TOKEN)
                w *= decay_between(b, dk, last, j, 0);
            else if (h->gate == LA_GATE_CHANNEL)
                w *= decay_between(b, dk, last, j, c);
            for (int64_t d = 0; d < dv; d++)
                u[c * dv + d] += w * v[d];
            if (h->z)
                uz[c] += w;
        }
    }
}

static void state_combine_scalar(const la_head *h, const void *pack, int64_t n, float *s,
                                 float *z, const float *u, const float *uz)
{
    const int64_t dk = h->dk, dv = h->dv;
    const double *b = view_of(h, pack).b;
    for (int64_t c = 0; c < dk; c++) {
        float a = 1.0f;
        if (h->gate == LA_GATE_TOKEN)
            a = decay_of(b[(n - 1) * dk]);
        else if (h->gate == LA_GATE_CHANNEL)
            a = decay_of(b[(n - 1) * dk + c]);
        for (int64_t d = 0; d < dv; d++)
            s[c * dv + d] = fmaf(a, s[c * dv + d], u[c * dv + d]);
        if (z)
            z[c] = fmaf(a, z[c], uz[c]);
    }
}

/* One token of the recurrence: each state row is decayed, updated and read
 * out in the same pass; a bfloat16 state (h->s_bf16) widened as read and
 * rounded as written, o read out before the rounding. */
static void token_scalar(const la_head *h, const float *q, const float *k, const float *v,
                         const float *g, float *o)
{
    uint16_t *const s16 = h->s_bf16;
    const int64_t dk = h->dk, dv = h->dv, ld = h->s_ld ? h->s_ld : dv;
    float den = 0.0f;
    memset(o, 0, (size_t)dv * sizeof(float));
    for (int64_t c = 0; c < dk; c++) {
        const float qh = h->scale * phi_scalar(h->phi, q[c]);
        const float kh = phi_scalar(h->phi, k[c]);
        float a = 1.0f;
        if (h->gate == LA_GATE_TOKEN)
            a = decay_of(g[0]);
        else if (h->gate == LA_GATE_CHANNEL)
            a = decay_of(g[c]);
        for (int64_t d = 0; d < dv; d++) {
            const int64_t e = c * ld + d;
            const float x = fmaf(a, s16 ? la_bf16_to_f32(s16[e]) : h->s[e], kh * v[d]);
            if (s16)
                s16[e] = la_f32_to_bf16(x);
            else
                h->s[e] = x;
            o[d] += qh * x;
        }
        if (h->z && h->zc) { /* compensated: z + zc carries the exact sum */
            const float y = fmaf(a, h->zc[c], kh), t = fmaf(a, h->z[c], y);
            h->zc[c] = fmaf(a, h->z[c], -t) + y;
            h->z[c] = t;
            den += qh * t + qh * h->zc[c];
        } else if (h->z) {
            h->z[c] = fmaf(a, h->z[c], kh);
            den += qh * h->z[c];
        }
    }
    if (h->z) {
        const float inv = 1.0f / (den + h->eps);
        for (int64_t d = 0; d < dv; d++)
            o[d] *= inv;
    }
}

static void noncausal_state_scalar(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv;
    for (int64_t t = 0; t < h->T; t++) {
        const float *k = h->k + t * h->k_ts, *v = h->v + t * h->v_ts;
        for (int64_t c = 0; c < dk; c++) {
            const float kh = phi_scalar(h->phi, k[c]);
            for (int64_t d = 0; d < dv; d++)
                h->s[c * dv + d] += kh * v[d];
            if (h->z)
                h->z[c] += kh;
        }
    }
}

static void noncausal_output_scalar(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv;
    for (int64_t t = 0; t < h->T; t++) {
        const float *q = h->q + t * h->q_ts;
        float *o = h->o + t * h->o_ts;
        float den = 0.0f;
        memset(o, 0, (size_t)dv * sizeof(float));
        for (int64_t c = 0; c < dk; c++) {
            const float qh = h->scale * phi_scalar(h->phi, q[c]);
            for (int64_t d = 0; d < dv; d++)
                o[d] += qh * h->s[c * dv + d];
            if (h->z)
                den += qh * h->z[c];
        }
        if (h->z) {
            const float inv = 1.0f / (den + h->eps);
            for (int64_t d = 0; d < dv; d++)
                o[d] *= inv;
        }
    }
}

/* The value-tiled recurrent forward: the generic kernel over one lane. */
#define LA_ADD_NV 2
#include "../additive_kernels.h"

const la_additive_ops la_additive_scalar = {
    .pack_bytes = pack_bytes_scalar,
    .chunk_pack = chunk_pack_scalar,
    .chunk_output = chunk_output_scalar,
    .chunk_state = chunk_state_scalar,
    .state_combine = state_combine_scalar,
    .feature_bytes = additive_feature_bytes,
    .features = additive_features,
    .normaliser = additive_normaliser,
    .columns = additive_columns,
    .packed_bytes = additive_packed_bytes,
    .pack = additive_pack,
    .unpack = additive_unpack,
    .token = token_scalar,
    .token_vfirst = additive_token_vfirst,
    .noncausal_state = noncausal_state_scalar,
    .noncausal_output = noncausal_output_scalar,
};
