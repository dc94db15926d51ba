/* The AVX2 + FMA table (this file alone is compiled with -mavx2 -mfma).
 *
 * Prefill is matrix-shaped: every product goes through one 4x16 register
 * tile (8 ymm accumulators, 4 broadcasts + 2 loads per step), the shape of
 * the BLIS/XNNPACK AVX2 gemm micro-kernels, over operands chunk_pack laid
 * out once per chunk with phi, scale and the decays already applied:
 *
 *   chunk_output, per 4 rows:  A = (Qh Kh^T) o D            (strip, on the stack)
 *                              O = Qd S + A V               (one tile, both products)
 *   chunk_state:               U = Kd^T V
 *
 * exp comes from SLEEF (Sleef_expf8_u10avx2) and is only ever taken of a
 * non-positive argument when it is a decay. Gate prefix sums are kept in
 * double and decay exponents formed as differences in double, so strong
 * decay (large |b|) does not cost the precision of the small differences.
 * Tails in dk and dv use masked loads/stores: nothing outside an array is
 * read or written. q/k/v/o rows may be unaligned.
 */
#include <immintrin.h>
#include <sleef.h>
#include <string.h>

#include "../kernels.h"

#define LA_INLINE static inline __attribute__((always_inline))

enum {
    MR = 4,   /* rows of the register tile */
    NR = 16,  /* columns of the register tile (two ymm) */
    SUB = 16, /* CHANNEL sub-block (== NR: one column tile is one sub-block) */
    PR = 64,  /* chunk panel: rows, and columns of a score strip, on the stack */
    QB = 256, /* channels of a stack-buffered q block */
    TB = 64,  /* tokens of a stack-buffered k block (noncausal) */
    CB = 32   /* channels whose phi/decay the step computes at once */
};

/* ---- small helpers ---------------------------------------------------- */

/* Lanes l < w (w clamped to 0..8). */
LA_INLINE __m256i lane_mask(int64_t w)
{
    const int n = w < 0 ? 0 : w > 8 ? 8 : (int)w;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

LA_INLINE __m256i lane_mask64(int64_t w)
{
    const int64_t n = w < 0 ? 0 : w > 4 ? 4 : w;
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}

/* w >= 8: a plain unaligned access; else only the first w lanes are touched. */
LA_INLINE __m256 load8(const float *p, int64_t w)
{
    return w >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(w));
}

LA_INLINE void store8(float *p, __m256 x, int64_t w)
{
    if (w >= 8)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, lane_mask(w), x);
}

/* 8 doubles (w valid, the rest read as 0) minus 8 doubles, as floats. */
LA_INLINE __m256 ddiff8(const double *x, const double *y, int64_t w)
{
    __m256d x0, x1, y0, y1;
    if (w >= 8) {
        x0 = _mm256_loadu_pd(x), x1 = _mm256_loadu_pd(x + 4);
        y0 = _mm256_loadu_pd(y), y1 = _mm256_loadu_pd(y + 4);
    } else {
        const __m256i m0 = lane_mask64(w), m1 = lane_mask64(w - 4);
        x0 = _mm256_maskload_pd(x, m0), x1 = _mm256_maskload_pd(x + 4, m1);
        y0 = _mm256_maskload_pd(y, m0), y1 = _mm256_maskload_pd(y + 4, m1);
    }
    return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(x1, y1)),
                           _mm256_cvtpd_ps(_mm256_sub_pd(x0, y0)));
}

/* e^x for a decay exponent. x <= 0 up to rounding; the clamp keeps a
 * masked-out or rounded lane from overflowing. */
LA_INLINE __m256 decay8(__m256 x)
{
    return Sleef_expf8_u10avx2(_mm256_min_ps(x, _mm256_setzero_ps()));
}

LA_INLINE float hsum8(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* phi, then lanes >= w zeroed (phi(0) = 1 for ELU1). NaN propagates: min and
 * max return their second operand, x, when it is NaN. */
LA_INLINE __m256 phi8(linattn_phi phi, __m256 x, int64_t w)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 y = x;
    if (phi == LINATTN_PHI_ELU1) {
        /* exp of min(0, x): large positive x must not overflow the unused branch. */
        const __m256 e = Sleef_expf8_u10avx2(_mm256_min_ps(zero, x));
        y = _mm256_blendv_ps(e, _mm256_add_ps(x, _mm256_set1_ps(1.0f)),
                             _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
    } else if (phi == LINATTN_PHI_RELU) {
        y = _mm256_max_ps(zero, x);
    }
    return w >= 8 ? y : _mm256_and_ps(y, _mm256_castsi256_ps(lane_mask(w)));
}

static float dot_avx2(const float *x, const float *y, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < n; c += 8)
        acc = _mm256_fmadd_ps(load8(x + c, n - c), load8(y + c, n - c), acc);
    return hsum8(acc);
}

/* ---- the 4x16 micro-kernel -------------------------------------------- */

/* acc[2r+h] += sum_{k<K} a[r][k*as] * b[k*bs + 8h + lane]. full: all 16
 * columns of b are in bounds, else m0/m1 mask its loads (a fully masked
 * load touches no memory). */
