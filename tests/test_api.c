/* The public API's contract where it does not depend on the kernel table,
 * run once against the shared library as a user links it:
 *   - every bad input returns its status, writes no output byte and names
 *     the field or value at fault in linattn_last_error() ("success" after
 *     a call that returns OK); the message is per thread;
 *   - fields a call ignores are really ignored (a step's seq_len and token
 *     strides, g strides without a gate, the token stride of a per-head
 *     gate), and a config from a 0.1 caller gets the defaults;
 *   - sizes that cannot be addressed or allocated are refused, not wrapped;
 *   - any num_threads is safe and gives the single-thread results. */
#define _DEFAULT_SOURCE
#include <check.h>
#include <stddef.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "linattn.h"

static enum fork_status fork_mode;

#define ck_assert_error_has(sub)                                                                  \
    ck_assert_msg(strstr(linattn_last_error(), (sub)) != NULL,                                    \
                  "linattn_last_error() = \"%s\" does not mention \"%s\"", linattn_last_error(), \
                  (sub))

#define ck_assert_success()                                                                       \
    ck_assert_msg(strcmp(linattn_last_error(), "success") == 0,                                   \
                  "after OK, linattn_last_error() = \"%s\"", linattn_last_error())

/* A copy of n floats, to compare with later. */
static float *snapshot(const float *x, size_t n)
{
    float *c = malloc((n ? n : 1) * sizeof(float));
    memcpy(c, x, n * sizeof(float));
    return c;
}

static int same_bytes(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ---- bad input: a status, a message naming the field, nothing written --- */

typedef struct {
    problem p;
    float *o_copy, *s_copy, *z_copy;
    size_t no, ns, nz;
} guarded_call;

enum { BB = 2, BH = 2, BT = 9, BDK = 5, BDV = 6 };

/* Floats of the fixture's g for a gate kind. */
static size_t gate_floats(linattn_gate gate)
{
    return gate == LINATTN_GATE_HEAD    ? BH
           : gate == LINATTN_GATE_TOKEN ? BB * BH * BT
                                        : BB * BH * BT * BDK;
}

/* The sizes of o, s and z of the problem made from sp, and copies of them
 * as they are now (check_untouched compares with these). */
static void snapshot_outputs(guarded_call *c, const spec *sp)
{
    c->no = (size_t)(sp->B * sp->H * sp->T * sp->dv);
    c->ns = (size_t)(sp->B * sp->H * sp->dk * sp->dv), c->nz = (size_t)(sp->B * sp->H * sp->dk);
    c->o_copy = snapshot(c->p.o, c->no);
    c->s_copy = snapshot(c->p.s, c->ns);
    c->z_copy = snapshot(c->p.z, c->nz);
}

static void bad_setup(guarded_call *c, linattn_gate gate)
{
    spec sp = spec_default(BB, BH, BT, BDK, BDV);
    sp.gate = gate;
    sp.with_state = 1;
    problem_make(&c->p, &sp);
    for (size_t i = 0; i < (size_t)(BB * BH * BT * BDV); i++)
        c->p.o[i] = 12345.0f;
    snapshot_outputs(c, &sp);
}

static void check_untouched(const guarded_call *c, const char *what)
{
    ck_assert_msg(same_bytes(c->o_copy, c->p.o, c->no), "%s: o written", what);
    ck_assert_msg(same_bytes(c->s_copy, c->p.s, c->ns), "%s: s written", what);
    ck_assert_msg(same_bytes(c->z_copy, c->p.z, c->nz), "%s: z written", what);
}

static void bad_teardown(guarded_call *c)
{
    free(c->o_copy);
    free(c->s_copy);
    free(c->z_copy);
    problem_free(&c->p);
}

/* A good call on the fixture's untouched config: OK and "success". */
static void expect_success_clears(guarded_call *c, int step)
{
    const linattn_config *cfg = &c->p.cfg;
    const linattn_status st =
        step ? linattn_step(cfg, c->p.q, c->p.k, c->p.v, c->p.g, c->p.o, c->p.s, c->p.z)
             : linattn_forward(cfg, c->p.q, c->p.k, c->p.v, c->p.g, c->p.o, c->p.s, c->p.z);
    ck_assert_int_eq(st, LINATTN_OK);
    ck_assert_success();
}

typedef void (*mutate_fn)(problem *p, linattn_config *cfg, const float **q, float **o,
                          float **s, float **z);

#define BAD_CASE(name, body)                                                                      \
    static void mutate_##name(problem *p, linattn_config *cfg, const float **q, float **o,       \
                              float **s, float **z)                                               \
    {                                                                                             \
        (void)p, (void)cfg, (void)q, (void)o, (void)s, (void)z;                                   \
        body;                                                                                     \
    }

/* The config as a 0.1 caller has it: up to and including the g strides. */
#define CONFIG_V1_SIZE offsetof(linattn_config, qk_heads)

BAD_CASE(null_cfg, {})
BAD_CASE(null_q, *q = NULL)
BAD_CASE(null_o, *o = NULL)
BAD_CASE(null_g, p->g = NULL)
BAD_CASE(s_without_z, *z = NULL)
BAD_CASE(z_without_s, *s = NULL)
BAD_CASE(zero_batch, cfg->batch = 0)
BAD_CASE(zero_heads, cfg->heads = 0)
BAD_CASE(zero_dk, cfg->dk = 0)
BAD_CASE(negative_dv, cfg->dv = -3)
BAD_CASE(zero_seq, cfg->seq_len = 0)
BAD_CASE(huge_dims, cfg->dk = INT64_MAX / 2; cfg->dv = 4)
BAD_CASE(huge_stride, cfg->q.batch = INT64_MAX / 2)
BAD_CASE(negative_stride, cfg->k.token = -1)
BAD_CASE(negative_g_stride, cfg->g.head = -1)
BAD_CASE(bad_phi, cfg->phi = (linattn_phi)7)
BAD_CASE(bad_gate, cfg->gate = (linattn_gate)9)
BAD_CASE(bad_algo, cfg->algo = (linattn_algo)-1)
BAD_CASE(bad_causal, cfg->causal = 2)
BAD_CASE(bad_normalize, cfg->normalize = -1)
BAD_CASE(bad_head_map, cfg->head_map = (linattn_head_map)5)
BAD_CASE(bad_qk_heads, cfg->qk_heads = 3) /* does not divide heads = 2 */
BAD_CASE(bad_l2norm, cfg->qk_l2norm = 2)
BAD_CASE(bad_z_compensated, cfg->z_compensated = 2)
BAD_CASE(negative_batch_stride, cfg->v.batch = -1)
BAD_CASE(negative_eps, cfg->eps = -1e-6f)
BAD_CASE(nan_eps, cfg->eps = NAN)
BAD_CASE(inf_scale, cfg->scale = INFINITY)
BAD_CASE(negative_chunk, cfg->chunk = -1)
BAD_CASE(negative_threads, cfg->num_threads = -1)
BAD_CASE(small_struct, cfg->struct_size = CONFIG_V1_SIZE - 1)
BAD_CASE(large_struct, cfg->struct_size = sizeof(linattn_config) + 8)
BAD_CASE(garbage_struct, cfg->struct_size = (size_t)0xdeadbeefcafe)
BAD_CASE(positive_g, p->g[9] = 0.5f) /* (b0, h1, t0): read by step too */
BAD_CASE(nan_g, p->g[9 * 5 + 2] = NAN) /* (b0, h1, t0, c2) */
BAD_CASE(minus_inf_g, p->g[1] = -INFINITY)
BAD_CASE(gated_noncausal, cfg->causal = 0)
BAD_CASE(o_overlaps_q, *o = (float *)*q + 3)
BAD_CASE(o_overlaps_itself, cfg->o.head = 3)
BAD_CASE(o_head_stride_zero, cfg->o.head = 0)
BAD_CASE(s_overlaps_v, *s = (float *)p->v)
BAD_CASE(z_overlaps_s, *z = *s + 4)
BAD_CASE(s_overlaps_o, *s = *o + 1)
BAD_CASE(z_overlaps_g, *z = p->g)

/* How linattn_step treats a case that linattn_forward rejects. */
typedef enum {
    STEP_SAME,   /* the same status and message */
    STEP_IGNORES /* step ignores the field: OK */
} step_rule;

typedef struct {
    const char *name;
    linattn_gate gate;
    linattn_status expected;
    mutate_fn mutate;
    const char *says, *also_says; /* substrings of linattn_last_error() */
    step_rule step;
    int null_cfg;
} bad_case;

