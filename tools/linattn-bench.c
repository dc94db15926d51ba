/* linattn-bench: throughput of the linattn kernels through the public API,
 * against the FMA peak and the memory bound of this core measured in the
 * same run. Output: a readable table, or one JSON object per line (--json,
 * SPEC section 5). Run with --help for the options.
 *
 * FLOP model ("useful" FLOPs: what the maths of SPEC section 1 needs, not
 * what a kernel happens to execute, so every algorithm is charged the same
 * and the columns compare honestly):
 *   per token and head, causal forward (chunked and recurrent alike):
 *     4*dk*dv   state update kh v^T (2*dk*dv) + readout qh^T S (2*dk*dv)
 *   + 4*dk      when normalising: z update and qh . z
 *   + dk*dv     when gated: the decay of S
 *   non-causal: the same per token; step: the same per (b, h).
 *   The quadratic reference is charged the same useful FLOPs, so its
 *   O(T^2) work shows as low tokens/s and low GFLOP/s, not as high FLOPs.
 *   tokens/s counts B*H*T tokens per second (step: B*H per call).
 *
 * Peak: a register-blocked FMA loop of the benchmarked ISA on one core
 * (12 independent accumulators, 2 flops per lane per FMA); scalar is the
 * scalar FMA peak (fmaf; a multiply and an add on x86_64 CPUs without FMA).
 * With --threads N, peak_gflops is that times the threads used: N for the
 * chunked forward (heads or chunks run in parallel), min(N, B*H) otherwise.
 *
 * Bound (step): a read-modify-write pass s = s*a + b over a buffer the size
 * of the step's whole state (B*H*(dk*dv + dk) floats), one core, counting
 * read + write bytes. A step reads and writes S and z once: its GB/s is
 * 2 * 4 * B*H*(dk*dv + dk) bytes per call; q, k, v, o are not counted.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MAX_QUADRATIC_T 8192 /* beyond it the O(T^2) baseline takes minutes */

typedef struct {
    int64_t B, H, T, dk, dv;
} shape;

enum { K_CHUNKED, K_RECURRENT, K_NONCAUSAL, K_STEP, K_QUADRATIC, K_COUNT };
static const char *const kernel_names[K_COUNT] = {"forward_chunked", "forward_recurrent",
                                                  "noncausal", "step", "quadratic"};
static const char *const gate_names[] = {"none", "head", "token", "channel"};
enum { N_GATES = 4, N_ISAS = LINATTN_ISA_NEON + 1 };

typedef struct {
    int json, quick;
    int isa_given, isa_all;
    linattn_isa isa;
    int threads;
    int shape_given;
    shape fwd, stp;
    unsigned kernels; /* bit per K_* */
    unsigned gates;   /* bit per linattn_gate */
    int64_t chunk;
    const char *sweep;
    int64_t decode;
    double min_time; /* seconds of timed calls per case */
} options;

/* One measured case. Fields that do not apply are NAN. */
typedef struct {
    const char *kernel, *isa;
    linattn_gate gate;
    shape sh;
    int threads, baseline;
    double sec; /* per call (quadratic: per head) */
    double tokens_per_s, gflops, peak, pct_peak;
    double gbps, bound, pct_bound, us_per_token;
    double speedup, maxdiff, maxref;
} result;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("linattn-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Bad command line: exit status 2. */
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("linattn-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nTry 'linattn-bench --help'.\n", stderr);
    va_end(ap);
    exit(2);
}

static float *alloc_floats(int64_t n)
{
    /* aligned_alloc wants a multiple of the alignment. */
    const size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p == NULL)
        die("out of memory (%zu bytes)", bytes);
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Uniform in [lo, hi], deterministic. */
static void fill(float *x, int64_t n, float lo, float hi, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(seed >> 8) * (1.0f / 16777216.0f);
    }
}

/* ---- timing --------------------------------------------------------- */

typedef void (*bench_fn)(void *ctx);

/* Seconds per call: one warm-up call, then samples of n calls each, about
 * min_time / 100 long, until they add up to min_time (at least 3); the
 * best sample wins. Short samples and the minimum keep the numbers sane
 * on a machine shared with other jobs. A call slower than 4 * min_time is
 * measured once (its warm-up) to keep sweeps short. */
static double time_call(bench_fn f, void *ctx, double min_time)
{
    double t = now();
    f(ctx);
    const double first = now() - t;
    if (first >= 4 * min_time)
        return first;
    const double per = min_time / 100 / (first > 1e-9 ? first : 1e-9);
    const int64_t n = per < 1 ? 1 : per > 1e9 ? 1000000000 : (int64_t)per;
    double best = INFINITY, total = 0;
    for (int i = 0; (i < 3 || total < min_time) && i < 10000; i++) {
        t = now();
        for (int64_t c = 0; c < n; c++)
            f(ctx);
        const double dt = now() - t;
        total += dt;
        if (dt / (double)n < best)
            best = dt / (double)n;
    }
    return best;
}

/* ---- peak and bound, per ISA, measured once ------------------------- */

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

