/* Public entry points: fetch the active kernels, validate the call
 * (check.c), run the family's driver. Plus the config helpers. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "call.h"
#include "serve.h"
#include "table.h"

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
    cfg->qk_heads = 0;
    cfg->head_map = LINATTN_HEADS_GROUPED;
    cfg->qk_l2norm = 0;
    cfg->beta = (linattn_strides){(int64_t)((uint64_t)heads * (uint64_t)seq_len), seq_len, 1};
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

void linattn_config_init_step(linattn_config *cfg, int64_t batch, int64_t heads, int64_t dk,
                              int64_t dv)
{
    /* One token per (b, h): [B][H][D] is [B][H][T][D] with T = 1, and the
     * token strides (ignored by a step) are left as config_init sets them. */
    linattn_config_init(cfg, batch, heads, 1, dk, dv);
}

/* ---- compute entry points ---------------------------------------------- */

/* kern: the active table, which the entry point asked for first */
static linattn_status run_ops(const la_kernels *kern, la_family family, int step,
                              const linattn_config *cfg, const linattn_operands *ops)
{
    la_call c;
    linattn_status st = la_check(&c, family, step, cfg, ops);
    if (st == LINATTN_OK)
        st = la_check_values(&c, kern);
    if (st != LINATTN_OK)
        return st;
    st = family == LA_FAMILY_DELTA ? la_delta_run(kern, &c) : la_additive_run(kern, &c);
    if (st == LINATTN_OK)
        la_succeed();
    return st;
}

/* The four float32 calls: a config of an older version has no dtype or
 * activation fields; one of this version must leave them at their
 * defaults (the pointers are float *). */
static linattn_status run(la_family family, int step, const linattn_config *cfg,
                          const float *q, const float *k, const float *v, const float *g,
                          const float *beta, float *o, float *s, float *z)
{
    const la_kernels *kern = la_active_kernels_or_fail(); /* first, as in every compute call */
    if (kern == NULL)
        return LINATTN_E_ISA;
    if (cfg && cfg->struct_size == sizeof *cfg) {
        const linattn_dtypes d = cfg->dtype;
        const struct {
            const char *name;
            int v;
        } fields[] = {{"dtype.q", (int)d.q},   {"dtype.k", (int)d.k},
                      {"dtype.v", (int)d.v},   {"dtype.beta", (int)d.beta},
                      {"dtype.o", (int)d.o},   {"dtype.s", (int)d.s},
                      {"gate_act", (int)cfg->gate_act}, {"beta_act", (int)cfg->beta_act}};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (fields[i].v != 0) /* the first one set, named */
                return la_fail(LINATTN_E_ARG,
                               "cfg->%s = %d: the float32 calls take float32 operands and no "
                               "activations; other types and activations go through "
                               "linattn_run",
                               fields[i].name, fields[i].v);
    }
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = beta, ops.o = o, ops.s = s, ops.z = z;
    return run_ops(kern, family, step, cfg, &ops);
}

linattn_status linattn_forward(const linattn_config *cfg, const float *q, const float *k,
                               const float *v, const float *g, float *o, float *s, float *z)
{
    return run(LA_FAMILY_ADDITIVE, 0, cfg, q, k, v, g, NULL, o, s, z);
}

linattn_status linattn_step(const linattn_config *cfg, const float *q, const float *k,
                            const float *v, const float *g, float *o, float *s, float *z)
{
    return run(LA_FAMILY_ADDITIVE, 1, cfg, q, k, v, g, NULL, o, s, z);
}

linattn_status linattn_delta_forward(const linattn_config *cfg, const float *q, const float *k,
                                     const float *v, const float *g, const float *beta,
                                     float *o, float *s)
{
    return run(LA_FAMILY_DELTA, 0, cfg, q, k, v, g, beta, o, s, NULL);
}

linattn_status linattn_delta_step(const linattn_config *cfg, const float *q, const float *k,
                                  const float *v, const float *g, const float *beta, float *o,
                                  float *s)
{
    return run(LA_FAMILY_DELTA, 1, cfg, q, k, v, g, beta, o, s, NULL);
}

/* ---- 0.3.0: the operand struct and linattn_run ------------------------- */

void linattn_operands_init(linattn_operands *ops)
{
    if (ops == NULL)
        return;
    *ops = (linattn_operands){0};
    ops->struct_size = sizeof *ops;
}

/* The contiguous call without packed sequences is exactly the entry points
 * above; a pool or cu_seqlens goes through the plan machinery (plan.c). */
linattn_status linattn_run(linattn_op op, const linattn_config *cfg, const linattn_operands *ops)
{
    const la_kernels *kern = la_active_kernels_or_fail(); /* before even a NULL argument */
    if (kern == NULL)
        return LINATTN_E_ISA;
    la_run_arg_copy copy;
    linattn_status st = la_run_args(cfg, ops, &copy, &cfg, &ops);
    if (st == LINATTN_OK)
        st = la_check_run_fields(op, cfg, ops);
    if (st != LINATTN_OK)
        return st;
    /* a bfloat16 state is worked on in float copies: the serving path's
     * gather and scatter */
    if (ops->pool || ops->cu_seqlens || cfg->dtype.s != LINATTN_F32)
        return la_serve_run(op, cfg, ops);
    const int delta = op == LINATTN_OP_DELTA_FORWARD || op == LINATTN_OP_DELTA_STEP;
    const int step = op == LINATTN_OP_STEP || op == LINATTN_OP_DELTA_STEP;
    return run_ops(kern, delta ? LA_FAMILY_DELTA : LA_FAMILY_ADDITIVE, step, cfg, ops);
}