#define ENTRY(name, gate, expected, says, also)                                                   \
    {#name, LINATTN_GATE_##gate, expected, mutate_##name, says, also, STEP_SAME, 0}
#define ENTRY_STEP_IGNORES(name, gate, expected, says, also)                                      \
    {#name, LINATTN_GATE_##gate, expected, mutate_##name, says, also, STEP_IGNORES, 0}

static const bad_case bad_cases[] = {
    {"null_cfg", LINATTN_GATE_NONE, LINATTN_E_NULL, mutate_null_cfg, "cfg is NULL", NULL,
     STEP_SAME, 1},
    ENTRY(null_q, NONE, LINATTN_E_NULL, "q is NULL", NULL),
    ENTRY(null_o, NONE, LINATTN_E_NULL, "o is NULL", NULL),
    ENTRY(null_g, TOKEN, LINATTN_E_NULL, "g (cfg->gate is not NONE) is NULL", NULL),
    ENTRY(s_without_z, NONE, LINATTN_E_NULL, "z is NULL but s is not", NULL),
    ENTRY(z_without_s, NONE, LINATTN_E_NULL, "s is NULL but z is not", NULL),
    ENTRY(zero_batch, NONE, LINATTN_E_SHAPE, "cfg->batch = 0", NULL),
    ENTRY(zero_heads, NONE, LINATTN_E_SHAPE, "cfg->heads = 0", NULL),
    ENTRY(zero_dk, NONE, LINATTN_E_SHAPE, "cfg->dk = 0", NULL),
    ENTRY(negative_dv, NONE, LINATTN_E_SHAPE, "cfg->dv = -3", NULL),
    ENTRY_STEP_IGNORES(zero_seq, NONE, LINATTN_E_SHAPE, "cfg->seq_len = 0", NULL),
    ENTRY(huge_dims, NONE, LINATTN_E_SHAPE, "state", "too large"),
    ENTRY(huge_stride, NONE, LINATTN_E_SHAPE, "q: its shape and strides", NULL),
    ENTRY_STEP_IGNORES(negative_stride, NONE, LINATTN_E_STRIDE, "cfg->k.token = -1", NULL),
    ENTRY(negative_g_stride, TOKEN, LINATTN_E_STRIDE, "cfg->g.head = -1", NULL),
    ENTRY(bad_phi, NONE, LINATTN_E_ARG, "cfg->phi = 7", NULL),
    ENTRY(bad_gate, NONE, LINATTN_E_ARG, "cfg->gate = 9", NULL),
    ENTRY(bad_algo, NONE, LINATTN_E_ARG, "cfg->algo = -1", NULL),
    ENTRY(bad_causal, NONE, LINATTN_E_ARG, "cfg->causal = 2", NULL),
    ENTRY(bad_normalize, NONE, LINATTN_E_ARG, "cfg->normalize = -1", NULL),
    ENTRY(bad_head_map, NONE, LINATTN_E_ARG, "cfg->head_map = 5", NULL),
    ENTRY(bad_qk_heads, NONE, LINATTN_E_ARG, "cfg->qk_heads = 3", NULL),
    ENTRY(bad_l2norm, NONE, LINATTN_E_ARG, "cfg->qk_l2norm = 2", NULL),
    ENTRY(bad_z_compensated, NONE, LINATTN_E_ARG, "cfg->z_compensated = 2", NULL),
    ENTRY(negative_batch_stride, NONE, LINATTN_E_STRIDE, "cfg->v.batch = -1", NULL),
    ENTRY(negative_eps, NONE, LINATTN_E_ARG, "cfg->eps", NULL),
    ENTRY(nan_eps, NONE, LINATTN_E_ARG, "cfg->eps = nan", NULL),
    ENTRY(inf_scale, NONE, LINATTN_E_ARG, "cfg->scale = inf", NULL),
    ENTRY(negative_chunk, NONE, LINATTN_E_ARG, "cfg->chunk = -1", NULL),
    ENTRY(negative_threads, NONE, LINATTN_E_ARG, "cfg->num_threads = -1", NULL),
    ENTRY(small_struct, NONE, LINATTN_E_ARG, "cfg->struct_size", "linattn_config_init"),
    ENTRY(large_struct, NONE, LINATTN_E_ARG, "cfg->struct_size", "linattn_config_init"),
    ENTRY(garbage_struct, NONE, LINATTN_E_ARG, "cfg->struct_size", "linattn_config_init"),
    ENTRY(positive_g, TOKEN, LINATTN_E_ARG, "g[b=0,h=1,t=0] = 0.5", "decay factor"),
    ENTRY(nan_g, CHANNEL, LINATTN_E_ARG, "g[b=0,h=1,t=0,c=2] = nan", NULL),
    ENTRY(minus_inf_g, HEAD, LINATTN_E_ARG, "g[b=0,h=1] = -inf", "reset"),
    ENTRY_STEP_IGNORES(gated_noncausal, TOKEN, LINATTN_E_ARG, "cfg->causal = 0 with a gate", NULL),
    ENTRY(o_overlaps_q, NONE, LINATTN_E_OVERLAP, "o overlaps q", NULL),
    ENTRY(o_overlaps_itself, NONE, LINATTN_E_OVERLAP, "o overlaps itself", NULL),
    ENTRY(o_head_stride_zero, NONE, LINATTN_E_OVERLAP, "o overlaps itself", NULL),
    ENTRY(s_overlaps_v, NONE, LINATTN_E_OVERLAP, "s overlaps v", NULL),
    ENTRY(z_overlaps_s, NONE, LINATTN_E_OVERLAP, "s overlaps z", NULL),
    ENTRY(s_overlaps_o, NONE, LINATTN_E_OVERLAP, "o overlaps s", NULL),
    ENTRY(z_overlaps_g, CHANNEL, LINATTN_E_OVERLAP, "z overlaps g", NULL),
};
enum { N_BAD_CASES = sizeof bad_cases / sizeof bad_cases[0] };

/* _i indexes bad_cases; each case runs through forward and through step. */
START_TEST(bad_input_writes_nothing)
{
    const bad_case *bc = &bad_cases[_i];
    for (int step = 0; step <= 1; step++) {
        const char *entry = step ? "step" : "forward";
        guarded_call c;
        bad_setup(&c, bc->gate);
        linattn_config cfg = c.p.cfg;
        const float *q = c.p.q;
        float *o = c.p.o, *s = c.p.s, *z = c.p.z;
        /* cases may change g's pointer or values: the good call after
         * them needs the originals back */
        float *g = c.p.g, *g_copy = g ? snapshot(g, gate_floats(bc->gate)) : NULL;
        bc->mutate(&c.p, &cfg, &q, &o, &s, &z);
        const linattn_config *pc = bc->null_cfg ? NULL : &cfg;
        const linattn_status st = step ? linattn_step(pc, q, c.p.k, c.p.v, c.p.g, o, s, z)
                                       : linattn_forward(pc, q, c.p.k, c.p.v, c.p.g, o, s, z);
        if (g)
            memcpy(g, g_copy, gate_floats(bc->gate) * sizeof(float));
        c.p.g = g;
        free(g_copy);
        if (step && bc->step == STEP_IGNORES) {
            ck_assert_msg(st == LINATTN_OK, "%s (step ignores it): got %d (%s): %s", bc->name,
                          st, linattn_strerror(st), linattn_last_error());
            ck_assert_success();
            bad_teardown(&c);
            continue;
        }
        ck_assert_msg(st == bc->expected, "%s (%s): got %d (%s), want %d; \"%s\"", bc->name,
                      entry, st, linattn_strerror(st), bc->expected, linattn_last_error());
        check_untouched(&c, bc->name);
        ck_assert_error_has(bc->says);
        if (bc->also_says)
            ck_assert_error_has(bc->also_says);
        expect_success_clears(&c, step);
        bad_teardown(&c);
    }
}
END_TEST

/* ---- the delta rule's own checks --------------------------------------- */

typedef struct {
    const char *name;
    linattn_status expected;
    const char *says;
    step_rule step;
} delta_case;

static const delta_case delta_cases[] = {
    {"normalize", LINATTN_E_ARG, "cfg->normalize = 1", STEP_SAME},
    {"noncausal", LINATTN_E_ARG, "cfg->causal = 0", STEP_IGNORES},
    {"null_beta", LINATTN_E_NULL, "beta is NULL", STEP_SAME},
    {"beta_above_2", LINATTN_E_ARG, "beta[b=1,h=0,t=0] = 2.5", STEP_SAME},
    {"nan_beta", LINATTN_E_ARG, "beta[b=0,h=1,t=0] = nan", STEP_SAME},
    {"negative_beta_token_stride", LINATTN_E_STRIDE, "cfg->beta.token = -1", STEP_IGNORES},
    {"negative_beta_head_stride", LINATTN_E_STRIDE, "cfg->beta.head = -2", STEP_SAME},
    {"s_overlaps_beta", LINATTN_E_OVERLAP, "s overlaps beta", STEP_SAME},
    {"step_null_s", LINATTN_E_NULL, "s is NULL", STEP_SAME},
};
enum { N_DELTA_CASES = sizeof delta_cases / sizeof delta_cases[0] };

START_TEST(delta_bad_input_writes_nothing)
{
    const delta_case *dc = &delta_cases[_i];
    for (int step = 0; step <= 1; step++) {
        guarded_call c;
        bad_setup(&c, LINATTN_GATE_TOKEN);
        c.p.cfg.normalize = 0;
        float *beta = guarded_floats(&c.p, BB * BH * BT, 0);
        for (int i = 0; i < BB * BH * BT; i++)
            beta[i] = 0.5f;
        linattn_config cfg = c.p.cfg;
        const float *pb = beta;
        float *s = c.p.s;
        const char *n = dc->name;
        if (!strcmp(n, "normalize"))
            cfg.normalize = 1;
        else if (!strcmp(n, "noncausal"))
            cfg.causal = 0;
        else if (!strcmp(n, "null_beta"))
            pb = NULL;
        else if (!strcmp(n, "beta_above_2"))
            beta[BH * BT] = 2.5f; /* (b1, h0, t0) */
        else if (!strcmp(n, "nan_beta"))
            beta[BT] = NAN; /* (b0, h1, t0) */
        else if (!strcmp(n, "negative_beta_token_stride"))
            cfg.beta.token = -1;
        else if (!strcmp(n, "negative_beta_head_stride"))
            cfg.beta.head = -2;
        else if (!strcmp(n, "s_overlaps_beta"))
            s = beta;
        else if (!strcmp(n, "step_null_s"))
            s = NULL;
        if (!step && !strcmp(n, "step_null_s")) { /* forward: a zero initial state */
            bad_teardown(&c);
            continue;
        }
        const linattn_status st =
            step ? linattn_delta_step(&cfg, c.p.q, c.p.k, c.p.v, c.p.g, pb, c.p.o, s)
                 : linattn_delta_forward(&cfg, c.p.q, c.p.k, c.p.v, c.p.g, pb, c.p.o, s);
        if (step && dc->step == STEP_IGNORES) {
            ck_assert_msg(st == LINATTN_OK, "delta %s (step ignores it): %d: %s", n, st,
                          linattn_last_error());
            ck_assert_success();
            bad_teardown(&c);
            continue;
        }
        ck_assert_msg(st == dc->expected, "delta %s (%s): got %d, want %d; \"%s\"", n,
                      step ? "step" : "forward", st, dc->expected, linattn_last_error());
        check_untouched(&c, n);
        ck_assert_error_has(dc->says);
        for (int i = 0; i < BB * BH * BT; i++)
            beta[i] = 0.5f;
        const linattn_status ok =
            step ? linattn_delta_step(&c.p.cfg, c.p.q, c.p.k, c.p.v, c.p.g, beta, c.p.o, c.p.s)
                 : linattn_delta_forward(&c.p.cfg, c.p.q, c.p.k, c.p.v, c.p.g, beta, c.p.o,
                                         c.p.s);
        ck_assert_int_eq(ok, LINATTN_OK);
        ck_assert_success();
        bad_teardown(&c);
    }
}
END_TEST

START_TEST(step_requires_state)
{
    guarded_call c;
    bad_setup(&c, LINATTN_GATE_NONE);
    ck_assert_int_eq(linattn_step(&c.p.cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, NULL, NULL),
                     LINATTN_E_NULL);
    ck_assert_error_has("s is NULL");
    ck_assert_int_eq(linattn_step(&c.p.cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, NULL),
                     LINATTN_E_NULL);
    ck_assert_error_has("z is NULL");
    check_untouched(&c, "step_requires_state");
    /* without the normaliser z is neither read nor needed, nor written */
    c.p.cfg.normalize = 0;
    ck_assert_int_eq(linattn_step(&c.p.cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, NULL),
                     LINATTN_OK);
    ck_assert_success();
    ck_assert_int_eq(linattn_forward(&c.p.cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, c.p.z),
                     LINATTN_OK);
    ck_assert_msg(same_bytes(c.z_copy, c.p.z, c.nz), "z written with normalize = 0");
    bad_teardown(&c);
}
END_TEST

/* As after LINATTN_ISA named a table that cannot run: every compute call
 * fails, writes nothing and says how to recover. Needs a fresh process (the
 * registry reads LINATTN_ISA once): Check's fork mode gives one. */
START_TEST(inactive_isa_is_an_error)
{
    if (fork_mode == CK_NOFORK) {
        printf("inactive_isa_is_an_error: skipped without fork mode\n");
        return;
    }
    setenv("LINATTN_ISA", "bogus", 1);
    guarded_call c;
    bad_setup(&c, LINATTN_GATE_NONE);
    ck_assert_int_eq(problem_forward(&c.p), LINATTN_E_ISA);
    ck_assert_error_has("LINATTN_ISA=bogus");
    ck_assert_error_has("linattn_set_isa");
    ck_assert_int_eq(linattn_step(&c.p.cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, c.p.z),
                     LINATTN_E_ISA);
    check_untouched(&c, "inactive isa");
    ck_assert_int_eq(linattn_set_isa((linattn_isa)99), LINATTN_E_ISA);
    ck_assert_error_has("linattn_set_isa(99");
    ck_assert_int_eq(linattn_set_isa(LINATTN_ISA_SCALAR), LINATTN_OK);
    ck_assert_success();
    expect_success_clears(&c, 0);
    bad_teardown(&c);
}
END_TEST

/* ---- messages in words ----------------------------------------------- */

/* A decay factor a in (0, 1] where log(a) belongs: the message says so. */
START_TEST(decay_factor_named)
{
    static const float factors[] = {1e-3f, 0.5f, 0.97f, 1.0f};
    for (int gate = LINATTN_GATE_HEAD; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++) {
            guarded_call c;
            bad_setup(&c, (linattn_gate)gate);
            c.p.g[1] = factors[i];
            ck_assert_int_eq(problem_forward(&c.p), LINATTN_E_ARG);
            check_untouched(&c, "decay factor");
            ck_assert_error_has("decay factor");
            ck_assert_error_has("log");
            bad_teardown(&c);
        }
}
END_TEST

/* The gate values are checked on the call's threads when g is large (a
 * channel gate): the message still names the first bad value in (b, h, t,
 * c) order, the same for any thread count, and nothing is written. */
START_TEST(gate_check_on_threads_names_first)
{
    enum { GB = 2, GH = 4, GT = 256, GDK = 64, GDV = 8 }; /* g: 512 KiB */
    static const int threads[] = {1, 3, 4};
    for (size_t n = 0; n < sizeof threads / sizeof threads[0]; n++)
        for (int which = 0; which < 2; which++) {
            spec sp = spec_default(GB, GH, GT, GDK, GDV);
            sp.gate = LINATTN_GATE_CHANNEL;
            sp.with_state = 1;
            sp.threads = threads[n];
            guarded_call c;
            problem_make(&c.p, &sp);
            snapshot_outputs(&c, &sp);
            /* a bad value in a later head, and (which = 1) one in an earlier
             * head at a later token, which is then the one to name */
            c.p.g[((1 * GH + 2) * GT + 10) * GDK + 0] = NAN;
            if (which)
                c.p.g[((0 * GH + 3) * GT + 200) * GDK + 5] = 0.5f;
            ck_assert_int_eq(problem_forward(&c.p), LINATTN_E_ARG);
            check_untouched(&c, "bad gate on threads");
            ck_assert_error_has(which ? "g[b=0,h=3,t=200,c=5] = 0.5" : "g[b=1,h=2,t=10,c=0] = nan");
            bad_teardown(&c);
        }
}
END_TEST

/* Every position of a token and a channel gate, in rows one after another
 * ([B][H][T][...]: the scan takes a head as one run) and in rows apart
 * ([B][T][H][...]: row by row): a bad value there is found and named, and
 * nothing is written. dk = 19 leaves a tail past the vectors. */
START_TEST(gate_check_names_every_position)
{
    enum { PB = 2, PH = 3, PT = 5, PDK = 19, PDV = 4 };
    static const float bad[] = {NAN, 0.25f, -INFINITY};
    static const char *const bad_text[] = {"nan", "0.25", "-inf"};
    for (int channel = 0; channel < 2; channel++)
        for (int apart = 0; apart < 2; apart++) {
            spec sp = spec_default(PB, PH, PT, PDK, PDV);
            sp.gate = channel ? LINATTN_GATE_CHANNEL : LINATTN_GATE_TOKEN;
            sp.layout = apart ? LAYOUT_BTHD : LAYOUT_BHTD;
            sp.with_state = 1;
            guarded_call c;
            problem_make(&c.p, &sp);
            snapshot_outputs(&c, &sp);
            const int64_t nc = channel ? PDK : 1;
            for (int64_t b = 0; b < PB; b++)
                for (int64_t h = 0; h < PH; h++)
                    for (int64_t t = 0; t < PT; t++)
                        for (int64_t ch = 0; ch < nc; ch++) {
                            const int64_t row =
                                apart ? (b * PT + t) * PH + h : (b * PH + h) * PT + t;
                            const int64_t at = row * nc + ch;
                            const int which = (int)(at % 3);
                            const float keep = c.p.g[at];
                            c.p.g[at] = bad[which];
                            ck_assert_int_eq(problem_forward(&c.p), LINATTN_E_ARG);
                            char want[160]; /* four int64 and the value: room for the longest */
                            if (channel)
                                snprintf(want, sizeof want, "g[b=%lld,h=%lld,t=%lld,c=%lld] = %s",
                                         (long long)b, (long long)h, (long long)t, (long long)ch,
                                         bad_text[which]);
                            else
                                snprintf(want, sizeof want, "g[b=%lld,h=%lld,t=%lld] = %s",
                                         (long long)b, (long long)h, (long long)t,
                                         bad_text[which]);
                            ck_assert_error_has(want);
                            check_untouched(&c, "bad gate value");
                            c.p.g[at] = keep;
                        }
            ck_assert_int_eq(problem_forward(&c.p), LINATTN_OK);
            bad_teardown(&c);
        }
}
END_TEST

/* A config never passed through linattn_config_init (stack garbage). */
START_TEST(uninitialised_config_named)
{
    static const unsigned char fill[] = {0x00, 0xAB, 0xFF, 0x11};
    for (size_t i = 0; i < sizeof fill; i++) {
        guarded_call c;
        bad_setup(&c, LINATTN_GATE_NONE);
        linattn_config cfg;
        memset(&cfg, fill[i], sizeof cfg);
        ck_assert_int_eq(linattn_forward(&cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, c.p.z),
                         LINATTN_E_ARG);
        ck_assert_error_has("struct_size");
        ck_assert_error_has("linattn_config_init");
        ck_assert_int_eq(linattn_step(&cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, c.p.z),
                         LINATTN_E_ARG);
        ck_assert_error_has("linattn_config_init");
        check_untouched(&c, "uninitialised config");
        bad_teardown(&c);
    }
}
END_TEST

/* ---- last_error is per thread ------------------------------------------ */

typedef struct {
    int fail;           /* make a failing call (dv = -2), else a good one */
    char before[320];   /* the thread's message before any call */
    char after[320];
    const char *where;  /* linattn_last_error()'s pointer in that thread */
    linattn_status st;
} thread_probe;

static void *probe_thread(void *arg)
{
    thread_probe *t = arg;
    snprintf(t->before, sizeof t->before, "%s", linattn_last_error());
    float q[4] = {0.1f, 0.2f, 0.3f, 0.4f}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4}, o[4];
    linattn_config cfg;
    linattn_config_init(&cfg, 1, 1, 2, 2, 2);
    if (t->fail)
        cfg.dv = -2;
    t->st = linattn_forward(&cfg, q, k, v, NULL, o, NULL, NULL);
    snprintf(t->after, sizeof t->after, "%s", linattn_last_error());
    t->where = linattn_last_error();
    return NULL;
}

START_TEST(last_error_is_thread_local)
{
    guarded_call c;
    bad_setup(&c, LINATTN_GATE_NONE);
    linattn_config cfg = c.p.cfg;
    cfg.dk = 0;
    ck_assert_int_eq(linattn_forward(&cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, c.p.z),
                     LINATTN_E_SHAPE);
    ck_assert_error_has("cfg->dk = 0");
    const char *mine = linattn_last_error();

    for (int fail = 1; fail >= 0; fail--) {
        thread_probe t = {.fail = fail};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, probe_thread, &t), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        ck_assert_str_eq(t.before, "success"); /* a new thread starts clean */
        ck_assert_int_eq(t.st, fail ? LINATTN_E_SHAPE : LINATTN_OK);
        if (fail)
            ck_assert_msg(strstr(t.after, "cfg->dv = -2"), "other thread: \"%s\"", t.after);
        else
            ck_assert_str_eq(t.after, "success");
        ck_assert_msg(t.where != mine, "two threads share one message buffer");
        /* this thread's message is untouched by the other's call */
        ck_assert_error_has("cfg->dk = 0");
    }
    bad_teardown(&c);
}
END_TEST

