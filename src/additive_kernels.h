/* The additive family's value-tiled recurrent forward, written once against
 * an ISA vocabulary (the vf_* names listed in delta_kernels.h). An ISA folder
 * includes its vocabulary, defines LA_ADD_NV (vectors per register tile) and
 * includes this file, which defines the static functions
 * additive_tile_columns, additive_recurrent_bytes and additive_recurrent
 * for its la_additive_ops.
 *
 * Value columns of S are independent: per token, column j needs only
 * column j of S and v, and the per-token qh, kh, decay and normaliser
 * 1 / (qh . z + eps), which are made once per block of tokens for all the
 * register tiles of the unit. One sweep per token over a register tile:
 * row c is decayed, updated (+ kh_c v) and read out (o += qh_c S_c) with the
 * tile's v and o in registers, so the state is read and written once per
 * token. */

#ifndef LA_ADD_NV
#error "define LA_ADD_NV (and include an ISA vocabulary) before additive_kernels.h"
#endif

#include <math.h>
#include <string.h>

enum {
    ADD_TILE = LA_ADD_NV * LA_VW, /* columns per register tile */
    ADD_BLOCK = 32,               /* tokens whose features are made at once */
    ADD_ROWS = 4                  /* per token: qh, kh, a, then inv in row 3 */
};

static int64_t add_round_vw(int64_t n) { return (n + LA_VW - 1) / LA_VW * LA_VW; }

/* out[0..dk) = mult * phi(x), padding lanes 0. */
LA_INLINE void add_features(const la_head *h, const float *x, float mult, float *out)
{
    const la_vf m = vf_set1(mult);
    for (int64_t c = 0; c < h->dk; c += LA_VW) {
        const int64_t n = h->dk - c;
        la_vf y = vf_mul(m, vf_phi(h->phi, vf_loadn(x + c, n)));
        if (n < LA_VW)
            y = vf_keep(y, n);
        vf_store(out + c, y);
    }
}

/* Features of token t into f (rows of dkp floats: qh, kh, a), and the
 * normaliser: z (+ its compensation zc) advanced by the token, inv = 1 /
 * (qh . z + eps) into f[3 * dkp]. */
LA_INLINE void add_prepare(const la_head *h, int64_t t, float *f, int64_t dkp, float *z,
                           float *zc)
{
    float *qh = f, *kh = f + dkp, *a = f + 2 * dkp;
    add_features(h, h->q + t * h->q_ts, h->scale, qh);
    add_features(h, h->k + t * h->k_ts, 1.0f, kh);
    if (h->gate == LA_GATE_CHANNEL) {
        const float *g = h->g + t * h->g_ts;
        for (int64_t c = 0; c < h->dk; c += LA_VW)
            vf_store(a + c, vf_decay(vf_loadn(g + c, h->dk - c)));
    } else {
        const float g = h->gate == LA_GATE_TOKEN ? h->g[t * h->g_ts] : 0.0f;
        a[0] = g < LA_EXP_ZERO_BELOW ? 0.0f : h->gate == LA_GATE_TOKEN ? expf(g) : 1.0f;
    }
    if (z == NULL) {
        f[3 * dkp] = 1.0f;
        return;
    }
    /* z = a z + kh, compensated: z + zc carries the sum exactly to first
     * order (exactly so without a gate; with one z stays bounded) */
    la_vf den = vf_zero();
    const la_vf at = vf_set1(a[0]);
    for (int64_t c = 0; c < dkp; c += LA_VW) {
        const la_vf av = h->gate == LA_GATE_CHANNEL ? vf_load(a + c) : at;
        const la_vf zo = vf_load(z + c), kv = vf_load(kh + c), qv = vf_load(qh + c);
        const la_vf y = vf_fma(av, vf_load(zc + c), kv);
        const la_vf zn = vf_fma(av, zo, y);
        const la_vf cn = vf_sub(y, vf_sub(zn, vf_mul(av, zo)));
        vf_store(z + c, zn);
        vf_store(zc + c, cn);
        den = vf_fma(qv, cn, vf_fma(qv, zn, den));
    }
    f[3 * dkp] = 1.0f / (vf_hsum(den) + h->eps);
}

/* Tokens t0..t0+n-1 on nv vectors of columns of S (the last one wl lanes
 * wide), their features in f. */
