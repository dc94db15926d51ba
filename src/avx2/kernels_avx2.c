/* The AVX2 + FMA table (this file alone is compiled with -mavx2 -mfma).
 *
 * Prefill is matrix-shaped: the products go through one 6x16 register tile
 * (12 ymm accumulators, 6 broadcasts + 2 loads per step: the BLIS Haswell
 * shape), over operands chunk_pack lays out once per chunk with phi, scale
 * and the decays already applied:
 *
 *   chunk_output, per 6 rows:  A = (Qh Kh^T) o D   lower-triangular tiles only
 *                              O = Qd S + A V      one tile, both products
 *   chunk_state:               U = Kd^T V
 *
 * CHANNEL scores are dot products along decay chains instead (see
 * scores_channel). The noncausal kernel keeps the older 4x16 tile.
 *
 * exp comes from SLEEF (Sleef_exp2f8_u10avx2 of x log2 e, exp8) and is only
 * ever taken of a non-positive argument when it is a decay. TOKEN prefix
 * sums are kept in double and decay exponents formed as differences in
 * double; CHANNEL decays are running products of e^(g) <= 1. Either way
 * strong decay stays finite and accurate. Tails in dk and dv use masked
 * loads/stores: nothing outside an array is read or written. q/k/v/o rows
 * may be unaligned.
 */
#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <string.h>

#include "../ftz_x86.h"
#include "../table.h"
#include "../tile_dispatch.h"
#include "simd256.h"
#include "../state_rows.h"


enum {
    MR4 = 4,  /* rows of the noncausal register tile */
    MR = 6,   /* rows of the chunked register tile: 12 accumulators hide the
                 4-cycle FMA latency on 2 pipes with slack (8 would be exact) */
    NR = 16,  /* columns of the register tile (two ymm) */
    PR = 64,  /* chunk panel: rows, and columns of a score strip, on the stack */
    QB = 256, /* channels of a stack-buffered q block */
    TB = 64,  /* tokens of a stack-buffered k block (noncausal_state) */
    CB = 32,  /* channels whose phi/decay the step computes at once */
    /* whole pairs of vectors past a bfloat16 row's register columns that
     * the step holds in pair order (their v copied into a stack buffer):
     * rows up to 64 + 512 columns; the rest in natural order */
    TAIL_PAIRS = 32
};

static float dot_avx2(const float *x, const float *y, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < n; c += 8)
        acc = _mm256_fmadd_ps(load8(x + c, n - c), load8(y + c, n - c), acc);
    return hsum8(acc);
}

/* ---- the ROWSx16 micro-kernels ------------------------------------------ */

/* One definition per tile shape, instantiated for 4 rows (noncausal, 4-row
 * remainders) and 6 rows (chunked: 12 accumulators + 2 B vectors + 1
 * broadcast = 15 ymm, the BLIS Haswell shape; per step 2 loads + 6
 * broadcasts feed 12 FMAs, 6 cycles on 2 pipes):
 *   mk_<R>x16:    acc[2r+h] += sum_{k<K} a[r][k*as] * b[k*bs + 8h + lane]
 *   tile<R>_zero, tile<R>_load (acc from rows at column d0),
 *   tile<R>_store (rows r < rows only: the others are clamped duplicates).
 * full: all 16 columns of b (and of the rows) are in bounds, else m0/m1
 * mask the accesses (a fully masked load touches no memory). Loops have
 * constant trip counts and are unrolled, so the accumulators are registers
 * (a loop over a runtime count would keep acc[] in memory and store it on
 * every step). */
#define LA_AVX2_TILE(R)                                                                           \
    LA_INLINE void mk_##R##x16(__m256 acc[2 * R], int64_t K, const float *const a[R], int64_t as, \
                               const float *b, int64_t bs, int full, __m256i m0, __m256i m1)      \
    {                                                                                             \
        const float *ap[R];                                                                       \
        __m256 c[2 * R];                                                                          \
        _Pragma("GCC unroll 12") for (int i = 0; i < 2 * R; i++) c[i] = acc[i];                  \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) ap[r] = a[r];                        \
        /* rows by index: a pointer stepped past the last row could overflow    \
         * with a huge stride (undefined even if never read) */                                 \
        for (int64_t k = 0; k < K; k++) {                                                         \
            const float *bk = b + k * bs;                                                         \
            const __m256 b0 = full ? _mm256_loadu_ps(bk) : _mm256_maskload_ps(bk, m0);           \
            const __m256 b1 = full ? _mm256_loadu_ps(bk + 8) : _mm256_maskload_ps(bk + 8, m1);   \
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)                                   \
            {                                                                                     \
                const __m256 x = _mm256_broadcast_ss(ap[r] + k * as);                             \
                c[2 * r] = _mm256_fmadd_ps(x, b0, c[2 * r]);                                      \
                c[2 * r + 1] = _mm256_fmadd_ps(x, b1, c[2 * r + 1]);                              \
            }                                                                                     \
        }                                                                                         \
        _Pragma("GCC unroll 12") for (int i = 0; i < 2 * R; i++) acc[i] = c[i];                  \
    }                                                                                             \
    LA_INLINE void tile##R##_zero(__m256 acc[2 * R])                                              \
    {                                                                                             \
        _Pragma("GCC unroll 12") for (int i = 0; i < 2 * R; i++) acc[i] = _mm256_setzero_ps();   \
    }                                                                                             \
    LA_INLINE void tile##R##_load(__m256 acc[2 * R], float *const row[R], int64_t d0, int full,   \
                                  __m256i m0, __m256i m1)                                         \
    {                                                                                             \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)                                       \
        {                                                                                         \
            acc[2 * r] = full ? _mm256_loadu_ps(row[r] + d0)                                      \
                              : _mm256_maskload_ps(row[r] + d0, m0);                              \
            acc[2 * r + 1] = full ? _mm256_loadu_ps(row[r] + d0 + 8)                              \
                                  : _mm256_maskload_ps(row[r] + d0 + 8, m1);                      \
        }                                                                                         \
    }                                                                                             \
    LA_INLINE void tile##R##_store(float *const row[R], int rows, int64_t d0,                     \
                                   const __m256 acc[2 * R], int full, __m256i m0, __m256i m1)     \
    {                                                                                             \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)                                       \
        {                                                                                         \
            if (r >= rows)                                                                        \
                break;                                                                            \
            if (full) {                                                                           \
                _mm256_storeu_ps(row[r] + d0, acc[2 * r]);                                        \
                _mm256_storeu_ps(row[r] + d0 + 8, acc[2 * r + 1]);                                \
            } else {                                                                              \
                _mm256_maskstore_ps(row[r] + d0, m0, acc[2 * r]);                                 \
                _mm256_maskstore_ps(row[r] + d0 + 8, m1, acc[2 * r + 1]);                         \
            }                                                                                     \
        }                                                                                         \
    }

