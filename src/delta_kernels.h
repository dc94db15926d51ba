/* The delta rule's kernels written once against an ISA vocabulary. An ISA
 * folder includes its vocabulary header, defines LA_DELTA_OPS (the name of
 * the ops struct to define), then includes this file. The vocabulary:
 *
 *   la_vf, LA_VW                 vector of LA_VW floats
 *   vf_zero() vf_set1(x)         constants
 *   vf_load(p) vf_store(p, x)    LA_VW floats, unaligned
 *   vf_loadn(p, n) vf_storen(p, x, n)  the first n lanes (n >= LA_VW: all);
 *                                missing lanes read as 0, nothing outside
 *                                the n floats is touched
 *   vf_fma(a, b, c)              a * b + c, one rounding
 *   vf_mul vf_sub vf_add vf_div  elementwise
 *   vf_hsum(x)                   sum of the lanes
 *   vf_hsum4(a, b, c, d, s)      s[0..4) = the sums of a, b, c, d; s[i]
 *                                depends on the i-th vector alone, summed
 *                                in the same order for every i
 *   vf_decay(x)                  e^min(x, 0); exactly 0 below LA_EXP_ZERO_BELOW
 *   vf_phi(phi, x)               the feature map
 *   vf_keep(x, n)                lanes < n of x, the others 0
 *
 * Both algorithms run on a tile of nj value columns (see delta.h). The
 * recurrent one keeps its S^T kh and output accumulators in registers for a
 * tile of up to LA_DELTA_NV vectors, so per token it makes one read-only
 * pass over the tile (S^T kh, decay folded into kh) and one read-write pass
 * (decay, rank-1 update and S^T qh together). */

#ifndef LA_DELTA_OPS
#error "define LA_DELTA_OPS (and include an ISA vocabulary) before delta_kernels.h"
#endif

#include <math.h>
#include <string.h>

#include "pack.h"
#include "outside.h"
#include "state_rows.h"
#include "tile_dispatch.h"

#ifndef LA_DELTA_NV
#define LA_DELTA_NV 4 /* vectors per tile */
#endif
/* 0: one-token sweeps do not prefetch la_head.s_next (a variant build, to
 * measure) */
#ifndef LA_DELTA_STEP_PREFETCH
#define LA_DELTA_STEP_PREFETCH 1
#endif

/* Vectors per register tile on a packed copy of the state (pack below): a
 * table may take narrower tiles there, so that a tile of dk rows fits in L1. */
#ifndef LA_DELTA_PACK_NV
#define LA_DELTA_PACK_NV LA_DELTA_NV
#endif

/* A narrower packed tile a tuning entry may choose (delta_pack_columns)
 * whose one-token sweeps get their own instances per gate, as the table's
 * and the packed width's do: reading the gate inside the sweep cost Zen
 * 4's 32-column packed tiles 0.77 -> 0.54 of the peak without a gate.
 * Every width is served (the others through the instance that reads the
 * gate); each width named adds three instances. Instances for every width
 * up to the packed one halved the avx2 table's ungated sweep on Zen 4
 * (0.80 -> 0.39), though its own instance was unchanged. */
#ifndef LA_DELTA_NARROW_NV
#define LA_DELTA_NARROW_NV LA_DELTA_PACK_NV
#endif

/* Vectors per register tile of a pair sweep (delta_tile_pairs: six
 * accumulators a vector); an integer literal, at most LA_DELTA_NV. */
#ifndef LA_DELTA_PAIR_NV
#define LA_DELTA_PAIR_NV LA_DELTA_NV
#endif

/* A one-token block on rows wider than the register tile (delta_step_rows,
 * below): its vectors of sums in registers in the sweep (0: such blocks go
 * by tiles) and in the first pass, and whether a bfloat16 state takes it. */
#ifndef LA_DELTA_ROW_NV
#define LA_DELTA_ROW_NV 0
#endif
#ifndef LA_DELTA_ROW1_NV
#define LA_DELTA_ROW1_NV LA_DELTA_ROW_NV
#endif
#ifndef LA_DELTA_ROW_BF16
#define LA_DELTA_ROW_BF16 1
#endif
enum { DELTA_ROWS_BYTES = 256 << 10 }; /* la_tuning.delta_step_rows_bytes */

/* Packed rows are their tile's width apart: not padded. On the Xeon a pad
 * of 16 floats (pack.h) measured -5% to +7% by gate in one run, and level
 * or slower in a second (3 interleaved rounds, fraction of the zmm peak,
 * pad against none: no gate 0.49-0.53 against 0.51-0.53, token 0.44-0.53
 * against 0.51-0.55, channel 0.39-0.45 against 0.42-0.49).
 * LA_DELTA_PACK_PAD: floats of pad, for a variant build. */
#ifndef LA_DELTA_PACK_PAD
#define LA_DELTA_PACK_PAD 0
#endif
enum {
    /* A step's sweep that sums the next tile's S^T k (la_head.step_acc)
     * fetches that tile's rows this many rows ahead into L2: without the
     * fetch the Xeon's model decode from memory (36 layers of 16 MiB,
     * B = 8) was 10% slower, its loads stalling the sweep; 8, 32 and 64
     * rows ahead measured no better than 16. */
    DELTA_FUSE_AHEAD = 16,
    DELTA_TILE = LA_DELTA_NV * LA_VW,
    DELTA_PACK_TILE = LA_DELTA_PACK_NV * LA_VW,
};

/* out[0..dk) = mult * phi(x); lanes past dk of the last vector are written
 * as 0 (buffers are padded to whole vectors). Unit L2 norms are the input
 * stage's (stage.h): it hands over normalised rows and phi = IDENTITY. */
LA_INLINE void delta_features(const la_head *h, const float *x, float mult, float *out)
{
    const int64_t dk = h->dk;
    const la_vf m = vf_set1(mult);
    for (int64_t c = 0; c < dk; c += LA_VW) {
        const int64_t n = dk - c;
        la_vf y = vf_phi(h->phi, vf_loadn(x + c, n));
        if (n < LA_VW) /* phi(0) may be 1 (elu+1): clear the padding lanes */
            y = vf_keep(y, n);
        vf_store(out + c, vf_mul(m, y));
    }
}

/* Decays of token t: a[c] (CHANNEL), or a[0] for all rows (TOKEN). */
LA_INLINE void delta_decays(const la_head *h, int64_t t, float *a)
{
    if (h->gate == LA_GATE_CHANNEL) {
        const float *g = h->g + t * h->g_ts;
        for (int64_t c = 0; c < h->dk; c += LA_VW)
            vf_store(a + c, vf_decay(vf_loadn(g + c, h->dk - c)));
    } else if (h->gate == LA_GATE_TOKEN) {
        const float g = h->g[t * h->g_ts];
        a[0] = g < LA_EXP_ZERO_BELOW ? 0.0f : expf(g);
    }
}

static int64_t round_vw(int64_t n) { return (n + LA_VW - 1) / LA_VW * LA_VW; }

/* ---- recurrent ----------------------------------------------------------- */

/* Features of one token: qh, kh, the decays a (a[0] for TOKEN), and kn =
 * the coefficients of S^T k with the decay folded in (CHANNEL: kh o a;
 * otherwise kh, and the TOKEN decay multiplies the sum); a fifth row kb
 * for the second token of a pair sweep (delta_pair_terms). Rows of
 * DELTA_FEATURES padded vectors. */
enum { DELTA_FEATURES = 5, DELTA_BLOCK = 32 /* tokens whose features are made at once */ };

LA_INLINE void delta_prepare(const la_head *h, int64_t t, float *f, int64_t dkp)
{
    float *qh = f, *kh = f + dkp, *a = f + 2 * dkp, *kn = f + 3 * dkp;
    delta_features(h, h->q + t * h->q_ts, h->scale, qh);
    delta_features(h, h->k + t * h->k_ts, 1.0f, kh);
    delta_decays(h, t, a);
    if (h->gate == LA_GATE_CHANNEL)
        for (int64_t c = 0; c < h->dk; c += LA_VW)
            vf_store(kn + c, vf_mul(vf_load(kh + c), vf_load(a + c)));
    else
        memcpy(kn, kh, (size_t)dkp * sizeof(float)); /* with the zero padding: the V-first
                                                        kernel reads whole vectors */
}

/* Tokens of one feature block, and where its pair terms follow its
 * features in the workspace (delta_recurrent_bytes). */
static int64_t delta_block_tokens(int64_t T) { return T < DELTA_BLOCK ? T : DELTA_BLOCK; }

/* A pair sweep (la_head.pair_tokens) runs tokens i, i+1 of a block (i
 * even) in one pass over the tile, from the state S before token i. With
 * L the decays (a scalar, a diagonal, or 1) and S_i = L_i S + kh_i u_i^T:
 *   - the second token's decayed S^T k is
 *       (L_i+1 S_i)^T kh_i+1 = S^T (L_i L_i+1 kh_i+1) + c_i u_i,
 *     c_i = kh_i . L_i+1 kh_i+1, so the pass before sums S^T kb_i+1 (kb =
 *     L_i kn_i+1; kn already holds L_i+1 kh_i+1 for CHANNEL, the TOKEN
 *     decays multiply the sums) beside S^T kn_i;
 *   - the first token's output is S_i^T qh_i = S^T (L_i qh_i) + e_i u_i,
 *     e_i = qh_i . kh_i, so S_i is never formed;
 *   - the state after both is W S + (L_i+1 kh_i) u_i^T + kh_i+1 u_i+1^T,
 *     W = L_i L_i+1: with a gate, one multiply and two FMAs per element
 *     (two of each one token at a time), without, two FMAs.
 * So the rows of token i become qa = L_i qh_i, kd = L_i+1 kh_i and (fifth
 * row) w = W (w[0] for TOKEN); kb goes in the fifth row of token i+1
 * (CHANNEL; otherwise it is kn_i+1); c_i is pair[2i], e_i pair[2i+1]
 * (and pair[2i+2] a gate's flag, below).
 *
 * Under a gate the tile need not be multiplied by W at every pair: it may
 * hold the state divided by d, the product of the decays since the tile
 * was last multiplied, while d stays at or above LA_SCALED_TILE_MIN
 * (gate.h); then the pair adds its rank-one terms divided by its new d and
 * runs the ungated pass (delta_tile_pairs). A TOKEN gate's d is one number,
 * kept by the sweep. A CHANNEL gate's is a row vector (scale), kept here:
 * while no row's d would fall below the bound and a pair follows in the
 * block, the pair's rows take it (qa d, kn_i d and kb_i+1 d read the tile
 * for the state before the pair, qh_i+1 d' after it, kd / d' and
 * kh_i+1 / d' go into it, with d' = W d); otherwise w = W d multiplies the
 * tile, d becomes 1 and pair[2i+2] is 1. d depends on the gates alone, so
 * any column split gives the same bits.
 *
 * Under a TOKEN gate pair[2i+2] is 1 where a v of the pair is too large
 * for the sweep to divide u by d (LA_SCALED_V_MAX), so that pair
 * multiplies the tile; it is -1 here, until the sweep's first tile finds
 * out (la_rows_too_large_once).
 *
 * Every even i with a successor in the block gets them; a last odd token
 * keeps its features for a one-token sweep. scale: dkp floats. */
