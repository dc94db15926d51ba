/* The additive family's value-tiled recurrent forward, written once against
 * an ISA vocabulary (the vf_* names listed in delta_kernels.h). An ISA folder
 * includes its vocabulary, defines LA_ADD_NV (vectors per register tile) and
 * includes this file, which defines the static functions additive_features,
 * additive_feature_bytes, additive_normaliser, additive_columns and
 * additive_token_vfirst (the token op on a V-first state, at the end) for
 * its la_additive_ops (additive.h says what each does).
 *
 * Value columns of S are independent: per token, column j needs only
 * column j of S and v, and the per-token qh, kh, decay and normaliser
 * 1 / (qh . z + eps), which are made once per block of tokens for all the
 * register tiles of a head. A register tile of S is swept once per pair of
 * tokens (1, 2), loaded and stored once for both (a sweep per token is
 * bound by the stores). Per row c, with the pair's coefficients made once
 * per block for all tiles:
 *   S_c <- a21_c S_c + (a2 kh1)_c v1 + kh2_c v2        a21 = a2 a1
 *   o1  += (a1 qh1)_c S_c (the old row),  o2 += qh2_c S_c (the new row)
 * and at the end o1 += (qh1 . kh1) v1, which is o1 = qh1^T (a1 S + kh1 v1^T)
 * regrouped: 5 vector operations per element and pair with a gate (4
 * without), where decaying and reading out each token costs 6. LA_ADD_NV is
 * chosen so that the v and o vectors of both tokens fit in the registers.
 * Where the tuning entry says so (la_head.quad_tokens), a block's tokens go
 * four at a time first, on narrower sub-tiles (add_quad). */

#ifndef LA_ADD_NV
#error "define LA_ADD_NV (and include an ISA vocabulary) before additive_kernels.h"
#endif
/* Vectors per register tile of a quad sweep (add_tile_quads: eight
 * accumulators a vector); an integer literal, at most LA_ADD_NV. */
#ifndef LA_ADD_QUAD_NV
#define LA_ADD_QUAD_NV 1
#endif

#include <math.h>
#include <string.h>

#include "outside.h"
#include "pack.h"
#include "state_rows.h"
#include "tile_dispatch.h"

enum {
    ADD_TILE = LA_ADD_NV * LA_VW, /* columns per register tile */
    /* packed rows this many floats apart (pack.h): a 64-byte pad, so that
     * rows 16 apart are not 4 KiB apart (Xeon, identity features, one
     * thread: 0.41 -> 0.48 of the zmm peak at dk = 64, 0.54 -> 0.59 at
     * dk = 128, one run each) */
    ADD_PACK_LD = ADD_TILE >= 16 ? ADD_TILE + 16 : ADD_TILE,
    /* per token, dkp floats each: qh, kh, a, then two rows of the pair
     * coefficients (in the first token of a pair: a1 qh1, a2 kh1, made only
     * with a gate; in the second: a21 (one float unless CHANNEL), then
     * qh1 . kh1) */
    ADD_ROWS = 5,
    /* a quad's own floats beyond the rows (add_quad): its decay w, then
     * its ten output coefficients, then (TOKEN) ADD_QUAD_LARGE_V */
    ADD_QUAD_TERMS = 16,
    /* past the sums' last vf_hsum4: 1 where a v of the quad has
     * |v| > LA_SCALED_V_MAX (or is NaN), 0 where none has, -1 until the
     * sweep has looked (la_rows_too_large_once) */
    ADD_QUAD_LARGE_V = 12,
};

static int64_t add_round_vw(int64_t n) { return (n + LA_VW - 1) / LA_VW * LA_VW; }

/* Row t's features: qh = scale phi(q) at f, kh = phi(k) at f + dkp, lanes
 * past dk 0. phi is a constant where add_features_as inlines this, so each
 * feature map gets its own loop, q and k in one. */
LA_INLINE void add_phi_rows(const la_head *h, linattn_phi phi, int64_t t, float *f, int64_t dkp)
{
    const int64_t dk = h->dk;
    const float *q = h->q + t * h->q_ts, *k = h->k + t * h->k_ts;
    const la_vf scale = vf_set1(h->scale);
    int64_t c = 0;
    for (; c + LA_VW <= dk; c += LA_VW) {
        const la_vf qv = vf_phi(phi, vf_load(q + c)), kv = vf_phi(phi, vf_load(k + c));
        vf_store(f + c, vf_mul(scale, qv));
        vf_store(f + dkp + c, kv);
    }
    if (c < dk) {
        const int64_t w = dk - c;
        const la_vf qv = vf_phi(phi, vf_loadn(q + c, w)), kv = vf_phi(phi, vf_loadn(k + c, w));
        vf_store(f + c, vf_keep(vf_mul(scale, qv), w));
        vf_store(f + dkp + c, vf_keep(kv, w));
    }
}

/* Features of n tokens, then two panels of n rows of dvp floats: the
 * block's v rows, copied by features, and its o rows, which columns
 * writes before copying them out. Rows far apart ([B][T][H][D]: a token's
 * heads side by side) fall into few cache sets; read and written in one
 * pass per block, they do not evict the state tile during the sweeps.
 * Contiguous rows (token stride dv) are used in place. */
static size_t additive_feature_bytes(int64_t n, int64_t dk, int64_t dv)
{
    const size_t row = la_size_add(la_size_mul(ADD_ROWS, la_size_of_dim(add_round_vw(dk))),
                                   la_size_mul(2, la_size_of_dim(add_round_vw(dv))));
    /* then each quad's terms (add_quad_area) */
    const size_t quad = la_size_add(la_size_of_dim(add_round_vw(dk)), ADD_QUAD_TERMS);
    return la_size_floats(la_size_add(la_size_mul(la_size_of_dim(n), row),
                                      la_size_mul(la_size_of_dim(n / 4 + 1), quad)));
}

/* Where the terms of the quads of a block of n tokens are (after the
 * features and the two panels), add_quad_stride floats apart. */
