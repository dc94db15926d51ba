/* Serving form of linattn_run and plans (state pools, packed sequences,
 * snapshots, batched decode, host threads), against separate per-sequence
 * calls of the 0.2 entry points on contiguous states, compared bitwise: a
 * unit runs the same single-head path those calls run, so the bits must
 * match. Every pool is checked whole (slots nobody names stay untouched),
 * and o rows of padding sequences keep their sentinel. */
#define _DEFAULT_SOURCE
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "linattn.h"

#define ck_assert_error_has(sub)                                                                  \
    ck_assert_msg(strstr(linattn_last_error(), (sub)) != NULL,                                    \
                  "linattn_last_error() = \"%s\" does not mention \"%s\"", linattn_last_error(), \
                  (sub))

enum { SENTINEL_BITS = 0x7f7f7f7f };

static float *floats(size_t n, float lo, float hi)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = rand_uniform(lo, hi);
    return x;
}

static float *copy_of(const float *x, size_t n)
{
    float *c = malloc((n ? n : 1) * sizeof(float));
    memcpy(c, x, n * sizeof(float));
    return c;
}

/* One scenario: N sequences (packed, or a batch of equal lengths, or a
 * batch of single-token steps), a pool of `slots` slots, K snapshots. */
typedef struct {
    int delta, step, packed, vfirst, threads;
    int noncausal; /* additive forwards: causal = 0, gate NONE */
    int zc;        /* additive: z_compensated, each slot's head keeps [2][dk] */
    int other_gate; /* 1: gate HEAD, 2: gate CHANNEL, else TOKEN (NONE when noncausal) */
    int64_t N, H, dk, dv, K, slots;
    int64_t lens[16];
    int32_t rd[16], wr[16], snap[16 * 8];
} scenario;

typedef struct {
    scenario sc;
    int64_t T, B, *cu;
    float *q, *k, *v, *g, *beta, *o, *s, *z; /* s, z: the pool */
    float *o_ref, *s_ref, *z_ref;
    int64_t s_slot, s_head, s_row, s_col, z_slot, z_head;
    linattn_config cfg;
    linattn_state_pool pool;
    linattn_operands ops;
} world;

static void world_make(world *w, const scenario *sc)
{
    memset(w, 0, sizeof *w);
    w->sc = *sc;
    const int64_t H = sc->H, dk = sc->dk, dv = sc->dv;
    if (sc->packed) {
        w->B = 1;
        w->cu = malloc((size_t)(sc->N + 1) * sizeof(int64_t));
        w->cu[0] = 0;
        for (int64_t n = 0; n < sc->N; n++)
            w->cu[n + 1] = w->cu[n] + sc->lens[n];
        w->T = w->cu[sc->N];
    } else {
        w->B = sc->N;
        w->T = sc->step ? 1 : sc->lens[0];
    }
    const size_t tok = (size_t)(w->B * w->T * H);
    w->q = floats(tok * (size_t)dk, -1, 1);
    w->k = floats(tok * (size_t)dk, -1, 1);
    w->v = floats(tok * (size_t)dv, -1, 1);
    const size_t ng = sc->other_gate == 1   ? (size_t)H
                      : sc->other_gate == 2 ? tok * (size_t)dk
                                            : tok;
    w->g = floats(ng, -0.7f, 0);
    w->beta = floats(tok, 0, 1);
    w->o = malloc((tok * (size_t)dv + 1) * sizeof(float));
    memset(w->o, 0x7f, tok * (size_t)dv * sizeof(float));
    const int64_t zd = dk * (1 + sc->zc); /* z floats a head */
    const size_t state = (size_t)(sc->slots * H * dk * dv), zs = (size_t)(sc->slots * H * zd);
    w->s = floats(state, -0.3f, 0.3f);
    w->z = floats(zs, 0.5f, 1.5f);
    w->o_ref = copy_of(w->o, tok * (size_t)dv);
    w->s_ref = copy_of(w->s, state);
    w->z_ref = copy_of(w->z, zs);
    w->s_slot = H * dk * dv, w->s_head = dk * dv;
    w->s_row = sc->vfirst ? 1 : dv, w->s_col = sc->vfirst ? dk : 1;
    w->z_slot = H * zd, w->z_head = zd;

    if (sc->step)
        linattn_config_init_step(&w->cfg, w->B, H, dk, dv);
    else
        linattn_config_init(&w->cfg, w->B, H, w->T, dk, dv);
    linattn_config_set_gate(&w->cfg, sc->noncausal        ? LINATTN_GATE_NONE
                                     : sc->other_gate == 1 ? LINATTN_GATE_HEAD
                                     : sc->other_gate == 2 ? LINATTN_GATE_CHANNEL
                                                           : LINATTN_GATE_TOKEN);
    w->cfg.causal = !sc->noncausal;
    w->cfg.z_compensated = sc->zc;
    w->cfg.num_threads = sc->threads;
    w->cfg.qk_l2norm = sc->delta;
    w->cfg.normalize = !sc->delta;
    w->pool = (linattn_state_pool){.slots = sc->slots, .slot = w->s_slot, .head = w->s_head,
                                   .row = w->s_row, .col = w->s_col, .z_slot = w->z_slot,
                                   .z_head = w->z_head, .read_slots = w->sc.rd,
                                   .write_slots = w->sc.wr,
                                   .snapshot_slots = sc->K ? w->sc.snap : NULL,
                                   .snapshots = sc->K};
    linattn_operands_init(&w->ops);
    w->ops.q = w->q, w->ops.k = w->k, w->ops.v = w->v, w->ops.g = w->g;
    w->ops.beta = sc->delta ? w->beta : NULL;
    w->ops.o = w->o, w->ops.s = w->s, w->ops.z = sc->delta ? NULL : w->z;
    w->ops.pool = &w->pool;
    if (sc->packed)
        w->ops.cu_seqlens = w->cu, w->ops.num_seqs = sc->N;
}

static void world_free(world *w)
{
    free(w->cu);
    free(w->q), free(w->k), free(w->v), free(w->g), free(w->beta), free(w->o);
    free(w->s), free(w->z), free(w->o_ref), free(w->s_ref), free(w->z_ref);
}

static linattn_op world_op(const world *w)
{
    return w->sc.delta ? (w->sc.step ? LINATTN_OP_DELTA_STEP : LINATTN_OP_DELTA_FORWARD)
                       : (w->sc.step ? LINATTN_OP_STEP : LINATTN_OP_FORWARD);
}

/* Slot <-> contiguous [H][dk][dv] (+ z [H][dk]) of the reference pool. */
static void ref_get(const world *w, int64_t slot, float *S, float *Z)
{
    const int64_t H = w->sc.H, dk = w->sc.dk, dv = w->sc.dv;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < dk; i++) {
            for (int64_t j = 0; j < dv; j++)
                S[(h * dk + i) * dv + j] =
                    slot < 0 ? 0.0f
                             : w->s_ref[slot * w->s_slot + h * w->s_head + i * w->s_row +
                                        j * w->s_col];
            for (int64_t r = 0; r <= w->sc.zc; r++) /* z, then its compensation */
                Z[h * w->z_head + r * dk + i] =
                    slot < 0 ? 0.0f : w->z_ref[slot * w->z_slot + h * w->z_head + r * dk + i];
        }
}

static void ref_put(world *w, int64_t slot, const float *S, const float *Z)
{
    const int64_t H = w->sc.H, dk = w->sc.dk, dv = w->sc.dv;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < dk; i++) {
            for (int64_t j = 0; j < dv; j++)
                w->s_ref[slot * w->s_slot + h * w->s_head + i * w->s_row + j * w->s_col] =
                    S[(h * dk + i) * dv + j];
            if (!w->sc.delta)
                for (int64_t r = 0; r <= w->sc.zc; r++)
                    w->z_ref[slot * w->z_slot + h * w->z_head + r * dk + i] =
                        Z[h * w->z_head + r * dk + i];
        }
}

