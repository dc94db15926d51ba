/* The whole suite against one kernel table, named by LINATTN_TEST_TABLE
 * (meson registers one test per table the build has). A table this CPU
 * cannot run is reported as skipped (exit 77). Every case compares with the
 * double oracle of the maths (oracle.c) within tolerance.h. Bad input
 * does not depend on the table: test_api.c checks it once. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "table.h"
#include "oracle.h"
#include "tolerance.h"

static const la_table *table;

/* Check runs each test in a child process: activate the table there. */
static void use_table(void) { la_force_table(table); }

static void expect_ok(problem *p)
{
    const linattn_status st = problem_forward(p);
    ck_assert_msg(st == LINATTN_OK, "%s: %s", spec_name(&p->sp), linattn_strerror(st));
    const double e = problem_error(p);
    ck_assert_msg(e <= 1.0, "%s: error %.3g of the bound", spec_name(&p->sp), e);
}

static void run_spec(const spec *sp)
{
    problem p;
    problem_make(&p, sp);
    expect_ok(&p);
    problem_free(&p);
}

/* p's whole sequence as two linattn_forward calls from the same buffers,
 * the first of `split` tokens, carrying s and z from one to the other. */
static void forward_in_two(problem *p, int64_t split)
{
    const linattn_config *c = &p->cfg;
    linattn_config first = *c, second = *c;
    first.seq_len = split, second.seq_len = c->seq_len - split;
    const float *g2 = p->g && c->gate != LINATTN_GATE_HEAD ? p->g + split * c->g.token : p->g;
    ck_assert_int_eq(linattn_forward(&first, p->q, p->k, p->v, p->g, p->o, p->s, p->z),
                     LINATTN_OK);
    ck_assert_int_eq(linattn_forward(&second, p->q + split * c->q.token,
                                     p->k + split * c->k.token, p->v + split * c->v.token, g2,
                                     p->o + split * c->o.token, p->s, p->z),
                     LINATTN_OK);
}

/* p's whole sequence token by token through linattn_step (p's threads),
 * from the state its s and z hold. */
static void steps_through(problem *p)
{
    const linattn_config *c = &p->cfg;
    linattn_config step = *c;
    step.seq_len = 1;
    for (int64_t t = 0; t < c->seq_len; t++) {
        const float *g = p->g && c->gate != LINATTN_GATE_HEAD ? p->g + t * c->g.token : p->g;
        ck_assert_int_eq(linattn_step(&step, p->q + t * c->q.token, p->k + t * c->k.token,
                                      p->v + t * c->v.token, g, p->o + t * c->o.token, p->s,
                                      p->z),
                         LINATTN_OK);
    }
}

/* Sizes below, at and above every vector width (4, 8, 16) and chunk size. */
static const int64_t grid_T[] = {1, 2, 63, 64, 65, 1000};
static const int64_t grid_d[][2] = {{1, 1}, {3, 17}, {16, 16}, {17, 3},   {64, 64},
                                    {65, 65}, {128, 128}, {1, 128}, {129, 1}, {17, 65}};

/* _i: 0 = chunked, 1 = recurrent; every gate, phi and normaliser rotates
 * over the grid so each shape meets several of them. */
START_TEST(grid_against_oracle)
{
    const linattn_algo algo = _i == 0 ? LINATTN_ALGO_CHUNKED : LINATTN_ALGO_RECURRENT;
    int n = 0;
    for (size_t ti = 0; ti < sizeof grid_T / sizeof grid_T[0]; ti++)
        for (size_t di = 0; di < sizeof grid_d / sizeof grid_d[0]; di++) {
            const int64_t T = grid_T[ti], dk = grid_d[di][0], dv = grid_d[di][1];
            if (T == 1000 && dk * dv > 64 * 64)
                continue; /* keeps the oracle quick; long T with big heads below */
            for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++, n++) {
                spec sp = spec_default(2, 2, T, dk, dv);
                sp.algo = algo;
                sp.gate = (linattn_gate)gate;
                sp.phi = n % 3 == 2 ? LINATTN_PHI_ELU1 : (linattn_phi)(n % 3);
                sp.normalize = sp.phi != LINATTN_PHI_IDENTITY && (n / 3) % 2 == 0;
                sp.with_state = n % 5 != 0;
                run_spec(&sp);
            }
        }
}
END_TEST

START_TEST(long_sequence_big_heads)
{
    spec sp = spec_default(1, 2, 1000, 128, 128);
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
        sp.gate = (linattn_gate)gate;
        sp.algo = LINATTN_ALGO_CHUNKED;
        sp.with_state = 1;
        run_spec(&sp);
    }
    spec big = spec_default(1, 1, 300, 256, 256);
    big.normalize = 0;
    big.gate = LINATTN_GATE_TOKEN;
    run_spec(&big);
}
END_TEST

/* Every feature map with and without the normaliser, for each algorithm.
 * Identity features can make the normaliser cross zero; with q, k > 0 the
 * denominators stay positive and the case is well-conditioned. */
START_TEST(feature_maps)
{
    for (int phi = LINATTN_PHI_ELU1; phi <= LINATTN_PHI_IDENTITY; phi++)
        for (int norm = 0; norm <= 1; norm++)
            for (int algo = LINATTN_ALGO_AUTO; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                spec sp = spec_default(2, 3, 77, 19, 33);
                sp.phi = (linattn_phi)phi;
                sp.normalize = norm;
                sp.algo = (linattn_algo)algo;
                sp.gate = (linattn_gate)((phi + algo) % 4);
                if (phi == LINATTN_PHI_IDENTITY && norm)
                    sp.qk_lo = 0.05f;
                run_spec(&sp);
            }
}
END_TEST

START_TEST(scale_applies_to_queries)
{
    spec sp = spec_default(1, 2, 70, 16, 16);
    sp.normalize = 0;
    problem p;
    problem_make(&p, &sp);
    p.cfg.scale = 0.125f;
    expect_ok(&p);
    problem_free(&p);
}
END_TEST

/* scale and eps away from their defaults in every form (eps large enough
 * to move every output: a kernel that dropped or misplaced either fails),
 * causal and not, with and without a gate, and through steps. */
