/* The AVX-512 table (and, built with LA_AVX512_SIMDE, its SIMDe twin; see
 * simd512.h). The prefill kernels are register-blocked GEMMs over a packed
 * chunk, in the shape of BLIS/XNNPACK micro-kernels: MR rows x 32 columns of
 * accumulators, one broadcast and two FMAs per row and step of the inner
 * dimension. Column tails use prefix masks, so no array is read or written
 * past its end. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../ftz_x86.h"
#include "../table.h"
#include "../tile_dispatch.h"
#include "simd512.h"
#include "../state_rows.h"

enum {
    W = 16,   /* floats per vector */
    MR = 8,   /* rows of a GEMM tile (x 2 vectors of columns) */
    NR = 32,  /* columns of a GEMM tile */
    BLK = 16, /* rows and columns of a tile of A = Qh Kh^T (GLA sub-block) */
    AJ = 256, /* columns of A kept at once (longer chunks run in slabs) */
    CS = 64,  /* channels per packed block of the non-causal passes */
    TB = 64,  /* tokens per packed block of the non-causal passes */
    SG = 256, /* channels whose features one token computes at once */
};

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }


/* ---- GEMM tile --------------------------------------------------------- */

/* One product of the tile: C[r][:] += sum_k a[r + k*aks] * b[k*bks + :]. The
 * left operand is a packed panel (the rows of one step contiguous), so the MR
 * broadcasts of a step come from one pointer at constant offsets.
 * The last tri steps are a causal triangle: step k-tri+t feeds rows r >= t
 * only, so a NaN in a later row of b never reaches earlier rows (0 * NaN). */
typedef struct {
    const float *a;
    int64_t aks;
    const float *b;
    int64_t bks, k, tri;
} la_pass;

/* C (m <= MR rows, nc <= NR columns, row stride ldc) = [C +] sum of the
 * passes, each row then times rs[r] when rs is given. Rows past m compute on
 * whatever the panel holds there (packed panels are padded, finite) and are
 * not stored, so one loop nest serves every tile. Several passes share the
 * accumulators: chunk_output adds Qs S and A V in one tile. */