/* Tokens [a, a + n) of sequence seq through one 0.2 call (step: one token). */
static void ref_call(world *w, int64_t seq, int64_t a, int64_t n, int step, float *S, float *Z)
{
    const int64_t H = w->sc.H, dk = w->sc.dk, dv = w->sc.dv;
    const int64_t b = w->sc.packed ? 0 : seq, t = (w->sc.packed ? w->cu[seq] : 0) + a;
    linattn_config c = w->cfg;
    c.batch = 1, c.seq_len = n, c.num_threads = 1;
    const int64_t tq = (b * H * w->T + t) * dk, tv = (b * H * w->T + t) * dv;
    const int64_t tb = b * H * w->T + t; /* beta, and a token gate */
    const int64_t tg = w->sc.other_gate == 1 ? 0 : w->sc.other_gate == 2 ? tq : tb;
    linattn_status st;
    if (w->sc.delta)
        st = step ? linattn_delta_step(&c, w->q + tq, w->k + tq, w->v + tv, w->g + tg,
                                       w->beta + tb, w->o_ref + tv, S)
                  : linattn_delta_forward(&c, w->q + tq, w->k + tq, w->v + tv, w->g + tg,
                                          w->beta + tb, w->o_ref + tv, S);
    else
        st = step ? linattn_step(&c, w->q + tq, w->k + tq, w->v + tv, w->g + tg, w->o_ref + tv,
                                 S, Z)
                  : linattn_forward(&c, w->q + tq, w->k + tq, w->v + tv, w->g + tg,
                                    w->o_ref + tv, S, Z);
    ck_assert_msg(st == LINATTN_OK, "reference call: %s", linattn_last_error());
}

/* The expected pool and o: each sequence on its own, in order. */
static void world_reference(world *w)
{
    const scenario *sc = &w->sc;
    const size_t sz = (size_t)(sc->H * sc->dk * sc->dv), zz = (size_t)(sc->H * w->z_head);
    float *S = malloc(sz * sizeof(float)), *Z = malloc(zz * sizeof(float));
    for (int64_t n = 0; n < sc->N; n++) {
        const int64_t rd = sc->rd[n] < 0 ? -1 : sc->rd[n], wr = sc->wr[n] < 0 ? -1 : sc->wr[n];
        if (rd < 0 && wr < 0)
            continue;
        const int64_t len = sc->step ? 1 : sc->lens[n];
        ref_get(w, rd, S, Z);
        const int64_t first = len - sc->K, pre = first > 0 ? first : 0;
        if (sc->K == 0 || pre > 0)
            if ((sc->K ? pre : len) > 0)
                ref_call(w, n, 0, sc->K ? pre : len, sc->step, S, Z);
        for (int64_t t = pre; sc->K > 0 && t < len; t++) {
            ref_call(w, n, t, 1, 1, S, Z); /* token by token: the step entry point */
            const int32_t slot = sc->snap[n * sc->K + (t - first)];
            if (slot >= 0)
                ref_put(w, slot, S, Z);
        }
        if (wr >= 0)
            ref_put(w, wr, S, Z);
    }
    free(S), free(Z);
}

/* Largest |a - b| / max(1, |b|). */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        m = d > m || d != d ? d : m;
    }
    return m;
}

static void world_compare(const world *w, const char *what)
{
    const scenario *sc = &w->sc;
    if (sc->vfirst) {
        /* in place on the V-first kernels (delta: recurrent calls, and with
         * snapshots, where every token has a slot: spec_matches_vfirst_steps
         * checks those bitwise; additive: the token loop's calls): the same
         * maths summed along the key axis, so to rounding.
         * vfirst_prefill_matches_kfirst checks the bits where they must agree. */
        const size_t tok = (size_t)(w->B * w->T * sc->H);
        const size_t state = (size_t)(sc->slots * sc->H * sc->dk * sc->dv);
        const size_t nz = sc->delta ? 0 : (size_t)(sc->slots * w->z_slot);
        const double eo = rel_diff(w->o, w->o_ref, tok * (size_t)sc->dv),
                     es = rel_diff(w->s, w->s_ref, state), ez = rel_diff(w->z, w->z_ref, nz);
        ck_assert_msg(eo < 1e-5 && es < 1e-5 && ez < 1e-5,
                      "%s: o differs by %g, the pool by %g, z by %g", what, eo, es, ez);
        return;
    }
    const size_t tok = (size_t)(w->B * w->T * sc->H);
    const size_t state = (size_t)(sc->slots * sc->H * sc->dk * sc->dv);
    ck_assert_msg(memcmp(w->o, w->o_ref, tok * (size_t)sc->dv * sizeof(float)) == 0,
                  "%s: o differs from the per-sequence calls", what);
    ck_assert_msg(memcmp(w->s, w->s_ref, state * sizeof(float)) == 0,
                  "%s: the pool's s differs from the per-sequence calls", what);
    if (!sc->delta)
        ck_assert_msg(memcmp(w->z, w->z_ref, (size_t)(sc->slots * w->z_slot) *
                                                 sizeof(float)) == 0,
                      "%s: the pool's z differs from the per-sequence calls", what);
}

/* A scenario of N sequences with every slot case: in place, moved, zero
 * start, not written, padding; slots shuffled over a pool twice as big. */
static scenario scenario_mixed(int delta, int vfirst, int packed, int step, int threads)
{
    scenario sc = {.delta = delta, .vfirst = vfirst, .packed = packed, .step = step,
                   .threads = threads, .N = 8, .H = 3, .dk = 7, .dv = 20, .slots = 19};
    static const int64_t lens[8] = {40, 0, 1, 17, 5, 70, 3, 33};
    static const int32_t rd[8] = {4, 11, -1, 7, 0, -1, 9, 2};
    static const int32_t wr[8] = {4, 12, 13, -1, 1, -1, 3, 2};
    for (int n = 0; n < 8; n++) {
        sc.lens[n] = packed ? lens[n] : 21;
        sc.rd[n] = rd[n], sc.wr[n] = wr[n];
    }
    return sc;
}

static void run_scenario(const scenario *sc, const char *what)
{
    world w;
    world_make(&w, sc);
    world_reference(&w);
    const linattn_status st = linattn_run(world_op(&w), &w.cfg, &w.ops);
    ck_assert_msg(st == LINATTN_OK, "%s: %s", what, linattn_last_error());
    world_compare(&w, what);
    world_free(&w);
}

/* _i: bit 0 delta, bit 1 V-first, bit 2 packed (else batch), bit 3 two threads */
START_TEST(pool_matches_separate_calls)
{
    const int delta = _i & 1, vfirst = _i >> 1 & 1, packed = _i >> 2 & 1, threads = _i >> 3 & 1;
    scenario sc = scenario_mixed(delta, vfirst, packed, 0, threads ? 2 : 1);
    char what[96];
    snprintf(what, sizeof what, "%s %s-first %s threads %d", delta ? "delta" : "additive",
             vfirst ? "V" : "K", packed ? "packed" : "batch", sc.threads);
    run_scenario(&sc, what);
}
END_TEST

/* Gates HEAD and CHANNEL through pools (forwards and steps, K-first and
 * V-first, both families) as the per-sequence calls give them. _i: bit 0
 * delta, bit 1 V-first, bit 2 CHANNEL (else HEAD). */
START_TEST(head_and_channel_gates_in_pools)
{
    const int delta = _i & 1, vfirst = _i >> 1 & 1, channel = _i >> 2 & 1;
    for (int step = 0; step <= 1; step++) {
        scenario sc = scenario_mixed(delta, vfirst, !step, step, 2);
        sc.other_gate = channel ? 2 : 1;
        char what[96];
        snprintf(what, sizeof what, "%s gate %s %s-first %s", delta ? "delta" : "additive",
                 channel ? "channel" : "head", vfirst ? "V" : "K", step ? "step" : "packed");
        run_scenario(&sc, what);
    }
}
END_TEST

/* Non-causal forwards through a pool: every sequence's outputs from its
 * own final state, as separate non-causal calls give them. _i: bit 0
 * V-first, bit 1 packed, bit 2 two threads. */
START_TEST(noncausal_pool_matches_separate_calls)
{
    const int vfirst = _i & 1, packed = _i >> 1 & 1, threads = _i >> 2 & 1;
    scenario sc = scenario_mixed(0, vfirst, packed, 0, threads ? 2 : 1);
    sc.noncausal = 1;
    char what[96];
    snprintf(what, sizeof what, "non-causal %s-first %s threads %d", vfirst ? "V" : "K",
             packed ? "packed" : "batch", sc.threads);
    run_scenario(&sc, what);
}
END_TEST