START_TEST(scale_and_eps_against_oracle)
{
    static const float scales[] = {0.125f, 3.0f};
    for (int algo = LINATTN_ALGO_AUTO; algo <= LINATTN_ALGO_RECURRENT; algo++)
        for (int gate = 0; gate <= 1; gate++)
            for (int causal = gate; causal <= 1; causal++)
                for (int norm = 0; norm <= 1; norm++) {
                    spec sp = spec_default(1, 2, 70, 17, 20);
                    sp.algo = (linattn_algo)algo;
                    sp.gate = gate ? LINATTN_GATE_TOKEN : LINATTN_GATE_NONE;
                    sp.causal = causal;
                    sp.normalize = norm;
                    sp.with_state = 1;
                    problem p;
                    problem_make(&p, &sp);
                    p.cfg.scale = scales[(algo + norm) % 2];
                    p.cfg.eps = 0.5f;
                    expect_ok(&p);
                    if (causal && algo == LINATTN_ALGO_AUTO) { /* token by token */
                        const size_t ns = (size_t)(2 * 17 * 20), nz = (size_t)(2 * 17);
                        memcpy(p.s, p.s_init, ns * sizeof(float));
                        memcpy(p.z, p.z_init, nz * sizeof(float));
                        steps_through(&p);
                        ck_assert_msg(problem_error(&p) <= 1.0, "steps, scale %g eps 0.5: %s",
                                      (double)p.cfg.scale, spec_name(&sp));
                    }
                    problem_free(&p);
                }
}
END_TEST

START_TEST(noncausal_against_oracle)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {65, 3, 17}, {200, 64, 64}, {33, 129, 65}};
    for (size_t i = 0; i < 4; i++)
        for (int norm = 0; norm <= 1; norm++)
            for (int state = 0; state <= 1; state++) {
                spec sp = spec_default(2, 2, shapes[i][0], shapes[i][1], shapes[i][2]);
                sp.causal = 0;
                sp.normalize = norm;
                sp.with_state = state;
                sp.phi = norm ? LINATTN_PHI_ELU1 : LINATTN_PHI_RELU;
                run_spec(&sp);
            }
}
END_TEST

START_TEST(strided_layouts)
{
    for (int layout = LAYOUT_BHTD; layout <= LAYOUT_MQA; layout++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                spec sp = spec_default(2, 3, 67, 17, 24);
                sp.layout = (layout_kind)layout;
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.with_state = 1;
                run_spec(&sp);
            }
    spec nc = spec_default(2, 3, 40, 8, 9);
    nc.layout = LAYOUT_PACKED_QKV;
    nc.causal = 0;
    run_spec(&nc);
}
END_TEST

START_TEST(unaligned_pointers)
{
    static const int64_t dims[][2] = {{1, 1}, {7, 9}, {16, 16}, {33, 65}};
    for (size_t i = 0; i < 4; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            spec sp = spec_default(1, 2, 70, dims[i][0], dims[i][1]);
            sp.unaligned = 1;
            sp.with_state = 1;
            sp.gate = (linattn_gate)gate;
            sp.algo = gate % 2 ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_CHUNKED;
            run_spec(&sp);
            sp.causal = gate == LINATTN_GATE_NONE ? 0 : 1;
            run_spec(&sp);
        }
}
END_TEST

START_TEST(chunk_sizes)
{
    static const int64_t chunks[] = {1, 2, 7, 16, 64, 100, 5000};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            spec sp = spec_default(1, 2, 150, 20, 12);
            sp.algo = LINATTN_ALGO_CHUNKED;
            sp.chunk = chunks[i];
            sp.gate = (linattn_gate)gate;
            sp.with_state = 1;
            run_spec(&sp);
        }
}
END_TEST

/* g = -20 on every token: e^(-b_j) would overflow if formed. */
START_TEST(strong_decay)
{
    for (int gate = LINATTN_GATE_HEAD; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++)
            for (int norm = 0; norm <= 1; norm++) {
                spec sp = spec_default(1, 2, 300, 32, 32);
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.normalize = norm;
                sp.with_state = 1;
                sp.chunk = 128;
                sp.g_lo = sp.g_hi = -20.0f;
                run_spec(&sp);
                sp.g_lo = -30.0f, sp.g_hi = 0.0f; /* mixed strong and weak */
                run_spec(&sp);
            }
}
END_TEST

/* A very negative gate is a full reset, exact in every algorithm for any
 * finite g down to -FLT_MAX: the small decays after it keep their precision
 * (a prefix sum of -1e16 and -0.3 would lose the -0.3). */
START_TEST(full_resets_by_huge_negative_gates)
{
    static const float resets[] = {-90.0f, -150.0f, -1e13f, -1e16f, -1e30f, -FLT_MAX};
    for (int gate = LINATTN_GATE_HEAD; gate <= LINATTN_GATE_CHANNEL; gate++)
        for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++)
            for (size_t r = 0; r < sizeof resets / sizeof resets[0]; r++) {
                spec sp = spec_default(1, 2, 70, 16, 17);
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.normalize = (int)(r % 2);
                sp.with_state = 1;
                sp.g_lo = -0.4f, sp.g_hi = -0.2f;
                problem p;
                problem_make(&p, &sp);
                if (gate == LINATTN_GATE_HEAD)
                    p.g[1] = resets[r]; /* head 1 resets on every token */
                else /* resets on a few tokens of head 0 (and channel 3) */
                    for (int64_t t = 5; t < 70; t += 23)
                        p.g[gate == LINATTN_GATE_TOKEN ? t : t * 16 + 3] = resets[r];
                expect_ok(&p);
                problem_free(&p);
            }
}
END_TEST

/* The exact case: v = k = q = 1, dk = dv = 1, no normaliser, g = {-0.3,
 * -1e16, -0.3, -0.3}: token 3 is 1 + e^-0.3 + e^-0.6 on every path. */
START_TEST(reset_keeps_later_decays)
{
    for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
        const float ones[4] = {1, 1, 1, 1}, g[4] = {-0.3f, -1e16f, -0.3f, -0.3f};
        float o[4] = {0};
        linattn_config cfg;
        linattn_config_init(&cfg, 1, 1, 4, 1, 1);
        linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
        cfg.phi = LINATTN_PHI_IDENTITY;
        cfg.normalize = 0;
        cfg.algo = (linattn_algo)algo;
        ck_assert_int_eq(linattn_forward(&cfg, ones, ones, ones, g, o, NULL, NULL), LINATTN_OK);
        const double want = 1.0 + exp(-0.3) + exp(-0.6);
        ck_assert_msg(fabs(o[3] - want) <= 2e-6 * want, "algo %d: o[3] = %.9g, want %.9g", algo,
                      (double)o[3], want);
    }
}
END_TEST

/* elu+1 features of keys far below 0 are e^k, tiny normal floats down to
 * k = -87.3, on every table and path: with the normaliser (eps = 0) o is a
 * weighted mean of v whatever the features' common scale, so keys in
 * [-87, -80.5] (features 1.6e-38 to 1.1e-35) give the o of the same keys
 * plus 80 (every feature e^80 times larger). The avx512 table cut its
 * features to 0 below -80, as decays are cut, and made 0/0 here (a fuzz
 * hunt's finding). Chunked, recurrent, non-causal forwards and steps. */
