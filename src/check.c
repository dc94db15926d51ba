/* Argument checks for every compute entry point, in a fixed order (the API
 * reference lists it): config, dimensions, enums and scalars, strides,
 * pointers, byte counts, overlap, then the values of g and beta. Nothing is
 * written before all of them pass. Every failure names the field or value
 * at fault in linattn_last_error(). Address ranges come from the strides
 * with overflow checks. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "half.h"
#include "ranges.h"
#include "table.h"
#include "threads.h"

/* ---- config ------------------------------------------------------------ */

/* The config as released in 0.1.0 ended with the g strides; 0.2.0 and
 * 0.3.0 with z_compensated. */
#define CONFIG_V1_SIZE (offsetof(linattn_config, g) + sizeof(linattn_strides))
#define CONFIG_V2_SIZE LA_CONFIG_V2_SIZEOF

static linattn_status read_config(linattn_config *out, const linattn_config *cfg)
{
    /* Only the sizes of released layouts: a size between them would cut a
     * field in two. */
    if (cfg->struct_size != CONFIG_V1_SIZE && !LA_IS_CONFIG_V2_SIZE(cfg->struct_size) &&
        cfg->struct_size != sizeof *cfg)
        return la_fail(LINATTN_E_ARG,
                       "cfg->struct_size = %zu: expected %zu (or %zu for a 0.2/0.3 caller, %zu "
                       "for a 0.1 one); initialise the config with linattn_config_init",
                       cfg->struct_size, sizeof *cfg, (size_t)CONFIG_V2_SIZE,
                       (size_t)CONFIG_V1_SIZE);
    /* Fields an older caller does not have keep linattn_config_init's
     * defaults (all zero except the beta strides, which no 0.1 call reads). */
    memset(out, 0, sizeof *out);
    memcpy(out, cfg, LA_IS_CONFIG_V2_SIZE(cfg->struct_size) ? LA_CONFIG_V2_END : cfg->struct_size);
    return LINATTN_OK;
}

/* The 0.4.0 fields: element types and the input stage's activations. */
static linattn_status check_input_stage(const linattn_config *cfg, la_family family)
{
    const struct {
        const char *name;
        linattn_dtype t;
    } dts[] = {{"q", cfg->dtype.q},       {"k", cfg->dtype.k}, {"v", cfg->dtype.v},
               {"beta", cfg->dtype.beta}, {"o", cfg->dtype.o}, {"s", cfg->dtype.s}};
    for (int i = 0; i < 6; i++)
        if ((unsigned)dts[i].t > LINATTN_F16)
            return la_fail(LINATTN_E_ARG, "cfg->dtype.%s = %d: not a linattn_dtype", dts[i].name,
                           (int)dts[i].t);
    if (cfg->dtype.s == LINATTN_F16)
        return la_fail(LINATTN_E_ARG, "cfg->dtype.s = LINATTN_F16: the state is stored as "
                                      "float32 or bfloat16 (float16's range is too narrow for "
                                      "a state that sums a whole sequence)");
    if ((unsigned)cfg->gate_act > LINATTN_GATE_ACT_BOUNDED_SIGMOID)
        return la_fail(LINATTN_E_ARG, "cfg->gate_act = %d: not a linattn_gate_act",
                       (int)cfg->gate_act);
    if ((unsigned)cfg->beta_act > LINATTN_BETA_ACT_SIGMOID2)
        return la_fail(LINATTN_E_ARG, "cfg->beta_act = %d: not a linattn_beta_act",
                       (int)cfg->beta_act);
    if (cfg->gate_act != LINATTN_GATE_ACT_NONE &&
        cfg->gate != LINATTN_GATE_TOKEN && cfg->gate != LINATTN_GATE_CHANNEL)
        return la_fail(LINATTN_E_ARG,
                       "cfg->gate_act = %d needs cfg->gate TOKEN or CHANNEL (raw projections "
                       "per token, or per token and key channel)",
                       (int)cfg->gate_act);
    if (cfg->gate_act == LINATTN_GATE_ACT_BOUNDED_SIGMOID &&
        !(cfg->gate_lower_bound < 0.0f && cfg->gate_lower_bound >= -FLT_MAX))
        return la_fail(LINATTN_E_ARG,
                       "cfg->gate_lower_bound = %g: the bounded sigmoid gate needs a finite "
                       "bound < 0 (KDA uses -5)",
                       (double)cfg->gate_lower_bound);
    if (cfg->beta_act != LINATTN_BETA_ACT_NONE && family != LA_FAMILY_DELTA)
        return la_fail(LINATTN_E_ARG, "cfg->beta_act = %d: only the delta rule has beta",
                       (int)cfg->beta_act);
    return LINATTN_OK;
}