START_TEST(batched_decode)
{
    const int delta = _i & 1, vfirst = _i >> 1 & 1;
    /* a decode step's units go to threads in contiguous ranges: 5 threads do
     * not divide the 24 units evenly */
    for (int threads = 2; threads <= 5; threads += 3) {
        scenario sc = scenario_mixed(delta, vfirst, 0, 1, threads);
        run_scenario(&sc, delta ? "delta step" : "additive step");
    }
}
END_TEST

/* z_compensated pools (each slot's head keeps z and its compensation):
 * forwards, steps and snapshots, as the per-sequence calls with the same
 * flag give them. _i: bit 0 V-first, bit 1 packed, bit 2 two threads. */
START_TEST(compensated_z_pool_matches_separate_calls)
{
    const int vfirst = _i & 1, packed = _i >> 1 & 1, threads = _i >> 2 & 1;
    for (int step = 0; step <= 1; step++) {
        scenario sc = scenario_mixed(0, vfirst, packed && !step, step, threads ? 2 : 1);
        sc.zc = 1;
        char what[96];
        snprintf(what, sizeof what, "z compensated %s-first %s threads %d",
                 vfirst ? "V" : "K", step ? "step" : packed ? "packed" : "batch", sc.threads);
        run_scenario(&sc, what);
    }
    scenario sc = {.vfirst = vfirst, .packed = 1, .threads = threads ? 2 : 1, .N = 2, .H = 2,
                   .dk = 5, .dv = 9, .K = 3, .slots = 12, .lens = {5, 2}, .rd = {0, 1},
                   .wr = {2, 3}, .snap = {4, 5, 6, 7, 8, 9}, .zc = 1};
    run_scenario(&sc, "z compensated snapshots");
}
END_TEST

/* Snapshots: K < len, K = len (speculative verification) and K > len. */
START_TEST(snapshots_match_stepping)
{
    const int delta = _i & 1, vfirst = _i >> 1 & 1;
    static const int64_t Ks[3] = {3, 5, 8};
    for (int ki = 0; ki < 3; ki++) {
        scenario sc = {.delta = delta, .vfirst = vfirst, .packed = 1, .threads = 2, .N = 4,
                       .H = 2, .dk = 5, .dv = 9, .K = Ks[ki], .slots = 48};
        static const int64_t lens[4] = {5, 1, 0, 30};
        for (int n = 0; n < 4; n++) {
            sc.lens[n] = lens[n];
            sc.rd[n] = n, sc.wr[n] = n == 2 ? -1 : 4 + n;
            for (int j = 0; j < sc.K; j++)
                sc.snap[n * sc.K + j] = j == 1 ? -1 : (int32_t)(8 + n * 10 + j);
        }
        char what[64];
        snprintf(what, sizeof what, "%s snapshots K = %lld", delta ? "delta" : "additive",
                 (long long)sc.K);
        run_scenario(&sc, what);
    }
}
END_TEST

/* vLLM's [N, K] form: write slot negative, K = len, the read slot one of
 * the sequence's own snapshot slots. */
START_TEST(spec_decode_form)
{
    scenario sc = {.delta = 1, .vfirst = 1, .packed = 1, .threads = 1, .N = 3, .H = 2, .dk = 8,
                   .dv = 8, .K = 4, .slots = 12};
    for (int n = 0; n < 3; n++) {
        sc.lens[n] = 4;
        for (int j = 0; j < 4; j++)
            sc.snap[n * 4 + j] = (int32_t)(n * 4 + j);
        sc.rd[n] = (int32_t)(n * 4 + n % 4); /* accepted n + 1 tokens last time */
        sc.wr[n] = -1;
    }
    run_scenario(&sc, "spec decode [N, K]");
}
END_TEST

/* Speculative verification on a V-first pool, every token's state in a
 * slot, runs as V-first decode steps token after token: the same bits as
 * stepping the pool (a copy of the state into each token's slot, then a
 * step there in place). Sequence 0 reads one of its own snapshot slots
 * and writes no final state (vLLM after accepting tokens); 1 starts from
 * zeros and 2 from another slot, both also keeping their final state in a
 * write slot; dv spans two column tiles, two threads. */
