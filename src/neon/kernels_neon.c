/* The NEON table: aarch64, where Advanced SIMD is baseline, so no -m flags.
 * exp comes from SLEEF (Sleef_exp2f4_u10advsimd of x log2 e, exp4); every
 * product is a vector FMA. All GEMM-shaped loops share one 4 x 16 register
 * tile (tile_4x16); the chunked path packs phi, scale, decays and the
 * masked score matrix once per chunk in chunk_pack so the other kernels
 * are plain tile loops.
 * Tails of dk and dv go through partial loads and stores (ldn, stn) and
 * never touch memory past the caller's arrays. */
#include <arm_neon.h>
#include <math.h>
#include <sleef.h>
#include <stdint.h>
#include <string.h>

#include "../table.h"
#include "simd128.h"
#include "../state_rows.h"


static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* ---- the register tile ------------------------------------------------- */

/* acc[r][v] += a[k*lda + r] * b[k*ldb + 4v .. 4v+3] for k < K: a is a packed
 * panel whose four rows are the lanes of one vector, b has rows ldb floats
 * apart of which the first w <= 16 are read. 16 accumulators, 4 b vectors and
 * one a vector fit the 32 NEON registers; with w = 16 constant the loops
 * unroll and acc stays in registers. */
INLINE void tile_4x16(float32x4_t acc[4][4], const float *a, int64_t lda, const float *b,
                      int64_t ldb, int64_t K, int64_t w)
{
    const int nv = (int)((w + 3) / 4);
    for (int64_t k = 0; k < K; k++) {
        const float32x4_t av = vld1q_f32(a + k * lda);
        const float *bk = b + k * ldb;
        for (int v = 0; v < nv; v++) {
            const float32x4_t bv = ldn(bk + 4 * v, w - 4 * v);
            acc[0][v] = vfmaq_laneq_f32(acc[0][v], bv, av, 0);
            acc[1][v] = vfmaq_laneq_f32(acc[1][v], bv, av, 1);
            acc[2][v] = vfmaq_laneq_f32(acc[2][v], bv, av, 2);
            acc[3][v] = vfmaq_laneq_f32(acc[3][v], bv, av, 3);
        }
    }
}

/* The tile over a diagonal block of a causal product: step jr < K <= 4 only
 * reaches rows r >= jr, so a NaN or Inf in a later token's b row cannot leak
 * into earlier rows through a zero weight (0 * NaN is NaN). */
INLINE void tile_4x16_lower(float32x4_t acc[4][4], const float *a, int64_t lda, const float *b,
                            int64_t ldb, int64_t K, int64_t w)
{
    const int nv = (int)((w + 3) / 4);
    for (int64_t jr = 0; jr < K; jr++) {
        const float32x4_t av = vld1q_f32(a + jr * lda);
        const float *bk = b + jr * ldb;
        for (int v = 0; v < nv; v++) {
            const float32x4_t bv = ldn(bk + 4 * v, w - 4 * v);
            if (jr <= 0)
                acc[0][v] = vfmaq_laneq_f32(acc[0][v], bv, av, 0);
            if (jr <= 1)
                acc[1][v] = vfmaq_laneq_f32(acc[1][v], bv, av, 1);
            if (jr <= 2)
                acc[2][v] = vfmaq_laneq_f32(acc[2][v], bv, av, 2);
            acc[3][v] = vfmaq_laneq_f32(acc[3][v], bv, av, 3);
        }
    }
}

/* Rows r < rows of the tile from / to c + r*ldc, first w columns; rows past
 * `rows` load as 0. */
