/* The case table of linattn-bench: which family, gate, phi, normaliser and
 * kernels run, on which shape and inputs, and the one place that calls the
 * library for a case. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char *const bench_family_names[FAM_COUNT] = {"additive", "delta"};
const char *const bench_kernel_names[K_COUNT] = {"forward_chunked", "forward_recurrent",
                                                 "noncausal", "step", "quadratic"};
const char *const bench_gate_names[G_COUNT] = {"none",    "head",         "token",
                                               "channel", "strong-token", "strong-channel"};
const char *const bench_phi_names[PHI_COUNT] = {"elu1", "relu", "identity"};
const char *const bench_layout_names[L_COUNT] = {"bhtd", "bthd", "packed"};
const char *const bench_dtype_names[3] = {"f32", "bf16", "f16"};

linattn_gate bench_library_gate(bench_gate g)
{
    static const linattn_gate map[G_COUNT] = {
        [G_NONE] = LINATTN_GATE_NONE,
        [G_HEAD] = LINATTN_GATE_HEAD,
        [G_TOKEN] = LINATTN_GATE_TOKEN,
        [G_CHANNEL] = LINATTN_GATE_CHANNEL,
        [G_STRONG_TOKEN] = LINATTN_GATE_TOKEN,
        [G_STRONG_CHANNEL] = LINATTN_GATE_CHANNEL,
    };
    return map[g];
}

#define BIT(x) (1u << (x))

/* What each family supports and its shapes. A family with one phi or one
 * normaliser runs with it whatever --phi and --normalize select. */
typedef struct {
    unsigned kernels, gates, phis, normalizes;
    int qk_l2norm;
    bench_shape fwd, stp, fwd_quick, stp_quick;
} family_info;

static const family_info families[FAM_COUNT] = {
    [FAM_ADDITIVE] = {
        .kernels = BIT(K_COUNT) - 1,
        .gates = BIT(G_COUNT) - 1,
        .phis = BIT(PHI_COUNT) - 1,
        .normalizes = BIT(0) | BIT(1),
        .fwd = {1, 8, 4096, 64, 64, 0},
        .stp = {1, 32, 1, 128, 128, 0},
        .fwd_quick = {1, 2, 256, 16, 16, 0},
        .stp_quick = {1, 4, 1, 16, 16, 0},
    },
    /* Qwen3-Next's Gated DeltaNet layer: 32 value heads reading 16 q/k
     * heads, dk = dv = 128, identity features with L2-normalised q and k,
     * scale dk^-1/2, no normaliser. */
    [FAM_DELTA] = {
        .kernels = BIT(K_CHUNKED) | BIT(K_RECURRENT) | BIT(K_STEP),
        .gates = BIT(G_NONE) | BIT(G_TOKEN) | BIT(G_CHANNEL) | BIT(G_STRONG_TOKEN) |
                 BIT(G_STRONG_CHANNEL),
        .phis = BIT(LINATTN_PHI_IDENTITY),
        .normalizes = BIT(0),
        .qk_l2norm = 1,
        .fwd = {1, 32, 4096, 128, 128, 16},
        .stp = {1, 32, 1, 128, 128, 16},
        .fwd_quick = {1, 4, 256, 16, 16, 2},
        .stp_quick = {1, 4, 1, 16, 16, 2},
    },
};

/* The delta family reads H/2 q/k heads when H is even, as the model it
 * stands for does. */
bench_shape bench_make_shape(bench_family f, int64_t B, int64_t H, int64_t T, int64_t dk,
                             int64_t dv)
{
    const int64_t qk = f == FAM_DELTA && H % 2 == 0 ? H / 2 : 0;
    return (bench_shape){B, H, T, dk, dv, qk};
}

static bench_shape from_option(const bench_options *op, bench_family f, int64_t T)
{
    const bench_shape s = op->shape;
    return bench_make_shape(f, s.B, s.H, T, s.dk, s.dv);
}

bench_shape bench_forward_shape(const bench_options *op, bench_family f)
{
    if (op->shape_given)
        return from_option(op, f, op->shape.T);
    return op->quick ? families[f].fwd_quick : families[f].fwd;
}

bench_shape bench_step_shape(const bench_options *op, bench_family f)
{
    if (op->shape_given)
        return from_option(op, f, 1);
    return op->quick ? families[f].stp_quick : families[f].stp;
}