START_TEST(spec_matches_vfirst_steps)
{
    enum { N = 3, L = 4 };
    scenario sc = {.delta = 1, .vfirst = 1, .packed = 1, .threads = 2, .N = N, .H = 2, .dk = 13,
                   .dv = 150, .K = L, .slots = 16};
    static const int32_t rd[N] = {2, -1, 14}, wr[N] = {-1, 12, 15};
    for (int n = 0; n < N; n++) {
        sc.lens[n] = L, sc.rd[n] = rd[n], sc.wr[n] = wr[n];
        for (int j = 0; j < L; j++)
            sc.snap[n * L + j] = (int32_t)(n * L + j);
    }
    world w;
    world_make(&w, &sc);
    const int64_t H = sc.H, dk = sc.dk, dv = sc.dv, T = w.T;
    ck_assert_msg(linattn_run(LINATTN_OP_DELTA_FORWARD, &w.cfg, &w.ops) == LINATTN_OK, "%s",
                  linattn_last_error());
    /* the reference: the pool stepped token after token, [N][H][D] inputs */
    float *q = malloc(sizeof(float) * N * H * dk), *k = malloc(sizeof(float) * N * H * dk),
          *v = malloc(sizeof(float) * N * H * dv), *o = malloc(sizeof(float) * N * H * dv),
          *g = malloc(sizeof(float) * N * H), *beta = malloc(sizeof(float) * N * H);
    int32_t at[N], to[N];
    linattn_config cfg;
    linattn_config_init_step(&cfg, N, H, dk, dv);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.qk_l2norm = 1, cfg.normalize = 0, cfg.num_threads = 1;
    linattn_state_pool pool = w.pool;
    pool.read_slots = to, pool.write_slots = NULL, pool.snapshot_slots = NULL, pool.snapshots = 0;
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = beta, ops.o = o, ops.s = w.s_ref;
    ops.pool = &pool;
    const size_t slot = (size_t)w.s_slot;
    for (int n = 0; n < N; n++)
        at[n] = rd[n];
    for (int64_t t = 0; t < L; t++) {
        for (int n = 0; n < N; n++) {
            to[n] = sc.snap[n * L + t];
            float *dst = w.s_ref + (size_t)to[n] * slot;
            if (at[n] < 0)
                memset(dst, 0, slot * sizeof(float));
            else if (at[n] != to[n])
                memcpy(dst, w.s_ref + (size_t)at[n] * slot, slot * sizeof(float));
            at[n] = to[n];
            for (int64_t h = 0; h < H; h++) {
                const int64_t x = h * T + w.cu[n] + t, y = n * H + h; /* [H][T] -> [N][H] */
                memcpy(q + y * dk, w.q + x * dk, sizeof(float) * dk);
                memcpy(k + y * dk, w.k + x * dk, sizeof(float) * dk);
                memcpy(v + y * dv, w.v + x * dv, sizeof(float) * dv);
                g[y] = w.g[x], beta[y] = w.beta[x];
            }
        }
        ck_assert_msg(linattn_run(LINATTN_OP_DELTA_STEP, &cfg, &ops) == LINATTN_OK, "%s",
                      linattn_last_error());
        for (int n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                memcpy(w.o_ref + (h * T + w.cu[n] + t) * dv, o + (n * H + h) * dv,
                       sizeof(float) * dv);
    }
    for (int n = 0; n < N; n++)
        if (wr[n] >= 0)
            memcpy(w.s_ref + (size_t)wr[n] * slot, w.s_ref + (size_t)at[n] * slot,
                   slot * sizeof(float));
    const size_t tok = (size_t)(T * H);
    ck_assert_msg(memcmp(w.o, w.o_ref, tok * (size_t)dv * sizeof(float)) == 0,
                  "spec on a V-first pool: o differs from stepping the pool (by %g)",
                  rel_diff(w.o, w.o_ref, tok * (size_t)dv));
    ck_assert_msg(memcmp(w.s, w.s_ref, (size_t)sc.slots * slot * sizeof(float)) == 0,
                  "spec on a V-first pool: the pool differs from stepping it");
    free(q), free(k), free(v), free(o), free(g), free(beta);
    world_free(&w);
}
END_TEST

/* Packed sequences without any state (s NULL): each from zeros, nothing
 * written but o; the same bits as separate calls without a state. */
START_TEST(packed_without_state)
{
    const int delta = _i;
    static const int64_t lens[4] = {9, 0, 30, 2};
    const int64_t H = 2, dk = 8, dv = 12, T = 41;
    const size_t nq = (size_t)(H * T * dk), nv = (size_t)(H * T * dv);
    float *q = floats(nq, -1, 1), *k = floats(nq, -1, 1), *v = floats(nv, -1, 1);
    float *g = floats((size_t)(H * T), -0.5f, 0), *beta = floats((size_t)(H * T), 0, 1);
    float *o = floats(nv, 0, 0), *o_ref = floats(nv, 0, 0);
    int64_t cu[5] = {0};
    for (int n = 0; n < 4; n++)
        cu[n + 1] = cu[n] + lens[n];
    linattn_config cfg;
    linattn_config_init(&cfg, 1, H, T, dk, dv);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = !delta;
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = delta ? beta : NULL, ops.o = o;
    ops.cu_seqlens = cu, ops.num_seqs = 4;
    ck_assert_msg(linattn_run(delta ? LINATTN_OP_DELTA_FORWARD : LINATTN_OP_FORWARD, &cfg,
                              &ops) == LINATTN_OK,
                  "%s", linattn_last_error());
    for (int n = 0; n < 4; n++) {
        if (lens[n] == 0)
            continue;
        linattn_config c = cfg;
        c.seq_len = lens[n];
        const int64_t t = cu[n];
        const linattn_status st =
            delta ? linattn_delta_forward(&c, q + t * dk, k + t * dk, v + t * dv, g + t, beta + t,
                                          o_ref + t * dv, NULL)
                  : linattn_forward(&c, q + t * dk, k + t * dk, v + t * dv, g + t, o_ref + t * dv,
                                    NULL, NULL);
        ck_assert_msg(st == LINATTN_OK, "%s", linattn_last_error());
    }
    ck_assert_msg(memcmp(o, o_ref, nv * sizeof(float)) == 0, "packed o differs");
    free(q), free(k), free(v), free(g), free(beta), free(o), free(o_ref);
}
END_TEST

/* ---- V-first pools against K-first ones ---------------------------------- */

/* Longest delta call the plan runs in place on the V-first recurrent
 * kernels (plan.c, VFIRST_MAX_T; a bfloat16 state: one token); longer
 * ones go through the tile transpose onto the K-first kernels: the same
 * arithmetic as a K-first pool, so the same bits. */
enum { VFIRST_IN_PLACE_MAX_T = 8 };

static uint32_t elem_bits(int bf16, const void *p, int64_t e)
{
    if (bf16)
        return ((const uint16_t *)p)[e];
    uint32_t u;
    memcpy(&u, (const float *)p + e, sizeof u);
    return u;
}

static float elem_value(int bf16, const void *p, int64_t e)
{
    if (!bf16)
        return ((const float *)p)[e];
    const uint32_t u = (uint32_t)((const uint16_t *)p)[e] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A delta prefill of T tokens per sequence on a V-first pool (rows padded:
 * col = dk + 3, the padding holding a marker) against the same call on a
 * K-first pool with the same contents: moved, zero-start and in-place
 * slots, odd dk, dv over two register tiles. o and every slot bitwise
 * where both run the K-first kernels (the V-first call on 2 threads, the
 * K-first on 1), else to rounding; the padding and unnamed slots kept.
 * The additive family runs its token loop's calls (float: up to as many
 * tokens; bfloat16: one) on the V-first token op, the rest through the
 * transposes; with dk 45, a normaliser, whose z (beside either pool) is
 * compared alike. _i: T index, bit 3 a bfloat16 pool, bit 4 dk 45 and a
 * channel gate, bit 5 the additive family. */
START_TEST(vfirst_prefill_matches_kfirst)
{
    static const int64_t Ts[6] = {1, 8, 9, 20, 64, 200};
    const int64_t T = Ts[_i & 7];
    const int bf16 = _i >> 3 & 1, additive = _i >> 5 & 1;
    /* dk 45 under a channel gate: whole pairs of vectors, one more vector
     * and a partial one on avx2 (a bfloat16 row's pair order, which the
     * decays follow: state_rows.h), a pair and a partial vector on avx512;
     * 13 under a token gate: below one pair */
    const int wide = _i >> 4 & 1;
    const int64_t B = 3, H = 2, dk = wide ? 45 : 13, dv = 40, slots = 7, col = dk + 3;
    const int32_t rd[3] = {5, -1, 2}, wr[3] = {1, 4, 2};
    const size_t es = bf16 ? 2 : 4, tok = (size_t)(B * T * H);
    const size_t head_k = (size_t)(dk * dv), head_v = (size_t)(dv * col);
    float *q = floats(tok * (size_t)dk, -1, 1), *k = floats(tok * (size_t)dk, -1, 1);
    float *v = floats(tok * (size_t)dv, -1, 1), *g = floats(tok * (wide ? dk : 1), -0.7f, 0);
    float *beta = floats(tok, 0, 1);
    float *o_k = floats(tok * (size_t)dv, 0, 0), *o_v = floats(tok * (size_t)dv, 0, 0);
    unsigned char *sk = malloc((size_t)(slots * H) * head_k * es);
    unsigned char *sv = malloc((size_t)(slots * H) * head_v * es);
    unsigned char *sv0 = malloc((size_t)(slots * H) * head_v * es);
    for (int64_t sh = 0; sh < slots * H; sh++)
        for (int64_t j = 0; j < dv; j++)
            for (int64_t i = 0; i < col; i++) {
                const float x = i < dk ? rand_uniform(-0.3f, 0.3f) : 1234.5f; /* padding */
                const int64_t ev = (int64_t)head_v * sh + j * col + i;
                const int64_t ek = (int64_t)head_k * sh + i * dv + j;
                if (bf16) {
                    uint32_t u;
                    memcpy(&u, &x, sizeof u);
                    ((uint16_t *)sv)[ev] = (uint16_t)(u >> 16);
                    if (i < dk)
                        ((uint16_t *)sk)[ek] = (uint16_t)(u >> 16);
                } else {
                    ((float *)sv)[ev] = x;
                    if (i < dk)
                        ((float *)sk)[ek] = x;
                }
            }
    memcpy(sv0, sv, (size_t)(slots * H) * head_v * es);
    linattn_config cfg;
    linattn_config_init(&cfg, B, H, T, dk, dv);
    linattn_config_set_gate(&cfg, wide ? LINATTN_GATE_CHANNEL : LINATTN_GATE_TOKEN);
    const int norm = additive && wide;
    cfg.normalize = norm, cfg.qk_l2norm = 1;
    cfg.dtype.s = bf16 ? LINATTN_BF16 : LINATTN_F32;
    const size_t nz = (size_t)(slots * H * dk);
    float *z_k = floats(nz, 0, 1), *z_v = malloc(nz * sizeof(float));
    memcpy(z_v, z_k, nz * sizeof(float));
    linattn_state_pool pk = {.slots = slots, .slot = H * dk * dv, .head = dk * dv, .row = dv,
                             .col = 1, .read_slots = rd, .write_slots = wr};
    if (norm)
        pk.z_slot = H * dk, pk.z_head = dk;
    linattn_state_pool pv = pk;
    pv.slot = H * dv * col, pv.head = dv * col, pv.row = 1, pv.col = col;
    const linattn_op op = additive ? LINATTN_OP_FORWARD : LINATTN_OP_DELTA_FORWARD;
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = additive ? NULL : beta;
    ops.o = o_k, ops.s = sk, ops.z = norm ? z_k : NULL, ops.pool = &pk;
    cfg.num_threads = 1;
    ck_assert_msg(linattn_run(op, &cfg, &ops) == LINATTN_OK, "K-first: %s", linattn_last_error());
    ops.o = o_v, ops.s = sv, ops.z = norm ? z_v : NULL, ops.pool = &pv;
    cfg.num_threads = 2;
    ck_assert_msg(linattn_run(op, &cfg, &ops) == LINATTN_OK, "V-first: %s", linattn_last_error());
    const int bitwise = bf16 ? T > 1 : T > VFIRST_IN_PLACE_MAX_T;
    const char *fam = additive ? "additive" : "delta";
    double eo = 0, es_max = 0, ez = 0;
    for (size_t e = 0; e < nz && norm; e++) {
        if (bitwise)
            ck_assert_msg(memcmp(&z_v[e], &z_k[e], sizeof(float)) == 0,
                          "%s T = %lld: z[%zu] = %a, K-first %a", bf16 ? "bf16" : "f32",
                          (long long)T, e, (double)z_v[e], (double)z_k[e]);
        const double d = fabs((double)z_v[e] - z_k[e]) / fmax(1.0, fabs((double)z_k[e]));
        ez = d > ez || d != d ? d : ez;
    }
    for (size_t e = 0; e < tok * (size_t)dv; e++) {
        if (bitwise)
            expect_msg(memcmp(&o_v[e], &o_k[e], sizeof(float)) == 0,
                       "%s %s T = %lld: o[%zu] = %a, K-first %a", fam, bf16 ? "bf16" : "f32",
                       (long long)T, e, (double)o_v[e], (double)o_k[e]);
        const double d = fabs((double)o_v[e] - o_k[e]) / fmax(1.0, fabs((double)o_k[e]));
        eo = d > eo || d != d ? d : eo;
    }
    for (int64_t sh = 0; sh < slots * H; sh++)
        for (int64_t j = 0; j < dv; j++)
            for (int64_t i = 0; i < col; i++) {
                const int64_t ev = (int64_t)head_v * sh + j * col + i;
                const int64_t ek = (int64_t)head_k * sh + i * dv + j;
                if (i >= dk) {
                    expect_msg(elem_bits(bf16, sv, ev) == elem_bits(bf16, sv0, ev),
                               "T = %lld: padding of slot %lld column %lld written",
                               (long long)T, (long long)(sh / H), (long long)j);
                    continue;
                }
                if (bitwise)
                    expect_msg(elem_bits(bf16, sv, ev) == elem_bits(bf16, sk, ek),
                               "%s T = %lld: slot %lld head %lld (%lld, %lld) is 0x%x, "
                               "K-first 0x%x",
                               bf16 ? "bf16" : "f32", (long long)T, (long long)(sh / H),
                               (long long)(sh % H), (long long)i, (long long)j,
                               (unsigned)elem_bits(bf16, sv, ev),
                               (unsigned)elem_bits(bf16, sk, ek));
                const double a = elem_value(bf16, sv, ev), b = elem_value(bf16, sk, ek);
                if (bf16) { /* to rounding: one unit in b's last place, plus the float sums' */
                    int e;
                    frexp(b, &e);
                    expect_msg(fabs(a - b) <= ldexp(1.0, e - 8) + 1e-5 * fmax(1.0, fabs(b)),
                               "bf16 dk = %lld, T = %lld: slot %lld head %lld (%lld, %lld) "
                               "is %a, K-first %a",
                               (long long)dk, (long long)T, (long long)(sh / H),
                               (long long)(sh % H), (long long)i, (long long)j, a, b);
                }
                const double d = fabs(a - b) / fmax(1.0, fabs(b));
                es_max = d > es_max || d != d ? d : es_max;
            }
    /* a bfloat16 element in place may round the other way (checked above) */
    const double es_tol = bf16 && !bitwise ? 1.0 / 128 : 1e-5;
    ck_assert_msg(eo < 1e-5 && es_max <= es_tol && ez < 1e-5,
                  "%s %s dk = %lld, T = %lld: o differs by %g, the pool by %g, z by %g", fam,
                  bf16 ? "bf16" : "f32", (long long)dk, (long long)T, eo, es_max, ez);
    free(q), free(k), free(v), free(g), free(beta), free(o_k), free(o_v);
    free(sk), free(sv), free(sv0), free(z_k), free(z_v);
}
END_TEST

/* ---- host threads: plan units from a pthread pool in shuffled ranges --- */

typedef struct {
    const linattn_plan *plan;
    const int64_t *firsts, *counts;
    int nranges, stride, id;
    void *ws;
    int failures;
} worker;

static void *work(void *arg)
{
    worker *wk = arg;
    for (int r = wk->id; r < wk->nranges; r += wk->stride)
        if (linattn_plan_run(wk->plan, wk->firsts[r], wk->counts[r], wk->ws) != LINATTN_OK)
            wk->failures++;
    return NULL;
}

START_TEST(plan_units_from_pthreads)
{
    const int delta = _i & 1, packed = _i >> 1 & 1;
    scenario sc = scenario_mixed(delta, 1, packed, 0, 1);
    world one, many;
    world_make(&one, &sc);
    /* the same inputs and pool for the plan */
    many = one;
    const size_t tok = (size_t)(one.B * one.T * sc.H);
    const size_t state = (size_t)(sc.slots * sc.H * sc.dk * sc.dv);
    many.o = copy_of(one.o, tok * (size_t)sc.dv);
    many.s = copy_of(one.s, state);
    many.z = copy_of(one.z, (size_t)(sc.slots * sc.H * sc.dk));
    many.ops.o = many.o, many.ops.s = many.s, many.ops.z = delta ? NULL : many.z;
    ck_assert(linattn_run(world_op(&one), &one.cfg, &one.ops) == LINATTN_OK);

    linattn_plan *plan;
    ck_assert_msg(linattn_plan_create(&plan, world_op(&many), &many.cfg, &many.ops) == LINATTN_OK,
                  "%s", linattn_last_error());
    const int64_t units = linattn_plan_units(plan);
    ck_assert_int_gt(units, 0);
    /* random ranges covering every unit once, in shuffled order */
    int64_t firsts[512], counts[512];
    int nr = 0;
    for (int64_t u = 0; u < units && nr < 511;) {
        int64_t c = 1 + (int64_t)rand_uniform(0, 4);
        if (c > units - u)
            c = units - u;
        firsts[nr] = u, counts[nr++] = c;
        u += c;
        if (nr == 511 && u < units)
            firsts[nr] = u, counts[nr++] = units - u, u = units;
    }
    for (int r = nr - 1; r > 0; r--) {
        const int x = (int)rand_uniform(0, (float)r + 0.999f);
        int64_t t = firsts[r];
        firsts[r] = firsts[x], firsts[x] = t;
        t = counts[r], counts[r] = counts[x], counts[x] = t;
    }
    enum { NW = 4 };
    worker wk[NW];
    pthread_t th[NW];
    const size_t wsb = linattn_plan_workspace_size(plan);
    for (int i = 0; i < NW; i++) {
        wk[i] = (worker){.plan = plan, .firsts = firsts, .counts = counts, .nranges = nr,
                         .stride = NW, .id = i, .ws = aligned_alloc(64, wsb)};
        pthread_create(&th[i], NULL, work, &wk[i]);
    }
    for (int i = 0; i < NW; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(wk[i].failures, 0);
        free(wk[i].ws);
    }
    linattn_plan_destroy(plan);
    ck_assert_msg(memcmp(one.o, many.o, tok * (size_t)sc.dv * sizeof(float)) == 0,
                  "plan from pthreads: o differs from linattn_run");
    ck_assert_msg(memcmp(one.s, many.s, state * sizeof(float)) == 0,
                  "plan from pthreads: the pool differs from linattn_run");
    free(many.o), free(many.s), free(many.z);
    world_free(&one);
}
END_TEST

/* A plan of a contiguous call (no pool, no cu_seqlens) gives linattn_forward's bits: a
 * long call, and a short one of a 1 x 1 state, which is K-first and V-first at once (the
 * plan once stepped it on the V-first op, whose bits differ: a fuzz finding). */
START_TEST(plan_of_contiguous_call)
{
    const int delta = _i & 1, tiny = _i >> 1;
    const int64_t B = 2, H = 3, T = tiny ? 5 : 50, dk = tiny ? 1 : 16, dv = tiny ? 1 : 24;
    linattn_config cfg;
    linattn_config_init(&cfg, B, H, T, dk, dv);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = !delta;
    const size_t nq = (size_t)(B * H * T * dk), nv = (size_t)(B * H * T * dv);
    float *q = floats(nq, -1, 1), *k = floats(nq, -1, 1), *v = floats(nv, -1, 1);
    float *g = floats((size_t)(B * H * T), -0.5f, 0), *beta = floats((size_t)(B * H * T), 0, 1);
    float *s1 = floats((size_t)(B * H * dk * dv), -0.2f, 0.2f),
          *z1 = floats((size_t)(B * H * dk), 0.5f, 1);
    float *s2 = copy_of(s1, (size_t)(B * H * dk * dv)), *z2 = copy_of(z1, (size_t)(B * H * dk));
    float *o1 = floats(nv, 0, 0), *o2 = floats(nv, 0, 0);
    ck_assert(delta ? linattn_delta_forward(&cfg, q, k, v, g, beta, o1, s1) == LINATTN_OK
                    : linattn_forward(&cfg, q, k, v, g, o1, s1, z1) == LINATTN_OK);
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = delta ? beta : NULL;
    ops.o = o2, ops.s = s2, ops.z = delta ? NULL : z2;
    linattn_plan *plan;
    const linattn_op op = delta ? LINATTN_OP_DELTA_FORWARD : LINATTN_OP_FORWARD;
    ck_assert_msg(linattn_plan_create(&plan, op, &cfg, &ops) == LINATTN_OK, "%s",
                  linattn_last_error());
    void *ws = aligned_alloc(64, linattn_plan_workspace_size(plan));
    /* twice, as an engine runs one plan per step: the second time on new
     * values in the same buffers, from the state the first run left */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (size_t i = 0; i < nq; i++)
                q[i] = rand_uniform(-1, 1), k[i] = rand_uniform(-1, 1);
            for (size_t i = 0; i < nv; i++)
                v[i] = rand_uniform(-1, 1);
            ck_assert(delta ? linattn_delta_forward(&cfg, q, k, v, g, beta, o1, s1) == LINATTN_OK
                            : linattn_forward(&cfg, q, k, v, g, o1, s1, z1) == LINATTN_OK);
        }
        for (int64_t u = linattn_plan_units(plan) - 1; u >= 0; u--) /* backwards, one by one */
            ck_assert(linattn_plan_run(plan, u, 1, ws) == LINATTN_OK);
        ck_assert_msg(memcmp(o1, o2, nv * sizeof(float)) == 0,
                      "run %d: plan o differs from the 0.2 call", pass);
        ck_assert_msg(memcmp(s1, s2, (size_t)(B * H * dk * dv) * sizeof(float)) == 0,
                      "run %d: plan s differs from the 0.2 call", pass);
        ck_assert_msg(delta || memcmp(z1, z2, (size_t)(B * H * dk) * sizeof(float)) == 0,
                      "run %d: plan z differs from the 0.2 call", pass);
    }
    free(ws);
    linattn_plan_destroy(plan);
    free(q), free(k), free(v), free(g), free(beta), free(s1), free(z1), free(s2), free(z2);
    free(o1), free(o2);
}
END_TEST

