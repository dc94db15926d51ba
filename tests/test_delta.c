/* The delta-rule family against one kernel table, named by
 * LINATTN_TEST_TABLE (meson registers one test per table the build has). A
 * table this CPU cannot run is reported as skipped (exit 77). Every case
 * compares with the double oracle of oracle_delta.c within tolerance.h.
 *
 * Value regimes: the accuracy contract covers q, k uniform in [-1, 1] with
 * qk_l2norm = 1, v in [-0.3, 5], beta in [0, 1], g in [-20, -1e-4] (TOKEN)
 * and [-5, 0] (CHANNEL), which are the defaults below (a per-head gate
 * draws from [-2, -1e-4]). Without qk_l2norm the
 * keys are drawn small enough that beta |kh|^2 <= 2: each token's transition
 * I - beta kh kh^T then has spectral norm <= 1. Larger keys make the exact
 * recurrence itself grow without bound (an eigenvalue 1 - beta |kh|^2 < -1),
 * so float and double diverge and a failure would say nothing about the
 * kernels. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "oracle_delta.h"
#include "table.h"
#include "tolerance.h"

static const la_table *table;

/* Check runs each test in a child process: activate the table there. */
static void use_table(void) { la_force_table(table); }

/* ---- problems ------------------------------------------------------------ */

typedef enum {
    DL_BHTD,  /* q, k [B][Hqk][T][dk]; v, o [B][H][T][dv]; g, beta [B][H][T](..) */
    DL_BTHD,  /* fla's [B][T][H][D] for everything, g and beta [B][T][H](..) */
    DL_PACKED, /* one [B][T][q heads | k heads | v heads] buffer; beta and a
                * token gate interleaved in one [B][T][H][2] buffer */
    DL_BROADCAST /* strides 0: q and k one [T][dk] for every batch entry and
                  * head, v [B][T][dv] for every head; the rest as BHTD */
} delta_layout;

typedef struct {
    int64_t B, H, qk_heads, T, dk, dv; /* qk_heads 0: = H */
    linattn_head_map head_map;
    linattn_phi phi;
    linattn_gate gate;
    linattn_algo algo;
    int64_t chunk;
    int l2norm, with_state, unaligned, threads;
    delta_layout layout;
    float scale;
    float q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, beta_lo, beta_hi;
    float g_lo, g_hi;  /* g_lo > g_hi: the gate kind's default range */
    int64_t reset_at;  /* >= 0: g = -FLT_MAX at that token (every channel) */
} dspec;

typedef struct {
    dspec sp;
    linattn_config cfg;
    float *q, *k, *v, *g, *beta, *o, *s;
    float *s_init; /* copy of the initial state (NULL: none) */
    size_t no, ns; /* elements of the o buffer and of s */
    problem mem;   /* owns the guarded mappings */
} dproblem;

static dspec dspec_default(int64_t B, int64_t H, int64_t T, int64_t dk, int64_t dv)
{
    return (dspec){
        .B = B, .H = H, .T = T, .dk = dk, .dv = dv,
        .phi = LINATTN_PHI_IDENTITY, .l2norm = 1, .threads = 1, .scale = 1.0f,
        .q_lo = -1, .q_hi = 1, .k_lo = -1, .k_hi = 1, .v_lo = -0.3f, .v_hi = 5,
        .beta_lo = 0, .beta_hi = 1, .g_lo = 1, .g_hi = 0, .reset_at = -1,
    };
}

/* Keys for qk_l2norm = 0: |kh|^2 <= 1, so beta |kh|^2 <= 2 (see the top). */
static void small_keys(dspec *sp)
{
    sp->l2norm = 0;
    const float a = (float)(1.0 / sqrt((double)sp->dk));
    if (sp->phi == LINATTN_PHI_ELU1) { /* phi(x) = e^x <= a for x <= ln a */
        sp->k_lo = logf(a) - 3.0f;
        sp->k_hi = logf(a);
    } else {
        sp->k_lo = -a;
        sp->k_hi = a;
    }
}

static const char *dspec_name(const dspec *sp)
{
    static char buf[320];
    static const char *gates[] = {"none", "head", "token", "channel"};
    static const char *phis[] = {"elu1", "relu", "identity"};
    static const char *algos[] = {"auto", "chunked", "recurrent"};
    static const char *layouts[] = {"bhtd", "bthd", "packed", "broadcast"};
    snprintf(buf, sizeof buf,
             "B=%lld H=%lld qk_heads=%lld(%s) T=%lld dk=%lld dv=%lld phi=%s l2norm=%d gate=%s "
             "algo=%s chunk=%lld state=%d unaligned=%d threads=%d layout=%s scale=%g "
             "beta=[%g,%g] g=[%g,%g]%s reset_at=%lld",
             (long long)sp->B, (long long)sp->H, (long long)sp->qk_heads,
             sp->head_map == LINATTN_HEADS_TILED ? "tiled" : "grouped", (long long)sp->T,
             (long long)sp->dk, (long long)sp->dv, phis[sp->phi], sp->l2norm, gates[sp->gate],
             algos[sp->algo], (long long)sp->chunk, sp->with_state, sp->unaligned, sp->threads,
             layouts[sp->layout], (double)sp->scale, (double)sp->beta_lo, (double)sp->beta_hi,
             (double)sp->g_lo, (double)sp->g_hi, sp->g_lo > sp->g_hi ? "(default)" : "",
             (long long)sp->reset_at);
    return buf;
}

static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rand_uniform(lo, hi);
}

static float *alloc_floats(dproblem *p, size_t n)
{
    return guarded_floats(&p->mem, n, p->sp.unaligned);
}

static void dproblem_make(dproblem *p, const dspec *sp)
{
    test_seed();
    memset(p, 0, sizeof *p);
    p->sp = *sp;
    const int64_t B = sp->B, H = sp->H, Hq = sp->qk_heads ? sp->qk_heads : sp->H, T = sp->T,
                  dk = sp->dk, dv = sp->dv;
    linattn_config *c = &p->cfg;
    linattn_config_init(c, B, H, T, dk, dv);
    c->normalize = 0;
    c->phi = sp->phi;
    c->algo = sp->algo;
    c->chunk = sp->chunk;
    c->num_threads = sp->threads;
    c->scale = sp->scale;
    c->qk_l2norm = sp->l2norm;
    c->qk_heads = sp->qk_heads;
    c->head_map = sp->head_map;
    linattn_config_set_gate(c, sp->gate);

    float g_lo = sp->g_lo, g_hi = sp->g_hi;
    if (g_lo > g_hi) {
        g_lo = sp->gate == LINATTN_GATE_TOKEN     ? -20.0f
               : sp->gate == LINATTN_GATE_CHANNEL ? -5.0f
                                                  : -2.0f;
        g_hi = sp->gate == LINATTN_GATE_CHANNEL ? 0.0f : -1e-4f;
    }
    const size_t nqk = (size_t)(B * Hq * T * dk), nv = (size_t)(B * H * T * dv);
    const size_t nbt = (size_t)(B * H * T);
    size_t ng = sp->gate == LINATTN_GATE_HEAD    ? (size_t)H
                : sp->gate == LINATTN_GATE_TOKEN ? nbt
                : sp->gate == LINATTN_GATE_CHANNEL ? nbt * (size_t)dk
                                                   : 0;
    switch (sp->layout) {
    case DL_BHTD:
    case DL_BTHD:
        p->q = alloc_floats(p, nqk);
        p->k = alloc_floats(p, nqk);
        p->v = alloc_floats(p, nv);
        p->beta = alloc_floats(p, nbt);
        fill(p->q, nqk, sp->q_lo, sp->q_hi);
        fill(p->k, nqk, sp->k_lo, sp->k_hi);
        fill(p->v, nv, sp->v_lo, sp->v_hi);
        fill(p->beta, nbt, sp->beta_lo, sp->beta_hi);
        if (ng) {
            p->g = alloc_floats(p, ng);
            fill(p->g, ng, g_lo, g_hi);
        }
        /* config_init's q/k strides are for H heads */
        c->q = c->k = (linattn_strides){Hq * T * dk, T * dk, dk};
        if (sp->layout == DL_BTHD) {
            c->q = c->k = (linattn_strides){T * Hq * dk, dk, Hq * dk};
            c->v = c->o = (linattn_strides){T * H * dv, dv, H * dv};
            c->beta = (linattn_strides){T * H, 1, H};
            if (sp->gate == LINATTN_GATE_TOKEN)
                c->g = (linattn_strides){T * H, 1, H};
            else if (sp->gate == LINATTN_GATE_CHANNEL)
                c->g = (linattn_strides){T * H * dk, dk, H * dk};
        }
        break;
    case DL_BROADCAST:
        p->q = alloc_floats(p, (size_t)(T * dk));
        p->k = alloc_floats(p, (size_t)(T * dk));
        p->v = alloc_floats(p, (size_t)(B * T * dv));
        p->beta = alloc_floats(p, nbt);
        fill(p->q, (size_t)(T * dk), sp->q_lo, sp->q_hi);
        fill(p->k, (size_t)(T * dk), sp->k_lo, sp->k_hi);
        fill(p->v, (size_t)(B * T * dv), sp->v_lo, sp->v_hi);
        fill(p->beta, nbt, sp->beta_lo, sp->beta_hi);
        if (ng) {
            p->g = alloc_floats(p, ng);
            fill(p->g, ng, g_lo, g_hi);
        }
        c->q = c->k = (linattn_strides){0, 0, dk};
        c->v = (linattn_strides){T * dv, 0, dv};
        break;
    case DL_PACKED: {
        const int64_t row = 2 * Hq * dk + H * dv;
        float *buf = alloc_floats(p, (size_t)(B * T * row));
        for (int64_t bt = 0; bt < B * T; bt++) {
            float *r = buf + bt * row;
            fill(r, (size_t)(Hq * dk), sp->q_lo, sp->q_hi);
            fill(r + Hq * dk, (size_t)(Hq * dk), sp->k_lo, sp->k_hi);
            fill(r + 2 * Hq * dk, (size_t)(H * dv), sp->v_lo, sp->v_hi);
        }
        p->q = buf, p->k = buf + Hq * dk, p->v = buf + 2 * Hq * dk;
        c->q = c->k = (linattn_strides){T * row, dk, row};
        c->v = (linattn_strides){T * row, dv, row};
        c->o = (linattn_strides){T * H * dv, dv, H * dv};
        /* beta and a token gate side by side, as one projection gives them */
        float *ba = alloc_floats(p, 2 * nbt);
        for (size_t i = 0; i < nbt; i++) {
            ba[2 * i] = rand_uniform(sp->beta_lo, sp->beta_hi);
            ba[2 * i + 1] = rand_uniform(g_lo, g_hi);
        }
        p->beta = ba;
        c->beta = (linattn_strides){T * H * 2, 2, H * 2};
        if (sp->gate == LINATTN_GATE_TOKEN) {
            p->g = ba + 1;
            c->g = c->beta;
        } else if (ng) {
            p->g = alloc_floats(p, ng);
            fill(p->g, ng, g_lo, g_hi);
            if (sp->gate == LINATTN_GATE_CHANNEL)
                c->g = (linattn_strides){T * H * dk, dk, H * dk};
        }
        break;
    }
    }
    if (sp->reset_at >= 0 && p->g) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                float *gt = p->g + b * c->g.batch + h * c->g.head;
                if (sp->gate == LINATTN_GATE_HEAD)
                    gt[0] = -FLT_MAX;
                else
                    for (int64_t i = 0; i < (sp->gate == LINATTN_GATE_CHANNEL ? dk : 1); i++)
                        gt[sp->reset_at * c->g.token + i] = -FLT_MAX;
            }
    }
    p->no = nv;
    p->o = alloc_floats(p, nv);
    for (size_t i = 0; i < nv; i++)
        p->o[i] = NAN; /* every element must be written */
    p->ns = (size_t)(B * H * dk * dv);
    if (sp->with_state) {
        p->s = alloc_floats(p, p->ns);
        fill(p->s, p->ns, -1, 1);
        p->s_init = malloc(p->ns * sizeof(float));
        memcpy(p->s_init, p->s, p->ns * sizeof(float));
    }
}