START_TEST(tiny_features_scale_free)
{
    enum { H = 2, T = 20, DK = 5, DV = 3 };
    float q[H * T * DK], k[H * T * DK], k80[H * T * DK], v[H * T * DV];
    for (int i = 0; i < H * T * DK; i++) {
        q[i] = rand_uniform(-1.0f, 1.0f);
        k[i] = rand_uniform(-87.0f, -80.5f);
        k80[i] = k[i] + 80.0f;
    }
    for (int i = 0; i < H * T * DV; i++)
        v[i] = rand_uniform(-1.0f, 1.0f);
    for (int form = 0; form < 4; form++) {
        float o[2][H * T * DV];
        for (int shifted = 0; shifted <= 1; shifted++) {
            const float *kk = shifted ? k80 : k;
            linattn_config c;
            if (form < 3) {
                linattn_config_init(&c, 1, H, T, DK, DV);
                c.eps = 0.0f;
                c.algo = form == 0 ? LINATTN_ALGO_CHUNKED : LINATTN_ALGO_RECURRENT;
                c.causal = form != 2;
                ck_assert_int_eq(linattn_forward(&c, q, kk, v, NULL, o[shifted], NULL, NULL),
                                 LINATTN_OK);
                continue;
            }
            float s[H * DK * DV] = {0}, z[H * DK] = {0}, qt[H * DK], kt[H * DK], vt[H * DV];
            float ot[H * DV];
            linattn_config_init_step(&c, 1, H, DK, DV);
            c.eps = 0.0f;
            for (int t = 0; t < T; t++) {
                for (int h = 0; h < H; h++) {
                    memcpy(qt + h * DK, q + (h * T + t) * DK, DK * sizeof(float));
                    memcpy(kt + h * DK, kk + (h * T + t) * DK, DK * sizeof(float));
                    memcpy(vt + h * DV, v + (h * T + t) * DV, DV * sizeof(float));
                }
                ck_assert_int_eq(linattn_step(&c, qt, kt, vt, NULL, ot, s, z), LINATTN_OK);
                for (int h = 0; h < H; h++)
                    memcpy(o[shifted] + (h * T + t) * DV, ot + h * DV, DV * sizeof(float));
            }
        }
        for (int i = 0; i < H * T * DV; i++)
            ck_assert_msg(fabsf(o[0][i] - o[1][i]) <= 1e-4f * fmaxf(1.0f, fabsf(o[1][i])),
                          "%s: o[%d] = %.9g with features e^-80 times those giving %.9g",
                          (const char *[]){"chunked", "recurrent", "non-causal", "steps"}[form],
                          i, (double)o[0][i], (double)o[1][i]);
    }
}
END_TEST

/* The normaliser over a long run (gate NONE: z grows linearly, so each
 * float addition loses more of kh): the recurrent forward compensates its
 * sum within the call, and steps with z_compensated carry the compensation
 * across calls. A plain float sum is off by ~1e-4 after 2^20 tokens and by
 * ~3e-3 after 2^22; the compensated ones stay near 1e-7 (2^22 is the
 * documented long-run check; 2^18 here keeps the suite quick). */
START_TEST(long_run_normaliser)
{
    enum { DK = 8, DV = 8 };
    const int64_t T = (int64_t)1 << 18, steps = (int64_t)1 << 16;
    float *k = malloc(sizeof(float) * (size_t)(T * DK)),
          *v = malloc(sizeof(float) * (size_t)(T * DV));
    float *o = malloc(sizeof(float) * (size_t)(T * DV));
    for (int64_t i = 0; i < T * DK; i++)
        k[i] = rand_uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < T * DV; i++)
        v[i] = rand_uniform(-1.0f, 1.0f);
    for (int pass = 0; pass < 2; pass++) {
        const int64_t n = pass == 0 ? T : steps;
        float s[DK * DV] = {0}, z[2 * DK] = {0};
        linattn_config c;
        if (pass == 0) {
            linattn_config_init(&c, 1, 1, T, DK, DV);
            c.algo = LINATTN_ALGO_RECURRENT;
            ck_assert_int_eq(linattn_forward(&c, k, k, v, NULL, o, s, z), LINATTN_OK);
        } else {
            linattn_config_init_step(&c, 1, 1, DK, DV);
            c.z_compensated = 1;
            for (int64_t t = 0; t < n; t++) {
                const linattn_status st =
                    linattn_step(&c, k + t * DK, k + t * DK, v + t * DV, NULL, o, s, z);
                expect_msg(st == LINATTN_OK, "step %lld: %s", (long long)t, linattn_last_error());
            }
        }
        for (int ch = 0; ch < DK; ch++) {
            double ref = 0.0;
            for (int64_t t = 0; t < n; t++) {
                const double x = k[t * DK + ch];
                ref += x > 0 ? x + 1 : exp(x);
            }
            const double got = (double)z[ch] + (pass ? (double)z[DK + ch] : 0.0);
            ck_assert_msg(fabs(got - ref) <= 1e-6 * ref, "%s, channel %d: z = %.9g, want %.9g",
                          pass ? "compensated steps" : "recurrent forward", ch, got, ref);
        }
    }
    free(k), free(v), free(o);
}
END_TEST

/* Grouped value heads (GROUPED and TILED maps, 2x and 4x value heads per
 * q/k head) and unit-norm q, k, with every gate and feature map. */
