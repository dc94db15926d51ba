/* linattn-serve-bench: the serving forms' costs, each as a ratio to its
 * baseline measured in the same run (one JSON object per line):
 *   pool_prefill / pool_decode  V-first pool with scattered slots (and a
 *        K-first scattered pool) against the contiguous K-first call
 *        (linattn_delta_forward / linattn_delta_step), B = 16, H = 32,
 *        dk = dv = 128, T = 64 or the T given (--quick: tiny); the three
 *        forms are timed in turn, rep after rep, and each ratio is the
 *        median of the per-rep ratios (with quartiles), so that a shared
 *        machine's drifts fall on both sides of it;
 *   pool_decode_threads  pool_decode on as many threads as CPUs online
 *        (the contiguous call on as many);
 *   pool_decode_moved  the decode step reading slot b and writing another
 *        (ggml's source and destination states);
 *   pool_spec  speculative verification: T = 4 tokens (or the T given,
 *        up to 8) per sequence, each token's state into a snapshot slot
 *        of its own and no final write (vLLM's [N, K] indices), in both
 *        pool layouts, against the contiguous T-token call;
 *   varlen   8 packed sequences of 64..4096 tokens on 2 threads against 1;
 *   plan     a plan's units from a pthread pool (static ith/nth split, and a
 *        shared counter) against linattn_run on as many OpenMP threads;
 *        these too are timed in turn and reported as medians (and
 *        quartiles) of per-rep ratios.
 * pool_*_bf16: the same with a bfloat16 state, against the contiguous
 * bfloat16 call through linattn_run. Times are medians of repeated calls
 * (CLOCK_MONOTONIC). */
#include <linattn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(void *);

static float *randf(size_t n, float lo, float hi, unsigned *seed)
{
    float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
    }
    return x;
}

static void die(const char *what)
{
    fprintf(stderr, "linattn-serve-bench: %s: %s\n", what, linattn_last_error());
    exit(1);
}

/* ---- a delta-rule call in its forms ------------------------------------- */

/* The forms fns[0..nf) of one call timed in turn, rep after rep, so that
 * the drifts of a shared machine fall on all of them alike: med[f] the
 * median seconds of form f, and ratio[f][0..3) the first quartile, median
 * and third quartile of its per-rep ratios to form 0. */
static void timed_together(bench_fn *fns, void *ctx, int nf, int reps, double *med,
                           double (*ratio)[3])
{
    double t[4][64], r[64];
    reps = reps > 64 ? 64 : reps;
    for (int f = 0; f < nf; f++)
        fns[f](ctx);
    for (int i = 0; i < reps; i++)
        for (int f = 0; f < nf; f++) {
            const double t0 = now();
            fns[f](ctx);
            t[f][i] = now() - t0;
        }
    for (int f = nf - 1; f >= 0; f--) {
        for (int i = 0; i < reps; i++)
            r[i] = t[f][i] / t[0][i];
        qsort(r, (size_t)reps, sizeof r[0], cmp_d);
        ratio[f][0] = r[reps / 4], ratio[f][1] = r[reps / 2], ratio[f][2] = r[reps - 1 - reps / 4];
        qsort(t[f], (size_t)reps, sizeof t[f][0], cmp_d);
        med[f] = t[f][reps / 2];
    }
}

typedef struct {
    linattn_config cfg;
    linattn_op op;
    linattn_operands ops; /* pool form */
    linattn_operands cops; /* contiguous form through linattn_run (a bfloat16 state) */
    int bf16;
    linattn_state_pool pool, layouts[2]; /* K-first, V-first */
    float *q, *k, *v, *g, *beta, *o;
    void *s_contig, *s_pool; /* float32, or bfloat16 with bf16 */
    int32_t slots[64], write_slots[64], snap_slots[64 * 8];
} call;

static void run_contig(void *p)
{
    call *c = p;
    const linattn_status st =
        c->bf16                         ? linattn_run(c->op, &c->cfg, &c->cops)
        : c->op == LINATTN_OP_DELTA_STEP
            ? linattn_delta_step(&c->cfg, c->q, c->k, c->v, c->g, c->beta, c->o, c->s_contig)
            : linattn_delta_forward(&c->cfg, c->q, c->k, c->v, c->g, c->beta, c->o, c->s_contig);
    if (st != LINATTN_OK)
        die("contiguous call");
}