LA_INLINE void tile(int64_t m, int64_t nc, const la_pass *ps, int np, float *c, int64_t ldc,
                    const float *rs, int add)
{
    const __mmask16 m0 = la_tail(nc), m1 = la_tail(nc - W);
    __m512 acc0[MR], acc1[MR];
    for (int r = 0; r < MR; r++) {
        const float *cr = c + (r < m ? r : 0) * ldc;
        acc0[r] = add ? la_load(m0, cr) : _mm512_setzero_ps();
        acc1[r] = add ? la_load(m1, cr + W) : _mm512_setzero_ps();
    }
    for (int p = 0; p < np; p++) {
        const float *a = ps[p].a, *b = ps[p].b;
        const int64_t aks = ps[p].aks, bks = ps[p].bks;
        const int64_t kfull = ps[p].k - ps[p].tri;
        /* rows of b by index: a pointer stepped past the last row could
         * overflow with a huge stride (undefined even if never read) */
        for (int64_t k = 0; k < kfull; k++) {
            const float *bk = b + k * bks;
            const __m512 b0 = la_load(m0, bk), b1 = la_load(m1, bk + W);
            for (int r = 0; r < MR; r++) {
                const __m512 x = _mm512_set1_ps(a[k * aks + r]);
                acc0[r] = _mm512_fmadd_ps(x, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(x, b1, acc1[r]);
            }
        }
        for (int t = 0; t < MR && t < ps[p].tri; t++) {
            const int64_t k = kfull + t;
            const float *bk = b + k * bks;
            const __m512 b0 = la_load(m0, bk), b1 = la_load(m1, bk + W);
            for (int r = 0; r < MR; r++) {
                const __mmask16 on = r >= t ? (__mmask16)0xFFFF : (__mmask16)0;
                const __m512 x = _mm512_set1_ps(a[k * aks + r]);
                acc0[r] = _mm512_mask_mov_ps(acc0[r], on, _mm512_fmadd_ps(x, b0, acc0[r]));
                acc1[r] = _mm512_mask_mov_ps(acc1[r], on, _mm512_fmadd_ps(x, b1, acc1[r]));
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        if (r >= m)
            break;
        if (rs) {
            const __m512 f = _mm512_set1_ps(rs[r]);
            acc0[r] = _mm512_mul_ps(acc0[r], f);
            acc1[r] = _mm512_mul_ps(acc1[r], f);
        }
        la_store(c + r * ldc, m0, acc0[r]);
        la_store(c + r * ldc + W, m1, acc1[r]);
    }
}

/* ---- pack -------------------------------------------------------------- */

/* Pack layout for chunks of up to C rows; ldk = dk, ldc = C, both rounded up
 * to 16, padding zero; "panel" = 16-row blocks stored [block][c][16 rows], the
 * BLIS packing that makes one step's broadcasts contiguous. After a 64-byte
 * header:
 *   qh, kh [C][ldk]   scale phi(q), phi(k) (CHANNEL only)
 *   ga  [C][ldk]      e^(g_i) per channel (CHANNEL)
 *   kd  [C][ldk]      kh_j e^(b_last - b_j): chunk_state's left operand
 *   qs  panel [ldk]   qh_i e^(b_i): left operand of Qs S (NONE: qt is used)
 *   kp  panel [ldk]   left operand of A^T: kh, or for CHANNEL kh_j e^(b_e - b_j),
 *                     e = the last row of j's block
 *   qt  panel [ldk]   right operand of A^T: qh, or for CHANNEL
 *                     qh_i e^(b_i - b_r), r = the row before i's block
 *   bt  [ldc]         prefix sums of the TOKEN gate, double
 *   gb  [ldc/16][ldk] e^(b_e - b_r) of each 16-row block, r the row before
 *                     it, e its last row (CHANNEL)
 *   pl  [ldk]         e^(b_last) (CHANNEL)
 *   qr  [ldk]         running product of pack's backward pass (CHANNEL)
 * All factors are <= 1. TOKEN: e^x of prefix sums kept in double and
 * differenced before rounding (in float, |b| ~ 1e3 would leave b_i - b_j
 * only ~1e-4 accurate). CHANNEL: products of the e^(g_l) over the rows
 * between (one exp per gate value instead of one per factor; at most C
 * roundings, ~C * 6e-8 relative, and products underflow to 0 gracefully). */
typedef struct {
    float *qh, *kh, *ga, *kd, *qs, *kp, *qt, *gb, *pl, *qr;
    double *bt;
    int64_t ldk, ldc;
} pack_view;

/* The pack's pointers, from the head's chunk and dk (as in every table). */
static pack_view view_of(const la_head *h, const void *pack)
{
    const int64_t ldk = up16(h->dk), ldc = up16(h->chunk);
    const int64_t rows = h->chunk * ldk, panel = ldc * ldk;
    float *f = (float *)(uintptr_t)pack + 16;
    pack_view p = {.qh = f,
                   .kh = f + rows,
                   .ga = f + 2 * rows,
                   .kd = f + 3 * rows,
                   .ldk = ldk,
                   .ldc = ldc};
    p.qs = f + 4 * rows;
    p.kp = p.qs + panel;
    p.qt = p.kp + panel;
    p.bt = (double *)(p.qt + panel);
    p.gb = (float *)(p.bt + ldc);
    p.pl = p.gb + ldc / BLK * ldk;
    p.qr = p.pl + ldk;
    return p;
}

static size_t pack_bytes_avx512(int64_t chunk, int64_t dk, int64_t dv)
{
    (void)dv;
    /* saturating (sizes.h): SIZE_MAX when the pack cannot be addressed */
    const size_t ldk = la_size_of_dim(up16(dk)), ldc = la_size_of_dim(up16(chunk));
    const size_t c = la_size_of_dim(chunk);
    size_t floats = la_size_mul(la_size_mul(4, c), ldk);
    floats = la_size_add(floats, la_size_mul(la_size_mul(3, ldc), ldk));
    floats = la_size_add(floats, la_size_mul(2, ldc));
    floats = la_size_add(floats, la_size_mul(ldc / BLK + 2, ldk));
    return la_size_add(64, la_size_mul(floats, sizeof(float)));
}

/* Zen 4 first: the default for CPUs without an entry of their own.
 *
 * Zen 4 (B=1, H=8, dk = dv, 1 thread, T = 2048..4096, and 64..256 at
 * dk = 128): the recurrent form is faster at dk = 64, 128 and 256 with every
 * gate, by 3-30% (least with a token gate at 128, where the decay costs it
 * one multiply per state element and token). Chunks (T = 4096, every gate):
 * per token the intra-chunk work grows with the chunk and the pack/state
 * overhead shrinks; 16 is best for d <= 64 (by ~4%, CHANNEL too), 32 for
 * d = 128 (16 is ~2% slower there, 48 and 64 ~5-10%). Measured again on
 * a Zen 4 (family 25 model 17, 2 vCPUs, 2026-11-28; H = 32, dk = dv = 128,
 * one thread, fraction of the zmm peak, 2-3 alternating rounds) with the
 * Xeon's choices below: the delta rule on a packed copy in tiles of 32
 * columns (16 KiB at dk = 128: half of Zen 4's 32 KiB L1; 64 columns fill
 * it) goes from 0.58-0.59 to 0.76-0.80 without a gate one token at a
 * time, and in pairs from 0.63 to 0.67-0.76 with a token gate and from
 * 0.58-0.60 to 0.69 with a channel one. Pairs without a gate measured
 * 0.69-0.74 there, so gate none goes one token at a time on the packed
 * copy, but in pairs below 16 tokens, where a contiguous call sweeps the
 * state where it lies
 * (2026-11-29, B = 8, T = 2..15: 0.46-0.55 -> 0.56-0.66). Packing from
 * 16 tokens (B = 8): T = 16 none 0.58 -> 0.71-0.73, channel 0.55-0.61 ->
 * 0.60-0.65, token level; T = 24 0.58 / 0.67 / 0.57-0.59 -> 0.72-0.74 /
 * 0.70-0.72 / 0.61-0.63; from 8, T = 8 lost up to 12% with a gate. The
 * additive family's tokens go four at a time (elu+1 normalised dk = 64
 * 0.57-0.59 -> 0.60-0.62, identity dk = 128 0.70 -> 0.76-0.79); its packed
 * copy measured no faster. Decode steps keep the whole tile: the Xeon's
 * 64 columns with the fused pass dropped model decode from 0.56-0.58 of
 * the bound to 0.36-0.38.
 *
 * Sapphire/Emerald Rapids, measured on a borrowed Xeon (family 6 model
 * 207, 2026-11-27, short runs on a shared host; docs/kernels.md): the
 * recurrent forms work on packed copies of the state (a 64 KiB tile, or a
 * 64-column one with rows 512 bytes apart, streams from L2 at every token
 * there; packed, the delta rule went from 0.30-0.35 to 0.51-0.55 of the zmm
 * peak, the additive identity forward at dk = 128 from 0.38 to 0.54-0.59).
 * With the packed copy the additive recurrent form runs at or above the
 * chunked one up to dk = 128 (chunked: 0.34-0.56 identity, 0.40-0.46 elu+1;
 * recurrent 0.54-0.59 and 0.47-0.48); at dk = 256 the chunked form led by
 * 1.1-1.4x before packing, not measured since. Chunks: Zen 4's (the Xeon's
 * chunk table spread too much to move them). The delta rule's tokens go in
 * pairs (measured on 2 vCPUs of a model 207, 2026-11-27, H = 32, dk = dv =
 * 128, one thread, fraction of the zmm peak, one token at a time -> pairs:
 * T = 4096 none 0.47-0.52 -> 0.67, token 0.49-0.55 -> 0.60-0.62, channel
 * 0.44-0.50 -> 0.52-0.56; B = 8, T = 16, on the state where it lies: 0.30
 * -> 0.51 with each gate; T = 4: 0.25 -> 0.35). The additive family's
 * tokens go four at a time (the same machine: 3-13% faster than pairs
 * without a gate, 0-5% with a token gate).
 *
 * Zen 5 (EPYC, family 26 model 2, 2 vCPUs of a shared host, 2026-12-06;
 * two 512-bit FMA pipes: the bench's zmm peak 236 GFLOP/s a core, ymm 117):
 * Zen 4's entry measured above the Xeon's or level (H = 32, dk = dv = 128,
 * one thread, 3 interleaved rounds: delta recurrent with a token gate 0.69
 * of the zmm peak against 0.59, channel 0.63 against 0.49, additive
 * identity 0.64 against 0.62; 36 layers' decode from memory, B = 1, 0.77
 * of the bound against 0.62), except one token at a time without a gate:
 * in pairs, as on the Xeon, T = 4096 went from 0.56 to 0.70, T = 256 0.58
 * -> 0.72, B = 8 T = 32 0.55 -> 0.68, dk = 64 0.50 -> 0.60 (4-5 rounds,
 * each range within 0.03). */
/* What the Zen 4 and Zen 5 entries share. */
#define TUNING_AVX512_ZEN                                                                        \
    .additive_chunked_above_dk = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},                  \
    .additive_chunk = {{16, 16, 16}, {32, 32, 32}}, LA_DELTA_TUNING_ZEN4,                        \
    .delta_pack_from_T = 16, .delta_pack_columns = 32, .delta_pair_from_T = {2, 2, 2},           \
    .additive_pack_from_T = LA_TUNE_NEVER, .additive_quad_from_T = {4, 4, 4}

static const la_tuning tuning_avx512[] = {
    {
        .uarch = LA_UARCH_ZEN4,
        TUNING_AVX512_ZEN,
        .delta_pair_below_T = {16, 0, 0},
        /* 36 layers through V-first pools, one thread, quiet machine, 5-6
         * rounds: B = 8 0.72-0.75 of the bound at 64 KiB, 0.80-0.83 at 8,
         * 0.83-0.88 at 16; B = 1 medians 0.64, 0.70, 0.75 (before the
         * dot products fetched in address order) */
        .delta_vfirst_read_ahead = 16 << 10,
    },
    {
        .uarch = LA_UARCH_ZEN5, /* pairs without a gate at every length */
        TUNING_AVX512_ZEN,
        /* 36 layers through V-first pools, one thread, 4 rounds, us a
         * layer row after row -> interleaved: float32 B = 1 137 -> 108,
         * B = 8 1304 -> 1060; bfloat16 100 -> 65, 1041 -> 696 */
        .delta_vfirst_dot_interleave = 1,
        /* the same, float32, 5 rounds, fraction of the bound, B = 1 / 8,
         * with the dot products' fetches in address order: 2 KiB 0.85 /
         * 0.88, 4 KiB 0.73 / 0.77, 8 KiB 0.69 / 0.76, 16 KiB 0.58 / 0.72
         * (0.80 / 0.80 against 0.62 / 0.71 in another run); bfloat16 4
         * KiB 0.50 / 0.60 against 0.43 / 0.57 at 16 and 0.37 / 0.61 at 2;
         * in L2 4 KiB level with 16, 2 KiB 10% slower */
        .delta_vfirst_read_ahead = 4 << 10,
        /* 36 layers of bfloat16 K-first states, fraction of the bound,
         * spread -> in the sweep: B = 1 0.41-0.45 -> 0.52-0.56, B = 8
         * 0.66-0.70 -> 0.73-0.76 (float32 states keep it spread: B = 8
         * lost 0.07) */
        .delta_step_bf16_sweep_fetch = 1,
        /* the additive forward's rows 8 tokens ahead, spread (one thread,
         * H = 8, T = 4096, inputs from memory, alternating calls, median
         * time over one block ahead at once): dk = 64 identity 0.83-0.90,
         * elu+1 normalised 0.96, token gate 0.90, channel 0.94,
         * [B][T][H][D] 0.87-0.96, dk = 128 0.92-1.00; 4 tokens level, 16
         * up to 5% slower (docs/kernels.md) */
        .additive_fetch_tokens = 8,
    },
    {
        .uarch = LA_UARCH_SAPPHIRE_RAPIDS,
        .additive_chunked_above_dk = {128, 128, 128},
        .additive_chunk = {{16, 16, 16}, {32, 32, 32}},
        LA_DELTA_TUNING_ZEN4,
        .delta_pack_from_T = 32,
        .delta_pair_from_T = {2, 2, 2},
        .additive_pack_from_T = 32,
        .additive_quad_from_T = {4, 4, 4},
        .delta_step_columns = 64,
        .delta_step_fuse = 1,
    },
};

/* Lane indices of the butterfly stage exchanging blocks of s = 8, 4, 2, 1
 * lanes between rows i and i+s: [0] gives row i (its low block, then row
 * i+s's), [1] row i+s (row i's high block, then its own). */
static const int32_t butterfly[4][2][16] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
     {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
};

LA_INLINE void butterfly_stage(__m512 x[16], int stage, int s)
{
    const __m512i il = _mm512_loadu_si512(butterfly[stage][0]);
    const __m512i ih = _mm512_loadu_si512(butterfly[stage][1]);
    for (int i = 0; i < 16; i++)
        if (!(i & s)) {
            const __m512 a = x[i], b = x[i + s];
            x[i] = _mm512_permutex2var_ps(a, il, b);
            x[i + s] = _mm512_permutex2var_ps(a, ih, b);
        }
}

/* x[j][l] <-> x[l][j] in four butterfly stages (64 two-source permutes). */
LA_INLINE void transpose16(__m512 x[16])
{
    butterfly_stage(x, 0, 8);
    butterfly_stage(x, 1, 4);
    butterfly_stage(x, 2, 2);
    butterfly_stage(x, 3, 1);
}

/* dst[l * stride] = lane l of v. */
LA_INLINE void scatter16(float *dst, int64_t stride, __m512 v)
{
    _Alignas(64) float t[W];
    _mm512_store_ps(t, v);
    for (int l = 0; l < W; l++)
        dst[l * stride] = t[l];
}

/* (float)(x[l] - y[l]), l = 0..15, the difference taken in double. AVX
 * 256-bit conversions: SIMDe 0.7.4 has no _mm512_cvtpd_ps. */
LA_INLINE __m512 dsub16(const double *x, const double *y, int64_t ystep)
{
    __m128 f[4];
    for (int l = 0; l < 4; l++) {
        const __m256d yv = ystep ? _mm256_load_pd(y + 4 * l) : _mm256_set1_pd(*y);
        f[l] = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_load_pd(x + 4 * l), yv));
    }
    const __m256 lo = _mm256_insertf128_ps(_mm256_castps128_ps256(f[0]), f[1], 1);
    const __m256 hi = _mm256_insertf128_ps(_mm256_castps128_ps256(f[2]), f[3], 1);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* x[j] = mul * phi(row j of p, channels in mc) for rows j < m, zero
 * elsewhere (lanes outside mc too). For ELU1 only the x <= 0 lanes (and NaN)
 * need e^x: those of all 16 rows are compacted into one buffer, so a block
 * takes ~8 exp calls instead of 16 (same values lane by lane). */
LA_INLINE void phi_rows(linattn_phi phi, const float *p, int64_t ts, int64_t m, __mmask16 mc,
                        __m512 mul, __m512 x[BLK])
{
    const __m512 zero = _mm512_setzero_ps();
    if (phi != LINATTN_PHI_ELU1) {
        for (int64_t j = 0; j < BLK; j++)
            x[j] = j < m ? _mm512_maskz_mov_ps(
                               mc, _mm512_mul_ps(mul, phi_v(phi, la_load(mc, p + j * ts))))
                         : zero;
        return;
    }
    _Alignas(64) float buf[BLK * W + W];
    __mmask16 neg[BLK];
    int64_t cnt = 0;
    for (int64_t j = 0; j < BLK; j++) {
        x[j] = zero;
        neg[j] = 0;
        if (j < m) {
            x[j] = la_load(mc, p + j * ts);
            neg[j] = (__mmask16)(mc & ~_mm512_cmp_ps_mask(x[j], zero, _CMP_GT_OQ));
            _mm512_storeu_ps(buf + cnt,
                             _mm512_maskz_compress_ps(neg[j], _mm512_min_ps(zero, x[j])));
            cnt += __builtin_popcount(neg[j]);
        }
    }
    for (int64_t i = 0; i < cnt; i += W)
        _mm512_store_ps(buf + i, la_exp_raw(la_load(la_tail(cnt - i), buf + i)));
    int64_t off = 0;
    for (int64_t j = 0; j < m; j++) {
        const __m512 y = _mm512_maskz_add_ps((__mmask16)(mc & ~neg[j]), x[j], _mm512_set1_ps(1.0f));
        x[j] = _mm512_mul_ps(mul, la_expand(y, neg[j], buf + off));
        off += __builtin_popcount(neg[j]);
    }
}

/* NONE and TOKEN in one pass over q and k, 16 rows x 16 channels at a time:
 * the features are transposed in registers straight into the qt and kp
 * panels; qs = qt times e^(b_i) per lane (TOKEN), kd = kh times
 * e^(b_last - b_j) per row (NONE: kd = kh). No row-major qh, kh. */
static void chunk_pack_token(const la_head *h, int64_t t0, int64_t n, const pack_view *p)
{
    const int64_t dk = h->dk, ldk = p->ldk;
    const int tok = h->gate == LA_GATE_TOKEN;
    const __m512 scale = _mm512_set1_ps(h->scale), zero = _mm512_setzero_ps();
    if (tok) {
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++)
            p->bt[i] = acc += fmaxf(h->g[(t0 + i) * h->g_ts], LA_G_RESET);
        for (int64_t i = n; i < p->ldc; i++)
            p->bt[i] = 0.0; /* read by the last 16-wide tile of A */
    }
    for (int64_t i0 = 0; i0 < n; i0 += BLK) {
        const int64_t m = min64(BLK, n - i0);
        const __mmask16 mr = la_tail(m);
        __m512 fs = zero;
        _Alignas(64) float fd[BLK];
        if (tok) { /* e^(b_i), e^(b_last - b_i) <= 1 */
            const double zd = 0.0;
            fs = _mm512_maskz_mov_ps(mr, la_exp(dsub16(p->bt + i0, &zd, 0)));
            _mm512_store_ps(fd, la_exp(_mm512_sub_ps(zero, dsub16(p->bt + i0, p->bt + n - 1, 0))));
        }
        for (int64_t c = 0; c < ldk; c += W) {
            const __mmask16 mc = la_tail(dk - c);
            __m512 x[BLK];
            phi_rows(h->phi, h->q + (t0 + i0) * h->q_ts + c, h->q_ts, m, mc, scale, x);
            transpose16(x);
            for (int l = 0; l < W; l++) {
                _mm512_store_ps(p->qt + i0 * ldk + (c + l) * BLK, x[l]);
                if (tok)
                    _mm512_store_ps(p->qs + i0 * ldk + (c + l) * BLK, _mm512_mul_ps(x[l], fs));
            }
            phi_rows(h->phi, h->k + (t0 + i0) * h->k_ts + c, h->k_ts, m, mc,
                     _mm512_set1_ps(1.0f), x);
            for (int64_t j = 0; j < m; j++)
                _mm512_store_ps(p->kd + (i0 + j) * ldk + c,
                                tok ? _mm512_mul_ps(x[j], _mm512_set1_ps(fd[j])) : x[j]);
            transpose16(x);
            for (int l = 0; l < W; l++)
                _mm512_store_ps(p->kp + i0 * ldk + (c + l) * BLK, x[l]);
        }
    }
}