LA_INLINE void mk_4x16(__m256 acc[8], int64_t K, const float *const a[MR], int64_t as,
                       const float *b, int64_t bs, int full, __m256i m0, __m256i m1)
{
    /* Named locals, not acc[]: GCC otherwise keeps the array in memory and
     * stores it on every step. */
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
    __m256 c00 = acc[0], c01 = acc[1], c10 = acc[2], c11 = acc[3];
    __m256 c20 = acc[4], c21 = acc[5], c30 = acc[6], c31 = acc[7];
    for (int64_t k = 0; k < K; k++) {
        const __m256 b0 = full ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, m0);
        const __m256 b1 = full ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, m1);
        __m256 x = _mm256_broadcast_ss(a0);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a1);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a2);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a3);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
        a0 += as, a1 += as, a2 += as, a3 += as;
        b += bs;
    }
    acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11;
    acc[4] = c20, acc[5] = c21, acc[6] = c30, acc[7] = c31;
}

LA_INLINE void tile_zero(__m256 acc[8])
{
    for (int i = 0; i < 8; i++)
        acc[i] = _mm256_setzero_ps();
}

LA_INLINE void tile_load(__m256 acc[8], float *const row[MR], int64_t d0, int full, __m256i m0,
                         __m256i m1)
{
    for (int r = 0; r < MR; r++) {
        acc[2 * r] = full ? _mm256_loadu_ps(row[r] + d0) : _mm256_maskload_ps(row[r] + d0, m0);
        acc[2 * r + 1] =
            full ? _mm256_loadu_ps(row[r] + d0 + 8) : _mm256_maskload_ps(row[r] + d0 + 8, m1);
    }
}

/* Rows r < rows only: the others are clamped duplicates. */
LA_INLINE void tile_store(float *const row[MR], int rows, int64_t d0, const __m256 acc[8], int full,
                          __m256i m0, __m256i m1)
{
    for (int r = 0; r < rows; r++) {
        if (full) {
            _mm256_storeu_ps(row[r] + d0, acc[2 * r]);
            _mm256_storeu_ps(row[r] + d0 + 8, acc[2 * r + 1]);
        } else {
            _mm256_maskstore_ps(row[r] + d0, m0, acc[2 * r]);
            _mm256_maskstore_ps(row[r] + d0 + 8, m1, acc[2 * r + 1]);
        }
    }
}

/* ---- pack layout ------------------------------------------------------ */

/* For chunks of up to C rows (cp = C rounded up to NR), all 64-byte aligned:
 *   qh [C][dk]    scale * phi(q)
 *   qd [C][dk]    qh * e^(b_i)                    (TOKEN, CHANNEL) rows of Qd S
 *   qt [C][dk]    qh * e^(b_i - b_s), s = row before i's sub-block   (CHANNEL)
 *   kh [C][dk]    phi(k)                          (NONE: also Kd)
 *   kd [C][dk]    kh * e^(b_last - b_j)           (TOKEN, CHANNEL) for U = Kd^T V
 *   kt [dk][cp]   kh transposed, zero padded; CHANNEL: kh * e^(b_r - b_j),
 *                 r = last row of j's sub-block
 *   b  [cp][dk]   double prefix sums of g (TOKEN: [cp], padded with b_last)
 *   el [dk]       e^(b_last) per channel (NONE: 1) for state_combine */
typedef struct {
    int64_t cp;
    size_t qh, qd, qt, kh, kd, kt, b, el, bytes;
} la_layout;

static size_t up64(size_t x) { return (x + 63) & ~(size_t)63; }

static la_layout layout_of(int64_t chunk, int64_t dk)
{
    la_layout L;
    const size_t rows = (size_t)chunk * (size_t)dk * sizeof(float);
    size_t off = 0;
    L.cp = (chunk + NR - 1) / NR * NR;
    L.qh = off, off = up64(off + rows);
    L.qd = off, off = up64(off + rows);
    L.qt = off, off = up64(off + rows);
    L.kh = off, off = up64(off + rows);
    L.kd = off, off = up64(off + rows);
    L.kt = off, off = up64(off + (size_t)L.cp * (size_t)dk * sizeof(float));
    L.b = off, off = up64(off + (size_t)L.cp * (size_t)dk * sizeof(double));
    L.el = off, off = up64(off + (size_t)dk * sizeof(float));
    L.bytes = off;
    return L;
}

LA_INLINE float *pf(const void *pack, size_t off)
{
    return (float *)((char *)(uintptr_t)pack + off);
}
LA_INLINE double *pd(const void *pack, size_t off)
{
    return (double *)((char *)(uintptr_t)pack + off);
}

static size_t pack_bytes_avx2(int64_t chunk, int64_t dk, int64_t dv)
{
    (void)dv;
    return layout_of(chunk, dk).bytes;
}

