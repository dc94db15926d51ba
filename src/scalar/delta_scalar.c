/* The delta rule in plain C: the reference every SIMD table's delta ops
 * are compared with, besides the double oracle of the tests. Both
 * algorithms work on a tile of value columns [j0, j0 + nj) (see delta.h). */
#include <math.h>
#include <string.h>

#include "../half.h"
#include "../table.h"

static float phi_scalar(linattn_phi phi, float x)
{
    switch (phi) {
    case LINATTN_PHI_ELU1: return x > 0.0f ? x + 1.0f : expf(x);
    case LINATTN_PHI_RELU: return x > 0.0f || isnan(x) ? x : 0.0f;
    default: return x;
    }
}

/* e^x for a non-positive exponent; exactly 0 below LA_EXP_ZERO_BELOW. */
static float decay_of(double x) { return x < LA_EXP_ZERO_BELOW ? 0.0f : expf((float)x); }

static float clamp_gate(float g) { return g < LA_G_RESET ? LA_G_RESET : g; }

/* out = mult * phi(x) over dk channels (unit norms: the input stage). */
static void features(const la_head *h, const float *x, float mult, float *out)
{
    for (int64_t i = 0; i < h->dk; i++)
        out[i] = mult * phi_scalar(h->phi, x[i]);
}

/* ---- recurrent --------------------------------------------------------- */

static int64_t tile_columns_scalar(int64_t dk, int64_t dv)
{
    (void)dk;
    (void)dv;
    return 64;
}

/* qh, kh, a [dk]; u, acc [nj]; a float copy of a bfloat16 state's tile
 * [dk][nj] */
static size_t recurrent_bytes_scalar(int64_t T, int64_t dk, int64_t nj)
{
    (void)T;
    const size_t d = la_size_of_dim(dk), n = la_size_of_dim(nj);
    return la_size_floats(la_size_add(la_size_add(la_size_mul(3, d), la_size_mul(2, n)),
                                      la_size_mul(d, n)));
}

/* a[i]: the decay of key row i at token t. */
static void row_decays(const la_head *h, int64_t t, float *a)
{
    for (int64_t i = 0; i < h->dk; i++)
        a[i] = h->gate == LA_GATE_NONE    ? 1.0f
               : h->gate == LA_GATE_TOKEN ? decay_of(h->g[t * h->g_ts])
                                          : decay_of(h->g[t * h->g_ts + i]);
}

/* Per token: pass 1 decays the tile's rows and accumulates S^T kh, then
 * u = beta (v - S^T kh); pass 2 adds kh u^T and accumulates S^T qh. */
static void recurrent_scalar(const la_head *h, int64_t j0, int64_t nj, void *ws)
{
    const int64_t dk = h->dk;
    float *qh = ws, *kh = qh + dk, *a = kh + dk, *u = a + dk, *acc = u + nj;
    /* the tile as floats: the state itself, or a bfloat16 state widened
     * into the workspace (rounded back per token, as the SIMD tables do) */
    float *S = h->s_bf16 ? acc + nj : h->s + j0;
    const int64_t ld = h->s_bf16 ? nj : h->dv;
    for (int64_t i = 0; h->s_bf16 && i < dk; i++)
        for (int64_t j = 0; j < nj; j++)
            S[i * ld + j] = la_bf16_to_f32(h->s_bf16[i * h->dv + j0 + j]);
    for (int64_t t = 0; t < h->T; t++) {
        features(h, h->q + t * h->q_ts, h->scale, qh);
        features(h, h->k + t * h->k_ts, 1.0f, kh);
        row_decays(h, t, a);
        const float beta = h->beta[t * h->beta_ts];
        const float *v = h->v + t * h->v_ts + j0;
        float *o = h->o + t * h->o_ts + j0;
        memset(u, 0, (size_t)nj * sizeof(float));
        for (int64_t i = 0; i < dk; i++) {
            float *srow = S + i * ld;
            for (int64_t j = 0; j < nj; j++) {
                srow[j] *= a[i];
                u[j] = fmaf(srow[j], kh[i], u[j]);
            }
        }
        for (int64_t j = 0; j < nj; j++)
            u[j] = beta * (v[j] - u[j]);
        memset(acc, 0, (size_t)nj * sizeof(float));
        for (int64_t i = 0; i < dk; i++) {
            float *srow = S + i * ld;
            for (int64_t j = 0; j < nj; j++) {
                srow[j] = fmaf(kh[i], u[j], srow[j]);
                acc[j] = fmaf(srow[j], qh[i], acc[j]);
                if (h->s_bf16) /* stored as the SIMD sweep stores it, after o read it */
                    srow[j] = la_bf16_to_f32(la_f32_to_bf16(srow[j]));
            }
        }
        memcpy(o, acc, (size_t)nj * sizeof(float));
    }
    for (int64_t i = 0; h->s_bf16 && i < dk; i++)
        for (int64_t j = 0; j < nj; j++)
            h->s_bf16[i * h->dv + j0 + j] = la_f32_to_bf16(S[i * ld + j]);
}