INLINE void tile_load(float32x4_t acc[4][4], const float *c, int64_t ldc, int64_t rows,
                      int64_t w)
{
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 4; v++)
            acc[r][v] = r < rows ? ldn(c + r * ldc + 4 * v, w - 4 * v) : vdupq_n_f32(0.0f);
}
INLINE void tile_store(float32x4_t acc[4][4], float *c, int64_t ldc, int64_t rows, int64_t w)
{
    for (int r = 0; r < 4 && r < rows; r++)
        for (int v = 0; v < (int)((w + 3) / 4); v++)
            stn(c + r * ldc + 4 * v, acc[r][v], w - 4 * v);
}
INLINE void tile_zero(float32x4_t acc[4][4])
{
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 4; v++)
            acc[r][v] = vdupq_n_f32(0.0f);
}
/* Row r times lane r of s. */
INLINE void tile_scale_rows(float32x4_t acc[4][4], float32x4_t s)
{
    for (int v = 0; v < 4; v++) {
        acc[0][v] = vmulq_laneq_f32(acc[0][v], s, 0);
        acc[1][v] = vmulq_laneq_f32(acc[1][v], s, 1);
        acc[2][v] = vmulq_laneq_f32(acc[2][v], s, 2);
        acc[3][v] = vmulq_laneq_f32(acc[3][v], s, 3);
    }
}

/* ---- pack -------------------------------------------------------------- */

/* Pack for chunks of up to C rows, cp = C rounded up to 8 (a query block of
 * the score tiles), dkp = dk rounded up to 4; padding rows and channels hold
 * zeros (bt: copies of the last row), so tiles may run over them:
 *   bt [dkp][cp] double  prefix sums b of g, transposed (TOKEN: row 0 only)
 *   qt [dkp][cp]  Qh transposed; after the scores, e^b o Qh (chunk_output)
 *   at [cp][cp]   A^T, A = (Qh Kh^T) o D masked to j <= i (chunk_output)
 *   kd [cp][dkp]  e^(b_last - b) o Kh (chunk_state)
 *   kt [dkp][cp]  Kh transposed (scores)
 *   kb [dkp][cp], qb [dkp][8]  CHANNEL scores: keys and queries rescaled to
 *                 the reference row of one query block
 *   al [dkp]      e^(b_last) per channel (state_combine) */
typedef struct {
    int64_t cp, dkp;
    double *bt;
    float *qt, *at, *kd, *kt, *kb, *qb, *al;
} pack_view;

static pack_view view_of(const la_head *h, const void *pack)
{
    pack_view p;
    p.cp = round_up(h->chunk, 8);
    p.dkp = round_up(h->dk, 4);
    /* chunk_pack owns the pack; the other kernels only read through p */
    p.bt = (double *)pack;
    p.qt = (float *)(p.bt + p.dkp * p.cp);
    p.at = p.qt + p.dkp * p.cp;
    p.kd = p.at + p.cp * p.cp;
    p.kt = p.kd + p.cp * p.dkp;
    p.kb = p.kt + p.dkp * p.cp;
    p.qb = p.kb + p.dkp * p.cp;
    p.al = p.qb + p.dkp * 8;
    return p;
}

static size_t pack_bytes_neon(int64_t chunk, int64_t dk, int64_t dv)
{
    (void)dv;
    const uint64_t cp = (uint64_t)round_up(chunk, 8), dkp = (uint64_t)round_up(dk, 4);
    if (cp > (1u << 24) || dkp > (1u << 24)) /* products below cannot overflow */
        return SIZE_MAX;
    const uint64_t floats = 4 * dkp * cp + cp * cp + 9 * dkp;
    return (size_t)(8 * dkp * cp + 4 * floats);
}

/* Not yet measured on hardware: the chunked form, chunks by the cost model
 * (the scores cost C/2 per token against dk*dv for the state terms; for
 * CHANNEL they also cost exps that grow with C). The delta family as on the
 * x86 tables. */
static const la_tuning tuning_neon[] = {
    {
        .uarch = LA_UARCH_OTHER,
        .additive_chunked_above_dk = {0, 0, 0},
        .additive_chunk = {{64, 64, 32}, {64, 64, 32}},
        LA_DELTA_TUNING_ZEN4,
        .delta_pack_from_T = LA_TUNE_NEVER,
        .delta_pair_from_T = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},
        .additive_pack_from_T = LA_TUNE_NEVER,
        .additive_quad_from_T = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},
    },
};