static float *add_quad_area(const la_head *h, float *f, int64_t n)
{
    return f + n * (ADD_ROWS * add_round_vw(h->dk) + 2 * add_round_vw(h->dv));
}

static int64_t add_quad_stride(const la_head *h) { return add_round_vw(h->dk) + ADD_QUAD_TERMS; }

/* Rows of the token one block ahead, into L2 (into L1, rows far apart
 * would evict one another before their use): with many heads the inputs
 * stream from memory, and the loads of a block would otherwise wait on
 * them (columns fetches the o rows it will write, for writing, or each
 * row's first store would wait for it). Not further ahead: a group of
 * heads in lockstep would then hold several blocks of every head's rows
 * in L2 beside their states and evict both (four blocks ahead: 5-8%
 * slower here). */
LA_INLINE void add_prefetch_row(const float *p, int64_t n, int write)
{
    for (int64_t c = 0; c < n; c += 16) {
        if (write)
            __builtin_prefetch(p + c, 1, 2);
        else
            __builtin_prefetch(p + c, 0, 2);
    }
}

LA_INLINE void add_copy_row(float *dst, const float *src, int64_t n)
{
    for (int64_t c = 0; c < n; c += LA_VW)
        vf_storen(dst + c, vf_loadn(src + c, n - c), n - c);
}

/* Fetching ahead (la_head.fetch_tokens, from the tuning entry). With F =
 * fetch_tokens > 0 each loop fetches the rows it will read F tokens ahead
 * of the token it is at: the features loop q, k and a channel gate's g
 * (and v where it copies v into its panel), the sweep of a tile v and the
 * unit's columns of o, for writing (add_fetch_ahead, from the first
 * sub-tile, a quad's or a pair's worth at a time), so that a block's
 * fetches are spread over both loops. With 0 the features loop fetches
 * the next block's q, k and v rows (one block ahead) and the sweep the
 * next block's o rows at its start, as the Xeon's and Zen 4's entries
 * keep it (fetches spread over the sweeps measured slower there; eight
 * tokens ahead is Zen 5's: docs/kernels.md). */
typedef struct {
    const la_head *h;
    int64_t t, end; /* the next token to fetch, and one past the last */
    int64_t j0, nj; /* the unit's columns of o (and of v) */
    int v;          /* 1: v too (the sweep reads it in place) */
} add_ahead;

/* The cursor of the sweeps of a block of n tokens from t0 (which reads v
 * in place when v_direct): F tokens ahead, or with F = 0 the next block's
 * o rows, fetched at once before the sweeps. */
static add_ahead add_ahead_of(const la_head *h, int64_t t0, int64_t n, int64_t j0, int64_t nj,
                              int v_direct)
{
    const int64_t f = h->fetch_tokens, from = f ? t0 + f : t0 + n, last = from + n;
    return (add_ahead){.h = h, .t = from, .end = last < h->T ? last : h->T, .j0 = j0,
                       .nj = nj, .v = f && v_direct};
}

/* The rows of the cursor's next `tokens` tokens (a NULL: none). */
LA_INLINE void add_fetch_ahead(add_ahead *a, int64_t tokens)
{
    if (!a)
        return;
    const la_head *h = a->h;
    for (; tokens > 0 && a->t < a->end; tokens--, a->t++) {
        const int64_t t = a->t;
        if (a->v)
            add_prefetch_row(h->v + t * h->v_ts + a->j0, a->nj, 0);
        add_prefetch_row(h->o + t * h->o_ts + a->j0, a->nj, 1);
    }
}

/* The coefficients of the pair of tokens whose features start at f1. */
LA_INLINE void add_pair(const la_head *h, float *f1, int64_t dkp)
{
    const float *q1 = f1, *k1 = f1 + dkp, *a1 = f1 + 2 * dkp;
    float *f2 = f1 + ADD_ROWS * dkp, *qa1 = f1 + 3 * dkp, *ak1 = f1 + 4 * dkp;
    const float *a2 = f2 + 2 * dkp;
    float *a21 = f2 + 3 * dkp;
    const int channel = h->gate == LA_GATE_CHANNEL;
    const la_vf at1 = vf_set1(a1[0]), at2 = vf_set1(a2[0]);
    la_vf dot = vf_zero();
    for (int64_t c = 0; c < dkp; c += LA_VW) {
        const la_vf qv = vf_load(q1 + c), kv = vf_load(k1 + c);
        const la_vf av1 = channel ? vf_load(a1 + c) : at1, av2 = channel ? vf_load(a2 + c) : at2;
        if (h->gate != LA_GATE_NONE) { /* without a gate they are qh1 and kh1 */
            vf_store(qa1 + c, vf_mul(av1, qv));
            vf_store(ak1 + c, vf_mul(av2, kv));
        }
        if (channel)
            vf_store(a21 + c, vf_mul(av2, av1));
        dot = vf_fma(qv, kv, dot);
    }
    f2[4 * dkp] = vf_hsum(dot);
    if (!channel)
        a21[0] = a2[0] * a1[0];
}

/* out[0..10) = the sums of the ten vectors, three at a time (vf_hsum4: one
 * reduction tree for four sums instead of four), out[10..12) scratch. */
LA_INLINE void add_quad_sums(const la_vf sums[10], float *out)
{
    vf_hsum4(sums[0], sums[1], sums[2], sums[3], out);
    vf_hsum4(sums[4], sums[5], sums[6], sums[7], out + 4);
    vf_hsum4(sums[8], sums[9], vf_zero(), vf_zero(), out + 8);
}

/* The coefficients of the quad of tokens 1..4 whose features start at f1
 * (la_head.quad_tokens), from the state S before token 1. With a_j the
 * decays and P_j = a_1 ... a_j (a diagonal, a scalar, or 1):
 *   S_j = P_j S + sum_{l<=j} (P_j / P_l) kh_l v_l^T   (P_j / P_l = a_l+1 ... a_j)
 *   o_j = S^T (P_j qh_j) + sum_{l<=j} (qh_j . (P_j / P_l) kh_l) v_l
 * so one read-write pass over a tile sums S^T (P_j qh_j) for the four
 * outputs and writes S_4 = P_4 S + sum_l (P_4 / P_l) kh_l v_l^T: 8 vector
 * operations per element without a gate, 9 with one (pairs: 8 and 10),
 * and one load and one store per four tokens. Row 3 of token j gets
 * P_j qh_j and row 4 (P_4 / P_j) kh_j (rows 0-2 stay: the normaliser reads
 * them); the quad's terms (add_quad_area) get w = P_4 (w[0] unless
 * CHANNEL), then the ten coefficients c[j(j+1)/2 + l] = qh_j . (P_j / P_l)
 * kh_l, j and l counted from 0. */