LA_INLINE void delta_pair_terms(const la_head *h, float *f, float *pair, float *scale, int64_t n,
                                int64_t dkp)
{
    const int64_t fs = DELTA_FEATURES * dkp;
    const la_vf one = vf_set1(1.0f), least = vf_set1(LA_SCALED_TILE_MIN);
    int unit = 1; /* CHANNEL: every row's scale is 1 (scale is not read) */
    for (int64_t i = 0; i + 1 < n; i += 2) {
        float *qh = f + i * fs, *kh = qh + dkp, *a = qh + 2 * dkp, *w = qh + 4 * dkp;
        float *kn = qh + 3 * dkp;
        const float *a1 = a + fs, *kn1 = qh + fs + 3 * dkp;
        float *qh1 = qh + fs, *kh1 = qh1 + dkp, *kb1 = qh1 + 4 * dkp;
        /* CHANNEL: the rows keep their scale unless one would fall below
         * the bound or no pair follows in the block */
        const int may_keep = h->gate == LA_GATE_CHANNEL && i + 3 < n;
        la_vf c = vf_zero(), e = vf_zero(), low = vf_zero();
        for (int64_t x = 0; x < dkp; x += LA_VW) {
            c = vf_fma(vf_load(kh + x), vf_load(kn1 + x), c);
            e = vf_fma(vf_load(qh + x), vf_load(kh + x), e);
            if (may_keep) {
                la_vf d_next = vf_mul(vf_load(a + x), vf_load(a1 + x));
                if (!unit)
                    d_next = vf_mul(d_next, vf_load(scale + x));
                low = vf_flag_outside(low, d_next, least, vf_set1(INFINITY));
            }
        }
        pair[2 * i] = vf_hsum(c);
        pair[2 * i + 1] = vf_hsum(e);
        if (h->gate == LA_GATE_CHANNEL) {
            const int keep = may_keep && !vf_any_flag(low);
            pair[2 * i + 2] = (float)!keep;
            for (int64_t x = 0; x < dkp; x += LA_VW) {
                const la_vf ax = vf_load(a + x), a1x = vf_load(a1 + x);
                /* d: 1 after a pass that multiplied the tile (no products) */
                const la_vf d = unit ? one : vf_load(scale + x);
                const la_vf ad = unit ? ax : vf_mul(ax, d), wd = vf_mul(vf_mul(ax, a1x), d);
                if (!keep) {
                    vf_store(w + x, wd);
                    vf_store(kh + x, vf_mul(a1x, vf_load(kh + x)));
                } else {
                    /* d' = W d, the rank-one rows divided by it */
                    const la_vf to_tile = vf_div(one, wd);
                    vf_store(kh + x, vf_mul(vf_mul(a1x, to_tile), vf_load(kh + x)));
                    vf_store(qh1 + x, vf_mul(wd, vf_load(qh1 + x)));
                    vf_store(kh1 + x, vf_mul(to_tile, vf_load(kh1 + x)));
                    vf_store(scale + x, wd);
                }
                vf_store(kb1 + x, vf_mul(ad, vf_load(kn1 + x)));
                vf_store(qh + x, vf_mul(ad, vf_load(qh + x)));
                if (!unit)
                    vf_store(kn + x, vf_mul(d, vf_load(kn + x)));
            }
            unit = !keep;
        } else if (h->gate == LA_GATE_TOKEN) {
            const la_vf ax = vf_set1(a[0]), a1x = vf_set1(a1[0]);
            pair[2 * i + 2] = -1.0f; /* v not yet looked at (la_rows_too_large_once) */
            for (int64_t x = 0; x < dkp; x += LA_VW) {
                vf_store(qh + x, vf_mul(ax, vf_load(qh + x)));
                vf_store(kh + x, vf_mul(a1x, vf_load(kh + x)));
            }
            w[0] = a[0] * a1[0];
        }
    }
}

/* u of one vector of columns from its sum S^T kn: beta (v - a sum), a the
 * TOKEN decay (a CHANNEL one is in kn). With delta_update below, the one
 * formula of every one-token sweep, tiles and whole rows alike, so a
 * column's bits do not depend on which sweep made them. */
LA_INLINE la_vf delta_u(la_vf sum, la_vf v, la_vf at, la_vf bv, la_gate gate)
{
    return vf_mul(bv, vf_sub(v, gate == LA_GATE_TOKEN ? vf_mul(sum, at) : sum));
}

/* A vector of a state row decayed by av (under a gate) and updated by
 * kv u, one rounding for the update. */
LA_INLINE la_vf delta_update(la_vf old, la_vf u, la_vf kv, la_vf av, la_gate gate)
{
    return vf_fma(kv, u, gate == LA_GATE_NONE ? old : vf_mul(av, old));
}

/* Tokens t0..t0+n-1 on nv vectors of columns of S (rows ld elements apart;
 * the last vector wl lanes wide), their features in f (one row block of DELTA_FEATURES x dkp per
 * token). One sweep over the tile per token: row c is decayed and updated
 * for token t (S = L S + kh u^T), read out for t (o += S_c qh_c), and
 * already summed for token t+1 (acc += S_c kn_c): the state is read and
 * written once per token, and the accumulators stay in registers. s is
 * float, or with bf16 bfloat16 widened on load and rounded on store (once
 * per token; the driver uses it for one-token calls). A one-token sweep may
 * also sum the next tile's S^T k for its first token (la_head.step_acc_out),
 * and a tile whose sum was made that way skips its own (step_acc_in). */
LA_INLINE void delta_tile_tokens(const la_head *h, void *s, int64_t ld, const float *v0,
                                 float *o0, const float *f, int64_t dkp, int64_t t0, int64_t n,
                                 int nv, int64_t wl, la_gate gate, int bf16)
{
    /* locals, not h->...: vector stores may alias anything, so fields read
     * through h would be reloaded after every store of the sweep. gate is a
     * constant at each call site: GCC did not unswitch the sweep on h->gate
     * and kept two branches, a jump and a spilled accumulator in it. */
    const int64_t dk = h->dk, fs = DELTA_FEATURES * dkp;
    const int64_t v_ts = h->v_ts, o_ts = h->o_ts, beta_ts = h->beta_ts;
    /* the rows to fetch meanwhile, at their column 0 (delta_recurrent), of
     * the state's type */
    const void *next_s = LA_DELTA_STEP_PREFETCH ? h->s_next : NULL;
    const int64_t es = bf16 ? 2 : 4, row_n = nv * LA_VW;
    la_vf acc[LA_DELTA_NV], u[LA_DELTA_NV], out[LA_DELTA_NV];
#define LD(p, x) ((x) == nv - 1 ? vf_loadn((p) + (x) * LA_VW, wl) : vf_load((p) + (x) * LA_VW))
#define ST(p, x, y)                                                                               \
    ((x) == nv - 1 ? vf_storen((p) + (x) * LA_VW, (y), wl) : vf_store((p) + (x) * LA_VW, (y)))
    /* A bfloat16 sweep stores vectors x - 1 and x (x odd, both whole) at
     * once, rounded together (vf_narrow2_bf16), as the V-first step does:
     * one 64-byte store instead of two of 32 bytes (avx512bf16: one
     * conversion instead of two). Level here on Zen 4; the V-first step
     * (delta_vfirst_update2) took 5-10% less time. Such a pair is held in
     * the table's pair order (state_rows.h), its columns' v read and o
     * written in it: on avx2 (even and odd elements) the bfloat16 decode
     * step of 4 heads in L2 took 15.1-15.5 us against 18.3-18.5 (Zen 3). */
#define PAIRED(x) (bf16 && ((x) | 1) < nv && (((x) | 1) < nv - 1 || wl == LA_VW))
#define SLD(row, x)                                                                               \
    (PAIRED(x) ? vf_load_row_paired(s, (row) + ((x) & ~1) * LA_VW, (x) & 1, bf16)                 \
               : vf_load_row(s, (row) + (x) * LA_VW, (x) == nv - 1 ? wl : LA_VW, bf16))
#define SST(row, x, y) vf_store_row(s, (row) + (x) * LA_VW, (y), (x) == nv - 1 ? wl : LA_VW, bf16)
    /* the next tile's S^T k summed in this one's sweep (la_head.step_acc),
     * from its rows at s_next */
    const int fuse = h->step_acc_out && n == 1 && !bf16;
    const float *fused_s = fuse ? h->s_next : NULL;
    const float *k0 = f + 3 * dkp; /* the first token's kn, as the pass below reads it */
    for (int x = 0; x < nv; x++)
        acc[x] = h->step_acc_in ? LD(h->step_acc, x) : vf_zero();
    /* a one-token tile with a read-only pass spreads its fetch of the next
     * rows over both passes: row r at pass step 2r (the read-only pass's
     * steps first, then the sweep's), so that memory is busy in both.
     * Fetching in the sweep alone left it idle in the read-only pass: a
     * model's decode on Zen 4, one thread, went from 0.51-0.56 of the
     * read-modify-write bound to 0.63-0.76 (B = 1) and 0.62-0.63 to
     * 0.67-0.73 (B = 8); docs/kernels.md. A bfloat16 state's read-only
     * pass is short beside its sweep (widening and rounding are in the
     * sweep), and where the tuning entry says so it fetches nothing
     * (la_tuning.delta_step_bf16_sweep_fetch: on Zen 5, B = 1, 0.41-0.45
     * of the bound -> 0.52-0.56) */
    const int spread = next_s && !fuse && !h->step_acc_in && !(bf16 && h->step_bf16_sweep_fetch);
    for (int64_t c = 0; c < (h->step_acc_in ? 0 : dk); c++) { /* S^T k of the first token */
        const la_vf kv = vf_set1(k0[c]);
        if (spread && !(c & 1))
            state_fetch(next_s, c / 2 * ld, row_n, es);
        for (int x = 0; x < nv; x++)
            acc[x] = vf_fma(SLD(c * ld, x), kv, acc[x]);
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        const float *qh = f + i * fs, *kh = qh + dkp, *a = qh + 2 * dkp;
        const float *kn = i + 1 < n ? f + (i + 1) * fs + 3 * dkp : NULL;
        const la_vf at = vf_set1(gate == LA_GATE_TOKEN ? a[0] : 1.0f);
        const la_vf bv = vf_set1(h->beta[t * beta_ts]);
        const float *v = v0 + t * v_ts;
        for (int x = 0; x < nv; x++) {
            const la_vf vx = PAIRED(x) ? vf_load_paired(v + (x & ~1) * LA_VW, x & 1, bf16)
                                       : LD(v, x);
            u[x] = delta_u(acc[x], vx, at, bv, gate);
            acc[x] = vf_zero();
            out[x] = vf_zero();
        }
        /* the sweep; the last token of a block (and a step) has no next;
         * FUSE: a step that sums the next tile's S^T k meanwhile */
#define SWEEP(NEXT, FUSE)                                                                         \
    for (int64_t c = 0; c < dk; c++) {                                                            \
        const la_vf kv = vf_set1(kh[c]), qv = vf_set1(qh[c]);                                     \
        const la_vf av = gate == LA_GATE_CHANNEL ? vf_set1(a[c]) : at;                           \
        const la_vf nk = vf_set1(NEXT ? kn[c] : FUSE ? k0[c] : 0.0f);                             \
        const int64_t sr = c * ld;                                                                \
        if (!NEXT && !FUSE && next_s && !(spread && ((dk + c) & 1)))                              \
            state_fetch(next_s, spread ? (dk + c) / 2 * ld : sr, row_n, es);                     \
        if (FUSE && next_s && c + DELTA_FUSE_AHEAD < dk)                                          \
            state_fetch(next_s, sr + DELTA_FUSE_AHEAD * ld, row_n, es);                           \
        la_vf held = vf_zero(); /* an even vector waiting for its pair */                        \
        /* unrolled by force: GCC 12 kept avx512bf16's bfloat16 sweep (its body                   \
         * large with the rounding's rare fallback) a loop with out[] and                         \
         * acc[] in memory; unrolled, the step of 4 heads in L2 took 5.1 us                       \
         * against 8.0 (Zen 5) */                                                                 \
        _Pragma("GCC unroll 16") for (int x = 0; x < nv; x++) {                                   \
            const la_vf old = SLD(sr, x);                                                         \
            const la_vf y = delta_update(old, u[x], kv, av, gate);                                \
            if (!PAIRED(x))                                                                       \
                SST(sr, x, y);                                                                    \
            else if (x & 1)                                                                       \
                vf_store_row_paired(s, sr + (x - 1) * LA_VW, held, y, bf16);                      \
            else                                                                                  \
                held = y;                                                                         \
            out[x] = vf_fma(y, qv, out[x]);                                                       \
            if (NEXT)                                                                             \
                acc[x] = vf_fma(y, nk, acc[x]);                                                   \
            if (FUSE)                                                                             \
                acc[x] = vf_fma(vf_load(fused_s + sr + x * LA_VW), nk, acc[x]);                   \
        }                                                                                         \
    }
        if (kn) {
            SWEEP(1, 0)
        } else if (fuse) {
            SWEEP(0, 1)
            for (int x = 0; x < nv; x++)
                vf_store(h->step_acc + x * LA_VW, acc[x]);
        } else {
            SWEEP(0, 0)
        }
#undef SWEEP
        float *o = o0 + t * o_ts;
        for (int x = 0; x < nv; x++)
            if (!PAIRED(x))
                ST(o, x, out[x]);
            else if (x & 1)
                vf_store_paired(o + (x - 1) * LA_VW, out[x - 1], out[x], bf16);
    }
#undef LD
#undef ST
#undef SLD
#undef SST
#undef PAIRED
}