/* ---- bad input: status, message naming sequence/slot/field, nothing written */

static void expect_refused(world *w, linattn_status want, const char *sub)
{
    const scenario *sc = &w->sc;
    const size_t tok = (size_t)(w->B * w->T * sc->H);
    const size_t state = (size_t)(sc->slots * sc->H * sc->dk * sc->dv);
    const size_t zs = (size_t)(sc->slots * w->z_slot);
    float *o0 = copy_of(w->o, tok * (size_t)sc->dv), *s0 = copy_of(w->s, state);
    float *z0 = copy_of(w->z, zs);
    const linattn_status st = linattn_run(world_op(w), &w->cfg, &w->ops);
    ck_assert_msg(st == want, "status %d (%s), expected %d", st, linattn_last_error(), want);
    ck_assert_error_has(sub);
    linattn_plan *p = (linattn_plan *)1;
    ck_assert_int_eq(linattn_plan_create(&p, world_op(w), &w->cfg, &w->ops), want);
    ck_assert_ptr_null(p);
    ck_assert_msg(memcmp(o0, w->o, tok * (size_t)sc->dv * sizeof(float)) == 0, "o written");
    ck_assert_msg(memcmp(s0, w->s, state * sizeof(float)) == 0, "pool written");
    ck_assert_msg(memcmp(z0, w->z, zs * sizeof(float)) == 0, "pool's z written");
    free(o0), free(s0), free(z0);
}