static void chunk_pack_avx512(const la_head *h, int64_t t0, int64_t n, void *pack)
{
    const int64_t dk = h->dk, ldk = up16(dk);
    const pack_view p = view_of(h, pack);
    const __m512 scale = _mm512_set1_ps(h->scale);
    if (h->gate != LA_GATE_CHANNEL) {
        chunk_pack_token(h, t0, n, &p);
        return;
    }

    /* Pass 1, forward, 16 rows x 16 channels at a time: features, e^(g), and
     * the running products from the chunk start (P = e^(b_i), carried across
     * blocks in pl) and from the block start (R = e^(b_i - b_r), the block's
     * total into gb); qs = qh P and qt = qh R are transposed in registers
     * into their panels. Rows past n are zero. */
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < n; i0 += BLK) {
        const int64_t m = min64(BLK, n - i0);
        for (int64_t c = 0; c < ldk; c += W) {
            const __mmask16 mc = la_tail(dk - c);
            __m512 x[BLK];
            __m512 pv = i0 ? _mm512_load_ps(p.pl + c) : one;
            for (int64_t j = 0; j < BLK; j++) {
                x[j] = zero;
                if (j < m) {
                    const int64_t i = i0 + j;
                    const float *q = h->q + (t0 + i) * h->q_ts + c;
                    const float *k = h->k + (t0 + i) * h->k_ts + c;
                    const __m512 qv = _mm512_maskz_mov_ps(
                        mc, _mm512_mul_ps(scale, phi_v(h->phi, la_load(mc, q))));
                    _mm512_store_ps(p.qh + i * ldk + c, qv);
                    _mm512_store_ps(p.kh + i * ldk + c,
                                    _mm512_maskz_mov_ps(mc, phi_v(h->phi, la_load(mc, k))));
                    const __m512 ga = la_exp(la_load(mc, h->g + (t0 + i) * h->g_ts + c));
                    _mm512_store_ps(p.ga + i * ldk + c, ga);
                    pv = _mm512_mul_ps(pv, ga);
                    x[j] = _mm512_mul_ps(qv, pv);
                }
            }
            _mm512_store_ps(p.pl + c, pv);
            transpose16(x);
            for (int l = 0; l < W; l++)
                _mm512_store_ps(p.qs + i0 * ldk + (c + l) * BLK, x[l]);
            __m512 rv = one;
            for (int64_t j = 0; j < BLK; j++) {
                x[j] = zero;
                if (j < m) {
                    rv = _mm512_mul_ps(rv, _mm512_load_ps(p.ga + (i0 + j) * ldk + c));
                    x[j] = _mm512_mul_ps(_mm512_load_ps(p.qh + (i0 + j) * ldk + c), rv);
                }
            }
            _mm512_store_ps(p.gb + i0 / BLK * ldk + c, rv);
            transpose16(x);
            for (int l = 0; l < W; l++)
                _mm512_store_ps(p.qt + i0 * ldk + (c + l) * BLK, x[l]);
        }
    }

    /* Pass 2, backward over blocks: kp = kh e^(b_e - b_j), kd = kh
     * e^(b_last - b_j) as running products from the block's and the chunk's
     * last row (the latter carried across blocks in qr); 16 x 16 tiles are
     * transposed in registers into the panels. Rows past n are zero. */
    for (int64_t i0 = (n - 1) / BLK * BLK; i0 >= 0; i0 -= BLK) {
        const int64_t m = min64(BLK, n - i0);
        for (int64_t c = 0; c < ldk; c += W) {
            __m512 x[BLK];
            __m512 qb = one, qg = i0 + m == n ? one : _mm512_load_ps(p.qr + c);
            for (int64_t j = BLK - 1; j >= 0; j--) {
                x[j] = zero;
                if (j < m) {
                    const int64_t i = i0 + j;
                    const __m512 kv = _mm512_load_ps(p.kh + i * ldk + c);
                    const __m512 ga = _mm512_load_ps(p.ga + i * ldk + c);
                    x[j] = _mm512_mul_ps(kv, qb);
                    _mm512_store_ps(p.kd + i * ldk + c, _mm512_mul_ps(kv, qg));
                    qb = _mm512_mul_ps(qb, ga);
                    qg = _mm512_mul_ps(qg, ga);
                }
            }
            _mm512_store_ps(p.qr + c, qg);
            transpose16(x);
            for (int l = 0; l < W; l++)
                _mm512_store_ps(p.kp + i0 * ldk + (c + l) * BLK, x[l]);
        }
    }
}