static double core_peak(const options *op, linattn_isa isa)
{
    static double cache[N_ISAS];
    if (cache[isa] == 0) {
        peak_ctx c = {isa, op->quick ? 1 << 12 : 1 << 16};
        const double sec = time_call(run_peak, &c, op->min_time);
        cache[isa] = bench_fma_flops_per_iter(isa) * (double)c.iters / sec * 1e-9;
    }
    return cache[isa];
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

static int64_t state_floats(shape s) { return s.B * s.H * (s.dk * s.dv + s.dk); }

/* GB/s of the RMW pass over a buffer of the step's state size. */
static double core_bound(const options *op, linattn_isa isa)
{
    static double cache[N_ISAS];
    if (cache[isa] == 0) {
        const int64_t n = state_floats(op->stp);
        rmw_ctx c = {isa, alloc_floats(n), (size_t)n};
        fill(c.buf, n, 0.0f, 1.0f, 7);
        const double sec = time_call(run_rmw, &c, op->min_time);
        sink += c.buf[0];
        free(c.buf);
        cache[isa] = 2.0 * sizeof(float) * (double)n / sec * 1e-9;
    }
    return cache[isa];
}

/* ---- the FLOP model (see the top of the file) ----------------------- */

static double flops_per_token(shape s, linattn_gate gate)
{
    const double dk = (double)s.dk, dv = (double)s.dv;
    return 4 * dk * dv + 4 * dk /* normalize = 1 */ + (gate != LINATTN_GATE_NONE ? dk * dv : 0);
}

/* The chunked forward spreads the chunks of a head over threads when there
 * are fewer heads than threads; the other kernels parallelise over heads. */
static int threads_used(const options *op, shape s, const char *kernel)
{
    if (strcmp(kernel, "forward_chunked") == 0)
        return op->threads;
    return s.B * s.H < op->threads ? (int)(s.B * s.H) : op->threads;
}

/* ---- output --------------------------------------------------------- */

static void json_num(const char *key, double x)
{
    if (isfinite(x))
        printf(",\"%s\":%.6g", key, x);
    else if (!isnan(x))
        printf(",\"%s\":null", key);
}

/* "12.3 M": tokens/s at a glance. */
static const char *si(char *buf, size_t len, double x)
{
    static const char *const unit[] = {"", "K", "M", "G", "T"};
    int u = 0;
    while (fabs(x) >= 1000 && u < 4) {
        x /= 1000;
        u++;
    }
    snprintf(buf, len, "%.3g %s", x, unit[u]);
    return buf;
}

static void print_header(const options *op)
{
    if (op->json)
        return;
    printf("%-17s %-6s %-7s %3s %3s %6s %4s %4s %3s %10s %8s %6s %8s %7s %6s %8s\n", "kernel",
           "isa", "gate", "B", "H", "T", "dk", "dv", "thr", "tokens/s", "GFLOP/s", "%peak",
           "speedup", "GB/s", "%bound", "us/token");
}

static void print_result(const options *op, const result *r)
{
    if (op->json) {
        printf("{\"kernel\":\"%s\",\"isa\":\"%s\",\"gate\":\"%s\",\"B\":%lld,\"H\":%lld,"
               "\"T\":%lld,\"dk\":%lld,\"dv\":%lld,\"threads\":%d,\"phi\":\"elu1\","
               "\"normalize\":1,\"chunk\":%lld",
               r->kernel, r->isa, gate_names[r->gate], (long long)r->sh.B, (long long)r->sh.H,
               (long long)r->sh.T, (long long)r->sh.dk, (long long)r->sh.dv, r->threads,
               (long long)op->chunk);
        if (r->baseline)
            printf(",\"baseline\":true");
        json_num("seconds", r->sec);
        json_num("tokens_per_s", r->tokens_per_s);
        json_num("gflops", r->gflops);
        json_num("peak_gflops", r->peak);
        json_num("pct_peak", r->pct_peak);
        json_num("gbps", r->gbps);
        json_num("bound_gbps", r->bound);
        json_num("pct_bound", r->pct_bound);
        json_num("us_per_token", r->us_per_token);
        json_num("speedup", r->speedup);
        json_num("max_abs_diff_chunked", r->maxdiff);
        printf("}\n");
    } else {
        char tok[32], sp[16] = "-", gb[16] = "-", pb[16] = "-", us[16] = "-";
        if (!isnan(r->speedup))
            snprintf(sp, sizeof sp, "%.2fx", r->speedup);
        if (!isnan(r->gbps)) {
            snprintf(gb, sizeof gb, "%.1f", r->gbps);
            snprintf(pb, sizeof pb, "%.0f%%", r->pct_bound);
            snprintf(us, sizeof us, "%.2f", r->us_per_token);
        }
        printf("%-17s %-6s %-7s %3lld %3lld %6lld %4lld %4lld %3d %10s %8.2f %5.1f%% %8s %7s "
               "%6s %8s%s\n",
               r->kernel, r->isa, gate_names[r->gate], (long long)r->sh.B, (long long)r->sh.H,
               (long long)r->sh.T, (long long)r->sh.dk, (long long)r->sh.dv, r->threads,
               si(tok, sizeof tok, r->tokens_per_s), r->gflops, r->pct_peak, sp, gb, pb, us,
               r->baseline ? "  baseline" : "");
    }
    fflush(stdout);
}

static result new_result(const options *op, const char *kernel, const char *isa,
                         linattn_gate gate, shape sh)
{
    result r = {kernel, isa, gate, sh, threads_used(op, sh, kernel), 0, NAN, NAN, NAN, NAN, NAN,
                NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    return r;
}

/* Throughput and FLOP columns of a forward-style case: `tokens` tokens
 * in `sec` seconds, against the peak of isa on the threads used. */
static void set_rates(const options *op, result *r, linattn_isa isa, double tokens,
                      double sec)
{
    r->sec = sec;
    r->tokens_per_s = tokens / sec;
    r->gflops = tokens * flops_per_token(r->sh, r->gate) / sec * 1e-9;
    r->peak = core_peak(op, isa) * r->threads;
    r->pct_peak = 100 * r->gflops / r->peak;
}

/* ---- the cases ------------------------------------------------------ */

static void use_isa(linattn_isa isa)
{
    const linattn_status st = linattn_set_isa(isa);
    if (st != LINATTN_OK || (isa != LINATTN_ISA_AUTO && linattn_get_isa() != isa))
        die("cannot switch to ISA %s: %s", linattn_isa_name(isa), linattn_strerror(st));
}

static linattn_config make_config(const options *op, shape s, linattn_gate gate)
{
    linattn_config cfg;
    linattn_config_init(&cfg, s.B, s.H, s.T, s.dk, s.dv);
    linattn_config_set_gate(&cfg, gate);
    cfg.num_threads = op->threads;
    cfg.chunk = op->chunk;
    return cfg;
}

/* Inputs of the forward cases, [B][H][T][d]; g sized for CHANNEL, which
 * covers the other gates' layouts. Two outputs to compare kernels. */
typedef struct {
    shape sh; /* the allocated size; cases may use a smaller T */
    float *q, *k, *v, *g, *o[2];
} fwd_data;

static fwd_data fwd_alloc(shape s)
{
    const int64_t nk = s.B * s.H * s.T * s.dk, nv = s.B * s.H * s.T * s.dv;
    fwd_data d = {s, alloc_floats(nk), alloc_floats(nk), alloc_floats(nv),
                  alloc_floats(nk), {alloc_floats(nv), alloc_floats(nv)}};
    fill(d.q, nk, -1, 1, 1);
    fill(d.k, nk, -1, 1, 2);
    fill(d.v, nv, -1, 1, 3);
    fill(d.g, nk, -1, 0, 4);
    memset(d.o[0], 0, (size_t)nv * sizeof(float));
    memset(d.o[1], 0, (size_t)nv * sizeof(float));
    return d;
}

static void fwd_free(fwd_data *d)
{
    free(d->q);
    free(d->k);
    free(d->v);
    free(d->g);
    free(d->o[0]);
    free(d->o[1]);
}

typedef struct {
    linattn_config cfg;
    const float *q, *k, *v, *g;
    float *o;
} fwd_ctx;

static void run_forward(void *p)
{
    const fwd_ctx *c = p;
    const linattn_status st = linattn_forward(&c->cfg, c->q, c->k, c->v,
                                              c->cfg.gate ? c->g : NULL, c->o, NULL, NULL);
    if (st != LINATTN_OK)
        die("linattn_forward: %s", linattn_strerror(st));
}

/* kernel: K_CHUNKED, K_RECURRENT or K_NONCAUSAL; output into o. */
static result bench_forward(const options *op, linattn_isa isa, linattn_gate gate, int kernel,
                            shape s, const fwd_data *d, float *o)
{
    use_isa(isa);
    fwd_ctx c = {make_config(op, s, gate), d->q, d->k, d->v, d->g, o};
    c.cfg.algo = kernel == K_RECURRENT ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_CHUNKED;
    c.cfg.causal = kernel != K_NONCAUSAL;
    result r = new_result(op, kernel_names[kernel], linattn_isa_name(isa), gate, s);
    set_rates(op, &r, isa, (double)(s.B * s.H * s.T), time_call(run_forward, &c, op->min_time));
    return r;
}

typedef struct {
    const fwd_data *d;
    shape sh;
    float *o, *work;
    int64_t head;
} quad_ctx;

/* One head per call, cycling through the B*H heads: the baseline's cost
 * per head does not depend on the head, and a whole T=4096 batch would
 * take seconds. */
static void run_quadratic(void *p)
{
    quad_ctx *c = p;
    const shape s = c->sh;
    const int64_t i = c->head, tk = s.T * s.dk, tv = s.T * s.dv;
    bench_quadratic_head(s.T, s.dk, s.dv, LINATTN_PHI_ELU1, 1.0f, 1, 1e-6f, c->d->q + i * tk,
                         c->d->k + i * tk, c->d->v + i * tv, c->o + i * tv, c->work);
    c->head = (c->head + 1) % (s.B * s.H);
}

static result bench_quadratic(const options *op, shape s, const fwd_data *d, float *o)
{
    quad_ctx c = {d, s, o, alloc_floats(s.T * s.dk + s.dk + s.T), 0};
    const double sec = time_call(run_quadratic, &c, op->min_time);
    free(c.work);
    options one = *op;
    one.threads = 1; /* plain single-threaded C */
    result r = new_result(&one, kernel_names[K_QUADRATIC], "c", LINATTN_GATE_NONE, s);
    r.baseline = 1;
    set_rates(&one, &r, LINATTN_ISA_SCALAR, (double)s.T, sec);
    return r;
}

typedef struct {
    linattn_config cfg;
    const float *q, *k, *v, *g;
    float *o, *s, *z;
} step_ctx;

static void run_step(void *p)
{
    const step_ctx *c = p;
    const linattn_status st = linattn_step(&c->cfg, c->q, c->k, c->v,
                                           c->cfg.gate ? c->g : NULL, c->o, c->s, c->z);
    if (st != LINATTN_OK)
        die("linattn_step: %s", linattn_strerror(st));
}

/* Buffers of a step: one token per (b, h) and a persistent state. */
static step_ctx step_alloc(const options *op, linattn_gate gate)
{
    const shape s = op->stp;
    const int64_t nk = s.B * s.H * s.dk, nv = s.B * s.H * s.dv;
    step_ctx c = {make_config(op, s, gate), alloc_floats(nk), alloc_floats(nk),
                  alloc_floats(nv), alloc_floats(nk), alloc_floats(nv),
                  alloc_floats(nk * s.dv), alloc_floats(nk)};
    fill((float *)c.q, nk, -1, 1, 5);
    fill((float *)c.k, nk, -1, 1, 6);
    fill((float *)c.v, nv, -1, 1, 7);
    fill((float *)c.g, nk, -1, 0, 8);
    memset(c.s, 0, (size_t)(nk * s.dv) * sizeof(float));
    memset(c.z, 0, (size_t)nk * sizeof(float));
    return c;
}

static void step_free(step_ctx *c)
{
    free((float *)c->q);
    free((float *)c->k);
    free((float *)c->v);
    free((float *)c->g);
    free(c->o);
    free(c->s);
    free(c->z);
}

/* Rates of a step case taking `sec` per call. */
static result step_result(const options *op, linattn_isa isa, linattn_gate gate, double sec)
{
    const shape s = op->stp;
    result r = new_result(op, kernel_names[K_STEP], linattn_isa_name(isa), gate, s);
    set_rates(op, &r, isa, (double)(s.B * s.H), sec);
    r.us_per_token = sec * 1e6;
    r.gbps = 2.0 * sizeof(float) * (double)state_floats(s) / sec * 1e-9;
    r.bound = core_bound(op, isa);
    r.pct_bound = 100 * r.gbps / r.bound;
    return r;
}

static result bench_step(const options *op, linattn_isa isa, linattn_gate gate)
{
    use_isa(isa);
    step_ctx c = step_alloc(op, gate);
    const double sec = time_call(run_step, &c, op->min_time);
    step_free(&c);
    return step_result(op, isa, gate, sec);
}

/* ---- call overhead -------------------------------------------------- */

typedef struct {
    linattn_config cfg;
    float q, k, v, o, s, z;
} tiny_ctx;

static void run_tiny(void *p)
{
    tiny_ctx *c = p;
    const linattn_status st = linattn_forward(&c->cfg, &c->q, &c->k, &c->v, NULL, &c->o, &c->s,
                                              &c->z);
    if (st != LINATTN_OK)
        die("tiny linattn_forward: %s", linattn_strerror(st));
}

static void run_rejected(void *p)
{
    tiny_ctx *c = p;
    const linattn_status st = linattn_forward(&c->cfg, NULL, &c->k, &c->v, NULL, &c->o, &c->s,
                                              &c->z);
    if (st != LINATTN_E_NULL)
        die("linattn_forward with q = NULL returned '%s'", linattn_strerror(st));
}

static void bench_overhead(const options *op, linattn_isa isa)
{
    use_isa(isa);
    tiny_ctx c = {.q = 0.5f, .k = 0.25f, .v = 1.0f};
    linattn_config_init(&c.cfg, 1, 1, 1, 1, 1);
    c.cfg.num_threads = 1;
    /* State passed and carried, as a decoder would: no workspace to allocate. */
    const double tiny = time_call(run_tiny, &c, op->min_time) * 1e9;
    const double rejected = time_call(run_rejected, &c, op->min_time) * 1e9;
    if (op->json) {
        printf("{\"kernel\":\"overhead\",\"case\":\"tiny_forward\",\"isa\":\"%s\","
               "\"B\":1,\"H\":1,\"T\":1,\"dk\":1,\"dv\":1,\"threads\":1,\"ns_per_call\":%.4g}\n",
               linattn_isa_name(isa), tiny);
        printf("{\"kernel\":\"overhead\",\"case\":\"rejected_null_q\",\"isa\":\"%s\","
               "\"ns_per_call\":%.4g}\n",
               linattn_isa_name(isa), rejected);
    } else {
        printf("overhead (%s): tiny forward (B=H=T=dk=dv=1, state given) %.0f ns/call; "
               "call rejected at argument checking (q = NULL) %.0f ns/call\n",
               linattn_isa_name(isa), tiny, rejected);
    }
}

/* ---- modes ---------------------------------------------------------- */

typedef struct {
    linattn_isa list[N_ISAS];
    int n;
} isa_list;

static int in_list(const isa_list *l, linattn_isa isa)
{
    for (int i = 0; i < l->n; i++)
        if (l->list[i] == isa)
            return 1;
    return 0;
}

static void print_peaks(const options *op, const isa_list *l, int with_scalar, int with_bound)
{
    isa_list all = *l;
    if (with_scalar && !in_list(&all, LINATTN_ISA_SCALAR))
        all.list[all.n++] = LINATTN_ISA_SCALAR;
    for (int i = 0; i < all.n; i++) {
        core_peak(op, all.list[i]);
        if (with_bound)
            core_bound(op, all.list[i]);
    }
    if (op->json)
        return;
    printf("peak, 1 core, this run:");
    for (int i = 0; i < all.n; i++)
        printf("  %s %.1f GFLOP/s (%s)", linattn_isa_name(all.list[i]),
               core_peak(op, all.list[i]), bench_peak_desc(all.list[i]));
    printf("\n");
    if (with_bound) {
        const double kib = (double)state_floats(op->stp) * sizeof(float) / 1024;
        printf("bound, 1 core, RMW s = s*a + b over %.4g %s (the step state):",
               kib >= 1024 ? kib / 1024 : kib, kib >= 1024 ? "MiB" : "KiB");
        for (int i = 0; i < all.n; i++)
            printf("  %s %.1f GB/s", linattn_isa_name(all.list[i]), core_bound(op, all.list[i]));
        printf("\n");
    }
    printf("\n");
}

static double max_abs(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = b ? fabs((double)a[i] - (double)b[i]) : fabs((double)a[i]);
        if (!(d <= m)) /* NaN wins */
            m = d;
    }
    return m;
}

static void run_main(const options *op, const isa_list *l)
{
    const linattn_isa ref = l->list[0];
    const unsigned forward_kernels =
        (1u << K_CHUNKED) | (1u << K_RECURRENT) | (1u << K_NONCAUSAL) | (1u << K_QUADRATIC);
    const int want = (op->kernels & forward_kernels) != 0;
    const int scalar_baseline =
        (op->kernels & (1u << K_CHUNKED)) && !in_list(l, LINATTN_ISA_SCALAR);
    const int quadratic = (op->kernels & (1u << K_QUADRATIC)) && (op->gates & 1u) &&
                          op->fwd.T <= MAX_QUADRATIC_T;
    const shape s = op->fwd;

    if (!op->json)
        printf("linattn %s benchmark: active ISA %s (reference for speedups), %d thread%s%s\n",
               linattn_version(), linattn_isa_name(ref), op->threads, op->threads > 1 ? "s" : "",
               op->quick ? ", --quick shapes" : "");
    print_peaks(op, l, scalar_baseline || quadratic, (op->kernels & (1u << K_STEP)) != 0);
    print_header(op);

    fwd_data d = {0};
    if (want)
        d = fwd_alloc(s);
    const int64_t nout = s.B * s.H * s.T * s.dv;
    double chunked_tps[N_GATES]; /* the reference ISA's, for the speedups */
    for (int g = 0; g < N_GATES; g++)
        chunked_tps[g] = NAN;
    result diffs[N_ISAS * N_GATES];
    int ndiffs = 0;

    for (int i = 0; i < l->n; i++) {
        const linattn_isa isa = l->list[i];
        for (int g = 0; g < N_GATES; g++) {
            if (!(op->gates & (1u << g)))
                continue;
            const linattn_gate gate = (linattn_gate)g;
            int have_chunked = 0;
            if (op->kernels & (1u << K_CHUNKED)) {
                result r = bench_forward(op, isa, gate, K_CHUNKED, s, &d, d.o[0]);
                if (isa == ref)
                    chunked_tps[g] = r.tokens_per_s;
                r.speedup = chunked_tps[g] / r.tokens_per_s;
                print_result(op, &r);
                have_chunked = 1;
            }
            if (op->kernels & (1u << K_RECURRENT)) {
                result r = bench_forward(op, isa, gate, K_RECURRENT, s, &d, d.o[1]);
                r.speedup = chunked_tps[g] / r.tokens_per_s;
                if (have_chunked) {
                    r.maxdiff = max_abs(d.o[0], d.o[1], nout);
                    r.maxref = max_abs(d.o[0], NULL, nout);
                    diffs[ndiffs++] = r;
                }
                print_result(op, &r);
            }
            if ((op->kernels & (1u << K_NONCAUSAL)) && gate == LINATTN_GATE_NONE) {
                const result r = bench_forward(op, isa, gate, K_NONCAUSAL, s, &d, d.o[1]);
                print_result(op, &r);
            }
            if (op->kernels & (1u << K_STEP)) {
                const result r = bench_step(op, isa, gate);
                print_result(op, &r);
            }
        }
    }
    for (int g = 0; scalar_baseline && g < N_GATES; g++) {
        if (!(op->gates & (1u << g)))
            continue;
        result r = bench_forward(op, LINATTN_ISA_SCALAR, (linattn_gate)g, K_CHUNKED, s, &d, d.o[1]);
        r.baseline = 1;
        r.speedup = chunked_tps[g] / r.tokens_per_s;
        print_result(op, &r);
    }
    double quad_diff = NAN, quad_ref = NAN;
    if (quadratic) {
        result r = bench_quadratic(op, s, &d, d.o[1]);
        r.speedup = chunked_tps[0] / r.tokens_per_s;
        /* The baseline is hand-written: check its head 0 against the
         * library's chunked kernel on the same inputs. */
        use_isa(ref);
        const shape one = {1, 1, s.T, s.dk, s.dv};
        fwd_ctx c = {make_config(op, one, LINATTN_GATE_NONE), d.q, d.k, d.v, d.g, d.o[0]};
        c.cfg.algo = LINATTN_ALGO_CHUNKED;
        run_forward(&c);
        quad_diff = r.maxdiff = max_abs(d.o[0], d.o[1], s.T * s.dv);
        quad_ref = max_abs(d.o[0], NULL, s.T * s.dv);
        print_result(op, &r);
    }
    if (want)
        fwd_free(&d);

    if (!op->json) {
        printf("\n");
        for (int i = 0; i < ndiffs; i++)
            printf("max |chunked - recurrent| = %.3g (%s, gate %s; max |o| = %.3g)\n",
                   diffs[i].maxdiff, diffs[i].isa, gate_names[diffs[i].gate], diffs[i].maxref);
        if (!isnan(quad_diff))
            printf("max |chunked - quadratic| = %.3g (%s, head 0; max |o| = %.3g)\n", quad_diff,
                   linattn_isa_name(ref), quad_ref);
        if (op->kernels & (1u << K_CHUNKED))
            printf("speedup = forward_chunked tokens/s on %s / the row's tokens/s "
                   "(same gate and shape)\n",
                   linattn_isa_name(ref));
        if ((op->kernels & (1u << K_QUADRATIC)) && !quadratic && (op->gates & 1u))
            printf("quadratic baseline skipped: T > %d\n", MAX_QUADRATIC_T);
    }
    use_isa(ref);
    bench_overhead(op, ref);
    use_isa(ref);
}

/* --decode N: N consecutive steps over one state, each timed. */
static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_decode(const options *op, const isa_list *l)
{
    const int64_t n = op->decode;
    double *lat = malloc((size_t)n * sizeof *lat);
    if (lat == NULL)
        die("out of memory");
    if (!op->json)
        printf("linattn %s decode: %lld tokens, B=%lld H=%lld dk=%lld dv=%lld, %d thread%s\n",
               linattn_version(), (long long)n, (long long)op->stp.B, (long long)op->stp.H,
               (long long)op->stp.dk, (long long)op->stp.dv, op->threads,
               op->threads > 1 ? "s" : "");
    print_peaks(op, l, 0, 1);
    if (!op->json)
        printf("%-6s %-7s %10s %9s %9s %9s %10s %7s %6s\n", "isa", "gate", "us/token", "p50",
               "p99", "max", "tokens/s", "GB/s", "%bound");
    for (int i = 0; i < l->n; i++) {
        const linattn_isa isa = l->list[i];
        for (int g = 0; g < N_GATES; g++) {
            if (!(op->gates & (1u << g)))
                continue;
            use_isa(isa);
            step_ctx c = step_alloc(op, (linattn_gate)g);
            for (int w = 0; w < 8; w++) /* warm caches and the state */
                run_step(&c);
            double total = 0;
            for (int64_t t = 0; t < n; t++) {
                const double t0 = now();
                run_step(&c);
                lat[t] = now() - t0;
                total += lat[t];
            }
            step_free(&c);
            qsort(lat, (size_t)n, sizeof *lat, cmp_double);
            const result r = step_result(op, isa, (linattn_gate)g, total / (double)n);
            const double p50 = lat[n / 2] * 1e6, p99 = lat[(n * 99) / 100] * 1e6,
                         mx = lat[n - 1] * 1e6;
            if (op->json) {
                printf("{\"kernel\":\"step\",\"mode\":\"decode\",\"tokens\":%lld,\"isa\":\"%s\","
                       "\"gate\":\"%s\",\"B\":%lld,\"H\":%lld,\"T\":1,\"dk\":%lld,\"dv\":%lld,"
                       "\"threads\":%d",
                       (long long)n, r.isa, gate_names[g], (long long)r.sh.B,
                       (long long)r.sh.H, (long long)r.sh.dk, (long long)r.sh.dv, r.threads);
                json_num("tokens_per_s", r.tokens_per_s);
                json_num("gflops", r.gflops);
                json_num("peak_gflops", r.peak);
                json_num("pct_peak", r.pct_peak);
                json_num("gbps", r.gbps);
                json_num("bound_gbps", r.bound);
                json_num("pct_bound", r.pct_bound);
                json_num("us_per_token", r.us_per_token);
                json_num("us_p50", p50);
                json_num("us_p99", p99);
                json_num("us_max", mx);
                printf("}\n");
            } else {
                char tok[32];
                printf("%-6s %-7s %10.2f %9.2f %9.2f %9.2f %10s %7.1f %5.0f%%\n", r.isa,
                       gate_names[g], r.us_per_token, p50, p99, mx,
                       si(tok, sizeof tok, r.tokens_per_s), r.gbps, r.pct_bound);
            }
        }
    }
    free(lat);
}

/* --sweep FILE.csv: tokens/s against T for the chunked and recurrent
 * kernels of every listed ISA and the quadratic baseline, dk = dv in
 * {64, 128} (with --quick: small T and d). B and H come from --shape, else
 * B = H = 1, so the long sequences stay affordable. */
static void run_sweep(const options *op, const isa_list *l)
{
    static const int64_t full_t[] = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    static const int64_t quick_t[] = {64, 128, 256};
    static const int64_t full_d[] = {64, 128}, quick_d[] = {16, 32};
    const int64_t *ts = op->quick ? quick_t : full_t, *ds = op->quick ? quick_d : full_d;
    const int nt = op->quick ? 3 : 9, nd = 2;

    FILE *f = fopen(op->sweep, "w");
    if (f == NULL)
        die("cannot write %s: %s", op->sweep, strerror(errno));
    fprintf(f, "kernel,isa,gate,B,H,T,dk,dv,threads,seconds,tokens_per_s,gflops,peak_gflops,"
               "pct_peak\n");
    if (!op->json)
        printf("linattn %s sweep -> %s\n", linattn_version(), op->sweep);
    print_peaks(op, l, (op->gates & 1u) != 0, 0);
    print_header(op);

    for (int di = 0; di < nd; di++) {
        shape s = {op->shape_given ? op->fwd.B : 1, op->shape_given ? op->fwd.H : 1,
                   ts[nt - 1], ds[di], ds[di]};
        fwd_data d = fwd_alloc(s);
        for (int ti = 0; ti < nt; ti++) {
            s.T = ts[ti];
            result rows[N_ISAS * N_GATES * 2 + 1];
            int nr = 0;
            for (int i = 0; i < l->n; i++)
                for (int g = 0; g < N_GATES; g++) {
                    if (!(op->gates & (1u << g)))
                        continue;
                    rows[nr++] = bench_forward(op, l->list[i], (linattn_gate)g, K_CHUNKED, s, &d,
                                               d.o[0]);
                    rows[nr++] = bench_forward(op, l->list[i], (linattn_gate)g, K_RECURRENT, s,
                                               &d, d.o[1]);
                }
            if ((op->gates & 1u) && s.T <= MAX_QUADRATIC_T)
                rows[nr++] = bench_quadratic(op, s, &d, d.o[1]);
            for (int r = 0; r < nr; r++) {
                print_result(op, &rows[r]);
                fprintf(f, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%d,%.6g,%.6g,%.6g,%.6g,%.6g\n",
                        rows[r].kernel, rows[r].isa, gate_names[rows[r].gate],
                        (long long)s.B, (long long)s.H, (long long)s.T, (long long)s.dk,
                        (long long)s.dv, rows[r].threads, rows[r].sec, rows[r].tokens_per_s,
                        rows[r].gflops, rows[r].peak, rows[r].pct_peak);
            }
            fflush(f);
        }
        fwd_free(&d);
    }
    if (fclose(f) != 0)
        die("cannot write %s: %s", op->sweep, strerror(errno));
}

/* ---- command line --------------------------------------------------- */

static void usage(void)
{
    puts("usage: linattn-bench [options]\n"
         "\n"
         "Without options: the active ISA (auto-dispatch, or LINATTN_ISA), shape\n"
         "B=1 H=8 T=4096 dk=dv=64, gate none, phi elu1, normalize, 1 thread:\n"
         "forward_chunked, forward_recurrent, noncausal, step (B=1 H=32 dk=dv=128),\n"
         "and the baselines (scalar table, quadratic reference) with the chunked\n"
         "speedup over each, max |chunked - recurrent|, and the call overhead.\n"
         "\n"
         "  --json              one JSON object per line instead of the table\n"
         "  --isa NAME|all      scalar, avx2, avx512, neon, auto, or all available\n"
         "  --threads N         num_threads of the calls (default 1)\n"
         "  --shape B,H,T,dk,dv forward shape; step uses its B,H,dk,dv\n"
         "  --kernel NAME|all   forward_chunked (chunked), forward_recurrent\n"
         "                      (recurrent), noncausal, step, quadratic\n"
         "  --gate NAME|all     none, head, token, channel (default none)\n"
         "  --chunk N           chunk size of the chunked kernel (0 = library's)\n"
         "  --quick             tiny shapes and short timings (smoke test)\n"
         "  --sweep FILE.csv    tokens/s versus T (256..65536), dk=dv 64 and 128,\n"
         "                      chunked, recurrent and quadratic (T <= 8192), every\n"
         "                      ISA unless --isa; B=H=1 unless --shape\n"
         "  --decode N          decode latency: N steps, microseconds per token\n"
         "  --help              this text\n"
         "\n"
         "Exit status: 0 ok, 1 a run-time failure, 2 a bad command line or an ISA\n"
         "that cannot run here.");
}

static int64_t parse_int(const char *opt, const char *s, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi)
        usage_error("%s: '%s' is not an integer in [%lld, %lld]", opt, s, (long long)lo,
                    (long long)hi);
    return x;
}