/* Tokens t0..t0+n-1 of a float tile, n even, two at a time
 * (delta_pair_terms): per pair, one read-write pass sums each row for the
 * first token's output, updates it for both tokens, reads it out for the
 * second and sums it for the next pair's S^T kn and S^T kb. The state is
 * loaded and stored once per two tokens, and a pair executes 6 FP
 * operations per element without a gate and 7 with one (8 one token at a
 * time), with six accumulators per vector (LA_DELTA_PAIR_NV vectors).
 *
 * Under a TOKEN gate the decay is one number per pair, so it need not
 * touch the tile: the tile may hold the state divided by d, the product of
 * the decays since the tile was last decayed. A pair that keeps d >=
 * LA_SCALED_TILE_MIN (gate.h) adds its rank-one terms divided by its new
 * d (u and u1 scaled once per vector) with the 6 operations of the
 * ungated pass, and its sums and outputs take d as a factor; a pair that
 * would not, and the last pair of the call, decays the tile by its decays
 * times d, and d becomes 1 again. So the tile leaves every call as the
 * state, and d depends on the gates alone: any column split gives the same
 * bits. Under a CHANNEL gate d is a row vector, folded into the rows by
 * delta_pair_terms; a pair whose flag is 0 runs the ungated pass as
 * they stand. */
LA_INLINE void delta_tile_pairs(const la_head *h, float *s, int64_t ld, const float *v0, float *o0,
                                const float *f, float *pair, int64_t dkp, int64_t t0,
                                int64_t n, int nv, int64_t wl, la_gate gate)
{
    /* locals, as in delta_tile_tokens */
    const int64_t dk = h->dk, fs = DELTA_FEATURES * dkp;
    const int64_t v_ts = h->v_ts, o_ts = h->o_ts, beta_ts = h->beta_ts;
    const int64_t kb_row = gate == LA_GATE_CHANNEL ? 4 * dkp : 3 * dkp;
    la_vf acc[LA_DELTA_PAIR_NV], acc1[LA_DELTA_PAIR_NV], u[LA_DELTA_PAIR_NV],
        u1[LA_DELTA_PAIR_NV], out[LA_DELTA_PAIR_NV], out1[LA_DELTA_PAIR_NV];
#define LD(p, x) ((x) == nv - 1 ? vf_loadn((p) + (x) * LA_VW, wl) : vf_load((p) + (x) * LA_VW))
#define ST(p, x, y)                                                                               \
    ((x) == nv - 1 ? vf_storen((p) + (x) * LA_VW, (y), wl) : vf_store((p) + (x) * LA_VW, (y)))
    for (int x = 0; x < nv; x++)
        acc[x] = acc1[x] = vf_zero();
    for (int64_t c = 0; c < dk; c++) { /* S^T kn and S^T kb of the first pair */
        const la_vf kv = vf_set1(f[3 * dkp + c]), kv1 = vf_set1(f[fs + kb_row + c]);
        for (int x = 0; x < nv; x++) {
            const la_vf old = LD(s + c * ld, x);
            acc[x] = vf_fma(old, kv, acc[x]);
            acc1[x] = vf_fma(old, kv1, acc1[x]);
        }
    }
    float d = 1.0f; /* TOKEN: the state is d times the tile (above) */
    for (int64_t i = 0; i < n; i += 2) {
        const int64_t t = t0 + i;
        /* token i's rows as delta_pair_terms left them, token i+1's as made */
        const float *qa = f + i * fs, *kd = qa + dkp, *a = qa + 2 * dkp, *w = qa + 4 * dkp;
        const float *qh1 = qa + fs, *kh1 = qh1 + dkp, *a1 = qh1 + 2 * dkp;
        const float *kn = i + 2 < n ? f + (i + 2) * fs + 3 * dkp : NULL;
        const float *kb = kn ? f + (i + 3) * fs + kb_row : NULL;
        /* TOKEN: d after this pair, its decays times d, if the tile keeps
         * them; CHANNEL: the rows are scaled (delta_pair_terms) */
        const float d_next = gate == LA_GATE_TOKEN ? w[0] * d : 1.0f;
        const int scaled = gate == LA_GATE_TOKEN
                               ? kn && d_next >= LA_SCALED_TILE_MIN &&
                                     !la_rows_too_large_once(pair + 2 * i + 2, h->v + t * h->v_ts,
                                                             h->v_ts, 2, h->dv)
                           : gate == LA_GATE_CHANNEL ? pair[2 * i + 2] == 0.0f
                                                     : 0;
        /* the sums of the last pass times d are the state's */
        const la_vf at = vf_set1(gate == LA_GATE_TOKEN ? a[0] * d : 1.0f);
        const la_vf at1 = vf_set1(gate == LA_GATE_TOKEN ? a1[0] : 1.0f);
        const la_vf wt = vf_set1(gate == LA_GATE_TOKEN ? w[0] * d : 1.0f);
        const la_vf bv = vf_set1(h->beta[t * beta_ts]), bv1 = vf_set1(h->beta[(t + 1) * beta_ts]);
        const la_vf cv = vf_set1(pair[2 * i]);
        const la_vf to_tile = vf_set1(scaled ? 1.0f / d_next : 1.0f);
        const float *v = v0 + t * v_ts, *v1 = v + v_ts;
        /* the next pair's o rows, fetched for writing: a first store to a
         * line waits for it (with no gate 2% of a T = 4096 forward on the
         * Xeon; token and channel gates level) */
        if (i + 3 < n)
            for (int x = 0; x < nv; x++) {
                __builtin_prefetch(o0 + (t + 2) * o_ts + x * LA_VW, 1, 2);
                __builtin_prefetch(o0 + (t + 3) * o_ts + x * LA_VW, 1, 2);
            }
        for (int x = 0; x < nv; x++) {
            u[x] = delta_u(acc[x], LD(v, x), at, bv, gate);
            /* the second token's S^T k: its decay times (the first's decay
             * times S^T kb, plus c u) */
            const la_vf dk1 = gate == LA_GATE_TOKEN
                                  ? vf_mul(at1, vf_fma(cv, u[x], vf_mul(at, acc1[x])))
                                  : vf_fma(cv, u[x], acc1[x]);
            u1[x] = vf_mul(bv1, vf_sub(LD(v1, x), dk1));
            if (gate == LA_GATE_TOKEN) { /* the terms as the tile holds them */
                u[x] = vf_mul(u[x], to_tile);
                u1[x] = vf_mul(u1[x], to_tile);
            }
            acc[x] = acc1[x] = out[x] = out1[x] = vf_zero();
        }
        /* GATED: the pass decays the tile (wv); otherwise it only adds */
#define PAIR_SWEEP(NEXT, GATED)                                                                   \
    for (int64_t c = 0; c < dk; c++) {                                                            \
        const la_vf qv = vf_set1(qa[c]), kv = vf_set1(kd[c]);                                     \
        const la_vf qv1 = vf_set1(qh1[c]), kv1 = vf_set1(kh1[c]);                                 \
        const la_vf wv = GATED && gate == LA_GATE_CHANNEL ? vf_set1(w[c]) : wt;                   \
        const la_vf nk = vf_set1(NEXT ? kn[c] : 0.0f), nk1 = vf_set1(NEXT ? kb[c] : 0.0f);        \
        float *row = s + c * ld;                                                                  \
        for (int x = 0; x < nv; x++) {                                                            \
            const la_vf old = LD(row, x);                                                         \
            out[x] = vf_fma(old, qv, out[x]);                                                     \
            const la_vf y1 = !GATED ? vf_fma(kv1, u1[x], vf_fma(kv, u[x], old))                   \
                                    : vf_fma(wv, old, vf_fma(kv, u[x], vf_mul(kv1, u1[x])));      \
            ST(row, x, y1);                                                                       \
            out1[x] = vf_fma(y1, qv1, out1[x]);                                                   \
            if (NEXT) {                                                                           \
                acc[x] = vf_fma(y1, nk, acc[x]);                                                  \
                acc1[x] = vf_fma(y1, nk1, acc1[x]);                                               \
            }                                                                                     \
        }                                                                                         \
    }
        const int gated = gate != LA_GATE_NONE && !scaled;
        if (kn && gated) {
            PAIR_SWEEP(1, 1)
        } else if (kn) {
            PAIR_SWEEP(1, 0)
        } else if (gated) {
            PAIR_SWEEP(0, 1)
        } else {
            PAIR_SWEEP(0, 0)
        }
#undef PAIR_SWEEP
        /* outputs: the first reads the tile before the pass (times d), the
         * second after it (times d_next where it kept the decays) */
        const float d_out = scaled ? d_next : 1.0f;
        const la_vf dv0 = vf_set1(d), dv1 = vf_set1(d_out), ev = vf_set1(pair[2 * i + 1] * d_out);
        float *o = o0 + t * o_ts, *o1 = o + o_ts;
        for (int x = 0; x < nv; x++) {
            if (gate == LA_GATE_TOKEN) {
                ST(o, x, vf_fma(ev, u[x], vf_mul(dv0, out[x])));
                ST(o1, x, vf_mul(dv1, out1[x]));
            } else {
                ST(o, x, vf_fma(ev, u[x], out[x]));
                ST(o1, x, out1[x]);
            }
        }
        d = d_out;
    }
#undef LD
#undef ST
}

/* A unit of work is up to 128 value columns (several register tiles), so
 * the features of a token are made once for all of them. */
static int64_t delta_tile_columns(int64_t dk, int64_t dv)
{
    (void)dk;
    (void)dv;
    return DELTA_TILE > 128 ? DELTA_TILE : 128 / DELTA_TILE * DELTA_TILE;
}