LA_INLINE void add_quad(const la_head *h, float *f1, int64_t dkp, float *terms)
{
    const int64_t fs = ADD_ROWS * dkp;
    const int channel = h->gate == LA_GATE_CHANNEL;
    la_vf sums[10];
    for (int e = 0; e < 10; e++)
        sums[e] = vf_zero();
    if (h->gate == LA_GATE_NONE) { /* no decays: the sweep reads rows 0 and 1 */
        for (int64_t c = 0; c < dkp; c += LA_VW) {
            la_vf q[4], k[4];
            for (int j = 0; j < 4; j++) {
                q[j] = vf_load(f1 + j * fs + c);
                k[j] = vf_load(f1 + j * fs + dkp + c);
            }
            for (int j = 0; j < 4; j++)
                for (int l = 0; l <= j; l++)
                    sums[j * (j + 1) / 2 + l] = vf_fma(q[j], k[l], sums[j * (j + 1) / 2 + l]);
        }
        terms[0] = 1.0f;
        add_quad_sums(sums, terms + dkp);
        return;
    }
    for (int64_t c = 0; c < dkp; c += LA_VW) {
        la_vf a[4], q[4], k[4];
        for (int j = 0; j < 4; j++) {
            const float *fj = f1 + j * fs;
            q[j] = vf_load(fj + c);
            k[j] = vf_load(fj + dkp + c);
            a[j] = channel ? vf_load(fj + 2 * dkp + c) : vf_set1(fj[2 * dkp]);
        }
        la_vf prefix = vf_set1(1.0f); /* P_j */
        for (int j = 0; j < 4; j++) {
            prefix = vf_mul(prefix, a[j]);
            vf_store(f1 + j * fs + 3 * dkp + c, vf_mul(prefix, q[j]));
            la_vf suffix = vf_set1(1.0f); /* P_4 / P_j */
            for (int m = j + 1; m < 4; m++)
                suffix = vf_mul(suffix, a[m]);
            vf_store(f1 + j * fs + 4 * dkp + c, vf_mul(suffix, k[j]));
            la_vf between = vf_set1(1.0f); /* P_j / P_l, l from j down */
            for (int l = j; l >= 0; l--) {
                la_vf *sum = &sums[j * (j + 1) / 2 + l];
                *sum = vf_fma(q[j], vf_mul(between, k[l]), *sum);
                between = vf_mul(between, a[l]);
            }
        }
        if (channel)
            vf_store(terms + c, prefix);
    }
    if (!channel) /* the four scalars multiplied as the rows' prefix was */
        terms[0] = f1[2 * dkp] * f1[fs + 2 * dkp] * f1[2 * fs + 2 * dkp] * f1[3 * fs + 2 * dkp];
    add_quad_sums(sums, terms + dkp);
}

/* additive_features with phi a constant (additive_features picks it once). */
LA_INLINE void add_features_as(const la_head *h, linattn_phi phi, int64_t t0, int64_t n,
                               float *f)
{
    const int64_t dk = h->dk, dkp = add_round_vw(dk), dvp = add_round_vw(h->dv);
    const la_gate gate = h->gate;
    const int quads = h->quad_tokens;
    float *const f0 = f;
    for (int64_t i = 0; i < n; i++, f += ADD_ROWS * dkp) {
        const int64_t t = t0 + i;
        float *a = f + 2 * dkp;
        /* (fetching ahead, above) */
        const int64_t ahead = t + (h->fetch_tokens ? h->fetch_tokens : n);
        if (ahead < h->T) {
            add_prefetch_row(h->q + ahead * h->q_ts, dk, 0);
            add_prefetch_row(h->k + ahead * h->k_ts, dk, 0);
            if (gate == LA_GATE_CHANNEL)
                add_prefetch_row(h->g + ahead * h->g_ts, dk, 0);
            if (!h->fetch_tokens || h->v_ts != h->dv) /* (else the sweep's) */
                add_prefetch_row(h->v + ahead * h->v_ts, h->dv, 0);
        }
        add_phi_rows(h, phi, t, f, dkp);
        if (gate == LA_GATE_CHANNEL) {
            const float *g = h->g + t * h->g_ts;
            for (int64_t c = 0; c < dk; c += LA_VW)
                vf_store(a + c, vf_decay(vf_loadn(g + c, dk - c)));
        } else {
            const float g = gate == LA_GATE_TOKEN ? h->g[t * h->g_ts] : 0.0f;
            a[0] = g < LA_EXP_ZERO_BELOW ? 0.0f : gate == LA_GATE_TOKEN ? expf(g) : 1.0f;
        }
        /* quads of whole groups of four, then pairs */
        if (quads && i % 4 == 3) {
            float *terms = add_quad_area(h, f0, n) + i / 4 * add_quad_stride(h);
            add_quad(h, f - 3 * ADD_ROWS * dkp, dkp, terms);
            if (gate == LA_GATE_TOKEN) /* v not yet looked at (la_rows_too_large_once) */
                terms[dkp + ADD_QUAD_LARGE_V] = -1.0f;
        } else if (i % 2 == 1 && !(quads && i - i % 4 + 3 < n))
            add_pair(h, f - ADD_ROWS * dkp, dkp);
    }
    if (h->v_ts != h->dv) { /* rows apart: into the panel (f is past the features) */
        for (int64_t i = 0; i < n; i++)
            add_copy_row(f + i * dvp, h->v + (t0 + i) * h->v_ts, h->dv);
    }
}