START_TEST(bad_slots_and_seqlens)
{
    const int delta = _i;
    world w;
    scenario sc = scenario_mixed(delta, 1, 1, 0, 1);
    world_make(&w, &sc);
    w.sc.rd[3] = 19; /* == slots */
    expect_refused(&w, LINATTN_E_ARG, "read_slots[3] = 19 (sequence 3)");
    w.sc.rd[3] = 7, w.sc.wr[6] = 400;
    expect_refused(&w, LINATTN_E_ARG, "write_slots[6] = 400");
    w.sc.wr[6] = 4; /* sequence 0 writes 4 too */
    expect_refused(&w, LINATTN_E_OVERLAP, "both write slot 4");
    w.sc.wr[6] = 7; /* sequence 3 reads 7 */
    expect_refused(&w, LINATTN_E_OVERLAP, "which sequence 3 reads");
    w.sc.wr[6] = 3;
    w.cu[4] = w.cu[3] - 1;
    expect_refused(&w, LINATTN_E_ARG, "cu_seqlens[4]");
    w.cu[4] = w.cu[5];
    w.cu[8]++;
    expect_refused(&w, LINATTN_E_ARG, "cfg->seq_len");
    w.cu[8]--;
    w.cfg.batch = 2;
    expect_refused(&w, LINATTN_E_ARG, "batch must be 1");
    w.cfg.batch = 1;
    w.pool.slots = 0;
    expect_refused(&w, LINATTN_E_SHAPE, "pool->slots");
    w.pool.slots = sc.slots;
    w.pool.row = -1;
    expect_refused(&w, LINATTN_E_STRIDE, "pool->row");
    w.pool.row = w.s_row;
    w.pool.col = 0;
    expect_refused(&w, LINATTN_E_OVERLAP, "pool's strides");
    w.pool.col = w.s_col;
    w.pool.snapshots = 2, w.pool.snapshot_slots = NULL;
    expect_refused(&w, LINATTN_E_NULL, "snapshot_slots");
    w.pool.snapshots = 0;
    w.ops.s = w.o; /* the pool over o */
    expect_refused(&w, LINATTN_E_OVERLAP, "overlaps the state pool");
    w.ops.s = w.s;
    if (!delta) { /* the pool's z: its strides, itself, against s */
        w.pool.z_head = -1;
        expect_refused(&w, LINATTN_E_STRIDE, "pool->z_head");
        w.pool.z_head = w.z_head, w.pool.z_slot = -2;
        expect_refused(&w, LINATTN_E_STRIDE, "pool->z_slot");
        w.pool.z_slot = w.z_slot, w.pool.z_head = w.z_head - 1; /* heads share a float */
        expect_refused(&w, LINATTN_E_OVERLAP, "pool's z strides");
        w.pool.z_head = w.z_head;
        w.ops.z = w.s + 5; /* z inside s */
        expect_refused(&w, LINATTN_E_OVERLAP, "s overlaps z in the pool");
        w.ops.z = w.z;
    }
    w.ops.struct_size = 8;
    expect_refused(&w, LINATTN_E_ARG, "ops->struct_size");
    w.ops.struct_size = sizeof w.ops;
    /* and after all that, the call runs */
    ck_assert_msg(linattn_run(world_op(&w), &w.cfg, &w.ops) == LINATTN_OK, "%s",
                  linattn_last_error());
    world_free(&w);
}
END_TEST