static shape parse_shape(const char *s)
{
    int64_t v[5];
    const char *p = s;
    for (int i = 0; i < 5; i++) {
        char item[32];
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || (i < 4) != (p[len] == ','))
            usage_error("--shape: '%s' is not B,H,T,dk,dv", s);
        memcpy(item, p, len);
        item[len] = '\0';
        v[i] = parse_int("--shape", item, 1, 1 << 24);
        p += len + 1;
    }
    return (shape){v[0], v[1], v[2], v[3], v[4]};
}

static linattn_isa parse_isa(const char *s)
{
    for (int i = LINATTN_ISA_AUTO; i < N_ISAS; i++)
        if (strcmp(s, linattn_isa_name((linattn_isa)i)) == 0)
            return (linattn_isa)i;
    usage_error("--isa: unknown ISA '%s' (scalar, avx2, avx512, neon, auto, all)", s);
    return LINATTN_ISA_AUTO;
}

static unsigned parse_kernel(const char *s)
{
    if (strcmp(s, "all") == 0)
        return (1u << K_COUNT) - 1;
    if (strcmp(s, "chunked") == 0)
        return 1u << K_CHUNKED;
    if (strcmp(s, "recurrent") == 0)
        return 1u << K_RECURRENT;
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(s, kernel_names[k]) == 0)
            return 1u << k;
    usage_error("--kernel: unknown kernel '%s'", s);
    return 0;
}