static void additive_features(const la_head *h, int64_t t0, int64_t n, float *f)
{
    switch (h->phi) {
    case LINATTN_PHI_ELU1: add_features_as(h, LINATTN_PHI_ELU1, t0, n, f); break;
    case LINATTN_PHI_RELU: add_features_as(h, LINATTN_PHI_RELU, t0, n, f); break;
    default: add_features_as(h, LINATTN_PHI_IDENTITY, t0, n, f); break;
    }
}

/* w lanes of z advanced by one token, z = a z + kh, compensated: zc
 * carries what z's sum has not absorbed; returns den plus qh . (z + zc)'s
 * lanes. */
LA_INLINE la_vf add_z_compensated(float *z, float *zc, int64_t w, la_vf av, la_vf kv, la_vf qv,
                                  la_vf den)
{
    const la_vf zo = vf_loadn(z, w);
    const la_vf y = vf_fma(av, vf_loadn(zc, w), kv);
    const la_vf zn = vf_fma(av, zo, y);
    const la_vf cn = vf_sub(y, vf_sub(zn, vf_mul(av, zo)));
    vf_storen(z, zn, w);
    vf_storen(zc, cn, w);
    return vf_fma(qv, cn, vf_fma(qv, zn, den));
}

/* z = a z + kh per token, compensated: z + zc carries the sum exactly to
 * first order (exactly so without a gate; with one z stays bounded). */
static void additive_normaliser(const la_head *h, const float *f, int64_t n, float *zz,
                                float *inv)
{
    const int64_t dk = h->dk, dkp = add_round_vw(dk);
    float *z = zz, *zc = zz + dk;
    for (int64_t i = 0; i < n; i++, f += ADD_ROWS * dkp) {
        const float *qh = f, *kh = f + dkp, *a = f + 2 * dkp;
        la_vf den = vf_zero();
        const la_vf at = vf_set1(a[0]);
        for (int64_t c = 0; c < dk; c += LA_VW) {
            const la_vf av = h->gate == LA_GATE_CHANNEL ? vf_load(a + c) : at;
            /* qh is 0 past dk */
            den = add_z_compensated(z + c, zc + c, dk - c, av, vf_load(kh + c), vf_load(qh + c),
                                    den);
        }
        inv[i] = 1.0f / (vf_hsum(den) + h->eps);
    }
}

/* The n tokens of a block on nv vectors of columns of S (the last one wl
 * lanes wide): features in f, v and o rows v_ts and o_ts floats apart (in
 * place or in the panels), inv NULL when not normalising. */
LA_INLINE void add_tile_tokens(const la_head *h, float *s, int64_t ld, const float *v0,
                               int64_t v_ts, float *o0, int64_t o_ts, const float *f,
                               const float *inv, int64_t n, int nv, int64_t wl, add_ahead *ahead)
{
    /* locals, not h->...: vector stores may alias anything, so fields read
     * through h would be reloaded after every store of the sweep */
    const int64_t dk = h->dk, dkp = add_round_vw(dk), fs = ADD_ROWS * dkp;
    const la_gate gate = h->gate;
    la_vf v1[LA_ADD_NV], v2[LA_ADD_NV], o1[LA_ADD_NV], o2[LA_ADD_NV];
#define LD(p, x) ((x) == nv - 1 ? vf_loadn((p) + (x) * LA_VW, wl) : vf_load((p) + (x) * LA_VW))
#define ST(p, x, y)                                                                               \
    ((x) == nv - 1 ? vf_storen((p) + (x) * LA_VW, (y), wl) : vf_store((p) + (x) * LA_VW, (y)))
#define DECAY(av, old) (gate == LA_GATE_NONE ? (old) : vf_mul((av), (old)))
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        const float *f1 = f + i * fs, *f2 = f1 + fs;
        const float *k1 = f1 + dkp, *ak1 = f1 + 4 * dkp;
        const float *qa1 = gate == LA_GATE_NONE ? f1 : f1 + 3 * dkp; /* a1 qh1 */
        const float *q2 = f2, *k2 = f2 + dkp, *a21 = f2 + 3 * dkp;
        const la_vf dot = vf_set1(f2[4 * dkp]), at21 = vf_set1(a21[0]);
        add_fetch_ahead(ahead, 2);
        for (int x = 0; x < nv; x++) {
            v1[x] = LD(v0 + i * v_ts, x);
            v2[x] = LD(v0 + (i + 1) * v_ts, x);
            o1[x] = o2[x] = vf_zero();
        }
        for (int64_t c = 0; c < dk; c++) {
            const la_vf kv2 = vf_set1(k2[c]), qv2 = vf_set1(q2[c]), qa = vf_set1(qa1[c]);
            float *sr = s + c * ld;
            if (gate == LA_GATE_NONE) { /* a1 = a2 = 1 */
                const la_vf kv1 = vf_set1(k1[c]);
                for (int x = 0; x < nv; x++) {
                    const la_vf old = LD(sr, x);
                    const la_vf y = vf_fma(kv2, v2[x], vf_fma(kv1, v1[x], old));
                    o1[x] = vf_fma(qa, old, o1[x]);
                    o2[x] = vf_fma(qv2, y, o2[x]);
                    ST(sr, x, y);
                }
            } else {
                const la_vf ak = vf_set1(ak1[c]);
                const la_vf av = gate == LA_GATE_CHANNEL ? vf_set1(a21[c]) : at21;
                for (int x = 0; x < nv; x++) {
                    const la_vf old = LD(sr, x);
                    const la_vf y = vf_fma(av, old, vf_fma(ak, v1[x], vf_mul(kv2, v2[x])));
                    o1[x] = vf_fma(qa, old, o1[x]);
                    o2[x] = vf_fma(qv2, y, o2[x]);
                    ST(sr, x, y);
                }
            }
        }
        const la_vf inv1 = vf_set1(inv ? inv[i] : 1.0f), inv2 = vf_set1(inv ? inv[i + 1] : 1.0f);
        float *oa = o0 + i * o_ts, *ob = oa + o_ts;
        for (int x = 0; x < nv; x++) {
            ST(oa, x, vf_mul(vf_fma(dot, v1[x], o1[x]), inv1));
            ST(ob, x, vf_mul(o2[x], inv2));
        }
    }
    if (i < n) { /* the odd token out */
        const float *q1 = f + i * fs, *k1 = q1 + dkp, *a1 = q1 + 2 * dkp;
        const la_vf at1 = vf_set1(a1[0]);
        add_fetch_ahead(ahead, 1);
        for (int x = 0; x < nv; x++) {
            v1[x] = LD(v0 + i * v_ts, x);
            o1[x] = vf_zero();
        }
        for (int64_t c = 0; c < dk; c++) {
            const la_vf kv1 = vf_set1(k1[c]), qv1 = vf_set1(q1[c]);
            const la_vf av1 = gate == LA_GATE_CHANNEL ? vf_set1(a1[c]) : at1;
            float *sr = s + c * ld;
            for (int x = 0; x < nv; x++) {
                const la_vf y1 = vf_fma(kv1, v1[x], DECAY(av1, LD(sr, x)));
                o1[x] = vf_fma(y1, qv1, o1[x]);
                ST(sr, x, y1);
            }
        }
        const la_vf inv1 = vf_set1(inv ? inv[i] : 1.0f);
        float *oa = o0 + i * o_ts;
        for (int x = 0; x < nv; x++)
            ST(oa, x, vf_mul(o1[x], inv1));
    }