static void dproblem_free(dproblem *p)
{
    free(p->s_init);
    problem_free(&p->mem);
    memset(p, 0, sizeof *p);
}

static void restore_state(dproblem *p)
{
    if (p->s)
        memcpy(p->s, p->s_init, p->ns * sizeof(float));
}

static linattn_status dproblem_forward(dproblem *p)
{
    return linattn_delta_forward(&p->cfg, p->q, p->k, p->v, p->g, p->beta, p->o, p->s);
}

/* Offsets of token t in each input, for split calls and steps. */
static const float *g_at(const dproblem *p, int64_t t)
{
    if (!p->g || p->sp.gate == LINATTN_GATE_HEAD)
        return p->g;
    return p->g + t * p->cfg.g.token;
}

/* Tokens [t0, t0 + n) as one forward call carrying p->s. */
static linattn_status forward_piece(dproblem *p, int64_t t0, int64_t n)
{
    linattn_config c = p->cfg;
    c.seq_len = n;
    return linattn_delta_forward(&c, p->q + t0 * c.q.token, p->k + t0 * c.k.token,
                                 p->v + t0 * c.v.token, g_at(p, t0), p->beta + t0 * c.beta.token,
                                 p->o + t0 * c.o.token, p->s);
}

/* Token t as one decode step; the step config keeps the batch and head
 * strides of the whole-sequence buffers (token strides are ignored). */
static linattn_status step_at(dproblem *p, int64_t t)
{
    const linattn_config *c = &p->cfg;
    return linattn_delta_step(c, p->q + t * c->q.token, p->k + t * c->k.token,
                              p->v + t * c->v.token, g_at(p, t), p->beta + t * c->beta.token,
                              p->o + t * c->o.token, p->s);
}

/* max |x - ref| / max(1, max |ref|) over rows x n values; NaN sticks. */
static double rel_err(const float *x, int64_t x_stride, const double *ref, int64_t rows, int64_t n)
{
    double worst = 0, scale = 1;
    for (int64_t i = 0; i < rows * n; i++)
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const double d = fabs((double)x[r * x_stride + i] - ref[r * n + i]);
            if (!(d <= worst) && !isnan(worst))
                worst = d;
        }
    return worst / scale;
}

static double worse(double a, double b) { return isnan(a) || a > b ? a : b; }

/* Max error of o and the final state against the oracle, as a fraction of
 * the bound (<= 1 passes). Prints the case and the worst head on failure. */
static double dproblem_error(const dproblem *p)
{
    const linattn_config *c = &p->cfg;
    const int64_t B = c->batch, H = c->heads, T = c->seq_len, dk = c->dk, dv = c->dv;
    double *o = malloc(sizeof(double) * (size_t)(B * H * T * dv));
    double *s = malloc(sizeof(double) * (size_t)(B * H * dk * dv));
    oracle_delta(c, 0, p->q, p->k, p->v, p->g, p->beta, p->s_init, o, s);
    double worst = 0, worst_o = 0, worst_s = 0;
    int64_t wb = 0, wh = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h;
            const double eo = rel_err(p->o + b * c->o.batch + h * c->o.head, c->o.token,
                                      o + bh * T * dv, T, dv);
            const double es = p->s ? rel_err(p->s + bh * dk * dv, dv, s + bh * dk * dv, dk, dv) : 0;
            worst_o = worse(eo, worst_o), worst_s = worse(es, worst_s);
            if (!(worse(eo, es) <= worst))
                worst = worse(eo, es), wb = b, wh = h;
        }
    free(o);
    free(s);
    const double ratio = isnan(worst) ? INFINITY : worst / LA_TOL_REL;
    if (!(ratio <= 1.0))
        printf("FAIL %s: error %.3g of the bound (o %.3g, s %.3g; worst at b=%lld h=%lld)\n",
               dspec_name(&p->sp), ratio, worst_o / LA_TOL_REL, worst_s / LA_TOL_REL,
               (long long)wb, (long long)wh);
    return ratio;
}

static void expect_matches_oracle(const dproblem *p, const char *what)
{
    const double e = dproblem_error(p);
    ck_assert_msg(e <= 1.0, "%s: %s: error %.3g of the bound", what, dspec_name(&p->sp), e);
}

static void run_dspec(const dspec *sp)
{
    dproblem p;
    dproblem_make(&p, sp);
    const linattn_status st = dproblem_forward(&p);
    ck_assert_msg(st == LINATTN_OK, "%s: %s (%s)", dspec_name(sp), linattn_strerror(st),
                  linattn_last_error());
    expect_matches_oracle(&p, "forward");
    dproblem_free(&p);
}

/* sp's whole sequence token by token through linattn_delta_step. */
static void run_dspec_steps(const dspec *sp)
{
    dproblem p;
    dproblem_make(&p, sp);
    for (int64_t t = 0; t < sp->T; t++)
        ck_assert_int_eq(step_at(&p, t), LINATTN_OK);
    expect_matches_oracle(&p, "steps");
    dproblem_free(&p);
}

/* ---- against the oracle --------------------------------------------------- */

static const int64_t grid_T[] = {1, 2, 15, 16, 17, 63, 64, 65, 200, 1000};
static const int64_t grid_d[] = {1, 3, 16, 17, 64, 65, 128, 129, 256};
enum { N_T = sizeof grid_T / sizeof grid_T[0], N_D = sizeof grid_d / sizeof grid_d[0] };

/* _i: 0 = chunked, 1 = recurrent. Four (dk, dv) pairs per T, rotated so
 * that every size meets every T bracket and several gates, feature maps,
 * normalisations, head maps and chunk sizes; big problems run on fewer
 * heads. */
START_TEST(grid_against_oracle)
{
    const linattn_algo algo = _i == 0 ? LINATTN_ALGO_CHUNKED : LINATTN_ALGO_RECURRENT;
    static const int64_t chunks[] = {0, 5, 0, 16, 64, 0, 33}; /* 0: the table's default */
    for (int ti = 0; ti < N_T; ti++)
        for (int j = 0; j < 4; j++) {
            const int n = ti * 4 + j;
            const int64_t T = grid_T[ti], dk = grid_d[(ti + 2 * j) % N_D],
                          dv = grid_d[(2 * ti + 3 * j + 5) % N_D];
            const int big = T * dk * dv > 1000 * 64 * 65;
            dspec sp = dspec_default(big ? 1 : 2, big ? 1 : 4, T, dk, dv);
            sp.algo = algo;
            sp.chunk = chunks[n % 7]; /* ignored by recurrent */
            sp.gate = (linattn_gate)((ti + j) % 4);
            sp.phi = (linattn_phi)(ti % 3);
            if (n % 3 == 2)
                small_keys(&sp);
            sp.with_state = (n / 2 + ti) % 2;
            sp.scale = n % 7 == 0 ? (float)(1.0 / sqrt((double)dk)) : 1.0f;
            if (!big && n % 5 != 4) { /* 2 q/k heads, both maps */
                sp.qk_heads = 2;
                sp.head_map = (linattn_head_map)((n / 3) % 2);
            }
            run_dspec(&sp);
        }
}
END_TEST

/* The largest heads over a long sequence, every gate. */
START_TEST(long_sequence_big_heads)
{
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
        dspec sp = dspec_default(1, 1, 1000, 256, 256);
        sp.gate = (linattn_gate)gate;
        sp.algo = gate % 2 ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_CHUNKED;
        sp.with_state = 1;
        sp.scale = 1.0f / 16;
        run_dspec(&sp);
    }
    /* near the longest sequences the contract covers */
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
            dspec sp = dspec_default(1, 1, 4096, 64, 64);
            sp.gate = (linattn_gate)gate;
            sp.algo = (linattn_algo)algo;
            sp.with_state = 1;
            sp.scale = 1.0f / 8;
            run_dspec(&sp);
        }
}
END_TEST

/* Every feature map with qk_l2norm on and off, every algorithm. */
START_TEST(feature_maps_and_l2norm)
{
    for (int phi = LINATTN_PHI_ELU1; phi <= LINATTN_PHI_IDENTITY; phi++)
        for (int l2 = 0; l2 <= 1; l2++)
            for (int algo = LINATTN_ALGO_AUTO; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                dspec sp = dspec_default(2, 3, 77, 19, 33);
                sp.phi = (linattn_phi)phi;
                sp.algo = (linattn_algo)algo;
                sp.gate = (linattn_gate)((phi + algo + l2) % 4);
                sp.with_state = 1;
                if (!l2)
                    small_keys(&sp);
                run_dspec(&sp);
            }
}
END_TEST

/* beta up to 2 (2: a reflection that negates the key direction), with and
 * without qk_l2norm; and beta = 0 everywhere (the state only decays). */
START_TEST(beta_up_to_two)
{
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++)
            for (int l2 = 0; l2 <= 1; l2++) {
                dspec sp = dspec_default(1, 2, 200, 32, 24);
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.beta_lo = 0, sp.beta_hi = 2;
                sp.with_state = 1;
                sp.chunk = 16 + 9 * l2;
                if (!l2)
                    small_keys(&sp);
                run_dspec(&sp);
                sp.beta_lo = sp.beta_hi = gate == LINATTN_GATE_NONE ? 2.0f : 0.0f;
                run_dspec(&sp);
            }
}
END_TEST