LA_AVX2_TILE(4)
LA_AVX2_TILE(6)

/* The 6x8 half tile for the last 8 score columns of a strip: only 6
 * accumulators (latency-bound), but half the work of a 6x16 tile there. */
LA_INLINE void mk_6x8(__m256 acc[12], int64_t K, const float *const a[MR], const float *b,
                      int64_t bs)
{
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    __m256 c0 = acc[0], c1 = acc[2], c2 = acc[4], c3 = acc[6], c4 = acc[8], c5 = acc[10];
    for (int64_t k = 0; k < K; k++) {
        const __m256 b0 = _mm256_loadu_ps(b + k * bs);
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + k), b0, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + k), b0, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + k), b0, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + k), b0, c3);
        c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(a4 + k), b0, c4);
        c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(a5 + k), b0, c5);
    }
    acc[0] = c0, acc[2] = c1, acc[4] = c2, acc[6] = c3, acc[8] = c4, acc[10] = c5;
}

/* ---- pack layout ------------------------------------------------------ */

/* For chunks of up to C rows (cp = C rounded up to NR), all 64-byte aligned:
 *   qh  [C][dk]   scale * phi(q)
 *   qd  [C][dk]   qh * e^(b_i)                   (TOKEN, CHANNEL) rows of Qd S
 *   kh  [C][dk]   phi(k)                         (NONE: also Kd)
 *   kd  [C][dk]   kh * e^(b_last - b_j)          (TOKEN, CHANNEL) for U = Kd^T V
 *   kt  [dk][cp]  kh transposed, zero padded     (NONE, TOKEN) scores GEMM
 *   b   [cp]      double prefix sums of g, padded with b_last     (TOKEN)
 *   et  [2][cp]   e^(b_i), e^(b_last - b_i)                       (TOKEN)
 *   eg  [C][dk]   e^(g_i) per channel                             (CHANNEL)
 *   kg  [C][dk]   kh_j e^(b_r - b_j), r = last row of j's group of 4 (CHANNEL)
 *   gq  [C/4][dk] e^(b_r - b_(r-4)): the decay across a group of 4   (CHANNEL)
 *   el  [dk]      e^(b_last) per channel (NONE: 1) for state_combine */
typedef struct {
    int64_t cp;
    size_t qh, qd, kh, kd, kt, b, et, eg, kg, gq, el, bytes;
} la_layout;


static la_layout layout_of(int64_t chunk, int64_t dk)
{
    /* Saturating sizes (sizes.h): an offset that overflows makes bytes
     * SIZE_MAX, which no allocation satisfies; the ops only run on packs
     * whose size fitted. */
    la_layout L;
    const size_t c = la_size_of_dim(chunk), d = la_size_of_dim(dk);
    const size_t rows = la_size_mul(la_size_mul(c, d), sizeof(float));
    const size_t vec = la_size_mul(d, sizeof(float));
    size_t off = 0;
    L.cp = (chunk + NR - 1) / NR * NR;
    const size_t cp = la_size_of_dim(L.cp);
#define NEXT(field, n) (L.field = off, off = la_size_up64(la_size_add(off, (n))))
    NEXT(qh, rows);
    NEXT(qd, rows);
    NEXT(kh, rows);
    NEXT(kd, rows);
    NEXT(kt, la_size_mul(la_size_mul(cp, d), sizeof(float)));
    NEXT(b, la_size_mul(cp, sizeof(double)));
    NEXT(et, la_size_mul(2 * sizeof(float), cp));
    NEXT(eg, rows);
    NEXT(kg, rows);
    NEXT(gq, la_size_mul(c / 4 + 1, vec));
    NEXT(el, vec);
#undef NEXT
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

/* One entry for every machine (Zen 4's, the default), measured on Zen 4
 * (B=1, H=8, dk = dv, 1 thread, T = 2048..4096): the recurrent form is
 * faster at dk = 64 with every gate (12-15%) and at 128 (7% without a
 * gate, 2-3% with one); the chunked one at 256, by 4-10%. Chunks (dk = dv
 * = 64 and 128, 18..48): multiples of the 6-row tile, flat within ~2% over
 * 24..30; NONE is best at 30, TOKEN (decay exps per score tile) and CHANNEL
 * (dot-chain scores growing with the chunk) at 24; 48 loses 3-10%.
 *
 * The delta rule's tokens go in pairs with a gate, one at a time without
 * (H = 32, dk = dv = 128, one thread, fraction of the ymm peak, one token
 * at a time -> pairs). On a Xeon (family 6 model 207; 2 vCPUs of one,
 * 2026-11-27; T = 4096): token 0.54-0.55 -> 0.59-0.62, channel 0.50-0.51
 * -> 0.54, none 0.68 -> 0.66. On a Zen 4 (family 25 model 17, 2 vCPUs,
 * 2026-11-28; T = 4096, and B = 8 with T = 64, 16 and 4): token 0.57-0.63
 * -> 0.57-0.67, channel 0.53-0.60 -> 0.54-0.61, none 0.67-0.80 ->
 * 0.59-0.71. Zen 3 itself was not measured. The additive family's four
 * tokens at a time measured 10-15% slower than pairs on that Zen 4. */
static const la_tuning tuning_avx2[] = {
    {
        .uarch = LA_UARCH_ZEN4,
        .additive_chunked_above_dk = {128, 128, 128},
        .additive_chunk = {{30, 24, 24}, {30, 24, 24}},
        LA_DELTA_TUNING_ZEN4,
        .delta_pack_from_T = 32,
        .delta_pair_from_T = {LA_TUNE_NEVER, 2, 2},
        .additive_pack_from_T = LA_TUNE_NEVER,
        .additive_quad_from_T = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},
    },
};