/* A^T into p->at: at[j][i] = sum_c qh_ic kh_jc e^(b_ic - b_jc) for j <= i,
 * 0 otherwise, in tiles of 4 keys x 8 queries. NONE/TOKEN: one product, then
 * the mask and e^(b_i - b_j). CHANNEL: keys of earlier blocks against the
 * query block [i0, i0+8) go through the last row before it, r = i0 - 1:
 * e^(b_ic - b_jc) = e^(b_ic - b_rc) e^(b_rc - b_jc), both exponents <= 0, so
 * they are one product of rescaled panels; the diagonal block is direct. */
static void chunk_scores(const la_head *h, const pack_view *p, int64_t n)
{
    const int64_t dk = h->dk, cp = p->cp;
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
        const int64_t jend = min64(i0 + 8, n);
        float32x4_t acc[4][4];
        if (h->gate != LA_GATE_CHANNEL) {
            for (int64_t j0 = 0; j0 < jend; j0 += 4) {
                tile_zero(acc);
                tile_4x16(acc, p->kt + j0, cp, p->qt + i0, cp, dk, 8);
                for (int r = 0; r < 4; r++)
                    for (int v = 0; v < 2; v++) {
                        const int64_t i = i0 + 4 * v, j = j0 + r;
                        float32x4_t x = acc[r][v];
                        if (h->gate == LA_GATE_TOKEN)
                            x = vmulq_f32(x, decay_vs(p->bt + i, p->bt[j]));
                        vst1q_f32(p->at + j * cp + i, lanes_from(x, j - i));
                    }
            }
            continue;
        }
        if (i0 > 0) {
            const int64_t r = i0 - 1;
            for (int64_t c = 0; c < dk; c++) {
                const double *bc = p->bt + c * cp;
                for (int v = 0; v < 2; v++)
                    vst1q_f32(p->qb + c * 8 + 4 * v,
                              vmulq_f32(vld1q_f32(p->qt + c * cp + i0 + 4 * v),
                                        decay_vs(bc + i0 + 4 * v, bc[r])));
                for (int64_t j = 0; j < i0; j += 4)
                    vst1q_f32(p->kb + c * cp + j,
                              vmulq_f32(vld1q_f32(p->kt + c * cp + j), decay_sv(bc[r], bc + j)));
            }
            for (int64_t j0 = 0; j0 < i0; j0 += 4) {
                tile_zero(acc);
                tile_4x16(acc, p->kb + j0, cp, p->qb, 8, dk, 8);
                tile_store(acc, p->at + j0 * cp + i0, cp, 4, 8);
            }
        }
        for (int64_t j = i0; j < jend; j++)
            for (int v = 0; v < 2; v++) {
                const int64_t i = i0 + 4 * v;
                float32x4_t x = vdupq_n_f32(0.0f);
                if (j <= i + 3)
                    for (int64_t c = 0; c < dk; c++) {
                        const float32x4_t qk = vmulq_n_f32(vld1q_f32(p->qt + c * cp + i),
                                                           p->kt[c * cp + j]);
                        x = vfmaq_f32(x, qk, decay_vs(p->bt + c * cp + i, p->bt[c * cp + j]));
                    }
                vst1q_f32(p->at + j * cp + i, lanes_from(x, j - i));
            }
    }
}