static int64_t default_chunk_avx2(int64_t dk, int64_t dv, la_gate gate)
{
    (void)dk;
    (void)dv;
    /* Measured on Zen 4, dk = dv = 64..256: 32 beats 16 and 64 (the A V and
     * scores work grows with the chunk, tile overheads shrink). CHANNEL pays
     * pairwise exps on its diagonal sub-blocks, so one sub-block per chunk. */
    return gate == LA_GATE_CHANNEL ? SUB : 32;
}

/* ---- chunk_pack --------------------------------------------------------- */

/* Column i of the transposed kt: 8 channels from c, w of them valid. */
LA_INLINE void scatter_col(float *kt, int64_t cp, int64_t c, int64_t i, __m256 x, int64_t w)
{
    float t[8];
    _mm256_storeu_ps(t, x);
    for (int64_t l = 0; l < w && l < 8; l++)
        kt[(c + l) * cp + i] = t[l];
}

static void chunk_pack_avx2(const la_head *h, int64_t t0, int64_t n, void *pack)
{
    const int64_t dk = h->dk, last = n - 1;
    const la_layout L = layout_of(h->chunk, dk);
    const int64_t cp = L.cp;
    float *qh = pf(pack, L.qh), *qd = pf(pack, L.qd), *qt = pf(pack, L.qt);
    float *kh = pf(pack, L.kh), *kd = pf(pack, L.kd), *kt = pf(pack, L.kt);
    float *el = pf(pack, L.el);
    double *b = pd(pack, L.b);
    const __m256 scale = _mm256_set1_ps(h->scale);

    /* Prefix sums in double: b_i - b_j then has the precision of the g summed. */
    if (h->gate == LA_GATE_TOKEN) {
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++)
            b[i] = acc += (double)h->g[(t0 + i) * h->g_ts];
        for (int64_t i = n; i < cp; i++)
            b[i] = acc; /* padding: masked lanes read finite values */
    } else if (h->gate == LA_GATE_CHANNEL) {
        for (int64_t i = 0; i < n; i++) {
            const float *g = h->g + (t0 + i) * h->g_ts;
            for (int64_t c = 0; c < dk; c++)
                b[i * dk + c] = (i ? b[(i - 1) * dk + c] : 0.0) + (double)g[c];
        }
    }

    for (int64_t i = 0; i < n; i++) {
        const float *q = h->q + (t0 + i) * h->q_ts, *k = h->k + (t0 + i) * h->k_ts;
        __m256 eq = _mm256_set1_ps(1.0f), ek = eq;
        if (h->gate == LA_GATE_TOKEN) {
            eq = decay8(_mm256_set1_ps((float)b[i]));
            ek = decay8(_mm256_set1_ps((float)(b[last] - b[i])));
        }
        /* CHANNEL references: s = row before i's sub-block, r = its last row. */
        const int64_t s = i / SUB * SUB - 1;
        const int64_t r = s + SUB < last ? s + SUB : last;
        for (int64_t c = 0; c < dk; c += 8) {
            const int64_t w = dk - c;
            const __m256 qv = _mm256_mul_ps(scale, phi8(h->phi, load8(q + c, w), w));
            const __m256 kv = phi8(h->phi, load8(k + c, w), w);
            store8(qh + i * dk + c, qv, w);
            store8(kh + i * dk + c, kv, w);
            if (h->gate == LA_GATE_CHANNEL) {
                const double *bi = b + i * dk + c;
                static const double zero8[8] = {0};
                const __m256 qdv = _mm256_mul_ps(qv, decay8(ddiff8(bi, zero8, w)));
                store8(qd + i * dk + c, qdv, w);
                store8(qt + i * dk + c,
                       s < 0 ? qdv : _mm256_mul_ps(qv, decay8(ddiff8(bi, b + s * dk + c, w))), w);
                store8(kd + i * dk + c, _mm256_mul_ps(kv, decay8(ddiff8(b + last * dk + c, bi, w))),
                       w);
                scatter_col(kt, cp, c, i, _mm256_mul_ps(kv, decay8(ddiff8(b + r * dk + c, bi, w))),
                            w);
            } else {
                if (h->gate == LA_GATE_TOKEN) {
                    store8(qd + i * dk + c, _mm256_mul_ps(qv, eq), w);
                    store8(kd + i * dk + c, _mm256_mul_ps(kv, ek), w);
                }
                scatter_col(kt, cp, c, i, kv, w);
            }
        }
    }
    for (int64_t c = 0; c < dk; c++)
        for (int64_t i = n; i < cp; i++)
            kt[c * cp + i] = 0.0f;

    for (int64_t c = 0; c < dk; c += 8) {
        __m256 e = _mm256_set1_ps(1.0f);
        if (h->gate == LA_GATE_TOKEN)
            e = decay8(_mm256_set1_ps((float)b[last]));
        else if (h->gate == LA_GATE_CHANNEL) {
            static const double zero8[8] = {0};
            e = decay8(ddiff8(b + last * dk + c, zero8, dk - c));
        }
        store8(el + c, e, dk - c);
    }
}

/* ---- chunk_output -------------------------------------------------------- */

/* Scores of rows ri[0..3] against columns j0..j0+jb-1 (NONE, TOKEN):
 * A = (Qh Kh^T) o D with D_ij = e^(b_i - b_j) for j <= i, else 0.
 * Writes A[r][0..round16(jb)), adds the row sums to den[r]. */