/* ---- chunk_output ------------------------------------------------------ */

/* One BLK x BLK tile of A^T (rows j0.., lanes i0..) into at ([j][16]), from
 * the kp panel and qt. With scaled, row c of qt is first multiplied by
 * e^(b_r - b_e): r the row before block i0, e the last row of block j0. */
LA_INLINE void a_tile(const pack_view *p, int64_t dk, int64_t i0, int64_t j0, int scaled,
                      int causal, float *at)
{
    __m512 acc[BLK];
    for (int r = 0; r < BLK; r++)
        acc[r] = _mm512_setzero_ps();
    const float *kp = p->kp + j0 * p->ldk, *qt = p->qt + i0 * p->ldk;
    _Alignas(64) float f[CS];
    for (int64_t c0 = 0; c0 < dk; c0 += CS) {
        const int64_t cn = min64(CS, dk - c0);
        if (scaled) /* e^(b_r - b_e): the blocks strictly between j0's and i0's */
            for (int64_t c = 0; c < cn; c += W) {
                __m512 x = _mm512_set1_ps(1.0f);
                for (int64_t b = j0 + BLK; b < i0; b += BLK)
                    x = _mm512_mul_ps(x, _mm512_load_ps(p->gb + b / BLK * p->ldk + c0 + c));
                _mm512_store_ps(f + c, x);
            }
        for (int64_t c = c0; c < c0 + cn; c++) {
            __m512 q = _mm512_load_ps(qt + c * BLK);
            if (scaled)
                q = _mm512_mul_ps(q, _mm512_set1_ps(f[c - c0]));
            for (int r = 0; r < BLK; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(kp[c * BLK + r]), q, acc[r]);
        }
    }
    /* causal: the diagonal block of gate NONE, lanes i < row j zeroed here */
    for (int r = 0; r < BLK; r++)
        _mm512_store_ps(at + r * BLK,
                        causal ? _mm512_maskz_mov_ps((__mmask16)(0xFFFFu << r), acc[r]) : acc[r]);
}