int bench_cases(const bench_options *op, bench_family f, int sweep, bench_case *out, int max)
{
    const family_info *fi = &families[f];
    unsigned kernels = op->kernels & fi->kernels;
    if (sweep)
        kernels &= BIT(K_CHUNKED) | BIT(K_RECURRENT) | BIT(K_QUADRATIC);
    if (op->layout != L_BHTD || op->dtype != LINATTN_F32) /* it reads float32 [B][H][T][D] */
        kernels &= ~BIT(K_QUADRATIC);
    const unsigned phis = (op->phis & fi->phis) ? op->phis & fi->phis : fi->phis;
    const unsigned norms =
        (op->normalizes & fi->normalizes) ? op->normalizes & fi->normalizes : fi->normalizes;
    /* Kernels that exist only without a gate. */
    const unsigned ungated = BIT(K_NONCAUSAL) | BIT(K_QUADRATIC);
    int n = 0;
    for (int g = 0; g < G_COUNT; g++) {
        if (!(op->gates & fi->gates & BIT(g)))
            continue;
        for (int p = 0; p < PHI_COUNT; p++) {
            if (!(phis & BIT(p)))
                continue;
            for (int z = 0; z < 2; z++) {
                if (!(norms & BIT(z)))
                    continue;
                const unsigned k = g == G_NONE ? kernels : kernels & ~ungated;
                if (k == 0 || n == max)
                    continue;
                out[n++] = (bench_case){
                    .family = f,
                    .gate = (bench_gate)g,
                    .phi = (linattn_phi)p,
                    .normalize = z,
                    .qk_l2norm = fi->qk_l2norm,
                    .kernels = k,
                };
            }
        }
    }
    return n;
}

/* ---- buffers ------------------------------------------------------------ */

/* The tool's own conversions (the library's are private): round to nearest
 * even; the bench's values are finite and small, so no NaN or overflow
 * cases are needed beyond what the arithmetic gives. */
