/* Private: a validated call. The entry points fetch the active kernels,
 * then la_check turns the user's config and pointers into one la_call that
 * the family drivers take: every field checked, every ignored field
 * neutralised (token strides of a step, g strides without a gate), gate
 * kinds reduced to what kernels see, byte counts known not to overflow;
 * la_check_values then reads the values that must be checked. */
#ifndef LINATTN_CALL_H
#define LINATTN_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "gate.h"
#include "linattn.h"

typedef enum { LA_FAMILY_ADDITIVE, LA_FAMILY_DELTA } la_family;

/* The config as 0.2.0 and 0.3.0 released it ended with z_compensated, where
 * 0.4.0's dtype begins (LA_CONFIG_V2_END). A caller of those versions
 * passes that layout's sizeof: the end rounded up to the struct's
 * alignment (264, not 260, on LP64), whose tail padding lies where dtype
 * is now. Both sizes are accepted; only the bytes before dtype are read. */
#define LA_CONFIG_V2_END offsetof(linattn_config, dtype)
#define LA_CONFIG_V2_SIZEOF                                                                       \
    ((LA_CONFIG_V2_END + _Alignof(linattn_config) - 1) / _Alignof(linattn_config) *              \
     _Alignof(linattn_config))
#define LA_IS_CONFIG_V2_SIZE(n) ((n) == LA_CONFIG_V2_END || (n) == LA_CONFIG_V2_SIZEOF)

typedef struct la_call {
    la_family family;
    int step; /* one token per (b, h): T = 1, token strides 0 */
    int64_t B, H, T, dk, dv;
    int64_t qk_heads; /* q/k heads, >= 1, divides H */
    linattn_head_map head_map;
    linattn_phi phi;
    la_gate gate; /* HEAD arrives as TOKEN with sg.token = 0 */
    int head_gate; /* cfg->gate was HEAD (messages name g[b,h]) */
    int causal, normalize, qk_l2norm;
    int z_compensated; /* z is [B][H][2][dk]: sum, then its compensation */
    float eps, scale;
    linattn_algo algo;
    int64_t chunk;   /* 0: the table's choice */
    int num_threads; /* as asked, >= 0; the drivers cap it */
    linattn_dtypes dt; /* every array's element type (state: s only; z is float) */
    linattn_gate_act gate_act;
    float lower_bound;              /* BOUNDED_SIGMOID */
    linattn_beta_act beta_act;
    /* gate_act != NONE: [H], and [H] or [H][dk] (dt_bias may be NULL) */
    const float *A_log, *dt_bias;
    size_t head_state_elems; /* dk*dv (+ dk, or 2 dk compensated, when normalising) */
    const void *q, *k, *v, *beta;
    const float *g;
    void *o, *s;
    float *z; /* z NULL unless normalising */
    linattn_strides sq, sk, sv, so, sg, sbeta;
} la_call;

/* The q/k head value head h reads. */
static inline int64_t la_qk_head(const la_call *c, int64_t h)
{
    const int64_t group = c->H / c->qk_heads;
    return c->head_map == LINATTN_HEADS_TILED ? h % c->qk_heads : h / group;
}

/* Bytes of one element of type t. */
static inline size_t la_dtype_size(linattn_dtype t) { return t == LINATTN_F32 ? 4 : 2; }

/* p advanced by n elements of type t (p NULL stays NULL: no offset is ever
 * added to a null pointer). */
static inline const void *la_at(const void *p, linattn_dtype t, int64_t n)
{
    return p ? (const char *)p + n * (int64_t)la_dtype_size(t) : NULL;
}

/* Is the call plain float32 with no input activation (the four float
 * entry points' calls)? */
static inline int la_call_plain(const la_call *c)
{
    return c->dt.q == LINATTN_F32 && c->dt.k == LINATTN_F32 && c->dt.v == LINATTN_F32 &&
           c->dt.beta == LINATTN_F32 && c->dt.o == LINATTN_F32 && c->dt.s == LINATTN_F32 &&
           c->gate_act == LINATTN_GATE_ACT_NONE && c->beta_act == LINATTN_BETA_ACT_NONE;
}

/* The operands of value head i = b * H + h: q and k of the q/k head it
 * reads, its own v and o, and g and beta where the call has them (else
 * NULL). */
typedef struct {
    const void *q, *k, *v, *beta;
    const float *g;
    void *o;
} la_head_operands;

static inline la_head_operands la_head_operands_at(const la_call *c, int64_t i)
{
    const int64_t b = i / c->H, h = i % c->H, qh = la_qk_head(c, h);
    return (la_head_operands){
        .q = la_at(c->q, c->dt.q, b * c->sq.batch + qh * c->sq.head),
        .k = la_at(c->k, c->dt.k, b * c->sk.batch + qh * c->sk.head),
        .v = la_at(c->v, c->dt.v, b * c->sv.batch + h * c->sv.head),
        .g = c->g ? c->g + b * c->sg.batch + h * c->sg.head : NULL,
        .beta = la_at(c->beta, c->dt.beta, b * c->sbeta.batch + h * c->sbeta.head),
        .o = (void *)la_at(c->o, c->dt.o, b * c->so.batch + h * c->so.head),
    };
}

struct la_kernels;

/* check.c: the call's structure (config, strides, pointers, byte ranges,
 * overlap): OK and *c filled, or a status with linattn_last_error set.
 * No element of an array is read. */
linattn_status la_check(la_call *c, la_family family, int step, const linattn_config *cfg,
                        const linattn_operands *ops);
/* check.c: the values a call reads (A_log and dt_bias, the gate values,
 * beta), once every structural check has passed, la_check's and a serving
 * call's pool and slots: a call refused for its structure reads nothing,
 * whatever its pointers hold. The gate scan runs on kern's table. */
linattn_status la_check_values(const la_call *c, const struct la_kernels *kern);

/* error.c: the thread's last-error message. */
linattn_status la_fail(linattn_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void la_succeed(void);

/* additive_driver.c, delta_driver.c: run a validated call. */
linattn_status la_additive_run(const struct la_kernels *kern, const la_call *c);
linattn_status la_delta_run(const struct la_kernels *kern, const la_call *c);

#endif
