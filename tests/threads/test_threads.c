/* Threads, as ThreadSanitizer runs them (scripts/tsan.sh); also part of the
 * ordinary suite. Exits non-zero on the first failure.
 *  1. The lazy dispatcher initialisation raced: the process's first linattn
 *     calls come from several threads released at once.
 *  2. num_threads 1, 2, 3 give the same bits, on every table this CPU has,
 *     on the head-parallel path (B*H >= threads) and the sequence-parallel
 *     one (B*H = 1, long T), for forward (chunked and recurrent, each gate
 *     kind, with and without unit-norm q and k), step, and the delta rule
 *     when the library has it.
 *  3. Calls from application threads while another thread switches the
 *     table with linattn_set_isa: each result is bitwise the result of one
 *     of the tables.
 *  4. A plan's units from pthreads (interleaved ranges, no locks) writing
 *     one V-first pool of packed sequences, and linattn_run of that call on
 *     1 and 3 OpenMP threads: the same bits.
 *  5. A prefill packed with decode sequences on 1, 2 and 3 threads (its
 *     one-token units in runs): the same bits. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linattn.h>

#pragma weak linattn_delta_forward

#include "check.h"

enum { MAX_ISA = LINATTN_ISA_NEON + 1, RACERS = 4 };

typedef struct {
    int64_t B, H, T, dk, dv;
    linattn_gate gate;
    linattn_algo algo;
    int64_t chunk;
    int delta;
    int l2norm; /* additive, qk_l2norm = 1 (the delta rule always has it here) */
} shape;

typedef struct {
    float *q, *k, *v, *g, *beta;
    size_t nqk, nv, ng, nbeta, ns, nz;
} inputs;

/* Inputs for a shape, deterministic. */
static inputs make_inputs(const shape *sh)
{
    inputs in;
    in.nqk = (size_t)(sh->B * sh->H * sh->T * sh->dk);
    in.nv = (size_t)(sh->B * sh->H * sh->T * sh->dv);
    in.ng = in.nqk;
    in.nbeta = (size_t)(sh->B * sh->H * sh->T);
    in.ns = (size_t)(sh->B * sh->H * sh->dk * sh->dv);
    in.nz = (size_t)(sh->B * sh->H * sh->dk);
    in.q = malloc(in.nqk * sizeof(float));
    in.k = malloc(in.nqk * sizeof(float));
    in.v = malloc(in.nv * sizeof(float));
    in.g = malloc(in.ng * sizeof(float));
    in.beta = malloc(in.nbeta * sizeof(float));
    uint32_t x = 12345;
#define NEXT() (x = x * 1664525u + 1013904223u, (float)(x >> 8) / 16777216.0f) /* [0, 1) */
    for (size_t i = 0; i < in.nqk; i++) {
        in.q[i] = 2 * NEXT() - 1;
        in.k[i] = 2 * NEXT() - 1;
        in.g[i] = -NEXT();
    }
    for (size_t i = 0; i < in.nv; i++)
        in.v[i] = 2 * NEXT() - 1;
    for (size_t i = 0; i < in.nbeta; i++)
        in.beta[i] = NEXT();
#undef NEXT
    return in;
}

static void free_inputs(inputs *in)
{
    free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta);
}

/* o, then s, then z: one buffer so results compare with one memcmp. */
typedef struct {
    float *all;
    size_t n;
} result;

static linattn_config config_for(const shape *sh, int threads)
{
    linattn_config cfg;
    linattn_config_init(&cfg, sh->B, sh->H, sh->T, sh->dk, sh->dv);
    linattn_config_set_gate(&cfg, sh->gate);
    cfg.algo = sh->algo;
    cfg.chunk = sh->chunk;
    cfg.num_threads = threads;
    if (sh->delta) {
        cfg.normalize = 0;
        cfg.qk_l2norm = 1;
    }
    if (sh->l2norm)
        cfg.qk_l2norm = 1;
    return cfg;
}

static result run_forward(const shape *sh, const inputs *in, int threads)
{
    result r;
    r.n = in->nv + in->ns + in->nz;
    r.all = calloc(r.n, sizeof(float));
    float *o = r.all, *s = o + in->nv, *z = s + in->ns;
    const linattn_config cfg = config_for(sh, threads);
    const float *g = sh->gate == LINATTN_GATE_NONE ? NULL : in->g;
    const linattn_status st =
        sh->delta ? linattn_delta_forward(&cfg, in->q, in->k, in->v, g, in->beta, o, s)
                  : linattn_forward(&cfg, in->q, in->k, in->v, g, o, s, z);
    CHECK(st == LINATTN_OK, "forward: %s", linattn_strerror(st));
    return r;
}