/* The same on a V-first state (column j: the dk elements at s + j * s_vld,
 * float, or bfloat16 widened into the workspace and rounded back per token
 * after o has read it, as the SIMD tables do), column by column: acc =
 * S_j . kh after the decay, then the update and S_j . qh. A state read
 * from h->s_from is first copied into s (the same values the SIMD tables
 * read from there). */
static void recurrent_vfirst_scalar(const la_head *h, int64_t j0, int64_t nj, void *ws)
{
    const int64_t dk = h->dk;
    float *qh = ws, *kh = qh + dk, *a = kh + dk, *wide = a + dk;
    const size_t es = h->s_bf16 ? sizeof(uint16_t) : sizeof(float);
    unsigned char *s = h->s_bf16 ? (unsigned char *)h->s_bf16 : (unsigned char *)h->s;
    for (int64_t j = j0; h->s_from && j < j0 + nj; j++)
        memcpy(s + (size_t)(j * h->s_vld) * es,
               (const unsigned char *)h->s_from + (size_t)(j * h->s_vld) * es, (size_t)dk * es);
    for (int64_t t = 0; t < h->T; t++) {
        features(h, h->q + t * h->q_ts, h->scale, qh);
        features(h, h->k + t * h->k_ts, 1.0f, kh);
        row_decays(h, t, a);
        const float beta = h->beta[t * h->beta_ts];
        for (int64_t j = j0; j < j0 + nj; j++) {
            uint16_t *row16 = h->s_bf16 ? h->s_bf16 + j * h->s_vld : NULL;
            float *row = row16 ? wide : h->s + j * h->s_vld, acc = 0.0f, out = 0.0f;
            for (int64_t i = 0; row16 && i < dk; i++)
                row[i] = la_bf16_to_f32(row16[i]);
            for (int64_t i = 0; i < dk; i++) {
                row[i] *= a[i];
                acc = fmaf(row[i], kh[i], acc);
            }
            const float u = beta * (h->v[t * h->v_ts + j] - acc);
            for (int64_t i = 0; i < dk; i++) {
                row[i] = fmaf(kh[i], u, row[i]);
                out = fmaf(row[i], qh[i], out);
            }
            for (int64_t i = 0; row16 && i < dk; i++)
                row16[i] = la_f32_to_bf16(row[i]);
            h->o[t * h->o_ts + j] = out;
        }
    }
}

/* ---- chunked ----------------------------------------------------------- */

/* Workspace of one chunk on a tile: qh, kh, W [C][dk]; G [C][dk] doubles
 * (prefix sums of g, column 0 only for TOKEN); beta [C]; A, P [C][C];
 * U [C][nj]. */
typedef struct {
    float *qh, *kh, *w, *beta, *a, *p, *u;
    double *gsum;
} chunk_ws;

static size_t chunked_bytes_scalar(int64_t chunk, int64_t dk, int64_t nj)
{
    const size_t C = la_size_of_dim(chunk), d = la_size_of_dim(dk), n = la_size_of_dim(nj);
    const size_t cd = la_size_mul(C, d);
    size_t b = la_size_floats(la_size_mul(3, cd));
    b = la_size_add(b, la_size_up64(la_size_mul(cd, sizeof(double))));
    b = la_size_add(b, la_size_floats(C));
    b = la_size_add(b, la_size_floats(la_size_mul(2, la_size_mul(C, C))));
    return la_size_add(b, la_size_floats(la_size_mul(C, n)));
}

static chunk_ws carve(void *ws, int64_t C, int64_t dk)
{
    chunk_ws w;
    unsigned char *p = ws;
    const size_t cd = (size_t)(C * dk);
    w.qh = (float *)p, w.kh = w.qh + cd, w.w = w.kh + cd;
    p += la_size_floats(3 * cd);
    w.gsum = (double *)p;
    p += la_size_up64(cd * sizeof(double));
    w.beta = (float *)p;
    p += la_size_floats((size_t)C);
    w.a = (float *)p, w.p = w.a + C * C;
    p += la_size_floats((size_t)(2 * C * C));
    w.u = (float *)p;
    return w;
}

/* e^(G_i - G_j) for channel c (TOKEN: column 0), i >= j. */
static float gamma_of(const la_head *h, const chunk_ws *w, int64_t i, int64_t j, int64_t c)
{
    if (h->gate == LA_GATE_NONE)
        return 1.0f;
    const int64_t col = h->gate == LA_GATE_CHANNEL ? c : 0;
    return decay_of(w->gsum[i * h->dk + col] - w->gsum[j * h->dk + col]);
}

/* e^(G_i) (from the chunk start) for channel c. */
static float growth_of(const la_head *h, const chunk_ws *w, int64_t i, int64_t c)
{
    if (h->gate == LA_GATE_NONE)
        return 1.0f;
    return decay_of(w->gsum[i * h->dk + (h->gate == LA_GATE_CHANNEL ? c : 0)]);
}