/* ---- ignored fields are ignored ------------------------------------------ */

/* Per-token decode buffers, [B][H][D] (g [B][H] or [B][H][dk]), with a
 * random state: what linattn_config_init_step describes. */
typedef struct {
    int64_t B, H, dk, dv;
    linattn_gate gate;
    problem mem; /* owns the guarded buffers */
    float *q, *k, *v, *g, *beta, *o, *s, *z;
    float *s0, *z0;
} decode;

static void decode_make(decode *d, int64_t B, int64_t H, int64_t dk, int64_t dv,
                        linattn_gate gate)
{
    memset(d, 0, sizeof *d);
    d->B = B, d->H = H, d->dk = dk, d->dv = dv, d->gate = gate;
    const size_t nq = (size_t)(B * H * dk), nv = (size_t)(B * H * dv), ns = (size_t)(nq * dv);
    const size_t ng = gate == LINATTN_GATE_CHANNEL ? nq
                      : gate == LINATTN_GATE_HEAD  ? (size_t)H
                                                   : (size_t)(B * H);
    float **in[] = {&d->q, &d->k, &d->v};
    const size_t nin[] = {nq, nq, nv};
    for (int i = 0; i < 3; i++) {
        *in[i] = guarded_floats(&d->mem, nin[i], 0);
        for (size_t j = 0; j < nin[i]; j++)
            (*in[i])[j] = rand_uniform(-1, 1);
    }
    d->g = guarded_floats(&d->mem, ng, 0);
    for (size_t j = 0; j < ng; j++)
        d->g[j] = rand_uniform(-1, 0);
    d->beta = guarded_floats(&d->mem, (size_t)(B * H), 0);
    for (int64_t j = 0; j < B * H; j++)
        d->beta[j] = rand_uniform(0, 2);
    d->o = guarded_floats(&d->mem, nv, 0);
    d->s = guarded_floats(&d->mem, ns, 0);
    d->z = guarded_floats(&d->mem, nq, 0);
    d->s0 = malloc(ns * sizeof(float));
    d->z0 = malloc(nq * sizeof(float));
    for (size_t j = 0; j < ns; j++)
        d->s0[j] = rand_uniform(-1, 1);
    for (size_t j = 0; j < nq; j++)
        d->z0[j] = rand_uniform(0, 2);
}

