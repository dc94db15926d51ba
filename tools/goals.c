/* --goals: the input stage's goals, each a time over the time of its twin
 * without the feature, both timed alternately in this run:
 *
 *   bf16_prefill  delta forward_chunked, q, k, v, beta and o in bfloat16,
 *                 over the same call in float32, on every ISA listed
 *                 (goal <= 1.05: converting is cheap next to the chunks);
 *   fused_act     the gate (-exp(A_log) softplus(a + dt_bias)) and beta
 *                 (sigmoid) computed in the call, over g and beta given
 *                 precomputed (the same values, so that both calls run
 *                 the kernels on the same decays), q/k L2 norm in both,
 *                 gates token (Gated DeltaNet) and channel (KDA)
 *                 (goal <= 1.05);
 *   bf16_state    a batched decode step (linattn_run DELTA_STEP) whose
 *                 float32 state does not fit in L2 (B = 8, H = 32,
 *                 dk = dv = 128: 16 MiB), bfloat16 state over float32
 *                 (goal <= 0.6: half the bytes to move); both steps also
 *                 as a fraction of one bound: state bytes read and written
 *                 over the bandwidth of an RMW pass over 16 MiB.
 *
 * Repeats alternate which twin runs first; a row gives the median ratio
 * and its range, so a noisy machine shows as a wide range rather than as
 * a wrong number. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define BIT(x) (1u << (x))

typedef struct {
    bench_case c;
    bench_kernel k;
    linattn_config cfg;
    const bench_data *d;
} goal_call;

static void run_goal(void *p)
{
    const goal_call *x = p;
    bench_call(&x->c, x->k, &x->cfg, x->d, x->d->o[0]);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { MAX_REPEATS = 15 };

typedef struct {
    double sec, sec_ref, ratio, lo, hi;
    int repeats;
} goal_timing;

/* x over ref: `repeats` pairs, the first of each pair alternating. */
static goal_timing time_pair(const bench_options *op, goal_call *ref, goal_call *x)
{
    const int n = op->quick ? 3 : 7;
    const double mt = op->min_time / 4; /* a prefill call: one call per sample */
    double tr[MAX_REPEATS], tx[MAX_REPEATS], ratio[MAX_REPEATS];
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) {
            tr[i] = bench_time_call(run_goal, ref, mt);
            tx[i] = bench_time_call(run_goal, x, mt);
        } else {
            tx[i] = bench_time_call(run_goal, x, mt);
            tr[i] = bench_time_call(run_goal, ref, mt);
        }
        ratio[i] = tx[i] / tr[i];
    }
    goal_timing t = {.repeats = n};
    t.ratio = median(ratio, n); /* sorts ratio */
    t.lo = ratio[0];
    t.hi = ratio[n - 1];
    t.sec = median(tx, n);
    t.sec_ref = median(tr, n);
    return t;
}

static void print_goal(const bench_options *op, bench_result *r, const goal_timing *t,
                       const char *what, double goal)
{
    r->kernel = "goal";
    r->what = what;
    r->sec = t->sec;
    r->sec_ref = t->sec_ref;
    r->ratio = t->ratio;
    r->ratio_min = t->lo;
    r->ratio_max = t->hi;
    r->repeats = t->repeats;
    r->goal = goal;
    if (op->json) {
        bench_json(r);
    } else {
        printf("%-13s %-6s %-8s %3d %-4s %-4s %-3s %11.3f %11.3f %7.3f  %5.3f-%-5.3f %6.2f  %s\n",
               what, r->isa, bench_gate_names[r->gate], r->threads, r->dtype,
               r->state ? r->state : "-", r->act, t->sec_ref * 1e3, t->sec * 1e3, t->ratio, t->lo,
               t->hi, goal, t->ratio <= goal ? "met" : "MISSED");
    }
    fflush(stdout);
}

/* The options of one twin: the caller's, with these types and activations. */
static bench_options variant(const bench_options *op, linattn_dtype dt, linattn_dtype state,
                             int act)
{
    bench_options v = *op;
    v.dtype = dt;
    v.state = state;
    v.act = act;
    return v;
}