/* ---- chunk_pack --------------------------------------------------------- */

/* In-register 8x8 transpose: r[l] lane m becomes r[m] lane l. */
LA_INLINE void transpose8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

LA_INLINE void prefetch_row(const float *p, int64_t n)
{
    for (int64_t c = 0; c < n; c += 16)
        _mm_prefetch((const char *)(p + c), _MM_HINT_T0);
}

/* Rows in groups of 8 so kt is written by 8x8 register transposes, not
 * scalar scatters. CHANNEL decays are running products of e^(g) <= 1 (at
 * most C roundings, no exp of a difference, nothing can overflow):
 * e^(b_i) forward, e^(b_last - b_j) backward. */
static void chunk_pack_avx2(const la_head *h, int64_t t0, int64_t n, void *pack)
{
    const int64_t dk = h->dk, last = n - 1;
    const la_layout L = layout_of(h->chunk, dk);
    const int64_t cp = L.cp;
    float *qh = pf(pack, L.qh), *qd = pf(pack, L.qd), *kh = pf(pack, L.kh);
    float *kd = pf(pack, L.kd), *kt = pf(pack, L.kt), *et = pf(pack, L.et);
    float *eg = pf(pack, L.eg), *kg = pf(pack, L.kg), *gq = pf(pack, L.gq);
    float *el = pf(pack, L.el);
    double *b = pd(pack, L.b);
    const __m256 scale = _mm256_set1_ps(h->scale), ones = _mm256_set1_ps(1.0f);
    const int chan = h->gate == LA_GATE_CHANNEL, tok = h->gate == LA_GATE_TOKEN;

    for (int64_t c = 0; c < dk; c += 8)
        store8(el + c, ones, dk - c);
    if (tok) {
        /* Prefix sums in double: b_i - b_j keeps the precision of the g summed. */
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++)
            b[i] = acc += (double)fmaxf(h->g[(t0 + i) * h->g_ts], LA_G_RESET);
        for (int64_t i = n; i < cp; i++)
            b[i] = acc; /* padding: masked lanes read finite values */
        const double blast[8] = {acc, acc, acc, acc, acc, acc, acc, acc};
        static const double zero8[8] = {0};
        for (int64_t i = 0; i < cp; i += 8) {
            _mm256_store_ps(et + i, decay8(ddiff8(b + i, zero8, 8)));
            _mm256_store_ps(et + cp + i, decay8(ddiff8(blast, b + i, 8)));
        }
    }

    /* Row by row (q and k stream in order), then kt from the kh rows, which
     * are still in L1. */
    for (int64_t i = 0; i < n; i++) {
        const float *q = h->q + (t0 + i) * h->q_ts, *k = h->k + (t0 + i) * h->k_ts;
        /* q, k (and g) stream from memory: fetch the next chunk's rows a
         * whole chunk ahead (chunk_state does v and o, spread over its tiles
         * so that the misses in flight stay few). */
        if (t0 + n + i < h->T) {
            prefetch_row(h->q + (t0 + n + i) * h->q_ts, dk);
            prefetch_row(h->k + (t0 + n + i) * h->k_ts, dk);
            if (chan)
                prefetch_row(h->g + (t0 + n + i) * h->g_ts, dk);
        }
        for (int64_t c = 0; c < dk; c += 8) {
            const int64_t w = dk - c;
            const __m256 qv = _mm256_mul_ps(scale, phi8(h->phi, load8(q + c, w), w));
            const __m256 kv = phi8(h->phi, load8(k + c, w), w);
            store8(qh + i * dk + c, qv, w);
            store8(kh + i * dk + c, kv, w);
            if (tok) {
                store8(qd + i * dk + c, _mm256_mul_ps(qv, _mm256_set1_ps(et[i])), w);
                store8(kd + i * dk + c, _mm256_mul_ps(kv, _mm256_set1_ps(et[cp + i])), w);
            } else if (chan) {
                store8(eg + i * dk + c, decay8(load8(h->g + (t0 + i) * h->g_ts + c, w)), w);
            }
        }
    }
    if (!chan)
        for (int64_t i0 = 0; i0 < n; i0 += 8) {
            const int64_t ni = n - i0 < 8 ? n - i0 : 8;
            for (int64_t c = 0; c < dk; c += 8) {
                const int64_t w = dk - c;
                __m256 kv[8];
                for (int64_t l = 0; l < 8; l++) /* rows past n: zero columns of kt */
                    kv[l] = l < ni ? load8(kh + (i0 + l) * dk + c, w) : _mm256_setzero_ps();
                transpose8(kv);
                for (int64_t m = 0; m < 8 && m < w; m++)
                    _mm256_store_ps(kt + (c + m) * cp + i0, kv[m]);
            }
        }
    if (!chan)
        for (int64_t c = 0; c < dk; c++)
            for (int64_t i = (n + 7) / 8 * 8; i < cp; i++)
                kt[c * cp + i] = 0.0f;
    if (chan) {
        /* From L1, channels outer so the running products stay in registers,
         * 4 vectors of channels at a time so that 4 product chains overlap
         * (lanes >= dk are masked: no memory touched):
         * qd_i = qh_i e^(b_i) forward, kd_j = kh_j e^(b_last - b_j) backward,
         * and kg, gq restarting at the last row of every group of 4. */
        for (int64_t c = 0; c < dk; c += 32) {
            __m256 e[4], f[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                e[u] = ones;
            for (int64_t i = 0; i < n; i++) {
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    const int64_t cc = c + 8 * u, w = dk - cc;
                    e[u] = _mm256_mul_ps(e[u], load8(eg + i * dk + cc, w));
                    store8(qd + i * dk + cc, _mm256_mul_ps(load8(qh + i * dk + cc, w), e[u]), w);
                }
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                store8(el + c + 8 * u, e[u], dk - c - 8 * u);
                e[u] = ones;
                f[u] = ones;
            }
            for (int64_t j = last; j >= 0; j--) {
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    const int64_t cc = c + 8 * u, w = dk - cc;
                    const __m256 k = load8(kh + j * dk + cc, w), a = load8(eg + j * dk + cc, w);
                    f[u] = j % 4 == 3 ? ones : f[u];
                    store8(kd + j * dk + cc, _mm256_mul_ps(k, e[u]), w);
                    store8(kg + j * dk + cc, _mm256_mul_ps(k, f[u]), w);
                    e[u] = _mm256_mul_ps(e[u], a);
                    f[u] = _mm256_mul_ps(f[u], a);
                    if (j % 4 == 0)
                        store8(gq + j / 4 * dk + cc, f[u], w);
                }
            }
        }
    } else if (tok) {
        for (int64_t c = 0; c < dk; c += 8)
            store8(el + c, _mm256_set1_ps(et[last]), dk - c);
    }
}

