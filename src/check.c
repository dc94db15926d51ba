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
#include "ranges.h"

/* ---- config ------------------------------------------------------------ */

/* The config as released in 0.1.0 ended with the g strides. */
#define CONFIG_V1_SIZE (offsetof(linattn_config, g) + sizeof(linattn_strides))

static linattn_status read_config(linattn_config *out, const linattn_config *cfg)
{
    /* Only the sizes of released layouts: a size between them would cut a
     * field in two. */
    if (cfg->struct_size != CONFIG_V1_SIZE && cfg->struct_size != sizeof *cfg)
        return la_fail(LINATTN_E_ARG,
                       "cfg->struct_size = %zu: expected %zu (or %zu for a 0.1 caller); "
                       "initialise the config with linattn_config_init",
                       cfg->struct_size, sizeof *cfg, (size_t)CONFIG_V1_SIZE);
    /* Fields an older caller does not have keep linattn_config_init's
     * defaults (all zero except the beta strides, which no 0.1 call reads). */
    memset(out, 0, sizeof *out);
    memcpy(out, cfg, cfg->struct_size);
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
    if (family == LA_FAMILY_DELTA && user_size < sizeof(linattn_config))
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
    return LINATTN_OK;
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

/* The first gate value of head (b, h) that is NaN, > 0 or -inf, or -1. The
 * inner loop is branch-free so it vectorises: this is a full pass over g. */
static int64_t first_bad_gate(const la_call *c, const float *row0, int64_t inner)
{
    const int64_t nt = c->sg.token == 0 && c->gate == LA_GATE_TOKEN ? 1 : c->T;
    for (int64_t t = 0; t < nt; t++) {
        const float *row = row0 + t * c->sg.token;
        int bad = 0;
        for (int64_t i = 0; i < inner; i++)
            bad |= !(row[i] <= 0.0f) | (row[i] < -FLT_MAX);
        if (bad)
            for (int64_t i = 0;; i++)
                if (!(row[i] <= 0.0f) || row[i] < -FLT_MAX)
                    return t * inner + i;
    }
    return -1;
}

static linattn_status check_gate_values(const la_call *c, int head_gate)
{
    const int64_t inner = c->gate == LA_GATE_CHANNEL ? c->dk : 1;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            const float *row0 = c->g + b * c->sg.batch + h * c->sg.head;
            const int64_t at = first_bad_gate(c, row0, inner);
            if (at < 0)
                continue;
            const int64_t t = at / inner, i = at % inner;
            const float x = row0[t * c->sg.token + i];
            char where[96];
            if (head_gate)
                snprintf(where, sizeof where, "g[b=%lld,h=%lld]", (long long)b, (long long)h);
            else if (c->gate == LA_GATE_CHANNEL)
                snprintf(where, sizeof where, "g[b=%lld,h=%lld,t=%lld,c=%lld]", (long long)b,
                         (long long)h, (long long)t, (long long)i);
            else
                snprintf(where, sizeof where, "g[b=%lld,h=%lld,t=%lld]", (long long)b,
                         (long long)h, (long long)t);
            if (isnan(x))
                return la_fail(LINATTN_E_ARG, "%s = nan: gate values must be finite log-decays",
                               where);
            if (x < 0.0f)
                return la_fail(LINATTN_E_ARG,
                               "%s = -inf: gate values must be finite; for a full reset pass a "
                               "large finite negative value such as -1e30",
                               where);
            return la_fail(LINATTN_E_ARG,
                           "%s = %g > 0: gate values are log-decays (<= 0); pass log(a) for a "
                           "decay factor a%s",
                           where, (double)x,
                           x <= 1.0f ? " (this looks like a decay factor)" : "");
        }
    return LINATTN_OK;
}

static linattn_status check_beta_values(const la_call *c)
{
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            const float *row = c->beta + b * c->sbeta.batch + h * c->sbeta.head;
            int bad = 0;
            for (int64_t t = 0; t < c->T; t++) /* branch-free: vectorises */
                bad |= !(row[t * c->sbeta.token] >= 0.0f) | (row[t * c->sbeta.token] > 2.0f);
            if (!bad)
                continue;
            for (int64_t t = 0;; t++) {
                const float x = row[t * c->sbeta.token];
                if (!(x >= 0.0f && x <= 2.0f))
                    return la_fail(LINATTN_E_ARG,
                                   "beta[b=%lld,h=%lld,t=%lld] = %g: must be finite and in "
                                   "[0, 2]",
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
                        const float *q, const float *k, const float *v, const float *g,
                        const float *beta, float *o, float *s, float *z)
{
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
        .in_size = sizeof(float),
        .out_size = sizeof(float),
        .state_size = sizeof(float),
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
        __builtin_mul_overflow(all_elems, (int64_t)c->state_size, &all_elems) ||
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
    } arrays[] = {{q, &lq, c->in_size},   {k, &lk, c->in_size},     {v, &lv, c->in_size},
                  {c->g, &lg, c->in_size}, {c->beta, &lb, c->in_size}, {o, &lo, c->out_size},
                  {s, &ls, c->state_size}, {z, &lz, c->state_size}};
    for (int i = 0; i < 8; i++)
        if (arrays[i].p && !range_of(arrays[i].p, arrays[i].l, arrays[i].elem, &r[i]))
            return la_fail(LINATTN_E_SHAPE,
                           "%s: its shape and strides address more bytes than fit in memory",
                           rname[i]);

    if (self_overlaps(&lo))
        return la_fail(LINATTN_E_OVERLAP,
                       "o overlaps itself: its strides (batch %lld, head %lld, token %lld) let "
                       "two (b, h, t) reach the same element",
                       (long long)c->so.batch, (long long)c->so.head, (long long)c->so.token);
    for (int out = RO; out <= RZ; out++)
        for (int j = 0; j < 8; j++)
            if (j != out && r[out].hi != 0 && r[j].hi != 0 && ranges_overlap(r[out], r[j]))
                return la_fail(LINATTN_E_OVERLAP, "%s overlaps %s: outputs must not share memory "
                                                  "with inputs or other outputs",
                               rname[out], rname[j]);

    if (gated && (st = check_gate_values(c, head_gate)) != LINATTN_OK)
        return st;
    if (family == LA_FAMILY_DELTA && (st = check_beta_values(c)) != LINATTN_OK)
        return st;
    return LINATTN_OK;
}