/* g = -20 on every token: e^(-sum g) would overflow if a kernel formed it. */
START_TEST(strong_decay)
{
    for (int gate = LINATTN_GATE_HEAD; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
            dspec sp = dspec_default(1, 2, 300, 32, 32);
            sp.gate = (linattn_gate)gate;
            sp.algo = (linattn_algo)algo;
            sp.with_state = 1;
            sp.chunk = 128;
            sp.g_lo = sp.g_hi = -20.0f;
            run_dspec(&sp);
            sp.g_lo = -30.0f, sp.g_hi = 0.0f; /* strong and weak mixed */
            run_dspec(&sp);
        }
}
END_TEST

/* Per-channel gates where some channels decay hard (-20 per token) and
 * others not at all (0): within one chunk the channels' prefix sums then
 * differ by up to 20 x chunk, so a factor formed relative to the wrong row
 * overflows. Both patterns: alternating channels, and one strong channel. */
START_TEST(channel_gate_extremes)
{
    static const int64_t chunks[] = {0, 7, 64, 200};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        for (int pattern = 0; pattern < 2; pattern++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                dspec sp = dspec_default(1, 2, 150, 33, 20);
                sp.gate = LINATTN_GATE_CHANNEL;
                sp.algo = (linattn_algo)algo;
                sp.chunk = chunks[i];
                sp.with_state = 1;
                dproblem p;
                dproblem_make(&p, &sp);
                for (int64_t x = 0; x < sp.H * sp.T; x++)
                    for (int64_t c = 0; c < sp.dk; c++)
                        p.g[x * sp.dk + c] = (pattern ? c == 5 : c % 2 == 0) ? -20.0f : 0.0f;
                ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                expect_matches_oracle(&p, pattern ? "one strong channel" : "alternating channels");
                dproblem_free(&p);
            }
}
END_TEST

/* One g = -FLT_MAX in the middle is a full reset: later outputs depend on
 * later tokens only. The reset lands inside a chunk, on its first row and on
 * its last. A per-head gate of -FLT_MAX resets at every token. */
START_TEST(full_reset)
{
    static const int64_t chunks[][2] = {{16, 40}, {16, 48}, {16, 47}, {7, 50}, {64, 1}, {1, 60}};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        for (int gate = LINATTN_GATE_HEAD; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                dspec sp = dspec_default(2, 2, 100, 24, 20);
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.chunk = chunks[i][0];
                sp.reset_at = chunks[i][1];
                sp.with_state = 1;
                sp.g_lo = -1.0f, sp.g_hi = 0.0f;
                run_dspec(&sp);
            }
}
END_TEST

/* q/k heads shared by 2 and 4 value heads, both maps, through forward and
 * steps; layouts with their own q/k head strides. */
START_TEST(grouped_heads)
{
    for (int map = LINATTN_HEADS_GROUPED; map <= LINATTN_HEADS_TILED; map++)
        for (int ratio = 2; ratio <= 4; ratio += 2)
            for (int layout = DL_BHTD; layout <= DL_PACKED; layout++) {
                const int n = map * 6 + (ratio / 2 - 1) * 3 + layout;
                dspec sp = dspec_default(2, 2 * ratio, 45, 20, 12);
                sp.qk_heads = 2;
                sp.head_map = (linattn_head_map)map;
                sp.layout = (delta_layout)layout;
                sp.gate = (linattn_gate)(n % 4);
                sp.algo = n % 2 ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_CHUNKED;
                sp.chunk = 16;
                sp.with_state = 1;
                run_dspec(&sp);
                run_dspec_steps(&sp);
            }
    /* one q/k head for every value head (multi-query) */
    dspec mq = dspec_default(1, 4, 33, 17, 9);
    mq.qk_heads = 1;
    mq.gate = LINATTN_GATE_TOKEN;
    run_dspec(&mq);
}
END_TEST

/* Broadcast inputs (strides 0: every head and batch entry reads one set of
 * q/k rows, every head one v row per token): every gate and form, with
 * grouped q/k heads too, and through steps. */
START_TEST(broadcast_inputs)
{
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
            dspec sp = dspec_default(2, 4, 37, 17, 20);
            sp.layout = DL_BROADCAST;
            sp.gate = (linattn_gate)gate;
            sp.algo = (linattn_algo)algo;
            sp.qk_heads = algo == LINATTN_ALGO_CHUNKED ? 2 : 0;
            sp.with_state = 1;
            sp.threads = 1 + gate % 2;
            run_dspec(&sp);
            if (algo == LINATTN_ALGO_RECURRENT)
                run_dspec_steps(&sp);
        }
}
END_TEST

START_TEST(strided_layouts)
{
    for (int layout = DL_BHTD; layout <= DL_PACKED; layout++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                dspec sp = dspec_default(2, 3, 67, 17, 24);
                sp.layout = (delta_layout)layout;
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.with_state = (gate + algo) % 2;
                run_dspec(&sp);
            }
}
END_TEST

START_TEST(unaligned_pointers)
{
    static const int64_t dims[][2] = {{1, 1}, {7, 9}, {16, 16}, {33, 65}};
    for (size_t i = 0; i < 4; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                dspec sp = dspec_default(1, 2, 70, dims[i][0], dims[i][1]);
                sp.unaligned = 1;
                sp.with_state = 1;
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.layout = i == 3 ? DL_BTHD : DL_BHTD;
                run_dspec(&sp);
            }
}
END_TEST

/* s = NULL: a zero initial state, and nothing returned. */
START_TEST(null_state)
{
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
            dspec sp = dspec_default(2, 2, 90, 24, 70);
            sp.gate = (linattn_gate)gate;
            sp.algo = (linattn_algo)algo;
            sp.threads = 2;
            sp.chunk = 32;
            run_dspec(&sp);
        }
}
END_TEST

/* Chunked results agree with recurrent ones (o and final state) for chunk
 * sizes of one row, odd sizes, a chunk covering the whole sequence and more
 * (clamped to T), and the table's default. */
START_TEST(chunked_matches_recurrent)
{
    static const int64_t chunks[] = {0, 1, 7, 16, 64, 150, 5000};
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
        dspec sp = dspec_default(1, 2, 150, 40, 33); /* B = 1, BHTD: o, s by head */
        sp.gate = (linattn_gate)gate;
        sp.algo = LINATTN_ALGO_RECURRENT;
        sp.with_state = 1;
        dproblem p;
        dproblem_make(&p, &sp);
        ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
        expect_matches_oracle(&p, "recurrent");
        float *o_rec = malloc(p.no * sizeof(float)), *s_rec = malloc(p.ns * sizeof(float));
        memcpy(o_rec, p.o, p.no * sizeof(float));
        memcpy(s_rec, p.s, p.ns * sizeof(float));
        for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
            restore_state(&p);
            p.cfg.algo = p.sp.algo = LINATTN_ALGO_CHUNKED;
            p.cfg.chunk = p.sp.chunk = chunks[i];
            ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
            double d = 0;
            const int64_t T = sp.T, dk = sp.dk, dv = sp.dv;
            for (int64_t h = 0; h < sp.H; h++) {
                double *ref_o = malloc(sizeof(double) * (size_t)(T * dv));
                double *ref_s = malloc(sizeof(double) * (size_t)(dk * dv));
                for (int64_t x = 0; x < T * dv; x++)
                    ref_o[x] = o_rec[h * T * dv + x];
                for (int64_t x = 0; x < dk * dv; x++)
                    ref_s[x] = s_rec[h * dk * dv + x];
                d = worse(rel_err(p.o + h * T * dv, dv, ref_o, T, dv), d);
                d = worse(rel_err(p.s + h * dk * dv, dv, ref_s, dk, dv), d);
                free(ref_o);
                free(ref_s);
            }
            ck_assert_msg(d <= LA_TOL_REL, "chunked vs recurrent %.3g (bound %g): %s", d,
                          LA_TOL_REL, dspec_name(&p.sp));
            expect_matches_oracle(&p, "chunked");
        }
        free(o_rec);
        free(s_rec);
        dproblem_free(&p);
    }
}
END_TEST

/* ---- state carried across calls ------------------------------------------ */

/* Two forward calls carrying the state equal one, wherever the split falls;
 * and a forward over a prefix followed by decode steps equals one forward. */
START_TEST(state_carried_across_calls)
{
    static const int64_t splits[] = {1, 15, 16, 17, 64, 99};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            const int64_t T = 100, split = splits[i];
            dspec sp = dspec_default(2, 2, T, 24, 20);
            sp.gate = (linattn_gate)gate;
            sp.with_state = 1;
            sp.algo = i % 2 ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_CHUNKED;
            sp.chunk = 16;
            sp.layout = (delta_layout)(i % 3);
            dproblem p;
            dproblem_make(&p, &sp);
            ck_assert_int_eq(forward_piece(&p, 0, split), LINATTN_OK);
            ck_assert_int_eq(forward_piece(&p, split, T - split), LINATTN_OK);
            expect_matches_oracle(&p, "two forward calls");

            restore_state(&p);
            ck_assert_int_eq(forward_piece(&p, 0, split), LINATTN_OK);
            for (int64_t t = split; t < T; t++)
                ck_assert_int_eq(step_at(&p, t), LINATTN_OK);
            expect_matches_oracle(&p, "forward then steps");
            dproblem_free(&p);
        }
}
END_TEST

/* Decode steps alone over many shapes, threads and alignments. */
START_TEST(steps_against_oracle)
{
    /* rows past one register tile swept whole (delta_step_rows): every
     * register split of avx2 (4, 8, 12 and 8 vectors) and avx512 (8, 16) */
    static const int64_t dims[][2] = {{1, 1},   {3, 17},   {16, 16},  {65, 33}, {128, 128},
                                      {129, 7}, {256, 256}, {6, 40},  {5, 72},  {7, 100},
                                      {5, 129}, {3, 255},  {17, 256}, {9, 257}, {4, 520}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            dspec sp = dspec_default(2, 2, 12, dims[i][0], dims[i][1]);
            sp.gate = (linattn_gate)gate;
            sp.with_state = 1;
            sp.unaligned = (int)(i % 2);
            sp.threads = 1 + (int)(i % 3);
            if (gate == LINATTN_GATE_HEAD)
                small_keys(&sp);
            run_dspec_steps(&sp);
        }
}
END_TEST

/* Steps on per-token buffers laid out by linattn_config_init_step: q, k
 * [B][Hqk][dk], v, o [B][H][dv], g [B][H] or [B][H][dk], beta [B][H]; each
 * step against the oracle's step from the state the previous one left. */