START_TEST(grouped_heads_and_l2norm)
{
    enum { B = 2, H = 4, T = 50, DK = 17, DV = 9 };
    for (int qkh = 1; qkh <= 2; qkh++)
        for (int map = 0; map <= 1; map++)
            for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
                linattn_config c;
                linattn_config_init(&c, B, H, T, DK, DV);
                linattn_config_set_gate(&c, (linattn_gate)gate);
                c.qk_heads = qkh;
                c.head_map = (linattn_head_map)map;
                c.qk_l2norm = 1;
                c.phi = (linattn_phi)((gate + map) % 3);
                c.normalize = c.phi != LINATTN_PHI_IDENTITY;
                c.algo = (linattn_algo)(1 + (gate + qkh) % 2);
                c.q = c.k = (linattn_strides){qkh * T * DK, T * DK, DK};
                float *q = malloc(sizeof(float) * B * qkh * T * DK);
                float *k = malloc(sizeof(float) * B * qkh * T * DK);
                float *v = malloc(sizeof(float) * B * H * T * DV);
                float *g = malloc(sizeof(float) * B * H * T * DK);
                float *o = malloc(sizeof(float) * B * H * T * DV);
                for (int i = 0; i < B * qkh * T * DK; i++)
                    q[i] = rand_uniform(-1, 1), k[i] = rand_uniform(-1, 1);
                for (int i = 0; i < B * H * T * DV; i++)
                    v[i] = rand_uniform(-1, 1);
                for (int i = 0; i < B * H * T * DK; i++)
                    g[i] = rand_uniform(-1, 0);
                ck_assert_int_eq(linattn_forward(&c, q, k, v, gate ? g : NULL, o, NULL, NULL),
                                 LINATTN_OK);
                double *ref = malloc(sizeof(double) * B * H * T * DV);
                double *sr = malloc(sizeof(double) * B * H * DK * DV);
                double *zr = malloc(sizeof(double) * B * H * DK);
                oracle_forward(&c, 0, q, k, v, g, NULL, NULL, ref, sr, zr);
                for (int bh = 0; bh < B * H; bh++) {
                    double err = 0, big = 1;
                    /* comparisons, not fmax: aarch64 GCC 12's vectoriser
                     * crashes on an fmax reduction here */
                    for (int i = 0; i < T * DV; i++) {
                        const double r = ref[bh * T * DV + i];
                        const double d = fabs(o[bh * T * DV + i] - r);
                        err = d > err ? d : err;
                        big = fabs(r) > big ? fabs(r) : big;
                    }
                    ck_assert_msg(err <= LA_TOL_REL * big,
                                  "qk_heads %d map %d gate %d phi %d head %d: error %.3g", qkh, map,
                                  gate, (int)c.phi, bh, err / big);
                }
                free(q), free(k), free(v), free(g), free(o), free(ref), free(sr), free(zr);
            }
}
END_TEST

/* Feeding a sequence in two calls that carry the state equals one call,
 * wherever the split falls. */
START_TEST(state_carried_across_calls)
{
    static const int64_t splits[] = {1, 31, 32, 33, 64, 99};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            const int64_t T = 100, split = splits[i];
            spec sp = spec_default(2, 2, T, 24, 20);
            sp.gate = (linattn_gate)gate;
            sp.with_state = 1;
            sp.algo = i % 2 ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_AUTO;
            problem p;
            problem_make(&p, &sp);
            forward_in_two(&p, split);
            const double e = problem_error(&p);
            ck_assert_msg(e <= 1.0, "split at %lld: %s: %.3g", (long long)split, spec_name(&sp), e);
            problem_free(&p);
        }
}
END_TEST

/* Decode steps carrying the state match the oracle of the whole sequence. */
START_TEST(steps_against_oracle)
{
    /* and rows wider than the tables' register columns (avx512: 128 or 256
     * in registers, the rest summed in o), ending inside a vector or not */
    static const int64_t dims[][2] = {{1, 1},  {3, 17},  {16, 16}, {65, 33}, {128, 128},
                                      {129, 7}, {5, 129}, {3, 255}, {17, 256}, {9, 257},
                                      {4, 520}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int norm = 0; norm <= 1; norm++) {
                const int64_t T = 20;
                spec sp = spec_default(2, 3, T, dims[i][0], dims[i][1]);
                sp.gate = (linattn_gate)gate;
                sp.normalize = norm;
                sp.with_state = 1;
                sp.unaligned = (int)(i % 2);
                sp.threads = 1 + (int)(i % 2);
                problem p;
                problem_make(&p, &sp);
                steps_through(&p); /* one token per (b, h) from the [B][H][T][D] buffers */
                const double e = problem_error(&p);
                ck_assert_msg(e <= 1.0, "steps: %s: %.3g", spec_name(&sp), e);
                problem_free(&p);
            }
}
END_TEST

START_TEST(chunked_matches_recurrent)
{
    for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
        spec sp = spec_default(1, 2, 513, 48, 40);
        sp.gate = (linattn_gate)gate;
        sp.algo = LINATTN_ALGO_CHUNKED;
        problem a, b;
        problem_make(&a, &sp);
        problem_make(&b, &sp);
        /* same inputs: copy a's into b */
        memcpy(b.q, a.q, sizeof(float) * (size_t)(1 * 2 * 513 * 48));
        memcpy(b.k, a.k, sizeof(float) * (size_t)(1 * 2 * 513 * 48));
        memcpy(b.v, a.v, sizeof(float) * (size_t)(1 * 2 * 513 * 40));
        if (a.g) {
            const size_t ng = gate == LINATTN_GATE_HEAD    ? 2
                              : gate == LINATTN_GATE_TOKEN ? 2 * 513
                                                           : 2 * 513 * 48;
            memcpy(b.g, a.g, sizeof(float) * ng);
        }
        b.cfg.algo = LINATTN_ALGO_RECURRENT;
        ck_assert_int_eq(problem_forward(&a), LINATTN_OK);
        ck_assert_int_eq(problem_forward(&b), LINATTN_OK);
        const double d = problem_distance(&a, &b);
        ck_assert_msg(d <= LA_TOL_REL, "gate %d: chunked vs recurrent %.3g", gate, d);
        problem_free(&a);
        problem_free(&b);
    }
}
END_TEST

/* Results are bitwise identical for any thread count: with more heads than
 * threads (heads run in parallel) and with one head (its chunks, or its
 * value columns (40 = 16 + 16 + 8 on three threads), do). */
START_TEST(threads_bitwise_equal)
{
    static const int64_t shapes[][3] = {{2, 3, 130}, {1, 1, 1000}};
    for (int sh = 0; sh < 2; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_AUTO; algo <= LINATTN_ALGO_RECURRENT; algo++)
                for (int state = 0; state <= 1; state++)
                    for (int causal = gate == LINATTN_GATE_NONE ? 0 : 1; causal <= 1; causal++) {
                        const int64_t B = shapes[sh][0], H = shapes[sh][1], T = shapes[sh][2];
                        spec sp = spec_default(B, H, T, 32, 40);
                        sp.gate = (linattn_gate)gate;
                        sp.algo = (linattn_algo)algo;
                        sp.with_state = state;
                        sp.causal = causal;
                        sp.chunk = sh ? 16 : 0;
                        problem p;
                        problem_make(&p, &sp);
                        const size_t no = (size_t)(B * H * T * 40), ns = (size_t)(B * H * 32 * 40);
                        const size_t nz = (size_t)(B * H * 32);
                        float *o1 = malloc(no * sizeof(float)), *s1 = malloc(ns * sizeof(float));
                        float *z1 = malloc(nz * sizeof(float));
                        for (int threads = 1; threads <= 3; threads++) {
                            if (state) {
                                memcpy(p.s, p.s_init, ns * sizeof(float));
                                memcpy(p.z, p.z_init, nz * sizeof(float));
                            }
                            p.cfg.num_threads = threads;
                            ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                            if (threads == 1) {
                                memcpy(o1, p.o, no * sizeof(float));
                                if (state) {
                                    memcpy(s1, p.s, ns * sizeof(float));
                                    memcpy(z1, p.z, nz * sizeof(float));
                                }
                                continue;
                            }
                            ck_assert_msg(memcmp(o1, p.o, no * sizeof(float)) == 0,
                                          "o differs with %d threads: %s", threads, spec_name(&sp));
                            ck_assert_msg(!state || memcmp(s1, p.s, ns * sizeof(float)) == 0,
                                          "s differs with %d threads: %s", threads, spec_name(&sp));
                            ck_assert_msg(!state || memcmp(z1, p.z, nz * sizeof(float)) == 0,
                                          "z differs with %d threads: %s", threads, spec_name(&sp));
                        }
                        ck_assert_msg(problem_error(&p) <= 1.0, "%s", spec_name(&sp));
                        free(o1);
                        free(s1);
                        free(z1);
                        problem_free(&p);
                    }
}
END_TEST