static void decode_free(decode *d)
{
    free(d->s0);
    free(d->z0);
    problem_free(&d->mem);
}

/* Outputs of one call, copied out. */
typedef struct {
    linattn_status st;
    float *o, *s, *z;
} result;

static void result_free(result *r)
{
    free(r->o);
    free(r->s);
    free(r->z);
}

enum { ADDITIVE, DELTA };

/* One step (or a T = 1 forward) from the initial state. */
static result decode_run(decode *d, const linattn_config *cfg, int family, int forward)
{
    const size_t nv = (size_t)(d->B * d->H * d->dv), nq = (size_t)(d->B * d->H * d->dk);
    memcpy(d->s, d->s0, nq * (size_t)d->dv * sizeof(float));
    memcpy(d->z, d->z0, nq * sizeof(float));
    for (size_t i = 0; i < nv; i++)
        d->o[i] = NAN;
    const float *g = cfg->gate == LINATTN_GATE_NONE ? NULL : d->g;
    result r;
    if (family == DELTA)
        r.st = forward ? linattn_delta_forward(cfg, d->q, d->k, d->v, g, d->beta, d->o, d->s)
                       : linattn_delta_step(cfg, d->q, d->k, d->v, g, d->beta, d->o, d->s);
    else
        r.st = forward ? linattn_forward(cfg, d->q, d->k, d->v, g, d->o, d->s, d->z)
                       : linattn_step(cfg, d->q, d->k, d->v, g, d->o, d->s, d->z);
    r.o = snapshot(d->o, nv);
    r.s = snapshot(d->s, nq * (size_t)d->dv);
    r.z = snapshot(d->z, nq);
    return r;
}

static void expect_same_result(const decode *d, const result *a, const result *b,
                               const char *what)
{
    const size_t nv = (size_t)(d->B * d->H * d->dv), nq = (size_t)(d->B * d->H * d->dk);
    ck_assert_msg(a->st == LINATTN_OK && b->st == LINATTN_OK, "%s: status %d and %d (%s)", what,
                  a->st, b->st, linattn_last_error());
    ck_assert_msg(same_bytes(a->o, b->o, nv), "%s: o differs", what);
    ck_assert_msg(same_bytes(a->s, b->s, nq * (size_t)d->dv), "%s: s differs", what);
    ck_assert_msg(same_bytes(a->z, b->z, nq), "%s: z differs", what);
}

static const char *const gate_names[] = {"none", "head", "token", "channel"};

/* A step ignores seq_len and every token stride: garbage there gives the
 * bit-identical result. */
START_TEST(step_ignores_seq_len_and_token_strides)
{
    static const int64_t seq_lens[] = {0, -5, INT64_MIN, 1000000};
    static const int64_t token_strides[] = {-1, -7, INT64_MIN, INT64_MAX, 1 << 30};
    for (int family = ADDITIVE; family <= DELTA; family++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            decode d;
            decode_make(&d, 2, 3, 5, 7, (linattn_gate)gate);
            linattn_config sane;
            linattn_config_init_step(&sane, 2, 3, 5, 7);
            linattn_config_set_gate(&sane, (linattn_gate)gate);
            if (family == DELTA)
                sane.normalize = 0;
            result ref = decode_run(&d, &sane, family, 0);
            for (size_t i = 0; i < 4; i++) {
                linattn_config bad = sane;
                bad.seq_len = seq_lens[i];
                const int64_t ts = token_strides[i];
                bad.q.token = bad.k.token = bad.v.token = bad.o.token = ts;
                bad.g.token = bad.beta.token = token_strides[(i + 1) % 5];
                result r = decode_run(&d, &bad, family, 0);
                char what[160];
                snprintf(what, sizeof what, "%s step, gate %s, seq_len %lld, token strides %lld",
                         family == DELTA ? "delta" : "additive", gate_names[gate],
                         (long long)seq_lens[i], (long long)ts);
                expect_same_result(&d, &r, &ref, what);
                ck_assert_success();
                result_free(&r);
            }
            result_free(&ref);
            decode_free(&d);
        }
}
END_TEST

/* Forward: g strides are not read without a gate, nor the token stride of
 * a per-head gate. */
START_TEST(forward_ignores_unused_g_strides)
{
    for (int family = ADDITIVE; family <= DELTA; family++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_HEAD; gate++) {
            spec sp = spec_default(2, 3, 20, 6, 5);
            sp.gate = (linattn_gate)gate;
            sp.with_state = 1;
            problem p;
            problem_make(&p, &sp);
            float *beta = guarded_floats(&p, 2 * 3 * 20, 0);
            for (int i = 0; i < 2 * 3 * 20; i++)
                beta[i] = rand_uniform(0, 2);
            if (family == DELTA)
                p.cfg.normalize = 0;
            const size_t no = 2 * 3 * 20 * 5, ns = 2 * 3 * 6 * 5, nz = 2 * 3 * 6;
            float *o_ref = NULL, *s_ref = NULL, *z_ref = NULL;
            static const linattn_strides garbage[] = {
                {0, 0, 0}, {-1, -2, -3}, {INT64_MIN, -1, INT64_MAX}, {0, 1, -4}, {0, 1, 12345}};
            for (size_t i = 0; i < 5; i++) {
                linattn_config cfg = p.cfg;
                if (gate == LINATTN_GATE_NONE)
                    cfg.g = garbage[i];
                else if (i > 0)
                    cfg.g.token = garbage[i].token;
                memcpy(p.s, p.s_init, ns * sizeof(float));
                memcpy(p.z, p.z_init, nz * sizeof(float));
                const linattn_status st =
                    family == DELTA
                        ? linattn_delta_forward(&cfg, p.q, p.k, p.v, p.g, beta, p.o, p.s)
                        : linattn_forward(&cfg, p.q, p.k, p.v, p.g, p.o, p.s, p.z);
                ck_assert_msg(st == LINATTN_OK, "%s gate %s, g strides %lld %lld %lld: %s",
                              family == DELTA ? "delta" : "additive", gate_names[gate],
                              (long long)cfg.g.batch, (long long)cfg.g.head,
                              (long long)cfg.g.token, linattn_last_error());
                if (i == 0) {
                    o_ref = snapshot(p.o, no), s_ref = snapshot(p.s, ns), z_ref = snapshot(p.z, nz);
                    continue;
                }
                ck_assert_msg(same_bytes(o_ref, p.o, no) && same_bytes(s_ref, p.s, ns) &&
                                  same_bytes(z_ref, p.z, nz),
                              "gate %s: g strides %lld %lld %lld changed the result",
                              gate_names[gate], (long long)cfg.g.batch, (long long)cfg.g.head,
                              (long long)cfg.g.token);
            }
            free(o_ref), free(s_ref), free(z_ref);
            problem_free(&p);
        }
}
END_TEST

/* A config exactly as long as 0.1's, ending at a guard page (so reading
 * past struct_size faults): OK, and the 0.2 fields take their defaults. */