static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint16_t to_bf16(float x)
{
    const uint32_t u = f32_bits(x);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(float x)
{
    const uint32_t u = f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a < 0x38800000u) /* a subnormal half: |x| 2^24 rounded to an integer */
        return (uint16_t)(sign | (uint32_t)(((bits_f32(a) * 0x1p24f) + 0x1p23f) - 0x1p23f));
    /* normal: rebias the exponent, round the 13 dropped bits to even */
    const uint32_t r = a - 0x38000000u;
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

static float from_16(linattn_dtype t, uint16_t h)
{
    if (t == LINATTN_BF16)
        return bits_f32((uint32_t)h << 16);
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const float mag = e == 0 ? (float)m * 0x1p-24f : bits_f32(((e + 112) << 23) | (m << 13));
    return sign ? -mag : mag;
}

/* n floats as a new buffer of type t */
static uint16_t *to_16(linattn_dtype t, const float *x, int64_t n)
{
    uint16_t *h = (uint16_t *)bench_alloc((n + 1) / 2);
    for (int64_t i = 0; i < n; i++)
        h[i] = t == LINATTN_BF16 ? to_bf16(x[i]) : to_f16(x[i]);
    return h;
}

const float *bench_output(const bench_data *d, int i, int64_t n)
{
    if (d->o16[i] != NULL)
        for (int64_t e = 0; e < n; e++)
            d->o[i][e] = from_16(d->dt, ((const uint16_t *)d->o16[i])[e]);
    return d->o[i];
}

bench_data bench_data_alloc(const bench_options *op, bench_shape s, int with_state)
{
    const int64_t qkh = s.qk_heads ? s.qk_heads : s.H;
    const int64_t nq = s.B * qkh * s.T * s.dk, nv = s.B * s.H * s.T * s.dv,
                  ng = s.B * s.H * s.T * s.dk, nb = s.B * s.H * s.T;
    const int packed = op->layout == L_PACKED;
    bench_data d = {
        .sh = s,
        .qkv = packed ? bench_alloc(2 * nq + nv) : NULL,
        .q = packed ? NULL : bench_alloc(nq),
        .k = packed ? NULL : bench_alloc(nq),
        .v = packed ? NULL : bench_alloc(nv),
        .g = bench_alloc(ng),
        .g_strong = bench_alloc(ng),
        .beta = bench_alloc(nb),
        .o = {bench_alloc(nv), bench_alloc(nv)},
    };
    if (packed) { /* one row per token: q heads, k heads, v heads */
        d.q = d.qkv, d.k = d.qkv + qkh * s.dk, d.v = d.qkv + 2 * qkh * s.dk;
        bench_fill(d.qkv, 2 * nq + nv, -1, 1, 1);
    } else {
        bench_fill(d.q, nq, -1, 1, 1);
        bench_fill(d.k, nq, -1, 1, 2);
        bench_fill(d.v, nv, -1, 1, 3);
    }
    bench_fill(d.g, ng, -1, 0, 4);
    for (int64_t i = 0; i < ng; i++)
        d.g_strong[i] = BENCH_STRONG_G;
    bench_fill(d.beta, nb, 0, 1, 5);
    memset(d.o[0], 0, (size_t)nv * sizeof(float));
    memset(d.o[1], 0, (size_t)nv * sizeof(float));
    if (with_state) {
        const int64_t nz = s.B * s.H * s.dk;
        d.s = bench_alloc(nz * s.dv);
        d.z = bench_alloc(nz);
        memset(d.s, 0, (size_t)(nz * s.dv) * sizeof(float));
        memset(d.z, 0, (size_t)nz * sizeof(float));
        if (op->state == LINATTN_BF16)
            d.s16 = to_16(LINATTN_BF16, d.s, nz * s.dv);
    }
    /* A_log in [-1, 1] (fla initialises log(uniform(1, 16)): the same
     * order), dt_bias small: any finite values run the same code */
    d.A_log = bench_alloc(s.H);
    d.dt_bias = bench_alloc(s.H * s.dk);
    bench_fill(d.A_log, s.H, -1, 1, 6);
    bench_fill(d.dt_bias, s.H * s.dk, -0.5f, 0.5f, 8);
    d.dt = op->dtype;
    if (op->dtype != LINATTN_F32) {
        const linattn_dtype t = op->dtype;
        if (packed) {
            d.qkv16 = to_16(t, d.qkv, 2 * nq + nv);
            d.q16 = d.qkv16;
            d.k16 = (uint16_t *)d.qkv16 + (d.k - d.qkv);
            d.v16 = (uint16_t *)d.qkv16 + (d.v - d.qkv);
        } else {
            d.q16 = to_16(t, d.q, nq);
            d.k16 = to_16(t, d.k, nq);
            d.v16 = to_16(t, d.v, nv);
        }
        d.beta16 = to_16(t, d.beta, nb);
        d.o16[0] = to_16(t, d.o[0], nv);
        d.o16[1] = to_16(t, d.o[1], nv);
    }
    return d;
}

void bench_data_free(bench_data *d)
{
    if (d->qkv) {
        free(d->qkv);
    } else {
        free(d->q);
        free(d->k);
        free(d->v);
    }
    free(d->g);
    free(d->g_strong);
    free(d->beta);
    free(d->o[0]);
    free(d->o[1]);
    free(d->s);
    free(d->z);
    if (d->qkv16) {
        free(d->qkv16);
    } else {
        free(d->q16);
        free(d->k16);
        free(d->v16);
    }
    free(d->beta16);
    free(d->o16[0]);
    free(d->o16[1]);
    free(d->s16);
    free(d->A_log);
    free(d->dt_bias);
}

/* ---- the library calls ------------------------------------------------- */

/* The delta family uses the scale its models use, dk^-1/2. */
float bench_scale(const bench_case *c, bench_shape s)
{
    return c->family == FAM_DELTA ? 1.0f / sqrtf((float)s.dk) : 1.0f;
}

linattn_config bench_config(const bench_options *op, const bench_case *c, bench_kernel k,
                            bench_shape s)
{
    linattn_config cfg;
    linattn_config_init(&cfg, s.B, s.H, s.T, s.dk, s.dv);
    linattn_config_set_gate(&cfg, bench_library_gate(c->gate));
    cfg.phi = c->phi;
    cfg.normalize = c->normalize;
    cfg.qk_l2norm = c->qk_l2norm;
    cfg.scale = bench_scale(c, s);
    cfg.algo = k == K_RECURRENT ? LINATTN_ALGO_RECURRENT : LINATTN_ALGO_CHUNKED;
    cfg.causal = k != K_NONCAUSAL;
    cfg.num_threads = op->threads;
    cfg.chunk = op->chunk;
    const linattn_dtype t = op->dtype;
    /* the state's type only where a state is passed: a forward without
     * one stays on the contiguous path */
    cfg.dtype = (linattn_dtypes){t, t, t, t, t, k == K_STEP ? op->state : LINATTN_F32};
    const int gated = c->gate != G_NONE && c->gate != G_HEAD;
    cfg.gate_act = op->act && gated ? LINATTN_GATE_ACT_SOFTPLUS : LINATTN_GATE_ACT_NONE;
    cfg.beta_act = op->act && c->family == FAM_DELTA ? LINATTN_BETA_ACT_SIGMOID
                                                     : LINATTN_BETA_ACT_NONE;
    const int64_t qkh = s.qk_heads ? s.qk_heads : s.H;
    cfg.qk_heads = s.qk_heads;
    const int64_t gd = c->gate == G_CHANNEL || c->gate == G_STRONG_CHANNEL ? s.dk : 1;
    switch (op->layout) {
    case L_BHTD:
        cfg.q = cfg.k = (linattn_strides){qkh * s.T * s.dk, s.T * s.dk, s.dk};
        cfg.beta = (linattn_strides){s.H * s.T, s.T, 1};
        break;
    case L_BTHD:
    case L_PACKED: {
        const int64_t row = op->layout == L_PACKED ? 2 * qkh * s.dk + s.H * s.dv : 0;
        cfg.q = cfg.k = op->layout == L_PACKED
                            ? (linattn_strides){s.T * row, s.dk, row}
                            : (linattn_strides){s.T * qkh * s.dk, s.dk, qkh * s.dk};
        cfg.v = op->layout == L_PACKED ? (linattn_strides){s.T * row, s.dv, row}
                                       : (linattn_strides){s.T * s.H * s.dv, s.dv, s.H * s.dv};
        cfg.o = (linattn_strides){s.T * s.H * s.dv, s.dv, s.H * s.dv};
        if (c->gate != G_NONE && c->gate != G_HEAD)
            cfg.g = (linattn_strides){s.T * s.H * gd, gd, s.H * gd};
        cfg.beta = (linattn_strides){s.T * s.H, 1, s.H};
        break;
    }
    default: bench_die("unknown layout %d", (int)op->layout);
    }
    return cfg;
}

int64_t bench_state_bytes(const bench_options *op, bench_family f, bench_shape s, int normalize)
{
    const int64_t S = s.B * s.H * s.dk * s.dv;
    const int64_t es = op->state == LINATTN_BF16 ? 2 : 4;
    return S * es + (bench_state_floats(f, s, normalize) - S) * (int64_t)sizeof(float);
}

static int plain_f32(const linattn_config *cfg)
{
    const linattn_dtypes t = cfg->dtype;
    return t.q == LINATTN_F32 && t.k == LINATTN_F32 && t.v == LINATTN_F32 &&
           t.beta == LINATTN_F32 && t.o == LINATTN_F32 && t.s == LINATTN_F32 &&
           cfg->gate_act == LINATTN_GATE_ACT_NONE && cfg->beta_act == LINATTN_BETA_ACT_NONE;
}

void bench_call(const bench_case *c, bench_kernel k, const linattn_config *cfg,
                const bench_data *d, float *o)
{
    const int strong = c->gate == G_STRONG_TOKEN || c->gate == G_STRONG_CHANNEL;
    const float *g = c->gate == G_NONE ? NULL : strong ? d->g_strong : d->g;
    linattn_status st;
    const char *fn;
    if (!plain_f32(cfg) || d->pool) {
        const int wide = cfg->dtype.q != LINATTN_F32; /* q, k, v, beta, o: one type */
        const int oi = o == d->o[1];
        linattn_operands ops;
        linattn_operands_init(&ops);
        ops.q = wide ? d->q16 : d->q;
        ops.k = wide ? d->k16 : d->k;
        ops.v = wide ? d->v16 : d->v;
        ops.beta = c->family != FAM_DELTA ? NULL : wide ? d->beta16 : d->beta;
        ops.o = wide ? d->o16[oi] : (void *)o;
        ops.g = g;
        if (cfg->gate_act != LINATTN_GATE_ACT_NONE) {
            ops.A_log = d->A_log;
            ops.dt_bias = d->dt_bias;
        }
        if (k == K_STEP) {
            ops.s = cfg->dtype.s == LINATTN_BF16 ? (void *)d->s16 : (void *)d->s;
            ops.pool = d->pool;
            ops.z = c->family == FAM_ADDITIVE && cfg->normalize ? d->z : NULL;
        }
        const linattn_op op = c->family == FAM_DELTA
                                  ? (k == K_STEP ? LINATTN_OP_DELTA_STEP : LINATTN_OP_DELTA_FORWARD)
                                  : (k == K_STEP ? LINATTN_OP_STEP : LINATTN_OP_FORWARD);
        fn = "linattn_run";
        st = linattn_run(op, cfg, &ops);
    } else if (c->family == FAM_DELTA) {
        fn = k == K_STEP ? "linattn_delta_step" : "linattn_delta_forward";
        st = k == K_STEP
                 ? linattn_delta_step(cfg, d->q, d->k, d->v, g, d->beta, o, d->s)
                 : linattn_delta_forward(cfg, d->q, d->k, d->v, g, d->beta, o, NULL);
    } else if (k == K_STEP) {
        fn = "linattn_step";
        st = linattn_step(cfg, d->q, d->k, d->v, g, o, d->s, cfg->normalize ? d->z : NULL);
    } else {
        fn = "linattn_forward";
        st = linattn_forward(cfg, d->q, d->k, d->v, g, o, NULL, NULL);
    }
    if (st != LINATTN_OK)
        bench_die("%s (%s, gate %s, phi %s, normalize %d): %s: %s", fn, bench_kernel_names[k],
                  bench_gate_names[c->gate], bench_phi_names[c->phi], c->normalize,
                  linattn_strerror(st), linattn_last_error());
}