START_TEST(bad_snapshot_slot_and_step_cu)
{
    world w;
    scenario sc = {.delta = 1, .packed = 1, .threads = 1, .N = 2, .H = 1, .dk = 4, .dv = 4,
                   .K = 2, .slots = 6, .lens = {3, 2}, .rd = {0, 1}, .wr = {0, 1},
                   .snap = {2, 3, 4, 6}};
    world_make(&w, &sc);
    expect_refused(&w, LINATTN_E_ARG, "snapshot_slots[1][1] = 6 (sequence 1)");
    w.sc.snap[3] = 2; /* sequence 0 snapshots into 2 too */
    expect_refused(&w, LINATTN_E_OVERLAP, "both write slot 2");
    w.sc.snap[3] = 5;
    ck_assert(linattn_run(world_op(&w), &w.cfg, &w.ops) == LINATTN_OK);
    world_free(&w);
}
END_TEST

/* Snapshots are the states of a causal call's last K tokens, run one at a
 * time: a non-causal call (whose outputs all read the final state) with
 * K > 0 is refused, before anything is written; with K = 0 it runs. */
START_TEST(snapshots_need_causal)
{
    world w;
    scenario sc = {.packed = 1, .threads = 1, .N = 2, .H = 1, .dk = 4, .dv = 4, .K = 2,
                   .slots = 6, .lens = {3, 2}, .rd = {0, 1}, .wr = {0, 1}, .snap = {2, 3, 4, 5},
                   .noncausal = 1};
    world_make(&w, &sc);
    expect_refused(&w, LINATTN_E_ARG, "snapshots need a causal call");
    w.pool.snapshots = 0, w.pool.snapshot_slots = NULL;
    ck_assert_msg(linattn_run(world_op(&w), &w.cfg, &w.ops) == LINATTN_OK, "%s",
                  linattn_last_error());
    world_free(&w);
}
END_TEST

/* linattn_run's own refusals, each with its status and a message naming
 * the field: the call's arguments, the packed sequences, the pool's slots
 * and z, a step given sequences. Nothing is written (expect_refused). */