static goal_call make_call(const bench_options *v, bench_gate gate, bench_kernel k, bench_shape s,
                           const bench_data *d)
{
    goal_call x = {.c = {FAM_DELTA, gate, LINATTN_PHI_IDENTITY, 0, 1, BIT(k)}, .k = k, .d = d};
    x.cfg = bench_config(v, &x.c, k, s);
    return x;
}

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* fused_act's reference twin: d with g and beta replaced by what the call
 * with activations (cfg, gate act SOFTPLUS, beta act SIGMOID) computes
 * from d's raw values, here in double. The twins then run the kernels on
 * the same decays and betas, and the ratio is the activations' cost alone
 * (raw values read as decays would be weaker ones: a different kernel
 * time). The values lie in (-3, 0): no reset clamp to apply. */
static bench_data precomputed_acts(const bench_data *d, const linattn_config *cfg)
{
    const bench_shape s = d->sh;
    const int channel = cfg->gate == LINATTN_GATE_CHANNEL;
    const int64_t gd = channel ? s.dk : 1, ng = s.B * s.H * s.T * s.dk, nb = s.B * s.H * s.T;
    bench_data r = *d;
    r.g = bench_alloc(ng);
    r.beta = bench_alloc(nb);
    memcpy(r.g, d->g, (size_t)ng * sizeof(float));
    memcpy(r.beta, d->beta, (size_t)nb * sizeof(float));
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++)
            for (int64_t t = 0; t < s.T; t++) {
                for (int64_t c = 0; c < gd; c++) {
                    const int64_t i = b * cfg->g.batch + h * cfg->g.head + t * cfg->g.token + c;
                    const double x = (double)(d->g[i] + d->dt_bias[channel ? h * s.dk + c : h]);
                    r.g[i] = (float)(-exp((double)d->A_log[h]) * softplus(x));
                }
                const int64_t j = b * cfg->beta.batch + h * cfg->beta.head + t * cfg->beta.token;
                r.beta[j] = (float)(1.0 / (1.0 + exp(-(double)d->beta[j])));
            }
    return r;
}

/* The forward goals on isa: bf16_prefill, fused_act (token, channel). */
static void forward_goals(const bench_options *op, linattn_isa isa, bench_shape s)
{
    const bench_options f32 = variant(op, LINATTN_F32, LINATTN_F32, 0);
    const bench_options bf16 = variant(op, LINATTN_BF16, LINATTN_F32, 0);
    const bench_options act = variant(op, LINATTN_F32, LINATTN_F32, 1);
    bench_data d = bench_data_alloc(&bf16, s, 0); /* float32 and bfloat16 inputs */
    bench_use_isa(isa);

    goal_call ref = make_call(&f32, G_TOKEN, K_CHUNKED, s, &d);
    goal_call x = make_call(&bf16, G_TOKEN, K_CHUNKED, s, &d);
    goal_timing t = time_pair(op, &ref, &x);
    bench_result r = bench_new_result(&bf16, &x.c, K_CHUNKED, isa, s);
    bench_set_rates(&bf16, &r, isa, (double)(s.B * s.H * s.T), t.sec);
    print_goal(op, &r, &t, "bf16_prefill", 1.05);

    static const bench_gate gates[] = {G_TOKEN, G_CHANNEL};
    for (int i = 0; i < 2; i++) {
        x = make_call(&act, gates[i], K_CHUNKED, s, &d);
        bench_data pre = precomputed_acts(&d, &x.cfg);
        ref = make_call(&f32, gates[i], K_CHUNKED, s, &pre);
        t = time_pair(op, &ref, &x);
        free(pre.g);
        free(pre.beta);
        r = bench_new_result(&act, &x.c, K_CHUNKED, isa, s);
        bench_set_rates(&act, &r, isa, (double)(s.B * s.H * s.T), t.sec);
        print_goal(op, &r, &t, "fused_act", 1.05);
    }
    bench_data_free(&d);
}