#define FAIL_DIM(field)                                                                           \
    la_fail(LINATTN_E_SHAPE, "cfg->" #field " = %lld: dimensions must be >= 1",                   \
            (long long)cfg->field)

static linattn_status check_scalars(const linattn_config *cfg, size_t user_size,
                                    la_family family, int step)
{
    if (cfg->batch < 1)
        return FAIL_DIM(batch);
    if (cfg->heads < 1)
        return FAIL_DIM(heads);
    if (!step && cfg->seq_len < 1)
        return FAIL_DIM(seq_len);
    if (cfg->dk < 1)
        return FAIL_DIM(dk);
    if (cfg->dv < 1)
        return FAIL_DIM(dv);
    if ((unsigned)cfg->phi > LINATTN_PHI_IDENTITY)
        return la_fail(LINATTN_E_ARG, "cfg->phi = %d: not a linattn_phi", (int)cfg->phi);
    if ((unsigned)cfg->gate > LINATTN_GATE_CHANNEL)
        return la_fail(LINATTN_E_ARG, "cfg->gate = %d: not a linattn_gate", (int)cfg->gate);
    if ((unsigned)cfg->algo > LINATTN_ALGO_RECURRENT)
        return la_fail(LINATTN_E_ARG, "cfg->algo = %d: not a linattn_algo", (int)cfg->algo);
    if ((unsigned)cfg->head_map > LINATTN_HEADS_TILED)
        return la_fail(LINATTN_E_ARG, "cfg->head_map = %d: not a linattn_head_map",
                       (int)cfg->head_map);
    if (cfg->causal != 0 && cfg->causal != 1)
        return la_fail(LINATTN_E_ARG, "cfg->causal = %d: must be 0 or 1", cfg->causal);
    if (cfg->normalize != 0 && cfg->normalize != 1)
        return la_fail(LINATTN_E_ARG, "cfg->normalize = %d: must be 0 or 1", cfg->normalize);
    if (cfg->z_compensated != 0 && cfg->z_compensated != 1)
        return la_fail(LINATTN_E_ARG, "cfg->z_compensated = %d: must be 0 or 1",
                       cfg->z_compensated);
    if (cfg->qk_l2norm != 0 && cfg->qk_l2norm != 1)
        return la_fail(LINATTN_E_ARG, "cfg->qk_l2norm = %d: must be 0 or 1", cfg->qk_l2norm);
    if (!(cfg->eps >= 0.0f) || !isfinite(cfg->eps))
        return la_fail(LINATTN_E_ARG, "cfg->eps = %g: must be finite and >= 0", (double)cfg->eps);
    if (!isfinite(cfg->scale))
        return la_fail(LINATTN_E_ARG, "cfg->scale = %g: must be finite", (double)cfg->scale);
    if (cfg->chunk < 0)
        return la_fail(LINATTN_E_ARG, "cfg->chunk = %lld: must be >= 0 (0: the library's choice)",
                       (long long)cfg->chunk);
    if (cfg->num_threads < 0)
        return la_fail(LINATTN_E_ARG, "cfg->num_threads = %d: must be >= 0 (0: the default)",
                       cfg->num_threads);
    if (cfg->qk_heads < 0 || (cfg->qk_heads > 0 && cfg->heads % cfg->qk_heads != 0))
        return la_fail(LINATTN_E_ARG,
                       "cfg->qk_heads = %lld: must be 0 (= heads) or divide heads = %lld",
                       (long long)cfg->qk_heads, (long long)cfg->heads);
    if (family == LA_FAMILY_DELTA && user_size == CONFIG_V1_SIZE)
        return la_fail(LINATTN_E_ARG,
                       "cfg->struct_size = %zu is the 0.1 config, which has no beta strides: "
                       "the delta rule needs a config from linattn_config_init",
                       user_size);
    if (family == LA_FAMILY_DELTA && cfg->normalize)
        return la_fail(LINATTN_E_ARG,
                       "cfg->normalize = 1: the delta rule has no normaliser; set it to 0");
    if (family == LA_FAMILY_DELTA && !step && !cfg->causal)
        return la_fail(LINATTN_E_ARG, "cfg->causal = 0: the delta rule is causal only");
    if (!step && !cfg->causal && cfg->gate != LINATTN_GATE_NONE)
        return la_fail(LINATTN_E_ARG, "cfg->causal = 0 with a gate: gates need causal = 1");
    return check_input_stage(cfg, family);
}