/* Decode steps give the same bits on 1, 2 and 3 threads: heads shared out,
 * and one head's columns split. */
START_TEST(steps_threads_bitwise_equal)
{
    static const int64_t shapes[][2] = {{2, 3}, {1, 1}};
    for (int sh = 0; sh < 2; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++) {
            const int64_t B = shapes[sh][0], H = shapes[sh][1], T = 6, dk = 32, dv = 40;
            spec sp = spec_default(B, H, T, dk, dv);
            sp.gate = (linattn_gate)gate;
            sp.with_state = 1;
            problem p;
            problem_make(&p, &sp);
            const size_t no = (size_t)(B * H * T * dv), ns = (size_t)(B * H * dk * dv);
            const size_t nz = (size_t)(B * H * dk);
            float *o1 = NULL, *s1 = NULL, *z1 = NULL;
            for (int threads = 1; threads <= 3; threads++) {
                memcpy(p.s, p.s_init, ns * sizeof(float));
                memcpy(p.z, p.z_init, nz * sizeof(float));
                p.cfg.num_threads = threads;
                steps_through(&p);
                if (threads == 1) {
                    o1 = copy_floats(p.o, no), s1 = copy_floats(p.s, ns);
                    z1 = copy_floats(p.z, nz);
                    ck_assert_msg(problem_error(&p) <= 1.0, "steps: %s", spec_name(&sp));
                    continue;
                }
                ck_assert_msg(memcmp(o1, p.o, no * sizeof(float)) == 0 &&
                                  memcmp(s1, p.s, ns * sizeof(float)) == 0 &&
                                  memcmp(z1, p.z, nz * sizeof(float)) == 0,
                              "steps on %d threads differ: %s", threads, spec_name(&sp));
            }
            free(o1), free(s1), free(z1);
            problem_free(&p);
        }
}
END_TEST

/* Steps and short AUTO calls of heads large enough that their value
 * columns are shared over threads (no normaliser; at least 128 KiB of
 * state a share): against the oracle, and bitwise the same on 1-3 threads,
 * where the shares end inside a register tile of the unsplit sweep (dv =
 * 1040 on 3 threads: shares of 352 columns). */
START_TEST(steps_split_columns)
{
    static const int64_t shapes[][4] = {{1, 1, 128, 1040}, {1, 1, 72, 1000}, {2, 1, 100, 700}};
    for (int sh = 0; sh < 3; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int steps = 0; steps <= 1; steps++) {
                const int64_t B = shapes[sh][0], H = shapes[sh][1], T = 3;
                const int64_t dk = shapes[sh][2], dv = shapes[sh][3];
                spec sp = spec_default(B, H, T, dk, dv);
                sp.gate = (linattn_gate)gate;
                sp.normalize = 0;
                sp.with_state = 1;
                sp.phi = (linattn_phi)(sh % 3);
                problem p;
                problem_make(&p, &sp);
                const size_t no = (size_t)(B * H * T * dv), ns = (size_t)(B * H * dk * dv);
                float *o1 = NULL, *s1 = NULL;
                for (int threads = 1; threads <= 3; threads++) {
                    memcpy(p.s, p.s_init, ns * sizeof(float));
                    p.cfg.num_threads = threads;
                    if (steps)
                        steps_through(&p);
                    else
                        ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                    if (threads == 1) {
                        o1 = copy_floats(p.o, no), s1 = copy_floats(p.s, ns);
                        ck_assert_msg(problem_error(&p) <= 1.0, "%s: %s",
                                      steps ? "steps" : "short call", spec_name(&sp));
                        continue;
                    }
                    ck_assert_msg(memcmp(o1, p.o, no * sizeof(float)) == 0 &&
                                      memcmp(s1, p.s, ns * sizeof(float)) == 0,
                                  "%s on %d threads differ: %s", steps ? "steps" : "short call",
                                  threads, spec_name(&sp));
                }
                free(o1), free(s1);
                problem_free(&p);
            }
}
END_TEST

/* z_compensated (a head's z is [2][dk]: the sum and its compensation, both
 * carried from call to call): every form, gate and causal flag, one head's
 * columns over 3 threads (each unit starts from the z before any unit
 * stores its own), a call split in two, and steps; against the oracle of
 * z + zc, and the final o, s and z bitwise the same on 1 and 3 threads. */
START_TEST(z_compensated_against_oracle)
{
    static const int64_t shapes[][5] = {{1, 1, 65, 17, 40}, {2, 3, 33, 16, 16}, {1, 2, 1, 7, 5}};
    for (int sh = 0; sh < 3; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_AUTO; algo <= LINATTN_ALGO_RECURRENT; algo++)
                for (int causal = gate == LINATTN_GATE_NONE ? 0 : 1; causal <= 1; causal++) {
                    const int64_t B = shapes[sh][0], H = shapes[sh][1], T = shapes[sh][2];
                    const int64_t dk = shapes[sh][3], dv = shapes[sh][4];
                    spec sp = spec_default(B, H, T, dk, dv);
                    sp.gate = (linattn_gate)gate;
                    sp.algo = (linattn_algo)algo;
                    sp.causal = causal;
                    sp.with_state = 1;
                    sp.z_compensated = 1;
                    problem p;
                    problem_make(&p, &sp);
                    const size_t no = (size_t)(B * H * T * dv), ns = (size_t)(B * H * dk * dv);
                    const size_t nz = (size_t)(B * H * 2 * dk);
                    float *z0 = copy_floats(p.z, nz), *o1 = NULL, *s1 = NULL, *z1 = NULL;
                    for (int threads = 1; threads <= 3; threads += 2) {
                        memcpy(p.s, p.s_init, ns * sizeof(float));
                        memcpy(p.z, z0, nz * sizeof(float));
                        p.cfg.num_threads = threads;
                        ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                        ck_assert_msg(problem_error(&p) <= 1.0, "%s", spec_name(&sp));
                        if (threads == 1) {
                            o1 = copy_floats(p.o, no), s1 = copy_floats(p.s, ns);
                            z1 = copy_floats(p.z, nz);
                            continue;
                        }
                        ck_assert_msg(memcmp(o1, p.o, no * sizeof(float)) == 0 &&
                                          memcmp(s1, p.s, ns * sizeof(float)) == 0 &&
                                          memcmp(z1, p.z, nz * sizeof(float)) == 0,
                                      "o, s or z differs with 3 threads: %s", spec_name(&sp));
                    }
                    if (causal && T > 1) { /* the same sequence in two calls */
                        memcpy(p.s, p.s_init, ns * sizeof(float));
                        memcpy(p.z, z0, nz * sizeof(float));
                        forward_in_two(&p, T / 2);
                        ck_assert_msg(problem_error(&p) <= 1.0, "in two calls: %s",
                                      spec_name(&sp));
                    }
                    if (causal && algo == LINATTN_ALGO_AUTO) { /* token by token */
                        memcpy(p.s, p.s_init, ns * sizeof(float));
                        memcpy(p.z, z0, nz * sizeof(float));
                        steps_through(&p);
                        ck_assert_msg(problem_error(&p) <= 1.0, "steps: %s", spec_name(&sp));
                    }
                    free(z0), free(o1), free(s1), free(z1);
                    problem_free(&p);
                }
}
END_TEST