static void scores_token(const la_head *h, const void *pack, const la_layout *L,
                         const int64_t ri[MR], int64_t j0, int64_t jb, float A[][PR], float *den)
{
    const int64_t dk = h->dk, cp = L->cp;
    const float *qh = pf(pack, L->qh), *kt = pf(pack, L->kt);
    const double *b = pd(pack, L->b);
    const float *qrow[MR] = {qh + ri[0] * dk, qh + ri[1] * dk, qh + ri[2] * dk, qh + ri[3] * dk};
    const __m256i none = _mm256_setzero_si256();
    __m256 rs[MR] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t jt = 0; jt < jb; jt += NR) {
        const int64_t j = j0 + jt;
        __m256 acc[8];
        tile_zero(acc);
        /* kt is zero padded to cp columns: full loads. */
        mk_4x16(acc, dk, qrow, 1, kt + j, cp, 1, none, none);
        for (int r = 0; r < MR; r++) {
            for (int hh = 0; hh < 2; hh++) {
                const int64_t jj = j + 8 * hh;
                __m256 x = acc[2 * r + hh];
                if (h->gate == LA_GATE_TOKEN) {
                    const __m256d bi = _mm256_set1_pd(b[ri[r]]);
                    const __m256 e = _mm256_set_m128(
                        _mm256_cvtpd_ps(_mm256_sub_pd(bi, _mm256_loadu_pd(b + jj + 4))),
                        _mm256_cvtpd_ps(_mm256_sub_pd(bi, _mm256_loadu_pd(b + jj))));
                    x = _mm256_mul_ps(x, decay8(e));
                }
                /* causal: keep j <= i (an and, so an inf from j > i is dropped too) */
                x = _mm256_and_ps(x, _mm256_castsi256_ps(lane_mask(ri[r] - jj + 1)));
                _mm256_store_ps(A[r] + jt + 8 * hh, x);
                rs[r] = _mm256_add_ps(rs[r], x);
            }
        }
    }
    for (int r = 0; r < MR; r++)
        den[r] += hsum8(rs[r]);
}

/* sum_c qi_c kj_c e^(bi_c - bj_c): the pairwise form, diagonal sub-blocks only. */
static float pair_channel(const float *qi, const float *kj, const double *bi, const double *bj,
                          int64_t dk)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < dk; c += 8) {
        const int64_t w = dk - c;
        const __m256 qk = _mm256_mul_ps(load8(qi + c, w), load8(kj + c, w));
        acc = _mm256_fmadd_ps(qk, decay8(ddiff8(bi + c, bj + c, w)), acc);
    }
    return hsum8(acc);
}

/* CHANNEL scores, sub-blocks of SUB rows. Rows ri lie in sub-block I. For a
 * column sub-block J < I the reference row r = last row of J splits
 *   A_ij = sum_c (qh_ic e^(b_ic - b_rc)) (kh_jc e^(b_rc - b_jc)),
 * both factors <= 1; the first is qt_i * e^(b_s - b_r) (s = row before I),
 * the second is kt. Diagonal sub-blocks use pairwise exps. */
static void scores_channel(const la_head *h, const void *pack, const la_layout *L,
                           const int64_t ri[MR], int64_t j0, int64_t jb, float A[][PR], float *den)
{
    const int64_t dk = h->dk, cp = L->cp, I = ri[0] / SUB;
    const float *qh = pf(pack, L->qh), *qt = pf(pack, L->qt);
    const float *kh = pf(pack, L->kh), *kt = pf(pack, L->kt);
    const double *b = pd(pack, L->b);
    const __m256i none = _mm256_setzero_si256();
    float qb[MR][QB] __attribute__((aligned(32)));
    const float *qbrow[MR] = {qb[0], qb[1], qb[2], qb[3]};
    for (int64_t jt = 0; jt < jb; jt += NR) {
        const int64_t j = j0 + jt, J = j / SUB;
        if (J < I) {
            const double *bs = b + (I * SUB - 1) * dk, *br = b + (J * SUB + SUB - 1) * dk;
            __m256 acc[8];
            tile_zero(acc);
            for (int64_t c0 = 0; c0 < dk; c0 += QB) {
                const int64_t cw = dk - c0 < QB ? dk - c0 : QB;
                for (int64_t c = 0; c < cw; c += 8) {
                    const int64_t w = cw - c;
                    const __m256 p = J == I - 1 ? _mm256_set1_ps(1.0f)
                                                : decay8(ddiff8(bs + c0 + c, br + c0 + c, w));
                    for (int r = 0; r < MR; r++)
                        _mm256_store_ps(qb[r] + c,
                                        _mm256_mul_ps(load8(qt + ri[r] * dk + c0 + c, w), p));
                }
                mk_4x16(acc, cw, qbrow, 1, kt + c0 * cp + j, cp, 1, none, none);
            }
            for (int r = 0; r < MR; r++) {
                _mm256_store_ps(A[r] + jt, acc[2 * r]);
                _mm256_store_ps(A[r] + jt + 8, acc[2 * r + 1]);
                den[r] += hsum8(_mm256_add_ps(acc[2 * r], acc[2 * r + 1]));
            }
        } else {
            for (int r = 0; r < MR; r++) {
                const int64_t i = ri[r];
                for (int64_t l = 0; l < NR; l++) {
                    const int64_t jj = j + l;
                    const float a = jj <= i ? pair_channel(qh + i * dk, kh + jj * dk, b + i * dk,
                                                           b + jj * dk, dk)
                                            : 0.0f;
                    A[r][jt + l] = a;
                    den[r] += a;
                }
            }
        }
    }
}