START_TEST(steps_on_step_buffers)
{
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int map = LINATTN_HEADS_GROUPED; map <= LINATTN_HEADS_TILED; map++) {
            const int64_t B = 2, H = 4, Hq = 2, dk = 24, dv = 40, steps = 5;
            linattn_config c;
            linattn_config_init_step(&c, B, H, dk, dv);
            c.normalize = 0;
            c.qk_l2norm = 1;
            c.qk_heads = Hq;
            c.head_map = (linattn_head_map)map;
            c.scale = 0.2f;
            c.num_threads = 1 + map;
            c.causal = map; /* a step ignores it: one token is causal */
            linattn_config_set_gate(&c, (linattn_gate)gate);
            c.q = c.k = (linattn_strides){Hq * dk, dk, 0};
            problem mem = {0};
            const size_t nqk = (size_t)(B * Hq * dk), nv = (size_t)(B * H * dv),
                         ns = (size_t)(B * H * dk * dv);
            const size_t ng = gate == LINATTN_GATE_NONE      ? 0
                              : gate == LINATTN_GATE_HEAD    ? (size_t)H
                              : gate == LINATTN_GATE_TOKEN   ? (size_t)(B * H)
                                                             : (size_t)(B * H * dk);
            float *q = guarded_floats(&mem, nqk, 1), *k = guarded_floats(&mem, nqk, 0);
            float *v = guarded_floats(&mem, nv, 1), *o = guarded_floats(&mem, nv, 0);
            float *beta = guarded_floats(&mem, (size_t)(B * H), 1);
            float *g = ng ? guarded_floats(&mem, ng, 0) : NULL;
            float *s = guarded_floats(&mem, ns, 1);
            fill(s, ns, -1, 1);
            double *o_ref = malloc(nv * sizeof(double)), *s_ref = malloc(ns * sizeof(double));
            float *s_prev = malloc(ns * sizeof(float));
            for (int64_t t = 0; t < steps; t++) {
                fill(q, nqk, -1, 1);
                fill(k, nqk, -1, 1);
                fill(v, nv, -0.3f, 5);
                fill(beta, (size_t)(B * H), 0, 1);
                if (g)
                    fill(g, ng, gate == LINATTN_GATE_TOKEN ? -20.0f : -5.0f, 0);
                memcpy(s_prev, s, ns * sizeof(float));
                const linattn_status st = linattn_delta_step(&c, q, k, v, g, beta, o, s);
                ck_assert_msg(st == LINATTN_OK, "%s", linattn_last_error());
                oracle_delta(&c, 1, q, k, v, g, beta, s_prev, o_ref, s_ref);
                for (int64_t bh = 0; bh < B * H; bh++) {
                    const double *sr = s_ref + bh * dk * dv;
                    const double e = worse(rel_err(o + bh * dv, dv, o_ref + bh * dv, 1, dv),
                                           rel_err(s + bh * dk * dv, dv, sr, dk, dv));
                    ck_assert_msg(e <= LA_TOL_REL, "step %lld, gate %d, map %d, (b,h) %lld: %.3g",
                                  (long long)t, gate, map, (long long)bh, e);
                }
            }
            free(o_ref);
            free(s_ref);
            free(s_prev);
            problem_free(&mem);
        }
}
END_TEST

/* A NaN in q/k/v is not an API error; it reaches the outputs it touches:
 * one in k or v at token t reaches o_t (and the state after it), never an
 * earlier output; one in q reaches o_t only. Chunked kernels must skip the
 * masked parts of a chunk, not multiply them by zero. */
START_TEST(nan_propagates_only_forward)
{
    for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int where = 0; where < 3; where++) {
                dspec sp = dspec_default(1, 1, 80, 8, 8);
                sp.algo = (linattn_algo)algo;
                sp.gate = (linattn_gate)gate;
                sp.chunk = 16;
                sp.beta_lo = 0.1f;
                dproblem p;
                dproblem_make(&p, &sp);
                const int64_t bad = 37;
                float *input = where == 0 ? p.v : where == 1 ? p.k : p.q;
                input[bad * 8 + 3] = NAN;
                ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                for (int64_t t = 0; t < sp.T; t++) {
                    const float *ot = p.o + t * p.cfg.o.token;
                    int any_nan = 0, all_finite = 1;
                    for (int64_t j = 0; j < sp.dv; j++) {
                        any_nan |= isnan(ot[j]);
                        all_finite &= isfinite(ot[j]);
                    }
                    if (t < bad || (where == 2 && t > bad))
                        ck_assert_msg(all_finite,
                                      "o[t=%lld] not finite, NaN in input %d at %lld: %s",
                                      (long long)t, where, (long long)bad, dspec_name(&sp));
                    else if (t == bad)
                        ck_assert_msg(any_nan, "o[t=%lld] has no NaN, NaN in input %d there: %s",
                                      (long long)t, where, dspec_name(&sp));
                }
                dproblem_free(&p);
            }
}
END_TEST

/* ---- threads ---------------------------------------------------------------- */

/* Bitwise identical results for 1, 2 and 3 threads: with more heads than
 * threads, and with a single head, whose units are column tiles. */
static void expect_threads_bitwise(const dspec *base, int steps)
{
    dproblem p;
    dproblem_make(&p, base);
    float *o1 = malloc(p.no * sizeof(float)), *s1 = malloc(p.ns * sizeof(float));
    for (int threads = 1; threads <= 3; threads++) {
        restore_state(&p);
        p.cfg.num_threads = p.sp.threads = threads;
        if (steps)
            for (int64_t t = 0; t < p.sp.T; t++)
                ck_assert_int_eq(step_at(&p, t), LINATTN_OK);
        else
            ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
        if (threads == 1) {
            memcpy(o1, p.o, p.no * sizeof(float));
            if (p.s)
                memcpy(s1, p.s, p.ns * sizeof(float));
            continue;
        }
        ck_assert_msg(memcmp(o1, p.o, p.no * sizeof(float)) == 0, "o differs with %d threads: %s",
                      threads, dspec_name(&p.sp));
        ck_assert_msg(!p.s || memcmp(s1, p.s, p.ns * sizeof(float)) == 0,
                      "s differs with %d threads: %s", threads, dspec_name(&p.sp));
    }
    expect_matches_oracle(&p, steps ? "threaded steps" : "threaded forward");
    free(o1);
    free(s1);
    dproblem_free(&p);
}

START_TEST(threads_bitwise_equal)
{
    static const int64_t shapes[][5] = {{2, 3, 130, 32, 24}, {1, 1, 300, 64, 300}};
    for (int sh = 0; sh < 2; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++)
                for (int state = 0; state <= 1; state++) {
                    dspec sp = dspec_default(shapes[sh][0], shapes[sh][1], shapes[sh][2],
                                             shapes[sh][3], shapes[sh][4]);
                    sp.gate = (linattn_gate)gate;
                    sp.algo = (linattn_algo)algo;
                    sp.with_state = state;
                    sp.chunk = sh ? 16 : 0;
                    expect_threads_bitwise(&sp, 0);
                }
    /* decode of one sequence, one head: only column tiles to share */
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
        dspec sp = dspec_default(1, 1, 8, 128, 1000);
        sp.gate = (linattn_gate)gate;
        sp.with_state = 1;
        expect_threads_bitwise(&sp, 1);
    }
}
END_TEST

/* ---- the packed working copy (tuning.h: delta_pack_from_T) ------------------ */

/* The recurrent forward on the kernels' packed copy of the state gives the
 * same bits as on the state where it lies, whatever this CPU's tuning
 * entry says: both choices are forced here, the copy in tiles of the
 * table's width and of narrower ones (delta_pack_columns: one vector, 32
 * and 40 columns, rounded up to whole vectors). */
START_TEST(packed_state_same_bits)
{
    if (table->delta == NULL || table->delta->pack_tile == 0) {
        printf("table %s: no packed copy (its delta ops do not pack); nothing to compare\n",
               table->name);
        return;
    }
    la_tuning never = *la_active_kernels()->delta_tuning, always[4];
    never.delta_pack_from_T = LA_TUNE_NEVER;
    static const int64_t columns[4] = {0, 1, 32, 40};
    for (int w = 0; w < 4; w++) {
        always[w] = never;
        always[w].delta_pack_from_T = 1;
        always[w].delta_pack_columns = columns[w];
    }
    static const int64_t shapes[][6] = {
        /* B, H, qk heads, T, dk, dv */
        {1, 2, 2, 33, 5, 1},   {2, 3, 3, 70, 17, 15},  {1, 2, 1, 65, 64, 100},
        {1, 1, 1, 40, 128, 130}, {1, 4, 2, 100, 33, 64}, {1, 2, 2, 1, 16, 48},
    };
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int state = 0; state <= 1; state++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    dspec sp = dspec_default(shapes[sh][0], shapes[sh][1], shapes[sh][3],
                                             shapes[sh][4], shapes[sh][5]);
                    sp.qk_heads = shapes[sh][2];
                    sp.gate = (linattn_gate)gate;
                    sp.algo = LINATTN_ALGO_RECURRENT;
                    sp.with_state = state;
                    sp.threads = threads;
                    dproblem p;
                    dproblem_make(&p, &sp);
                    p.cfg.num_threads = threads;
                    la_force_table_tuning(table, NULL, &never);
                    ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                    float *o1 = copy_floats(p.o, p.no), *s1 = p.s ? copy_floats(p.s, p.ns) : NULL;
                    for (int w = 0; w < 4; w++) {
                        restore_state(&p);
                        la_force_table_tuning(table, NULL, &always[w]);
                        ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                        ck_assert_msg(memcmp(o1, p.o, p.no * sizeof(float)) == 0,
                                      "o differs on the packed copy (%lld columns): %s",
                                      (long long)columns[w], dspec_name(&p.sp));
                        ck_assert_msg(!p.s || memcmp(s1, p.s, p.ns * sizeof(float)) == 0,
                                      "s differs on the packed copy (%lld columns): %s",
                                      (long long)columns[w], dspec_name(&p.sp));
                    }
                    expect_matches_oracle(&p, "packed copy");
                    free(o1);
                    free(s1);
                    dproblem_free(&p);
                }
    la_force_table(table);
}
END_TEST

/* Element e of a test pool: x, or its upper half (truncated) in a bfloat16
 * pool. */
static void pool_put(void *pool, int bf16, int64_t e, float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (bf16)
        ((uint16_t *)pool)[e] = (uint16_t)(u >> 16);
    else
        ((float *)pool)[e] = x;
}

/* The per-token operands of tok rows (a step's heads, or a call's tokens
 * and heads), drawn at random: q and k in [-1, 1], v in [v_lo, v_hi], g
 * in [-2, 0] per channel (a token gate reads the first tok), beta in
 * [0, 1]; o1 and o2, zeroed, take a call's outputs and its variant's. */