START_TEST(config_from_0_1_caller)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *map =
        mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(map, MAP_FAILED);
    ck_assert_int_eq(mprotect(map + page, page, PROT_NONE), 0);
    _Static_assert(CONFIG_V1_SIZE % 8 == 0, "the 0.1 config ends on an int64");
    linattn_config *old = (linattn_config *)(void *)(map + page - CONFIG_V1_SIZE);

    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
        spec sp = spec_default(2, 4, 21, 6, 5);
        sp.gate = (linattn_gate)gate;
        sp.with_state = 1;
        problem p;
        problem_make(&p, &sp);
        const size_t no = 2 * 4 * 21 * 5, ns = 2 * 4 * 6 * 5, nz = 2 * 4 * 6;
        ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
        float *o_ref = snapshot(p.o, no), *s_ref = snapshot(p.s, ns), *z_ref = snapshot(p.z, nz);

        memcpy(old, &p.cfg, CONFIG_V1_SIZE);
        old->struct_size = CONFIG_V1_SIZE;
        memcpy(p.s, p.s_init, ns * sizeof(float));
        memcpy(p.z, p.z_init, nz * sizeof(float));
        for (size_t i = 0; i < no; i++)
            p.o[i] = NAN;
        ck_assert_msg(linattn_forward(old, p.q, p.k, p.v, p.g, p.o, p.s, p.z) == LINATTN_OK,
                      "0.1 config, gate %s: %s", gate_names[gate], linattn_last_error());
        ck_assert_success();
        ck_assert_msg(same_bytes(o_ref, p.o, no) && same_bytes(s_ref, p.s, ns) &&
                          same_bytes(z_ref, p.z, nz),
                      "0.1 config, gate %s: result differs from the defaults", gate_names[gate]);
        ck_assert_int_eq(linattn_step(old, p.q, p.k, p.v, p.g, p.o, p.s, p.z), LINATTN_OK);

        /* one byte short of 0.1, or longer than this version knows: refused */
        const size_t bad_sizes[] = {CONFIG_V1_SIZE - 1, sizeof(linattn_config) + 1,
                                    sizeof(linattn_config) + 64};
        for (int i = 0; i < 3; i++) {
            linattn_config cfg = p.cfg;
            cfg.struct_size = bad_sizes[i];
            memcpy(s_ref, p.s, ns * sizeof(float));
            ck_assert_int_eq(linattn_forward(&cfg, p.q, p.k, p.v, p.g, p.o, p.s, p.z),
                             LINATTN_E_ARG);
            ck_assert_error_has("struct_size");
            ck_assert_msg(same_bytes(s_ref, p.s, ns), "struct_size %zu: s written", bad_sizes[i]);
        }
        free(o_ref), free(s_ref), free(z_ref);
        problem_free(&p);
    }
    munmap(map, 2 * page);
}
END_TEST

/* linattn_config_init_step describes [B][H][D] buffers: a step through it
 * equals a T = 1 forward through linattn_config_init on the same buffers. */
START_TEST(config_init_step_decodes_per_token_buffers)
{
    static const int64_t dims[][4] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 2, 17, 16}, {1, 4, 64, 64}};
    for (int family = ADDITIVE; family <= DELTA; family++)
        for (size_t i = 0; i < 4; i++)
            for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
                const int64_t B = dims[i][0], H = dims[i][1], dk = dims[i][2], dv = dims[i][3];
                decode d;
                decode_make(&d, B, H, dk, dv, (linattn_gate)gate);
                linattn_config step, fwd;
                linattn_config_init_step(&step, B, H, dk, dv);
                linattn_config_set_gate(&step, (linattn_gate)gate);
                linattn_config_init(&fwd, B, H, 1, dk, dv);
                linattn_config_set_gate(&fwd, (linattn_gate)gate);
                fwd.beta = step.beta;
                if (family == DELTA)
                    step.normalize = fwd.normalize = 0;
                result a = decode_run(&d, &step, family, 0);
                result b = decode_run(&d, &fwd, family, 1);
                char what[128];
                snprintf(what, sizeof what, "%s B=%lld H=%lld dk=%lld dv=%lld gate %s",
                         family == DELTA ? "delta" : "additive", (long long)B, (long long)H,
                         (long long)dk, (long long)dv, gate_names[gate]);
                expect_same_result(&d, &a, &b, what);
                /* the step config's strides are the contiguous [B][H][D] ones */
                ck_assert_int_eq(step.q.batch, H * dk);
                ck_assert_int_eq(step.q.head, dk);
                ck_assert_int_eq(step.o.batch, H * dv);
                ck_assert_int_eq(step.o.head, dv);
                result_free(&a);
                result_free(&b);
                decode_free(&d);
            }
}
END_TEST

/* ---- sizes that cannot be formed --------------------------------------- */