/* bf16_state on isa: the two steps' rows against their bounds, then the
 * goal row. */
static void state_goal(const bench_options *op, linattn_isa isa, bench_shape s)
{
    const bench_options f32 = variant(op, LINATTN_F32, LINATTN_F32, 0);
    const bench_options bf16 = variant(op, LINATTN_F32, LINATTN_BF16, 0);
    bench_data d = bench_data_alloc(&bf16, s, 1); /* float32 and bfloat16 states */
    bench_use_isa(isa);
    goal_call ref = make_call(&f32, G_TOKEN, K_STEP, s, &d);
    goal_call x = make_call(&bf16, G_TOKEN, K_STEP, s, &d);
    const goal_timing t = time_pair(op, &ref, &x);
    bench_result rr = bench_new_result(&f32, &ref.c, K_STEP, isa, s);
    bench_set_step_rates(&f32, &rr, isa, t.sec_ref);
    bench_result rx = bench_new_result(&bf16, &x.c, K_STEP, isa, s);
    bench_set_step_rates(&bf16, &rx, isa, t.sec);
    /* One stream bandwidth for both: an RMW pass over the float32 state's
     * bytes. A pass over the bfloat16 state's (half the size) runs in a
     * faster cache level here (8 MiB: 2-3x the GB/s of 16 MiB), and would
     * hold the smaller state to a higher bound than the larger one. */
    rx.bound = rr.bound;
    rx.frac_bound = rx.gbps / rx.bound;
    for (int i = 0; i < 2; i++) {
        bench_result *r = i ? &rx : &rr;
        r->mode = "goal";
        if (op->json)
            bench_json(r);
        else
            printf("  step, state %-4s: %9.1f us, %6.1f GB/s of state (%.3g MiB read and "
                   "written), bound %6.1f GB/s (RMW over %.3g MiB), frac bound %.2f\n",
                   r->state, r->us_per_token, r->gbps,
                   (double)bench_state_bytes(i ? &bf16 : &f32, FAM_DELTA, s, 0) / (1 << 20),
                   r->bound,
                   (double)bench_state_bytes(&f32, FAM_DELTA, s, 0) / (1 << 20), r->frac_bound);
    }
    print_goal(op, &rx, &t, "bf16_state", 0.6);
    bench_data_free(&d);
}

void bench_run_goals(const bench_options *op, const linattn_isa *isas, int n)
{
    /* Qwen3-Next's layer on a 1024-token prompt (the scalar table takes
     * seconds a call at 4096), and the step at B = 8 */
    bench_shape fwd = bench_forward_shape(op, FAM_DELTA);
    bench_shape stp = bench_step_shape(op, FAM_DELTA);
    if (!op->shape_given && !op->quick)
        fwd.T = 1024;
    if (!op->shape_given)
        stp.B = 8;
    if (!op->json) {
        printf("\ngoals (delta family, %d thread%s): ratio = seconds / seconds of the reference "
               "(float32, g and beta precomputed), median of %d interleaved repeats and range\n"
               "forward B=%lld H=%lld (%lld q/k heads) T=%lld dk=%lld dv=%lld; step B=%lld "
               "H=%lld dk=%lld dv=%lld\n",
               op->threads, op->threads > 1 ? "s" : "", op->quick ? 3 : 7, (long long)fwd.B,
               (long long)fwd.H, (long long)(fwd.qk_heads ? fwd.qk_heads : fwd.H),
               (long long)fwd.T, (long long)fwd.dk, (long long)fwd.dv, (long long)stp.B,
               (long long)stp.H, (long long)stp.dk, (long long)stp.dv);
        printf("%-13s %-6s %-8s %3s %-4s %-4s %-3s %11s %11s %7s  %-11s %6s\n", "goal", "isa",
               "gate", "thr", "type", "stat", "act", "ref ms", "ms", "ratio", "range", "goal");
    }
    for (int i = 0; i < n; i++) {
        forward_goals(op, isas[i], fwd);
        state_goal(op, isas[i], stp);
    }
}