#undef LD
#undef ST
#undef DECAY
}

/* The first 4 * quads tokens of a block (add_quad; their terms at quad) on
 * nv <= LA_ADD_QUAD_NV vectors of columns, as add_tile_tokens does pairs:
 * per quad one read-write pass sums S^T (P_j qh_j) for the four outputs
 * and writes the state after the fourth token.
 *
 * Under a TOKEN gate P_4 is one number, so the tile may hold the state
 * divided by d, the product of the decays since the tile was last decayed
 * (as delta_tile_pairs does): a quad that keeps d >= LA_SCALED_TILE_MIN adds
 * its v divided by its new d (once per vector) without touching the old
 * rows, and its outputs take d (the sums) and the new d (the ten
 * coefficients) as factors; a quad that would not, one whose v is too
 * large to divide (la_rows_too_large_once), and the last quad of the block,
 * decay the tile by P_4 d, and d becomes 1. So every call leaves the state
 * itself, and d depends on the gates and v alone. */
LA_INLINE void add_tile_quads(const la_head *h, float *s, int64_t ld, const float *v0,
                              const float *v_rows, int64_t v_ts, float *o0, int64_t o_ts,
                              const float *f, float *quad, const float *inv, int64_t quads,
                              int nv, int64_t wl, la_gate gate, add_ahead *ahead)
{
    const int64_t dk = h->dk, dkp = add_round_vw(dk), fs = ADD_ROWS * dkp;
    const int64_t stride = add_quad_stride(h);
    /* one array per token: GCC kept a [4][nv] array in memory */
    la_vf v1[LA_ADD_QUAD_NV], v2[LA_ADD_QUAD_NV], v3[LA_ADD_QUAD_NV], v4[LA_ADD_QUAD_NV];
    la_vf o1[LA_ADD_QUAD_NV], o2[LA_ADD_QUAD_NV], o3[LA_ADD_QUAD_NV], o4[LA_ADD_QUAD_NV];
#define LD(p, x) ((x) == nv - 1 ? vf_loadn((p) + (x) * LA_VW, wl) : vf_load((p) + (x) * LA_VW))
#define ST(p, x, y)                                                                               \
    ((x) == nv - 1 ? vf_storen((p) + (x) * LA_VW, (y), wl) : vf_store((p) + (x) * LA_VW, (y)))
    float d = 1.0f; /* TOKEN: the state is d times the tile (above) */
    for (int64_t g = 0; g < quads; g++) {
        const float *f1 = f + 4 * g * fs;
        float *terms = quad + g * stride;
        /* (without a gate add_quad leaves qh and kh as they are) */
        const float *qa1 = f1 + (gate == LA_GATE_NONE ? 0 : 3 * dkp), *qa2 = qa1 + fs,
                    *qa3 = qa2 + fs, *qa4 = qa3 + fs;
        const float *ka1 = f1 + (gate == LA_GATE_NONE ? dkp : 4 * dkp), *ka2 = ka1 + fs,
                    *ka3 = ka2 + fs, *ka4 = ka3 + fs;
        const float *vr = v0 + 4 * g * v_ts;
        /* d after this quad: its decays times d, if the tile keeps them */
        const float d_next = gate == LA_GATE_TOKEN ? terms[0] * d : 1.0f;
        const int scaled = gate == LA_GATE_TOKEN && g + 1 < quads && d_next >= LA_SCALED_TILE_MIN &&
                           !la_rows_too_large_once(terms + dkp + ADD_QUAD_LARGE_V,
                                                   v_rows + 4 * g * v_ts, v_ts, 4, h->dv);
        const float d_out = scaled ? d_next : 1.0f;
        const la_vf wt = vf_set1(gate == LA_GATE_TOKEN ? terms[0] * d : terms[0]);
        const la_vf to_tile = vf_set1(1.0f / d_out);
        add_fetch_ahead(ahead, 4);
        for (int x = 0; x < nv; x++) { /* v as the tile takes it */
            v1[x] = LD(vr, x);
            v2[x] = LD(vr + v_ts, x);
            v3[x] = LD(vr + 2 * v_ts, x);
            v4[x] = LD(vr + 3 * v_ts, x);
            if (gate == LA_GATE_TOKEN) {
                v1[x] = vf_mul(v1[x], to_tile);
                v2[x] = vf_mul(v2[x], to_tile);
                v3[x] = vf_mul(v3[x], to_tile);
                v4[x] = vf_mul(v4[x], to_tile);
            }
            o1[x] = o2[x] = o3[x] = o4[x] = vf_zero();
        }
        /* DECAY: the pass decays the tile; otherwise it only adds */
#define QUAD_SWEEP(DECAY)                                                                         \
    for (int64_t c = 0; c < dk; c++) {                                                            \
        const la_vf q1 = vf_set1(qa1[c]), q2 = vf_set1(qa2[c]), q3 = vf_set1(qa3[c]),             \
                    q4 = vf_set1(qa4[c]);                                                         \
        const la_vf k1 = vf_set1(ka1[c]), k2 = vf_set1(ka2[c]), k3 = vf_set1(ka3[c]),             \
                    k4 = vf_set1(ka4[c]);                                                         \
        const la_vf wv = DECAY && gate == LA_GATE_CHANNEL ? vf_set1(terms[c]) : wt;              \
        float *sr = s + c * ld;                                                                   \
        for (int x = 0; x < nv; x++) {                                                            \
            const la_vf old = LD(sr, x);                                                          \
            o1[x] = vf_fma(q1, old, o1[x]);                                                       \
            o2[x] = vf_fma(q2, old, o2[x]);                                                       \
            o3[x] = vf_fma(q3, old, o3[x]);                                                       \
            o4[x] = vf_fma(q4, old, o4[x]);                                                       \
            const la_vf y = DECAY ? vf_mul(wv, old) : old;                                        \
            ST(sr, x,                                                                             \
               vf_fma(k4, v4[x], vf_fma(k3, v3[x], vf_fma(k2, v2[x], vf_fma(k1, v1[x], y)))));   \
        }                                                                                         \
    }
        if (gate != LA_GATE_NONE && !scaled) {
            QUAD_SWEEP(1)
        } else {
            QUAD_SWEEP(0)
        }
#undef QUAD_SWEEP
        /* o_j = d (the tile's sums) + sum_{l<=j} c_jl v_l (the v as taken:
         * c times d_out), then the normaliser */
        const float *cq = terms + dkp;
        float *orow = o0 + 4 * g * o_ts;
        const float *iv = inv ? inv + 4 * g : NULL;
        const la_vf i1 = vf_set1(iv ? iv[0] : 1.0f), i2 = vf_set1(iv ? iv[1] : 1.0f);
        const la_vf i3 = vf_set1(iv ? iv[2] : 1.0f), i4 = vf_set1(iv ? iv[3] : 1.0f);
        const la_vf dv = vf_set1(d);
#define C(e) vf_set1(cq[e] * d_out)
#define SUMS(o) (gate == LA_GATE_TOKEN ? vf_mul(dv, (o)) : (o))
        for (int x = 0; x < nv; x++) {
            ST(orow, x, vf_mul(vf_fma(C(0), v1[x], SUMS(o1[x])), i1));
            ST(orow + o_ts, x, vf_mul(vf_fma(C(2), v2[x], vf_fma(C(1), v1[x], SUMS(o2[x]))), i2));
            ST(orow + 2 * o_ts, x,
               vf_mul(vf_fma(C(5), v3[x], vf_fma(C(4), v2[x], vf_fma(C(3), v1[x], SUMS(o3[x])))),
                      i3));
            ST(orow + 3 * o_ts, x,
               vf_mul(vf_fma(C(9), v4[x],
                             vf_fma(C(8), v3[x],
                                    vf_fma(C(7), v2[x], vf_fma(C(6), v1[x], SUMS(o4[x]))))),
                      i4));
        }
        d = d_out;
#undef SUMS
#undef C
    }
#undef LD
#undef ST
}

