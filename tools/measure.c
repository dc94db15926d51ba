/* Measurement for linattn-bench: the timing loop, the FLOP models, the FMA
 * peak and the read-modify-write bound of this core, measured in the same
 * run as the cases they are compared with. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"

/* ---- the FLOP models ------------------------------------------------------
 *
 * Useful FLOPs: what the maths of a family needs per token and value head,
 * not what a kernel happens to execute, so every algorithm of a family (the
 * chunked and recurrent forwards, the step, the quadratic baseline) is
 * charged the same and the columns compare honestly. The baseline's O(T^2)
 * work therefore shows as low tokens/s, not as high GFLOP/s.
 *
 *   additive (linattn_forward, linattn_step):
 *       4*dk*dv   state update kh v^T (2*dk*dv) + readout qh^T S (2*dk*dv)
 *     + 4*dk      when normalising: z update and qh . z
 *     + dk*dv     when gated: the decay of S
 *     non-causal: the same per token.
 *   delta rule (linattn_delta_forward, linattn_delta_step):
 *       6*dk*dv   S^T kh, the rank-1 update kh u^T, and S^T qh (2*dk*dv each)
 *
 * A step is charged the same per (b, h) as a forward per token. */
double bench_flops_per_token(bench_family f, bench_shape s, bench_gate g, int normalize)
{
    const double dk = (double)s.dk, dv = (double)s.dv;
    switch (f) {
    case FAM_DELTA: return 6 * dk * dv;
    default:
        return 4 * dk * dv + (normalize ? 4 * dk : 0) + (g != G_NONE ? dk * dv : 0);
    }
}

/* A step reads and writes S, and z when normalising. */
int64_t bench_state_floats(bench_family f, bench_shape s, int normalize)
{
    const int64_t z = f == FAM_ADDITIVE && normalize ? s.dk : 0;
    return s.B * s.H * (s.dk * s.dv + z);
}

/* With fewer heads than threads, the additive chunked forward spreads the
 * chunks of a head over the threads, and the additive recurrent forward and
 * every delta-rule kernel split the value columns of a head; the additive
 * step shares a head's columns out only without the normaliser and in
 * shares of at least 128 KiB of state (the library's rule), and the
 * non-causal forward parallelises over heads only; the quadratic baseline
 * is single-threaded C. */
int bench_threads_used(bench_family f, bench_kernel k, bench_shape s, int normalize, int threads)
{
    if (k == K_QUADRATIC)
        return 1;
    if (f == FAM_DELTA || k == K_CHUNKED || k == K_RECURRENT)
        return threads;
    const int64_t heads = s.B * s.H;
    int64_t pieces = 1;
    if (k == K_STEP && !normalize && heads < threads) {
        const int64_t by_size = s.dk * s.dv * (int64_t)sizeof(float) / (128 << 10);
        const int64_t by_threads = (threads + heads - 1) / heads;
        const int64_t p = by_size < by_threads ? by_size : by_threads;
        if (p >= 2) { /* whole vectors of 16 columns, as the driver cuts them */
            const int64_t width = ((s.dv + p - 1) / p + 15) / 16 * 16;
            pieces = (s.dv + width - 1) / width;
        }
    }
    return heads * pieces < threads ? (int)(heads * pieces) : threads;
}

/* ---- helpers ------------------------------------------------------------- */

_Noreturn void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("linattn-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

float *bench_alloc(int64_t n)
{
    /* aligned_alloc wants a multiple of the alignment. */
    const size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p == NULL)
        bench_die("out of memory (%zu bytes)", bytes);
    return p;
}

void bench_fill(float *x, int64_t n, float lo, float hi, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(seed >> 8) * (1.0f / 16777216.0f);
    }
}

void bench_use_isa(linattn_isa isa)
{
    const linattn_status st = linattn_set_isa(isa);
    if (st != LINATTN_OK || (isa != LINATTN_ISA_AUTO && linattn_get_isa() != isa))
        bench_die("cannot switch to ISA %s: %s", linattn_isa_name(isa), linattn_strerror(st));
}

int bench_isa_end(void)
{
    int i = LINATTN_ISA_SCALAR;
    while (strcmp(linattn_isa_name((linattn_isa)i), "unknown") != 0)
        i++;
    return i;
}

/* ---- timing -------------------------------------------------------------- */

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One warm-up call, then samples of n calls each, about min_time / 100
 * long, until they add up to min_time (at least 3); the best sample wins.
 * Short samples and the minimum keep the numbers sane on a machine shared
 * with other jobs. A call slower than 4 * min_time is measured once (its
 * warm-up) to keep sweeps short. */