static size_t delta_recurrent_bytes(int64_t T, int64_t dk, int64_t nj)
{
    /* the features of a block and the rows' scale (delta_pair_terms),
     * then its pair terms (two floats a token) */
    const size_t block = la_size_of_dim(delta_block_tokens(T));
    const size_t dkp = la_size_of_dim(round_vw(dk));
    const size_t tiles = la_size_floats(la_size_add(
        la_size_mul(la_size_add(la_size_mul(DELTA_FEATURES, block), 1), dkp),
        la_size_mul(2, block)));
    /* a block of one token on whole rows (a step, or the last block of a
     * longer call): its sums after the token's features */
    const size_t rows = LA_DELTA_ROW_NV
                            ? la_size_floats(la_size_add(la_size_mul(DELTA_FEATURES, dkp),
                                                         la_size_of_dim(round_vw(nj))))
                            : 0;
    return tiles > rows ? tiles : rows;
}

/* A whole tile of nv vectors (a constant: no masked accesses) under a
 * constant gate and state type. */
LA_INLINE void delta_tile_whole(const la_head *h, void *s, int64_t ld, const float *v, float *o,
                                const float *f, int64_t dkp, int64_t t0, int64_t n, int nv,
                                la_gate gate, int bf16)
{
    delta_tile_tokens(h, s, ld, v, o, f, dkp, t0, n, nv, LA_VW, gate, bf16);
}

/* (whole tiles, per gate: LA_PER_GATE) */
#define DELTA_WHOLE(g, NV) delta_tile_whole(h, s, ld, v, o, f, dkp, t0, n, NV, g, bf16)

/* The pairs of a block's tokens (pair: its pair terms) on sub-tiles of
 * LA_DELTA_PAIR_NV vectors of a float tile, each sub-tile through all of
 * them (the columns are independent); the number of pairs and every sum
 * are the same for any tile width, so any column split gives the same
 * bits. A last odd token is left to delta_tile_tokens. */
static void delta_pairs_dispatch(const la_head *h, float *s, int64_t ld, const float *v, float *o,
                                 const float *f, float *pair, int64_t dkp, int64_t t0,
                                 int64_t even, int nv, int64_t wl)
{
#define DELTA_PAIRS_AT(kk, kwl, g)                                                                \
    delta_tile_pairs(h, s + x0 * LA_VW, ld, v + x0 * LA_VW, o + x0 * LA_VW, f, pair, dkp, t0,    \
                     even, kk, kwl, g)
#define DELTA_PAIRS_WHOLE(g, NV) DELTA_PAIRS_AT(NV, LA_VW, g)
#define DELTA_PAIRS(kk) DELTA_PAIRS_AT(kk, kwl, h->gate)
    LA_SUB_TILES(nv, wl, LA_DELTA_PAIR_NV, h->gate, DELTA_PAIRS_WHOLE, DELTA_PAIRS);
#undef DELTA_PAIRS
#undef DELTA_PAIRS_WHOLE
#undef DELTA_PAIRS_AT
}

/* One sweep function per gate and state type for whole tiles of the
 * table's width, and for float tiles of its packed width and of its
 * narrow width (LA_DELTA_NARROW_NV); other tiles (a last vector not full,
 * tiles narrowed for threads) read the gate. With pair (a float state,
 * la_head.pair_tokens), the block's tokens go in pairs and a last odd one
 * alone. Instantiated once per state type (below), so that bf16 is a
 * constant in every sweep: with it a run-time value, the bfloat16 sweep's
 * paired stores cost the float32 step on Zen 4 0.59-0.62 -> 0.44-0.49 of
 * the bound (B = 16). */
LA_INLINE void delta_tile_typed(const la_head *h, void *s, int64_t ld, const float *v, float *o,
                                const float *f, float *pair, int64_t dkp, int64_t t0, int64_t n,
                                int nv, int64_t wl, int bf16)
{
    if (pair && n >= 2) {
        const int64_t even = n & ~(int64_t)1;
        delta_pairs_dispatch(h, s, ld, v, o, f, pair, dkp, t0, even, nv, wl);
        f += even * DELTA_FEATURES * dkp;
        t0 += even;
        n -= even;
        if (n == 0)
            return;
    }
#define DELTA_TOKENS(k) delta_tile_tokens(h, s, ld, v, o, f, dkp, t0, n, k, wl, h->gate, bf16)
    if (wl == LA_VW && nv == LA_DELTA_NV)
        LA_PER_GATE(h->gate, DELTA_WHOLE, LA_DELTA_NV);
#if LA_DELTA_PACK_NV != LA_DELTA_NV
    else if (wl == LA_VW && nv == LA_DELTA_PACK_NV && !bf16)
        LA_PER_GATE(h->gate, DELTA_WHOLE, LA_DELTA_PACK_NV);
#endif
#if LA_DELTA_NARROW_NV != LA_DELTA_PACK_NV
    else if (wl == LA_VW && nv == LA_DELTA_NARROW_NV && !bf16)
        LA_PER_GATE(h->gate, DELTA_WHOLE, LA_DELTA_NARROW_NV);
#endif
    else
        LA_TILE_SWITCH(nv, LA_DELTA_NV, DELTA_TOKENS);
#undef DELTA_TOKENS
}
#undef DELTA_WHOLE

static void delta_tile_f32(const la_head *h, float *s, int64_t ld, const float *v, float *o,
                           const float *f, float *pair, int64_t dkp, int64_t t0, int64_t n, int nv,
                           int64_t wl)
{
    delta_tile_typed(h, s, ld, v, o, f, pair, dkp, t0, n, nv, wl, 0);
}

static void delta_tile_bf16(const la_head *h, uint16_t *s, int64_t ld, const float *v, float *o,
                            const float *f, int64_t dkp, int64_t t0, int64_t n, int nv, int64_t wl)
{
    delta_tile_typed(h, s, ld, v, o, f, NULL, dkp, t0, n, nv, wl, 1);
}

/* ---- a decode step on whole rows
 *
 * A one-token call whose columns are wider than the register tile (a float
 * or bfloat16 K-first state where it lies; also a longer call's last block
 * when it is one token), on a head of at most la_head.step_rows_bytes,
 * reads and writes every row whole, in order, in two passes: S^T k, then
 * the update and read-out. Tiles read each row in pieces a tile apart, a
 * pattern the prefetchers do not follow: from memory, on Zen 4, avx512
 * steps of 128 x 256 heads ran at 0.37-0.43 of the read-modify-write
 * bound on tiles, 0.58-0.61 on whole rows (docs/kernels.md). Larger heads
 * keep their tiles: both passes need the head in L2 while the next one
 * comes in, and there the tiles' fetch of one tile ahead measured better.
 *
 * The first n1 vectors of columns keep their sums S^T k in registers, the
 * others in `sums` (round_vw(nj) floats of the workspace); u of every
 * column then goes to `sums`; the sweep keeps the outputs of the first n2
 * vectors in registers and the others' in o itself, zeroed once u no
 * longer needs v. Each column gets the operations delta_tile_tokens gives
 * it, in the same order, wherever its sums are kept: the same bits as the
 * tiles, for any n1, n2 and column split. The next state's rows are
 * fetched as a tile with a read-only pass fetches them: over both passes,
 * or a bfloat16 state's in the sweep alone where the tuning entry says so
 * (36 layers of 16 heads of 128 x 256 on Zen 5, B = 1: 0.46 -> 0.55 of the
 * bound). */

#if LA_DELTA_ROW_NV
/* Vector x of the columns past the registers (n lanes): S^T k so far. */
LA_INLINE void delta_row_sum(const void *s, int64_t sr, float *sums, int64_t x, la_vf kv,
                             int64_t n, int bf16)
{
    const la_vf old = vf_load(sums + x * LA_VW);
    vf_store(sums + x * LA_VW, vf_fma(vf_load_row(s, sr + x * LA_VW, n, bf16), kv, old));
}

/* u of vector x (n lanes) from its S^T k in sum. */
LA_INLINE la_vf delta_row_u(la_vf sum, const float *v, int64_t x, int64_t n, la_vf at, la_vf bv,
                            la_gate gate)
{
    return delta_u(sum, vf_loadn(v + x * LA_VW, n), at, bv, gate);
}

/* Vector x of row sr updated by kv u (delta_update), not stored. */
LA_INLINE la_vf delta_row_new(const void *s, int64_t sr, int64_t x, la_vf u, la_vf kv, la_vf av,
                              int64_t n, la_gate gate, int bf16)
{
    return delta_update(vf_load_row(s, sr + x * LA_VW, n, bf16), u, kv, av, gate);
}

/* Vector x of the columns past the registers: updated, stored and read
 * out into o. */
LA_INLINE void delta_row_out(void *s, int64_t sr, const float *sums, float *o, int64_t x,
                             la_vf kv, la_vf qv, la_vf av, int64_t n, la_gate gate, int bf16)
{
    const la_vf y = delta_row_new(s, sr, x, vf_load(sums + x * LA_VW), kv, av, n, gate, bf16);
    vf_store_row(s, sr + x * LA_VW, y, n, bf16);
    vf_storen(o + x * LA_VW, vf_fma(y, qv, vf_loadn(o + x * LA_VW, n)), n);
}

/* The register loops unrolled before scalar replacement: otherwise GCC 12
 * kept the 16 sums of avx512 in an array on the stack (1.3x slower in L2). */
#define LA_UNROLL_ROWS _Pragma("GCC unroll 16")

/* One token on nj >= n1 * LA_VW columns of rows ld elements apart (s at
 * the first column, of the state's type; v and o at it too); f holds the
 * token's features. n1 >= n2 (even, for bfloat16's paired stores), gate
 * and bf16 are constants at each call site. */