/* The value-tiled recurrent forward on the kernels' packed copy of the
 * state (tuning.h: additive_pack_from_T) gives the same bits as on the
 * state where it lies, whatever this CPU's entry says: both are forced. */
START_TEST(packed_state_same_bits)
{
    if (table->additive == NULL || table->additive->pack == NULL) {
        printf("table %s: no packed copy (its additive ops do not pack); nothing to compare\n",
               table->name);
        return;
    }
    la_tuning never = *la_active_kernels()->additive_tuning, always = never;
    never.additive_pack_from_T = LA_TUNE_NEVER;
    always.additive_pack_from_T = 1;
    static const int64_t shapes[][5] = {/* B, H, T, dk, dv */
                                        {1, 2, 33, 5, 1},   {2, 3, 70, 17, 15}, {1, 2, 65, 64, 100},
                                        {1, 1, 40, 128, 130}, {1, 9, 66, 16, 80}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int state = 0; state <= 1; state++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    const int64_t B = shapes[sh][0], H = shapes[sh][1], T = shapes[sh][2];
                    const int64_t dk = shapes[sh][3], dv = shapes[sh][4];
                    spec sp = spec_default(B, H, T, dk, dv);
                    sp.gate = (linattn_gate)gate;
                    sp.algo = LINATTN_ALGO_RECURRENT;
                    sp.with_state = state;
                    sp.normalize = (int)(sh % 2);
                    problem p;
                    problem_make(&p, &sp);
                    p.cfg.num_threads = threads;
                    const size_t no = (size_t)(B * H * T * dv), ns = (size_t)(B * H * dk * dv);
                    const size_t nz = (size_t)(B * H * dk);
                    float *o1 = malloc(no * sizeof(float)), *s1 = malloc(ns * sizeof(float));
                    float *z1 = malloc(nz * sizeof(float));
                    la_force_table_tuning(table, &never, NULL);
                    ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                    memcpy(o1, p.o, no * sizeof(float));
                    if (state) {
                        memcpy(s1, p.s, ns * sizeof(float));
                        memcpy(z1, p.z, nz * sizeof(float));
                        memcpy(p.s, p.s_init, ns * sizeof(float));
                        memcpy(p.z, p.z_init, nz * sizeof(float));
                    }
                    la_force_table_tuning(table, &always, NULL);
                    ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                    ck_assert_msg(memcmp(o1, p.o, no * sizeof(float)) == 0,
                                  "o differs on the packed copy: %s", spec_name(&sp));
                    ck_assert_msg(!state || memcmp(s1, p.s, ns * sizeof(float)) == 0,
                                  "s differs on the packed copy: %s", spec_name(&sp));
                    ck_assert_msg(!state || memcmp(z1, p.z, nz * sizeof(float)) == 0,
                                  "z differs on the packed copy: %s", spec_name(&sp));
                    ck_assert_msg(problem_error(&p) <= 1.0, "packed copy: %s", spec_name(&sp));
                    free(o1);
                    free(s1);
                    free(z1);
                    problem_free(&p);
                }
    la_force_table(table);
}
END_TEST

/* Runs p's forward again from its initial state with tuning t forced on
 * the table and num_threads = threads; whether o, s and z come out as the
 * bits of o1, s1 and z1 (B*H*T*dv, B*H*dk*dv and B*H*dk floats). */
static int rerun_same_bits(problem *p, const la_tuning *t, int threads, const float *o1,
                           const float *s1, const float *z1)
{
    const spec *sp = &p->sp;
    const size_t no = (size_t)(sp->B * sp->H * sp->T * sp->dv);
    const size_t ns = (size_t)(sp->B * sp->H * sp->dk * sp->dv);
    const size_t nz = (size_t)(sp->B * sp->H * sp->dk);
    memcpy(p->s, p->s_init, ns * sizeof(float));
    memcpy(p->z, p->z_init, nz * sizeof(float));
    p->cfg.num_threads = threads;
    la_force_table_tuning(table, t, NULL);
    ck_assert_int_eq(problem_forward(p), LINATTN_OK);
    return memcmp(o1, p->o, no * sizeof(float)) == 0 && memcmp(s1, p->s, ns * sizeof(float)) == 0 &&
           memcmp(z1, p->z, nz * sizeof(float)) == 0;
}

/* Tokens four at a time (tuning.h: additive_quad_from_T), forced on every
 * table whatever this CPU's entry says, against the double oracle: T
 * leaving 0-3 tokens after the quads of a block (pairs and a last token),
 * dk and dv below, at and above the vector and the tiles, every gate with
 * mild, strong and mixed decay, with and without the normaliser, a
 * carried state; and the same bits on the packed copy as on the state
 * where it lies, and for 1 and 3 threads. */