typedef struct {
    float *q, *k, *v, *g, *beta, *o1, *o2;
    size_t o_bytes;
} token_rows;

static token_rows token_rows_make(int64_t tok, int64_t dk, int64_t dv, float v_lo, float v_hi)
{
    token_rows r = {
        .q = malloc((size_t)(tok * dk) * sizeof(float)),
        .k = malloc((size_t)(tok * dk) * sizeof(float)),
        .v = malloc((size_t)(tok * dv) * sizeof(float)),
        .g = malloc((size_t)(tok * dk) * sizeof(float)),
        .beta = malloc((size_t)tok * sizeof(float)),
        .o1 = calloc((size_t)(tok * dv), sizeof(float)),
        .o2 = calloc((size_t)(tok * dv), sizeof(float)),
        .o_bytes = (size_t)(tok * dv) * sizeof(float),
    };
    ck_assert(r.q && r.k && r.v && r.g && r.beta && r.o1 && r.o2);
    for (int64_t e = 0; e < tok * dk; e++)
        r.q[e] = rand_uniform(-1, 1), r.k[e] = rand_uniform(-1, 1), r.g[e] = rand_uniform(-2, 0);
    for (int64_t e = 0; e < tok * dv; e++)
        r.v[e] = rand_uniform(v_lo, v_hi);
    for (int64_t e = 0; e < tok; e++)
        r.beta[e] = rand_uniform(0, 1);
    return r;
}

/* q, k, v, beta and (with a gate) g of ops; the state and o are the caller's. */
static void token_rows_bind(const token_rows *r, linattn_operands *ops, int gate)
{
    ops->q = r->q, ops->k = r->k, ops->v = r->v, ops->beta = r->beta;
    ops->g = gate == LINATTN_GATE_NONE ? NULL : r->g;
}

static void token_rows_free(token_rows *r)
{
    free(r->q), free(r->k), free(r->v), free(r->g), free(r->beta), free(r->o1), free(r->o2);
}

/* A pool call that runs on the packed copy takes it straight from the pool
 * and writes it straight back (plan.c run_packed); the same call through a
 * K-first float copy (packing never) gives the same bits as packing from 32
 * tokens and from 1. K-first and V-first pools with padded rows (the
 * padding holds a marker that must stay), float and bfloat16, moved,
 * zero-start, in-place and unwritten slots, dv over several packed tiles,
 * 1 and 3 threads, tokens one at a time and in pairs. */
START_TEST(packed_pool_same_bits)
{
    if (table->delta == NULL || table->delta->pack_tile == 0) {
        printf("table %s: no packed copy (its delta ops do not pack); nothing to compare\n",
               table->name);
        return;
    }
    /* from 32: a float V-first call of 20 tokens packs (its state is
     * transposed anyway), the others do not */
    enum { B = 4, H = 2, SLOTS = 9, PAD = 3 };
    /* tokens one at a time, then in pairs (tuning.h); the entries outlive
     * the loop, which leaves the last one forced */
    const la_tuning entry = *la_active_kernels()->delta_tuning;
    la_tuning never, from32, always;
    for (int pairs = 0; pairs <= 1; pairs++) {
        never = entry;
        for (int gate = 0; gate < LA_GATES; gate++)
            never.delta_pair_from_T[gate] = pairs ? 2 : LA_TUNE_NEVER;
        from32 = never, always = never;
        never.delta_pack_from_T = LA_TUNE_NEVER;
        from32.delta_pack_from_T = 32;
        always.delta_pack_from_T = 1;
        /* with pairs, packed tiles of one vector (delta_pack_columns) */
        always.delta_pack_columns = pairs;
        const int64_t dk = 13, dv = 2 * table->delta->pack_tile + 5;
        const int32_t rd[B] = {5, -1, 2, 7}, wr[B] = {1, 4, 2, -1};
        static const int64_t Ts[] = {3, 20, 40};
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
            for (int vfirst = 0; vfirst <= 1; vfirst++)
                for (int bf16 = 0; bf16 <= 1; bf16++)
                    for (int threads = 1; threads <= 3; threads += 2) {
                        const int64_t T = Ts[ti], tok = B * T * H;
                        const int64_t row = vfirst ? 1 : dv + PAD, col = vfirst ? dk + PAD : 1;
                        const int64_t head = vfirst ? dv * col : dk * row, elems = SLOTS * H * head;
                        const size_t es = bf16 ? 2 : 4;
                        token_rows r = token_rows_make(tok, dk, dv, -0.3f, 5);
                        float *o1 = r.o1, *o2 = r.o2;
                        unsigned char *pool0 = malloc((size_t)elems * es);
                        unsigned char *pool1 = malloc((size_t)elems * es);
                        unsigned char *pool2 = malloc((size_t)elems * es);
                        ck_assert(pool0 && pool1 && pool2);
                        for (int64_t e = 0; e < elems; e++) {
                            const int64_t in_head = e % head;
                            const int64_t i = vfirst ? in_head % col : in_head / row;
                            const int64_t j = vfirst ? in_head / col : in_head % row;
                            const float x = i < dk && j < dv ? rand_uniform(-0.3f, 0.3f) : 1234.5f;
                            pool_put(pool0, bf16, e, x);
                        }
                        memcpy(pool1, pool0, (size_t)elems * es);
                        linattn_config cfg;
                        linattn_config_init(&cfg, B, H, T, dk, dv);
                        linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
                        cfg.normalize = 0, cfg.qk_l2norm = 1, cfg.num_threads = threads;
                        cfg.algo = LINATTN_ALGO_RECURRENT;
                        cfg.dtype.s = bf16 ? LINATTN_BF16 : LINATTN_F32;
                        linattn_state_pool pool = {.slots = SLOTS, .slot = H * head, .head = head,
                                                   .row = row, .col = col, .read_slots = rd,
                                                   .write_slots = wr};
                        linattn_operands ops;
                        linattn_operands_init(&ops);
                        token_rows_bind(&r, &ops, LINATTN_GATE_TOKEN);
                        ops.pool = &pool;
                        ops.o = o1, ops.s = pool1;
                        la_force_table_tuning(table, NULL, &never);
                        ck_assert_msg(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops) ==
                                          LINATTN_OK,
                                      "%s", linattn_last_error());
                        const char *what = vfirst ? (bf16 ? "V-first bf16" : "V-first f32")
                                                  : (bf16 ? "K-first bf16" : "K-first f32");
                        const la_tuning *packing[2] = {&from32, &always};
                        for (int pk = 0; pk < 2; pk++) {
                            memcpy(pool2, pool0, (size_t)elems * es);
                            memset(o2, 0, r.o_bytes);
                            ops.o = o2, ops.s = pool2;
                            la_force_table_tuning(table, NULL, packing[pk]);
                            ck_assert_msg(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops) ==
                                              LINATTN_OK,
                                          "%s", linattn_last_error());
                            ck_assert_msg(memcmp(o1, o2, r.o_bytes) == 0,
                                          "%s T = %lld, %d threads, packing from %lld: o differs",
                                          what, (long long)T, threads,
                                          (long long)packing[pk]->delta_pack_from_T);
                            ck_assert_msg(memcmp(pool1, pool2, (size_t)elems * es) == 0,
                                          "%s T = %lld, %d threads, packing from %lld: "
                                          "the pool differs",
                                          what, (long long)T, threads,
                                          (long long)packing[pk]->delta_pack_from_T);
                        }
                        /* only the write slots change (slot 7 is only read) */
                        for (int32_t slot = 0; slot < SLOTS; slot++) {
                            const int written = slot == wr[0] || slot == wr[1] || slot == wr[2];
                            const size_t at = (size_t)(slot * H * head) * es;
                            ck_assert_msg(written || memcmp(pool2 + at, pool0 + at,
                                                            (size_t)(H * head) * es) == 0,
                                          "%s T = %lld: slot %d was written", what, (long long)T,
                                          (int)slot);
                        }
                        for (int64_t e = 0; e < elems; e++) {
                            const int64_t in_head = e % head;
                            const int64_t i = vfirst ? in_head % col : in_head / row;
                            const int64_t j = vfirst ? in_head / col : in_head % row;
                            if (i >= dk || j >= dv)
                                expect_msg(memcmp(pool2 + (size_t)e * es, pool0 + (size_t)e * es,
                                                  es) == 0,
                                           "%s T = %lld: padding element %lld written", what,
                                           (long long)T, (long long)e);
                        }
                        token_rows_free(&r);
                        free(pool0), free(pool1), free(pool2);
                    }
    }
    la_force_table(table);
}
END_TEST

/* A V-first pool's decode step (one token) gives the same bits whichever
 * order its read-only pass reads a group's rows in (tuning.h:
 * delta_vfirst_dot_interleave) and however far it reads ahead
 * (delta_vfirst_read_ahead: one group, the table's default, 4 KiB), float
 * and bfloat16 pools, moved and in place, dk below, at and above the
 * vector with a partial last one, dv not a multiple of the group, every
 * gate, 1 and 3 threads. */