LA_INLINE void delta_step_rows(const la_head *h, void *s, int64_t ld, const float *v, float *o,
                               const float *f, int64_t dkp, int64_t nj, float *sums, int n1,
                               int n2, la_gate gate, int bf16)
{
    const int64_t dk = h->dk, es = bf16 ? 2 : 4;
    const int64_t nv = (nj + LA_VW - 1) / LA_VW, wl = nj - (nv - 1) * LA_VW;
    const float *qh = f, *kh = f + dkp, *a = f + 2 * dkp, *k0 = f + 3 * dkp;
    const void *next_s = LA_DELTA_STEP_PREFETCH ? h->s_next : NULL;
    const int late = bf16 && h->step_bf16_sweep_fetch; /* in the sweep alone (as the tiles) */
    const la_vf at = vf_set1(gate == LA_GATE_TOKEN ? a[0] : 1.0f);
    const la_vf bv = vf_set1(h->beta[0]);
    la_vf r[LA_DELTA_ROW1_NV];
    LA_UNROLL_ROWS for (int x = 0; x < n1; x++)
        r[x] = vf_zero();
    for (int64_t x = n1; x < nv; x++)
        vf_store(sums + x * LA_VW, vf_zero());
    for (int64_t c = 0; c < dk; c++) { /* S^T k; the next state's row c / 2 */
        const la_vf kv = vf_set1(k0[c]);
        const int64_t sr = c * ld;
        if (next_s && !late && !(c & 1))
            state_fetch(next_s, c / 2 * ld, nj, es);
        LA_UNROLL_ROWS for (int x = 0; x < n1; x++)
            r[x] = vf_fma(vf_load_row(s, sr + x * LA_VW, LA_VW, bf16), kv, r[x]);
        for (int64_t x = n1; x < nv - 1; x++)
            delta_row_sum(s, sr, sums, x, kv, LA_VW, bf16);
        if (nv > n1)
            delta_row_sum(s, sr, sums, nv - 1, kv, wl, bf16);
    }
    LA_UNROLL_ROWS for (int x = 0; x < n1; x++)
        vf_store(sums + x * LA_VW, delta_row_u(r[x], v, x, LA_VW, at, bv, gate));
    for (int64_t x = n1; x < nv; x++) {
        const int64_t n = x == nv - 1 ? wl : LA_VW;
        vf_store(sums + x * LA_VW, delta_row_u(vf_load(sums + x * LA_VW), v, x, n, at, bv, gate));
    }
    for (int64_t x = n2; x < nv; x++) /* after every u: o may be v */
        vf_storen(o + x * LA_VW, vf_zero(), x == nv - 1 ? wl : LA_VW);
    LA_UNROLL_ROWS for (int x = 0; x < n2; x++)
        r[x] = vf_zero();
    for (int64_t c = 0; c < dk; c++) { /* the update and read-out; the next state's rest */
        const la_vf kv = vf_set1(kh[c]), qv = vf_set1(qh[c]);
        const la_vf av = gate == LA_GATE_CHANNEL ? vf_set1(a[c]) : at;
        const int64_t sr = c * ld;
        if (next_s && (late || !((dk + c) & 1)))
            state_fetch(next_s, late ? sr : (dk + c) / 2 * ld, nj, es);
        la_vf held = vf_zero(); /* bfloat16: an even vector waiting for its pair */
        LA_UNROLL_ROWS for (int x = 0; x < n2; x++) {
            const la_vf y = delta_row_new(s, sr, x, vf_load(sums + x * LA_VW), kv, av, LA_VW,
                                          gate, bf16);
            if (!bf16)
                vf_store((float *)s + sr + x * LA_VW, y);
            else if (x & 1) /* two vectors rounded and stored at once (delta_tile_tokens) */
                vf_store_row2(s, sr + (x - 1) * LA_VW, held, y, 1);
            else
                held = y;
            r[x] = vf_fma(y, qv, r[x]);
        }
        for (int64_t x = n2; x < nv - 1; x++)
            delta_row_out(s, sr, sums, o, x, kv, qv, av, LA_VW, gate, bf16);
        if (nv > n2)
            delta_row_out(s, sr, sums, o, nv - 1, kv, qv, av, wl, gate, bf16);
    }
    LA_UNROLL_ROWS for (int x = 0; x < n2; x++)
        vf_store(o + x * LA_VW, r[x]);
}

/* (per gate: LA_PER_GATE) */
#define DELTA_ROWS(g, N1)                                                                         \
    delta_step_rows(h, s, ld, v, o, f, dkp, nj, sums, N1,                                         \
                    N1 < LA_DELTA_ROW_NV ? N1 : LA_DELTA_ROW_NV, g, bf16)

/* Registers for as many sums as the columns have whole vectors, up to
 * LA_DELTA_ROW1_NV in the first pass and LA_DELTA_ROW_NV in the sweep
 * (nj > DELTA_TILE has LA_DELTA_NV). */
LA_INLINE void delta_step_rows_typed(const la_head *h, void *s, int64_t ld, const float *v,
                                     float *o, const float *f, int64_t dkp, int64_t nj,
                                     float *sums, int bf16)
{
    _Static_assert(LA_DELTA_ROW1_NV >= LA_DELTA_ROW_NV && LA_DELTA_ROW_NV >= LA_DELTA_NV &&
                       LA_DELTA_ROW1_NV <= 16 && LA_DELTA_ROW_NV % 2 == 0 &&
                       LA_DELTA_NV % 2 == 0,
                   "row registers: a tile's at least, 16 at most (LA_UNROLL_ROWS), even");
    if (nj >= LA_DELTA_ROW1_NV * LA_VW)
        LA_PER_GATE(h->gate, DELTA_ROWS, LA_DELTA_ROW1_NV);
    else if (nj >= LA_DELTA_ROW_NV * LA_VW)
        LA_PER_GATE(h->gate, DELTA_ROWS, LA_DELTA_ROW_NV);
    else
        LA_PER_GATE(h->gate, DELTA_ROWS, LA_DELTA_NV);
}
#undef DELTA_ROWS

static void delta_step_rows_f32(const la_head *h, float *s, int64_t ld, const float *v, float *o,
                                const float *f, int64_t dkp, int64_t nj, float *sums)
{
    delta_step_rows_typed(h, s, ld, v, o, f, dkp, nj, sums, 0);
}

static void delta_step_rows_bf16(const la_head *h, uint16_t *s, int64_t ld, const float *v,
                                 float *o, const float *f, int64_t dkp, int64_t nj, float *sums)
{
    delta_step_rows_typed(h, s, ld, v, o, f, dkp, nj, sums, 1);
}
#endif

/* A one-token call on a float K-first state sweeps tiles of
 * h->step_columns (whole vectors, at most the table's tile), each sweep
 * fetching the next tile's rows meanwhile. */
static int64_t delta_step_tile(const la_head *h)
{
    const int64_t w = (h->step_columns + LA_VW - 1) / LA_VW * LA_VW;
    return w > 0 && w < DELTA_TILE ? w : DELTA_TILE;
}

/* The packed copy's tile for a tuning entry's delta_pack_columns n. */
static int64_t delta_pack_columns(int64_t n)
{
    const int64_t w = (n + LA_VW - 1) / LA_VW * LA_VW;
    return w > 0 && w < DELTA_PACK_TILE ? w : DELTA_PACK_TILE;
}

static void delta_recurrent(const la_head *h, int64_t j0, int64_t nj, void *ws)
{
    const int64_t dkp = round_vw(h->dk);
    /* a decode step: on a float state, in step tiles (and fused); on
     * either type, fetching the rows it works on next */
    const int step = h->T == 1 && !h->s_packed;
    const int one_token = step && !h->s_bf16;
    const int64_t es = h->s_bf16 ? 2 : 4;
    const char *state = h->s_bf16 ? (const char *)h->s_bf16 : (const char *)h->s;
    const int64_t tw = h->s_packed ? h->pack_tile : one_token ? delta_step_tile(h) : DELTA_TILE;
    float *f = ws;
    /* pairs of tokens on a float state (la_head.pair_tokens): the rows'
     * scale and their terms after the features */
    float *scale = f + delta_block_tokens(h->T) * DELTA_FEATURES * dkp;
    float *pair = h->pair_tokens && !h->s_bf16 ? scale + dkp : NULL;
    float step_acc[DELTA_TILE]; /* a step's next tile's S^T k (la_head.step_acc) */
    int summed = 0;             /* this tile's is in step_acc */
#if LA_DELTA_ROW_NV
    const int64_t rows_bytes = h->step_rows_bytes > 0 ? h->step_rows_bytes : DELTA_ROWS_BYTES;
    if (step && nj > DELTA_TILE && h->dk * nj * es <= rows_bytes &&
        (LA_DELTA_ROW_BF16 || !h->s_bf16)) {
        la_head th = *h;
        th.s_next = h->s_next ? (const char *)h->s_next + j0 * es : NULL;
        delta_prepare(h, 0, f, dkp);
        float *sums = f + DELTA_FEATURES * dkp;
        if (h->s_bf16)
            delta_step_rows_bf16(&th, h->s_bf16 + j0, h->dv, h->v + j0, h->o + j0, f, dkp, nj,
                                 sums);
        else
            delta_step_rows_f32(&th, h->s + j0, h->dv, h->v + j0, h->o + j0, f, dkp, nj, sums);
        return;
    }
#endif
    for (int64_t t0 = 0; t0 < h->T; t0 += DELTA_BLOCK) {
        const int64_t n = h->T - t0 < DELTA_BLOCK ? h->T - t0 : DELTA_BLOCK;
        for (int64_t i = 0; i < n; i++)
            delta_prepare(h, t0 + i, f + i * DELTA_FEATURES * dkp, dkp);
        if (pair)
            delta_pair_terms(h, f, pair, scale, n, dkp);
        for (int64_t jb = j0; jb < j0 + nj; jb += tw) {
            const int64_t width = j0 + nj - jb < tw ? j0 + nj - jb : tw;
            const int nv = (int)((width + LA_VW - 1) / LA_VW);
            const int64_t wl = width - (int64_t)(nv - 1) * LA_VW;
            float *o = h->o + jb;
            const float *v = h->v + jb;
            /* what a one-token sweep fetches meanwhile: the next tile of
             * this state, else the first tile of the next state
             * (la_head.s_next) */
            la_head th = *h;
            th.s_next = step && jb + tw < j0 + nj ? state + (jb + tw) * es
                        : h->s_next               ? (const char *)h->s_next + j0 * es
                                                  : NULL;
            /* a step's tile and the next both whole and as wide: the next
             * one's read-only pass runs inside this one's sweep */
            th.step_acc = step_acc;
            th.step_acc_in = summed;
            th.step_acc_out = h->step_fuse && one_token && width == tw && jb + 2 * tw <= j0 + nj;
            summed = th.step_acc_out;
            /* (whole-tile sweeps instantiated per gate: see delta_tile_tokens) */
            if (h->s_bf16)
                delta_tile_bf16(&th, h->s_bf16 + jb, h->dv, v, o, f, dkp, t0, n, nv, wl);
            else if (h->s_packed)
                delta_tile_f32(&th,
                               la_packed_tile(h->s, h->dk, tw + LA_DELTA_PACK_PAD, (jb - j0) / tw),
                               tw + LA_DELTA_PACK_PAD, v, o, f, pair, dkp, t0, n, nv, wl);
            else
                delta_tile_f32(&th, h->s + jb, h->dv, v, o, f, pair, dkp, t0, n, nv, wl);
        }
    }
}

/* The recurrent form on a V-first state: value column j is the row of dk
 * floats at s + j * s_vld. Per token and column: acc = S_j . kn,
 * u = beta (v_j - a acc), S_j = L S_j + u kh, o_j = S_j . qh, the rows in
 * L1 for a block of tokens. Columns go in groups of VFIRST_ROWS, so that
 * their dot products are independent chains in flight together, their
 * horizontal sums one vf_hsum4, and the loads of kn, kh, qh and the decays
 * are shared by the group. A row's arithmetic is the same in a group and
 * alone (two dot accumulators, one output accumulator, its own lane of
 * vf_hsum4), so the results do not depend on where (j0, nj) cut the
 * columns. The state before the call is read from `from` (h->s_from, or s
 * itself) by the first token, which writes s, so a call can move a state
 * from one slot to another with no copy first and the same bits. */
enum { VFIRST_ROWS = 4 };

/* Chunk c (w lanes) of rows r < R: read from `from`, decayed, updated by
 * u_r kh, stored to s, and summed into out[r] against qh. */
LA_INLINE void delta_vfirst_update(const void *from, void *s, const int64_t *row, int bf16, int R,
                                   int64_t c, int64_t w, const float *kh, const float *qh,
                                   const float *a, la_vf at, const la_vf *uv, la_vf *out,
                                   la_gate gate)
{
    const la_vf kv = vf_load(kh + c), qv = vf_load(qh + c);
    const la_vf av = gate == LA_GATE_CHANNEL ? vf_load(a + c) : at;
    for (int r = 0; r < R; r++) {
        const la_vf old = vf_load_row(from, row[r] + c, w, bf16);
        const la_vf y = vf_fma(kv, uv[r], gate == LA_GATE_NONE ? old : vf_mul(av, old));
        vf_store_row(s, row[r] + c, y, w, bf16);
        out[r] = vf_fma(y, qv, out[r]);
    }
}