/* GLA diagonal block, straight into A^T (lanes i, rows j), no horizontal
 * sums: for each channel c, walking j down from the last row,
 *   x[i] = qh_ic e^(b_ic - b_jc) for i >= j (0 below): x *= e^(g_{j+1,c}),
 *   then lane j := qh_jc; A^T[j] += kh_jc x.
 * The decay is a product of e^(g) <= 1 (at most 15 roundings), no exp per
 * pair; the 16 accumulators stay in registers (j fully unrolled). Lanes
 * i < j are selected away at the end (kh_jc * 0 may be NaN there). The walk
 * starts at the last row of the chunk: rows past it are stale. */
LA_INLINE void a_diag_channel_ldk(const pack_view *p, int64_t i0, int64_t m, float *at,
                                  const int64_t ldk)
{
    const float *qh = p->qh + i0 * ldk, *kh = p->kh + i0 * ldk, *ga = p->ga + i0 * ldk;
    __m512 acc[BLK];
    for (int j = 0; j < BLK; j++)
        acc[j] = _mm512_setzero_ps();
    /* Four channels at a time: the x chains (mul, insert per row) are
     * latency bound, four of them keep the FMA pipes busy. ldk % 4 == 0. */
    for (int64_t c = 0; c < ldk; c += 4) {
        __m512 x[4];
        for (int u = 0; u < 4; u++)
            x[u] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int j = BLK - 1; j >= 0; j--) {
            if (j >= m)
                continue;
            for (int u = 0; u < 4; u++) {
                /* lane j of x is 0 before: x ga + (qh_jc in lane j only) */
                const __m512 qj =
                    _mm512_maskz_mov_ps((__mmask16)(1u << j), _mm512_set1_ps(qh[j * ldk + c + u]));
                x[u] = j < m - 1
                           ? _mm512_fmadd_ps(x[u], _mm512_set1_ps(ga[(j + 1) * ldk + c + u]), qj)
                           : qj;
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(kh[j * ldk + c + u]), x[u], acc[j]);
            }
        }
    }
    for (int j = 0; j < BLK; j++)
        _mm512_store_ps(at + j * BLK, _mm512_maskz_mov_ps((__mmask16)(0xFFFFu << j), acc[j]));
}

/* The 48 broadcasts of a channel sit at constant offsets from three pointers
 * only when the row stride is a constant: the common widths get their own
 * copy (otherwise the row pointers spill). */
static void a_diag_channel(const pack_view *p, int64_t i0, int64_t m, float *at)
{
    switch (p->ldk) {
    case 64: a_diag_channel_ldk(p, i0, m, at, 64); break;
    case 128: a_diag_channel_ldk(p, i0, m, at, 128); break;
    default: a_diag_channel_ldk(p, i0, m, at, p->ldk); break;
    }
}

/* A^T for rows i0.. (m of them, lanes) and columns js..js+jn-1, masked and
 * decayed, into a ([j - js][16]). */
static void build_a(const la_head *h, const pack_view *p, int64_t i0, int64_t m, int64_t js,
                    int64_t jn, float *a)
{
    for (int64_t jb = 0; jb < jn; jb += BLK) {
        const int64_t j0 = js + jb;
        float *at = a + jb * BLK;
        if (h->gate == LA_GATE_CHANNEL) {
            if (j0 < i0)
                a_tile(p, h->dk, i0, j0, 1, 0, at);
            else
                a_diag_channel(p, i0, m, at);
            continue;
        }
        if (h->gate == LA_GATE_NONE) {
            a_tile(p, h->dk, i0, j0, 0, j0 >= i0, at);
            continue;
        }
        a_tile(p, h->dk, i0, j0, 0, 0, at);
        for (int64_t j = 0; j < BLK; j++) {
            /* causal mask i >= j; TOKEN decay e^(b_i - b_j) <= 1 there */
            const __mmask16 keep = j0 < i0 ? (__mmask16)0xFFFF : (__mmask16)(0xFFFFu << j);
            __m512 x = _mm512_load_ps(at + j * BLK);
            if (h->gate == LA_GATE_TOKEN) {
                const __m512 d = dsub16(p->bt + i0, p->bt + j0 + j, 0);
                x = _mm512_mul_ps(x, la_exp(_mm512_min_ps(_mm512_setzero_ps(), d)));
            }
            _mm512_store_ps(at + j * BLK, _mm512_maskz_mov_ps(keep, x));
        }
    }
}

static void chunk_output_avx512(const la_head *h, const void *pack, int64_t t0, int64_t n,
                                const float *s, const float *z)
{
    const int64_t dk = h->dk, dv = h->dv;
    const pack_view p = view_of(h, pack);
    _Alignas(64) float a[AJ * BLK];
    _Alignas(64) float inv[BLK];

    for (int64_t i0 = 0; i0 < n; i0 += BLK) {
        const int64_t m = min64(BLK, n - i0), jend = i0 + m;
        const float *qs = (h->gate == LA_GATE_NONE ? p.qt : p.qs) + i0 * p.ldk;
        /* denominators of the 16 rows as one vector: Qs z + row sums of A + eps */
        __m512 den = _mm512_set1_ps(h->eps);
        if (z)
            for (int64_t c = 0; c < dk; c++)
                den = _mm512_fmadd_ps(_mm512_load_ps(qs + c * BLK), _mm512_set1_ps(z[c]), den);
        /* Columns of A in slabs of AJ; o accumulates across slabs. */
        for (int64_t js = 0; js < jend; js += AJ) {
            const int64_t jn = min64(AJ, jend - js);
            const int last = js + jn == jend;
            build_a(h, &p, i0, m, js, jn, a);
            if (z) {
                for (int64_t j = 0; j < jn; j++)
                    den = _mm512_add_ps(den, _mm512_load_ps(a + j * BLK));
                _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), den));
            }
            for (int64_t d0 = 0; d0 < dv; d0 += NR) {
                for (int64_t r0 = 0; r0 < m; r0 += MR) {
                    /* Causal: in the last slab rows r0.. stop at their own
                     * column, the tile's last mm columns being the triangle
                     * (slabs and blocks are multiples of 16: it never straddles). */
                    const int64_t mm = min64(MR, m - r0);
                    const la_pass ps[2] = {
                        {a + r0, BLK, h->v + (t0 + js) * h->v_ts + d0, h->v_ts,
                         last ? i0 + r0 + mm - js : jn, last ? mm : 0},
                        {qs + r0, BLK, s + d0, dv, dk, 0},
                    };
                    tile(mm, min64(NR, dv - d0), ps, js == 0 ? 2 : 1,
                         h->o + (t0 + i0 + r0) * h->o_ts + d0, h->o_ts, z && last ? inv + r0 : NULL,
                         js > 0);
                }
            }
        }
    }
}