START_TEST(vfirst_step_dot_order_same_bits)
{
    enum { B = 3, H = 2, SLOTS = 5, PAD = 2 };
    const la_tuning entry = *la_active_kernels()->delta_tuning;
    la_tuning by_row = entry, interleaved[3];
    by_row.delta_vfirst_dot_interleave = 0;
    static const int64_t ahead[3] = {1, 0, 4096};
    for (int a = 0; a < 3; a++) {
        interleaved[a] = entry;
        interleaved[a].delta_vfirst_dot_interleave = 1;
        interleaved[a].delta_vfirst_read_ahead = ahead[a];
    }
    static const int64_t dims[][2] = {{13, 9}, {45, 40}, {128, 23}};
    const int32_t rd[B] = {0, 3, -1}, wr[B] = {1, 3, 4};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int bf16 = 0; bf16 <= 1; bf16++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    const int64_t dk = dims[d][0], dv = dims[d][1], tok = B * H;
                    const int64_t col = dk + PAD, head = dv * col, elems = SLOTS * H * head;
                    const size_t es = bf16 ? 2 : 4;
                    token_rows r = token_rows_make(tok, dk, dv, -0.3f, 5);
                    unsigned char *pool0 = malloc((size_t)elems * es);
                    unsigned char *pool1 = malloc((size_t)elems * es);
                    unsigned char *pool2 = malloc((size_t)elems * es);
                    ck_assert(pool0 && pool1 && pool2);
                    for (int64_t e = 0; e < elems; e++)
                        pool_put(pool0, bf16, e,
                                 e % col < dk ? rand_uniform(-0.3f, 0.3f) : 1234.5f);
                    memcpy(pool1, pool0, (size_t)elems * es);
                    linattn_config cfg;
                    linattn_config_init(&cfg, B, H, 1, dk, dv);
                    linattn_config_set_gate(&cfg, (linattn_gate)gate);
                    cfg.normalize = 0, cfg.qk_l2norm = 1, cfg.num_threads = threads;
                    cfg.dtype.s = bf16 ? LINATTN_BF16 : LINATTN_F32;
                    linattn_state_pool pool = {.slots = SLOTS, .slot = H * head, .head = head,
                                               .row = 1, .col = col, .read_slots = rd,
                                               .write_slots = wr};
                    linattn_operands ops;
                    linattn_operands_init(&ops);
                    token_rows_bind(&r, &ops, gate);
                    ops.pool = &pool;
                    ops.o = r.o1, ops.s = pool1;
                    la_force_table_tuning(table, NULL, &by_row);
                    ck_assert_msg(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops) == LINATTN_OK,
                                  "%s", linattn_last_error());
                    for (int a = 0; a < 3; a++) {
                        memcpy(pool2, pool0, (size_t)elems * es);
                        memset(r.o2, 0, r.o_bytes);
                        ops.o = r.o2, ops.s = pool2;
                        la_force_table_tuning(table, NULL, &interleaved[a]);
                        ck_assert_msg(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops) ==
                                          LINATTN_OK,
                                      "%s", linattn_last_error());
                        ck_assert_msg(memcmp(r.o1, r.o2, r.o_bytes) == 0 &&
                                          memcmp(pool1, pool2, (size_t)elems * es) == 0,
                                      "V-first %s step, dk %lld dv %lld gate %d, %d threads: "
                                      "interleaved rows (read-ahead %lld) differ from rows "
                                      "in turn",
                                      bf16 ? "bf16" : "f32", (long long)dk, (long long)dv, gate,
                                      threads, (long long)ahead[a]);
                    }
                    token_rows_free(&r);
                    free(pool0), free(pool1), free(pool2);
                }
    la_force_table(table);
}
END_TEST

/* ---- pair sweeps (tuning.h: delta_pair_from_T) ----------------------------- */

/* Tokens two at a time, forced on every table whatever this CPU's entry
 * says, against the double oracle: odd and even T (a last token alone, a
 * pair split over feature blocks of 32), dk and dv below, at and above the
 * vector and the tiles, every gate, strong and mixed decay, decays whose
 * product crosses LA_SCALED_TILE_MIN inside a block (a token gate's scaled
 * tile decayed mid-block), beta up to 2, a carried state; and the same
 * bits on the packed copy as where the state lies, and for 1 and 3
 * threads. */
START_TEST(pair_sweeps_match_oracle)
{
    la_tuning pairs = *la_active_kernels()->delta_tuning, packed = pairs, narrow;
    for (int gate = 0; gate < LA_GATES; gate++)
        pairs.delta_pair_from_T[gate] = packed.delta_pair_from_T[gate] = 2;
    pairs.delta_pack_from_T = LA_TUNE_NEVER;
    packed.delta_pack_from_T = 1;
    narrow = packed; /* packed tiles of 32 columns (delta_pack_columns) */
    narrow.delta_pack_columns = 32;
    const la_tuning *const reruns[3] = {&packed, &pairs, &narrow};
    static const char *const rerun_names[3] = {"on the packed copy", "on 3 threads",
                                               "on the packed copy in 32-column tiles"};
    static const int64_t shapes[][6] = {
        /* B, H, qk heads, T, dk, dv */
        {1, 2, 2, 2, 5, 1},    {2, 3, 3, 3, 17, 15},   {1, 2, 1, 33, 64, 100},
        {1, 1, 1, 65, 128, 130}, {1, 4, 2, 100, 33, 64}, {2, 2, 2, 64, 16, 48},
    };
    static const float g_ranges[][2] = {
        {1, 0} /* the gate's default */, {-20, -20}, {-30, 0}, {-1.5f, -0.5f}};
    const size_t n_ranges = sizeof g_ranges / sizeof g_ranges[0];
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (size_t gr = 0; gr < (gate == LINATTN_GATE_NONE ? 1 : n_ranges); gr++) {
                dspec sp = dspec_default(shapes[sh][0], shapes[sh][1], shapes[sh][3],
                                         shapes[sh][4], shapes[sh][5]);
                sp.qk_heads = shapes[sh][2];
                sp.gate = (linattn_gate)gate;
                sp.algo = LINATTN_ALGO_RECURRENT;
                sp.with_state = 1;
                sp.g_lo = g_ranges[gr][0], sp.g_hi = g_ranges[gr][1];
                if (sh % 2)
                    sp.beta_hi = 2.0f;
                dproblem p;
                dproblem_make(&p, &sp);
                la_force_table_tuning(table, NULL, &pairs);
                ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                expect_matches_oracle(&p, "pair sweeps");
                float *o1 = copy_floats(p.o, p.no), *s1 = copy_floats(p.s, p.ns);
                for (int run = 0; run < 3; run++) {
                    restore_state(&p);
                    p.cfg.num_threads = run == 1 ? 3 : 1;
                    la_force_table_tuning(table, NULL, reruns[run]);
                    ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                    ck_assert_msg(memcmp(o1, p.o, p.no * sizeof(float)) == 0 &&
                                      memcmp(s1, p.s, p.ns * sizeof(float)) == 0,
                                  "pair sweeps give other bits %s (%s)", rerun_names[run],
                                  dspec_name(&p.sp));
                }
                free(o1);
                free(s1);
                dproblem_free(&p);
            }
    la_force_table(table);
}
END_TEST

/* delta_pair_below_T ends the paired lengths, by the call's length: a
 * call of T tokens gives the bits of pairs always when T is below the
 * bound and of one token at a time when it is not, whatever the blocks
 * the call is cut into (T = 40 is a block of 32 tokens and one of 8), on
 * 1 and 3 threads, every gate. */
START_TEST(pair_range_by_length)
{
    la_tuning always = *la_active_kernels()->delta_tuning, never = always, ranged = always;
    for (int gate = 0; gate < LA_GATES; gate++) {
        always.delta_pair_from_T[gate] = ranged.delta_pair_from_T[gate] = 2;
        never.delta_pair_from_T[gate] = LA_TUNE_NEVER;
        always.delta_pair_below_T[gate] = never.delta_pair_below_T[gate] = 0;
    }
    /* (T, bound): below the bound, then at it */
    static const int64_t cases[][2] = {{7, 8}, {8, 8}, {40, 41}, {40, 40}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int threads = 1; threads <= 3; threads += 2) {
                dspec sp = dspec_default(1, 4, cases[ci][0], 33, 40);
                sp.qk_heads = 2;
                sp.gate = (linattn_gate)gate;
                sp.algo = LINATTN_ALGO_RECURRENT;
                sp.with_state = 1;
                dproblem p;
                dproblem_make(&p, &sp);
                p.cfg.num_threads = threads;
                const int paired = cases[ci][0] < cases[ci][1];
                la_force_table_tuning(table, NULL, paired ? &always : &never);
                ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                float *o1 = copy_floats(p.o, p.no), *s1 = copy_floats(p.s, p.ns);
                restore_state(&p);
                for (int gi = 0; gi < LA_GATES; gi++)
                    ranged.delta_pair_below_T[gi] = cases[ci][1];
                la_force_table_tuning(table, NULL, &ranged);
                ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
                ck_assert_msg(memcmp(o1, p.o, p.no * sizeof(float)) == 0 &&
                                  memcmp(s1, p.s, p.ns * sizeof(float)) == 0,
                              "T = %lld, pairs below %lld: not the bits of %s (%s, %d threads)",
                              (long long)cases[ci][0], (long long)cases[ci][1],
                              paired ? "pairs" : "one token at a time", dspec_name(&p.sp),
                              threads);
                expect_matches_oracle(&p, "pairs in a range of lengths");
                free(o1);
                free(s1);
                dproblem_free(&p);
            }
    la_force_table(table);
}
END_TEST

/* Pairs under a token gate keep the tile divided by the decays while that
 * stays above LA_SCALED_TILE_MIN, and so divide u by them; a pair whose v
 * is near float's range must multiply the tile instead, or u / d
 * overflows where the state does not. Two tokens mid-block get |v| up to
 * 2^120 when d is about 2^-14 (log-decay -1 a token); the results are
 * finite and match the oracle on 1 and 3 threads (each unit looks at the
 * rows itself) and on the packed copy. */
START_TEST(pair_sweeps_large_v)
{
    la_tuning pairs = *la_active_kernels()->delta_tuning;
    pairs.delta_pair_from_T[LA_GATE_TOKEN] = 2;
    static const int64_t dims[] = {17, 64, 128};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int run = 0; run < 3; run++) {
            dspec sp = dspec_default(1, 2, 40, dims[di], dims[di]);
            sp.gate = LINATTN_GATE_TOKEN;
            sp.algo = LINATTN_ALGO_RECURRENT;
            sp.with_state = 1;
            sp.g_lo = sp.g_hi = -1.0f;
            sp.beta_lo = 0.5f, sp.beta_hi = 1.0f;
            dproblem p;
            dproblem_make(&p, &sp);
            scale_value_rows(&p.cfg, p.v, 8, 10, 0x1p120f / 5.0f); /* v up to 5 */
            pairs.delta_pack_from_T = run == 2 ? 1 : LA_TUNE_NEVER;
            la_force_table_tuning(table, NULL, &pairs);
            p.cfg.num_threads = run == 1 ? 3 : 1;
            ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
            expect_matches_oracle(&p, run == 0   ? "pairs, large v"
                                      : run == 1 ? "pairs, large v, 3 threads"
                                                 : "pairs, large v, packed");
            dproblem_free(&p);
        }
    la_force_table(table);
}
END_TEST

/* ---- one-token tiles (tuning.h: delta_step_columns) ------------------------ */

/* A decode step (and a one-token forward) gives the same bits on tiles of
 * any width, each prefetching the next, and on whole rows: the tuning
 * entry's width is forced to the table's tile, 16 columns and 40 (rounded
 * up to whole vectors), and its bound on heads swept whole to none (every
 * head by tiles) and to every head (whole rows wherever the table has
 * them). */