static unsigned parse_gate(const char *s)
{
    if (strcmp(s, "all") == 0)
        return (1u << N_GATES) - 1;
    for (int g = 0; g < N_GATES; g++)
        if (strcmp(s, gate_names[g]) == 0)
            return 1u << g;
    usage_error("--gate: unknown gate '%s' (none, head, token, channel, all)", s);
    return 0;
}

static options parse_args(int argc, char **argv)
{
    options op = {0};
    op.threads = 1;
    op.fwd = (shape){1, 8, 4096, 64, 64};
    op.stp = (shape){1, 32, 1, 128, 128};
    op.kernels = (1u << K_COUNT) - 1;
    op.gates = 1u << LINATTN_GATE_NONE;
    op.min_time = 0.2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* Options with a value take it as the next argument or after '='. */
        static const char *const valued[] = {"--isa",   "--threads", "--shape", "--kernel",
                                             "--gate",  "--chunk",   "--sweep", "--decode"};
        const char *val = NULL;
        char name[16] = "";
        for (size_t j = 0; j < sizeof valued / sizeof *valued; j++) {
            const size_t n = strlen(valued[j]);
            if (strncmp(a, valued[j], n) == 0 && (a[n] == '\0' || a[n] == '=')) {
                strcpy(name, valued[j]);
                if (a[n] == '=')
                    val = a + n + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
                else
                    usage_error("%s needs a value", name);
            }
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            exit(0);
        } else if (strcmp(a, "--json") == 0) {
            op.json = 1;
        } else if (strcmp(a, "--quick") == 0) {
            op.quick = 1;
        } else if (strcmp(name, "--isa") == 0) {
            op.isa_given = 1;
            op.isa_all = strcmp(val, "all") == 0;
            if (!op.isa_all)
                op.isa = parse_isa(val);
        } else if (strcmp(name, "--threads") == 0) {
            op.threads = (int)parse_int(name, val, 1, 1024);
        } else if (strcmp(name, "--shape") == 0) {
            op.shape_given = 1;
            op.fwd = parse_shape(val);
        } else if (strcmp(name, "--kernel") == 0) {
            op.kernels = parse_kernel(val);
        } else if (strcmp(name, "--gate") == 0) {
            op.gates = parse_gate(val);
        } else if (strcmp(name, "--chunk") == 0) {
            op.chunk = parse_int(name, val, 0, 1 << 24);
        } else if (strcmp(name, "--sweep") == 0) {
            op.sweep = val;
        } else if (strcmp(name, "--decode") == 0) {
            op.decode = parse_int(name, val, 1, 100000000);
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (op.quick) {
        op.min_time = 0.01;
        if (!op.shape_given)
            op.fwd = (shape){1, 2, 256, 16, 16};
    }
    if (op.shape_given || op.quick)
        op.stp = (shape){op.fwd.B, op.fwd.H, 1, op.fwd.dk, op.fwd.dv};
    if (op.quick && !op.shape_given)
        op.stp.H = 4;
    return op;
}

/* The ISAs to run, the reference (the active one) first. */
static isa_list resolve_isas(const options *op)
{
    isa_list l = {{LINATTN_ISA_AUTO}, 0};
    if (op->isa_given && !op->isa_all) {
        linattn_isa isa = op->isa;
        if (isa != LINATTN_ISA_AUTO && !linattn_isa_available(isa)) {
            fprintf(stderr, "linattn-bench: ISA '%s' is not available on this CPU/build\n",
                    linattn_isa_name(isa));
            exit(2);
        }
        use_isa(isa);
        l.list[l.n++] = linattn_get_isa();
        return l;
    }
    const linattn_isa active = linattn_get_isa();
    l.list[l.n++] = active;
    if (op->isa_all || (op->sweep && !op->isa_given))
        for (int i = LINATTN_ISA_SCALAR; i < N_ISAS; i++)
            if (i != (int)active && linattn_isa_available((linattn_isa)i))
                l.list[l.n++] = (linattn_isa)i;
    return l;
}

int main(int argc, char **argv)
{
    const options op = parse_args(argc, argv);
    if (!op.isa_given) {
        /* LINATTN_ISA may name a table that cannot run: then every compute
         * call fails, and switching tables here would hide that. */
        linattn_config cfg;
        linattn_config_init(&cfg, 1, 1, 1, 1, 1);
        float q = 0, k = 0, v = 0, o;
        const linattn_status st = linattn_forward(&cfg, &q, &k, &v, NULL, &o, NULL, NULL);
        if (st == LINATTN_E_ISA) {
            const char *env = getenv("LINATTN_ISA");
            fprintf(stderr, "linattn-bench: LINATTN_ISA=%s cannot run here: %s\n",
                    env ? env : "", linattn_strerror(st));
            exit(2);
        }
    }
    const isa_list l = resolve_isas(&op);
    const double t0 = now();
    if (op.sweep)
        run_sweep(&op, &l);
    else if (op.decode)
        run_decode(&op, &l);
    else
        run_main(&op, &l);
    if (!op.json)
        printf("total %.1f s\n", now() - t0);
    return 0;
}