START_TEST(quad_sweeps_match_oracle)
{
    la_tuning quads = *la_active_kernels()->additive_tuning, packed = quads;
    for (int g = 0; g < LA_GATES; g++)
        quads.additive_quad_from_T[g] = packed.additive_quad_from_T[g] = 4;
    quads.additive_pack_from_T = LA_TUNE_NEVER;
    packed.additive_pack_from_T = 1;
    static const int64_t shapes[][5] = {
        /* B, H, T, dk, dv */
        {1, 2, 4, 5, 1},      {2, 3, 7, 17, 15},  {1, 2, 66, 64, 100},
        {1, 1, 41, 128, 130}, {1, 3, 70, 16, 80}, {2, 2, 5, 33, 64},
    };
    static const float g_ranges[][2] = {{-1, 0}, {-20, -20}, {-30, 0}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (size_t gr = 0; gr < (gate == LINATTN_GATE_NONE ? 1 : 3); gr++) {
                const int64_t B = shapes[sh][0], H = shapes[sh][1], T = shapes[sh][2];
                const int64_t dk = shapes[sh][3], dv = shapes[sh][4];
                spec sp = spec_default(B, H, T, dk, dv);
                sp.gate = (linattn_gate)gate;
                sp.algo = LINATTN_ALGO_RECURRENT;
                sp.with_state = 1;
                sp.normalize = (int)(sh % 2);
                sp.g_lo = g_ranges[gr][0], sp.g_hi = g_ranges[gr][1];
                problem p;
                problem_make(&p, &sp);
                const size_t no = (size_t)(B * H * T * dv), ns = (size_t)(B * H * dk * dv);
                const size_t nz = (size_t)(B * H * dk);
                la_force_table_tuning(table, &quads, NULL);
                ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                ck_assert_msg(problem_error(&p) <= 1.0, "quad sweeps: %s", spec_name(&sp));
                float *o1 = copy_floats(p.o, no), *s1 = copy_floats(p.s, ns);
                float *z1 = copy_floats(p.z, nz);
                for (int run = 0; run < 2; run++)
                    ck_assert_msg(rerun_same_bits(&p, run ? &quads : &packed, run ? 3 : 1, o1, s1,
                                                  z1),
                                  "quad sweeps give other bits %s (%s)",
                                  run ? "on 3 threads" : "on the packed copy", spec_name(&sp));
                free(o1);
                free(s1);
                free(z1);
                problem_free(&p);
            }
    la_force_table(table);
}
END_TEST

/* How the value-tiled forward fetches its rows ahead (tuning.h:
 * additive_fetch_tokens) changes no arithmetic: 1, 8 and 40 tokens ahead
 * give the bits of one block ahead, forced on every table, in quads and in
 * pairs, every gate, rows one after another and apart ([B][T][H][D]: v
 * copied into the panel), blocks cut short by T, heads split over 3
 * threads; the first run also against the double oracle. */
START_TEST(fetch_ahead_same_bits)
{
    la_tuning base = *la_active_kernels()->additive_tuning, ahead;
    static const int64_t shapes[][5] = {/* B, H, T, dk, dv */
                                        {1, 2, 33, 5, 1},
                                        {1, 3, 70, 64, 100},
                                        {2, 2, 100, 17, 15},
                                        {1, 1, 41, 128, 130}};
    static const int64_t fetch[] = {1, 8, 40};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int layout = 0; layout < 2; layout++) {
                const int64_t B = shapes[sh][0], H = shapes[sh][1], T = shapes[sh][2];
                const int64_t dk = shapes[sh][3], dv = shapes[sh][4];
                spec sp = spec_default(B, H, T, dk, dv);
                sp.gate = (linattn_gate)gate;
                sp.algo = LINATTN_ALGO_RECURRENT;
                sp.with_state = 1;
                sp.normalize = (int)(sh % 2);
                sp.layout = layout ? LAYOUT_BTHD : LAYOUT_BHTD;
                problem p;
                problem_make(&p, &sp);
                p.cfg.num_threads = (int)(1 + 2 * (sh % 2));
                for (int g = 0; g < LA_GATES; g++)
                    base.additive_quad_from_T[g] = sh < 2 ? 4 : LA_TUNE_NEVER;
                base.additive_fetch_tokens = 0;
                const size_t no = (size_t)(B * H * T * dv), ns = (size_t)(B * H * dk * dv);
                const size_t nz = (size_t)(B * H * dk);
                la_force_table_tuning(table, &base, NULL);
                ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                ck_assert_msg(problem_error(&p) <= 1.0, "one block ahead: %s", spec_name(&sp));
                float *o1 = copy_floats(p.o, no), *s1 = copy_floats(p.s, ns);
                float *z1 = copy_floats(p.z, nz);
                for (size_t f = 0; f < sizeof fetch / sizeof fetch[0]; f++) {
                    ahead = base;
                    ahead.additive_fetch_tokens = fetch[f];
                    ck_assert_msg(rerun_same_bits(&p, &ahead, p.cfg.num_threads, o1, s1, z1),
                                  "%lld tokens ahead gives other bits: %s", (long long)fetch[f],
                                  spec_name(&sp));
                }
                free(o1);
                free(s1);
                free(z1);
                problem_free(&p);
            }
    la_force_table(table);
}
END_TEST

/* Quads under a token gate keep the tile divided by the decays while that
 * stays above LA_SCALED_TILE_MIN, and so divide v by them; a quad whose v
 * is near float's range must decay the tile instead, or v / d overflows
 * where the state does not. The quad of tokens 8-11 gets |v| up to 2^120
 * where d is about 2^-17 (log-decay -1 a token): the results are finite
 * and match the oracle, with v rows one after another and apart (copied
 * into the block's panel), on 1 and 3 threads (each unit looks at the
 * rows itself) and on the packed copy. */
START_TEST(quad_sweeps_large_v)
{
    la_tuning quads = *la_active_kernels()->additive_tuning;
    quads.additive_quad_from_T[LA_GATE_TOKEN] = 4;
    static const int64_t dims[] = {17, 64, 128};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int run = 0; run < 4; run++) {
            spec sp = spec_default(1, 2, 40, dims[di], dims[di]);
            sp.gate = LINATTN_GATE_TOKEN;
            sp.algo = LINATTN_ALGO_RECURRENT;
            sp.phi = LINATTN_PHI_IDENTITY;
            sp.normalize = 0;
            sp.with_state = 1;
            sp.g_lo = sp.g_hi = -1.0f;
            sp.layout = run == 3 ? LAYOUT_BTHD : LAYOUT_BHTD;
            problem p;
            problem_make(&p, &sp);
            scale_value_rows(&p.cfg, p.v, 8, 12, 0x1p120f);
            quads.additive_pack_from_T = run == 2 ? 1 : LA_TUNE_NEVER;
            la_force_table_tuning(table, &quads, NULL);
            p.cfg.num_threads = run == 1 ? 3 : 1;
            ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
            ck_assert_msg(problem_error(&p) <= 1.0, "quads, large v (run %d): %s", run,
                          spec_name(&sp));
            problem_free(&p);
        }
    la_force_table(table);
}
END_TEST