/* The quads of a block on sub-tiles of LA_ADD_QUAD_NV vectors of a tile of
 * nv (the last wl lanes wide), each sub-tile through all of them. */
static void add_quads_dispatch(const la_head *h, float *s, int64_t ld, const float *v,
                               const float *v_rows, int64_t v_ts, float *o, int64_t o_ts,
                               const float *f, float *quad, const float *inv, int64_t quads,
                               int nv, int64_t wl, add_ahead *ahead)
{
    /* (the first sub-tile fetches ahead) */
#define ADD_QUADS_AT(kk, kwl, g)                                                                  \
    add_tile_quads(h, s + x0 * LA_VW, ld, v + x0 * LA_VW, v_rows, v_ts, o + x0 * LA_VW, o_ts, f, \
                   quad, inv, quads, kk, kwl, g, x0 == 0 ? ahead : NULL)
#define ADD_QUADS_WHOLE(g, NV) ADD_QUADS_AT(NV, LA_VW, g)
#define ADD_QUADS(kk) ADD_QUADS_AT(kk, kwl, h->gate)
    LA_SUB_TILES(nv, wl, LA_ADD_QUAD_NV, h->gate, ADD_QUADS_WHOLE, ADD_QUADS);
#undef ADD_QUADS
#undef ADD_QUADS_WHOLE
#undef ADD_QUADS_AT
}

/* columns' packed copy (pack.h), in register tiles. */
static size_t additive_packed_bytes(int64_t dk, int64_t nj)
{
    return la_packed_bytes(dk, nj, ADD_TILE, ADD_PACK_LD);
}

static void additive_pack(const float *s, int64_t dk, int64_t dv, int64_t j0, int64_t nj,
                          float *copy)
{
    la_pack_tiles(s, dk, dv, j0, nj, ADD_TILE, ADD_PACK_LD, copy);
}

static void additive_unpack(float *s, int64_t dk, int64_t dv, int64_t j0, int64_t nj,
                            const float *copy)
{
    la_unpack_tiles(s, dk, dv, j0, nj, ADD_TILE, ADD_PACK_LD, copy);
}