/* One 4x16 tile of O: Qd S (first strip only) + A V, then 1/den on the
 * last strip (tri: the strip that holds the diagonal). */
LA_INLINE void out_tile(const la_head *h, const float *s, int64_t t0, int64_t j0, int64_t jb,
                        int64_t d0, int rows, const float *const qrow[MR],
                        const float *const arow[MR], float *const orow[MR], const float *inv,
                        int tri, int full, __m256i m0, __m256i m1)
{
    __m256 acc[8];
    if (j0 == 0) {
        tile_zero(acc);
        mk_4x16(acc, h->dk, qrow, 1, s + d0, h->dv, full, m0, m1);
    } else {
        tile_load(acc, orow, d0, full, m0, m1); /* partial sum of earlier strips */
    }
    /* The last strip ends with the rows' own MR x MR diagonal block: row r
     * takes column i0+m only for m <= r. A masked-out score is 0, but 0 * v
     * is NaN for a NaN in a later v row, so those FMAs are skipped (blended
     * away), not multiplied by zero: nothing leaks backwards in time. */
    const int64_t jfull = tri ? jb - rows : jb;
    const float *v = h->v + (t0 + j0) * h->v_ts + d0;
    mk_4x16(acc, jfull, arow, 1, v, h->v_ts, full, m0, m1);
    for (int m = 0; tri && m < rows; m++) {
        const float *vm = v + (jfull + m) * h->v_ts;
        const __m256 b0 = full ? _mm256_loadu_ps(vm) : _mm256_maskload_ps(vm, m0);
        const __m256 b1 = full ? _mm256_loadu_ps(vm + 8) : _mm256_maskload_ps(vm + 8, m1);
        for (int r = 0; r < MR; r++) {
            const __m256 keep = _mm256_castsi256_ps(_mm256_set1_epi32(-(r >= m)));
            const __m256 x = _mm256_broadcast_ss(arow[r] + jfull + m);
            acc[2 * r] = _mm256_blendv_ps(acc[2 * r], _mm256_fmadd_ps(x, b0, acc[2 * r]), keep);
            acc[2 * r + 1] =
                _mm256_blendv_ps(acc[2 * r + 1], _mm256_fmadd_ps(x, b1, acc[2 * r + 1]), keep);
        }
    }
    if (inv) {
        for (int r = 0; r < MR; r++) {
            const __m256 x = _mm256_set1_ps(inv[r]);
            acc[2 * r] = _mm256_mul_ps(acc[2 * r], x);
            acc[2 * r + 1] = _mm256_mul_ps(acc[2 * r + 1], x);
        }
    }
    tile_store(orow, rows, d0, acc, full, m0, m1);
}