/* Decode from a state that run_forward left: one step per (b, h). */
static result run_step(const shape *sh, const inputs *in, int threads)
{
    result r = run_forward(sh, in, 1);
    float *o = r.all, *s = o + in->nv, *z = s + in->ns;
    linattn_config cfg = config_for(sh, threads);
    /* the first token of each head, addressed by the batch and head strides */
    const float *g = sh->gate == LINATTN_GATE_NONE ? NULL : in->g;
    const linattn_status st = linattn_step(&cfg, in->q, in->k, in->v, g, o, s, z);
    CHECK(st == LINATTN_OK, "step: %s", linattn_strerror(st));
    return r;
}

static int same(const result *a, const result *b)
{
    return a->n == b->n && memcmp(a->all, b->all, a->n * sizeof(float)) == 0;
}

/* ---- 1. racing the lazy initialisation -------------------------------- */

static pthread_barrier_t start;
static const shape race_shape = {2, 2, 48, 16, 16, LINATTN_GATE_TOKEN, LINATTN_ALGO_AUTO, 0, 0, 0};
static inputs race_in;
static result race_out[RACERS];

static void *racer(void *arg)
{
    const intptr_t i = (intptr_t)arg;
    pthread_barrier_wait(&start);
    race_out[i] = run_forward(&race_shape, &race_in, (int)(i % 3) + 1);
    CHECK(linattn_get_isa() != LINATTN_ISA_AUTO, "get_isa returned AUTO");
    return NULL;
}

static void race_first_call(void)
{
    race_in = make_inputs(&race_shape);
    pthread_t th[RACERS];
    pthread_barrier_init(&start, NULL, RACERS);
    for (intptr_t i = 0; i < RACERS; i++)
        pthread_create(&th[i], NULL, racer, (void *)i);
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 1; i < RACERS; i++)
        CHECK(same(&race_out[0], &race_out[i]), "racing first calls disagree (%d)", i);
    for (int i = 0; i < RACERS; i++)
        free(race_out[i].all);
    free_inputs(&race_in);
    printf("first call from %d threads at once: same results on %s\n", RACERS,
           linattn_isa_name(linattn_get_isa()));
}

/* ---- 2. thread counts -------------------------------------------------- */

static int isas[MAX_ISA], nisa;