static void chunk_pack_neon(const la_head *h, int64_t t0, int64_t n, void *pack)
{
    const pack_view p = view_of(h, pack);
    const int64_t dk = h->dk, cp = p.cp, dkp = p.dkp;
    const int64_t brows = h->gate == LA_GATE_CHANNEL ? dk : 1;
    memset(p.qt, 0, (size_t)(dkp * cp) * sizeof(float));
    memset(p.kt, 0, (size_t)(dkp * cp) * sizeof(float));
    memset(p.kd, 0, (size_t)(cp * dkp) * sizeof(float));

    /* phi and scale, rows into kd and columns of qt, kt; prefix sums of g */
    for (int64_t i = 0; i < n; i++) {
        const float *q = h->q + (t0 + i) * h->q_ts, *k = h->k + (t0 + i) * h->k_ts;
        for (int64_t c = 0; c < dk; c += 4) {
            const int64_t m = dk - c;
            float qs[4], ks[4];
            vst1q_f32(qs, vmulq_n_f32(phi4(h->phi, ldn(q + c, m)), h->scale));
            vst1q_f32(ks, phi4(h->phi, ldn(k + c, m)));
            for (int64_t l = 0; l < 4 && l < m; l++) {
                p.qt[(c + l) * cp + i] = qs[l];
                p.kt[(c + l) * cp + i] = ks[l];
                p.kd[i * dkp + c + l] = ks[l];
            }
        }
        if (h->gate == LA_GATE_TOKEN) {
            const double g = fmaxf(h->g[(t0 + i) * h->g_ts], LA_G_RESET);
            p.bt[i] = i ? p.bt[i - 1] + g : g;
        } else if (h->gate == LA_GATE_CHANNEL) {
            const float *g = h->g + (t0 + i) * h->g_ts;
            for (int64_t c = 0; c < dk; c++)
                p.bt[c * cp + i] = i ? p.bt[c * cp + i - 1] + (double)fmaxf(g[c], LA_G_RESET)
                                     : (double)fmaxf(g[c], LA_G_RESET);
        }
    }
    if (h->gate != LA_GATE_NONE)
        for (int64_t c = 0; c < brows; c++)
            for (int64_t i = n; i < cp; i++)
                p.bt[c * cp + i] = p.bt[c * cp + n - 1];

    chunk_scores(h, &p, n);

    /* The decays, now that the scores are done: qt *= e^b, kd *= e^(b_last - b),
     * al = e^(b_last). */
    if (h->gate == LA_GATE_TOKEN) {
        const double blast = p.bt[n - 1];
        for (int64_t i = 0; i < n; i += 4) {
            const float32x4_t eq = decay_vs(p.bt + i, 0.0), ek = decay_sv(blast, p.bt + i);
            for (int64_t c = 0; c < dk; c++)
                vst1q_f32(p.qt + c * cp + i, vmulq_f32(vld1q_f32(p.qt + c * cp + i), eq));
            float e[4];
            vst1q_f32(e, ek);
            for (int64_t l = 0; l < 4 && i + l < n; l++)
                for (int64_t c = 0; c < dkp; c += 4) {
                    float *kr = p.kd + (i + l) * dkp + c;
                    vst1q_f32(kr, vmulq_n_f32(vld1q_f32(kr), e[l]));
                }
        }
    } else if (h->gate == LA_GATE_CHANNEL) {
        for (int64_t c = 0; c < dk; c++) {
            const double *bc = p.bt + c * cp, blast = bc[n - 1];
            for (int64_t i = 0; i < n; i += 4) {
                float *qc = p.qt + c * cp + i;
                vst1q_f32(qc, vmulq_f32(vld1q_f32(qc), decay_vs(bc + i, 0.0)));
                float e[4];
                vst1q_f32(e, decay_sv(blast, bc + i));
                for (int64_t l = 0; l < 4 && i + l < n; l++)
                    p.kd[(i + l) * dkp + c] *= e[l];
            }
        }
    }
    for (int64_t c = 0; c < dkp; c += 4) {
        float bl[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* b_last; padding channels 0 */
        for (int64_t l = 0; l < 4 && c + l < dk && h->gate != LA_GATE_NONE; l++)
            bl[l] = (float)p.bt[(h->gate == LA_GATE_CHANNEL ? c + l : 0) * cp + n - 1];
        vst1q_f32(p.al + c,
                  h->gate == LA_GATE_NONE ? vdupq_n_f32(1.0f) : exp_nonpos(vld1q_f32(bl)));
    }
}

/* ---- chunk kernels ----------------------------------------------------- */

/* Output rows i0..i0+rows-1, columns d..d+w-1: inter-chunk (e^b o Qh) S plus
 * intra-chunk A V, then the normaliser. */
INLINE void output_block(const la_head *h, const pack_view *p, int64_t t0, int64_t i0,
                         int64_t rows, int64_t keys, const float *s, float32x4_t inv, int64_t d,
                         int64_t w)
{
    float32x4_t acc[4][4];
    tile_zero(acc);
    tile_4x16(acc, p->qt + i0, p->cp, s + d, h->dv, h->dk, w);
    for (int64_t j0 = 0; j0 < i0; j0 += 4) /* earlier keys, in whole blocks of 4 */
        tile_4x16(acc, p->at + j0 * p->cp + i0, p->cp, h->v + (t0 + j0) * h->v_ts + d, h->v_ts,
                  4, w);
    tile_4x16_lower(acc, p->at + i0 * p->cp + i0, p->cp, h->v + (t0 + i0) * h->v_ts + d, h->v_ts,
                    keys - i0, w);
    tile_scale_rows(acc, inv); /* 1 when chunk_output was given no z */
    tile_store(acc, h->o + (t0 + i0) * h->o_ts + d, h->o_ts, rows, w);
}

static void chunk_output_neon(const la_head *h, const void *pack, int64_t t0, int64_t n,
                              const float *s, const float *z)
{
    const pack_view p = view_of(h, pack);
    const int64_t dk = h->dk, dv = h->dv, cp = p.cp;
    for (int64_t i0 = 0; i0 < n; i0 += 4) {
        const int64_t rows = min64(4, n - i0), keys = min64(i0 + 4, n);
        float32x4_t inv = vdupq_n_f32(1.0f);
        if (z) {
            float32x4_t den = vdupq_n_f32(0.0f);
            for (int64_t c = 0; c < dk; c++)
                den = vfmaq_n_f32(den, vld1q_f32(p.qt + c * cp + i0), z[c]);
            for (int64_t j = 0; j < keys; j++)
                den = vaddq_f32(den, vld1q_f32(p.at + j * cp + i0));
            inv = vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(den, vdupq_n_f32(h->eps)));
        }
        int64_t d = 0;
        for (; d + 16 <= dv; d += 16)
            output_block(h, &p, t0, i0, rows, keys, s, inv, d, 16);
        if (d < dv)
            output_block(h, &p, t0, i0, rows, keys, s, inv, d, dv - d);
    }
}