/* Address space only: PROT_NONE, no swap reserved. */
static void *reserve(size_t bytes, int prot)
{
    void *p = mmap(NULL, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

enum { CANARY_BYTES = 4096 };

/* The first and last page of a reserved output made writable and filled
 * with a pattern, so "nothing written" can be checked at both ends (a write
 * anywhere else faults). */
static void canary_ends(unsigned char *p, size_t bytes)
{
    ck_assert_int_eq(mprotect(p, CANARY_BYTES, PROT_READ | PROT_WRITE), 0);
    ck_assert_int_eq(mprotect(p + bytes - CANARY_BYTES, CANARY_BYTES, PROT_READ | PROT_WRITE), 0);
    memset(p, 0x5A, CANARY_BYTES);
    memset(p + bytes - CANARY_BYTES, 0x5A, CANARY_BYTES);
}

static int canary_intact(const unsigned char *p, size_t bytes)
{
    for (size_t i = 0; i < CANARY_BYTES; i++)
        if (p[i] != 0x5A || p[bytes - CANARY_BYTES + i] != 0x5A)
            return 0;
    return 1;
}

/* chunk = T = 2^34 and dk = 2^26 with q, k, v of token stride 0 and o
 * really spanning T floats: the pack of one chunk (chunk * dk * 16 bytes)
 * does not fit in size_t. Refused, never wrapped into a small buffer. */
START_TEST(huge_workspace_refused)
{
    const int64_t T = (int64_t)1 << 34, dk = (int64_t)1 << 26;
    const size_t o_bytes = (size_t)T * sizeof(float), qk_bytes = (size_t)dk * sizeof(float);
    unsigned char *o = reserve(o_bytes, PROT_NONE);
    const float *q = reserve(qk_bytes, PROT_READ), *k = reserve(qk_bytes, PROT_READ);
    if (!o || !q || !k) {
        printf("huge_workspace_refused: skipped, cannot reserve %zu bytes of address space\n",
               o_bytes + 2 * qk_bytes);
        return;
    }
    canary_ends(o, o_bytes);
    const float v[1] = {1.0f}, g[1] = {-0.5f};
    const int isa = _i; /* one test per ISA, so each reports on its own */
    if (!linattn_isa_available((linattn_isa)isa)) {
        printf("huge_workspace_refused: %s not available here\n",
               linattn_isa_name((linattn_isa)isa));
        return;
    }
    ck_assert_int_eq(linattn_set_isa((linattn_isa)isa), LINATTN_OK);
    printf("huge_workspace_refused: %s\n", linattn_isa_name((linattn_isa)isa));
    fflush(stdout); /* names the table if the call crashes */
    {
        for (int variant = 0; variant < 8; variant++) {
            linattn_config cfg;
            linattn_config_init(&cfg, 1, 1, T, dk, 1);
            cfg.q.token = cfg.k.token = cfg.v.token = 0;
            cfg.algo = LINATTN_ALGO_CHUNKED;
            /* one chunk or two (the sequence-parallel path with 2 threads) */
            cfg.chunk = variant & 1 ? T / 2 : T;
            cfg.num_threads = variant & 2 ? 2 : 1;
            if (variant & 4)
                linattn_config_set_gate(&cfg, LINATTN_GATE_HEAD);
            const linattn_status st =
                linattn_forward(&cfg, q, k, v, variant & 4 ? g : NULL, (float *)(void *)o, NULL,
                                NULL);
            ck_assert_msg(st == LINATTN_E_SHAPE || st == LINATTN_E_NOMEM,
                          "%s, chunk %lld, %d threads%s: status %d (%s)",
                          linattn_isa_name((linattn_isa)isa), (long long)cfg.chunk,
                          cfg.num_threads, variant & 4 ? ", head gate" : "", st,
                          linattn_last_error());
            ck_assert_msg(strcmp(linattn_last_error(), "success") != 0, "no message");
            ck_assert_msg(canary_intact(o, o_bytes), "%s: o written",
                          linattn_isa_name((linattn_isa)isa));
        }
    }
    munmap(o, o_bytes);
    munmap((void *)q, qk_bytes);
    munmap((void *)k, qk_bytes);
}
END_TEST

/* s = z = NULL: the zero state the library would make, dk * dv * 4 bytes,
 * does not fit in size_t. E_SHAPE, never a wrapped allocation. */
START_TEST(huge_zero_state_refused)
{
    static const int64_t dims[][2] = {{(int64_t)1 << 31, (int64_t)1 << 31},
                                      {(int64_t)1 << 32, (int64_t)1 << 31},
                                      {(int64_t)1 << 33, (int64_t)1 << 32}};
    for (int i = 0; i < 3; i++) {
        const int64_t dk = dims[i][0], dv = dims[i][1];
        const size_t qk_bytes = (size_t)dk * 4, v_bytes = (size_t)dv * 4;
        const float *q = reserve(qk_bytes, PROT_READ), *k = reserve(qk_bytes, PROT_READ);
        const float *v = reserve(v_bytes, PROT_READ);
        unsigned char *o = reserve(v_bytes, PROT_NONE);
        if (!q || !k || !v || !o) {
            printf("huge_zero_state_refused: skipped dk=%lld dv=%lld, cannot reserve the "
                   "address space\n",
                   (long long)dk, (long long)dv);
            continue;
        }
        canary_ends(o, v_bytes);
        for (int family = ADDITIVE; family <= DELTA; family++)
            for (int norm = 0; norm <= 1; norm++) {
                if (family == DELTA && norm)
                    continue;
                linattn_config cfg;
                linattn_config_init(&cfg, 1, 1, 1, dk, dv);
                cfg.normalize = norm;
                const float beta[1] = {1.0f};
                const linattn_status st =
                    family == DELTA
                        ? linattn_delta_forward(&cfg, q, k, v, NULL, beta, (float *)(void *)o,
                                                NULL)
                        : linattn_forward(&cfg, q, k, v, NULL, (float *)(void *)o, NULL, NULL);
                ck_assert_msg(st == LINATTN_E_SHAPE, "%s dk=%lld dv=%lld normalize=%d: %d (%s)",
                              family == DELTA ? "delta" : "additive", (long long)dk,
                              (long long)dv, norm, st, linattn_last_error());
                ck_assert_error_has("too large");
                ck_assert_msg(canary_intact(o, v_bytes), "o written");
            }
        munmap((void *)q, qk_bytes);
        munmap((void *)k, qk_bytes);
        munmap((void *)v, v_bytes);
        munmap(o, v_bytes);
    }
}
END_TEST

/* ---- num_threads of any size ---------------------------------------------- */

/* Runs p with `threads` (forward or step; additive or delta) from its
 * initial state and returns o, s, z. */
static result threads_run(problem *p, const float *beta, int threads, int family, int step)
{
    const linattn_config *c0 = &p->cfg;
    const size_t no = (size_t)(c0->batch * c0->heads * c0->seq_len * c0->dv);
    const size_t ns = (size_t)(c0->batch * c0->heads * c0->dk * c0->dv);
    const size_t nz = (size_t)(c0->batch * c0->heads * c0->dk);
    memcpy(p->s, p->s_init, ns * sizeof(float));
    memcpy(p->z, p->z_init, nz * sizeof(float));
    for (size_t i = 0; i < no; i++)
        p->o[i] = NAN;
    linattn_config cfg = p->cfg;
    cfg.num_threads = threads;
    result r;
    if (family == DELTA)
        r.st = step ? linattn_delta_step(&cfg, p->q, p->k, p->v, p->g, beta, p->o, p->s)
                    : linattn_delta_forward(&cfg, p->q, p->k, p->v, p->g, beta, p->o, p->s);
    else
        r.st = step ? linattn_step(&cfg, p->q, p->k, p->v, p->g, p->o, p->s, p->z)
                    : linattn_forward(&cfg, p->q, p->k, p->v, p->g, p->o, p->s, p->z);
    r.o = snapshot(p->o, no), r.s = snapshot(p->s, ns), r.z = snapshot(p->z, nz);
    return r;
}

/* 100000 and INT_MAX threads: OK (the team is capped, never handed to the
 * OpenMP runtime as is) and bitwise the single-thread result, for the
 * head-parallel and the sequence-parallel (B*H = 1, long T) forward, the
 * recurrent forward and the step, of both families. */
START_TEST(absurd_thread_counts)
{
    static const int counts[] = {100000, INT_MAX};
    /* {B, H, T, chunk, algo}: head-parallel chunked, sequence-parallel, recurrent */
    static const int64_t shapes[][5] = {{2, 3, 40, 16, LINATTN_ALGO_CHUNKED},
                                        {1, 1, 400, 16, LINATTN_ALGO_CHUNKED},
                                        {1, 2, 12, 0, LINATTN_ALGO_RECURRENT}};
    for (int family = ADDITIVE; family <= DELTA; family++)
        for (int si = 0; si < 3; si++)
            for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
                const int64_t *sh = shapes[si];
                spec sp = spec_default(sh[0], sh[1], sh[2], 8, 7);
                sp.gate = (linattn_gate)gate;
                sp.with_state = 1;
                sp.chunk = sh[3];
                sp.algo = (linattn_algo)sh[4];
                problem p;
                problem_make(&p, &sp);
                if (family == DELTA)
                    p.cfg.normalize = 0;
                const int64_t nb = sh[0] * sh[1] * sh[2];
                float *beta = guarded_floats(&p, (size_t)nb, 0);
                for (int64_t i = 0; i < nb; i++)
                    beta[i] = rand_uniform(0, 2);
                for (int step = 0; step <= 1; step++) {
                    result ref = threads_run(&p, beta, 1, family, step);
                    ck_assert_int_eq(ref.st, LINATTN_OK);
                    for (int ci = 0; ci < 2; ci++) {
                        result r = threads_run(&p, beta, counts[ci], family, step);
                        ck_assert_msg(r.st == LINATTN_OK, "%d threads: %s", counts[ci],
                                      linattn_last_error());
                        const size_t no = (size_t)nb * 7;
                        const size_t ns = (size_t)(sh[0] * sh[1] * 56),
                                     nz = (size_t)(sh[0] * sh[1] * 8);
                        ck_assert_msg(same_bytes(r.o, ref.o, no) && same_bytes(r.s, ref.s, ns) &&
                                          same_bytes(r.z, ref.z, nz),
                                      "%s %s %s, %d threads: differs from 1 thread",
                                      family == DELTA ? "delta" : "additive",
                                      step ? "step" : "forward", spec_name(&sp), counts[ci]);
                        result_free(&r);
                    }
                    result_free(&ref);
                }
                problem_free(&p);
            }
}
END_TEST

/* ---- the documented conservative overlap rule ---------------------------- */

/* o at offsets h*3 + t*2 (H = 2, T = 3, dv = 1) never collides, but its
 * strides interleave; the documented rule rejects it. */
START_TEST(interleaved_o_is_rejected)
{
    guarded_call c;
    spec sp = spec_default(1, 2, 3, 4, 1);
    sp.with_state = 1;
    problem_make(&c.p, &sp);
    c.no = 6, c.ns = 2 * 4, c.nz = 2 * 4;
    c.o_copy = snapshot(c.p.o, c.no);
    c.s_copy = snapshot(c.p.s, c.ns);
    c.z_copy = snapshot(c.p.z, c.nz);
    linattn_config cfg = c.p.cfg;
    cfg.o = (linattn_strides){8, 3, 2};
    ck_assert_int_eq(linattn_forward(&cfg, c.p.q, c.p.k, c.p.v, NULL, c.p.o, c.p.s, c.p.z),
                     LINATTN_E_OVERLAP);
    ck_assert_error_has("o overlaps itself");
    check_untouched(&c, "interleaved o");
    bad_teardown(&c);
}
END_TEST

/* 1 + the last ISA the library names (they are numbered in order). */
static int isa_limit(void)
{
    int isa = LINATTN_ISA_SCALAR;
    while (strcmp(linattn_isa_name((linattn_isa)isa), "unknown") != 0)
        isa++;
    return isa;
}

/* Found by the fuzzer: a delta call with the 0.1 config (no beta strides)
 * is refused; a huge scale with unit-norm features of a zero q gives 0,
 * not NaN (the norm and the scale are applied apart). */
START_TEST(delta_fuzzer_findings)
{
    enum { T = 3, D = 4 };
    float q[T * D] = {0}, k[T * D], v[T * D], beta[T], o[T * D], s[D * D] = {0};
    for (int i = 0; i < T * D; i++)
        k[i] = 0.25f * (float)(i % 5) - 0.5f, v[i] = (float)i;
    for (int t = 0; t < T; t++)
        beta[t] = 0.5f;
    linattn_config c;
    linattn_config_init(&c, 1, 1, T, D, D);
    c.normalize = 0;
    c.qk_l2norm = 1;
    c.phi = LINATTN_PHI_IDENTITY; /* phi(q) = 0 */
    c.scale = FLT_MAX;
    for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
        c.algo = (linattn_algo)algo;
        ck_assert_int_eq(linattn_delta_forward(&c, q, k, v, NULL, beta, o, s), LINATTN_OK);
        for (int i = 0; i < T * D; i++)
            ck_assert_msg(o[i] == 0.0f, "algo %d: o[%d] = %g, want 0", algo, i, (double)o[i]);
    }
    c.scale = 1.0f;
    c.struct_size = offsetof(linattn_config, qk_heads);
    ck_assert_int_eq(linattn_delta_forward(&c, q, k, v, NULL, beta, o, s), LINATTN_E_ARG);
    ck_assert_msg(strstr(linattn_last_error(), "0.1 config") != NULL, "%s", linattn_last_error());
}
END_TEST

/* ---- 0.4.0 fields: dtypes and the input stage's activations ------------- */

/* bfloat16 of a float, truncated (the values below are exact in bf16) */
static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

enum { DB = 2, DH = 2, DT = 6, DDK = 5, DDV = 4 };

/* A linattn_run call of either family with every 0.4.0 field in use:
 * bf16 q, k, v, beta, o and state, a token or channel gate from raw
 * projections (softplus, A_log, dt_bias), beta from logits (delta). */
typedef struct {
    problem mem;
    linattn_config cfg;
    linattn_operands ops;
    linattn_op op;
    uint16_t *q, *k, *v, *beta, *o, *s;
    float *g, *z, *A_log, *dt_bias;
    void *o_copy, *s_copy, *z_copy;
    size_t o_bytes, s_bytes, z_bytes;
} dt_fixture;

static uint16_t *guarded_halves(problem *mem, size_t n)
{
    return (uint16_t *)(void *)guarded_floats(mem, (n + 1) / 2, 0);
}