static void chunk_output_avx2(const la_head *h, const void *pack, int64_t t0, int64_t n,
                              const float *s, const float *z)
{
    const int64_t dk = h->dk, dv = h->dv;
    const la_layout L = layout_of(h->chunk, dk);
    const float *qd = pf(pack, h->gate == LA_GATE_NONE ? L.qh : L.qd);
    /* +MR rows: a ragged last row block writes its clamped repeats here. */
    float A[PR + MR][PR] __attribute__((aligned(32)));
    float den[PR + MR], inv[PR + MR];
    const __m256i all = _mm256_set1_epi32(-1);

    /* Panels of PR rows; within one, strips of PR score columns, the last
     * (j0 == p0) holding the diagonal. Chunks up to PR rows are one panel and
     * one strip; longer ones keep partial sums in their own o rows. */
    for (int64_t p0 = 0; p0 < n; p0 += PR) {
        const int64_t pn = n - p0 < PR ? n - p0 : PR;
        for (int64_t i = 0; i < PR + MR; i++)
            den[i] = z && i < pn ? dot_avx2(qd + (p0 + i) * dk, z, dk) : 0.0f;
        for (int64_t j0 = 0; j0 <= p0; j0 += PR) {
            const int tri = j0 == p0;
            for (int64_t i0 = p0; i0 < p0 + pn; i0 += MR) {
                const int rows = p0 + pn - i0 < MR ? (int)(p0 + pn - i0) : MR;
                int64_t ri[MR];
                for (int r = 0; r < MR; r++)
                    ri[r] = i0 + (r < rows ? r : rows - 1);
                const int64_t jb = tri ? i0 + rows - j0 : PR;
                if (h->gate == LA_GATE_CHANNEL)
                    scores_channel(h, pack, &L, ri, j0, jb, A + (i0 - p0), den + (i0 - p0));
                else
                    scores_token(h, pack, &L, ri, j0, jb, A + (i0 - p0), den + (i0 - p0));
            }
            if (tri && z)
                for (int64_t i = 0; i < PR + MR; i++)
                    inv[i] = 1.0f / (den[i] + h->eps);
            /* Column tiles outer, row blocks inner: the dk x 16 panel of S
             * and the strip's PR x 16 panel of V stay in L1 across the panel. */
            for (int64_t d0 = 0; d0 < dv; d0 += NR) {
                const int full = d0 + NR <= dv;
                const __m256i m0 = full ? all : lane_mask(dv - d0);
                const __m256i m1 = full ? all : lane_mask(dv - d0 - 8);
                for (int64_t i0 = p0; i0 < p0 + pn; i0 += MR) {
                    const int rows = p0 + pn - i0 < MR ? (int)(p0 + pn - i0) : MR;
                    const float *qrow[MR], *arow[MR];
                    float *orow[MR];
                    for (int r = 0; r < MR; r++) {
                        const int64_t i = i0 + (r < rows ? r : rows - 1);
                        qrow[r] = qd + i * dk;
                        arow[r] = A[i0 - p0 + r];
                        orow[r] = h->o + (t0 + i) * h->o_ts;
                    }
                    const int64_t jb = tri ? i0 + rows - j0 : PR;
                    const float *scl = tri && z ? inv + (i0 - p0) : NULL;
                    if (full)
                        out_tile(h, s, t0, j0, jb, d0, rows, qrow, arow, orow, scl, tri, 1, all,
                                 all);
                    else
                        out_tile(h, s, t0, j0, jb, d0, rows, qrow, arow, orow, scl, tri, 0, m0, m1);
                }
            }
        }
    }
}

/* ---- chunk_state, state_combine ------------------------------------------ */

static void chunk_state_avx2(const la_head *h, const void *pack, int64_t t0, int64_t n, float *u,
                             float *uz)
{
    const int64_t dk = h->dk, dv = h->dv;
    const la_layout L = layout_of(h->chunk, dk);
    const float *kd = pf(pack, h->gate == LA_GATE_NONE ? L.kh : L.kd);
    const float *v = h->v + t0 * h->v_ts;
    const __m256i all = _mm256_set1_epi32(-1);

    /* U = Kd^T V: tile rows are channels, so the 4 broadcasts of a step are
     * adjacent floats of one kd row. Column tiles outer: the n x 16 panel of
     * V stays in L1 while kd streams. */
    for (int64_t d0 = 0; d0 < dv; d0 += NR) {
        const int full = d0 + NR <= dv;
        const __m256i m0 = full ? all : lane_mask(dv - d0);
        const __m256i m1 = full ? all : lane_mask(dv - d0 - 8);
        for (int64_t c0 = 0; c0 < dk; c0 += MR) {
            const int rows = dk - c0 < MR ? (int)(dk - c0) : MR;
            const float *a[MR];
            float *urow[MR];
            for (int r = 0; r < MR; r++) {
                const int64_t c = c0 + (r < rows ? r : rows - 1);
                a[r] = kd + c;
                urow[r] = u + c * dv;
            }
            __m256 acc[8];
            tile_zero(acc);
            if (full) {
                mk_4x16(acc, n, a, dk, v + d0, h->v_ts, 1, all, all);
                tile_store(urow, rows, d0, acc, 1, all, all);
            } else {
                mk_4x16(acc, n, a, dk, v + d0, h->v_ts, 0, m0, m1);
                tile_store(urow, rows, d0, acc, 0, m0, m1);
            }
        }
    }
    if (h->z) {
        for (int64_t c = 0; c < dk; c += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int64_t j = 0; j < n; j++)
                acc = _mm256_add_ps(acc, load8(kd + j * dk + c, dk - c));
            store8(uz + c, acc, dk - c);
        }
    }
}

static void state_combine_avx2(const la_head *h, const void *pack, int64_t n, float *s, float *z,
                               const float *u, const float *uz)
{
    const int64_t dk = h->dk, dv = h->dv;
    const float *el = pf(pack, layout_of(h->chunk, dk).el);
    (void)n;
    /* s = e^(b_last) s + u with one rounding. */
    for (int64_t c = 0; c < dk; c++) {
        const __m256 a = _mm256_broadcast_ss(el + c);
        float *sr = s + c * dv;
        const float *ur = u + c * dv;
        for (int64_t d = 0; d < dv; d += 8)
            store8(sr + d, _mm256_fmadd_ps(a, load8(sr + d, dv - d), load8(ur + d, dv - d)),
                   dv - d);
    }
    if (z)
        for (int64_t c = 0; c < dk; c += 8)
            store8(
                z + c,
                _mm256_fmadd_ps(load8(el + c, dk - c), load8(z + c, dk - c), load8(uz + c, dk - c)),
                dk - c);
}

/* ---- recurrent step --------------------------------------------------- */

/* Columns d..d+8nv-1 (w valid in the last vector) against state rows
 * c0..c0+cw-1 (s points at row c0, column d): each row is decayed, updated
 * and read out once, o accumulating in registers. */