/* ---- state ------------------------------------------------------------- */

/* Rows part/parts of the next chunk (from row t) of q, k, v, o and a CHANNEL
 * g into L2. With many heads these stream from memory; a burst of prefetches
 * would stall on the miss buffers, so chunk_state spreads them over its
 * tiles. Always inlined: GCC drops calls to a function that only prefetches. */
LA_INLINE void prefetch_slice(const la_head *h, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++) {
        for (int64_t c = 0; c < h->dk; c += W) {
            __builtin_prefetch(h->q + i * h->q_ts + c, 0, 2);
            __builtin_prefetch(h->k + i * h->k_ts + c, 0, 2);
            if (h->gate == LA_GATE_CHANNEL)
                __builtin_prefetch(h->g + i * h->g_ts + c, 0, 2);
        }
        for (int64_t c = 0; c < h->dv; c += W) {
            __builtin_prefetch(h->v + i * h->v_ts + c, 0, 2);
            __builtin_prefetch(h->o + i * h->o_ts + c, 1, 2);
        }
    }
}

static void chunk_state_avx512(const la_head *h, const void *pack, int64_t t0, int64_t n, float *u,
                               float *uz)
{
    const int64_t dk = h->dk, dv = h->dv;
    const pack_view p = view_of(h, pack);
    /* the next chunk's rows, ceil(rows / tiles) per tile (no division per tile) */
    const int64_t parts = (dk + MR - 1) / MR * ((dv + NR - 1) / NR);
    const int64_t pend = t0 + n + min64(h->chunk, h->T - t0 - n);
    const int64_t per = (pend - t0 - n + parts - 1) / parts;
    int64_t pi = t0 + n;
    for (int64_t c0 = 0; c0 < dk; c0 += MR)
        for (int64_t d0 = 0; d0 < dv; d0 += NR) {
            prefetch_slice(h, pi, min64(pi + per, pend));
            pi = min64(pi + per, pend);
            const la_pass ps = {p.kd + c0, p.ldk, h->v + t0 * h->v_ts + d0, h->v_ts, n, 0};
            tile(min64(MR, dk - c0), min64(NR, dv - d0), &ps, 1, u + c0 * dv + d0, dv, NULL, 0);
        }
    if (h->z)
        for (int64_t c = 0; c < dk; c += W) {
            __m512 acc = _mm512_setzero_ps();
            for (int64_t j = 0; j < n; j++)
                acc = _mm512_add_ps(acc, _mm512_load_ps(p.kd + j * p.ldk + c));
            la_store(uz + c, la_tail(dk - c), acc);
        }
}

static void state_combine_avx512(const la_head *h, const void *pack, int64_t n, float *s, float *z,
                                 const float *u, const float *uz)
{
    const int64_t dk = h->dk, dv = h->dv;
    const pack_view p = view_of(h, pack);
    __m512 av = _mm512_set1_ps(1.0f);
    if (h->gate == LA_GATE_TOKEN)
        av = _mm512_set1_ps(expf((float)p.bt[n - 1]));
    for (int64_t c0 = 0; c0 < dk; c0 += W) {
        const __mmask16 mc = la_tail(dk - c0);
        if (h->gate == LA_GATE_CHANNEL)
            av = _mm512_load_ps(p.pl + c0);
        _Alignas(64) float f[W];
        _mm512_store_ps(f, av);
        for (int64_t c = c0; c < min64(c0 + W, dk); c++) {
            const __m512 x = _mm512_set1_ps(f[c - c0]);
            for (int64_t d = 0; d < dv; d += W) {
                const __mmask16 md = la_tail(dv - d);
                la_store(
                    s + c * dv + d, md,
                    _mm512_fmadd_ps(x, la_load(md, s + c * dv + d), la_load(md, u + c * dv + d)));
            }
        }
        if (z)
            la_store(z + c0, mc, _mm512_fmadd_ps(av, la_load(mc, z + c0), la_load(mc, uz + c0)));
    }
}

/* ---- one token --------------------------------------------------------- */

/* A state vector's update: a s + k v, or s + k v rounded once without a
 * gate (every part of the token op, so a column's bits do not depend on
 * which part holds it). */
LA_INLINE __m512 update16(__m512 s, __m512 v, int gated, __m512 xa, __m512 xk)
{
    return gated ? _mm512_fmadd_ps(xa, s, _mm512_mul_ps(xk, v)) : _mm512_fmadd_ps(xk, v, s);
}

/* The register columns of the row of S at element r of s: s updated,
 * o += q s. A bfloat16 row is widened as read and rounded as written, two
 * vectors to a store; the sums read the float before the rounding. */
LA_INLINE void row_regs(void *s, int64_t r, const float *v, const __m512 *vv, __m512 *acc,
                        const int NV, const int GATED, const int BF16, __m512 xa, __m512 xk,
                        __m512 xq)
{
    __m512 held = _mm512_setzero_ps();
    /* unrolled by force: GCC 12 kept the bfloat16 row (its rounding's rare
     * fallback makes the body large) a loop with acc[] in memory, 5.1 us
     * a step of 4 heads of 128 x 128 in L2 against 4.2 (Zen 5) */
#pragma GCC unroll 16
    for (int j = 0; j < NV; j++) {
        const __m512 vj = NV <= 8 ? vv[j % 8] : _mm512_loadu_ps(v + j * W);
        const __m512 sv = update16(vf_load_row(s, r + j * W, W, BF16), vj, GATED, xa, xk);
        if (!BF16)
            vf_store_row(s, r + j * W, sv, W, 0);
        else if (j % 2 == 1)
            vf_store_row2(s, r + (j - 1) * W, held, sv, 1);
        else if (j == NV - 1)
            vf_store_row(s, r + j * W, sv, W, 1);
        if (BF16)
            held = sv;
        acc[j] = _mm512_fmadd_ps(xq, sv, acc[j]);
    }
}

/* n lanes (at most W) past the register columns of a row (s at element r,
 * v and o at the first of them), each sum carried in o itself: the same
 * operations in the same order as a register column, so a column's bits do
 * not depend on where its sum is kept (nor, therefore, on how a step's
 * columns are shared between threads). */
LA_INLINE void row_tail_vec(void *s, int64_t r, const float *v, float *o, int64_t n,
                            const int GATED, const int BF16, __m512 xa, __m512 xk, __m512 xq)
{
    const __mmask16 m = la_tail(n);
    const __m512 sv = update16(vf_load_row(s, r, n, BF16), la_load(m, v), GATED, xa, xk);
    vf_store_row(s, r, sv, n, BF16);
    la_store(o, m, _mm512_fmadd_ps(xq, sv, la_load(m, o)));
}

/* Columns [0, n) past the register ones of one row (s at element r, v and
 * o at the first of them). */
LA_INLINE void row_tail(void *s, int64_t r, const float *v, float *o, int64_t n,
                        const int GATED, const int BF16, __m512 xa, __m512 xk, __m512 xq)
{
    for (int64_t d = 0; d < n; d += W)
        row_tail_vec(s, r + d, v + d, o + d, n - d < W ? n - d : W, GATED, BF16, xa, xk, xq);
}

