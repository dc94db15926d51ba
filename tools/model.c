/* --model L: decode of a whole model. One token steps L layers' delta-rule
 * states in turn (linattn_delta_step per layer, each on its own state; with
 * --family additive, linattn_step and the additive states; with --pool,
 * linattn_run on a pool of either layout, z beside it), so
 * a layer's state has left the caches by the time it is stepped again and
 * comes from memory, as in a model (Qwen3-Next: 36 layers, 2 MiB of state
 * per layer and sequence). Each row is compared with a read-modify-write
 * pass over a buffer of the same total size (L states) on the same number
 * of threads, measured just before it: the bound a step that reads and
 * writes its state once could reach. A second reference runs the access
 * pattern of a step on a K-first state without its arithmetic: per head's
 * block of state, a read-only pass (the step's S^T k) and then a
 * read-modify-write pass (its update), so a row's two fractions say how
 * much of the gap to the bound the two passes leave and how much the
 * arithmetic adds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"

#define BIT(x) (1u << (x))

/* ---- the bound: RMW over n floats on nt threads -------------------------- */

typedef struct {
    linattn_isa isa;
    float *buf;
    int64_t n;
    int nt;
    int64_t block; /* 0: one pass; else a read pass and an RMW pass per block */
} rmw_ctx;

static volatile float sink; /* keeps the read passes' sums alive */

/* Thread i of nt owns the i-th contiguous slice (whole cache lines, or
 * whole blocks), as a static split of the heads gives each thread its own
 * rows of every layer. Returns the sum of its read passes (0 without). */
static float rmw_slice(const rmw_ctx *c, int i)
{
    const int64_t unit = c->block ? c->block : 16;
    const int64_t units = (c->n + unit - 1) / unit;
    const int64_t u0 = units * i / c->nt, u1 = units * (i + 1) / c->nt;
    const int64_t a = u0 * unit, b = u1 * unit < c->n ? u1 * unit : c->n;
    if (!c->block) {
        if (b > a)
            bench_rmw_pass(c->isa, c->buf + a, (size_t)(b - a));
        return 0.0f;
    }
    float sum = 0.0f;
    for (int64_t x = a; x < b; x += unit) {
        const size_t len = (size_t)(b - x < unit ? b - x : unit);
        sum += bench_read_pass(c->isa, c->buf + x, len);
        bench_rmw_pass(c->isa, c->buf + x, len);
    }
    return sum;
}

static void run_rmw(void *p)
{
    const rmw_ctx *c = p;
#ifdef _OPENMP
    if (c->nt > 1) {
        float s = 0.0f;
#pragma omp parallel num_threads(c->nt) reduction(+ : s)
        s += rmw_slice(c, omp_get_thread_num());
        sink += s;
        return;
    }
#endif
    sink += rmw_slice(c, 0);
}

/* GB/s of state read and written once (the read pass is not counted). */
static double model_bound(const bench_options *op, linattn_isa isa, int64_t n, int nt,
                          int64_t block)
{
    rmw_ctx c = {.isa = isa, .buf = bench_alloc(n), .n = n, .nt = nt, .block = block};
    bench_fill(c.buf, n, 0.0f, 1.0f, 7); /* first touch here: pages spread as the run goes */
    const double sec = bench_time_call(run_rmw, &c, op->min_time);
    free(c.buf);
    return 2.0 * sizeof(float) * (double)n / sec * 1e-9;
}

/* ---- one token through L layers ---------------------------------------- */

typedef struct {
    const bench_case *c;
    linattn_config cfg;
    bench_data d; /* inputs shared by the layers (one token: they stay cached) */
    float *states;
    int64_t layers, state_floats;
    int64_t z_at; /* where a layer's z starts in its block (additive, normalised), or -1 */
    const linattn_state_pool *pool; /* --pool: each layer's states as this pool */
} model_ctx;

static void run_token(void *p)
{
    model_ctx *x = p;
    for (int64_t l = 0; l < x->layers; l++) {
        bench_data d = x->d;
        d.s = x->states + l * x->state_floats;
        d.s16 = (uint16_t *)x->states + l * x->state_floats; /* a bfloat16 state */
        d.z = x->z_at >= 0 ? d.s + x->z_at : NULL;
        d.pool = x->pool;
        bench_call(x->c, K_STEP, &x->cfg, &d, d.o[0]);
    }
}

/* Threads of "all threads": --threads when above 1, else the CPUs online. */
static int all_threads(const bench_options *op)
{
    if (op->threads > 1)
        return op->threads;
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef _OPENMP
    return n > 1 ? (int)n : 1;
#else
    (void)n;
    return 1;
#endif
}