static void additive_columns(const la_head *h, float *f, const float *inv, int64_t t0, int64_t n,
                             int64_t j0, int64_t nj)
{
    const int64_t dvp = add_round_vw(h->dv);
    float *panel = f + n * ADD_ROWS * add_round_vw(h->dk);
    const int direct_v = h->v_ts == h->dv, direct_o = h->o_ts == h->dv;
    const float *vp = direct_v ? h->v + t0 * h->dv : panel;
    float *op = direct_o ? h->o + t0 * h->dv : panel + n * dvp;
    const int64_t vs = direct_v ? h->dv : dvp, os = direct_o ? h->dv : dvp;
    float *quad = add_quad_area(h, f, n);
    const int64_t quads = h->quad_tokens ? n / 4 : 0;
    /* rows ahead, fetched by the first tile (of o only this unit's
     * columns: another thread may be writing the rest of them) */
    add_ahead next = add_ahead_of(h, t0, n, j0, nj, direct_v);
    if (!h->fetch_tokens)
        add_fetch_ahead(&next, n);
    for (int64_t jb = j0; jb < j0 + nj; jb += ADD_TILE) {
        add_ahead *ahead = jb == j0 ? &next : NULL;
        const int64_t width = j0 + nj - jb < ADD_TILE ? j0 + nj - jb : ADD_TILE;
        const int nv = (int)((width + LA_VW - 1) / LA_VW);
        const int64_t wl = width - (int64_t)(nv - 1) * LA_VW;
        /* the state where it lies, or its packed copy (pack.h) */
        float *s = h->s_packed ? la_packed_tile(h->s, h->dk, ADD_PACK_LD, (jb - j0) / ADD_TILE)
                               : h->s + jb;
        float *o = op + jb;
        const int64_t ld = h->s_packed ? ADD_PACK_LD : h->dv;
        const float *v = vp + jb;
        if (quads) /* then the tokens after them in pairs */
            add_quads_dispatch(h, s, ld, v, vp, vs, o, os, f, quad, inv, quads, nv, wl, ahead);
        const int64_t done = 4 * quads, rest = n - done;
        if (rest == 0)
            continue;
        const float *fr = f + done * ADD_ROWS * add_round_vw(h->dk), *ir = inv ? inv + done : NULL;
        v += done * vs;
        o += done * os;
        /* a constant nv per call site keeps the tile's v and o in registers;
         * whole tiles also get a constant last width (no masked accesses) */
        if (nv == LA_ADD_NV && wl == LA_VW) {
            add_tile_tokens(h, s, ld, v, vs, o, os, fr, ir, rest, LA_ADD_NV, LA_VW, ahead);
            continue;
        }
#define ADD_TOKENS(k) add_tile_tokens(h, s, ld, v, vs, o, os, fr, ir, rest, k, wl, ahead)
        LA_TILE_SWITCH(nv, LA_ADD_NV, ADD_TOKENS);
#undef ADD_TOKENS
    }
    for (int64_t i = 0; i < n && !direct_o; i++)
        add_copy_row(h->o + (t0 + i) * h->o_ts + j0, op + i * dvp + j0, nj);
}

/* ---- one token on a V-first state ------------------------------------------ */

/* The token op (la_additive_ops.token) on a state whose value column j is
 * the dk elements at j * h->s_vld of h->s, or of h->s_bf16 (a V-first
 * pool: vLLM's layout for Mamba-2's SSM state). Column j's row is
 * decayed, updated by v_j kh and summed against qh in one pass, rows
 * ADD_VF_ROWS at a time, their sums one vf_hsum4. The decays are the
 * value-tiled form's (expf for a token gate, vf_decay per channel) and
 * each element is updated as the avx2 and avx512 token ops update it
 * (a s + kh v with a gate, kh v + s without), so the state has the avx512
 * token op's bits (avx2's decays a token with its vector exp);
 * o_j = S_j . qh adds along the key axis, where the K-first op adds down
 * the rows: the same maths, rounded otherwise. A bfloat16 row is widened
 * as read and rounded once as written, o read from the float before the
 * rounding. The features are made ADD_VF_KEYS keys at a time (on the
 * stack), each panel's sums added to o_j. */
enum { ADD_VF_ROWS = 4, ADD_VF_KEYS = 256 };

/* Rows r < R of the group from column j (R a constant: ADD_VF_ROWS or 1),
 * keys [c0, c0 + n) of them; the features at qh, kh, a are those keys',
 * zero past n. sums[r] gets row r's S_j . qh over these keys. The rows go
 * chunk after chunk, the group's rows sharing each load of the features:
 * row after row took a V-first pool's decode 1.2x the time (Zen 5, 36
 * layers from memory, B = 1, 4 interleaved rounds, us a layer: 98 against
 * 121 on one thread, 55 against 66 on two), and the address-order fetch
 * beside them (rows_fetch) took the rest of the gap to a K-first pool. */
LA_INLINE void add_vf_group(void *s, int64_t ld, int64_t j, int R, int64_t c0, int64_t n,
                            const float *qh, const float *kh, const float *a, la_vf at,
                            const float *v, la_gate gate, int bf16, rows_fetch fetch,
                            float *sums)
{
    la_vf vj[ADD_VF_ROWS], out[ADD_VF_ROWS];
    int64_t row[ADD_VF_ROWS];
    for (int r = 0; r < R; r++) {
        vj[r] = vf_set1(v[j + r]);
        out[r] = vf_zero();
        row[r] = (j + r) * ld + c0;
    }
#define VF_UPDATE(old, kv, av, r)                                                                 \
    (gate == LA_GATE_NONE ? vf_fma((kv), vj[r], (old)) : vf_fma((av), (old), vf_mul((kv), vj[r])))
    int64_t c = 0;
    /* bfloat16: two vectors rounded together, one store (vf_store_row2) */
    for (; bf16 && c + 2 * LA_VW <= n; c += 2 * LA_VW) {
        const la_vf kv = vf_load(kh + c), qv = vf_load(qh + c);
        const la_vf kv1 = vf_load(kh + c + LA_VW), qv1 = vf_load(qh + c + LA_VW);
        const la_vf av = gate == LA_GATE_CHANNEL ? vf_load(a + c) : at;
        const la_vf av1 = gate == LA_GATE_CHANNEL ? vf_load(a + c + LA_VW) : at;
        rows_fetch_step(&fetch, 2 * R);
        for (int r = 0; r < R; r++) {
            const la_vf y = VF_UPDATE(vf_load_row(s, row[r] + c, LA_VW, 1), kv, av, r);
            const la_vf y1 = VF_UPDATE(vf_load_row(s, row[r] + c + LA_VW, LA_VW, 1), kv1, av1, r);
            vf_store_row2(s, row[r] + c, y, y1, 1);
            out[r] = vf_fma(y1, qv1, vf_fma(y, qv, out[r]));
        }
    }
    for (; c < n; c += LA_VW) {
        const int64_t w = n - c < LA_VW ? n - c : LA_VW; /* lanes past w: 0 in kh and qh */
        const la_vf kv = vf_load(kh + c), qv = vf_load(qh + c);
        const la_vf av = gate == LA_GATE_CHANNEL ? vf_load(a + c) : at;
        rows_fetch_step(&fetch, R);
        for (int r = 0; r < R; r++) {
            const la_vf y = VF_UPDATE(vf_load_row(s, row[r] + c, w, bf16), kv, av, r);
            vf_store_row(s, row[r] + c, y, w, bf16);
            out[r] = vf_fma(y, qv, out[r]);
        }
    }
#undef VF_UPDATE
    if (R == ADD_VF_ROWS)
        vf_hsum4(out[0], out[1], out[2], out[3], sums);
    else
        sums[0] = vf_hsum(out[0]);
}