static void chunk_scalar(const la_head *h, int64_t t0, int64_t n, int64_t j0, int64_t nj,
                         const chunk_ws *w)
{
    const int64_t dk = h->dk, dv = h->dv, C = h->chunk;
    /* pack: features, beta, prefix sums of the clamped gate */
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        features(h, h->q + t * h->q_ts, h->scale, w->qh + i * dk);
        features(h, h->k + t * h->k_ts, 1.0f, w->kh + i * dk);
        w->beta[i] = h->beta[t * h->beta_ts];
        const int64_t ng = h->gate == LA_GATE_CHANNEL ? dk : h->gate == LA_GATE_TOKEN ? 1 : 0;
        for (int64_t c = 0; c < ng; c++) {
            const double g = clamp_gate(h->g[t * h->g_ts + c]);
            w->gsum[i * dk + c] = i ? w->gsum[(i - 1) * dk + c] + g : g;
        }
    }
    /* A (strictly lower) and P = tril((Qh Kh^T) o Gamma) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) {
            float kk = 0.0f, qk = 0.0f;
            for (int64_t c = 0; c < dk; c++) {
                const float gm = gamma_of(h, w, i, j, c);
                kk += w->kh[i * dk + c] * w->kh[j * dk + c] * gm;
                qk += w->qh[i * dk + c] * w->kh[j * dk + c] * gm;
            }
            w->a[i * C + j] = j < i ? w->beta[i] * kk : 0.0f;
            w->p[i * C + j] = qk;
        }
    /* forward substitution: W = (I + A)^-1 diag(beta) (Kh o e^G), U likewise of V */
    for (int64_t i = 0; i < n; i++) {
        float *wi = w->w + i * dk, *ui = w->u + i * nj;
        const float *v = h->v + (t0 + i) * h->v_ts + j0;
        for (int64_t c = 0; c < dk; c++)
            wi[c] = w->beta[i] * w->kh[i * dk + c] * growth_of(h, w, i, c);
        for (int64_t j = 0; j < nj; j++)
            ui[j] = w->beta[i] * v[j];
        for (int64_t l = 0; l < i; l++) {
            const float al = w->a[i * C + l];
            for (int64_t c = 0; c < dk; c++)
                wi[c] -= al * w->w[l * dk + c];
            for (int64_t j = 0; j < nj; j++)
                ui[j] -= al * w->u[l * nj + j];
        }
    }
    /* V' = U - W S (in place in U) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < dk; c++) {
            const float wc = w->w[i * dk + c];
            const float *srow = h->s + c * dv + j0;
            for (int64_t j = 0; j < nj; j++)
                w->u[i * nj + j] -= wc * srow[j];
        }
    /* O = (Qh o e^G) S + P V' */
    for (int64_t i = 0; i < n; i++) {
        float *o = h->o + (t0 + i) * h->o_ts + j0;
        memset(o, 0, (size_t)nj * sizeof(float));
        for (int64_t c = 0; c < dk; c++) {
            const float qc = w->qh[i * dk + c] * growth_of(h, w, i, c);
            const float *srow = h->s + c * dv + j0;
            for (int64_t j = 0; j < nj; j++)
                o[j] += qc * srow[j];
        }
        for (int64_t l = 0; l <= i; l++) {
            const float pl = w->p[i * C + l];
            for (int64_t j = 0; j < nj; j++)
                o[j] += pl * w->u[l * nj + j];
        }
    }
    /* S = e^(G_last) S + (Kh o e^(G_last - G))^T V' */
    for (int64_t c = 0; c < dk; c++) {
        float *srow = h->s + c * dv + j0;
        const float el = growth_of(h, w, n - 1, c);
        for (int64_t j = 0; j < nj; j++)
            srow[j] *= el;
        for (int64_t i = 0; i < n; i++) {
            const float kc = w->kh[i * dk + c] * gamma_of(h, w, n - 1, i, c);
            for (int64_t j = 0; j < nj; j++)
                srow[j] += kc * w->u[i * nj + j];
        }
    }
}

static void chunked_scalar(const la_head *h, int64_t j0, int64_t nj, void *ws)
{
    const chunk_ws w = carve(ws, h->chunk, h->dk);
    for (int64_t t0 = 0; t0 < h->T; t0 += h->chunk)
        chunk_scalar(h, t0, h->T - t0 < h->chunk ? h->T - t0 : h->chunk, j0, nj, &w);
}

const la_delta_ops la_delta_scalar = {
    .tile_columns = tile_columns_scalar,
    .recurrent_bytes = recurrent_bytes_scalar,
    .chunked_bytes = chunked_bytes_scalar,
    .recurrent = recurrent_scalar,
    .recurrent_vfirst = recurrent_vfirst_scalar,
    .chunked = chunked_scalar,
};
