/* linattn-bench: throughput of the linattn kernels through the public API,
 * against the FMA peak and the memory bound of this core measured in the
 * same run. Output: a readable table, or one JSON object per line (--json).
 * Run with --help for the options and what every column counts; bench.h
 * says which file holds what. This file holds the modes: the default table,
 * --decode and --sweep (--model is model.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_QUADRATIC_T 8192 /* beyond it the O(T^2) baseline takes minutes */
enum { MAX_CASES = 64 };     /* >= G_COUNT * PHI_COUNT * 2 */

#define BIT(x) (1u << (x))

/* The ISAs to run, the reference (the active one) first. */
typedef struct {
    linattn_isa *list;
    int n;
} isa_list;

static int in_list(const isa_list *l, linattn_isa isa)
{
    for (int i = 0; i < l->n; i++)
        if (l->list[i] == isa)
            return 1;
    return 0;
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

/* ---- one case, one kernel ------------------------------------------------ */

typedef struct {
    const bench_case *c;
    bench_kernel k;
    linattn_config cfg;
    const bench_data *d;
    float *o;
} call_ctx;

static void run_call(void *p)
{
    const call_ctx *x = p;
    bench_call(x->c, x->k, &x->cfg, x->d, x->o);
}

/* A forward kernel (chunked, recurrent, noncausal) of case c on isa over
 * shape s of d, output into o. */
static bench_result bench_forward(const bench_options *op, linattn_isa isa, const bench_case *c,
                                  bench_kernel k, bench_shape s, const bench_data *d, float *o)
{
    bench_use_isa(isa);
    call_ctx x = {c, k, bench_config(op, c, k, s), d, o};
    bench_result r = bench_new_result(op, c, k, isa, s);
    bench_set_rates(op, &r, isa, (double)(s.B * s.H * s.T),
                    bench_time_call(run_call, &x, op->min_time));
    return r;
}

/* A step of case c on isa, on a fresh zero state. */
static bench_result bench_step(const bench_options *op, linattn_isa isa, const bench_case *c,
                               bench_shape s)
{
    bench_use_isa(isa);
    bench_data d = bench_data_alloc(op, s, 1);
    call_ctx x = {c, K_STEP, bench_config(op, c, K_STEP, s), &d, d.o[0]};
    const double sec = bench_time_call(run_call, &x, op->min_time);
    bench_data_free(&d);
    bench_result r = bench_new_result(op, c, K_STEP, isa, s);
    bench_set_step_rates(op, &r, isa, sec);
    return r;
}

typedef struct {
    const bench_case *c;
    const bench_data *d;
    bench_shape sh;
    float *o, *work;
    int64_t head;
} quad_ctx;

/* One head per call, cycling through the B*H heads: the baseline's cost
 * per head does not depend on the head, and a whole T=4096 batch would
 * take seconds. */
static void run_quadratic(void *p)
{
    quad_ctx *x = p;
    const bench_shape s = x->sh;
    const int64_t i = x->head, tk = s.T * s.dk, tv = s.T * s.dv;
    bench_quadratic_head(s.T, s.dk, s.dv, x->c->phi, bench_scale(x->c, s), x->c->normalize,
                         1e-6f, x->d->q + i * tk, x->d->k + i * tk, x->d->v + i * tv,
                         x->o + i * tv, x->work);
    x->head = (x->head + 1) % (s.B * s.H);
}

static bench_result bench_quadratic(const bench_options *op, const bench_case *c, bench_shape s,
                                    const bench_data *d, float *o)
{
    quad_ctx x = {c, d, s, o, bench_alloc(s.T * s.dk + s.dk + s.T), 0};
    const double sec = bench_time_call(run_quadratic, &x, op->min_time);
    free(x.work);
    bench_result r = bench_new_result(op, c, K_QUADRATIC, LINATTN_ISA_SCALAR, s);
    r.baseline = 1;
    bench_set_rates(op, &r, LINATTN_ISA_SCALAR, (double)s.T, sec); /* per head */
    return r;
}

/* The hand-written baseline is checked on head 0 against the library's
 * chunked forward on isa with the same inputs (into o[0]; o holds it). */
static void check_quadratic(const bench_options *op, linattn_isa isa, const bench_case *c,
                            bench_shape s, const bench_data *d, bench_result *r)
{
    bench_use_isa(isa);
    const bench_shape one = {1, 1, s.T, s.dk, s.dv, 0};
    call_ctx x = {c, K_CHUNKED, bench_config(op, c, K_CHUNKED, one), d, d->o[0]};
    run_call(&x);
    r->maxdiff = max_abs(d->o[0], d->o[1], s.T * s.dv);
    r->maxref = max_abs(d->o[0], NULL, s.T * s.dv);
}

/* ---- call overhead --------------------------------------------------- */

/* A float per head of each buffer: the tiny call has one head, the team's
 * call one per thread (at most the library's own cap on a team). */
enum { BENCH_TEAM_MAX = 256 };

typedef struct {
    linattn_config cfg;
    float q[BENCH_TEAM_MAX], k[BENCH_TEAM_MAX], v[BENCH_TEAM_MAX], o[BENCH_TEAM_MAX];
    float s[BENCH_TEAM_MAX], z[BENCH_TEAM_MAX];
} tiny_ctx;

static void run_tiny(void *p)
{
    tiny_ctx *c = p;
    const linattn_status st = linattn_forward(&c->cfg, c->q, c->k, c->v, NULL, c->o, c->s, c->z);
    if (st != LINATTN_OK)
        bench_die("tiny linattn_forward on %d thread(s): %s", c->cfg.num_threads,
                  linattn_strerror(st));
}

static void run_rejected(void *p)
{
    tiny_ctx *c = p;
    const linattn_status st =
        linattn_forward(&c->cfg, NULL, c->k, c->v, NULL, c->o, c->s, c->z);
    if (st != LINATTN_E_NULL)
        bench_die("linattn_forward with q = NULL returned '%s'", linattn_strerror(st));
}

static void bench_overhead(const bench_options *op, linattn_isa isa)
{
    bench_use_isa(isa);
    tiny_ctx c = {.q = {0.5f}, .k = {0.25f}, .v = {1.0f}}; /* the other heads: zeros */
    linattn_config_init(&c.cfg, 1, 1, 1, 1, 1);
    c.cfg.num_threads = 1;
    /* State passed and carried, as a decoder would: no workspace to allocate. */
    const double tiny = bench_time_call(run_tiny, &c, op->min_time) * 1e9;
    const double rejected = bench_time_call(run_rejected, &c, op->min_time) * 1e9;
    const int team = op->threads < BENCH_TEAM_MAX ? op->threads : BENCH_TEAM_MAX;
    double teamed = 0.0;
    if (team > 1) { /* the same call with a head per thread */
        linattn_config_init(&c.cfg, 1, team, 1, 1, 1);
        c.cfg.num_threads = team;
        teamed = bench_time_call(run_tiny, &c, op->min_time) * 1e9;
    }
    if (op->json) {
        const bench_case dflt = {FAM_ADDITIVE, G_NONE, LINATTN_PHI_ELU1, 1, 0, 0};
        const bench_shape one = {1, 1, 1, 1, 1, 0};
        bench_result r = bench_new_result(op, &dflt, K_CHUNKED, isa, one);
        r.kernel = "overhead";
        r.threads = 1;
        r.chunk = -1;
        r.layout = NULL; /* a one-token call: no layout to speak of */
        r.what = "tiny_forward";
        r.ns_per_call = tiny;
        bench_json(&r);
        r.what = "rejected_null_q";
        r.ns_per_call = rejected;
        bench_json(&r);
        if (team > 1) {
            r.sh.H = r.sh.qk_heads = team;
            r.what = "tiny_forward_team";
            r.threads = team;
            r.ns_per_call = teamed;
            bench_json(&r);
        }
    } else {
        printf("overhead (%s): tiny forward (B=H=T=dk=dv=1, state given) %.0f ns/call; "
               "call rejected at argument checking (q = NULL) %.0f ns/call\n",
               linattn_isa_name(isa), tiny, rejected);
        if (team > 1)
            printf("overhead (%s): tiny forward on %d threads (H=%d, a head each) %.0f ns/call: "
                   "%.0f ns to start and join the team\n",
                   linattn_isa_name(isa), team, team, teamed, teamed - tiny);
    }
}

/* ---- the default run ------------------------------------------------- */

static int any_kernel(const bench_case *cs, int n, unsigned mask)
{
    for (int i = 0; i < n; i++)
        if (cs[i].kernels & mask)
            return 1;
    return 0;
}

/* Peaks of the listed ISAs (and scalar when a baseline runs), bounds of
 * every step state size the cases use. */
static void print_references(const bench_options *op, const isa_list *l, int with_scalar,
                             int step_cases)
{
    isa_list all = {malloc(((size_t)l->n + 1) * sizeof *all.list), l->n};
    if (all.list == NULL)
        bench_die("out of memory");
    memcpy(all.list, l->list, (size_t)l->n * sizeof *l->list);
    if (with_scalar && !in_list(l, LINATTN_ISA_SCALAR))
        all.list[all.n++] = LINATTN_ISA_SCALAR;
    bench_peaks_text(op, all.list, all.n);
    for (int f = 0; step_cases && f < FAM_COUNT; f++) {
        if (!(op->families & BIT(f)))
            continue;
        bench_case cs[MAX_CASES];
        const int n = bench_cases(op, (bench_family)f, 0, cs, MAX_CASES);
        int64_t done[2] = {-1, -1}; /* sizes printed: one per normaliser */
        for (int i = 0; i < n; i++) {
            if (!(cs[i].kernels & BIT(K_STEP)))
                continue;
            const int64_t fl =
                bench_state_bytes(op, (bench_family)f, bench_step_shape(op, (bench_family)f),
                                  cs[i].normalize) /
                (int64_t)sizeof(float);
            if (fl != done[0] && fl != done[1]) {
                bench_bound_text(op, l->list, l->n, fl);
                done[done[0] < 0 ? 0 : 1] = fl;
            }
        }
    }
    if (!op->json)
        printf("\n");
    free(all.list);
}

static void run_family(const bench_options *op, const isa_list *l, bench_family f)
{
    bench_case cs[MAX_CASES];
    const int n = bench_cases(op, f, 0, cs, MAX_CASES);
    if (n == 0)
        return;
    const linattn_isa ref = l->list[0];
    const bench_shape s = bench_forward_shape(op, f), st = bench_step_shape(op, f);
    const unsigned forward = BIT(K_CHUNKED) | BIT(K_RECURRENT) | BIT(K_NONCAUSAL) |
                             BIT(K_QUADRATIC);
    const int scalar_baseline = !in_list(l, LINATTN_ISA_SCALAR);
    const int quadratic_fits = s.T <= MAX_QUADRATIC_T;
    bench_family_heading(op, f, s, st);
    bench_table_header(op);

    bench_data d = {0};
    if (any_kernel(cs, n, forward))
        d = bench_data_alloc(op, s, 0);
    const int64_t nout = s.B * s.H * s.T * s.dv;
    double chunked_tps[MAX_CASES]; /* the reference ISA's, for "x faster" */
    for (int i = 0; i < n; i++)
        chunked_tps[i] = NAN;
    bench_result *diffs = malloc((size_t)(l->n * n + n) * sizeof *diffs);
    if (diffs == NULL)
        bench_die("out of memory");
    int ndiffs = 0;

    for (int i = 0; i < l->n; i++) {
        const linattn_isa isa = l->list[i];
        for (int j = 0; j < n; j++) {
            const bench_case *c = &cs[j];
            if (c->kernels & BIT(K_CHUNKED)) {
                bench_result r = bench_forward(op, isa, c, K_CHUNKED, s, &d, d.o[0]);
                if (isa == ref)
                    chunked_tps[j] = r.tokens_per_s;
                r.speedup = r.tokens_per_s / chunked_tps[j];
                bench_print(op, &r);
            }
            if (c->kernels & BIT(K_RECURRENT)) {
                bench_result r = bench_forward(op, isa, c, K_RECURRENT, s, &d, d.o[1]);
                r.speedup = r.tokens_per_s / chunked_tps[j];
                if (c->kernels & BIT(K_CHUNKED)) {
                    const float *o0 = bench_output(&d, 0, nout), *o1 = bench_output(&d, 1, nout);
                    r.maxdiff = max_abs(o0, o1, nout);
                    r.maxref = max_abs(o0, NULL, nout);
                    diffs[ndiffs++] = r;
                }
                bench_print(op, &r);
            }
            if (c->kernels & BIT(K_NONCAUSAL)) {
                const bench_result r = bench_forward(op, isa, c, K_NONCAUSAL, s, &d, d.o[1]);
                bench_print(op, &r);
            }
            if (c->kernels & BIT(K_STEP)) {
                const bench_result r = bench_step(op, isa, c, st);
                bench_print(op, &r);
            }
        }
    }
    for (int j = 0; scalar_baseline && j < n; j++) {
        if (!(cs[j].kernels & BIT(K_CHUNKED)))
            continue;
        bench_result r = bench_forward(op, LINATTN_ISA_SCALAR, &cs[j], K_CHUNKED, s, &d, d.o[1]);
        r.baseline = 1;
        r.speedup = r.tokens_per_s / chunked_tps[j];
        bench_print(op, &r);
    }
    bench_result quad[MAX_CASES];
    int nquad = 0;
    for (int j = 0; quadratic_fits && j < n; j++) {
        if (!(cs[j].kernels & BIT(K_QUADRATIC)))
            continue;
        bench_result r = bench_quadratic(op, &cs[j], s, &d, d.o[1]);
        r.speedup = r.tokens_per_s / chunked_tps[j];
        check_quadratic(op, ref, &cs[j], s, &d, &r);
        bench_print(op, &r);
        quad[nquad++] = r;
    }
    if (any_kernel(cs, n, forward))
        bench_data_free(&d);

    if (!op->json) {
        printf("\n");
        for (int i = 0; i < ndiffs; i++)
            printf("max |chunked - recurrent| = %.3g (%s, gate %s, phi %s, normalize %d; "
                   "max |o| = %.3g)\n",
                   diffs[i].maxdiff, diffs[i].isa, bench_gate_names[diffs[i].gate],
                   bench_phi_names[diffs[i].phi], diffs[i].normalize, diffs[i].maxref);
        for (int i = 0; i < nquad; i++)
            printf("max |chunked - quadratic| = %.3g (%s, head 0, phi %s, normalize %d; "
                   "max |o| = %.3g)\n",
                   quad[i].maxdiff, linattn_isa_name(ref), bench_phi_names[quad[i].phi],
                   quad[i].normalize, quad[i].maxref);
        if (any_kernel(cs, n, BIT(K_QUADRATIC)) && !quadratic_fits)
            printf("quadratic baseline skipped: T > %d\n", MAX_QUADRATIC_T);
    }
    free(diffs);
}

static void run_main(const bench_options *op, const isa_list *l)
{
    const linattn_isa ref = l->list[0];
    int baselines = 0, steps = 0;
    for (int f = 0; f < FAM_COUNT; f++) {
        bench_case cs[MAX_CASES];
        const int n = (op->families & BIT(f)) ? bench_cases(op, (bench_family)f, 0, cs, MAX_CASES)
                                              : 0;
        baselines |= any_kernel(cs, n, BIT(K_CHUNKED) | BIT(K_QUADRATIC));
        steps |= any_kernel(cs, n, BIT(K_STEP));
    }
    if (!op->json)
        printf("linattn %s benchmark: active ISA %s (reference for \"x faster\"), tuning %s, "
               "%d thread%s%s; dtype %s, state %s, act %s\n",
               linattn_version(), linattn_isa_name(ref), linattn_tuning_name(), op->threads,
               op->threads > 1 ? "s" : "",
               op->quick ? ", --quick shapes" : "", bench_dtype_names[op->dtype],
               bench_dtype_names[op->state], op->act ? "on" : "off");
    print_references(op, l, baselines, steps);
    bench_table_legend(op);
    for (int f = 0; f < FAM_COUNT; f++)
        if (op->families & BIT(f))
            run_family(op, l, (bench_family)f);
    if (op->goals)
        bench_run_goals(op, l->list, l->n);
    bench_overhead(op, ref);
    bench_use_isa(ref);
}

/* ---- --decode N: N consecutive steps over one state, each timed ------------ */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_decode(const bench_options *op, const isa_list *l)
{
    const int64_t n = op->decode;
    double *lat = malloc((size_t)n * sizeof *lat);
    if (lat == NULL)
        bench_die("out of memory");
    bench_options sop = *op;
    sop.kernels = BIT(K_STEP);
    if (!op->json)
        printf("linattn %s decode: %lld tokens, %d thread%s, tuning %s\n", linattn_version(),
               (long long)n, op->threads, op->threads > 1 ? "s" : "", linattn_tuning_name());
    print_references(&sop, l, 0, 1);
    for (int f = 0; f < FAM_COUNT; f++) {
        bench_case cs[MAX_CASES];
        const int nc = (op->families & BIT(f)) ? bench_cases(&sop, (bench_family)f, 0, cs,
                                                             MAX_CASES)
                                               : 0;
        if (nc == 0)
            continue;
        const bench_shape st = bench_step_shape(op, (bench_family)f);
        bench_family_heading(op, (bench_family)f, bench_forward_shape(op, (bench_family)f), st);
        if (!op->json)
            bench_decode_header();
        for (int i = 0; i < l->n; i++) {
            const linattn_isa isa = l->list[i];
            for (int j = 0; j < nc; j++) {
                bench_use_isa(isa);
                bench_data d = bench_data_alloc(op, st, 1);
                call_ctx x = {&cs[j], K_STEP, bench_config(op, &cs[j], K_STEP, st), &d, d.o[0]};
                for (int w = 0; w < 8; w++) /* warm caches and the state */
                    run_call(&x);
                double total = 0;
                for (int64_t t = 0; t < n; t++) {
                    const double t0 = bench_now();
                    run_call(&x);
                    lat[t] = bench_now() - t0;
                    total += lat[t];
                }
                bench_data_free(&d);
                qsort(lat, (size_t)n, sizeof *lat, cmp_double);
                bench_result r = bench_new_result(op, &cs[j], K_STEP, isa, st);
                bench_set_step_rates(op, &r, isa, total / (double)n);
                r.mode = "decode";
                r.tokens = n;
                r.us_p50 = lat[n / 2] * 1e6;
                r.us_p99 = lat[(n * 99) / 100] * 1e6;
                r.us_max = lat[n - 1] * 1e6;
                if (op->json)
                    bench_json(&r);
                else
                    bench_decode_row(&r);
            }
        }
    }
    free(lat);
}

/* ---- --sweep FILE.csv ----------------------------------------------------- */

/* tokens/s against T for the chunked and recurrent kernels of every listed
 * ISA and the quadratic baseline, dk = dv in {64, 128} (with --quick: small
 * T and d). B and H come from --shape, else B = H = 1, so the long
 * sequences stay affordable. */
static void run_sweep(const bench_options *op, const isa_list *l)
{
    static const int64_t full_t[] = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    static const int64_t quick_t[] = {64, 128, 256};
    static const int64_t full_d[] = {64, 128}, quick_d[] = {16, 32};
    const int64_t *ts = op->quick ? quick_t : full_t, *ds = op->quick ? quick_d : full_d;
    const int nt = op->quick ? 3 : 9, nd = 2;

    FILE *file = fopen(op->sweep, "w");
    if (file == NULL)
        bench_die("cannot write %s: %s", op->sweep, strerror(errno));
    bench_csv_header(file);
    if (!op->json)
        printf("linattn %s sweep -> %s\n", linattn_version(), op->sweep);
    print_references(op, l, 1, 0);
    bench_table_legend(op);
    bench_table_header(op);

    for (int f = 0; f < FAM_COUNT; f++) {
        bench_case cs[MAX_CASES];
        const int nc =
            (op->families & BIT(f)) ? bench_cases(op, (bench_family)f, 1, cs, MAX_CASES) : 0;
        for (int di = 0; di < nd && nc > 0; di++) {
            bench_shape s = bench_make_shape((bench_family)f, op->shape_given ? op->shape.B : 1,
                                             op->shape_given ? op->shape.H : 1, ts[nt - 1],
                                             ds[di], ds[di]);
            bench_data d = bench_data_alloc(op, s, 0);
            for (int ti = 0; ti < nt; ti++) {
                s.T = ts[ti];
                for (int i = 0; i < l->n; i++)
                    for (int j = 0; j < nc; j++)
                        for (int k = K_CHUNKED; k <= K_RECURRENT; k++) {
                            if (!(cs[j].kernels & BIT(k)))
                                continue;
                            const bench_result r = bench_forward(op, l->list[i], &cs[j],
                                                                 (bench_kernel)k, s, &d, d.o[0]);
                            bench_print(op, &r);
                            bench_csv_row(file, &r);
                        }
                for (int j = 0; j < nc && s.T <= MAX_QUADRATIC_T; j++) {
                    if (!(cs[j].kernels & BIT(K_QUADRATIC)))
                        continue;
                    const bench_result r = bench_quadratic(op, &cs[j], s, &d, d.o[1]);
                    bench_print(op, &r);
                    bench_csv_row(file, &r);
                }
                fflush(file);
            }
            bench_data_free(&d);
        }
    }
    if (fclose(file) != 0)
        bench_die("cannot write %s: %s", op->sweep, strerror(errno));
}

/* ---- main ------------------------------------------------------------------ */

static isa_list resolve_isas(const bench_options *op)
{
    const int end = bench_isa_end();
    isa_list l = {malloc((size_t)end * sizeof *l.list), 0};
    if (l.list == NULL)
        bench_die("out of memory");
    if (op->isa_given && !op->isa_all) {
        const linattn_isa isa = op->isa;
        if (isa != LINATTN_ISA_AUTO && !linattn_isa_available(isa)) {
            fprintf(stderr, "linattn-bench: ISA '%s' is not available on this CPU/build\n",
                    linattn_isa_name(isa));
            exit(2);
        }
        bench_use_isa(isa);
        l.list[l.n++] = linattn_get_isa();
        return l;
    }
    const linattn_isa active = linattn_get_isa();
    l.list[l.n++] = active;
    if (op->isa_all || (op->sweep && !op->isa_given))
        for (int i = LINATTN_ISA_SCALAR; i < end; i++)
            if (i != (int)active && linattn_isa_available((linattn_isa)i))
                l.list[l.n++] = (linattn_isa)i;
    return l;
}

int main(int argc, char **argv)
{
    const bench_options op = bench_parse_args(argc, argv);
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
    isa_list l = resolve_isas(&op);
    const double t0 = bench_now();
    if (op.sweep)
        run_sweep(&op, &l);
    else if (op.decode)
        run_decode(&op, &l);
    else if (op.model)
        for (int i = 0; i < l.n; i++)
            bench_run_model(&op, l.list[i]);
    else
        run_main(&op, &l);
    if (!op.json)
        printf("total %.1f s\n", bench_now() - t0);
    free(l.list);
    return 0;
}