/* Strides the call reads must be >= 0; the others are ignored. */
static linattn_status check_strides(const la_call *c)
{
    static const char *const names[] = {"q", "k", "v", "o", "g", "beta"};
    const linattn_strides *all[] = {&c->sq, &c->sk, &c->sv, &c->so, &c->sg, &c->sbeta};
    for (int i = 0; i < 6; i++) {
        if (all[i]->batch < 0)
            return la_fail(LINATTN_E_STRIDE, "cfg->%s.batch = %lld: strides must be >= 0",
                           names[i], (long long)all[i]->batch);
        if (all[i]->head < 0)
            return la_fail(LINATTN_E_STRIDE, "cfg->%s.head = %lld: strides must be >= 0",
                           names[i], (long long)all[i]->head);
        if (all[i]->token < 0)
            return la_fail(LINATTN_E_STRIDE, "cfg->%s.token = %lld: strides must be >= 0",
                           names[i], (long long)all[i]->token);
    }
    return LINATTN_OK;
}

/* ---- values of g and beta ---------------------------------------------- */

/* Gate values lie in [-FLT_MAX, gate_max(c)]: finite log-decays <= 0, or
 * raw projections (gate_act), which may be positive. */
static float gate_max(const la_call *c)
{
    return c->gate_act != LINATTN_GATE_ACT_NONE ? FLT_MAX : 0.0f;
}

/* Rows of gate values per head: one when a token gate is broadcast over
 * the tokens (token stride 0). */
static int64_t gate_rows(const la_call *c)
{
    return c->sg.token == 0 && c->gate == LA_GATE_TOKEN ? 1 : c->T;
}

/* Whether head (b, h) has a bad gate value: a full pass over its values,
 * by the table's vector scan where they are one run of memory or rows of
 * a channel gate. */
static int gate_head_bad(const la_call *c, const la_stage_ops *st, const float *row0,
                         int64_t inner)
{
    const int64_t nt = gate_rows(c);
    const float hi = gate_max(c);
    if (nt == 1 || c->sg.token == inner)
        return st->any_outside(row0, nt * inner, -FLT_MAX, hi);
    for (int64_t t = 0; t < nt; t++) {
        const float *row = row0 + t * c->sg.token;
        if (inner > 1 ? st->any_outside(row, inner, -FLT_MAX, hi)
                      : !(row[0] >= -FLT_MAX && row[0] <= hi))
            return 1;
    }
    return 0;
}

/* The first bad gate value of head (b, h) (t * inner + i), or -1: the
 * element search after gate_head_bad said the head has one. */
static int64_t first_bad_gate(const la_call *c, const float *row0, int64_t inner)
{
    const float hi = gate_max(c);
    for (int64_t t = 0; t < gate_rows(c); t++)
        for (int64_t i = 0; i < inner; i++) {
            const float x = row0[t * c->sg.token + i];
            if (!(x >= -FLT_MAX && x <= hi))
                return t * inner + i;
        }
    return -1;
}