static void dt_setup(dt_fixture *f, int delta, linattn_gate gate)
{
    memset(f, 0, sizeof *f);
    linattn_config *c = &f->cfg;
    linattn_config_init(c, DB, DH, DT, DDK, DDV);
    c->normalize = !delta;
    c->qk_l2norm = delta;
    c->phi = delta ? LINATTN_PHI_IDENTITY : LINATTN_PHI_ELU1;
    linattn_config_set_gate(c, gate);
    c->dtype = (linattn_dtypes){LINATTN_BF16, LINATTN_BF16, LINATTN_BF16, LINATTN_BF16,
                                LINATTN_BF16, LINATTN_BF16};
    c->gate_act = gate == LINATTN_GATE_TOKEN || gate == LINATTN_GATE_CHANNEL
                      ? LINATTN_GATE_ACT_SOFTPLUS
                      : LINATTN_GATE_ACT_NONE;
    c->gate_lower_bound = -5.0f;
    c->beta_act = delta ? LINATTN_BETA_ACT_SIGMOID : LINATTN_BETA_ACT_NONE;
    f->op = delta ? LINATTN_OP_DELTA_FORWARD : LINATTN_OP_FORWARD;
    const size_t nqk = DB * DH * DT * DDK, nv = DB * DH * DT * DDV, nb = DB * DH * DT;
    const size_t ns = DB * DH * DDK * DDV, nz = DB * DH * DDK;
    f->q = guarded_halves(&f->mem, nqk);
    f->k = guarded_halves(&f->mem, nqk);
    f->v = guarded_halves(&f->mem, nv);
    f->o = guarded_halves(&f->mem, nv);
    f->s = guarded_halves(&f->mem, ns);
    for (size_t i = 0; i < nqk; i++)
        f->q[i] = bf16_of(rand_uniform(-1, 1)), f->k[i] = bf16_of(rand_uniform(-1, 1));
    for (size_t i = 0; i < nv; i++)
        f->v[i] = bf16_of(rand_uniform(-1, 1)), f->o[i] = 0x1234;
    for (size_t i = 0; i < ns; i++)
        f->s[i] = bf16_of(rand_uniform(-1, 1));
    if (delta) {
        f->beta = guarded_halves(&f->mem, nb);
        for (size_t i = 0; i < nb; i++)
            f->beta[i] = bf16_of(rand_uniform(-3, 3));
    } else {
        f->z = guarded_floats(&f->mem, nz, 0);
        for (size_t i = 0; i < nz; i++)
            f->z[i] = rand_uniform(0.5f, 1.5f);
    }
    const size_t ng = gate == LINATTN_GATE_NONE    ? 0
                      : gate == LINATTN_GATE_HEAD  ? DH
                      : gate == LINATTN_GATE_TOKEN ? nb
                                                   : nb * DDK;
    if (ng) {
        f->g = guarded_floats(&f->mem, ng, 0);
        for (size_t i = 0; i < ng; i++)
            f->g[i] = rand_uniform(-3, gate == LINATTN_GATE_HEAD ? 0.0f : 3.0f);
    }
    const size_t nbias = gate == LINATTN_GATE_CHANNEL ? DH * DDK : DH;
    f->A_log = guarded_floats(&f->mem, DH, 0);
    f->dt_bias = guarded_floats(&f->mem, nbias, 0);
    for (size_t i = 0; i < DH; i++)
        f->A_log[i] = rand_uniform(-1, 1);
    for (size_t i = 0; i < nbias; i++)
        f->dt_bias[i] = rand_uniform(-1, 1);
    linattn_operands_init(&f->ops);
    f->ops.q = f->q, f->ops.k = f->k, f->ops.v = f->v, f->ops.g = f->g, f->ops.beta = f->beta;
    f->ops.o = f->o, f->ops.s = f->s, f->ops.z = f->z;
    f->ops.A_log = f->A_log, f->ops.dt_bias = f->dt_bias;
    f->o_bytes = nv * 2, f->s_bytes = ns * 2, f->z_bytes = f->z ? nz * sizeof(float) : 0;
    f->o_copy = malloc(f->o_bytes), f->s_copy = malloc(f->s_bytes);
    f->z_copy = malloc(f->z_bytes ? f->z_bytes : 1);
    memcpy(f->o_copy, f->o, f->o_bytes);
    memcpy(f->s_copy, f->s, f->s_bytes);
    if (f->z)
        memcpy(f->z_copy, f->z, f->z_bytes);
}

static void dt_teardown(dt_fixture *f)
{
    free(f->o_copy), free(f->s_copy), free(f->z_copy);
    problem_free(&f->mem);
}

static void dt_untouched(const dt_fixture *f, const char *what)
{
    ck_assert_msg(memcmp(f->o_copy, f->o, f->o_bytes) == 0, "%s: o written", what);
    ck_assert_msg(memcmp(f->s_copy, f->s, f->s_bytes) == 0, "%s: s written", what);
    ck_assert_msg(!f->z || memcmp(f->z_copy, f->z, f->z_bytes) == 0, "%s: z written", what);
}

/* linattn_run and linattn_plan_create refuse the call with this status and
 * a message containing sub; nothing is written. */
static void dt_expect(dt_fixture *f, linattn_status want, const char *sub, const char *what)
{
    linattn_status st = linattn_run(f->op, &f->cfg, &f->ops);
    ck_assert_msg(st == want, "%s: linattn_run returned %d (%s), want %d", what, (int)st,
                  linattn_last_error(), (int)want);
    ck_assert_msg(strstr(linattn_last_error(), sub) != NULL,
                  "%s: linattn_last_error() = \"%s\" does not mention \"%s\"", what,
                  linattn_last_error(), sub);
    dt_untouched(f, what);
    linattn_plan *plan = NULL;
    st = linattn_plan_create(&plan, f->op, &f->cfg, &f->ops);
    ck_assert_msg(st == want, "%s: linattn_plan_create returned %d, want %d", what, (int)st,
                  (int)want);
    ck_assert_msg(strstr(linattn_last_error(), sub) != NULL, "%s: plan: \"%s\"", what,
                  linattn_last_error());
    if (st == LINATTN_OK)
        linattn_plan_destroy(plan);
}

/* One bad 0.4.0 field per case: family, gate, the change, what is named. */
START_TEST(dtype_bad_input_writes_nothing)
{
    const int c = _i;
    int delta = 1;
    linattn_gate gate = LINATTN_GATE_TOKEN;
    if (c == 7 || c == 14 || c == 17)
        delta = 0;
    if (c == 7)
        gate = LINATTN_GATE_NONE;
    if (c == 8)
        gate = LINATTN_GATE_HEAD;
    if (c == 20 || c == 22)
        gate = LINATTN_GATE_CHANNEL;
    dt_fixture f;
    dt_setup(&f, delta, gate);
    linattn_config *cfg = &f.cfg;
    linattn_status want = LINATTN_E_ARG;
    const char *sub = NULL;
    static const char *const tnames[] = {"cfg->dtype.q", "cfg->dtype.k", "cfg->dtype.v",
                                         "cfg->dtype.beta", "cfg->dtype.o", "cfg->dtype.s"};
    switch (c) {
    case 0: case 1: case 2: case 3: case 4: case 5: {
        linattn_dtype *t[] = {&cfg->dtype.q, &cfg->dtype.k, &cfg->dtype.v,
                              &cfg->dtype.beta, &cfg->dtype.o, &cfg->dtype.s};
        *t[c] = (linattn_dtype)(3 + c);
        sub = tnames[c];
        break;
    }
    case 6: cfg->dtype.s = LINATTN_F16, sub = "cfg->dtype.s"; break;
    case 7: cfg->gate_act = LINATTN_GATE_ACT_SOFTPLUS, sub = "cfg->gate_act"; break;
    case 8: cfg->gate_act = LINATTN_GATE_ACT_BOUNDED_SIGMOID, sub = "cfg->gate_act"; break;
    case 9: cfg->gate_act = (linattn_gate_act)7, sub = "cfg->gate_act"; break;
    case 10: case 11: case 12: case 13: {
        static const float bounds[] = {0.0f, 0.5f, NAN, -INFINITY};
        cfg->gate_act = LINATTN_GATE_ACT_BOUNDED_SIGMOID;
        cfg->gate_lower_bound = bounds[c - 10];
        sub = "cfg->gate_lower_bound";
        break;
    }
    case 14: cfg->beta_act = LINATTN_BETA_ACT_SIGMOID, sub = "cfg->beta_act"; break;
    case 15: cfg->beta_act = (linattn_beta_act)5, sub = "cfg->beta_act"; break;
    case 16: f.ops.A_log = NULL, want = LINATTN_E_NULL, sub = "A_log"; break;
    case 17: f.A_log[1] = 88.5f, sub = "A_log[1]"; break;
    case 18: f.A_log[0] = NAN, sub = "A_log[0]"; break;
    case 19: f.dt_bias[1] = NAN, sub = "dt_bias[1]"; break;
    case 20: f.dt_bias[1 * DDK + 2] = INFINITY, sub = "dt_bias[h=1,c=2]"; break;
    case 21: f.g[(1 * DH + 0) * DT + 3] = NAN, sub = "g[b=1,h=0,t=3]"; break;
    case 22: f.g[((0 * DH + 1) * DT + 2) * DDK + 4] = INFINITY, sub = "g[b=0,h=1,t=2,c=4]"; break;
    case 23: f.g[(0 * DH + 1) * DT + 5] = -INFINITY, sub = "g[b=0,h=1,t=5]"; break;
    case 24: f.beta[(0 * DH + 1) * DT + 2] = 0x7fc0, sub = "beta[b=0,h=1,t=2]"; break;
    case 25: f.beta[(1 * DH + 1) * DT + 5] = 0xff80, sub = "beta[b=1,h=1,t=5]"; break;
    case 26: /* values, not logits: [0, 2] */
        cfg->beta_act = LINATTN_BETA_ACT_NONE;
        for (int i = 0; i < DB * DH * DT; i++)
            f.beta[i] = bf16_of(0.5f);
        f.beta[(1 * DH + 0) * DT + 4] = bf16_of(2.5f);
        sub = "beta[b=1,h=0,t=4]";
        break;
    case 27: /* float16 values: 0.5 = 0x3800, -0.5 = 0xb800 */
        cfg->beta_act = LINATTN_BETA_ACT_NONE;
        cfg->dtype.beta = LINATTN_F16;
        for (int i = 0; i < DB * DH * DT; i++)
            f.beta[i] = 0x3800;
        f.beta[(0 * DH + 0) * DT + 1] = 0xb800;
        sub = "beta[b=0,h=0,t=1]";
        break;
    case 28: /* a float16 state on a step as well */
        cfg->dtype.s = LINATTN_F16, f.op = LINATTN_OP_DELTA_STEP, sub = "cfg->dtype.s";
        break;
    }
    char what[64];
    snprintf(what, sizeof what, "dtype case %d (%s)", c, sub);
    dt_expect(&f, want, sub, what);
    dt_teardown(&f);
}
END_TEST
enum { N_DTYPE_CASES = 29 };