/* u rows c0..c0+rows-1, columns d..d+w-1: (e^(b_last - b) o Kh)^T V. */
INLINE void state_block(const la_head *h, const pack_view *p, int64_t t0, int64_t n,
                        int64_t c0, int64_t rows, float *u, int64_t d, int64_t w)
{
    float32x4_t acc[4][4];
    tile_zero(acc);
    tile_4x16(acc, p->kd + c0, p->dkp, h->v + t0 * h->v_ts + d, h->v_ts, n, w);
    tile_store(acc, u + c0 * h->dv + d, h->dv, rows, w);
}

static void chunk_state_neon(const la_head *h, const void *pack, int64_t t0, int64_t n, float *u,
                             float *uz)
{
    const pack_view p = view_of(h, pack);
    const int64_t dk = h->dk, dv = h->dv;
    for (int64_t c0 = 0; c0 < dk; c0 += 4) {
        const int64_t rows = min64(4, dk - c0);
        int64_t d = 0;
        for (; d + 16 <= dv; d += 16)
            state_block(h, &p, t0, n, c0, rows, u, d, 16);
        if (d < dv)
            state_block(h, &p, t0, n, c0, rows, u, d, dv - d);
        if (h->z) {
            float32x4_t sum = vdupq_n_f32(0.0f);
            for (int64_t j = 0; j < n; j++)
                sum = vaddq_f32(sum, vld1q_f32(p.kd + j * p.dkp + c0));
            stn(uz + c0, sum, rows);
        }
    }
}