/* The same on whole chunks c and c + LA_VW of a bfloat16 state, both
 * stored at once (rounded together, one store), each out[r] summing them
 * in the order of two single chunks: a V-first bfloat16 pool's decode
 * step on Zen 4 went from 1556-1628 to 1466-1514 us (B = 16, H = 32, 4
 * interleaved rounds). The two chunks are in the table's pair order
 * (state_rows.h), as the token's features are (delta_features_paired). A
 * separate function, so that the float32 step's code stays as it was. */
LA_INLINE void delta_vfirst_update2(const void *from, void *s, const int64_t *row, int R,
                                    int64_t c, const float *kh, const float *qh, const float *a,
                                    la_vf at, const la_vf *uv, la_vf *out, la_gate gate)
{
    const int64_t c1 = c + LA_VW;
    const la_vf kv = vf_load(kh + c), qv = vf_load(qh + c), kv1 = vf_load(kh + c1),
                qv1 = vf_load(qh + c1);
    const la_vf av = gate == LA_GATE_CHANNEL ? vf_load(a + c) : at;
    const la_vf av1 = gate == LA_GATE_CHANNEL ? vf_load(a + c1) : at;
    for (int r = 0; r < R; r++) {
        const la_vf old = vf_load_row_paired(from, row[r] + c, 0, 1);
        const la_vf old1 = vf_load_row_paired(from, row[r] + c, 1, 1);
        const la_vf y = vf_fma(kv, uv[r], gate == LA_GATE_NONE ? old : vf_mul(av, old));
        const la_vf y1 = vf_fma(kv1, uv[r], gate == LA_GATE_NONE ? old1 : vf_mul(av1, old1));
        vf_store_row_paired(s, row[r] + c, y, y1, 1);
        out[r] = vf_fma(y, qv, out[r]);
        out[r] = vf_fma(y1, qv1, out[r]);
    }
}

/* S_j . kn of rows r < R: acc[r][0] + acc[r][1], two accumulators per row
 * (2R chains in flight), the same operations in either order. by_row: row
 * after row, so that the state comes from memory in address order (four
 * rows interleaved cost a step 25% on Zen 3: the hardware prefetchers
 * follow one stream better than four); else chunk after chunk, the rows
 * (in L1 after the first token) sharing each load of kn. A decode step
 * takes the tuning entry's order (la_head.vfirst_dot_interleave): on Zen
 * 5 interleaved rows took a V-first float32 decode step of 4 heads in L2
 * from 7.4 to 6.5 us. */
LA_INLINE void delta_vfirst_dot(const void *s, const int64_t *row, int bf16, int R, int by_row,
                                const float *kn, int64_t dk, rows_fetch *fetch, la_vf acc[][2])
{
    const int64_t dkw = dk / LA_VW * LA_VW;
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = vf_zero();
#define DOT_PAIRS(r0, r1)                                                                         \
    for (int r = r0; r < r1; r++) {                                                               \
        acc[r][0] = vf_fma(vf_load_row_paired(s, row[r] + c, 0, bf16), vf_load(kn + c),           \
                           acc[r][0]);                                                            \
        acc[r][1] = vf_fma(vf_load_row_paired(s, row[r] + c, 1, bf16), vf_load(kn + c + LA_VW),   \
                           acc[r][1]);                                                            \
    }
    /* the fetches outside the loops that index acc, so that those unroll
     * with acc in registers */
    if (by_row) {
        for (int q = 0; q < R; q++) {
            rows_fetch_step(fetch, (int)(dkw / LA_VW / 2 * 2));
            for (int64_t c = 0; c + 2 * LA_VW <= dkw; c += 2 * LA_VW)
                DOT_PAIRS(q, q + 1)
        }
    } else {
        for (int64_t c = 0; c + 2 * LA_VW <= dkw; c += 2 * LA_VW) {
            rows_fetch_step(fetch, 2 * R);
            DOT_PAIRS(0, R)
        }
    }
#undef DOT_PAIRS
    int64_t c = dkw / (2 * LA_VW) * (2 * LA_VW);
    if (c < dkw) {
        rows_fetch_step(fetch, R);
        for (int r = 0; r < R; r++)
            acc[r][0] = vf_fma(vf_load_row(s, row[r] + c, LA_VW, bf16), vf_load(kn + c), acc[r][0]);
        c += LA_VW;
    }
    if (c < dk) { /* kn is padded with zeros; the row is not */
        rows_fetch_step(fetch, R);
        for (int r = 0; r < R; r++)
            acc[r][1] =
                vf_fma(vf_load_row(s, row[r] + c, dk - c, bf16), vf_load(kn + c), acc[r][1]);
    }
}

/* The coefficients u of token i (features at qh) for rows r < R of a
 * group: u_r = beta (v_j+r - a S_j+r . kn). by_row: see delta_vfirst_dot;
 * fetch: the stream beside the group's loads (none: all zeros). */