LA_INLINE void add_tile_tokens(const la_head *h, float *s, const float *v0, float *o0,
                               const float *f, int64_t dkp, int64_t t0, int64_t n, int nv,
                               int64_t wl)
{
    /* locals, not h->...: vector stores may alias anything, so fields read
     * through h would be reloaded after every store of the sweep */
    const int64_t dk = h->dk, dv = h->dv, fs = ADD_ROWS * dkp, v_ts = h->v_ts, o_ts = h->o_ts;
    const la_gate gate = h->gate;
    la_vf vv[LA_ADD_NV], out[LA_ADD_NV];
#define LD(p, x) ((x) == nv - 1 ? vf_loadn((p) + (x) * LA_VW, wl) : vf_load((p) + (x) * LA_VW))
#define ST(p, x, y)                                                                               \
    ((x) == nv - 1 ? vf_storen((p) + (x) * LA_VW, (y), wl) : vf_store((p) + (x) * LA_VW, (y)))
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        const float *qh = f + i * fs, *kh = qh + dkp, *a = qh + 2 * dkp;
        const la_vf at = vf_set1(a[0]);
        for (int x = 0; x < nv; x++) {
            vv[x] = LD(v0 + t * v_ts, x);
            out[x] = vf_zero();
        }
        for (int64_t c = 0; c < dk; c++) {
            const la_vf kv = vf_set1(kh[c]), qv = vf_set1(qh[c]);
            const la_vf av = gate == LA_GATE_CHANNEL ? vf_set1(a[c]) : at;
            float *sr = s + c * dv;
            for (int x = 0; x < nv; x++) {
                const la_vf old = LD(sr, x);
                const la_vf y = vf_fma(kv, vv[x], gate == LA_GATE_NONE ? old : vf_mul(av, old));
                ST(sr, x, y);
                out[x] = vf_fma(y, qv, out[x]);
            }
        }
        const la_vf inv = vf_set1(qh[3 * dkp]);
        float *o = o0 + t * o_ts;
        for (int x = 0; x < nv; x++)
            ST(o, x, vf_mul(out[x], inv));
    }
#undef LD
#undef ST
}

/* A unit of work is up to 128 value columns (several register tiles), so a
 * token's features are made once for all of them. */
static int64_t additive_tile_columns(int64_t dk, int64_t dv)
{
    (void)dk;
    (void)dv;
    return ADD_TILE > 128 ? ADD_TILE : 128 / ADD_TILE * ADD_TILE;
}

/* features of a block of tokens, then z and its compensation */
static size_t additive_recurrent_bytes(int64_t T, int64_t dk, int64_t nj)
{
    (void)nj;
    const size_t block = T < ADD_BLOCK ? la_size_of_dim(T) : ADD_BLOCK;
    const size_t dkp = la_size_of_dim(add_round_vw(dk));
    return la_size_floats(la_size_add(la_size_mul(la_size_mul(ADD_ROWS, block), dkp),
                                      la_size_mul(2, dkp)));
}

static void additive_recurrent(const la_head *h, int64_t j0, int64_t nj, const float *z_in,
                               float *z_out, void *ws)
{
    const int64_t dk = h->dk, dkp = add_round_vw(dk);
    const int64_t block = h->T < ADD_BLOCK ? h->T : ADD_BLOCK;
    float *f = ws, *z = f + ADD_ROWS * block * dkp, *zc = z + dkp;
    if (z_in) { /* this unit's own copy of the normaliser, padded with 0 */
        memset(z, 0, 2 * (size_t)dkp * sizeof(float));
        memcpy(z, z_in, (size_t)dk * sizeof(float));
        memcpy(zc, z_in + dk, (size_t)dk * sizeof(float));
    }
    for (int64_t t0 = 0; t0 < h->T; t0 += ADD_BLOCK) {
        const int64_t n = h->T - t0 < ADD_BLOCK ? h->T - t0 : ADD_BLOCK;
        for (int64_t i = 0; i < n; i++)
            add_prepare(h, t0 + i, f + i * ADD_ROWS * dkp, dkp, z_in ? z : NULL, zc);
        for (int64_t jb = j0; jb < j0 + nj; jb += ADD_TILE) {
            const int64_t width = j0 + nj - jb < ADD_TILE ? j0 + nj - jb : ADD_TILE;
            const int nv = (int)((width + LA_VW - 1) / LA_VW);
            const int64_t wl = width - (int64_t)(nv - 1) * LA_VW;
            float *s = h->s + jb, *o = h->o + jb;
            const float *v = h->v + jb;
            /* constant nv per call site: the tile's v and o stay in registers */
            switch (nv) {
            case 1: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 1, wl); break;
            case 2: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 2, wl); break;
            case 3: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 3, wl); break;
#if LA_ADD_NV > 4
            case 4: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 4, wl); break;
            case 5: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 5, wl); break;
            case 6: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 6, wl); break;
            case 7: add_tile_tokens(h, s, v, o, f, dkp, t0, n, 7, wl); break;
#endif
            default: /* whole tiles with a constant width: no masked accesses */
                if (wl == LA_VW)
                    add_tile_tokens(h, s, v, o, f, dkp, t0, n, LA_ADD_NV, LA_VW);
                else
                    add_tile_tokens(h, s, v, o, f, dkp, t0, n, LA_ADD_NV, wl);
                break;
            }
        }
    }
    if (z_in && z_out) { /* the normaliser after the call, and its compensation */
        memcpy(z_out, z, (size_t)dk * sizeof(float));
        memcpy(z_out + dk, zc, (size_t)dk * sizeof(float));
    }
}