/* The features of keys [c0, c0 + n) into qh, kh and (CHANNEL) a, zero past
 * n, and z over them (compensated with h->zc): returns qh . z's vector of
 * partial sums added to den. */
LA_INLINE la_vf add_vf_features(const la_head *h, const float *q, const float *k,
                                const float *g, int64_t c0, int64_t n, la_vf at, float *qh,
                                float *kh, float *a, la_vf den, la_gate gate)
{
    const la_vf scale = vf_set1(h->scale);
    for (int64_t c = 0; c < n; c += LA_VW) {
        const int64_t w = n - c;
        la_vf qv = vf_mul(scale, vf_phi(h->phi, vf_loadn(q + c0 + c, w)));
        la_vf kv = vf_phi(h->phi, vf_loadn(k + c0 + c, w));
        la_vf av = at;
        if (gate == LA_GATE_CHANNEL)
            av = vf_decay(vf_loadn(g + c0 + c, w));
        if (w < LA_VW) { /* phi(0) may be 1 (elu+1): clear the padding lanes */
            qv = vf_keep(qv, w);
            kv = vf_keep(kv, w);
        }
        vf_store(qh + c, qv);
        vf_store(kh + c, kv);
        if (gate == LA_GATE_CHANNEL)
            vf_store(a + c, av);
        if (h->z && h->zc) {
            den = add_z_compensated(h->z + c0 + c, h->zc + c0 + c, w, av, kv, qv, den);
        } else if (h->z) {
            const la_vf zn = vf_fma(av, vf_loadn(h->z + c0 + c, w), kv);
            vf_storen(h->z + c0 + c, zn, w);
            den = vf_fma(qv, zn, den);
        }
    }
    return den;
}

LA_INLINE void add_vf_token(const la_head *h, const float *q, const float *k, const float *v,
                            const float *g, float *o, la_gate gate, int bf16)
{
    const int64_t dk = h->dk, dv = h->dv, ld = h->s_vld;
    void *const s = bf16 ? (void *)h->s_bf16 : (void *)h->s;
    const void *const next = h->s_next;
    const int64_t es = bf16 ? 2 : 4, ahead = rows_fetch_ahead(ld * es, ADD_VF_ROWS);
    _Alignas(64) float qh[ADD_VF_KEYS], kh[ADD_VF_KEYS], a[ADD_VF_KEYS];
    const float g0 = gate == LA_GATE_TOKEN ? g[0] : 0.0f;
    const la_vf at =
        vf_set1(gate != LA_GATE_TOKEN ? 1.0f : g0 < LA_EXP_ZERO_BELOW ? 0.0f : expf(g0));
    la_vf den = vf_zero();
    for (int64_t c0 = 0; c0 < dk; c0 += ADD_VF_KEYS) {
        const int64_t n = dk - c0 < ADD_VF_KEYS ? dk - c0 : ADD_VF_KEYS;
        den = add_vf_features(h, q, k, g, c0, n, at, qh, kh, a, den, gate);
        float sums[ADD_VF_ROWS];
        int64_t j = 0;
        for (; j + ADD_VF_ROWS <= dv; j += ADD_VF_ROWS) {
            const rows_fetch f =
                rows_fetch_for(s, next, ld, es, 0, dv, j + ahead, ADD_VF_ROWS, c0, n);
            add_vf_group(s, ld, j, ADD_VF_ROWS, c0, n, qh, kh, a, at, v, gate, bf16, f, sums);
            for (int r = 0; r < ADD_VF_ROWS; r++)
                o[j + r] = c0 ? o[j + r] + sums[r] : sums[r];
        }
        for (; j < dv; j++) {
            const rows_fetch f = rows_fetch_for(s, next, ld, es, 0, dv, j + ahead, 1, c0, n);
            add_vf_group(s, ld, j, 1, c0, n, qh, kh, a, at, v, gate, bf16, f, sums);
            o[j] = c0 ? o[j] + sums[0] : sums[0];
        }
    }
    if (h->z) {
        const float inv = 1.0f / (vf_hsum(den) + h->eps);
        for (int64_t j = 0; j < dv; j++)
            o[j] *= inv;
    }
}

/* One instance per gate and state type (constants in the loops). */
LA_INLINE void add_vf_token_typed(const la_head *h, const float *q, const float *k,
                                  const float *v, const float *g, float *o, int bf16)
{
    if (h->gate == LA_GATE_NONE)
        add_vf_token(h, q, k, v, g, o, LA_GATE_NONE, bf16);
    else if (h->gate == LA_GATE_TOKEN)
        add_vf_token(h, q, k, v, g, o, LA_GATE_TOKEN, bf16);
    else
        add_vf_token(h, q, k, v, g, o, LA_GATE_CHANNEL, bf16);
}

static void additive_token_vfirst(const la_head *h, const float *q, const float *k,
                                  const float *v, const float *g, float *o)
{
    if (h->s_bf16)
        add_vf_token_typed(h, q, k, v, g, o, 1);
    else
        add_vf_token_typed(h, q, k, v, g, o, 0);
}