static void thread_counts(void)
{
    const shape shapes[] = {
        /* head-parallel: B*H = 6 >= threads */
        {2, 3, 80, 16, 16, LINATTN_GATE_NONE, LINATTN_ALGO_CHUNKED, 16, 0, 0},
        {2, 3, 80, 16, 8, LINATTN_GATE_TOKEN, LINATTN_ALGO_CHUNKED, 0, 0, 0},
        {2, 3, 40, 8, 16, LINATTN_GATE_CHANNEL, LINATTN_ALGO_RECURRENT, 0, 0, 0},
        {2, 3, 40, 16, 16, LINATTN_GATE_HEAD, LINATTN_ALGO_AUTO, 0, 0, 0},
        /* sequence-parallel: one head, long T, several chunks per thread */
        {1, 1, 1024, 16, 16, LINATTN_GATE_NONE, LINATTN_ALGO_CHUNKED, 32, 0, 0},
        {1, 1, 1024, 16, 16, LINATTN_GATE_TOKEN, LINATTN_ALGO_CHUNKED, 64, 0, 0},
        {1, 1, 700, 8, 16, LINATTN_GATE_CHANNEL, LINATTN_ALGO_CHUNKED, 0, 0, 0},
        /* recurrent with one head: its value columns split over the threads */
        {1, 1, 300, 16, 48, LINATTN_GATE_TOKEN, LINATTN_ALGO_RECURRENT, 0, 0, 0},
        {1, 1, 300, 8, 40, LINATTN_GATE_NONE, LINATTN_ALGO_AUTO, 0, 0, 0},
        /* the same at larger and odd dk, and with unit-norm q and k */
        {1, 1, 300, 64, 48, LINATTN_GATE_TOKEN, LINATTN_ALGO_RECURRENT, 0, 0, 0},
        {1, 1, 200, 97, 40, LINATTN_GATE_CHANNEL, LINATTN_ALGO_AUTO, 0, 0, 0},
        {1, 2, 150, 65, 33, LINATTN_GATE_NONE, LINATTN_ALGO_RECURRENT, 0, 0, 0},
        {1, 1, 300, 64, 64, LINATTN_GATE_HEAD, LINATTN_ALGO_RECURRENT, 0, 0, 1},
        /* unit-norm q and k, normalised a block or chunk at a time */
        {2, 3, 80, 16, 16, LINATTN_GATE_TOKEN, LINATTN_ALGO_CHUNKED, 16, 0, 1},
        {2, 3, 80, 16, 16, LINATTN_GATE_NONE, LINATTN_ALGO_RECURRENT, 0, 0, 1},
        {1, 1, 700, 16, 16, LINATTN_GATE_CHANNEL, LINATTN_ALGO_CHUNKED, 32, 0, 1},
        {1, 1, 300, 16, 48, LINATTN_GATE_TOKEN, LINATTN_ALGO_RECURRENT, 0, 0, 1},
        /* the delta rule */
        {2, 3, 64, 16, 16, LINATTN_GATE_TOKEN, LINATTN_ALGO_AUTO, 0, 1, 0},
        {1, 1, 512, 16, 16, LINATTN_GATE_CHANNEL, LINATTN_ALGO_CHUNKED, 0, 1, 0},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    int cases = 0;
    for (int i = 0; i < nisa; i++) {
        CHECK(linattn_set_isa((linattn_isa)isas[i]) == LINATTN_OK, "set_isa");
        for (int j = 0; j < nshapes; j++) {
            const shape *sh = &shapes[j];
            if (sh->delta && !linattn_delta_forward)
                continue;
            inputs in = make_inputs(sh);
            result one = run_forward(sh, &in, 1);
            for (int nt = 2; nt <= 3; nt++) {
                result r = run_forward(sh, &in, nt);
                CHECK(same(&one, &r), "%s, shape %d: num_threads %d differs from 1",
                      linattn_isa_name((linattn_isa)isas[i]), j, nt);
                free(r.all);
                cases++;
            }
            free(one.all);
            if (!sh->delta && sh->B * sh->H > 1) {
                result s1 = run_step(sh, &in, 1);
                for (int nt = 2; nt <= 3; nt++) {
                    result r = run_step(sh, &in, nt);
                    CHECK(same(&s1, &r), "%s, shape %d: step with %d threads differs",
                          linattn_isa_name((linattn_isa)isas[i]), j, nt);
                    free(r.all);
                    cases++;
                }
                free(s1.all);
            }
            free_inputs(&in);
        }
    }
    CHECK(linattn_set_isa(LINATTN_ISA_AUTO) == LINATTN_OK, "set_isa(AUTO)");
    printf("num_threads 2 and 3 bitwise equal to 1: %d cases over %d tables%s\n", cases, nisa,
           linattn_delta_forward ? "" : " (delta rule not in this library)");
}

/* ---- 3. set_isa while other threads compute ---------------------------- */

enum { WORKERS = 3, ROUNDS = 12 };
static const shape switch_shape = {1, 3, 96, 16, 16, LINATTN_GATE_TOKEN,
                                   LINATTN_ALGO_CHUNKED, 32, 0, 0};
static inputs switch_in;
static result per_isa[MAX_ISA];
static volatile int stop_switching; /* written before join: no race */
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    const intptr_t w = (intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++) {
        result out = run_forward(&switch_shape, &switch_in, (int)(w % 2) + 1);
        int match = 0;
        for (int i = 0; i < nisa; i++)
            match |= same(&out, &per_isa[i]);
        CHECK(match, "worker %d round %d: result is no table's result", (int)w, r);
        free(out.all);
    }
    return NULL;
}

static void *switcher(void *arg)
{
    (void)arg;
    for (unsigned n = 0;; n++) {
        pthread_mutex_lock(&stop_lock);
        const int stop = stop_switching;
        pthread_mutex_unlock(&stop_lock);
        if (stop)
            break;
        CHECK(linattn_set_isa((linattn_isa)isas[n % (unsigned)nisa]) == LINATTN_OK, "set_isa");
        CHECK(linattn_get_isa() != LINATTN_ISA_AUTO, "get_isa returned AUTO");
    }
    return NULL;
}

