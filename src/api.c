/* Public entry points: every argument check lives here, before anything is
 * written, so a bad call returns its status and leaves all buffers as they
 * were. Address ranges are computed from the strides with overflow checks. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)

const char *linattn_version(void)
{
    return STR(LINATTN_VERSION_MAJOR) "." STR(LINATTN_VERSION_MINOR) "." STR(
        LINATTN_VERSION_PATCH);
}

const char *linattn_strerror(linattn_status s)
{
    switch (s) {
    case LINATTN_OK: return "success";
    case LINATTN_E_NULL: return "a required pointer is NULL (or s and z not given as a pair)";
    case LINATTN_E_SHAPE: return "a dimension is < 1 or a byte count overflows";
    case LINATTN_E_STRIDE: return "a stride is negative";
    case LINATTN_E_ARG: return "an argument value is out of range";
    case LINATTN_E_ISA: return "the requested instruction set cannot run on this CPU/build";
    case LINATTN_E_NOMEM: return "out of memory";
    case LINATTN_E_OVERLAP: return "an output overlaps itself, an input or another output";
    }
    return "unknown linattn status";
}

void linattn_config_init(linattn_config *cfg, int64_t batch, int64_t heads, int64_t seq_len,
                         int64_t dk, int64_t dv)
{
    if (cfg == NULL)
        return;
    *cfg = (linattn_config){0};
    cfg->struct_size = sizeof *cfg;
    cfg->batch = batch;
    cfg->heads = heads;
    cfg->seq_len = seq_len;
    cfg->dk = dk;
    cfg->dv = dv;
    cfg->phi = LINATTN_PHI_ELU1;
    cfg->gate = LINATTN_GATE_NONE;
    cfg->algo = LINATTN_ALGO_AUTO;
    cfg->causal = 1;
    cfg->normalize = 1;
    cfg->eps = 1e-6f;
    cfg->scale = 1.0f;
    /* Contiguous [B][H][T][D]; wrapping products only matter for shapes
     * that linattn_forward rejects anyway. */
    cfg->q = cfg->k = (linattn_strides){(int64_t)((uint64_t)heads * (uint64_t)seq_len *
                                                  (uint64_t)dk),
                                        (int64_t)((uint64_t)seq_len * (uint64_t)dk), dk};
    cfg->v = cfg->o = (linattn_strides){(int64_t)((uint64_t)heads * (uint64_t)seq_len *
                                                  (uint64_t)dv),
                                        (int64_t)((uint64_t)seq_len * (uint64_t)dv), dv};
    linattn_config_set_gate(cfg, LINATTN_GATE_NONE);
}

void linattn_config_set_gate(linattn_config *cfg, linattn_gate gate)
{
    if (cfg == NULL)
        return;
    const uint64_t T = (uint64_t)cfg->seq_len, H = (uint64_t)cfg->heads;
    cfg->gate = gate;
    switch (gate) {
    case LINATTN_GATE_HEAD: cfg->g = (linattn_strides){0, 1, 0}; break;
    case LINATTN_GATE_TOKEN: cfg->g = (linattn_strides){(int64_t)(H * T), (int64_t)T, 1}; break;
    default: {
        const uint64_t dk = (uint64_t)cfg->dk;
        cfg->g = (linattn_strides){(int64_t)(H * T * dk), (int64_t)(T * dk), (int64_t)dk};
    }
    }
}

/* ---- address ranges ---------------------------------------------------- */

/* An array of floats addressed as base + sum_i idx_i * stride_i, idx_i < n_i. */
typedef struct {
    int rank;
    int64_t n[4], stride[4];
} layout;

typedef struct {
    uintptr_t lo, hi; /* byte range [lo, hi); empty when the array is absent */
} range;

static int mul_add(int64_t a, int64_t b, int64_t *acc)
{
    int64_t p;
    return __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(*acc, p, acc);
}

/* Index of the last element + 1, in elements; 0 on overflow. */
static int64_t layout_extent(const layout *l)
{
    int64_t e = 1;
    for (int i = 0; i < l->rank; i++)
        if (mul_add(l->n[i] - 1, l->stride[i], &e))
            return 0;
    return e;
}