START_TEST(step_tiles_same_bits)
{
    la_tuning tune = *la_active_kernels()->delta_tuning;
    /* (columns, fused read-only pass, delta_step_rows_bytes): the table's
     * tile first, unfused, every head by tiles */
    static const int64_t widths[][3] = {{0, 0, 1},          {16, 0, 1},        {16, 1, 1},
                                        {40, 1, 1},         {64, 1, 1},        {0, 0, 0},
                                        {0, 0, INT64_MAX}, {16, 1, INT64_MAX}};
    static const int64_t shapes[][5] = {
        /* B, H, qk heads, dk, dv */
        {1, 2, 2, 5, 1}, {2, 3, 3, 17, 15}, {1, 2, 1, 64, 100}, {1, 1, 1, 128, 130},
        {1, 4, 2, 33, 64}, {3, 2, 2, 16, 48},
        /* four and three value heads of one q/k head in one unit, each
         * head's last tile fetching the next head's first */
        {1, 8, 2, 32, 128}, {2, 6, 2, 16, 32},
        /* rows past one register tile, in every register split */
        {1, 2, 2, 9, 100}, {1, 3, 3, 5, 257}, {1, 2, 1, 17, 520}, {2, 2, 2, 4, 200},
        {1, 2, 2, 6, 72},
    };
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int step = 0; step <= 1; step++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    dspec sp = dspec_default(shapes[sh][0], shapes[sh][1], 1, shapes[sh][3],
                                             shapes[sh][4]);
                    sp.qk_heads = shapes[sh][2];
                    sp.gate = (linattn_gate)gate;
                    sp.algo = LINATTN_ALGO_RECURRENT;
                    sp.with_state = 1;
                    sp.threads = threads;
                    dproblem p;
                    dproblem_make(&p, &sp);
                    p.cfg.num_threads = threads;
                    float *o1 = NULL, *s1 = NULL;
                    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
                        tune.delta_step_columns = widths[w][0];
                        tune.delta_step_fuse = (int)widths[w][1];
                        tune.delta_step_rows_bytes = widths[w][2];
                        la_force_table_tuning(table, NULL, &tune);
                        restore_state(&p);
                        ck_assert_int_eq(step ? step_at(&p, 0) : dproblem_forward(&p), LINATTN_OK);
                        if (w == 0) {
                            o1 = copy_floats(p.o, p.no), s1 = copy_floats(p.s, p.ns);
                            expect_matches_oracle(&p, step ? "step tiles" : "one-token tiles");
                            continue;
                        }
                        ck_assert_msg(memcmp(o1, p.o, p.no * sizeof(float)) == 0 &&
                                          memcmp(s1, p.s, p.ns * sizeof(float)) == 0,
                                      "%s: %lld-column tiles%s, rows bound %lld, give "
                                      "other bits than the table's (%s)",
                                      step ? "step" : "one-token forward",
                                      (long long)widths[w][0],
                                      widths[w][1] ? " with fused read-only passes" : "",
                                      (long long)widths[w][2], dspec_name(&p.sp));
                    }
                    free(o1);
                    free(s1);
                    dproblem_free(&p);
                }
    la_force_table(table);
}
END_TEST

/* A bfloat16 K-first state's decode step gives the same bits on register
 * tiles and on whole rows (delta_step_rows), with its next-state fetch
 * spread over both passes or in the sweep alone (tuning.h:
 * delta_step_bf16_sweep_fetch): dk below and above the vector, dv below,
 * at and past the table's tile with a partial last vector, several heads
 * (each fetching the next one's state), every gate, 1 and 3 threads. */
START_TEST(bf16_step_tiles_same_bits)
{
    const la_tuning entry = *la_active_kernels()->delta_tuning;
    /* (delta_step_rows_bytes, delta_step_bf16_sweep_fetch), each against
     * a run with the table's entry: tiles only (a bound of 1 byte), and
     * whole rows wherever the columns are wider than a tile, each with
     * either fetch */
    static const int64_t variants[][2] = {{1, 0}, {1, 1}, {INT64_MAX, 0}, {INT64_MAX, 1}};
    static const int64_t shapes[][4] = {
        /* B, H, dk, dv */
        {1, 3, 17, 40}, {2, 2, 32, 128}, {1, 2, 64, 200}, {1, 3, 9, 257}, {2, 2, 16, 520},
    };
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int threads = 1; threads <= 3; threads += 2) {
                const int64_t B = shapes[sh][0], H = shapes[sh][1], dk = shapes[sh][2],
                              dv = shapes[sh][3], heads = B * H, elems = heads * dk * dv;
                token_rows r = token_rows_make(heads, dk, dv, -1, 1);
                uint16_t *s0 = malloc((size_t)elems * 2), *s1 = malloc((size_t)elems * 2);
                uint16_t *s2 = malloc((size_t)elems * 2);
                ck_assert(s0 && s1 && s2);
                for (int64_t e = 0; e < elems; e++)
                    pool_put(s0, 1, e, rand_uniform(-0.5f, 0.5f));
                linattn_config cfg;
                linattn_config_init_step(&cfg, B, H, dk, dv);
                linattn_config_set_gate(&cfg, (linattn_gate)gate);
                cfg.normalize = 0, cfg.qk_l2norm = 1, cfg.num_threads = threads;
                cfg.dtype.s = LINATTN_BF16;
                linattn_operands ops;
                linattn_operands_init(&ops);
                token_rows_bind(&r, &ops, gate);
                memcpy(s1, s0, (size_t)elems * 2);
                ops.o = r.o1, ops.s = s1;
                la_force_table_tuning(table, NULL, &entry);
                ck_assert_msg(linattn_run(LINATTN_OP_DELTA_STEP, &cfg, &ops) == LINATTN_OK, "%s",
                              linattn_last_error());
                for (size_t w = 0; w < sizeof variants / sizeof variants[0]; w++) {
                    la_tuning tune = entry;
                    tune.delta_step_rows_bytes = variants[w][0];
                    tune.delta_step_bf16_sweep_fetch = (int)variants[w][1];
                    la_force_table_tuning(table, NULL, &tune);
                    memcpy(s2, s0, (size_t)elems * 2);
                    ops.o = r.o2, ops.s = s2;
                    ck_assert_msg(linattn_run(LINATTN_OP_DELTA_STEP, &cfg, &ops) == LINATTN_OK,
                                  "%s", linattn_last_error());
                    ck_assert_msg(memcmp(r.o1, r.o2, r.o_bytes) == 0 &&
                                      memcmp(s1, s2, (size_t)elems * 2) == 0,
                                  "bf16 step B=%lld H=%lld dk=%lld dv=%lld gate %d, %d threads: "
                                  "%s, fetch %s, give other bits than the table's",
                                  (long long)B, (long long)H, (long long)dk, (long long)dv, gate,
                                  threads, variants[w][0] == 1 ? "tiles" : "whole rows",
                                  variants[w][1] ? "in the sweep" : "spread");
                }
                token_rows_free(&r);
                free(s0), free(s1), free(s2);
            }
    la_force_table(table);
}
END_TEST

/* A V-first pool's decode step reads a stretch of rows for their dot
 * products before it updates them (la_tuning.delta_vfirst_read_ahead):
 * every stretch, from one group of rows to the whole head, gives the same
 * bits, float and bfloat16 pools, 1 and 3 threads, dv leaving a partial
 * group, two tokens in a row (the second reads what the first wrote). */
START_TEST(vfirst_read_ahead_same_bits)
{
    enum { B = 3, H = 2 };
    const int64_t dk = 40, dv = 37, head = dv * dk, elems = B * H * head, tok = B * H;
    static const int64_t aheads[] = {0, 1, 700, 16 << 10, 1 << 20};
    const la_tuning entry = *la_active_kernels()->delta_tuning;
    la_tuning tune = entry;
    for (int bf16 = 0; bf16 <= 1; bf16++)
        for (int threads = 1; threads <= 3; threads += 2) {
            const size_t es = bf16 ? 2 : 4;
            token_rows r = token_rows_make(2 * tok, dk, dv, -0.3f, 5); /* two steps' rows */
            unsigned char *pool0 = malloc((size_t)elems * es), *pool = malloc((size_t)elems * es);
            unsigned char *pool1 = malloc((size_t)elems * es);
            ck_assert(pool0 && pool && pool1);
            for (int64_t e = 0; e < elems; e++)
                pool_put(pool0, bf16, e, rand_uniform(-0.3f, 0.3f));
            for (size_t a = 0; a < sizeof aheads / sizeof aheads[0]; a++) {
                tune.delta_vfirst_read_ahead = aheads[a];
                la_force_table_tuning(table, NULL, &tune);
                memcpy(pool, pool0, (size_t)elems * es);
                for (int t = 0; t < 2; t++) {
                    linattn_config cfg;
                    linattn_config_init_step(&cfg, B, H, dk, dv);
                    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
                    cfg.normalize = 0, cfg.qk_l2norm = 1, cfg.num_threads = threads;
                    cfg.dtype.s = bf16 ? LINATTN_BF16 : LINATTN_F32;
                    linattn_state_pool sp = {.slots = B, .slot = H * head, .head = head,
                                             .row = 1, .col = dk};
                    linattn_operands ops;
                    linattn_operands_init(&ops);
                    ops.q = r.q + t * tok * dk, ops.k = r.k + t * tok * dk;
                    ops.v = r.v + t * tok * dv, ops.g = r.g + t * tok, ops.beta = r.beta + t * tok;
                    ops.o = r.o2 + t * tok * dv;
                    ops.s = pool, ops.pool = &sp;
                    ck_assert_msg(linattn_run(LINATTN_OP_DELTA_STEP, &cfg, &ops) == LINATTN_OK,
                                  "%s", linattn_last_error());
                }
                if (a == 0) {
                    memcpy(r.o1, r.o2, r.o_bytes);
                    memcpy(pool1, pool, (size_t)elems * es);
                    continue;
                }
                ck_assert_msg(memcmp(r.o1, r.o2, r.o_bytes) == 0 &&
                                  memcmp(pool1, pool, (size_t)elems * es) == 0,
                              "table %s, %s V-first pool, %d threads: a read-ahead of %lld bytes "
                              "gives other bits than the table's",
                              table->name, bf16 ? "bfloat16" : "float", threads,
                              (long long)aheads[a]);
            }
            token_rows_free(&r);
            free(pool0), free(pool), free(pool1);
        }
    la_force_table(table);
}
END_TEST

/* ---- bad input: a status, nothing written, a message naming the field ------ */

typedef struct {
    dproblem p;
    float *o_copy, *s_copy;
} guarded_call;

static void bad_setup(guarded_call *c, linattn_gate gate)
{
    dspec sp = dspec_default(2, 4, 9, 5, 6);
    sp.qk_heads = 2;
    sp.gate = gate;
    sp.with_state = 1;
    dproblem_make(&c->p, &sp);
    for (size_t i = 0; i < c->p.no; i++)
        c->p.o[i] = 12345.0f;
    c->o_copy = malloc(c->p.no * sizeof(float));
    c->s_copy = malloc(c->p.ns * sizeof(float));
    memcpy(c->o_copy, c->p.o, c->p.no * sizeof(float));
    memcpy(c->s_copy, c->p.s, c->p.ns * sizeof(float));
}