double bench_time_call(bench_fn f, void *ctx, double min_time)
{
    double t = bench_now();
    f(ctx);
    const double first = bench_now() - t;
    if (first >= 4 * min_time)
        return first;
    const double per = min_time / 100 / (first > 1e-9 ? first : 1e-9);
    const int64_t n = per < 1 ? 1 : per > 1e9 ? 1000000000 : (int64_t)per;
    double best = INFINITY, total = 0;
    for (int i = 0; (i < 3 || total < min_time) && i < 10000; i++) {
        t = bench_now();
        for (int64_t c = 0; c < n; c++)
            f(ctx);
        const double dt = bench_now() - t;
        total += dt;
        if (dt / (double)n < best)
            best = dt / (double)n;
    }
    return best;
}

/* ---- peak and bound, per ISA, measured once --------------------------- */

static volatile float sink; /* keeps the measuring loops' results alive */

typedef struct {
    linattn_isa isa;
    int64_t iters;
} peak_ctx;

static void run_peak(void *p)
{
    const peak_ctx *c = p;
    sink += bench_fma_loop(c->isa, c->iters);
}

/* Peak: the register-blocked FMA loop of the ISA on one core (peak.c),
 * measured before the first row. recheck: measured again (a quarter as
 * long) and the highest figure of the run kept. On a shared host a
 * measurement taken while a neighbour loads the core comes out low and
 * would inflate every later row's fraction (on a borrowed Xeon one bench
 * process measured 105 GFLOP/s, the one before it 170); a row is checked
 * against the peak right after it, so its fraction can only err low. */
static double peak_once(const bench_options *op, linattn_isa isa, double min_time)
{
    peak_ctx c = {isa, op->quick ? 1 << 12 : 1 << 16};
    const double sec = bench_time_call(run_peak, &c, min_time);
    return bench_fma_flops_per_iter(isa) * (double)c.iters / sec * 1e-9;
}

static double peak_of(const bench_options *op, linattn_isa isa, int recheck)
{
    static double *cache; /* by ISA; 0 = not measured yet */
    if (cache == NULL && (cache = calloc((size_t)bench_isa_end(), sizeof *cache)) == NULL)
        bench_die("out of memory");
    if (cache[isa] == 0)
        cache[isa] = peak_once(op, isa, op->min_time);
    else if (recheck) {
        const double again = peak_once(op, isa, op->min_time / 4);
        if (again > cache[isa])
            cache[isa] = again;
    }
    return cache[isa];
}

double bench_peak(const bench_options *op, linattn_isa isa) { return peak_of(op, isa, 0); }

typedef struct {
    linattn_isa isa;
    int64_t iters;
    int nt;
} peak_threads_ctx;

static void run_peak_threads(void *p)
{
    const peak_threads_ctx *c = p;
    float s = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(c->nt) reduction(+ : s)
#endif
    s += bench_fma_loop(c->isa, c->iters);
    sink += s;
}

/* Figures measured once per run, by (what, ISA, size): searched, as a run
 * asks for a handful. Past the table's end a figure is measured again. */
typedef enum { MEMO_PEAK_THREADS, MEMO_BOUND } memo_kind;

typedef struct {
    memo_kind kind;
    linattn_isa isa;
    int64_t key;
    double value;
} memo_entry;

static memo_entry memo[96];
static int memo_used;

static double *memo_get(memo_kind kind, linattn_isa isa, int64_t key)
{
    for (int i = 0; i < memo_used; i++)
        if (memo[i].kind == kind && memo[i].isa == isa && memo[i].key == key)
            return &memo[i].value;
    return NULL;
}

static double memo_put(memo_kind kind, linattn_isa isa, int64_t key, double value)
{
    if (memo_used < (int)(sizeof memo / sizeof *memo))
        memo[memo_used++] = (memo_entry){kind, isa, key, value};
    return value;
}

/* The FMA loop on nt threads at once, measured at a row's first use and
 * then after every row that uses it (a quarter as long), the highest
 * figure kept (as the one-core peak). */
double bench_peak_threads(const bench_options *op, linattn_isa isa, int nt)
{
#ifdef _OPENMP
    const int team = nt;
#else
    const int team = 1; /* no threads: the bench's calls run on one too */
#endif
    double *known = memo_get(MEMO_PEAK_THREADS, isa, nt);
    peak_threads_ctx c = {isa, op->quick ? 1 << 12 : 1 << 16, team};
    /* longer samples than one core's: a team's start is in each sample */
    const double sec =
        bench_time_call(run_peak_threads, &c, known ? op->min_time / 2 : 2 * op->min_time);
    const double now = bench_fma_flops_per_iter(isa) * (double)c.iters * team / sec * 1e-9;
    if (known == NULL)
        return memo_put(MEMO_PEAK_THREADS, isa, nt, now);
    if (now > *known)
        *known = now;
    return *known;
}