/* ---- chunk_output -------------------------------------------------------- */

/* Scores of rows ri[0..MR-1] against columns j0..j0+jb-1 (NONE, TOKEN):
 * A = (Qh Kh^T) o D with D_ij = e^(b_i - b_j) for j <= i, else 0.
 * Writes A[r][0..round16(jb)), adds the row sums to den[r]. */
static void scores_token(const la_head *h, const void *pack, const la_layout *L,
                         const int64_t ri[MR], int64_t j0, int64_t jb, float A[][PR], float *den)
{
    const int64_t dk = h->dk, cp = L->cp;
    const float *qh = pf(pack, L->qh), *kt = pf(pack, L->kt);
    const double *b = pd(pack, L->b);
    const float *qrow[MR];
    __m256 rs[MR];
    for (int r = 0; r < MR; r++) {
        qrow[r] = qh + ri[r] * dk;
        rs[r] = _mm256_setzero_ps();
    }
    const __m256i none = _mm256_setzero_si256();
    for (int64_t jt = 0; jt < jb; jt += NR) {
        const int64_t j = j0 + jt;
        __m256 acc[2 * MR];
        tile6_zero(acc);
        /* kt is zero padded to cp columns: full loads. Columns >= jb of the
         * last tile are never read, so up to 8 of them take the half tile. */
        const int halves = jb - jt <= 8 ? 1 : 2;
        if (halves == 1)
            mk_6x8(acc, dk, qrow, kt + j, cp);
        else
            mk_6x16(acc, dk, qrow, 1, kt + j, cp, 1, none, none);
        for (int r = 0; r < MR; r++) {
            for (int hh = 0; hh < halves; hh++) {
                const int64_t jj = j + 8 * hh;
                __m256 x = acc[2 * r + hh];
                if (h->gate == LA_GATE_TOKEN && jj <= ri[r]) { /* else all masked */
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

/* Four dot products at once: lane m of the result is the sum of a[m]. */
LA_INLINE __m128 hsum4x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* CHANNEL scores, dot-product form, every decay factor <= 1 and no exp.
 * Row i keeps t = qh_i o D_ij for its current column j. Within i's own group
 * of 4 columns t steps one column at a time (t o= e^(g_j)); below it, at a
 * group's last column r, A_ij = t . kg_j for its 4 columns j (kg_j = kh_j o
 * D_rj, packed), then one multiply by gq moves t to the next group: 4 FMAs +
 * 1 multiply per 4 pairs and 8 channels, one horizontal reduction. Columns
 * j > i are never touched. Channels go in blocks of QB through a stack copy
 * of t. Strips start at multiples of PR, so groups never straddle one. */
static void scores_channel(const la_head *h, const void *pack, const la_layout *L,
                           const int64_t ri[MR], int64_t j0, int64_t jb, float A[][PR], float *den)
{
    const int64_t dk = h->dk;
    const float *qh = pf(pack, L->qh), *kh = pf(pack, L->kh), *eg = pf(pack, L->eg);
    const float *kg = pf(pack, L->kg), *gq = pf(pack, L->gq);
    float tb[QB] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++) {
        const int64_t i = ri[r], jtop = i < j0 + jb - 1 ? i : j0 + jb - 1;
        float *a = A[r];
        for (int64_t j = j0; j <= jtop; j++)
            a[j - j0] = 0.0f;
        for (int64_t c0 = 0; c0 < dk; c0 += QB) {
            const int64_t cw = dk - c0 < QB ? dk - c0 : QB;
            /* t at column jtop: qh_i times e^(g_l), l = jtop+1..i */
            for (int64_t c = 0; c < cw; c += 8)
                _mm256_store_ps(tb + c, load8(qh + i * dk + c0 + c, cw - c));
            for (int64_t l = i; l > jtop; l--)
                for (int64_t c = 0; c < cw; c += 8)
                    _mm256_store_ps(tb + c, _mm256_mul_ps(_mm256_load_ps(tb + c),
                                                          load8(eg + l * dk + c0 + c, cw - c)));
            int64_t j = jtop;
            if (j % 4 != 3) {
                /* i's own group: columns j down to the group's first, one step each */
                const int64_t nc = j - j / 4 * 4 + 1;
                const float *e0 = eg + j * dk + c0, *k0 = kh + j * dk + c0;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int64_t c = 0; c < cw; c += 8) {
                    const int64_t w = cw - c;
                    __m256 x = _mm256_load_ps(tb + c);
                    a0 = _mm256_fmadd_ps(x, load8(k0 + c, w), a0);
                    x = _mm256_mul_ps(x, load8(e0 + c, w));
                    if (nc > 1) {
                        a1 = _mm256_fmadd_ps(x, load8(k0 - dk + c, w), a1);
                        x = _mm256_mul_ps(x, load8(e0 - dk + c, w));
                    }
                    if (nc > 2) {
                        a2 = _mm256_fmadd_ps(x, load8(k0 - 2 * dk + c, w), a2);
                        x = _mm256_mul_ps(x, load8(e0 - 2 * dk + c, w));
                    }
                    _mm256_store_ps(tb + c, x);
                }
                float sum[4];
                _mm_storeu_ps(sum, hsum4x8(a0, a1, a2, a3));
                for (int64_t m = 0; m < nc; m++)
                    a[j - m - j0] += sum[m];
                j -= nc;
            }
            for (; j >= j0; j -= 4) {
                const float *k0 = kg + j * dk + c0, *q4 = gq + j / 4 * dk + c0;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int64_t c = 0; c < cw; c += 8) {
                    const int64_t w = cw - c;
                    const __m256 x = _mm256_load_ps(tb + c);
                    a0 = _mm256_fmadd_ps(x, load8(k0 + c, w), a0);
                    a1 = _mm256_fmadd_ps(x, load8(k0 - dk + c, w), a1);
                    a2 = _mm256_fmadd_ps(x, load8(k0 - 2 * dk + c, w), a2);
                    a3 = _mm256_fmadd_ps(x, load8(k0 - 3 * dk + c, w), a3);
                    _mm256_store_ps(tb + c, _mm256_mul_ps(x, load8(q4 + c, w)));
                }
                float sum[4];
                _mm_storeu_ps(sum, hsum4x8(a0, a1, a2, a3));
                for (int64_t m = 0; m < 4; m++)
                    a[j - m - j0] += sum[m];
            }
        }
        float d = 0.0f;
        for (int64_t j = j0; j <= jtop; j++)
            d += a[j - j0];
        den[r] += d;
    }
}

/* One 6x16 tile of O: Qd S (first strip only) + A V, then 1/den on the
 * last strip (tri: the strip that holds the diagonal). */
LA_INLINE void out_tile(const la_head *h, const float *s, int64_t t0, int64_t j0, int64_t jb,
                        int64_t d0, int rows, const float *const qrow[MR],
                        const float *const arow[MR], float *const orow[MR], const float *inv,
                        int tri, int full, __m256i m0, __m256i m1)
{
    __m256 acc[2 * MR];
    if (j0 == 0) {
        tile6_zero(acc);
        mk_6x16(acc, h->dk, qrow, 1, s + d0, h->dv, full, m0, m1);
    } else {
        tile6_load(acc, orow, d0, full, m0, m1); /* partial sum of earlier strips */
    }
    /* The last strip ends with the rows' own diagonal block: row r takes
     * column i0+m only for m <= r. A masked-out score is 0, but 0 * v is NaN
     * for a NaN in a later v row, so those FMAs are skipped (a triangle of
     * straight-line FMAs), not multiplied by zero: nothing leaks backwards. */
    const int64_t jfull = tri ? jb - rows : jb;
    const float *v = h->v + (t0 + j0) * h->v_ts + d0;
    mk_6x16(acc, jfull, arow, 1, v, h->v_ts, full, m0, m1);
#pragma GCC unroll 6
    for (int m = 0; m < MR; m++) {
        if (!tri || m >= rows)
            break;
        const float *vm = v + (jfull + m) * h->v_ts;
        const __m256 b0 = full ? _mm256_loadu_ps(vm) : _mm256_maskload_ps(vm, m0);
        const __m256 b1 = full ? _mm256_loadu_ps(vm + 8) : _mm256_maskload_ps(vm + 8, m1);
#pragma GCC unroll 6
        for (int r = m; r < MR; r++) {
            const __m256 x = _mm256_broadcast_ss(arow[r] + jfull + m);
            acc[2 * r] = _mm256_fmadd_ps(x, b0, acc[2 * r]);
            acc[2 * r + 1] = _mm256_fmadd_ps(x, b1, acc[2 * r + 1]);
        }
    }
    if (inv) {
        for (int r = 0; r < MR; r++) {
            const __m256 x = _mm256_set1_ps(inv[r]);
            acc[2 * r] = _mm256_mul_ps(acc[2 * r], x);
            acc[2 * r + 1] = _mm256_mul_ps(acc[2 * r + 1], x);
        }
    }
    tile6_store(orow, rows, d0, acc, full, m0, m1);
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

    /* U = Kd^T V: tile rows are channels, so the 6 broadcasts of a step are
     * adjacent floats of one kd row. Column tiles outer: the n x 16 panel of
     * V stays in L1 while kd streams. */
    const int64_t tiles = (dv + NR - 1) / NR * ((dk + MR - 1) / MR), pn = h->T - t0 - n;
    int64_t tile = 0, pr = 0;
    for (int64_t d0 = 0; d0 < dv; d0 += NR) {
        const int full = d0 + NR <= dv;
        const __m256i m0 = full ? all : lane_mask(dv - d0);
        const __m256i m1 = full ? all : lane_mask(dv - d0 - 8);
        for (int64_t c0 = 0; c0 < dk; c0 += MR) {
            const int rows = dk - c0 < MR ? (int)(dk - c0) : MR;
            const float *a[MR];
            float *urow[MR];
            /* the next chunk's v and o rows, a few per tile */
            for (tile++; pr < pn && pr < n && pr * tiles < tile * n; pr++) {
                prefetch_row(h->v + (t0 + n + pr) * h->v_ts, dv);
                prefetch_row(h->o + (t0 + n + pr) * h->o_ts, dv);
            }
            for (int r = 0; r < MR; r++) {
                const int64_t c = c0 + (r < rows ? r : rows - 1);
                a[r] = kd + c;
                urow[r] = u + c * dv;
            }
            __m256 acc[2 * MR];
            tile6_zero(acc);
            if (rows <= MR4) {
                /* a remainder of <= 4 channels (dk = 64 = 10 x 6 + 4): the
                 * 4x16 tile, not 6 rows of which 2 are duplicates */
                mk_4x16(acc, n, a, dk, v + d0, h->v_ts, full, m0, m1);
                tile4_store(urow, rows, d0, acc, full, m0, m1);
            } else if (full) {
                mk_6x16(acc, n, a, dk, v + d0, h->v_ts, 1, all, all);
                tile6_store(urow, rows, d0, acc, 1, all, all);
            } else {
                mk_6x16(acc, n, a, dk, v + d0, h->v_ts, 0, m0, m1);
                tile6_store(urow, rows, d0, acc, 0, m0, m1);
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

/* A state vector's update: a s + k v, or s + k v rounded once without a
 * gate. */
LA_INLINE __m256 update8(__m256 s, __m256 v, const int GATED, __m256 a, __m256 k)
{
    return GATED ? _mm256_fmadd_ps(a, s, _mm256_mul_ps(k, v)) : _mm256_fmadd_ps(k, v, s);
}

/* Columns [d0, dv) of the row of S at element r of s: s = a s + k v,
 * o += q s, each sum carried in o itself: the same operations in the same
 * order as a column summed in registers, so a column's bits do not depend
 * on where its sum is kept (nor on how a step's columns are shared between
 * threads). */
LA_INLINE void token_row_tail(void *s, int64_t r, const float *v, float *o, int64_t d0,
                              int64_t dv, const int GATED, const int BF16, __m256 a, __m256 k,
                              __m256 q)
{
    for (int64_t d = d0; d < dv; d += 8) {
        const int64_t w = dv - d;
        const __m256 sv = update8(vf_load_row(s, r + d, w, BF16), load8(v + d, w), GATED, a, k);
        vf_store_row(s, r + d, sv, w, BF16);
        store8(o + d, _mm256_fmadd_ps(q, sv, load8(o + d, w)), w);
    }
}

/* np pairs of v's vectors in pair order into vt. Out of line: inlined,
 * GCC 12 could not tell that token_row_tail_paired reads no more of vt
 * than this writes (-Wmaybe-uninitialized); one call per token. */
static __attribute__((noinline)) void pair_v_tail(float *vt, const float *v, int64_t np)
{
    for (int64_t p = 0; p < np; p++) {
        _mm256_store_ps(vt + 16 * p, vf_load_paired(v + 16 * p, 0, 1));
        _mm256_store_ps(vt + 16 * p + 8, vf_load_paired(v + 16 * p, 1, 1));
    }
}

/* The first np whole pairs of vectors from column d0 of a bfloat16 row,
 * in pair order: vt holds their v and o their sums in that order (the
 * caller puts v in it and o back); otherwise as token_row_tail. */
LA_INLINE void token_row_tail_paired(void *s, int64_t r, const float *vt, float *o, int64_t d0,
                                     int64_t np, const int GATED, __m256 a, __m256 k, __m256 q)
{
    for (int64_t p = 0; p < np; p++) {
        const int64_t d = d0 + 16 * p;
        const __m256 s0 = update8(vf_load_row_paired(s, r + d, 0, 1),
                                  _mm256_load_ps(vt + 16 * p), GATED, a, k);
        const __m256 s1 = update8(vf_load_row_paired(s, r + d, 1, 1),
                                  _mm256_load_ps(vt + 16 * p + 8), GATED, a, k);
        vf_store_row_paired(s, r + d, s0, s1, 1);
        _mm256_storeu_ps(o + d, _mm256_fmadd_ps(q, s0, _mm256_loadu_ps(o + d)));
        _mm256_storeu_ps(o + d + 8, _mm256_fmadd_ps(q, s1, _mm256_loadu_ps(o + d + 8)));
    }
}

/* One token. The rows of S are swept in order, each read and written
 * whole: whole rows stream from L3 and memory at the prefetchers' pace,
 * where a sweep per slab of 32 columns (rows read in pieces dv floats
 * apart) ran at 0.13-0.41 of the read-modify-write bound (Zen 4, dk = dv =
 * 128: 2-4x slower; docs/kernels.md). The first NR vectors' sums stay in
 * registers (v too when NR <= 4), the columns past them sum in o: from L1
 * and L2 that costs 1.1-1.15x against the slabs. phi and the decays of CB
 * channels are made first, as independent vectors. BF16: the state is
 * h->s_bf16 (additive.h), widened as read and rounded as written, two
 * vectors to a store, the sums reading the float before the rounding; its
 * whole pairs of vectors go in pair order (the register ones, then up to
 * TAIL_PAIRS past them). */
LA_INLINE void token_rows(const la_head *h, const float *q, const float *k, const float *v,
                          const float *g, float *o, const int NR, const int GATED, const int BF16)
{
    const int64_t dk = h->dk, dv = h->dv, ld = h->s_ld ? h->s_ld : dv;
    void *const s = BF16 ? (void *)h->s_bf16 : (void *)h->s;
    float qb[CB] __attribute__((aligned(32))), kb[CB] __attribute__((aligned(32)));
    float ab[CB] __attribute__((aligned(32)));
    const __m256 scale = _mm256_set1_ps(h->scale);
    const __m256 atok =
        h->gate == LA_GATE_TOKEN ? decay8(_mm256_set1_ps(g[0])) : _mm256_set1_ps(1.0f);
    __m256 den = _mm256_setzero_ps(), acc[8], vv[4];
    /* A bfloat16 row's whole pairs of register vectors are held in pair
     * order (state_rows.h: the even elements, then the odd ones): the v
     * they meet is put in that order once per token (vr), and their sums
     * go back to o in natural order (vf_store_paired). */
#define PAIRED(x) (BF16 && ((x) | 1) < NR)
    float vp[8 * 8] __attribute__((aligned(32)));
    const float *vr = v;
    if (BF16) {
        for (int x = 0; x < NR; x++)
            _mm256_store_ps(vp + 8 * x, PAIRED(x) ? vf_load_paired(v + 8 * (x & ~1), x & 1, 1)
                                                  : _mm256_loadu_ps(v + 8 * x));
        vr = vp;
    }
    /* past the register columns: tail_pairs pairs with v in vt, o summed
     * in pair order and put back at the end */
    const int64_t tail0 = 8 * NR;
    const int64_t tail_pairs =
        !BF16 ? 0 : (dv - tail0) / 16 < TAIL_PAIRS ? (dv - tail0) / 16 : TAIL_PAIRS;
    const int64_t rest0 = tail0 + 16 * tail_pairs;
    float vt[16 * TAIL_PAIRS] __attribute__((aligned(32)));
    if (tail_pairs > 0)
        pair_v_tail(vt, v + tail0, tail_pairs);
    for (int x = 0; x < NR; x++) {
        acc[x] = _mm256_setzero_ps();
        if (NR <= 4)
            vv[x % 4] = _mm256_loadu_ps(vr + 8 * x);
    }
    for (int64_t d = 8 * NR; d < dv; d += 8)
        store8(o + d, _mm256_setzero_ps(), dv - d);
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
            if (h->z && h->zc) { /* compensated: z + zc carries the exact sum */
                const __m256 zo = load8(h->z + c, w);
                const __m256 y = _mm256_fmadd_ps(av, load8(h->zc + c, w), kv);
                const __m256 zv = _mm256_fmadd_ps(av, zo, y);
                const __m256 cv = _mm256_add_ps(_mm256_fmsub_ps(av, zo, zv), y);
                store8(h->z + c, zv, w);
                store8(h->zc + c, cv, w);
                den = _mm256_fmadd_ps(qv, cv, _mm256_fmadd_ps(qv, zv, den));
            } else if (h->z) {
                const __m256 zv = _mm256_fmadd_ps(av, load8(h->z + c, w), kv);
                store8(h->z + c, zv, w);
                den = _mm256_fmadd_ps(qv, zv, den);
            }
        }
        int64_t r = c0 * ld;
        for (int64_t c = 0; c < cw; c++, r += ld) {
            const __m256 a = _mm256_broadcast_ss(ab + c), kc = _mm256_broadcast_ss(kb + c);
            const __m256 qc = _mm256_broadcast_ss(qb + c);
            __m256 held = _mm256_setzero_ps();
#pragma GCC unroll 8 /* as row_regs in the avx512 table: acc[] stays in registers */
            for (int x = 0; x < NR; x++) { /* o += q s */
                const __m256 vx = NR <= 4 ? vv[x % 4] : _mm256_loadu_ps(vr + 8 * x);
                const __m256 sx = PAIRED(x) ? vf_load_row_paired(s, r + 8 * (x & ~1), x & 1, 1)
                                            : vf_load_row(s, r + 8 * x, 8, BF16);
                const __m256 sv = update8(sx, vx, GATED, a, kc);
                if (!BF16)
                    _mm256_storeu_ps((float *)s + r + 8 * x, sv);
                else if (PAIRED(x) && x % 2 == 1)
                    vf_store_row_paired(s, r + 8 * (x - 1), held, sv, 1);
                else if (!PAIRED(x))
                    vf_store_row(s, r + 8 * x, sv, 8, 1);
                if (BF16)
                    held = sv;
                acc[x] = _mm256_fmadd_ps(qc, sv, acc[x]);
            }
            if (BF16)
                token_row_tail_paired(s, r, vt, o, tail0, tail_pairs, GATED, a, kc, qc);
            token_row_tail(s, r, v, o, rest0, dv, GATED, BF16, a, kc, qc);
        }
    }
    const __m256 inv = _mm256_set1_ps(h->z ? 1.0f / (hsum8(den) + h->eps) : 1.0f);
    for (int x = 0; x < NR; x++) {
        const __m256 y = h->z ? _mm256_mul_ps(acc[x], inv) : acc[x];
        if (!PAIRED(x))
            _mm256_storeu_ps(o + 8 * x, y);
        else if (x % 2 == 1)
            vf_store_paired(o + 8 * (x - 1), h->z ? _mm256_mul_ps(acc[x - 1], inv) : acc[x - 1],
                            y, 1);
    }
#undef PAIRED
    for (int64_t d = tail0; d < rest0; d += 16) {
        const __m256 y0 = _mm256_loadu_ps(o + d), y1 = _mm256_loadu_ps(o + d + 8);
        vf_store_paired(o + d, h->z ? _mm256_mul_ps(y0, inv) : y0,
                        h->z ? _mm256_mul_ps(y1, inv) : y1, 1);
    }
    if (h->z)
        for (int64_t d = rest0; d < dv; d += 8)
            store8(o + d, _mm256_mul_ps(load8(o + d, dv - d), inv), dv - d);
}

LA_INLINE void token_nr(const la_head *h, const float *q, const float *k, const float *v,
                        const float *g, float *o, int nr, const int GATED, const int BF16)
{
    if (nr == 0) { /* dv < 8: every column summed in o */
        token_rows(h, q, k, v, g, o, 0, GATED, BF16);
        return;
    }
#define RUN(n) token_rows(h, q, k, v, g, o, n, GATED, BF16)
    LA_TILE_SWITCH(nr, 8, RUN);
#undef RUN
}

/* The token op on a state of either type (BF16 a constant). */
LA_INLINE void token_typed(const la_head *h, const float *q, const float *k, const float *v,
                           const float *g, float *o, const int BF16)
{
    const int nr = h->dv / 8 < 8 ? (int)(h->dv / 8) : 8; /* whole vectors in registers */
    if (h->gate != LA_GATE_NONE)
        token_nr(h, q, k, v, g, o, nr, 1, BF16);
    else
        token_nr(h, q, k, v, g, o, nr, 0, BF16);
}

/* One function per state type (as in the avx512 table): inlined into one
 * frame, the float32 step ran 8-10% slower in L2 once the bfloat16 one had
 * its buffer of paired v (Zen 5, forced avx2). */
static __attribute__((noinline)) void token_f32(const la_head *h, const float *q, const float *k,
                                                const float *v, const float *g, float *o)
{
    token_typed(h, q, k, v, g, o, 0);
}

static __attribute__((noinline)) void token_bf16(const la_head *h, const float *q,
                                                 const float *k, const float *v, const float *g,
                                                 float *o)
{
    token_typed(h, q, k, v, g, o, 1);
}

static void token_avx2(const la_head *h, const float *q, const float *k, const float *v,
                       const float *g, float *o)
{
    if (h->s_bf16)
        token_bf16(h, q, k, v, g, o);
    else
        token_f32(h, q, k, v, g, o);
}


/* ---- non-causal -------------------------------------------------------- */

/* The driver's blocks keep the sums of one call over the whole head (the
 * z sums of TB blocks aside, added per block). */
_Static_assert(LA_NONCAUSAL_BLOCK % TB == 0 && LA_NONCAUSAL_BLOCK % MR4 == 0,
               "non-causal blocks of whole TB and MR4 blocks");

/* S += Kh^T V in blocks of 8 channels x TB tokens, phi(k) buffered. */
static void noncausal_state_avx2(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv, T = h->T;
    const __m256i all = _mm256_set1_epi32(-1);
    float *s = h->s, *z = h->z;
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
            for (int64_t half = 0; half < cw; half += MR4) {
                const int rows = cw - half < MR4 ? (int)(cw - half) : MR4;
                const float *a[MR4];
                float *srow[MR4];
                for (int r = 0; r < MR4; r++) {
                    const int64_t c = half + (r < rows ? r : rows - 1);
                    a[r] = &kb[0][c];
                    srow[r] = s + (c0 + c) * dv;
                }
                const float *v = h->v + t0 * h->v_ts;
                __m256 acc[8];
                int64_t d0 = 0;
                for (; d0 + NR <= dv; d0 += NR) {
                    tile4_load(acc, srow, d0, 1, all, all);
                    mk_4x16(acc, tb, a, 8, v + d0, h->v_ts, 1, all, all);
                    tile4_store(srow, rows, d0, acc, 1, all, all);
                }
                if (d0 < dv) {
                    const __m256i m0 = lane_mask(dv - d0), m1 = lane_mask(dv - d0 - 8);
                    tile4_load(acc, srow, d0, 0, m0, m1);
                    mk_4x16(acc, tb, a, 8, v + d0, h->v_ts, 0, m0, m1);
                    tile4_store(srow, rows, d0, acc, 0, m0, m1);
                }
            }
        }
        if (z)
            store8(z + c0, _mm256_add_ps(load8(z + c0, cw), zacc), cw);
    }
}

/* O = Qh S / (Qh z + eps), 4 query rows at a time, phi(q) buffered per QB
 * channels (one block for dk <= QB, so o stays in registers). */
static void noncausal_output_avx2(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv, T = h->T;
    const __m256i all = _mm256_set1_epi32(-1);
    const float *s = h->s, *z = h->z;
    float qb[MR4][QB] __attribute__((aligned(32)));
    const float *qrow[MR4] = {qb[0], qb[1], qb[2], qb[3]};
    const __m256 scale = _mm256_set1_ps(h->scale);
    for (int64_t t0 = 0; t0 < T; t0 += MR4) {
        const int rows = T - t0 < MR4 ? (int)(T - t0) : MR4;
        float *orow[MR4];
        __m256 den[MR4];
        float inv[MR4];
        for (int r = 0; r < MR4; r++) {
            orow[r] = h->o + (t0 + (r < rows ? r : rows - 1)) * h->o_ts;
            den[r] = _mm256_setzero_ps();
        }
        for (int64_t c0 = 0; c0 < dk; c0 += QB) {
            const int64_t cw = dk - c0 < QB ? dk - c0 : QB;
            for (int r = 0; r < MR4; r++) {
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
                for (int r = 0; r < MR4; r++)
                    inv[r] = 1.0f / (hsum8(den[r]) + h->eps);
                scl = inv;
            }
            __m256 acc[8];
            for (int64_t d0 = 0; d0 < dv; d0 += NR) {
                const int full = d0 + NR <= dv;
                const __m256i m0 = full ? all : lane_mask(dv - d0);
                const __m256i m1 = full ? all : lane_mask(dv - d0 - 8);
                if (c0 == 0)
                    tile4_zero(acc);
                else
                    tile4_load(acc, orow, d0, full, m0, m1);
                if (full)
                    mk_4x16(acc, cw, qrow, 1, s + c0 * dv + d0, dv, 1, all, all);
                else
                    mk_4x16(acc, cw, qrow, 1, s + c0 * dv + d0, dv, 0, m0, m1);
                if (scl)
                    for (int r = 0; r < MR4; r++) {
                        acc[2 * r] = _mm256_mul_ps(acc[2 * r], _mm256_set1_ps(scl[r]));
                        acc[2 * r + 1] = _mm256_mul_ps(acc[2 * r + 1], _mm256_set1_ps(scl[r]));
                    }
                tile4_store(orow, rows, d0, acc, full, m0, m1);
            }
        }
    }
}

LA_FTZ_CHUNK_OPS(avx2)

/* The value-tiled recurrent forward, written once for every ISA. */
#define LA_ADD_NV 2
#include "../additive_kernels.h"

static const la_additive_ops additive_avx2 = {
    .pack_bytes = pack_bytes_avx2,
    .chunk_pack = chunk_pack_avx2_ftz,
    .chunk_output = chunk_output_avx2_ftz,
    .chunk_state = chunk_state_avx2_ftz,
    .state_combine = state_combine_avx2_ftz,
    .feature_bytes = additive_feature_bytes,
    .features = additive_features,
    .normaliser = additive_normaliser,
    .columns = additive_columns,
    .packed_bytes = additive_packed_bytes,
    .pack = additive_pack,
    .unpack = additive_unpack,
    .token = token_avx2,
    .token_vfirst = additive_token_vfirst,
    .noncausal_state = noncausal_state_avx2,
    .noncausal_output = noncausal_output_avx2,
};

extern const la_delta_ops la_delta_avx2;
extern const la_stage_ops la_stage_avx2;

const la_table la_table_avx2 = {
    .name = "avx2",
    .isa = LINATTN_ISA_AVX2,
    .requires = LA_FEAT_AVX2 | LA_FEAT_FMA | LA_FEAT_F16C,
    .additive = &additive_avx2,
    .delta = &la_delta_avx2,
    .stage = &la_stage_avx2,
    .tuning = tuning_avx2,
    .ntuning = sizeof tuning_avx2 / sizeof tuning_avx2[0],
};