LA_INLINE void token_cols(int nv, int64_t w, float *s, int64_t dv, int64_t cw, const float *qb,
                          const float *kb, const float *ab, const float *v, float *o, int first,
                          const float *inv)
{
    __m256 acc[4], vv[4];
    for (int x = 0; x < nv; x++) {
        const int64_t ww = x == nv - 1 ? w : 8;
        vv[x] = load8(v + 8 * x, ww);
        acc[x] = first ? _mm256_setzero_ps() : load8(o + 8 * x, ww);
    }
    for (int64_t c = 0; c < cw; c++, s += dv) {
        const __m256 a = _mm256_broadcast_ss(ab + c), k = _mm256_broadcast_ss(kb + c);
        const __m256 q = _mm256_broadcast_ss(qb + c);
        for (int x = 0; x < nv; x++) {
            const int64_t ww = x == nv - 1 ? w : 8;
            const __m256 sv = _mm256_fmadd_ps(a, load8(s + 8 * x, ww), _mm256_mul_ps(k, vv[x]));
            store8(s + 8 * x, sv, ww);
            acc[x] = _mm256_fmadd_ps(q, sv, acc[x]);
        }
    }
    for (int x = 0; x < nv; x++) {
        const int64_t ww = x == nv - 1 ? w : 8;
        store8(o + 8 * x, inv ? _mm256_mul_ps(acc[x], _mm256_set1_ps(*inv)) : acc[x], ww);
    }
}

static void token_avx2(const la_head *h, const float *q, const float *k, const float *v,
                       const float *g, float *o)
{
    const int64_t dk = h->dk, dv = h->dv;
    float qb[CB] __attribute__((aligned(32))), kb[CB] __attribute__((aligned(32)));
    float ab[CB] __attribute__((aligned(32)));
    const __m256 scale = _mm256_set1_ps(h->scale);
    const __m256 atok =
        h->gate == LA_GATE_TOKEN ? decay8(_mm256_set1_ps(g[0])) : _mm256_set1_ps(1.0f);
    __m256 den = _mm256_setzero_ps();
    float inv = 0.0f;
    for (int64_t c0 = 0; c0 < dk; c0 += CB) {
        const int64_t cw = dk - c0 < CB ? dk - c0 : CB;
        for (int64_t l = 0; l < cw; l += 8) {
            const int64_t w = cw - l, c = c0 + l;
            const __m256 qv = _mm256_mul_ps(scale, phi8(h->phi, load8(q + c, w), w));
            const __m256 kv = phi8(h->phi, load8(k + c, w), w);
            const __m256 av = h->gate == LA_GATE_CHANNEL ? decay8(load8(g + c, w)) : atok;
            _mm256_store_ps(qb + l, qv);
            _mm256_store_ps(kb + l, kv);
            _mm256_store_ps(ab + l, av);
            if (h->z) {
                const __m256 zv = _mm256_fmadd_ps(av, load8(h->z + c, w), kv);
                store8(h->z + c, zv, w);
                den = _mm256_fmadd_ps(qv, zv, den);
            }
        }
        /* den is complete once the last block's z is updated: fold 1/den
         * into that block's stores. */
        const int lastb = c0 + cw == dk;
        if (lastb && h->z)
            inv = 1.0f / (hsum8(den) + h->eps);
        const float *scl = lastb && h->z ? &inv : NULL;
        float *srow = h->s + c0 * dv;
        int64_t d = 0;
        for (; d + 32 <= dv; d += 32)
            token_cols(4, 8, srow + d, dv, cw, qb, kb, ab, v + d, o + d, c0 == 0, scl);
        for (; d < dv; d += 8)
            token_cols(1, dv - d, srow + d, dv, cw, qb, kb, ab, v + d, o + d, c0 == 0, scl);
    }
}

static void forward_recurrent_avx2(const la_head *h)
{
    for (int64_t t = 0; t < h->T; t++)
        token_avx2(h, h->q + t * h->q_ts, h->k + t * h->k_ts, h->v + t * h->v_ts,
                   h->gate == LA_GATE_NONE ? NULL : h->g + t * h->g_ts, h->o + t * h->o_ts);
}

static void step_avx2(const la_head *h) { token_avx2(h, h->q, h->k, h->v, h->g, h->o); }

/* ---- non-causal -------------------------------------------------------- */