static void run_pool(void *p)
{
    call *c = p;
    if (linattn_run(c->op, &c->cfg, &c->ops) != LINATTN_OK)
        die("pool call");
}

static void run_pool_kfirst(void *p)
{
    call *c = p;
    c->pool = c->layouts[0];
    run_pool(c);
}

static void run_pool_vfirst(void *p)
{
    call *c = p;
    c->pool = c->layouts[1];
    run_pool(c);
}

/* n random bfloat16 values in [lo, hi) (rounded floats) */
static uint16_t *rand_bf16(size_t n, float lo, float hi, unsigned *seed)
{
    float *x = randf(n, lo, hi, seed);
    uint16_t *h = aligned_alloc(64, (n * sizeof *h + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    free(x);
    return h;
}

/* How the pool forms read and write their slots. */
typedef enum {
    IN_PLACE, /* each sequence reads and writes its slot */
    MOVED,    /* reads one slot, writes another */
    /* speculative-decoding verification as vLLM calls it: T <= 8 tokens
     * per sequence, each leaving its state in a snapshot slot of its own
     * (K = T), no final write; against the contiguous call of T tokens,
     * which writes one state */
    SPEC
} slot_use;

/* bf16: the state (contiguous and pools) in bfloat16, the baseline the
 * contiguous call through linattn_run. */
static void pool_case(const char *name, int step, int bf16, slot_use use, int64_t B, int64_t H,
                      int64_t T, int64_t D, int threads, int reps)
{
    const int spec = use == SPEC;
    unsigned seed = 11;
    call c;
    memset(&c, 0, sizeof c);
    if (step)
        linattn_config_init_step(&c.cfg, B, H, D, D);
    else
        linattn_config_init(&c.cfg, B, H, T, D, D);
    linattn_config_set_gate(&c.cfg, LINATTN_GATE_TOKEN);
    c.cfg.normalize = 0, c.cfg.qk_l2norm = 1, c.cfg.num_threads = threads;
    c.op = step ? LINATTN_OP_DELTA_STEP : LINATTN_OP_DELTA_FORWARD;
    const int64_t Te = step ? 1 : T;
    const size_t nt = (size_t)(B * H * Te), state = (size_t)(H * D * D);
    c.q = randf(nt * D, -1, 1, &seed), c.k = randf(nt * D, -1, 1, &seed);
    c.v = randf(nt * D, -1, 1, &seed), c.o = randf(nt * D, 0, 0, &seed);
    c.g = randf(nt, -0.3f, 0, &seed), c.beta = randf(nt, 0, 1, &seed);
    const int64_t slots = (spec ? (2 + T) * B : 2 * B) + 3;
    c.bf16 = bf16;
    if (bf16) {
        c.cfg.dtype.s = LINATTN_BF16;
        c.s_contig = rand_bf16(state * B, -0.1f, 0.1f, &seed);
        c.s_pool = rand_bf16(state * slots, -0.1f, 0.1f, &seed);
    } else {
        c.s_contig = randf(state * B, -0.1f, 0.1f, &seed);
        c.s_pool = randf(state * slots, -0.1f, 0.1f, &seed);
    }
    for (int64_t b = 0; b < B; b++) { /* scattered: every other slot, reversed */
        c.slots[b] = (int32_t)(slots - 1 - 2 * b);
        c.write_slots[b] = spec ? -1 : (int32_t)(slots - 2 - 2 * b); /* MOVED: the ones between */
    }
    for (int64_t i = 0; spec && i < B * T; i++) /* below the read slots: [B][T] */
        c.snap_slots[i] = (int32_t)i;
    linattn_operands_init(&c.ops);
    c.ops.q = c.q, c.ops.k = c.k, c.ops.v = c.v, c.ops.g = c.g, c.ops.beta = c.beta;
    c.ops.o = c.o, c.ops.s = c.s_pool, c.ops.pool = &c.pool;
    c.cops = c.ops;
    c.cops.s = c.s_contig, c.cops.pool = NULL;
    for (int vfirst = 0; vfirst < 2; vfirst++)
        c.layouts[vfirst] = (linattn_state_pool){.slots = slots, .slot = H * D * D, .head = D * D,
                                                 .row = vfirst ? 1 : D, .col = vfirst ? D : 1,
                                                 .read_slots = c.slots,
                                                 .write_slots = use != IN_PLACE ? c.write_slots
                                                                                : NULL,
                                                 .snapshot_slots = spec ? c.snap_slots : NULL,
                                                 .snapshots = spec ? T : 0};
    bench_fn fns[3] = {run_contig, run_pool_kfirst, run_pool_vfirst};
    double t[3], r[3][3];
    timed_together(fns, &c, 3, reps, t, r);
    /* ratio_*: the median of per-rep ratios (each form timed right after
     * the contiguous call); *_q: its first and third quartiles */
    printf("{\"case\": \"%s\", \"state\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, "
           "\"dk\": %lld, \"threads\": %d, \"reps\": %d, \"us_contiguous\": %.2f, "
           "\"us_pool_kfirst\": %.2f, \"us_pool_vfirst\": %.2f, \"ratio_kfirst\": %.3f, "
           "\"ratio_vfirst\": %.3f, \"ratio_kfirst_q\": [%.3f, %.3f], "
           "\"ratio_vfirst_q\": [%.3f, %.3f]}\n",
           name, bf16 ? "bf16" : "f32", (long long)B, (long long)H, (long long)Te, (long long)D,
           threads, reps, 1e6 * t[0], 1e6 * t[1], 1e6 * t[2], r[1][1], r[2][1], r[1][0], r[1][2],
           r[2][0], r[2][2]);
    free(c.q), free(c.k), free(c.v), free(c.o), free(c.g), free(c.beta), free(c.s_contig),
        free(c.s_pool);
}

/* ---- packed sequences and plans ----------------------------------------- */

typedef struct {
    linattn_config cfg;
    linattn_operands ops;
    linattn_state_pool pool;
    int64_t cu[9];
    int nth;
    /* plan runs */
    linattn_plan *plan;
    unsigned char *ws;
    size_t wsize;
    atomic_llong next;
    int dynamic;
} packed;

static void run_packed(void *p)
{
    packed *x = p;
    if (linattn_run(LINATTN_OP_DELTA_FORWARD, &x->cfg, &x->ops) != LINATTN_OK)
        die("packed call");
}

static void run_packed_1(void *p)
{
    ((packed *)p)->cfg.num_threads = 1;
    run_packed(p);
}

static void run_packed_2(void *p)
{
    ((packed *)p)->cfg.num_threads = 2;
    run_packed(p);
}

typedef struct {
    packed *x;
    int ith;
} worker;

static void *work(void *p)
{
    worker *w = p;
    packed *x = w->x;
    const int64_t units = linattn_plan_units(x->plan);
    unsigned char *ws = x->ws + x->wsize * (size_t)w->ith;
    if (x->dynamic) { /* the next unit as each thread finishes (units come longest first) */
        for (int64_t u; (u = atomic_fetch_add(&x->next, 1)) < units;)
            if (linattn_plan_run(x->plan, u, 1, ws) != LINATTN_OK)
                die("plan unit");
    } else {
        const int64_t a = units * w->ith / x->nth, b = units * (w->ith + 1) / x->nth;
        if (linattn_plan_run(x->plan, a, b - a, ws) != LINATTN_OK)
            die("plan range");
    }
    return NULL;
}

/* one call through a plan on nth pthreads (thread creation included, as a
 * host pool's wake-up would be) */
static void run_plan(void *p)
{
    packed *x = p;
    if (linattn_plan_create(&x->plan, LINATTN_OP_DELTA_FORWARD, &x->cfg, &x->ops) != LINATTN_OK)
        die("plan");
    x->wsize = linattn_plan_workspace_size(x->plan);
    atomic_store(&x->next, 0);
    pthread_t th[16];
    worker w[16];
    for (int i = 0; i < x->nth; i++) {
        w[i] = (worker){x, i};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < x->nth; i++)
        pthread_join(th[i], NULL);
    linattn_plan_destroy(x->plan);
}

static void run_plan_static(void *p)
{
    ((packed *)p)->dynamic = 0;
    run_plan(p);
}

static void run_plan_counter(void *p)
{
    ((packed *)p)->dynamic = 1;
    run_plan(p);
}

static void varlen_cases(int64_t H, int64_t D, int quick, int reps)
{
    static const int64_t lens_full[8] = {4096, 64, 512, 128, 2048, 256, 1024, 3072};
    static const int64_t lens_quick[8] = {64, 4, 32, 8, 48, 16, 24, 40};
    const int64_t *lens = quick ? lens_quick : lens_full;
    packed x;
    memset(&x, 0, sizeof x);
    for (int n = 0; n < 8; n++)
        x.cu[n + 1] = x.cu[n] + lens[n];
    const int64_t T = x.cu[8];
    unsigned seed = 5;
    linattn_config_init(&x.cfg, 1, H, T, D, D);
    linattn_config_set_gate(&x.cfg, LINATTN_GATE_TOKEN);
    x.cfg.normalize = 0, x.cfg.qk_l2norm = 1;
    const size_t nt = (size_t)(H * T);
    float *q = randf(nt * D, -1, 1, &seed), *k = randf(nt * D, -1, 1, &seed),
          *v = randf(nt * D, -1, 1, &seed), *o = randf(nt * D, 0, 0, &seed),
          *g = randf(nt, -0.3f, 0, &seed), *beta = randf(nt, 0, 1, &seed),
          *s = randf((size_t)(8 * H * D * D), -0.1f, 0.1f, &seed);
    x.pool = (linattn_state_pool){.slots = 8, .slot = H * D * D, .head = D * D, .row = 1, .col = D};
    linattn_operands_init(&x.ops);
    x.ops.q = q, x.ops.k = k, x.ops.v = v, x.ops.g = g, x.ops.beta = beta, x.ops.o = o;
    x.ops.s = s, x.ops.pool = &x.pool, x.ops.cu_seqlens = x.cu, x.ops.num_seqs = 8;
    /* 1 and 2 threads timed in turn, rep after rep (timed_together) */
    bench_fn fns[3] = {run_packed_1, run_packed_2};
    double t[3], r[3][3];
    timed_together(fns, &x, 2, reps, t, r);
    printf("{\"case\": \"varlen\", \"seqs\": 8, \"T\": %lld, \"H\": %lld, \"dk\": %lld, "
           "\"ms_1_thread\": %.3f, \"ms_2_threads\": %.3f, \"speedup_2_over_1\": %.3f, "
           "\"speedup_2_over_1_q\": [%.3f, %.3f]}\n",
           (long long)T, (long long)H, (long long)D, 1e3 * t[0], 1e3 * t[1], 1 / r[1][1],
           1 / r[1][2], 1 / r[1][0]);
    /* plans from pthreads against OpenMP, 2 threads, the three in turn */
    x.nth = 2;
    x.ws = aligned_alloc(64, 1 << 26);
    linattn_plan *probe; /* the workspace must fit the 64 MiB block */
    if (linattn_plan_create(&probe, LINATTN_OP_DELTA_FORWARD, &x.cfg, &x.ops) != LINATTN_OK)
        die("plan");
    if (linattn_plan_workspace_size(probe) * 2 > (1u << 26))
        die("workspace");
    linattn_plan_destroy(probe);
    fns[0] = run_packed_2, fns[1] = run_plan_static, fns[2] = run_plan_counter;
    timed_together(fns, &x, 3, reps, t, r);
    printf("{\"case\": \"plan_pthreads\", \"threads\": 2, \"ms_openmp\": %.3f, "
           "\"ms_pthread_static\": %.3f, \"ms_pthread_counter\": %.3f, \"ratio_static\": %.3f, "
           "\"ratio_counter\": %.3f, \"ratio_counter_q\": [%.3f, %.3f]}\n",
           1e3 * t[0], 1e3 * t[1], 1e3 * t[2], r[1][1], r[2][1], r[2][0], r[2][2]);
    free(x.ws);
    free(q), free(k), free(v), free(o), free(g), free(beta), free(s);
}

int main(int argc, char **argv)
{
    /* --quick: tiny shapes; a case name (pool_prefill, pool_decode, their
     * _bf16 forms, pool_decode_moved, pool_spec[_bf16], varlen): that case alone;
     * pool_prefill[_bf16] and pool_spec[_bf16] T: with T tokens */
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("usage: linattn-serve-bench [--quick | pool_prefill [T] | pool_decode |\n"
               "       pool_prefill_bf16 [T] | pool_decode_bf16 | pool_decode_moved |\n"
               "       pool_spec [T] | pool_spec_bf16 [T] | varlen | pool_decode_threads]\n"
               "One JSON object per case: times (medians) and ratios to the baseline\n"
               "measured in the same run (see tools/serve-bench.c).\n");
        return 0;
    }
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const char *only = argc > 1 && !quick ? argv[1] : NULL;
    const int reps = quick ? 3 : 9;
    const long prefill_t = argc > 2 ? strtol(argv[2], NULL, 10) : 64;
    if (prefill_t < 1 || prefill_t > 4096) {
        fprintf(stderr, "linattn-serve-bench: T must be 1..4096\n");
        return 2;
    }
    const long spec_t = argc > 2 ? prefill_t : 4; /* speculative tokens: 1 + 3 drafts */
    if (only && strncmp(only, "pool_spec", 9) == 0 && spec_t > 8) {
        fprintf(stderr, "linattn-serve-bench: pool_spec[_bf16] takes T of 1..8\n");
        return 2;
    }
#define WANT(name) (only == NULL || strcmp(only, name) == 0)
    if (quick) {
        pool_case("pool_prefill", 0, 0, IN_PLACE, 4, 4, 40, 16, 1, reps);
        pool_case("pool_decode", 1, 0, IN_PLACE, 4, 4, 1, 16, 1, reps);
        pool_case("pool_prefill_bf16", 0, 1, IN_PLACE, 4, 4, 40, 16, 1, reps);
        pool_case("pool_decode_moved", 1, 0, MOVED, 4, 4, 1, 16, 1, reps);
        pool_case("pool_spec", 0, 0, SPEC, 4, 4, 4, 16, 1, reps);
        pool_case("pool_spec_bf16", 0, 1, SPEC, 4, 4, 4, 16, 1, reps);
        varlen_cases(2, 16, 1, reps);
    } else {
        if (WANT("pool_prefill"))
            pool_case("pool_prefill", 0, 0, IN_PLACE, 16, 32, prefill_t, 128, 1,
                      prefill_t < 64 ? 31 : 15);
        if (WANT("pool_prefill_bf16"))
            pool_case("pool_prefill_bf16", 0, 1, IN_PLACE, 16, 32, prefill_t, 128, 1,
                      prefill_t < 64 ? 31 : 15);
        if (WANT("pool_decode"))
            pool_case("pool_decode", 1, 0, IN_PLACE, 16, 32, 1, 128, 1, 31);
        if (WANT("pool_decode_bf16"))
            pool_case("pool_decode_bf16", 1, 1, IN_PLACE, 16, 32, 1, 128, 1, 31);
        if (WANT("pool_decode_moved"))
            pool_case("pool_decode_moved", 1, 0, MOVED, 16, 32, 1, 128, 1, 31);
        if (WANT("pool_spec"))
            pool_case("pool_spec", 0, 0, SPEC, 16, 32, spec_t, 128, 1, 31);
        if (WANT("pool_spec_bf16"))
            pool_case("pool_spec_bf16", 0, 1, SPEC, 16, 32, spec_t, 128, 1, 31);
        if (WANT("varlen"))
            varlen_cases(4, 128, 0, reps);
        if (WANT("pool_decode_threads")) {
            const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            pool_case("pool_decode_threads", 1, 0, IN_PLACE, 16, 32, 1, 128,
                      cpus > 1 ? (int)cpus : 2, 31);
        }
    }
    return 0;
}