/* Rows [0, n) of S from element r of s (row stride ld), every column in
 * registers or, with TAIL, the nt columns past NV * W in o. */
LA_INLINE void rows_full(void *s, int64_t r, int64_t ld, int64_t n, const float *qa,
                         const float *ka, const float *aa, const float *v, float *o,
                         const __m512 *vv, __m512 *acc, const int NV, const int TAIL, int64_t nt,
                         const int GATED, const int BF16, const void *next)
{
    const int64_t es = BF16 ? 2 : 4;
    unsigned char *row = (unsigned char *)s + r * es;
    for (int64_t c = 0; c < n; c++, row += ld * es) {
        if (next) /* the next state's row, as this one */
            state_fetch(next, r + c * ld, NV * W + nt, es);
        const __m512 xa = _mm512_set1_ps(aa[c]), xk = _mm512_set1_ps(ka[c]),
                     xq = _mm512_set1_ps(qa[c]);
        row_regs(row, 0, v, vv, acc, NV, GATED, BF16, xa, xk, xq);
        if (TAIL)
            row_tail(row, NV * W, v + NV * W, o + NV * W, nt, GATED, BF16, xa, xk, xq);
    }
}

/* One token. The rows of S are swept in order, each read and written
 * whole: whole rows stream from memory at the prefetchers' pace, where a
 * sweep per slab of 128 columns (every row read in pieces dv floats apart)
 * ran at 0.33-0.42 of the read-modify-write bound from memory against
 * 0.71-0.93 (Zen 4, docs/kernels.md). The sums of the first NV vectors of
 * columns stay in registers (v too when NV <= 8); with TAIL the columns past
 * them sum in o, a load and a store more per vector, which costs 1.4x in L2
 * at dv = 512. Per vector otherwise: one load, two FMAs (three with a gate:
 * a s + k v) and one store. phi and the decays of up to SG channels are made
 * first, as independent vectors (the exp latencies overlap). BF16: the
 * state is h->s_bf16 (additive.h). */
LA_INLINE void token_rows(const la_head *h, const float *q, const float *k, const float *v,
                          const float *g, float *o, const int NV, const int TAIL, const int BF16)
{
    const int64_t dk = h->dk, dv = h->dv, ld = h->s_ld ? h->s_ld : dv, nt = dv - NV * W;
    const int full = dv >= NV * W, gated = h->gate != LA_GATE_NONE;
    void *const s = BF16 ? (void *)h->s_bf16 : (void *)h->s;
    /* A bfloat16 sweep, slower than memory, fetches the next state's rows
     * as it goes (36 layers from memory on Zen 5, one thread, B = 1: 0.44
     * -> 0.54 of the bound); a float32 one measured level or worse. */
    const void *const next = BF16 ? h->s_next : NULL;
    __mmask16 mv[16];
    __m512 vv[8], acc[16];
    for (int j = 0; j < NV; j++) {
        mv[j] = la_tail(dv - j * W);
        if (NV <= 8)
            vv[j % 8] = la_load(mv[j], v + j * W);
        acc[j] = _mm512_setzero_ps();
    }
    if (TAIL)
        for (int64_t d = 0; d < nt; d += W)
            la_store(o + NV * W + d, la_tail(nt - d), _mm512_setzero_ps());
    __m512 dsum = _mm512_setzero_ps();
    __m512 av = _mm512_set1_ps(1.0f);
    if (h->gate == LA_GATE_TOKEN)
        av = _mm512_set1_ps(g[0] < LA_EXP_ZERO_BELOW ? 0.0f : expf(g[0]));
    _Alignas(64) float qa[SG], ka[SG], aa[SG];
    for (int64_t g0 = 0; g0 < dk; g0 += SG) {
        const int64_t gn = min64(SG, dk - g0);
        for (int64_t c = 0; c < gn; c += W) {
            const __mmask16 mc = la_tail(gn - c);
            const __m512 qv = _mm512_mul_ps(_mm512_set1_ps(h->scale),
                                            phi_v(h->phi, la_load(mc, q + g0 + c)));
            const __m512 kv = phi_v(h->phi, la_load(mc, k + g0 + c));
            if (h->gate == LA_GATE_CHANNEL)
                av = la_exp(la_load(mc, g + g0 + c));
            if (h->z && h->zc) { /* compensated: z + zc carries the exact sum */
                const __m512 zo = la_load(mc, h->z + g0 + c);
                const __m512 y = _mm512_fmadd_ps(av, la_load(mc, h->zc + g0 + c), kv);
                const __m512 zv = _mm512_fmadd_ps(av, zo, y);
                const __m512 cv = _mm512_add_ps(_mm512_fmsub_ps(av, zo, zv), y);
                la_store(h->z + g0 + c, mc, zv);
                la_store(h->zc + g0 + c, mc, cv);
                const __m512 qm = _mm512_maskz_mov_ps(mc, qv);
                dsum = _mm512_fmadd_ps(qm, cv, _mm512_fmadd_ps(qm, zv, dsum));
            } else if (h->z) {
                const __m512 zv = _mm512_fmadd_ps(av, la_load(mc, h->z + g0 + c), kv);
                la_store(h->z + g0 + c, mc, zv);
                dsum = _mm512_fmadd_ps(_mm512_maskz_mov_ps(mc, qv), zv, dsum);
            }
            _mm512_store_ps(qa + c, qv);
            _mm512_store_ps(ka + c, kv);
            _mm512_store_ps(aa + c, av);
        }
        const int64_t r = g0 * ld;
        if (full && gated)
            rows_full(s, r, ld, gn, qa, ka, aa, v, o, vv, acc, NV, TAIL, nt, 1, BF16, next);
        else if (full)
            rows_full(s, r, ld, gn, qa, ka, aa, v, o, vv, acc, NV, TAIL, nt, 0, BF16, next);
        else if (NV <= 8) { /* dv < NV * W: no tail, v in registers */
            for (int64_t c = 0; c < gn; c++) {
                const __m512 xa = _mm512_set1_ps(aa[c]), xk = _mm512_set1_ps(ka[c]),
                             xq = _mm512_set1_ps(qa[c]);
                for (int j = 0; j < NV; j++) {
                    const int64_t e = r + c * ld + j * W, n = min64(W, dv - j * W);
                    const __m512 sv =
                        update16(vf_load_row(s, e, n, BF16), vv[j % 8], gated, xa, xk);
                    vf_store_row(s, e, sv, n, BF16);
                    acc[j] = _mm512_fmadd_ps(xq, sv, acc[j]);
                }
            }
        }
    }
    const __m512 inv = _mm512_set1_ps(h->z ? 1.0f / (la_hsum(dsum) + h->eps) : 1.0f);
    for (int j = 0; j < NV; j++)
        la_store(o + j * W, mv[j], h->z ? _mm512_mul_ps(acc[j], inv) : acc[j]);
    if (TAIL && h->z)
        for (int64_t d = NV * W; d < dv; d += W) {
            const __mmask16 m = la_tail(dv - d);
            la_store(o + d, m, _mm512_mul_ps(la_load(m, o + d), inv));
        }
}