static int range_of(const float *p, const layout *l, range *r)
{
    const int64_t e = layout_extent(l);
    int64_t bytes;
    if (e == 0 || __builtin_mul_overflow(e, (int64_t)sizeof(float), &bytes) ||
        (uintptr_t)p > UINTPTR_MAX - (uintptr_t)bytes)
        return 0;
    r->lo = (uintptr_t)p;
    r->hi = r->lo + (uintptr_t)bytes;
    return 1;
}

static int ranges_overlap(range a, range b) { return a.lo < b.hi && b.lo < a.hi; }

/* 1 when two different index tuples of l can reach the same element: sorted
 * by stride, every dimension must step past everything inside it. */
static int self_overlaps(const layout *l)
{
    int64_t n[4], st[4];
    int m = 0;
    for (int i = 0; i < l->rank; i++)
        if (l->n[i] > 1) {
            int j = m++;
            for (; j > 0 && st[j - 1] > l->stride[i]; j--) {
                st[j] = st[j - 1];
                n[j] = n[j - 1];
            }
            st[j] = l->stride[i];
            n[j] = l->n[i];
        }
    int64_t inner = 1; /* elements spanned by the dimensions so far */
    for (int i = 0; i < m; i++) {
        if (st[i] < inner)
            return 1;
        inner = (n[i] - 1) * st[i] + inner;
    }
    return 0;
}

/* ---- argument checks --------------------------------------------------- */

typedef struct {
    range q, k, v, g, o, s, z; /* empty (lo == hi == 0) when absent */
    layout o_layout;
} call_ranges;

static layout feature_layout(const linattn_config *cfg, const linattn_strides *st, int64_t T,
                             int64_t d)
{
    return (layout){4, {cfg->batch, cfg->heads, T, d}, {st->batch, st->head, st->token, 1}};
}

static linattn_status check_config(const linattn_config *cfg, int step)
{
    if (cfg->struct_size < sizeof(linattn_config))
        return LINATTN_E_ARG;
    if (cfg->batch < 1 || cfg->heads < 1 || cfg->dk < 1 || cfg->dv < 1 ||
        (!step && cfg->seq_len < 1))
        return LINATTN_E_SHAPE;
    if ((unsigned)cfg->phi > LINATTN_PHI_IDENTITY || (unsigned)cfg->gate > LINATTN_GATE_CHANNEL ||
        (unsigned)cfg->algo > LINATTN_ALGO_RECURRENT || (cfg->causal != 0 && cfg->causal != 1) ||
        (cfg->normalize != 0 && cfg->normalize != 1) || !(cfg->eps >= 0.0f) ||
        !isfinite(cfg->eps) || !isfinite(cfg->scale) || cfg->chunk < 0 ||
        cfg->num_threads < 0)
        return LINATTN_E_ARG;
    if (cfg->gate != LINATTN_GATE_NONE && !cfg->causal && !step)
        return LINATTN_E_ARG;
    const linattn_strides *all[] = {&cfg->q, &cfg->k, &cfg->v, &cfg->o, &cfg->g};
    for (int i = 0; i < 5; i++)
        if (all[i]->batch < 0 || all[i]->head < 0 || all[i]->token < 0)
            return LINATTN_E_STRIDE;
    return LINATTN_OK;
}

static layout gate_layout(const linattn_config *cfg, int64_t T)
{
    const linattn_strides *st = &cfg->g;
    switch (cfg->gate) {
    case LINATTN_GATE_HEAD: return (layout){2, {cfg->batch, cfg->heads}, {st->batch, st->head}};
    case LINATTN_GATE_TOKEN:
        return (layout){3, {cfg->batch, cfg->heads, T}, {st->batch, st->head, st->token}};
    default: return feature_layout(cfg, st, T, cfg->dk);
    }
}

/* 1 when every gate value the call reads is finite and <= 0. The inner loop
 * is branch-free so it vectorises: this is a full pass over g. */
static int gate_values_ok(const linattn_config *cfg, const float *g, int64_t T)
{
    const layout l = gate_layout(cfg, T);
    const int64_t inner = cfg->gate == LINATTN_GATE_CHANNEL ? cfg->dk : 1;
    const int64_t nt = cfg->gate == LINATTN_GATE_HEAD ? 1 : T;
    const int64_t token_stride = cfg->gate == LINATTN_GATE_HEAD ? 0 : l.stride[2];
    for (int64_t b = 0; b < cfg->batch; b++)
        for (int64_t h = 0; h < cfg->heads; h++)
            for (int64_t t = 0; t < nt; t++) {
                const float *row = g + b * l.stride[0] + h * l.stride[1] + t * token_stride;
                int bad = 0;
                for (int64_t c = 0; c < inner; c++) /* NaN, > 0 and -inf */
                    bad |= !(row[c] <= 0.0f) | (row[c] < -FLT_MAX);
                if (bad)
                    return 0;
            }
    return 1;
}