static void state_combine_neon(const la_head *h, const void *pack, int64_t n, float *s, float *z,
                               const float *u, const float *uz)
{
    (void)n;
    const pack_view p = view_of(h, pack);
    const int64_t dk = h->dk, dv = h->dv;
    for (int64_t c = 0; c < dk; c++) {
        const float a = p.al[c];
        float *sc = s + c * dv;
        const float *uc = u + c * dv;
        int64_t d = 0;
        for (; d + 4 <= dv; d += 4) /* s = a s + u, one rounding */
            vst1q_f32(sc + d, vfmaq_n_f32(vld1q_f32(uc + d), vld1q_f32(sc + d), a));
        if (d < dv)
            stn(sc + d, vfmaq_n_f32(ldn(uc + d, dv - d), ldn(sc + d, dv - d), a), dv - d);
    }
    if (z)
        for (int64_t c = 0; c < dk; c += 4)
            stn(z + c, vfmaq_f32(ldn(uz + c, dk - c), ldn(z + c, dk - c), vld1q_f32(p.al + c)),
                dk - c);
}

/* ---- whole-head kernels ------------------------------------------------ */

/* Channels whose phi and decay one pass keeps on the stack; dk <= CB (every
 * head size in use) is a single pass over the state. */
enum { CB = 256 };

/* State rows c0..c0+nc-1, columns d..d+w-1 of one token: each element is
 * decayed and updated once, s = fma(a, s, kh v), and read out into registers
 * (a bfloat16 state, h->s_bf16: widened as read, rounded as written, read
 * out before the rounding). */
INLINE void token_block(const la_head *h, const float *qh, const float *kh, const float *a,
                        int64_t c0, int64_t nc, const float *v, float *o, int first,
                        float scale_o, int64_t d, int64_t w, const int BF16)
{
    void *const s = BF16 ? (void *)h->s_bf16 : (void *)h->s;
    const int nv = (int)((w + 3) / 4);
    float32x4_t vv[4], acc[4];
    for (int u = 0; u < 4; u++) {
        vv[u] = ldn(v + d + 4 * u, w - 4 * u);
        acc[u] = first ? vdupq_n_f32(0.0f) : ldn(o + d + 4 * u, w - 4 * u);
    }
    for (int64_t c = 0; c < nc; c++) {
        const int64_t r = (c0 + c) * (h->s_ld ? h->s_ld : h->dv) + d;
        for (int u = 0; u < nv; u++) {
            float32x4_t sv = vf_load_row(s, r + 4 * u, w - 4 * u, BF16);
            sv = vfmaq_n_f32(vmulq_n_f32(vv[u], kh[c]), sv, a[c]);
            vf_store_row(s, r + 4 * u, sv, w - 4 * u, BF16);
            acc[u] = vfmaq_n_f32(acc[u], sv, qh[c]);
        }
    }
    for (int u = 0; u < nv; u++)
        stn(o + d + 4 * u, vmulq_n_f32(acc[u], scale_o), w - 4 * u);
}

/* One token of the recurrence, no allocation: per block of CB channels,
 * phi, decay and z in one loop, then one pass over those state rows (BF16:
 * h->s_bf16, additive.h). */