/* A_log [H] (exp(A_log) finite: <= 88) and dt_bias [H] or [H][dk], finite. */
static linattn_status check_gate_params(const la_call *c)
{
    for (int64_t h = 0; h < c->H; h++)
        if (!(c->A_log[h] >= -FLT_MAX && c->A_log[h] <= 88.0f))
            return la_fail(LINATTN_E_ARG,
                           "A_log[%lld] = %g: must be finite and <= 88 (exp(A_log) must be a "
                           "finite float)",
                           (long long)h, (double)c->A_log[h]);
    const int64_t nb = c->H * (c->gate == LA_GATE_CHANNEL ? c->dk : 1);
    for (int64_t i = 0; c->dt_bias && i < nb; i++)
        if (!isfinite(c->dt_bias[i]))
            return c->gate == LA_GATE_CHANNEL
                       ? la_fail(LINATTN_E_ARG, "dt_bias[h=%lld,c=%lld] = %g: must be finite",
                                 (long long)(i / c->dk), (long long)(i % c->dk),
                                 (double)c->dt_bias[i])
                       : la_fail(LINATTN_E_ARG, "dt_bias[%lld] = %g: must be finite",
                                 (long long)i, (double)c->dt_bias[i]);
    return LINATTN_OK;
}

/* Head (b, h) = head i: its gate values. */
static const float *gate_head(const la_call *c, int64_t i)
{
    return c->g + i / c->H * c->sg.batch + i % c->H * c->sg.head;
}

/* The gate values are checked on the threads the call will run on, heads
 * shared out: a channel gate has dk values per token and head, as many as
 * q, and one thread scanning them all took 9 ms of a 73 ms call on two
 * threads (H = 32, T = 4096, dk = 128). The message names the first bad
 * value in (b, h, t, c) order whatever the thread count. */
static linattn_status check_gate_values(const la_call *c, const la_stage_ops *st)
{
    const int64_t inner = c->gate == LA_GATE_CHANNEL ? c->dk : 1;
    const int64_t heads = c->B * c->H;
    const int64_t rows = gate_rows(c);
    const double bytes = (double)heads * (double)rows * (double)inner * sizeof(float);
    int nt = la_team_size(la_threads_for_call(c->num_threads, c->B, c->T, c->H, c->dk, c->dv),
                          heads);
    if (bytes < (double)nt * LA_MIN_BYTES_PER_THREAD) /* too few to share */
        nt = bytes < 2.0 * LA_MIN_BYTES_PER_THREAD ? 1 : (int)(bytes / LA_MIN_BYTES_PER_THREAD);
    int64_t first[LA_MAX_THREADS]; /* each thread's first bad head (its heads ascend) */
    for (int i = 0; i < nt; i++)
        first[i] = heads;
    LA_FOR_EACH_UNIT(nt, heads, i, end, tid, {
        if (first[tid] == heads && gate_head_bad(c, st, gate_head(c, i), inner))
            first[tid] = i;
    });
    int64_t bad = heads;
    for (int i = 0; i < nt; i++)
        bad = first[i] < bad ? first[i] : bad;
    if (bad == heads)
        return LINATTN_OK;
    const int64_t b = bad / c->H, h = bad % c->H;
    const float *row0 = gate_head(c, bad);
    const int64_t at = first_bad_gate(c, row0, inner);
    if (at < 0) /* the scan and the search apply one rule: not reached */
        return LINATTN_OK;
    const int64_t t = at / inner, i = at % inner;
    const float x = row0[t * c->sg.token + i];
    char where[96];
    if (c->head_gate)
        snprintf(where, sizeof where, "g[b=%lld,h=%lld]", (long long)b, (long long)h);
    else if (c->gate == LA_GATE_CHANNEL)
        snprintf(where, sizeof where, "g[b=%lld,h=%lld,t=%lld,c=%lld]", (long long)b,
                 (long long)h, (long long)t, (long long)i);
    else
        snprintf(where, sizeof where, "g[b=%lld,h=%lld,t=%lld]", (long long)b, (long long)h,
                 (long long)t);
    if (c->gate_act != LINATTN_GATE_ACT_NONE)
        return la_fail(LINATTN_E_ARG,
                       "%s = %g: raw gate projections (cfg->gate_act) must be finite", where,
                       (double)x);
    if (isnan(x))
        return la_fail(LINATTN_E_ARG, "%s = nan: gate values must be finite log-decays", where);
    if (x < 0.0f)
        return la_fail(LINATTN_E_ARG,
                       "%s = -inf: gate values must be finite; for a full reset pass a large "
                       "finite negative value such as -1e30",
                       where);
    return la_fail(LINATTN_E_ARG,
                   "%s = %g > 0: gate values are log-decays (<= 0); pass log(a) for a decay "
                   "factor a%s",
                   where, (double)x, x <= 1.0f ? " (this looks like a decay factor)" : "");
}