static linattn_status check_call(const la_kernels **table, const linattn_config *cfg,
                                 const float *q, const float *k, const float *v, const float *g,
                                 float *o, float *s, float *z, int step)
{
    if (cfg == NULL)
        return LINATTN_E_NULL;
    *table = la_active_table();
    if (*table == NULL)
        return LINATTN_E_ISA;
    linattn_status st = check_config(cfg, step);
    if (st != LINATTN_OK)
        return st;
    const int gated = cfg->gate != LINATTN_GATE_NONE;
    if (!q || !k || !v || !o || (gated && !g))
        return LINATTN_E_NULL;
    if (cfg->normalize && (s == NULL) != (z == NULL))
        return LINATTN_E_NULL;
    if (step && (!s || (cfg->normalize && !z)))
        return LINATTN_E_NULL;
    if (!cfg->normalize)
        z = NULL; /* neither read nor written */

    const int64_t T = step ? 1 : cfg->seq_len;
    call_ranges r = {0};
    r.o_layout = feature_layout(cfg, &cfg->o, T, cfg->dv);
    const layout lq = feature_layout(cfg, &cfg->q, T, cfg->dk),
                 lk = feature_layout(cfg, &cfg->k, T, cfg->dk),
                 lv = feature_layout(cfg, &cfg->v, T, cfg->dv), lg = gate_layout(cfg, T);
    /* The state is contiguous [B][H][dk][dv] and [B][H][dk]; the driver
     * also needs dk*dv of a head in a size_t. */
    int64_t state_elems, z_elems;
    if (__builtin_mul_overflow(cfg->dk, cfg->dv, &state_elems) ||
        __builtin_mul_overflow(state_elems, cfg->batch, &state_elems) ||
        __builtin_mul_overflow(state_elems, cfg->heads, &state_elems) ||
        __builtin_mul_overflow(cfg->dk, cfg->batch, &z_elems) ||
        __builtin_mul_overflow(z_elems, cfg->heads, &z_elems))
        return LINATTN_E_SHAPE;
    const layout lstate = {1, {state_elems}, {1}}, lz = {1, {z_elems}, {1}};
    if (!range_of(q, &lq, &r.q) || !range_of(k, &lk, &r.k) || !range_of(v, &lv, &r.v) ||
        !range_of(o, &r.o_layout, &r.o) || (gated && !range_of(g, &lg, &r.g)) ||
        (s && !range_of(s, &lstate, &r.s)) || (z && !range_of(z, &lz, &r.z)))
        return LINATTN_E_SHAPE;

    if (self_overlaps(&r.o_layout))
        return LINATTN_E_OVERLAP;
    const range outs[] = {r.o, r.s, r.z};
    const range all[] = {r.q, r.k, r.v, r.g, r.o, r.s, r.z};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 7; j++)
            if (j != 4 + i && outs[i].hi != 0 && all[j].hi != 0 && ranges_overlap(outs[i], all[j]))
                return LINATTN_E_OVERLAP;

    if (gated && !gate_values_ok(cfg, g, T))
        return LINATTN_E_ARG;
    return LINATTN_OK;
}

linattn_status linattn_forward(const linattn_config *cfg, const float *q, const float *k,
                               const float *v, const float *g, float *o, float *s, float *z)
{
    const la_kernels *t;
    const linattn_status st = check_call(&t, cfg, q, k, v, g, o, s, z, 0);
    if (st != LINATTN_OK)
        return st;
    return la_run_forward(t, cfg, q, k, v, cfg->gate ? g : NULL, o, s,
                          cfg->normalize ? z : NULL);
}

linattn_status linattn_step(const linattn_config *cfg, const float *q, const float *k,
                            const float *v, const float *g, float *o, float *s, float *z)
{
    const la_kernels *t;
    const linattn_status st = check_call(&t, cfg, q, k, v, g, o, s, z, 1);
    if (st != LINATTN_OK)
        return st;
    la_run_step(t, cfg, q, k, v, cfg->gate ? g : NULL, o, s,
                cfg->normalize ? z : NULL);
    return LINATTN_OK;
}