INLINE void token_typed(const la_head *h, const float *q, const float *k, const float *v,
                        const float *g, float *o, const int BF16)
{
    const int64_t dk = h->dk, dv = h->dv;
    float qh[CB], kh[CB], a[CB];
    float den = 0.0f;
    const float32x4_t ag = h->gate == LA_GATE_TOKEN ? exp_nonpos(vdupq_n_f32(g[0]))
                                                    : vdupq_n_f32(1.0f);
    for (int64_t c0 = 0; c0 < dk; c0 += CB) {
        const int64_t nc = min64(CB, dk - c0);
        float32x4_t dacc = vdupq_n_f32(0.0f);
        for (int64_t c = 0; c < nc; c += 4) {
            const int64_t m = nc - c;
            const float32x4_t qv =
                lanes_below(vmulq_n_f32(phi4(h->phi, ldn(q + c0 + c, m)), h->scale), m);
            const float32x4_t kv = lanes_below(phi4(h->phi, ldn(k + c0 + c, m)), m);
            const float32x4_t av =
                h->gate == LA_GATE_CHANNEL ? exp_nonpos(ldn(g + c0 + c, m)) : ag;
            vst1q_f32(qh + c, qv);
            vst1q_f32(kh + c, kv);
            vst1q_f32(a + c, av);
            if (h->z && h->zc) { /* compensated: z + zc carries the exact sum */
                const float32x4_t zo = ldn(h->z + c0 + c, m);
                const float32x4_t y = vfmaq_f32(kv, ldn(h->zc + c0 + c, m), av);
                const float32x4_t zv = vfmaq_f32(y, zo, av);
                const float32x4_t cv = vsubq_f32(y, vfmsq_f32(zv, zo, av)); /* y - (zv - a z) */
                stn(h->z + c0 + c, zv, m);
                stn(h->zc + c0 + c, cv, m);
                dacc = vfmaq_f32(vfmaq_f32(dacc, qv, zv), qv, cv);
            } else if (h->z) {
                const float32x4_t zv = vfmaq_f32(kv, ldn(h->z + c0 + c, m), av);
                stn(h->z + c0 + c, zv, m);
                dacc = vfmaq_f32(dacc, qv, zv);
            }
        }
        den += vaddvq_f32(dacc);
        const int first = c0 == 0, last = c0 + CB >= dk;
        const float scale_o = h->z && last ? 1.0f / (den + h->eps) : 1.0f;
        int64_t d = 0;
        for (; d + 16 <= dv; d += 16)
            token_block(h, qh, kh, a, c0, nc, v, o, first, scale_o, d, 16, BF16);
        if (d < dv)
            token_block(h, qh, kh, a, c0, nc, v, o, first, scale_o, d, dv - d, BF16);
    }
}

static void token_neon(const la_head *h, const float *q, const float *k, const float *v,
                       const float *g, float *o)
{
    if (h->s_bf16)
        token_typed(h, q, k, v, g, o, 1);
    else
        token_typed(h, q, k, v, g, o, 0);
}


/* Non-causal, tokens in blocks of TB with their phi(k) on the stack:
 * S += Kh^T V through the tile, rows = channels; then O = Qh S by blocks of
 * 4 queries, rows = tokens. */
enum { TB = 16 };
/* The driver's blocks keep the sums of one call over the whole head. */
_Static_assert(LA_NONCAUSAL_BLOCK % TB == 0 && LA_NONCAUSAL_BLOCK % 4 == 0,
               "non-causal blocks of whole TB blocks and query groups");

INLINE void kv_block(const la_head *h, const float *kb, int64_t t0, int64_t nt, int64_t c,
                     int64_t rows, int64_t d, int64_t w)
{
    float32x4_t acc[4][4];
    float *sr = h->s + c * h->dv + d;
    tile_load(acc, sr, h->dv, rows, w);
    tile_4x16(acc, kb, CB, h->v + t0 * h->v_ts + d, h->v_ts, nt, w);
    tile_store(acc, sr, h->dv, rows, w);
}

INLINE void qs_block(const la_head *h, const float *qb, int64_t t0, int64_t rows, int64_t c0,
                     int64_t nc, int first, int last, float32x4_t inv, int64_t d, int64_t w)
{
    float32x4_t acc[4][4];
    float *o = h->o + t0 * h->o_ts + d;
    if (first)
        tile_zero(acc);
    else
        tile_load(acc, o, h->o_ts, rows, w);
    tile_4x16(acc, qb, 4, h->s + c0 * h->dv + d, h->dv, nc, w);
    if (last && h->z)
        tile_scale_rows(acc, inv);
    tile_store(acc, o, h->o_ts, rows, w);
}