static void expect_untouched(guarded_call *c, const char *what)
{
    ck_assert_msg(memcmp(c->o_copy, c->p.o, c->p.no * sizeof(float)) == 0, "%s: o written", what);
    ck_assert_msg(memcmp(c->s_copy, c->p.s, c->p.ns * sizeof(float)) == 0, "%s: s written", what);
    free(c->o_copy);
    free(c->s_copy);
    dproblem_free(&c->p);
}

/* The arguments of one call, which a case may redirect. */
typedef struct {
    linattn_config cfg;
    const float *beta;
    float *o, *s;
} call_args;

typedef void (*mutate_fn)(dproblem *p, call_args *a);

#define BAD_CASE(name, body)                                                                       \
    static void mutate_##name(dproblem *p, call_args *a)                                           \
    {                                                                                              \
        (void)p, (void)a;                                                                          \
        body;                                                                                      \
    }

/* Value cases hit (b=1, h=0, t=0): index H*T = 36 of [B][H][T], which a
 * step reads too. */
BAD_CASE(beta_above_two, p->beta[36] = 2.5f)
BAD_CASE(beta_negative, p->beta[36] = -0.01f)
BAD_CASE(beta_nan, p->beta[36] = NAN)
BAD_CASE(beta_inf, p->beta[36] = INFINITY)
BAD_CASE(beta_null, a->beta = NULL)
BAD_CASE(beta_negative_stride, a->cfg.beta.head = -1)
BAD_CASE(normalize_one, a->cfg.normalize = 1)
BAD_CASE(noncausal, a->cfg.causal = 0)
BAD_CASE(qk_l2norm_two, a->cfg.qk_l2norm = 2)
BAD_CASE(qk_heads_not_divisor, a->cfg.qk_heads = 3)
BAD_CASE(qk_heads_negative, a->cfg.qk_heads = -2)
BAD_CASE(qk_heads_above_heads, a->cfg.qk_heads = 8)
BAD_CASE(head_map_out_of_range, a->cfg.head_map = (linattn_head_map)2)
BAD_CASE(head_map_negative, a->cfg.head_map = (linattn_head_map)-1)
BAD_CASE(positive_g, p->g[36] = 0.5f)
BAD_CASE(minus_inf_g, p->g[36 * 5 + 3] = -INFINITY)
BAD_CASE(null_g, p->g = NULL)
BAD_CASE(o_overlaps_beta, a->o = p->beta)
BAD_CASE(s_overlaps_beta, a->s = p->beta)
BAD_CASE(step_without_state, a->s = NULL)

enum { FORWARD_AND_STEP, FORWARD_ONLY, STEP_ONLY };

typedef struct {
    const char *name;
    linattn_gate gate;
    linattn_status expected;
    const char *message; /* linattn_last_error() contains this */
    int calls; /* FORWARD_AND_STEP, FORWARD_ONLY or STEP_ONLY */
    mutate_fn mutate;
} bad_case;

#define ENTRY(name, gate, expected, message)                                                       \
    {#name, LINATTN_GATE_##gate, expected, message, FORWARD_AND_STEP, mutate_##name}
static const bad_case bad_cases[] = {
    ENTRY(beta_above_two, NONE, LINATTN_E_ARG, "beta[b=1,h=0,t=0]"),
    ENTRY(beta_negative, TOKEN, LINATTN_E_ARG, "beta[b=1,h=0,t=0]"),
    ENTRY(beta_nan, NONE, LINATTN_E_ARG, "beta[b=1,h=0,t=0]"),
    ENTRY(beta_inf, CHANNEL, LINATTN_E_ARG, "beta[b=1,h=0,t=0]"),
    ENTRY(beta_null, NONE, LINATTN_E_NULL, "beta"),
    ENTRY(beta_negative_stride, NONE, LINATTN_E_STRIDE, "beta.head"),
    ENTRY(normalize_one, NONE, LINATTN_E_ARG, "normalize"),
    ENTRY(qk_l2norm_two, NONE, LINATTN_E_ARG, "qk_l2norm"),
    ENTRY(qk_heads_not_divisor, NONE, LINATTN_E_ARG, "qk_heads"),
    ENTRY(qk_heads_negative, NONE, LINATTN_E_ARG, "qk_heads"),
    ENTRY(qk_heads_above_heads, NONE, LINATTN_E_ARG, "qk_heads"),
    ENTRY(head_map_out_of_range, NONE, LINATTN_E_ARG, "head_map"),
    ENTRY(head_map_negative, NONE, LINATTN_E_ARG, "head_map"),
    ENTRY(positive_g, TOKEN, LINATTN_E_ARG, "g[b=1,h=0,t=0]"),
    ENTRY(minus_inf_g, CHANNEL, LINATTN_E_ARG, "g[b=1,h=0,t=0,c=3]"),
    ENTRY(null_g, TOKEN, LINATTN_E_NULL, "g"),
    ENTRY(o_overlaps_beta, NONE, LINATTN_E_OVERLAP, "beta"),
    ENTRY(s_overlaps_beta, NONE, LINATTN_E_OVERLAP, "beta"),
    /* one token is causal by definition: a step ignores cfg->causal */
    {"noncausal", LINATTN_GATE_NONE, LINATTN_E_ARG, "causal", FORWARD_ONLY, mutate_noncausal},
    {"step_without_state", LINATTN_GATE_NONE, LINATTN_E_NULL, "s is NULL", STEP_ONLY,
     mutate_step_without_state},
};

/* _i indexes bad_cases; each case runs through forward and step (or the one
 * call it applies to). */
START_TEST(bad_input_writes_nothing)
{
    const bad_case *bc = &bad_cases[_i];
    for (int step = bc->calls == STEP_ONLY; step <= (bc->calls != FORWARD_ONLY); step++) {
        guarded_call c;
        bad_setup(&c, bc->gate);
        call_args a = {c.p.cfg, c.p.beta, c.p.o, c.p.s};
        bc->mutate(&c.p, &a);
        const linattn_status st =
            step ? linattn_delta_step(&a.cfg, c.p.q, c.p.k, c.p.v, c.p.g, a.beta, a.o, a.s)
                 : linattn_delta_forward(&a.cfg, c.p.q, c.p.k, c.p.v, c.p.g, a.beta, a.o, a.s);
        const char *msg = linattn_last_error();
        ck_assert_msg(st == bc->expected, "%s (%s): got %d (%s: %s), want %d", bc->name,
                      step ? "step" : "forward", st, linattn_strerror(st), msg, bc->expected);
        ck_assert_msg(strstr(msg, bc->message) != NULL, "%s (%s): message \"%s\" lacks \"%s\"",
                      bc->name, step ? "step" : "forward", msg, bc->message);
        expect_untouched(&c, bc->name);
    }
}
END_TEST

/* The same bad beta is found wherever the strides put it. */
START_TEST(bad_beta_through_strides)
{
    dspec sp = dspec_default(2, 3, 10, 4, 4);
    sp.layout = DL_PACKED;
    sp.gate = LINATTN_GATE_TOKEN;
    dproblem p;
    dproblem_make(&p, &sp);
    /* (b=1, h=2, t=7) of the interleaved [B][T][H][2] beta/gate buffer */
    p.beta[1 * p.cfg.beta.batch + 2 * p.cfg.beta.head + 7 * p.cfg.beta.token] = 2.0001f;
    for (size_t i = 0; i < p.no; i++)
        p.o[i] = 7.0f;
    ck_assert_int_eq(dproblem_forward(&p), LINATTN_E_ARG);
    ck_assert_msg(strstr(linattn_last_error(), "beta[b=1,h=2,t=7]") != NULL, "%s",
                  linattn_last_error());
    for (size_t i = 0; i < p.no; i++)
        ck_assert_msg(p.o[i] == 7.0f, "o[%zu] written", i);
    /* beta exactly 2 and exactly 0 are valid */
    p.beta[1 * p.cfg.beta.batch + 2 * p.cfg.beta.head + 7 * p.cfg.beta.token] = 2.0f;
    p.beta[0] = 0.0f;
    ck_assert_int_eq(dproblem_forward(&p), LINATTN_OK);
    ck_assert_str_eq(linattn_last_error(), "success");
    expect_matches_oracle(&p, "beta at the ends of [0, 2]");
    dproblem_free(&p);
}
END_TEST

static Suite *suite_for(const la_table *t)
{
    Suite *s = suite_create(t->name);
    TCase *oracle = tcase_create("oracle");
    tcase_add_checked_fixture(oracle, use_table, NULL);
    tcase_set_timeout(oracle, 600);
    tcase_add_loop_test(oracle, grid_against_oracle, 0, 2);
    tcase_add_test(oracle, long_sequence_big_heads);
    tcase_add_test(oracle, feature_maps_and_l2norm);
    tcase_add_test(oracle, beta_up_to_two);
    tcase_add_test(oracle, strong_decay);
    tcase_add_test(oracle, channel_gate_extremes);
    tcase_add_test(oracle, full_reset);
    tcase_add_test(oracle, grouped_heads);
    tcase_add_test(oracle, strided_layouts);
    tcase_add_test(oracle, broadcast_inputs);
    tcase_add_test(oracle, unaligned_pointers);
    tcase_add_test(oracle, null_state);
    tcase_add_test(oracle, chunked_matches_recurrent);
    tcase_add_test(oracle, state_carried_across_calls);
    tcase_add_test(oracle, steps_against_oracle);
    tcase_add_test(oracle, steps_on_step_buffers);
    tcase_add_test(oracle, nan_propagates_only_forward);
    tcase_add_test(oracle, threads_bitwise_equal);
    tcase_add_test(oracle, packed_state_same_bits);
    tcase_add_test(oracle, packed_pool_same_bits);
    tcase_add_test(oracle, vfirst_step_dot_order_same_bits);
    tcase_add_test(oracle, step_tiles_same_bits);
    tcase_add_test(oracle, bf16_step_tiles_same_bits);
    tcase_add_test(oracle, vfirst_read_ahead_same_bits);
    tcase_add_test(oracle, pair_sweeps_match_oracle);
    tcase_add_test(oracle, pair_range_by_length);
    tcase_add_test(oracle, pair_sweeps_large_v);
    suite_add_tcase(s, oracle);

    TCase *bad = tcase_create("bad_input");
    tcase_add_checked_fixture(bad, use_table, NULL);
    tcase_add_loop_test(bad, bad_input_writes_nothing, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(bad, bad_beta_through_strides);
    suite_add_tcase(s, bad);
    return s;
}

int main(void)
{
    return table_suite_main(suite_for, &table, " (delta rule)");
}