START_TEST(run_refusals_name_the_field)
{
    world w; /* additive (a pool with z), packed sequences */
    scenario sc = scenario_mixed(0, 0, 1, 0, 1);
    world_make(&w, &sc);
    ck_assert_int_eq(linattn_run(world_op(&w), &w.cfg, NULL), LINATTN_E_NULL);
    ck_assert_error_has("ops is NULL");
    ck_assert_int_eq(linattn_run(world_op(&w), NULL, &w.ops), LINATTN_E_NULL);
    ck_assert_error_has("cfg is NULL");
    ck_assert_int_eq(linattn_run((linattn_op)99, &w.cfg, &w.ops), LINATTN_E_ARG);
    ck_assert_error_has("op = 99");
    w.ops.num_seqs = -1;
    expect_refused(&w, LINATTN_E_SHAPE, "num_seqs = -1");
    w.ops.num_seqs = sc.N;
    w.cu[0] = 1;
    expect_refused(&w, LINATTN_E_ARG, "cu_seqlens[0] = 1");
    w.cu[0] = 0;
    w.pool.snapshots = -1;
    expect_refused(&w, LINATTN_E_ARG, "pool->snapshots = -1");
    w.pool.snapshots = 0;
    w.pool.slots = INT64_MAX;
    expect_refused(&w, LINATTN_E_SHAPE, "s: the pool's");
    w.pool.slots = sc.slots;
    w.pool.z_slot = INT64_MAX / 4;
    expect_refused(&w, LINATTN_E_SHAPE, "z_slot 2305843009213693951");
    w.pool.z_slot = w.z_slot;
    w.ops.s = NULL;
    expect_refused(&w, LINATTN_E_NULL, "s is NULL: a state pool");
    w.ops.s = w.s, w.ops.z = NULL;
    expect_refused(&w, LINATTN_E_NULL, "z is NULL: a normalising call's pool needs z");
    w.ops.z = w.z;
    w.pool.read_slots = w.pool.write_slots = NULL, w.pool.slots = 2; /* sequence n in slot n */
    expect_refused(&w, LINATTN_E_ARG, "read_slots is NULL, so it uses slot 2");
    world_free(&w);

    scenario batch = scenario_mixed(0, 0, 0, 0, 1); /* a batch: no cu_seqlens */
    world_make(&w, &batch);
    w.ops.num_seqs = 2;
    expect_refused(&w, LINATTN_E_ARG, "num_seqs = 2 but cu_seqlens is NULL");
    world_free(&w);

    scenario step = scenario_mixed(1, 0, 0, 1, 1);
    world_make(&w, &step);
    int64_t cu[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    w.ops.cu_seqlens = cu, w.ops.num_seqs = 8;
    expect_refused(&w, LINATTN_E_ARG, "cu_seqlens is given to a step");
    world_free(&w);
}
END_TEST

/* Values (g, beta, and with gate_act A_log) are read only once the whole
 * structure has passed, the pool's and the slots' checks included: here
 * each holds one NaN right before a guard page, so a value check that ran
 * first would name the NaN or fault past it. (The fuzzer found a pool call
 * whose gate scan read past a buffer sized for a call to refuse.) */
START_TEST(values_read_after_structure)
{
    const int delta = _i & 1, act = _i >> 1;
    world w;
    scenario sc = scenario_mixed(delta, 0, 1, 0, 1);
    world_make(&w, &sc);
    problem guard = {0};
    float *nan_then_guard = guarded_floats(&guard, 1, 0);
    nan_then_guard[0] = NAN;
    w.ops.g = nan_then_guard;
    if (delta)
        w.ops.beta = nan_then_guard;
    if (act) {
        w.cfg.gate_act = LINATTN_GATE_ACT_SOFTPLUS;
        w.ops.A_log = nan_then_guard;
    }
    w.pool.slots = 0;
    expect_refused(&w, LINATTN_E_SHAPE, "pool->slots = 0");
    w.pool.slots = sc.slots;
    w.pool.row = -1;
    expect_refused(&w, LINATTN_E_STRIDE, "pool->row = -1");
    w.pool.row = w.s_row;
    w.sc.rd[3] = (int32_t)sc.slots;
    expect_refused(&w, LINATTN_E_ARG, "(sequence 3)");
    w.sc.rd[3] = sc.rd[3];
    w.sc.wr[4] = w.sc.wr[0]; /* two sequences write one slot */
    expect_refused(&w, LINATTN_E_OVERLAP, "write");
    w.sc.wr[4] = sc.wr[4];
    /* the structure whole: now the first value is read and named (a gate
     * scan reads a whole head: g of its full size for that) */
    if (!act) {
        w.g[0] = NAN;
        w.ops.g = w.g;
    }
    expect_refused(&w, LINATTN_E_ARG, act ? "A_log[0] = nan" : "g[b=0,h=0,t=0] = nan");
    problem_free(&guard);
    world_free(&w);
}
END_TEST

/* A step ignores causal's meaning but checks the flag, whichever way it
 * goes: a pool's step, its plan and the contiguous step (the fuzzer found
 * a plan taking causal = -1 that linattn_run refused). */
START_TEST(step_checks_causal_flag)
{
    const int delta = _i;
    world w;
    scenario sc = scenario_mixed(delta, 0, 0, 1, 1);
    world_make(&w, &sc);
    w.cfg.causal = -1;
    expect_refused(&w, LINATTN_E_ARG, "cfg->causal = -1");
    linattn_operands plain = w.ops;
    plain.pool = NULL;
    ck_assert_int_eq(linattn_run(world_op(&w), &w.cfg, &plain), LINATTN_E_ARG);
    ck_assert_error_has("cfg->causal = -1");
    w.cfg.causal = 0; /* valid, and a step is causal whatever it says */
    ck_assert_msg(linattn_run(world_op(&w), &w.cfg, &w.ops) == LINATTN_OK, "%s",
                  linattn_last_error());
    world_free(&w);
}
END_TEST

START_TEST(plan_run_bad_ranges)
{
    world w;
    scenario sc = scenario_mixed(1, 0, 1, 0, 1);
    world_make(&w, &sc);
    linattn_plan *p;
    ck_assert(linattn_plan_create(&p, world_op(&w), &w.cfg, &w.ops) == LINATTN_OK);
    const int64_t u = linattn_plan_units(p);
    void *ws = aligned_alloc(64, linattn_plan_workspace_size(p));
    ck_assert_int_eq(linattn_plan_run(p, u, 1, ws), LINATTN_E_ARG);
    ck_assert_error_has("outside the plan");
    ck_assert_int_eq(linattn_plan_run(p, -1, 1, ws), LINATTN_E_ARG);
    ck_assert_int_eq(linattn_plan_run(p, 0, 1, NULL), LINATTN_E_NULL);
    ck_assert_error_has("workspace is NULL");
    ck_assert_int_eq(linattn_plan_run(p, 0, 1, (char *)ws + 4), LINATTN_E_ARG);
    ck_assert_error_has("64-byte");
    ck_assert_int_eq(linattn_plan_run(NULL, 0, 1, ws), LINATTN_E_NULL);
    ck_assert_error_has("plan is NULL");
    ck_assert_int_eq(linattn_plan_create(NULL, world_op(&w), &w.cfg, &w.ops), LINATTN_E_NULL);
    ck_assert_error_has("plan is NULL");
    ck_assert_int_eq(linattn_plan_run(p, u, 0, ws), LINATTN_OK);
    free(ws);
    linattn_plan_destroy(p);
    linattn_plan_destroy(NULL);
    world_free(&w);
}
END_TEST

/* Many short sequences on more threads than this machine may have cores,
 * units handed out as threads come free: a plain pool (sequence n in slot
 * n, laid out as the contiguous state) gives the bits of the contiguous
 * call on one thread, call after call. _i: bit 0 delta, _i / 2 % 3 the
 * gate (none, token, channel), _i >= 6 three tokens (else two: one delta
 * pair). */
START_TEST(many_sequences_on_threads)
{
    static const linattn_gate gates[3] = {LINATTN_GATE_NONE, LINATTN_GATE_TOKEN,
                                          LINATTN_GATE_CHANNEL};
    const int delta = _i & 1;
    const linattn_gate gate = gates[_i / 2 % 3];
    const int64_t B = 200, H = 2, T = _i >= 6 ? 3 : 2, dk = 8, dv = 8;
    linattn_config c;
    linattn_config_init(&c, B, H, T, dk, dv);
    linattn_config_set_gate(&c, gate);
    c.qk_l2norm = delta;
    c.normalize = !delta;
    c.phi = delta ? LINATTN_PHI_IDENTITY : LINATTN_PHI_ELU1;
    c.num_threads = 1;
    const size_t tokens = (size_t)(B * H * T), state = (size_t)(B * H * dk * dv);
    float *q = floats(tokens * dk, -1, 1), *k = floats(tokens * dk, -1, 1);
    float *v = floats(tokens * dv, -1, 1), *beta = floats(tokens, 0, 1);
    const size_t g_count = gate == LINATTN_GATE_CHANNEL ? tokens * dk : tokens;
    float *g = gate == LINATTN_GATE_NONE ? NULL : floats(g_count, -1, 0);
    float *s0 = floats(state, -1, 1), *z0 = floats((size_t)(B * H * dk), 0, 1);
    float *o_ref = floats(tokens * dv, 0, 0), *s_ref = copy_of(s0, state);
    float *z_ref = copy_of(z0, (size_t)(B * H * dk));
    const linattn_status st = delta ? linattn_delta_forward(&c, q, k, v, g, beta, o_ref, s_ref)
                                    : linattn_forward(&c, q, k, v, g, o_ref, s_ref, z_ref);
    ck_assert_msg(st == LINATTN_OK, "contiguous call: %s", linattn_last_error());
    const linattn_state_pool pool = {.slots = B, .slot = H * dk * dv, .head = dk * dv,
                                     .row = dv, .col = 1, .z_slot = H * dk, .z_head = dk};
    c.num_threads = 4;
    float *o = malloc(tokens * dv * sizeof(float)), *s = malloc(state * sizeof(float));
    float *z = malloc((size_t)(B * H * dk) * sizeof(float));
    for (int run = 0; run < 20; run++) {
        memset(o, 0x7f, tokens * dv * sizeof(float));
        memcpy(s, s0, state * sizeof(float));
        memcpy(z, z0, (size_t)(B * H * dk) * sizeof(float));
        linattn_operands ops;
        linattn_operands_init(&ops);
        ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.o = o, ops.s = s, ops.pool = &pool;
        if (delta)
            ops.beta = beta;
        else
            ops.z = z;
        const linattn_status sp =
            linattn_run(delta ? LINATTN_OP_DELTA_FORWARD : LINATTN_OP_FORWARD, &c, &ops);
        ck_assert_msg(sp == LINATTN_OK, "pool call: %s", linattn_last_error());
        ck_assert_msg(memcmp(o, o_ref, tokens * dv * sizeof(float)) == 0,
                      "run %d: o differs from the contiguous call", run);
        ck_assert_msg(memcmp(s, s_ref, state * sizeof(float)) == 0,
                      "run %d: the pool differs from the contiguous call's state", run);
        ck_assert_msg(delta || memcmp(z, z_ref, (size_t)(B * H * dk) * sizeof(float)) == 0,
                      "run %d: the pool's z differs from the contiguous call's", run);
    }
    free(q), free(k), free(v), free(beta), free(g), free(s0), free(z0);
    free(o_ref), free(s_ref), free(z_ref), free(o), free(s), free(z);
}
END_TEST

static Suite *serve_suite(void)
{
    Suite *s = suite_create("serve");
    TCase *pool = tcase_create("pool");
    tcase_set_timeout(pool, 120);
    tcase_add_loop_test(pool, pool_matches_separate_calls, 0, 16);
    tcase_add_loop_test(pool, noncausal_pool_matches_separate_calls, 0, 8);
    tcase_add_loop_test(pool, head_and_channel_gates_in_pools, 0, 8);
    tcase_add_loop_test(pool, compensated_z_pool_matches_separate_calls, 0, 8);
    tcase_add_loop_test(pool, batched_decode, 0, 4);
    tcase_add_loop_test(pool, snapshots_match_stepping, 0, 4);
    tcase_add_test(pool, spec_decode_form);
    tcase_add_test(pool, spec_matches_vfirst_steps);
    tcase_add_loop_test(pool, packed_without_state, 0, 2);
    tcase_add_loop_test(pool, many_sequences_on_threads, 0, 12);
    for (int additive = 0; additive < 2; additive++)
        for (int wide = 0; wide < 2; wide++)
            for (int bf16 = 0; bf16 < 2; bf16++) {
                const int i0 = 32 * additive + 16 * wide + 8 * bf16;
                tcase_add_loop_test(pool, vfirst_prefill_matches_kfirst, i0, i0 + 6);
            }
    suite_add_tcase(s, pool);
    TCase *plans = tcase_create("plans");
    tcase_set_timeout(plans, 120);
    tcase_add_loop_test(plans, plan_units_from_pthreads, 0, 4);
    tcase_add_loop_test(plans, plan_of_contiguous_call, 0, 4);
    suite_add_tcase(s, plans);
    TCase *bad = tcase_create("bad_input");
    tcase_add_loop_test(bad, bad_slots_and_seqlens, 0, 2);
    tcase_add_test(bad, bad_snapshot_slot_and_step_cu);
    tcase_add_test(bad, snapshots_need_causal);
    tcase_add_test(bad, run_refusals_name_the_field);
    tcase_add_loop_test(bad, values_read_after_structure, 0, 4);
    tcase_add_loop_test(bad, step_checks_causal_flag, 0, 2);
    tcase_add_test(bad, plan_run_bad_ranges);
    suite_add_tcase(s, bad);
    return s;
}

int main(void)
{
    /* meson runs this once through dispatch and once per x86 table named by
     * LINATTN_ISA: one this CPU cannot run is skipped, by name */
    const char *isa = getenv("LINATTN_ISA");
    if (isa) {
        linattn_config cfg;
        linattn_config_init(&cfg, 1, 1, 1, 1, 1);
        float x[4] = {0};
        if (linattn_forward(&cfg, x, x, x, NULL, x + 1, NULL, NULL) == LINATTN_E_ISA) {
            printf("SKIP LINATTN_ISA=%s: this CPU cannot run it\n", isa);
            return 77;
        }
        printf("table under test: %s\n", linattn_isa_name(linattn_get_isa()));
    }
    test_seed();
    SRunner *sr = srunner_create(serve_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