LA_INLINE void delta_vfirst_u(const la_head *h, const void *s, const int64_t *row, int bf16, int R,
                              int by_row, int64_t j, int64_t t, const float *qh, int64_t dkp,
                              la_gate gate, rows_fetch fetch, float u[4])
{
    const float *a = qh + 2 * dkp, *kn = qh + 3 * dkp;
    la_vf acc[VFIRST_ROWS][2];
    if (by_row)
        delta_vfirst_dot(s, row, bf16, R, 1, kn, h->dk, &fetch, acc);
    else
        delta_vfirst_dot(s, row, bf16, R, 0, kn, h->dk, &fetch, acc);
    la_vf sum[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
    for (int r = 0; r < R; r++)
        sum[r] = vf_add(acc[r][0], acc[r][1]);
    float sk[4];
    vf_hsum4(sum[0], sum[1], sum[2], sum[3], sk);
    const float beta = h->beta[t * h->beta_ts], a0 = gate == LA_GATE_TOKEN ? a[0] : 1.0f;
    const float *v = h->v + t * h->v_ts + j;
    for (int r = 0; r < R; r++)
        u[r] = beta * (v[r] - (gate == LA_GATE_TOKEN ? a0 * sk[r] : sk[r]));
}

/* The decay, the update by u and S_j . qh of token t in one pass over rows
 * r < R of a group, from `from` into s; the outputs o[t][j..j+R). */
LA_INLINE void delta_vfirst_apply(const la_head *h, const void *from, void *s, const int64_t *row,
                                  int bf16, int R, int64_t j, int64_t t, const float *qh,
                                  int64_t dkp, la_gate gate, const float u[4])
{
    const int64_t dk = h->dk, dkw = dk / LA_VW * LA_VW; /* whole vectors; a masked one after */
    const float *kh = qh + dkp, *a = qh + 2 * dkp;
    la_vf uv[VFIRST_ROWS], out[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
    for (int r = 0; r < R; r++)
        uv[r] = vf_set1(u[r]);
    const la_vf at = vf_set1(gate == LA_GATE_TOKEN ? a[0] : 1.0f);
    int64_t c = 0;
    for (; bf16 && c + 2 * LA_VW <= dkw; c += 2 * LA_VW)
        delta_vfirst_update2(from, s, row, R, c, kh, qh, a, at, uv, out, gate);
    for (; c < dkw; c += LA_VW)
        delta_vfirst_update(from, s, row, bf16, R, c, LA_VW, kh, qh, a, at, uv, out, gate);
    if (c < dk)
        delta_vfirst_update(from, s, row, bf16, R, c, dk - c, kh, qh, a, at, uv, out, gate);
    float *o = h->o + t * h->o_ts + j, out4[4];
    if (R == VFIRST_ROWS) {
        vf_hsum4(out[0], out[1], out[2], out[3], o);
    } else {
        vf_hsum4(out[0], out[1], out[2], out[3], out4);
        for (int r = 0; r < R; r++)
            o[r] = out4[r];
    }
}

/* rows r < R of the group, the columns j..j+R (R = VFIRST_ROWS or 1: a
 * constant at each call site, so the row loops unroll), n tokens */
LA_INLINE void delta_vfirst_rows(const la_head *h, const void *from, void *s, int bf16, int64_t j,
                                 int R, const float *f, int64_t dkp, int64_t t0, int64_t n,
                                 la_gate gate)
{
    int64_t row[VFIRST_ROWS];
    for (int r = 0; r < R; r++)
        row[r] = (j + r) * h->s_vld;
    for (int64_t i = 0; i < n; i++) {
        const float *qh = f + i * DELTA_FEATURES * dkp;
        const void *in = i == 0 ? from : s;
        float u[4];
        const rows_fetch none = {0, 0, 0, 0};
        delta_vfirst_u(h, in, row, bf16, R, i == 0, j, t0 + i, qh, dkp, gate, none, u);
        delta_vfirst_apply(h, in, s, row, bf16, R, j, t0 + i, qh, dkp, gate, u);
    }
}

/* Bytes of state the read-only pass of a one-token block covers before its
 * update pass, unless the tuning entry says (h->vfirst_read_ahead; Zen 4:
 * docs/kernels.md): a whole head at dk = dv = 128 (64 KiB of floats), whose
 * update pass then runs from L2, as the K-first step's sweep does. A
 * V-first decode step (serve-bench pool_decode, Xeon model 207, ratio to
 * the contiguous K-first step, interleaved runs): groups one at a time
 * 1.48-1.66, 4 KiB 1.26-1.44, 16 KiB 1.16-1.26, 64 KiB 0.93-1.26 (Zen 3:
 * within its noise of 1.0 for all). At most VFIRST_MAX_GROUPS groups. */
#ifndef LA_VFIRST_READ_AHEAD_BYTES /* a variant build may set it, to measure */
#define LA_VFIRST_READ_AHEAD_BYTES 65536
#endif
enum { VFIRST_READ_AHEAD_BYTES = LA_VFIRST_READ_AHEAD_BYTES, VFIRST_MAX_GROUPS = 64 };

/* 0: a one-token block moving the state to another slot does not fetch
 * the rows it will write for writing during its read-only pass (a variant
 * build, to measure). With it, the update pass's stores find their lines
 * (Zen 3 beside a CI run, serve-bench, V-first ratio to the contiguous
 * call, three runs: pool_decode_moved 1.53-1.65 against 1.69-2.13 without,
 * and 1.61-1.73 copying the state first; pool_spec 4 tokens 2.92-3.09
 * against 3.39-3.70, and 3.31-3.56 copying first). */
#ifndef LA_VFIRST_PREFETCH_TO
#define LA_VFIRST_PREFETCH_TO 1
#endif

/* One token on columns [j, j + ng * VFIRST_ROWS) of the unit's [j0, j0 +
 * nj): the dot products of all the groups first (a read-only stream from
 * memory, many lines in flight), then their updates. Each group's dot
 * product and update in turn kept few lines in flight, so the step waited
 * on memory. The dot products fetch the rows ahead in address order
 * (rows_fetch), past the unit's last row the next state's (la_head.s_next)
 * first rows of these columns: the next state's rows fetched in bursts
 * as each group's were read, as the K-first step does, kept a V-first
 * pool's decode at 0.43 of the bound where the stream alone reached 0.69
 * (Zen 5, docs/kernels.md). Each column's arithmetic is
 * delta_vfirst_rows', so the results do not depend on ng. */
LA_INLINE void delta_vfirst_token(const la_head *h, const void *from, void *s, int bf16, int64_t j,
                                  int64_t ng, int64_t j0, int64_t nj, const float *qh,
                                  int64_t dkp, int64_t t, la_gate gate)
{
    float u[VFIRST_MAX_GROUPS][4];
    int64_t row[VFIRST_MAX_GROUPS][VFIRST_ROWS];
    const int64_t es = bf16 ? 2 : 4, ahead = rows_fetch_ahead(h->s_vld * es, VFIRST_ROWS);
    const void *next = h->s_next;
    for (int64_t g = 0; g < ng; g++) {
        for (int r = 0; r < VFIRST_ROWS; r++)
            row[g][r] = (j + g * VFIRST_ROWS + r) * h->s_vld;
        /* the unit's rows [j0, j0 + nj) in address order, then the next
         * state's (rows_fetch) */
        const rows_fetch fetch = rows_fetch_for(from, next, h->s_vld, es, j0, j0 + nj,
                                                j + g * VFIRST_ROWS + ahead, VFIRST_ROWS, 0, h->dk);
        delta_vfirst_u(h, from, row[g], bf16, VFIRST_ROWS, !h->vfirst_dot_interleave,
                       j + g * VFIRST_ROWS, t, qh, dkp, gate, fetch, u[g]);
        if (LA_VFIRST_PREFETCH_TO && from != s) /* the rows the update will write */
            for (int r = 0; r < VFIRST_ROWS; r++)
                for (int64_t b = 0; b < h->dk * es; b += 64)
                    __builtin_prefetch((char *)s + row[g][r] * es + b, 1, 3);
    }
    for (int64_t g = 0; g < ng; g++)
        delta_vfirst_apply(h, from, s, row[g], bf16, VFIRST_ROWS, j + g * VFIRST_ROWS, t, qh, dkp,
                           gate, u[g]);
}

LA_INLINE void delta_vfirst_gate(const la_head *h, const void *from, void *s, int bf16, int64_t j0,
                                 int64_t nj, const float *f, int64_t dkp, int64_t t0, int64_t n,
                                 la_gate gate)
{
    int64_t j = j0;
    if (n == 1) {
        const int64_t row_bytes = h->dk * (bf16 ? 2 : 4);
        const int64_t ahead = h->vfirst_read_ahead > 0 ? h->vfirst_read_ahead
                                                       : VFIRST_READ_AHEAD_BYTES;
        int64_t per = ahead / (VFIRST_ROWS * row_bytes);
        per = per < 1 ? 1 : per > VFIRST_MAX_GROUPS ? VFIRST_MAX_GROUPS : per;
        while (j + VFIRST_ROWS <= j0 + nj) {
            const int64_t left = (j0 + nj - j) / VFIRST_ROWS, ng = left < per ? left : per;
            delta_vfirst_token(h, from, s, bf16, j, ng, j0, nj, f, dkp, t0, gate);
            j += ng * VFIRST_ROWS;
        }
    } else {
        for (; j + VFIRST_ROWS <= j0 + nj; j += VFIRST_ROWS)
            delta_vfirst_rows(h, from, s, bf16, j, VFIRST_ROWS, f, dkp, t0, n, gate);
    }
    for (; j < j0 + nj; j++)
        delta_vfirst_rows(h, from, s, bf16, j, 1, f, dkp, t0, n, gate);
}

/* One instance per gate and state type (constants in the loops). */
LA_INLINE void delta_vfirst_block(const la_head *h, const void *from, void *s, int bf16,
                                  int64_t j0, int64_t nj, const float *f, int64_t dkp, int64_t t0,
                                  int64_t n)
{
    if (h->gate == LA_GATE_NONE)
        delta_vfirst_gate(h, from, s, bf16, j0, nj, f, dkp, t0, n, LA_GATE_NONE);
    else if (h->gate == LA_GATE_TOKEN)
        delta_vfirst_gate(h, from, s, bf16, j0, nj, f, dkp, t0, n, LA_GATE_TOKEN);
    else
        delta_vfirst_gate(h, from, s, bf16, j0, nj, f, dkp, t0, n, LA_GATE_CHANNEL);
}

/* The first token of a call whose state is read from h->s_from and
 * written to s: a function of its own, so that the in-place one below is
 * compiled with a single state pointer (two pointers through the same
 * function cost the in-place decode step 8% more instructions, 3-5% of
 * its time on Zen 3). Its arithmetic is the one-token block's, so the
 * bits are those of copying the state first. */
static __attribute__((noinline)) void delta_vfirst_first_moved(const la_head *h, int64_t j0,
                                                               int64_t nj, const float *f,
                                                               int64_t dkp)
{
    if (h->s_bf16)
        delta_vfirst_block(h, h->s_from, h->s_bf16, 1, j0, nj, f, dkp, 0, 1);
    else
        delta_vfirst_block(h, h->s_from, h->s, 0, j0, nj, f, dkp, 0, 1);
}

/* A bfloat16 V-first step reads each whole pair of vectors of a row in the
 * table's pair order (state_rows.h), in its dot products and its update
 * alike, so the token's features qh, kh, kn and a channel gate's decays
 * are put in that order once, over the same whole pairs (the rest stay in
 * order, as the rows' last vectors are read). Each row's sums then add the
 * same products in another order: other bits than in natural order, the
 * same for any split of the rows. */
LA_INLINE void delta_features_paired(const la_head *h, float *f, int64_t dkp)
{
#if LA_BF16_PAIR_ORDER
    const int64_t whole = h->dk / (2 * LA_VW) * (2 * LA_VW);
    for (int w = 0; w < 4; w++) {
        float *x = f + w * dkp;
        if (w == 2 && h->gate != LA_GATE_CHANNEL) /* a TOKEN gate's a[0] alone */
            continue;
        for (int64_t c = 0; c < whole; c += 2 * LA_VW) {
            const la_vf lo = vf_load_paired(x + c, 0, 1), hi = vf_load_paired(x + c, 1, 1);
            vf_store(x + c, lo);
            vf_store(x + c + LA_VW, hi);
        }
    }
#else
    (void)h, (void)f, (void)dkp;
#endif
}

/* A float state (h->s), or a bfloat16 one (h->s_bf16) widened on load and
 * rounded on store, once per token (the driver gives it one-token calls;
 * it is run a token at a time all the same, so that only the one-token
 * form is instantiated for it); with h->s_from, its first token above. */
static void delta_recurrent_vfirst(const la_head *h, int64_t j0, int64_t nj, void *ws)
{
    const int64_t dkp = round_vw(h->dk);
    float *f = ws;
    int64_t start = 0;
    if (h->s_from && h->T > 0) {
        delta_prepare(h, 0, f, dkp);
        if (h->s_bf16)
            delta_features_paired(h, f, dkp);
        delta_vfirst_first_moved(h, j0, nj, f, dkp);
        start = 1;
    }
    for (int64_t t0 = start; t0 < h->T; t0 += DELTA_BLOCK) {
        const int64_t n = h->T - t0 < DELTA_BLOCK ? h->T - t0 : DELTA_BLOCK;
        for (int64_t i = 0; i < n; i++)
            delta_prepare(h, t0 + i, f + i * DELTA_FEATURES * dkp, dkp);
        if (h->s_bf16)
            for (int64_t i = 0; i < n; i++) {
                delta_features_paired(h, f + i * DELTA_FEATURES * dkp, dkp);
                delta_vfirst_block(h, h->s_bf16, h->s_bf16, 1, j0, nj,
                                   f + i * DELTA_FEATURES * dkp, dkp, t0 + i, 1);
            }
        else
            delta_vfirst_block(h, h->s, h->s, 0, j0, nj, f, dkp, t0, n);
    }
}

/* ---- chunked (WY form) --------------------------------------------------- */

/* Workspace of one chunk of C rows on a tile of nj columns, rows padded to
 * whole vectors (dkp, njp): qh, kh, qd = qh o e^G, kg = kh o e^G,
 * kd = kh o e^(G_last - G), wn = -W [C][dkp]; el = e^(G_last), tmp [dkp];
 * G [C][dk] doubles (TOKEN: column 0); beta [C]; A, P [C][C]; U [C][njp]. */
typedef struct {
    float *qh, *kh, *qd, *kg, *kd, *wn, *el, *tmp, *beta, *a, *p, *u;
    double *gsum;
} delta_chunk_ws;

static size_t delta_chunked_bytes(int64_t chunk, int64_t dk, int64_t nj)
{
    const size_t C = la_size_of_dim(chunk), dkp = la_size_of_dim(round_vw(dk));
    const size_t njp = la_size_of_dim(round_vw(nj));
    size_t b = la_size_floats(la_size_mul(6, la_size_mul(C, dkp)));
    b = la_size_add(b, la_size_floats(la_size_mul(2, dkp)));
    b = la_size_add(b, la_size_up64(la_size_mul(la_size_mul(C, dkp), sizeof(double))));
    b = la_size_add(b, la_size_floats(C));
    b = la_size_add(b, la_size_floats(la_size_mul(2, la_size_mul(C, C))));
    return la_size_add(b, la_size_floats(la_size_mul(C, njp)));
}

static delta_chunk_ws delta_carve(void *ws, int64_t C, int64_t dk)
{
    const size_t dkp = (size_t)round_vw(dk), cd = (size_t)C * dkp;
    unsigned char *p = ws;
    delta_chunk_ws w;
    w.qh = (float *)p, w.kh = w.qh + cd, w.qd = w.kh + cd, w.kg = w.qd + cd;
    w.kd = w.kg + cd, w.wn = w.kd + cd;
    p += la_size_floats(6 * cd);
    w.el = (float *)p, w.tmp = w.el + dkp;
    p += la_size_floats(2 * dkp);
    w.gsum = (double *)p;
    p += la_size_up64(cd * sizeof(double));
    w.beta = (float *)p;
    p += la_size_floats((size_t)C);
    w.a = (float *)p, w.p = w.a + C * C;
    p += la_size_floats((size_t)(2 * C * C));
    w.u = (float *)p;
    return w;
}

LA_INLINE float delta_dot(const float *x, const float *y, int64_t dkp)
{
    la_vf acc = vf_zero();
    for (int64_t c = 0; c < dkp; c += LA_VW)
        acc = vf_fma(vf_load(x + c), vf_load(y + c), acc);
    return vf_hsum(acc);
}

/* The CHANNEL scores of rows i and j: *xy = sum_c x[c] y[c] e^(gi[c] -
 * gj[c]) and, when x2 is not NULL, *x2y the same with x2 for x, both from
 * one exp of the decays (rows padded with 0). */
LA_INLINE void delta_dots_decayed(const float *x, const float *x2, const float *y,
                                  const double *gi, const double *gj, int64_t dk, float *tmp,
                                  float *xy, float *x2y)
{
    for (int64_t c = 0; c < dk; c++)
        tmp[c] = (float)(gi[c] - gj[c]);
    la_vf acc = vf_zero(), acc2 = vf_zero();
    for (int64_t c = 0; c < dk; c += LA_VW) {
        const la_vf e = vf_decay(vf_loadn(tmp + c, dk - c)), yv = vf_load(y + c);
        acc = vf_fma(vf_mul(vf_load(x + c), yv), e, acc);
        if (x2)
            acc2 = vf_fma(vf_mul(vf_load(x2 + c), yv), e, acc2);
    }
    *xy = vf_hsum(acc);
    if (x2)
        *x2y = vf_hsum(acc2);
}

/* y[0..n) += m * x[0..n) over padded rows (n a multiple of LA_VW). */
LA_INLINE void delta_axpy(float *y, float m, const float *x, int64_t n)
{
    const la_vf mv = vf_set1(m);
    for (int64_t j = 0; j < n; j += LA_VW)
        vf_store(y + j, vf_fma(mv, vf_load(x + j), vf_load(y + j)));
}

/* R (1 or 2, a constant at each call site) output rows on nv vectors of
 * columns (the last with wl lanes); row r at out + r * out_ld:
 *   out_r = scale[r] init_r + sum_{c<K} coef[r * coef_ld + c * cs] B[c * ldb]
 * (init NULL: no first term; scale NULL: 1). Two rows share each load of
 * B's rows, so a B larger than L1 comes from L2 half as often; each
 * element takes the same operations in the same order either way: the
 * same bits. */
LA_INLINE void delta_combo_block(float *out, int64_t out_ld, const float *init,
                                 int64_t init_ld, const float *scale, const float *coef,
                                 int64_t cs, int64_t coef_ld, int64_t K, const float *B,
                                 int64_t ldb, int R, int nv, int64_t wl)
{
    /* one array per row: GCC kept a [2][nv] array in memory */
    la_vf acc0[LA_DELTA_NV], acc1[LA_DELTA_NV];
#define LD(p, x) ((x) == nv - 1 ? vf_loadn((p) + (x) * LA_VW, wl) : vf_load((p) + (x) * LA_VW))
#define ST(p, x, y)                                                                               \
    ((x) == nv - 1 ? vf_storen((p) + (x) * LA_VW, (y), wl) : vf_store((p) + (x) * LA_VW, (y)))
    const la_vf s0 = vf_set1(scale ? scale[0] : 1.0f);
    const la_vf s1 = vf_set1(scale && R == 2 ? scale[1] : 1.0f);
    for (int x = 0; x < nv; x++) {
        acc0[x] = init ? vf_mul(s0, LD(init, x)) : vf_zero();
        if (R == 2)
            acc1[x] = init ? vf_mul(s1, LD(init + init_ld, x)) : vf_zero();
    }
    for (int64_t c = 0; c < K; c++) {
        const la_vf m0 = vf_set1(coef[c * cs]);
        const la_vf m1 = R == 2 ? vf_set1(coef[coef_ld + c * cs]) : m0;
        const float *b = B + c * ldb;
        for (int x = 0; x < nv; x++) {
            const la_vf bv = LD(b, x);
            acc0[x] = vf_fma(m0, bv, acc0[x]);
            if (R == 2)
                acc1[x] = vf_fma(m1, bv, acc1[x]);
        }
    }
    for (int x = 0; x < nv; x++) {
        ST(out, x, acc0[x]);
        if (R == 2)
            ST(out + out_ld, x, acc1[x]);
    }
#undef LD
#undef ST
}

/* delta_combo_block over rows [0, rows) and all nj columns, two rows at a
 * time (an odd last row alone). */
static void delta_combo_rows(float *out, int64_t out_ld, const float *init, int64_t init_ld,
                             const float *scale, const float *coef, int64_t cs, int64_t coef_ld,
                             int64_t rows, int64_t K, const float *B, int64_t ldb, int64_t nj)
{
    for (int64_t r = 0; r < rows; r += 2) {
        float *o = out + r * out_ld;
        const float *in = init ? init + r * init_ld : NULL, *cf = coef + r * coef_ld;
        const float *sc = scale ? scale + r : NULL;
        for (int64_t j = 0; j < nj; j += DELTA_TILE) {
            const int64_t w = nj - j < DELTA_TILE ? nj - j : DELTA_TILE;
            const int nv = (int)((w + LA_VW - 1) / LA_VW);
            const int64_t wl = w - (int64_t)(nv - 1) * LA_VW;
#define DELTA_COMBO(R, k)                                                                         \
    delta_combo_block(o + j, out_ld, in ? in + j : NULL, init_ld, sc, cf, cs, coef_ld, K, B + j,   \
                      ldb, R, k, wl)
#define DELTA_COMBO1(k) DELTA_COMBO(1, k)
#define DELTA_COMBO2(k) DELTA_COMBO(2, k)
            if (r + 1 < rows)
                LA_TILE_SWITCH(nv, LA_DELTA_NV, DELTA_COMBO2);
            else
                LA_TILE_SWITCH(nv, LA_DELTA_NV, DELTA_COMBO1);
#undef DELTA_COMBO2
#undef DELTA_COMBO1
#undef DELTA_COMBO
        }
    }
}

/* e^G (from the chunk start) and e^(G_last - G) of row i into two padded
 * rows; 1 for NONE. */
static void delta_row_decays(const la_head *h, const delta_chunk_ws *w, int64_t i,
                             int64_t n, float *eg, float *el)
{
    const int64_t dk = h->dk, dkp = round_vw(dk);
    const int chan = h->gate == LA_GATE_CHANNEL;
    const double *gi = w->gsum + i * dk, *gl = w->gsum + (n - 1) * dk;
    for (int64_t c = 0; c < dkp; c++) {
        const int64_t cc = chan ? c : 0;
        const int live = h->gate != LA_GATE_NONE && c < dk;
        eg[c] = live ? (float)gi[cc] : 0.0f;
        el[c] = live ? (float)(gl[cc] - gi[cc]) : 0.0f;
    }
    for (int64_t c = 0; c < dkp; c += LA_VW) {
        vf_store(eg + c, vf_decay(vf_load(eg + c)));
        vf_store(el + c, vf_decay(vf_load(el + c)));
    }
}

static void delta_chunk(const la_head *h, int64_t t0, int64_t n, int64_t j0, int64_t nj,
                        const delta_chunk_ws *w)
{
    const int64_t dk = h->dk, dv = h->dv, C = h->chunk;
    const int64_t dkp = round_vw(dk), njp = round_vw(nj);
    const int chan = h->gate == LA_GATE_CHANNEL, gated = h->gate != LA_GATE_NONE;
    const int64_t ng = chan ? dk : gated ? 1 : 0;
    float *s = h->s + j0;
    /* pack: features, beta, prefix sums of the clamped gate (in double, so
     * that G_i - G_j keeps the precision of the g it sums) */
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        delta_features(h, h->q + t * h->q_ts, h->scale, w->qh + i * dkp);
        delta_features(h, h->k + t * h->k_ts, 1.0f, w->kh + i * dkp);
        w->beta[i] = h->beta[t * h->beta_ts];
        for (int64_t c = 0; c < ng; c++) {
            const float gc = h->g[t * h->g_ts + c];
            const double g = gc < LA_G_RESET ? LA_G_RESET : gc;
            w->gsum[i * dk + c] = i ? w->gsum[(i - 1) * dk + c] + g : g;
        }
    }
    /* decayed rows: qd = qh o e^G, kg = kh o e^G, kd = kh o e^(G_last - G) */
    for (int64_t i = 0; i < n; i++) {
        float *eg = w->tmp, *el = w->el; /* el is rebuilt below */
        delta_row_decays(h, w, i, n, eg, el);
        for (int64_t c = 0; c < dkp; c += LA_VW) {
            const la_vf e1 = vf_load(eg + c), e2 = vf_load(el + c);
            const la_vf q = vf_load(w->qh + i * dkp + c), k = vf_load(w->kh + i * dkp + c);
            vf_store(w->qd + i * dkp + c, gated ? vf_mul(q, e1) : q);
            vf_store(w->kg + i * dkp + c, gated ? vf_mul(k, e1) : k);
            vf_store(w->kd + i * dkp + c, gated ? vf_mul(k, e2) : k);
        }
    }
    delta_row_decays(h, w, n - 1, n, w->el, w->tmp); /* el = e^(G_last) */
    if (!gated)
        for (int64_t c = 0; c < dkp; c++)
            w->el[c] = 1.0f;
    /* A = strictly_lower(diag(beta) (Kh Kh^T) o Gamma), P = tril((Qh Kh^T) o Gamma) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) {
            const float *ki = w->kh + i * dkp, *kj = w->kh + j * dkp, *qi = w->qh + i * dkp;
            float kk, qk;
            if (chan) { /* one exp of the decays for both */
                const double *gi = w->gsum + i * dk, *gj = w->gsum + j * dk;
                kk = 0.0f;
                delta_dots_decayed(qi, j < i ? ki : NULL, kj, gi, gj, dk, w->tmp, &qk, &kk);
            } else {
                const double x = gated ? w->gsum[i * dk] - w->gsum[j * dk] : 0.0;
                const float gm = x < LA_EXP_ZERO_BELOW ? 0.0f : expf((float)x);
                kk = j < i ? delta_dot(ki, kj, dkp) * gm : 0.0f;
                qk = delta_dot(qi, kj, dkp) * gm;
            }
            w->a[i * C + j] = w->beta[i] * kk;
            w->p[i * C + j] = qk;
        }
    /* forward substitution with I + A (unit lower triangular):
     * -W = -diag(beta) (Kh o e^G) - A (-W) row by row, U = diag(beta) V - A U */
    for (int64_t i = 0; i < n; i++) {
        float *wi = w->wn + i * dkp, *ui = w->u + i * njp;
        const la_vf nb = vf_set1(-w->beta[i]), b = vf_set1(w->beta[i]);
        for (int64_t c = 0; c < dkp; c += LA_VW)
            vf_store(wi + c, vf_mul(nb, vf_load(w->kg + i * dkp + c)));
        const float *v = h->v + (t0 + i) * h->v_ts + j0;
        for (int64_t j = 0; j < njp; j += LA_VW)
            vf_store(ui + j, vf_mul(b, vf_loadn(v + j, nj - j)));
        for (int64_t l = 0; l < i; l++) {
            const float al = -w->a[i * C + l];
            delta_axpy(wi, al, w->wn + l * dkp, dkp);
            delta_axpy(ui, al, w->u + l * njp, njp);
        }
    }
    /* V' = U - W S, in place in U (rows two at a time: delta_combo_rows) */
    delta_combo_rows(w->u, njp, w->u, njp, NULL, w->wn, 1, dkp, n, dk, s, dv, nj);
    /* O = (Qh o e^G) S + P V' */
    float *o = h->o + t0 * h->o_ts + j0;
    delta_combo_rows(o, h->o_ts, NULL, 0, NULL, w->qd, 1, dkp, n, dk, s, dv, nj);
    for (int64_t i = 0; i < n; i++)
        delta_combo_rows(o + i * h->o_ts, 0, o + i * h->o_ts, 0, NULL, w->p + i * C, 1, 0, 1,
                         i + 1, w->u, njp, nj);
    /* S = e^(G_last) S + (Kh o e^(G_last - G))^T V' */
    delta_combo_rows(s, dv, s, dv, w->el, w->kd, dkp, 1, dk, n, w->u, njp, nj);
}

static void delta_chunked(const la_head *h, int64_t j0, int64_t nj, void *ws)
{
    const delta_chunk_ws w = delta_carve(ws, h->chunk, h->dk);
    for (int64_t t0 = 0; t0 < h->T; t0 += h->chunk)
        delta_chunk(h, t0, h->T - t0 < h->chunk ? h->T - t0 : h->chunk, j0, nj, &w);
}

const la_delta_ops LA_DELTA_OPS = {
    .tile_columns = delta_tile_columns,
    .recurrent_bytes = delta_recurrent_bytes,
    .chunked_bytes = delta_chunked_bytes,
    .recurrent = delta_recurrent,
    .chunked = delta_chunked,
    .recurrent_vfirst = delta_recurrent_vfirst,
    .pack_tile = DELTA_PACK_TILE,
    .pack_pad = LA_DELTA_PACK_PAD,
    .pack_columns = delta_pack_columns,
};