/* qk_l2norm normalises the q and k rows of a block or chunk just before the
 * ops read them. A sequence of many blocks and chunks, fed in two calls that
 * carry the state (split inside a block), gives the same bits on 1, 2 and 3
 * threads (one head: its value columns or its chunks split over them;
 * three heads: whole heads, several to a thread) and matches the oracle. */
START_TEST(l2norm_blocks_threads_and_calls)
{
    enum { T = 300, SPLIT = 133, DK = 24, DV = 40 };
    for (int64_t H = 1; H <= 3; H += 2)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++) {
                spec sp = spec_default(1, H, T, DK, DV);
                sp.gate = (linattn_gate)gate;
                sp.algo = (linattn_algo)algo;
                sp.phi = (linattn_phi)((gate + algo) % 3);
                sp.normalize = sp.phi != LINATTN_PHI_IDENTITY; /* else qh . z may be ~0 */
                sp.l2norm = 1;
                sp.with_state = 1;
                sp.chunk = algo == LINATTN_ALGO_CHUNKED ? 16 : 0;
                problem p;
                problem_make(&p, &sp);
                const size_t no = (size_t)(H * T * DV), ns = (size_t)(H * DK * DV);
                const size_t nz = (size_t)(H * DK);
                float *first = malloc((no + ns + nz) * sizeof(float));
                const float *g2 =
                    p.g ? p.g + (gate == LINATTN_GATE_HEAD ? 0 : SPLIT * p.cfg.g.token) : NULL;
                for (int threads = 1; threads <= 3; threads++) {
                    memcpy(p.s, p.s_init, ns * sizeof(float));
                    memcpy(p.z, p.z_init, nz * sizeof(float));
                    linattn_config a = p.cfg, b = p.cfg;
                    a.num_threads = b.num_threads = threads;
                    a.seq_len = SPLIT;
                    b.seq_len = T - SPLIT;
                    ck_assert_int_eq(linattn_forward(&a, p.q, p.k, p.v, p.g, p.o, p.s, p.z),
                                     LINATTN_OK);
                    ck_assert_int_eq(linattn_forward(&b, p.q + SPLIT * p.cfg.q.token,
                                                     p.k + SPLIT * p.cfg.k.token,
                                                     p.v + SPLIT * p.cfg.v.token, g2,
                                                     p.o + SPLIT * p.cfg.o.token, p.s, p.z),
                                     LINATTN_OK);
                    if (threads == 1) {
                        memcpy(first, p.o, no * sizeof(float));
                        memcpy(first + no, p.s, ns * sizeof(float));
                        memcpy(first + no + ns, p.z, nz * sizeof(float));
                        continue;
                    }
                    ck_assert_msg(memcmp(first, p.o, no * sizeof(float)) == 0 &&
                                      memcmp(first + no, p.s, ns * sizeof(float)) == 0 &&
                                      memcmp(first + no + ns, p.z, nz * sizeof(float)) == 0,
                                  "%d threads differ from 1: %s", threads, spec_name(&sp));
                }
                const double e = problem_error(&p);
                ck_assert_msg(e <= 1.0, "%s: %.3g", spec_name(&sp), e);
                free(first);
                problem_free(&p);
            }
}
END_TEST

/* A NaN in v or k at token t reaches the outputs of tokens >= t only (and
 * all of them when nothing decays); a NaN in q only its own token. Masked
 * parts of a chunk must be skipped, not multiplied by zero. */
START_TEST(nan_propagates_only_forward)
{
    for (int algo = LINATTN_ALGO_CHUNKED; algo <= LINATTN_ALGO_RECURRENT; algo++)
        for (int gate = LINATTN_GATE_NONE; gate <= LINATTN_GATE_CHANNEL; gate++)
            for (int where = 0; where < 3; where++) {
                spec sp = spec_default(1, 1, 80, 8, 8);
                sp.algo = (linattn_algo)algo;
                sp.gate = (linattn_gate)gate;
                sp.normalize = 0;
                sp.phi = where == 1 ? LINATTN_PHI_RELU : LINATTN_PHI_ELU1;
                problem p;
                problem_make(&p, &sp);
                const int64_t bad = 37;
                float *input = where == 0 ? p.v : where == 1 ? p.k : p.q;
                input[bad * 8] = NAN;
                ck_assert_int_eq(problem_forward(&p), LINATTN_OK);
                for (int64_t t = 0; t < 80; t++) {
                    const float x = p.o[t * p.cfg.o.token];
                    const int tainted = where == 2 ? t == bad : t >= bad;
                    if (!tainted)
                        ck_assert_msg(isfinite(x),
                                      "token %lld is %g, NaN input at %lld (%s, input %d)",
                                      (long long)t, x, (long long)bad, spec_name(&sp), where);
                    else if (gate == LINATTN_GATE_NONE || t == bad)
                        ck_assert_msg(isnan(x),
                                      "token %lld is %g, NaN input at %lld (%s, input %d)",
                                      (long long)t, x, (long long)bad, spec_name(&sp), where);
                }
                problem_free(&p);
            }
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
    tcase_add_test(oracle, feature_maps);
    tcase_add_test(oracle, scale_applies_to_queries);
    tcase_add_test(oracle, scale_and_eps_against_oracle);
    tcase_add_test(oracle, noncausal_against_oracle);
    tcase_add_test(oracle, strided_layouts);
    tcase_add_test(oracle, unaligned_pointers);
    tcase_add_test(oracle, chunk_sizes);
    tcase_add_test(oracle, strong_decay);
    tcase_add_test(oracle, full_resets_by_huge_negative_gates);
    tcase_add_test(oracle, reset_keeps_later_decays);
    tcase_add_test(oracle, long_run_normaliser);
    tcase_add_test(oracle, tiny_features_scale_free);
    tcase_add_test(oracle, z_compensated_against_oracle);
    tcase_add_test(oracle, grouped_heads_and_l2norm);
    tcase_add_test(oracle, state_carried_across_calls);
    tcase_add_test(oracle, steps_against_oracle);
    tcase_add_test(oracle, chunked_matches_recurrent);
    tcase_add_test(oracle, threads_bitwise_equal);
    tcase_add_test(oracle, steps_threads_bitwise_equal);
    tcase_add_test(oracle, steps_split_columns);
    tcase_add_test(oracle, packed_state_same_bits);
    tcase_add_test(oracle, quad_sweeps_match_oracle);
    tcase_add_test(oracle, quad_sweeps_large_v);
    tcase_add_test(oracle, fetch_ahead_same_bits);
    tcase_add_test(oracle, l2norm_blocks_threads_and_calls);
    tcase_add_test(oracle, nan_propagates_only_forward);
    suite_add_tcase(s, oracle);
    return s;
}

int main(void)
{
    return table_suite_main(suite_for, &table, "");
}