static void noncausal_state_neon(const la_head *h)
{
    const int64_t T = h->T, dk = h->dk, dv = h->dv;
    float kb[TB * CB];
    for (int64_t t0 = 0; t0 < T; t0 += TB) {
        const int64_t nt = min64(TB, T - t0);
        for (int64_t c0 = 0; c0 < dk; c0 += CB) {
            const int64_t nc = min64(CB, dk - c0);
            for (int64_t t = 0; t < nt; t++) {
                const float *k = h->k + (t0 + t) * h->k_ts + c0;
                for (int64_t c = 0; c < nc; c += 4)
                    vst1q_f32(kb + t * CB + c,
                              lanes_below(phi4(h->phi, ldn(k + c, nc - c)), nc - c));
            }
            for (int64_t c = 0; c < nc; c += 4) {
                const int64_t rows = min64(4, nc - c);
                int64_t d = 0;
                for (; d + 16 <= dv; d += 16)
                    kv_block(h, kb + c, t0, nt, c0 + c, rows, d, 16);
                if (d < dv)
                    kv_block(h, kb + c, t0, nt, c0 + c, rows, d, dv - d);
                if (h->z) {
                    float32x4_t sum = ldn(h->z + c0 + c, rows);
                    for (int64_t t = 0; t < nt; t++)
                        sum = vaddq_f32(sum, vld1q_f32(kb + t * CB + c));
                    stn(h->z + c0 + c, sum, rows);
                }
            }
        }
    }
}

static void noncausal_output_neon(const la_head *h)
{
    const int64_t T = h->T, dk = h->dk, dv = h->dv;
    float qb[CB * 4];
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
        const int64_t rows = min64(4, T - t0);
        float32x4_t den = vdupq_n_f32(0.0f);
        for (int64_t c0 = 0; c0 < dk; c0 += CB) {
            const int64_t nc = min64(CB, dk - c0);
            memset(qb, 0, sizeof qb);
            for (int64_t r = 0; r < rows; r++) {
                const float *q = h->q + (t0 + r) * h->q_ts + c0;
                for (int64_t c = 0; c < nc; c += 4) {
                    float x[4];
                    vst1q_f32(x, vmulq_n_f32(phi4(h->phi, ldn(q + c, nc - c)), h->scale));
                    for (int64_t l = 0; l < 4 && c + l < nc; l++)
                        qb[(c + l) * 4 + r] = x[l];
                }
            }
            if (h->z)
                for (int64_t c = 0; c < nc; c++)
                    den = vfmaq_n_f32(den, vld1q_f32(qb + c * 4), h->z[c0 + c]);
            const int first = c0 == 0, last = c0 + CB >= dk;
            const float32x4_t inv =
                vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(den, vdupq_n_f32(h->eps)));
            int64_t d = 0;
            for (; d + 16 <= dv; d += 16)
                qs_block(h, qb, t0, rows, c0, nc, first, last, inv, d, 16);
            if (d < dv)
                qs_block(h, qb, t0, rows, c0, nc, first, last, inv, d, dv - d);
        }
    }
}

/* The value-tiled recurrent forward, written once for every ISA. */
#define LA_ADD_NV 4
#define LA_ADD_QUAD_NV 2 /* quads: 16 accumulators, 9 broadcasts */
#include "../additive_kernels.h"

static const la_additive_ops additive_neon = {
    .pack_bytes = pack_bytes_neon,
    .chunk_pack = chunk_pack_neon,
    .chunk_output = chunk_output_neon,
    .chunk_state = chunk_state_neon,
    .state_combine = state_combine_neon,
    .feature_bytes = additive_feature_bytes,
    .features = additive_features,
    .normaliser = additive_normaliser,
    .columns = additive_columns,
    .packed_bytes = additive_packed_bytes,
    .pack = additive_pack,
    .unpack = additive_unpack,
    .token = token_neon,
    .token_vfirst = additive_token_vfirst,
    .noncausal_state = noncausal_state_neon,
    .noncausal_output = noncausal_output_neon,
};

extern const la_delta_ops la_delta_neon;
extern const la_stage_ops la_stage_neon;

const la_table la_table_neon = {
    .name = "neon",
    .isa = LINATTN_ISA_NEON,
    .requires = LA_FEAT_ASIMD,
    .additive = &additive_neon,
    .delta = &la_delta_neon,
    .stage = &la_stage_neon,
    .tuning = tuning_neon,
    .ntuning = 1,
};