static void run_family(const bench_options *op, linattn_isa isa, bench_family fam)
{
    static const int64_t default_b[] = {1, 8};
    const int64_t *bs = op->shape_given ? &op->shape.B : default_b;
    const int nb = op->shape_given ? 1 : 2;
    static const char *const pool_names[] = {NULL, "kfirst", "vfirst"};
    const int threads[2] = {1, all_threads(op)};
    const int nth = threads[1] > 1 ? 2 : 1;
    bench_options mop = *op;
    mop.families = BIT(fam);
    mop.kernels = BIT(K_STEP);
    if (!op->gates_given)
        mop.gates = BIT(G_TOKEN);
    bench_case cs[64];
    const int nc = bench_cases(&mop, fam, 0, cs, 64);
    bench_use_isa(isa);
    if (!op->json) {
        const bench_shape s = bench_step_shape(&mop, fam);
        printf("linattn %s whole-model decode (%s, tuning %s): %lld layers of %s, "
               "H=%lld (%lld q/k heads) dk=%lld dv=%lld, one token per layer per pass\n"
               "bound: RMW s = s*a + b over all layers' states on the same threads, "
               "measured before each row;\n2-pass: per head's state a read-only pass, "
               "then the RMW pass (a K-first step's pattern without its arithmetic)\n",
               linattn_version(), linattn_isa_name(isa), linattn_tuning_name(),
               (long long)op->model,
               op->pool == POOL_KFIRST   ? "linattn_run on a K-first pool"
               : op->pool == POOL_VFIRST ? "linattn_run on a V-first pool"
               : fam == FAM_DELTA        ? "linattn_delta_step"
                                         : "linattn_step",
               (long long)s.H, (long long)(s.qk_heads ? s.qk_heads : s.H), (long long)s.dk,
               (long long)s.dv);
        printf("%-6s %-14s %3s %3s %9s %12s %10s %8s %10s %10s %11s %11s\n", "isa", "gate", "B",
               "thr", "state MiB", "us/layer", "us/token", "GB/s", "bound GB/s", "frac bound",
               "2-pass GB/s", "frac 2-pass");
    }
    for (int bi = 0; bi < nb; bi++)
        for (int ci = 0; ci < nc; ci++)
            for (int ti = 0; ti < nth; ti++) {
                bench_options top = mop;
                top.threads = threads[ti];
                bench_shape s = bench_step_shape(&mop, fam);
                s.B = bs[bi];
                const int norm = fam == FAM_ADDITIVE && cs[ci].normalize;
                const int64_t per = bench_state_floats(fam, s, norm);
                const int64_t n = per * op->model;
                /* the bound over the states' bytes (bfloat16: half the floats) */
                const int64_t nb = bench_state_bytes(op, fam, s, norm) * op->model /
                                   (int64_t)sizeof(float);
                const double bound = model_bound(op, isa, nb, threads[ti], 0);
                /* a head's state, in floats of its bytes */
                const int64_t head = bench_state_bytes(op, fam, s, norm) / (s.B * s.H) /
                                     (int64_t)sizeof(float);
                const double two_pass = model_bound(op, isa, nb, threads[ti], head);
                /* --pool: slot b holds sequence b's H heads */
                int32_t *slots = malloc((size_t)s.B * sizeof *slots);
                if (slots == NULL)
                    bench_die("out of memory");
                for (int64_t b = 0; b < s.B; b++)
                    slots[b] = (int32_t)b;
                const int vfirst = op->pool == POOL_VFIRST;
                const linattn_state_pool pool = {.slots = s.B,
                                                 .slot = s.H * s.dk * s.dv,
                                                 .head = s.dk * s.dv,
                                                 .row = vfirst ? 1 : s.dv,
                                                 .col = vfirst ? s.dk : 1,
                                                 .z_slot = norm ? s.H * s.dk : 0,
                                                 .z_head = norm ? s.dk : 0,
                                                 .read_slots = slots};
                model_ctx x = {&cs[ci],
                               bench_config(&top, &cs[ci], K_STEP, s),
                               bench_data_alloc(&top, s, 1),
                               bench_alloc(n),
                               op->model,
                               per,
                               norm ? s.B * s.H * s.dk * s.dv : -1,
                               op->pool == POOL_NONE ? NULL : &pool};
                memset(x.states, 0, (size_t)n * sizeof(float));
                const double sec = bench_time_call(run_token, &x, op->min_time);
                bench_data_free(&x.d);
                free(x.states);
                free(slots);

                bench_result r = bench_new_result(&top, &cs[ci], K_STEP, isa, s);
                bench_set_rates(&top, &r, isa, (double)(s.B * s.H * op->model), sec);
                r.mode = "model";
                r.pool = pool_names[op->pool];
                r.layers = op->model;
                r.sec = sec;
                r.us_per_token = sec * 1e6;
                r.us_per_layer = sec * 1e6 / (double)op->model;
                r.gbps = 2.0 * sizeof(float) * (double)nb / sec * 1e-9;
                r.bound = bound;
                r.frac_bound = r.gbps / bound;
                r.bound_two_pass = two_pass;
                r.frac_two_pass = r.gbps / two_pass;
                if (op->json)
                    bench_json(&r);
                else
                    printf("%-6s %-14s %3lld %3d %9.1f %12.2f %10.1f %8.1f %10.1f %10.2f %11.1f "
                           "%11.2f\n",
                           r.isa, bench_gate_names[r.gate], (long long)s.B, r.threads,
                           (double)nb * sizeof(float) / (1 << 20), r.us_per_layer,
                           r.us_per_token, r.gbps, r.bound, r.frac_bound, r.bound_two_pass,
                           r.frac_two_pass);
                fflush(stdout);
            }
}

void bench_run_model(const bench_options *op, linattn_isa isa)
{
    for (int f = 0; f < FAM_COUNT; f++) /* options.c: the delta rule unless --family */
        if (op->families & BIT(f))
            run_family(op, isa, (bench_family)f);
}