static void switch_while_computing(void)
{
    switch_in = make_inputs(&switch_shape);
    for (int i = 0; i < nisa; i++) {
        CHECK(linattn_set_isa((linattn_isa)isas[i]) == LINATTN_OK, "set_isa");
        per_isa[i] = run_forward(&switch_shape, &switch_in, 1);
    }
    pthread_t sw, th[WORKERS];
    pthread_create(&sw, NULL, switcher, NULL);
    for (intptr_t w = 0; w < WORKERS; w++)
        pthread_create(&th[w], NULL, worker, (void *)w);
    for (int w = 0; w < WORKERS; w++)
        pthread_join(th[w], NULL);
    pthread_mutex_lock(&stop_lock);
    stop_switching = 1;
    pthread_mutex_unlock(&stop_lock);
    pthread_join(sw, NULL);
    CHECK(linattn_set_isa(LINATTN_ISA_AUTO) == LINATTN_OK, "set_isa(AUTO)");
    for (int i = 0; i < nisa; i++)
        free(per_isa[i].all);
    free_inputs(&switch_in);
    printf("%d threads x %d calls while another switches among %d tables: every result one "
           "table's\n",
           WORKERS, ROUNDS, nisa);
}

/* ---- 4. plan units from pthreads ---------------------------------------- */

enum { PN = 5, PH = 3, PD = 24, PSLOTS = 12, PWORKERS = 3 };
static const int64_t plan_cu[PN + 1] = {0, 70, 71, 71, 110, 150};
static linattn_plan *the_plan;

static void *plan_worker(void *arg)
{
    const intptr_t id = (intptr_t)arg;
    void *ws = aligned_alloc(64, linattn_plan_workspace_size(the_plan));
    const int64_t units = linattn_plan_units(the_plan);
    for (int64_t u = id; u < units; u += PWORKERS) /* interleaved single units */
        CHECK(linattn_plan_run(the_plan, u, 1, ws) == LINATTN_OK, "plan_run");
    free(ws);
    return NULL;
}

static void plan_from_pthreads(void)
{
    const int64_t T = plan_cu[PN];
    const size_t nqk = (size_t)(T * PH * PD), ns = (size_t)(PSLOTS * PH * PD * PD);
    float *q = malloc(nqk * 4), *k = malloc(nqk * 4), *v = malloc(nqk * 4),
          *g = malloc(nqk / PD * 4), *beta = malloc(nqk / PD * 4), *o[3], *s[3];
    for (size_t i = 0; i < nqk; i++)
        q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f,
        k[i] = (float)((i * 53) % 97) / 97.0f - 0.5f, v[i] = (float)((i * 29) % 89) / 89.0f - 0.5f;
    for (size_t i = 0; i < nqk / PD; i++)
        g[i] = -(float)(i % 7) / 20.0f, beta[i] = (float)(i % 5) / 5.0f;
    static const int32_t rd[PN] = {3, -1, 7, 0, 11}, wr[PN] = {3, 5, 8, -1, 1};
    const linattn_state_pool pool = {.slots = PSLOTS, .slot = PH * PD * PD, .head = PD * PD,
                                     .row = 1, .col = PD, .read_slots = rd, .write_slots = wr};
    linattn_config cfg;
    linattn_config_init(&cfg, 1, PH, T, PD, PD);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0, cfg.qk_l2norm = 1;
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = beta, ops.pool = &pool;
    ops.cu_seqlens = plan_cu, ops.num_seqs = PN;
    for (int r = 0; r < 3; r++) {
        o[r] = calloc(nqk, 4), s[r] = malloc(ns * 4);
        for (size_t i = 0; i < ns; i++)
            s[r][i] = (float)((i * 13) % 31) / 310.0f;
        ops.o = o[r], ops.s = s[r];
        if (r < 2) { /* linattn_run on 1, then 3 threads */
            cfg.num_threads = r == 0 ? 1 : 3;
            CHECK(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops) == LINATTN_OK, "run: %s",
                  linattn_last_error());
        } else {
            cfg.num_threads = 1;
            CHECK(linattn_plan_create(&the_plan, LINATTN_OP_DELTA_FORWARD, &cfg, &ops) ==
                      LINATTN_OK,
                  "plan: %s", linattn_last_error());
            pthread_t th[PWORKERS];
            for (intptr_t w = 0; w < PWORKERS; w++)
                pthread_create(&th[w], NULL, plan_worker, (void *)w);
            for (int w = 0; w < PWORKERS; w++)
                pthread_join(th[w], NULL);
            linattn_plan_destroy(the_plan);
        }
    }
    for (int r = 1; r < 3; r++) {
        CHECK(memcmp(o[0], o[r], nqk * 4) == 0, "pool call %d: o differs", r);
        CHECK(memcmp(s[0], s[r], ns * 4) == 0, "pool call %d: the pool differs", r);
    }
    for (int r = 0; r < 3; r++)
        free(o[r]), free(s[r]);
    free(q), free(k), free(v), free(g), free(beta);
    printf("plan units from %d pthreads on a V-first pool: bitwise linattn_run on 1 and 3 "
           "threads\n",
           PWORKERS);
}