static void forward_noncausal_avx2(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv, T = h->T;
    const __m256i all = _mm256_set1_epi32(-1);
    float *s = h->s, *z = h->z;

    /* S += Kh^T V in blocks of 8 channels x TB tokens, phi(k) buffered. */
    float kb[TB][8] __attribute__((aligned(32)));
    for (int64_t c0 = 0; c0 < dk; c0 += 8) {
        const int64_t cw = dk - c0 < 8 ? dk - c0 : 8;
        __m256 zacc = _mm256_setzero_ps();
        for (int64_t t0 = 0; t0 < T; t0 += TB) {
            const int64_t tb = T - t0 < TB ? T - t0 : TB;
            for (int64_t j = 0; j < tb; j++) {
                const __m256 kv = phi8(h->phi, load8(h->k + (t0 + j) * h->k_ts + c0, cw), cw);
                _mm256_store_ps(kb[j], kv);
                zacc = _mm256_add_ps(zacc, kv);
            }
            for (int64_t half = 0; half < cw; half += MR) {
                const int rows = cw - half < MR ? (int)(cw - half) : MR;
                const float *a[MR];
                float *srow[MR];
                for (int r = 0; r < MR; r++) {
                    const int64_t c = half + (r < rows ? r : rows - 1);
                    a[r] = &kb[0][c];
                    srow[r] = s + (c0 + c) * dv;
                }
                const float *v = h->v + t0 * h->v_ts;
                __m256 acc[8];
                int64_t d0 = 0;
                for (; d0 + NR <= dv; d0 += NR) {
                    tile_load(acc, srow, d0, 1, all, all);
                    mk_4x16(acc, tb, a, 8, v + d0, h->v_ts, 1, all, all);
                    tile_store(srow, rows, d0, acc, 1, all, all);
                }
                if (d0 < dv) {
                    const __m256i m0 = lane_mask(dv - d0), m1 = lane_mask(dv - d0 - 8);
                    tile_load(acc, srow, d0, 0, m0, m1);
                    mk_4x16(acc, tb, a, 8, v + d0, h->v_ts, 0, m0, m1);
                    tile_store(srow, rows, d0, acc, 0, m0, m1);
                }
            }
        }
        if (z)
            store8(z + c0, _mm256_add_ps(load8(z + c0, cw), zacc), cw);
    }

    /* O = Qh S / (Qh z + eps), 4 query rows at a time, phi(q) buffered per
     * QB channels (one block for dk <= QB, so o stays in registers). */
    float qb[MR][QB] __attribute__((aligned(32)));
    const float *qrow[MR] = {qb[0], qb[1], qb[2], qb[3]};
    const __m256 scale = _mm256_set1_ps(h->scale);
    for (int64_t t0 = 0; t0 < T; t0 += MR) {
        const int rows = T - t0 < MR ? (int)(T - t0) : MR;
        float *orow[MR];
        __m256 den[MR];
        float inv[MR];
        for (int r = 0; r < MR; r++) {
            orow[r] = h->o + (t0 + (r < rows ? r : rows - 1)) * h->o_ts;
            den[r] = _mm256_setzero_ps();
        }
        for (int64_t c0 = 0; c0 < dk; c0 += QB) {
            const int64_t cw = dk - c0 < QB ? dk - c0 : QB;
            for (int r = 0; r < MR; r++) {
                const float *q = h->q + (t0 + (r < rows ? r : rows - 1)) * h->q_ts + c0;
                for (int64_t c = 0; c < cw; c += 8) {
                    const __m256 qv =
                        _mm256_mul_ps(scale, phi8(h->phi, load8(q + c, cw - c), cw - c));
                    _mm256_store_ps(qb[r] + c, qv);
                    if (z)
                        den[r] = _mm256_fmadd_ps(qv, load8(z + c0 + c, cw - c), den[r]);
                }
            }
            const int lastb = c0 + cw == dk;
            const float *scl = NULL;
            if (lastb && z) {
                for (int r = 0; r < MR; r++)
                    inv[r] = 1.0f / (hsum8(den[r]) + h->eps);
                scl = inv;
            }
            __m256 acc[8];
            for (int64_t d0 = 0; d0 < dv; d0 += NR) {
                const int full = d0 + NR <= dv;
                const __m256i m0 = full ? all : lane_mask(dv - d0);
                const __m256i m1 = full ? all : lane_mask(dv - d0 - 8);
                if (c0 == 0)
                    tile_zero(acc);
                else
                    tile_load(acc, orow, d0, full, m0, m1);
                if (full)
                    mk_4x16(acc, cw, qrow, 1, s + c0 * dv + d0, dv, 1, all, all);
                else
                    mk_4x16(acc, cw, qrow, 1, s + c0 * dv + d0, dv, 0, m0, m1);
                if (scl)
                    for (int r = 0; r < MR; r++) {
                        acc[2 * r] = _mm256_mul_ps(acc[2 * r], _mm256_set1_ps(scl[r]));
                        acc[2 * r + 1] = _mm256_mul_ps(acc[2 * r + 1], _mm256_set1_ps(scl[r]));
                    }
                tile_store(orow, rows, d0, acc, full, m0, m1);
            }
        }
    }
}

const la_kernels la_kernels_avx2 = {
    .name = "avx2",
    .isa = LINATTN_ISA_AVX2,
    .default_chunk = default_chunk_avx2,
    .pack_bytes = pack_bytes_avx2,
    .chunk_pack = chunk_pack_avx2,
    .chunk_output = chunk_output_avx2,
    .chunk_state = chunk_state_avx2,
    .state_combine = state_combine_avx2,
    .forward_recurrent = forward_recurrent_avx2,
    .forward_noncausal = forward_noncausal_avx2,
    .step = step_avx2,
};