/* Beta as a float whatever its type (the checks read each value once). */
static float beta_at(const la_call *c, const void *row, int64_t t)
{
    const int64_t i = t * c->sbeta.token;
    switch (c->dt.beta) {
    case LINATTN_BF16: return la_bf16_to_f32(((const uint16_t *)row)[i]);
    case LINATTN_F16: return la_f16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

/* beta in [0, 2], or finite logits with beta_act. */
static linattn_status check_beta_values(const la_call *c)
{
    const int logits = c->beta_act != LINATTN_BETA_ACT_NONE;
    const float lo = logits ? -FLT_MAX : 0.0f, hi = logits ? FLT_MAX : 2.0f;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            const void *row = la_at(c->beta, c->dt.beta, b * c->sbeta.batch + h * c->sbeta.head);
            int bad = 0;
            if (c->dt.beta == LINATTN_F32) { /* branch-free: vectorises */
                const float *r = row;
                for (int64_t t = 0; t < c->T; t++)
                    bad |= !(r[t * c->sbeta.token] >= lo) | (r[t * c->sbeta.token] > hi);
            } else {
                bad = 1;
            }
            if (!bad)
                continue;
            for (int64_t t = 0; t < c->T; t++) {
                const float x = beta_at(c, row, t);
                if (!(x >= lo && x <= hi))
                    return la_fail(LINATTN_E_ARG,
                                   logits ? "beta[b=%lld,h=%lld,t=%lld] = %g: logits "
                                            "(cfg->beta_act) must be finite"
                                          : "beta[b=%lld,h=%lld,t=%lld] = %g: must be finite "
                                            "and in [0, 2]",
                                   (long long)b, (long long)h, (long long)t, (double)x);
            }
        }
    return LINATTN_OK;
}

/* ---- the whole check --------------------------------------------------- */

static layout feature_layout(const la_call *c, const linattn_strides *st, int64_t heads,
                             int64_t d)
{
    return (layout){4, {c->B, heads, c->T, d}, {st->batch, st->head, st->token, 1}};
}

static layout gate_layout(const la_call *c, int head_gate)
{
    const linattn_strides *st = &c->sg;
    if (head_gate || c->gate == LA_GATE_TOKEN)
        return (layout){3, {c->B, c->H, head_gate ? 1 : c->T}, {st->batch, st->head, st->token}};
    return feature_layout(c, st, c->H, c->dk);
}

linattn_status la_check(la_call *c, la_family family, int step, const linattn_config *user,
                        const linattn_operands *ops)
{
    const void *q = ops->q, *k = ops->k, *v = ops->v, *beta = ops->beta;
    const float *g = ops->g;
    void *o = ops->o, *s = ops->s;
    float *z = ops->z;
    if (user == NULL)
        return la_fail(LINATTN_E_NULL, "cfg is NULL");
    linattn_config cfgv;
    const linattn_config *cfg = user;
    linattn_status st;
    if (user->struct_size != sizeof *user) { /* an older caller: fill in the defaults */
        if ((st = read_config(&cfgv, user)) != LINATTN_OK)
            return st;
        cfg = &cfgv;
    }
    if ((st = check_scalars(cfg, user->struct_size, family, step)) != LINATTN_OK)
        return st;

    const int gated = cfg->gate != LINATTN_GATE_NONE;
    const int head_gate = cfg->gate == LINATTN_GATE_HEAD;
    *c = (la_call){
        .family = family,
        .step = step,
        .B = cfg->batch,
        .H = cfg->heads,
        .T = step ? 1 : cfg->seq_len,
        .dk = cfg->dk,
        .dv = cfg->dv,
        .qk_heads = cfg->qk_heads ? cfg->qk_heads : cfg->heads,
        .head_map = cfg->head_map,
        .phi = cfg->phi,
        .head_gate = head_gate,
        .gate = !gated                             ? LA_GATE_NONE
                : cfg->gate == LINATTN_GATE_CHANNEL ? LA_GATE_CHANNEL
                                                    : LA_GATE_TOKEN,
        .causal = step ? 1 : cfg->causal, /* one token: causal by definition */
        .normalize = cfg->normalize,
        .qk_l2norm = cfg->qk_l2norm,
        .z_compensated = family == LA_FAMILY_ADDITIVE && cfg->normalize && cfg->z_compensated,
        .eps = cfg->eps,
        .scale = cfg->scale,
        .algo = cfg->algo,
        .chunk = cfg->chunk,
        .num_threads = cfg->num_threads,
        .dt = cfg->dtype,
        .gate_act = gated ? cfg->gate_act : LINATTN_GATE_ACT_NONE,
        .lower_bound = cfg->gate_lower_bound,
        .beta_act = family == LA_FAMILY_DELTA ? cfg->beta_act : LINATTN_BETA_ACT_NONE,
        .sq = cfg->q,
        .sk = cfg->k,
        .sv = cfg->v,
        .so = cfg->o,
        .sg = gated ? cfg->g : (linattn_strides){0, 0, 0},
        .sbeta = family == LA_FAMILY_DELTA ? cfg->beta : (linattn_strides){0, 0, 0},
    };
    /* Ignored strides are neutral: a step's token strides, a per-head
     * gate's token stride. */
    if (step)
        c->sq.token = c->sk.token = c->sv.token = c->so.token = c->sg.token = c->sbeta.token = 0;
    if (head_gate)
        c->sg.token = 0;
    if ((st = check_strides(c)) != LINATTN_OK)
        return st;

    const char *missing = !q ? "q" : !k ? "k" : !v ? "v" : !o ? "o" : NULL;
    if (!missing && gated && !g)
        missing = "g (cfg->gate is not NONE)";
    if (!missing && family == LA_FAMILY_DELTA && !beta)
        missing = "beta";
    if (missing)
        return la_fail(LINATTN_E_NULL, "%s is NULL", missing);
    if (family == LA_FAMILY_ADDITIVE && cfg->normalize && (s == NULL) != (z == NULL))
        return la_fail(LINATTN_E_NULL,
                       "%s is NULL but %s is not: with normalize = 1, pass s and z together "
                       "(or both NULL for a zero initial state)",
                       s ? "z" : "s", s ? "s" : "z");
    if (step && !s)
        return la_fail(LINATTN_E_NULL, "s is NULL: a step needs the state");
    if (step && family == LA_FAMILY_ADDITIVE && cfg->normalize && !z)
        return la_fail(LINATTN_E_NULL, "z is NULL: a normalised step needs the normaliser state");
    if (family == LA_FAMILY_DELTA || !cfg->normalize)
        z = NULL; /* neither read nor written */
    c->q = q, c->k = k, c->v = v, c->g = gated ? g : NULL;
    c->beta = family == LA_FAMILY_DELTA ? beta : NULL;
    c->o = o, c->s = s, c->z = z;
    if (c->gate_act != LINATTN_GATE_ACT_NONE) {
        c->A_log = ops->A_log, c->dt_bias = ops->dt_bias;
        if (c->A_log == NULL)
            return la_fail(LINATTN_E_NULL, "A_log is NULL: cfg->gate_act needs A_log [heads]");
    }
    if (family != LA_FAMILY_DELTA)
        c->dt.beta = LINATTN_F32; /* no beta: its type is not used */

    /* Byte counts: the state [B][H][dk][dv] (+ [B][H][dk]), which the
     * drivers also allocate per head when s is NULL, and every array. */
    int64_t head_elems, all_elems, z_elems;
    if (__builtin_mul_overflow(c->dk, c->dv, &head_elems) ||
        __builtin_add_overflow(head_elems,
                               c->normalize && family == LA_FAMILY_ADDITIVE
                                   ? c->dk * (1 + c->z_compensated)
                                   : 0,
                               &head_elems) ||
        __builtin_mul_overflow(head_elems, c->B, &all_elems) ||
        __builtin_mul_overflow(all_elems, c->H, &all_elems) ||
        __builtin_mul_overflow(all_elems, (int64_t)sizeof(float), &all_elems) ||
        (uint64_t)all_elems > SIZE_MAX / 2)
        return la_fail(LINATTN_E_SHAPE,
                       "the state of B*H = %lld x %lld heads of dk x dv = %lld x %lld is too "
                       "large to address",
                       (long long)c->B, (long long)c->H, (long long)c->dk, (long long)c->dv);
    c->head_state_elems = (size_t)head_elems;
    z_elems = c->B * c->H * c->dk * (1 + c->z_compensated); /* <= all_elems */

    const layout lq = feature_layout(c, &c->sq, c->qk_heads, c->dk),
                 lk = feature_layout(c, &c->sk, c->qk_heads, c->dk),
                 lv = feature_layout(c, &c->sv, c->H, c->dv),
                 lo = feature_layout(c, &c->so, c->H, c->dv), lg = gate_layout(c, head_gate),
                 lb = {3, {c->B, c->H, c->T}, {c->sbeta.batch, c->sbeta.head, c->sbeta.token}},
                 ls = {1, {c->B * c->H * c->dk * c->dv}, {1}}, lz = {1, {z_elems}, {1}};
    range r[8] = {{0, 0}};
    enum { RQ, RK, RV, RG, RB, RO, RS, RZ };
    static const char *const rname[] = {"q", "k", "v", "g", "beta", "o", "s", "z"};
    const struct {
        const void *p;
        const layout *l;
        size_t elem;
    } arrays[] = {{q, &lq, la_dtype_size(c->dt.q)},       {k, &lk, la_dtype_size(c->dt.k)},
                  {v, &lv, la_dtype_size(c->dt.v)},       {c->g, &lg, sizeof(float)},
                  {c->beta, &lb, la_dtype_size(c->dt.beta)}, {o, &lo, la_dtype_size(c->dt.o)},
                  {s, &ls, la_dtype_size(c->dt.s)},       {z, &lz, sizeof(float)}};
    for (int i = 0; i < 8; i++)
        if (arrays[i].p && !range_of(arrays[i].p, arrays[i].l, arrays[i].elem, &r[i]))
            return la_fail(LINATTN_E_SHAPE,
                           "%s: its shape and strides address more bytes than fit in memory",
                           rname[i]);

    if (self_overlaps(&lo))
        return la_fail(LINATTN_E_OVERLAP,
                       "o overlaps itself: its strides (batch %lld, head %lld, token %lld) do "
                       "not nest (sorted, each must step past what the smaller ones span), so "
                       "two (b, h, t) may reach one element",
                       (long long)c->so.batch, (long long)c->so.head, (long long)c->so.token);
    for (int out = RO; out <= RZ; out++)
        for (int j = 0; j < 8; j++)
            if (j != out && r[out].hi != 0 && r[j].hi != 0 && ranges_overlap(r[out], r[j]))
                return la_fail(LINATTN_E_OVERLAP, "%s overlaps %s: outputs must not share memory "
                                                  "with inputs or other outputs",
                               rname[out], rname[j]);
    return LINATTN_OK;
}

linattn_status la_check_values(const la_call *c, const la_kernels *kern)
{
    linattn_status st;
    if (c->gate_act != LINATTN_GATE_ACT_NONE && (st = check_gate_params(c)) != LINATTN_OK)
        return st;
    if (c->g && (st = check_gate_values(c, kern->stage)) != LINATTN_OK)
        return st;
    if (c->beta && (st = check_beta_values(c)) != LINATTN_OK)
        return st;
    return LINATTN_OK;
}