/* A prefill packed with decode sequences (one token each, one empty): the
 * prefill's units taken alone, the one-token units in runs of consecutive
 * units that fetch ahead (plan.c); a K-first pool stepped in place. 1, 2
 * and 3 threads: the same bits. */
enum { MN = 26, MH = 3, MD = 20 };

static void mixed_batch(void)
{
    int64_t cu[MN + 1] = {0, 37};
    for (int n = 1; n < MN; n++)
        cu[n + 1] = cu[n] + (n == 9 ? 0 : 1);
    const int64_t T = cu[MN];
    const size_t nqk = (size_t)(T * MH * MD), ns = (size_t)(MN * MH * MD * MD);
    float *q = malloc(nqk * 4), *k = malloc(nqk * 4), *v = malloc(nqk * 4),
          *g = malloc(nqk / MD * 4), *beta = malloc(nqk / MD * 4), *o[3], *s[3];
    for (size_t i = 0; i < nqk; i++)
        q[i] = (float)((i * 41) % 103) / 103.0f - 0.5f,
        k[i] = (float)((i * 59) % 97) / 97.0f - 0.5f, v[i] = (float)((i * 31) % 89) / 89.0f - 0.5f;
    for (size_t i = 0; i < nqk / MD; i++)
        g[i] = -(float)(i % 7) / 20.0f, beta[i] = (float)(i % 5) / 5.0f;
    int32_t slots[MN];
    for (int n = 0; n < MN; n++)
        slots[n] = (n * 7) % MN; /* a permutation: each sequence its own slot */
    const linattn_state_pool pool = {.slots = MN, .slot = MH * MD * MD, .head = MD * MD,
                                     .row = MD, .col = 1, .read_slots = slots,
                                     .write_slots = slots};
    linattn_config cfg;
    linattn_config_init(&cfg, 1, MH, T, MD, MD);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0, cfg.qk_l2norm = 1;
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = beta, ops.pool = &pool;
    ops.cu_seqlens = cu, ops.num_seqs = MN;
    for (int r = 0; r < 3; r++) {
        o[r] = calloc(nqk, 4), s[r] = malloc(ns * 4);
        for (size_t i = 0; i < ns; i++)
            s[r][i] = (float)((i * 17) % 29) / 290.0f;
        ops.o = o[r], ops.s = s[r];
        cfg.num_threads = r + 1;
        CHECK(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops) == LINATTN_OK, "run: %s",
              linattn_last_error());
    }
    for (int r = 1; r < 3; r++) {
        CHECK(memcmp(o[0], o[r], nqk * 4) == 0, "mixed batch, %d threads: o differs", r + 1);
        CHECK(memcmp(s[0], s[r], ns * 4) == 0, "mixed batch, %d threads: the pool differs",
              r + 1);
    }
    for (int r = 0; r < 3; r++)
        free(o[r]), free(s[r]);
    free(q), free(k), free(v), free(g), free(beta);
    printf("a prefill packed with %d decode sequences on a K-first pool: bitwise on 1, 2 and 3 "
           "threads\n",
           MN - 2);
}

int main(void)
{
    race_first_call(); /* must be the process's first linattn calls */
    for (int isa = LINATTN_ISA_SCALAR; isa <= LINATTN_ISA_NEON; isa++)
        if (linattn_isa_available((linattn_isa)isa))
            isas[nisa++] = isa;
    thread_counts();
    switch_while_computing();
    plan_from_pthreads();
    mixed_batch();
    return 0;
}