/* token_rows on a state of either type (BF16 a constant). */
LA_INLINE void token_typed(const la_head *h, const float *q, const float *k, const float *v,
                           const float *g, float *o, const int BF16)
{
    const int64_t nv = (h->dv + W - 1) / W;
    if (nv <= 8) {
#define RUN(n) token_rows(h, q, k, v, g, o, n, 0, BF16)
        LA_TILE_SWITCH(nv, 8, RUN);
#undef RUN
    } else if (h->dv < 16 * W) { /* 8 vectors in registers below dv = 256, 16 from it */
        token_rows(h, q, k, v, g, o, 8, 1, BF16);
    } else if (h->dv == 16 * W) {
        token_rows(h, q, k, v, g, o, 16, 0, BF16);
    } else {
        token_rows(h, q, k, v, g, o, 16, 1, BF16);
    }
}

/* One function per state type: inlined into one, the float32 sweep's
 * registers were allocated worse (a v vector and two pointers reloaded per
 * row: 8% slower in L2). */
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

static void token_avx512(const la_head *h, const float *q, const float *k, const float *v,
                         const float *g, float *o)
{
    if (h->s_bf16)
        token_bf16(h, q, k, v, g, o);
    else
        token_f32(h, q, k, v, g, o);
}


/* ---- non-causal -------------------------------------------------------- */

/* Block of scale * phi(x) for rows t0.., channels c0.., zero padded: [TB][CS]
 * for the left operand of Kh^T V, or transposed [CS][TB] for that of Qh S. */
static void pack_block(const la_head *h, const float *x, int64_t xts, float scale, int64_t t0,
                       int64_t tn, int64_t c0, int trans, float *blk)
{
    if (trans && tn < TB)
        memset(blk, 0, TB * CS * sizeof(float));
    for (int64_t t = 0; t < tn; t++)
        for (int64_t c = 0; c < CS; c += W) {
            const __mmask16 mc = la_tail(h->dk - c0 - c);
            const __m512 y = _mm512_mul_ps(_mm512_set1_ps(scale),
                                           phi_v(h->phi, la_load(mc, x + (t0 + t) * xts + c0 + c)));
            if (trans)
                scatter16(blk + c * TB + t, TB, _mm512_maskz_mov_ps(mc, y));
            else
                _mm512_store_ps(blk + t * CS + c, _mm512_maskz_mov_ps(mc, y));
        }
}

/* The driver's blocks keep the sums of one call over the whole head. */
_Static_assert(LA_NONCAUSAL_BLOCK % TB == 0, "non-causal blocks of whole TB blocks");

/* S += Kh^T V, z += column sums of Kh, in blocks of TB tokens x CS channels. */
static void noncausal_state_avx512(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv;
    _Alignas(64) float blk[TB * CS];
    for (int64_t t0 = 0; t0 < h->T; t0 += TB) {
        const int64_t tn = min64(TB, h->T - t0);
        for (int64_t c0 = 0; c0 < dk; c0 += CS) {
            const int64_t cn = min64(CS, dk - c0);
            pack_block(h, h->k, h->k_ts, 1.0f, t0, tn, c0, 0, blk);
            for (int64_t cc = 0; cc < cn; cc += MR)
                for (int64_t d0 = 0; d0 < dv; d0 += NR) {
                    const la_pass ps = {blk + cc, CS, h->v + t0 * h->v_ts + d0, h->v_ts, tn, 0};
                    tile(min64(MR, cn - cc), min64(NR, dv - d0), &ps, 1, h->s + (c0 + cc) * dv + d0,
                         dv, NULL, 1);
                }
            if (h->z)
                for (int64_t c = 0; c < cn; c += W) {
                    const __mmask16 mc = la_tail(cn - c);
                    __m512 acc = la_load(mc, h->z + c0 + c);
                    for (int64_t t = 0; t < tn; t++)
                        acc = _mm512_add_ps(acc, _mm512_load_ps(blk + t * CS + c));
                    la_store(h->z + c0 + c, mc, acc);
                }
        }
    }
}

/* O = Qh S (/ Qh z + eps), accumulated over channel blocks. */
static void noncausal_output_avx512(const la_head *h)
{
    const int64_t dk = h->dk, dv = h->dv;
    _Alignas(64) float blk[TB * CS];
    float inv[TB];
    for (int64_t t0 = 0; t0 < h->T; t0 += TB) {
        const int64_t tn = min64(TB, h->T - t0);
        if (h->z)
            for (int64_t t = 0; t < tn; t++) {
                __m512 acc = _mm512_setzero_ps();
                for (int64_t c = 0; c < dk; c += W) {
                    const __mmask16 mc = la_tail(dk - c);
                    const __m512 y = phi_v(h->phi, la_load(mc, h->q + (t0 + t) * h->q_ts + c));
                    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(h->scale), y),
                                          la_load(mc, h->z + c), acc);
                }
                inv[t] = 1.0f / (la_hsum(acc) + h->eps);
            }
        for (int64_t c0 = 0; c0 < dk; c0 += CS) {
            const int64_t cn = min64(CS, dk - c0);
            pack_block(h, h->q, h->q_ts, h->scale, t0, tn, c0, 1, blk);
            for (int64_t r0 = 0; r0 < tn; r0 += MR)
                for (int64_t d0 = 0; d0 < dv; d0 += NR) {
                    const la_pass ps = {blk + r0, TB, h->s + c0 * dv + d0, dv, cn, 0};
                    tile(min64(MR, tn - r0), min64(NR, dv - d0), &ps, 1,
                         h->o + (t0 + r0) * h->o_ts + d0, h->o_ts,
                         h->z && c0 + CS >= dk ? inv + r0 : NULL, c0 > 0);
                }
        }
    }
}

LA_FTZ_CHUNK_OPS(avx512)

/* The value-tiled recurrent forward, written once for every ISA. */
#ifndef LA_ADD_NV /* -DLA_ADD_NV=2: a variant build, to measure */
#define LA_ADD_NV 4
#endif
#ifndef LA_ADD_QUAD_NV /* quads: 16 accumulators, 9 broadcasts */
#define LA_ADD_QUAD_NV 2
#endif
#include "../additive_kernels.h"

static const la_additive_ops additive_avx512 = {
    .pack_bytes = pack_bytes_avx512,
    .chunk_pack = chunk_pack_avx512_ftz,
    .chunk_output = chunk_output_avx512_ftz,
    .chunk_state = chunk_state_avx512_ftz,
    .state_combine = state_combine_avx512_ftz,
    .feature_bytes = additive_feature_bytes,
    .features = additive_features,
    .normaliser = additive_normaliser,
    .columns = additive_columns,
    .packed_bytes = additive_packed_bytes,
    .pack = additive_pack,
    .unpack = additive_unpack,
    .token = token_avx512,
    .token_vfirst = additive_token_vfirst,
    .noncausal_state = noncausal_state_avx512,
    .noncausal_output = noncausal_output_avx512,
};

extern const la_delta_ops LA_DELTA_OPS;
extern const la_stage_ops LA_STAGE_OPS;

const la_table LA_TABLE = {
    .name = LA_TABLE_NAME,
    .isa = LINATTN_ISA_AVX512,
    .requires = LA_TABLE_REQUIRES,
    .test_only = LA_TABLE_TEST_ONLY,
    .additive = &additive_avx512,
    .delta = &LA_DELTA_OPS,
    .stage = &LA_STAGE_OPS,
    .tuning = tuning_avx512,
    .ntuning = sizeof tuning_avx512 / sizeof tuning_avx512[0],
};