/* The fixture itself is a good call for every family and gate. */
START_TEST(dtype_fixture_is_good)
{
    for (int delta = 0; delta <= 1; delta++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            dt_fixture f;
            dt_setup(&f, delta, (linattn_gate)gate);
            ck_assert_msg(linattn_run(f.op, &f.cfg, &f.ops) == LINATTN_OK, "%s",
                          linattn_last_error());
            ck_assert_success();
            dt_teardown(&f);
        }
}
END_TEST

/* The four float32 calls refuse any dtype or activation field, naming it,
 * and write nothing. */
START_TEST(float32_calls_refuse_dtype_fields)
{
    for (int field = 0; field < 5; field++)
        for (int call = 0; call < 4; call++) {
            guarded_call c;
            bad_setup(&c, LINATTN_GATE_TOKEN);
            linattn_config cfg = c.p.cfg;
            float *beta = guarded_floats(&c.p, BB * BH * BT, 0);
            for (int i = 0; i < BB * BH * BT; i++)
                beta[i] = 0.5f;
            switch (field) {
            case 0: cfg.dtype.q = LINATTN_BF16; break;
            case 1: cfg.dtype.o = LINATTN_F16; break;
            case 2: cfg.dtype.s = LINATTN_BF16; break;
            case 3: cfg.gate_act = LINATTN_GATE_ACT_SOFTPLUS; break;
            default: cfg.beta_act = LINATTN_BETA_ACT_SIGMOID;
            }
            linattn_status st;
            if (call >= 2)
                cfg.normalize = 0;
            switch (call) {
            case 0:
                st = linattn_forward(&cfg, c.p.q, c.p.k, c.p.v, c.p.g, c.p.o, c.p.s, c.p.z);
                break;
            case 1: st = linattn_step(&cfg, c.p.q, c.p.k, c.p.v, c.p.g, c.p.o, c.p.s, c.p.z); break;
            case 2:
                st = linattn_delta_forward(&cfg, c.p.q, c.p.k, c.p.v, c.p.g, beta, c.p.o, c.p.s);
                break;
            default:
                st = linattn_delta_step(&cfg, c.p.q, c.p.k, c.p.v, c.p.g, beta, c.p.o, c.p.s);
            }
            ck_assert_msg(st == LINATTN_E_ARG, "field %d call %d: %d", field, call, (int)st);
            static const char *names[5] = {"cfg->dtype.q = 1", "cfg->dtype.o = 2",
                                           "cfg->dtype.s = 1", "cfg->gate_act = 1",
                                           "cfg->beta_act = 1"};
            ck_assert_error_has(names[field]); /* the field set, and its value */
            ck_assert_error_has("linattn_run");
            check_untouched(&c, "float32 call with a dtype field");
            bad_teardown(&c);
        }
}
END_TEST

/* A 0.3 caller's linattn_config and linattn_operands through linattn_run
 * (and the config through the float32 calls): OK, the float32 defaults,
 * bitwise the same as the current structs. The 0.3 config's sizeof is the
 * end of z_compensated rounded up to 8 (264 on LP64): its 4 bytes of tail
 * padding lie where dtype is now, and are filled with 0xff here so a
 * library that read them would refuse the call (found by this test: 0.4.0
 * first accepted only the unpadded 260). The operands end on an int64.
 * Each struct ends at a guard page. */
START_TEST(structs_from_0_3_caller)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t cfg_end = offsetof(linattn_config, dtype);
    const size_t cfg_sizeof = (cfg_end + 7) / 8 * 8; /* the 0.3 sizeof */
    const size_t ops_size = offsetof(linattn_operands, A_log);
    unsigned char *map =
        mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(map, MAP_FAILED);
    ck_assert_int_eq(mprotect(map + page, page, PROT_NONE), 0);
    ck_assert_int_eq(mprotect(map + 3 * page, page, PROT_NONE), 0);
    linattn_config *old_cfg = (linattn_config *)(void *)(map + page - cfg_sizeof);
    linattn_operands *old_ops = (linattn_operands *)(void *)(map + 3 * page - ops_size);
    ck_assert_uint_eq(ops_size % 8, 0);
    for (int delta = 0; delta <= 1; delta++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int sz = 0; sz <= 1; sz++) {
                const size_t cfg_size = sz ? cfg_sizeof : cfg_end;
                spec sp = spec_default(2, 3, 11, 6, 5);
                sp.gate = (linattn_gate)gate;
                sp.with_state = 1;
                sp.normalize = !delta;
                sp.g_lo = -1.0f, sp.g_hi = -0.01f;
                problem p;
                problem_make(&p, &sp);
                float *beta = guarded_floats(&p, 2 * 3 * 11, 0);
                for (int i = 0; i < 2 * 3 * 11; i++)
                    beta[i] = rand_uniform(0, 1);
                const size_t no = 2 * 3 * 11 * 5, ns = 2 * 3 * 6 * 5, nz = 2 * 3 * 6;
                const linattn_op op = delta ? LINATTN_OP_DELTA_FORWARD : LINATTN_OP_FORWARD;
                linattn_operands ops;
                linattn_operands_init(&ops);
                ops.q = p.q, ops.k = p.k, ops.v = p.v, ops.g = p.g;
                ops.beta = delta ? beta : NULL;
                ops.o = p.o, ops.s = p.s, ops.z = delta ? NULL : p.z;
                ck_assert_int_eq(linattn_run(op, &p.cfg, &ops), LINATTN_OK);
                float *o_ref = snapshot(p.o, no), *s_ref = snapshot(p.s, ns),
                      *z_ref = snapshot(p.z, nz);
                memset(old_cfg, 0xff, cfg_sizeof);
                memcpy(old_cfg, &p.cfg, cfg_end);
                old_cfg->struct_size = cfg_size;
                memcpy(old_ops, &ops, ops_size);
                old_ops->struct_size = ops_size;
                for (int entry = 0; entry <= 1; entry++) {
                    memcpy(p.s, p.s_init, ns * sizeof(float));
                    memcpy(p.z, p.z_init, nz * sizeof(float));
                    for (size_t i = 0; i < no; i++)
                        p.o[i] = NAN;
                    const linattn_status st =
                        entry == 0 ? linattn_run(op, old_cfg, old_ops)
                        : delta    ? linattn_delta_forward(old_cfg, p.q, p.k, p.v, p.g, beta, p.o,
                                                           p.s)
                                   : linattn_forward(old_cfg, p.q, p.k, p.v, p.g, p.o, p.s, p.z);
                    ck_assert_msg(st == LINATTN_OK, "0.3 config of %zu bytes, %s: %s", cfg_size,
                                  entry ? "float32 call" : "linattn_run", linattn_last_error());
                    ck_assert_success();
                    ck_assert_msg(same_bytes(o_ref, p.o, no) && same_bytes(s_ref, p.s, ns) &&
                                      same_bytes(z_ref, p.z, nz),
                                  "0.3 structs, %s gate %s: result differs",
                                  delta ? "delta" : "additive", gate_names[gate]);
                }
                /* sizes between the releases are refused */
                old_ops->struct_size = ops_size + 8;
                ck_assert_int_eq(linattn_run(op, old_cfg, old_ops), LINATTN_E_ARG);
                ck_assert_error_has("ops->struct_size");
                old_ops->struct_size = ops_size;
                old_cfg->struct_size = cfg_end - 4;
                ck_assert_int_eq(linattn_run(op, old_cfg, old_ops), LINATTN_E_ARG);
                ck_assert_error_has("cfg->struct_size");
                free(o_ref), free(s_ref), free(z_ref);
                problem_free(&p);
            }
    munmap(map, 4 * page);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *bad = tcase_create("bad_input");
    tcase_add_loop_test(bad, bad_input_writes_nothing, 0, N_BAD_CASES);
    tcase_add_loop_test(bad, delta_bad_input_writes_nothing, 0, N_DELTA_CASES);
    tcase_add_test(bad, step_requires_state);
    tcase_add_test(bad, inactive_isa_is_an_error);
    tcase_add_test(bad, decay_factor_named);
    tcase_add_test(bad, gate_check_on_threads_names_first);
    tcase_add_test(bad, gate_check_names_every_position);
    tcase_add_test(bad, uninitialised_config_named);
    tcase_add_test(bad, last_error_is_thread_local);
    tcase_add_test(bad, interleaved_o_is_rejected);
    tcase_add_test(bad, dtype_fixture_is_good);
    tcase_add_loop_test(bad, dtype_bad_input_writes_nothing, 0, N_DTYPE_CASES);
    tcase_add_test(bad, float32_calls_refuse_dtype_fields);
    suite_add_tcase(s, bad);

    TCase *ignored = tcase_create("ignored_fields");
    tcase_add_test(ignored, step_ignores_seq_len_and_token_strides);
    tcase_add_test(ignored, forward_ignores_unused_g_strides);
    tcase_add_test(ignored, config_from_0_1_caller);
    tcase_add_test(ignored, structs_from_0_3_caller);
    tcase_add_test(ignored, config_init_step_decodes_per_token_buffers);
    suite_add_tcase(s, ignored);

    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 120);
    tcase_add_loop_test(limits, huge_workspace_refused, LINATTN_ISA_SCALAR, isa_limit());
    tcase_add_test(limits, huge_zero_state_refused);
    tcase_add_test(limits, absurd_thread_counts);
    tcase_add_test(limits, delta_fuzzer_findings);
    suite_add_tcase(s, limits);
    return s;
}

int main(void)
{
    test_seed();
    SRunner *sr = srunner_create(api_suite());
    fork_mode = srunner_fork_status(sr);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