typedef struct {
    linattn_isa isa;
    float *buf;
    size_t n;
} rmw_ctx;

static void run_rmw(void *p)
{
    const rmw_ctx *c = p;
    bench_rmw_pass(c->isa, c->buf, c->n);
}

/* Bound: a read-modify-write pass s = s*a + b over n floats (the size of a
 * step's state), counting read plus write bytes: what a step that reads
 * and writes its state once could reach on one core. */
double bench_bound(const bench_options *op, linattn_isa isa, int64_t n)
{
    const double *known = memo_get(MEMO_BOUND, isa, n);
    if (known)
        return *known;
    rmw_ctx c = {isa, bench_alloc(n), (size_t)n};
    bench_fill(c.buf, n, 0.0f, 1.0f, 7);
    const double sec = bench_time_call(run_rmw, &c, op->min_time);
    sink += c.buf[0];
    free(c.buf);
    return memo_put(MEMO_BOUND, isa, n, 2.0 * sizeof(float) * (double)n / sec * 1e-9);
}

/* ---- rates of a row ---------------------------------------------------- */

bench_result bench_new_result(const bench_options *op, const bench_case *c, bench_kernel k,
                              linattn_isa isa, bench_shape s)
{
    return (bench_result){
        .kernel = bench_kernel_names[k],
        .isa = k == K_QUADRATIC ? "c" : linattn_isa_name(isa),
        .layout = k == K_CHUNKED || k == K_RECURRENT || k == K_NONCAUSAL
                      ? bench_layout_names[op->layout]
                      : NULL,
        .family = c->family,
        .gate = c->gate,
        .phi = c->phi,
        .normalize = c->normalize,
        .qk_l2norm = c->qk_l2norm,
        .sh = s,
        .threads = bench_threads_used(c->family, k, s, c->normalize, op->threads),
        .chunk = k == K_CHUNKED ? op->chunk : -1,
        .tokens = -1,
        .layers = -1,
        .sec = NAN, .tokens_per_s = NAN, .gflops = NAN, .peak = NAN, .frac_peak = NAN,
        .peak_threads = NAN, .frac_peak_threads = NAN,
        .gbps = NAN, .bound = NAN, .frac_bound = NAN, .us_per_token = NAN,
        .speedup = NAN, .maxdiff = NAN, .maxref = NAN,
        .ns_per_call = NAN, .us_p50 = NAN, .us_p99 = NAN, .us_max = NAN,
        .us_per_layer = NAN, .bound_two_pass = NAN, .frac_two_pass = NAN,
        .dtype = bench_dtype_names[op->dtype],
        .state = k == K_STEP ? bench_dtype_names[op->state] : NULL,
        .act = op->act ? "on" : "off",
        .ratio = NAN, .ratio_min = NAN, .ratio_max = NAN, .goal = NAN, .sec_ref = NAN,
    };
}

void bench_set_rates(const bench_options *op, bench_result *r, linattn_isa isa, double tokens,
                     double sec)
{
    r->sec = sec;
    r->tokens_per_s = tokens / sec;
    r->gflops = tokens * bench_flops_per_token(r->family, r->sh, r->gate, r->normalize) / sec *
                1e-9;
    r->peak = peak_of(op, isa, 1) * r->threads; /* rechecked after the row */
    r->frac_peak = r->gflops / r->peak;
    if (r->threads > 1) {
        r->peak_threads = bench_peak_threads(op, isa, r->threads);
        r->frac_peak_threads = r->gflops / r->peak_threads;
    }
}

/* The bound is measured over a buffer of the state's bytes (a bfloat16
 * state: half the floats). */
void bench_set_step_rates(const bench_options *op, bench_result *r, linattn_isa isa, double sec)
{
    const int64_t bytes = bench_state_bytes(op, r->family, r->sh, r->normalize);
    bench_set_rates(op, r, isa, (double)(r->sh.B * r->sh.H), sec);
    r->us_per_token = sec * 1e6;
    r->gbps = 2.0 * (double)bytes / sec * 1e-9;
    r->bound = bench_bound(op, isa, bytes / (int64_t)sizeof(float));
    r->frac_bound = r->gbps / r->bound;
}
