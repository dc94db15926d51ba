/* The input stage's driver side (stage.h): which operands need a panel, the
 * panels' layout in the caller's buffer, and the q/k panels kept for the
 * next value head of the same q/k head. The vector work is the table's
 * la_stage_ops. */
#include <math.h>
#include <string.h>

#include "call.h"
#include "sizes.h"
#include "stage.h"

la_source la_source_at(const la_call *c, int64_t i)
{
    const la_head_operands p = la_head_operands_at(c, i);
    const int64_t h = i % c->H;
    const int acts = c->gate_act != LINATTN_GATE_ACT_NONE;
    return (la_source){
        .T = c->T,
        .dk = c->dk,
        .dv = c->dv,
        .q = p.q,
        .k = p.k,
        .v = p.v,
        .beta = p.beta,
        .g = p.g,
        .o = p.o,
        .q_ts = c->sq.token,
        .k_ts = c->sk.token,
        .v_ts = c->sv.token,
        .g_ts = c->sg.token, /* 0 without a gate */
        .beta_ts = c->sbeta.token,
        .o_ts = c->so.token,
        .dt = c->dt,
        .phi = c->phi,
        .l2norm = c->qk_l2norm,
        .gate = c->gate,
        .gate_act = c->gate_act,
        .a_exp = acts ? expf(c->A_log[h]) : 0.0f,
        .lower_bound = c->lower_bound,
        .dt_bias = acts && c->dt_bias ? c->dt_bias + h * (c->gate == LA_GATE_CHANNEL ? c->dk : 1)
                                      : NULL,
        .beta_act = c->beta_act,
    };
}

la_source la_source_tokens(const la_source *s, int64_t t0, int64_t T)
{
    la_source x = *s;
    x.T = T;
    x.q = la_at(s->q, s->dt.q, t0 * s->q_ts);
    x.k = la_at(s->k, s->dt.k, t0 * s->k_ts);
    x.v = la_at(s->v, s->dt.v, t0 * s->v_ts);
    x.beta = la_at(s->beta, s->dt.beta, t0 * s->beta_ts);
    x.g = s->g ? s->g + t0 * s->g_ts : NULL;
    x.o = (void *)la_at(s->o, s->dt.o, t0 * s->o_ts);
    return x;
}

/* The q/k panels a buffer holds: made from these rows, for this block. */
typedef struct {
    const void *q, *k;
    int64_t t0, n;
    int valid;
} stage_memo;

static int qk_panel(const la_source *s)
{
    return s->l2norm || s->dt.q != LINATTN_F32 || s->dt.k != LINATTN_F32;
}

int la_stage_passthrough(const la_source *s)
{
    return !qk_panel(s) && s->dt.v == LINATTN_F32 && s->dt.o == LINATTN_F32 &&
           s->gate_act == LINATTN_GATE_ACT_NONE &&
           (s->beta == NULL || (s->dt.beta == LINATTN_F32 && s->beta_act == LINATTN_BETA_ACT_NONE));
}

/* Panels of a block of n tokens, after the memo: q, k [n][dk]; v, o
 * [n][dv]; g [n][dk] (CHANNEL) or [n]; beta [n]. */
typedef struct {
    float *q, *k, *v, *o, *g, *beta;
} stage_panels;

static stage_panels carve(const la_source *s, int64_t n, void *buf)
{
    unsigned char *p = (unsigned char *)buf + la_size_up64(sizeof(stage_memo));
    const size_t qk = la_size_floats((size_t)(n * s->dk)), vo = la_size_floats((size_t)(n * s->dv));
    stage_panels x;
    x.q = (float *)p, p += qk;
    x.k = (float *)p, p += qk;
    x.v = (float *)p, p += vo;
    x.o = (float *)p, p += vo;
    x.g = (float *)p, p += la_size_floats((size_t)(n * s->dk));
    x.beta = (float *)p;
    return x;
}

size_t la_stage_bytes(const la_source *s, int64_t n)
{
    const size_t N = la_size_of_dim(n);
    const size_t qk = la_size_floats(la_size_mul(N, la_size_of_dim(s->dk)));
    const size_t vo = la_size_floats(la_size_mul(N, la_size_of_dim(s->dv)));
    size_t b = la_size_up64(sizeof(stage_memo));
    b = la_size_add(b, la_size_mul(3, qk)); /* q, k, g */
    b = la_size_add(b, la_size_mul(2, vo));
    return la_size_add(b, la_size_floats(N));
}

void la_stage_reset(void *buf)
{
    if (buf)
        ((stage_memo *)buf)->valid = 0;
}

void la_stage_in(const la_stage_ops *ops, const la_source *s, int64_t t0, int64_t n, void *buf,
                 la_head *h)
{
    la_stage_in_parts(ops, s, t0, n, buf, h, LA_STAGE_ALL);
}

void la_stage_in_parts(const la_stage_ops *ops, const la_source *s, int64_t t0, int64_t n,
                       void *buf, la_head *h, unsigned parts)
{
    const int64_t dk = s->dk, dv = s->dv;
    const stage_panels p = carve(s, n, buf);
    stage_memo *m = buf;
    h->T = n;
    h->gate = s->gate;
    if (qk_panel(s) && parts != LA_STAGE_ALL) { /* one of the two: no memo */
        for (int64_t i = 0; i < n; i++)
            if (parts & LA_STAGE_Q)
                ops->features(s->dt.q, la_at(s->q, s->dt.q, (t0 + i) * s->q_ts), dk, s->phi,
                              s->l2norm, p.q + i * dk);
            else
                ops->features(s->dt.k, la_at(s->k, s->dt.k, (t0 + i) * s->k_ts), dk, s->phi,
                              s->l2norm, p.k + i * dk);
        m->valid = 0;
        h->q = p.q, h->k = p.k, h->q_ts = h->k_ts = dk;
        h->phi = LINATTN_PHI_IDENTITY;
    } else if (qk_panel(s)) {
        if (!(m->valid && m->q == s->q && m->k == s->k && m->t0 == t0 && m->n == n)) {
            for (int64_t i = 0; i < n; i++) {
                ops->features(s->dt.q, la_at(s->q, s->dt.q, (t0 + i) * s->q_ts), dk, s->phi,
                              s->l2norm, p.q + i * dk);
                ops->features(s->dt.k, la_at(s->k, s->dt.k, (t0 + i) * s->k_ts), dk, s->phi,
                              s->l2norm, p.k + i * dk);
            }
            *m = (stage_memo){s->q, s->k, t0, n, 1};
        }
        h->q = p.q, h->k = p.k, h->q_ts = h->k_ts = dk;
        h->phi = LINATTN_PHI_IDENTITY;
    } else {
        h->q = (const float *)s->q + t0 * s->q_ts, h->q_ts = s->q_ts;
        h->k = (const float *)s->k + t0 * s->k_ts, h->k_ts = s->k_ts;
        h->phi = s->phi;
    }
    /* q alone: v, g and beta get their views but not their panels */
    const int kv = (parts & LA_STAGE_KV) != 0;
    if (s->dt.v != LINATTN_F32) {
        /* rows one after another: one call for the block (a row of dv = 64,
         * four vectors, behind an indirect call cost bfloat16 forwards 3%) */
        if (kv && s->v_ts == dv)
            ops->load(s->dt.v, la_at(s->v, s->dt.v, t0 * dv), n * dv, p.v);
        else
            for (int64_t i = 0; i < n && kv; i++)
                ops->load(s->dt.v, la_at(s->v, s->dt.v, (t0 + i) * s->v_ts), dv, p.v + i * dv);
        h->v = p.v, h->v_ts = dv;
    } else {
        h->v = (const float *)s->v + t0 * s->v_ts, h->v_ts = s->v_ts;
    }
    if (s->gate == LA_GATE_NONE) {
        h->g = NULL, h->g_ts = 0;
    } else if (s->gate_act == LINATTN_GATE_ACT_NONE) {
        h->g = s->g + t0 * s->g_ts, h->g_ts = s->g_ts;
    } else if (s->gate == LA_GATE_TOKEN) {
        for (int64_t i = 0; i < n && kv; i++)
            p.g[i] = s->g[(t0 + i) * s->g_ts];
        if (kv)
            ops->gate(s->gate_act, p.g, p.g, s->dt_bias, 0, n, s->a_exp, s->lower_bound);
        h->g = p.g, h->g_ts = 1;
    } else {
        for (int64_t i = 0; i < n && kv; i++)
            ops->gate(s->gate_act, s->g + (t0 + i) * s->g_ts, p.g + i * dk, s->dt_bias, 1, dk,
                      s->a_exp, s->lower_bound);
        h->g = p.g, h->g_ts = dk;
    }
    if (s->beta == NULL) {
        h->beta = NULL, h->beta_ts = 0;
    } else if (s->dt.beta == LINATTN_F32 && s->beta_act == LINATTN_BETA_ACT_NONE) {
        h->beta = (const float *)s->beta + t0 * s->beta_ts, h->beta_ts = s->beta_ts;
    } else {
        for (int64_t i = 0; i < n && kv; i++)
            ops->load(s->dt.beta, la_at(s->beta, s->dt.beta, (t0 + i) * s->beta_ts), 1, p.beta + i);
        if (kv && s->beta_act != LINATTN_BETA_ACT_NONE)
            ops->beta(s->beta_act, p.beta, n);
        h->beta = p.beta, h->beta_ts = 1;
    }
    if (s->dt.o != LINATTN_F32) {
        h->o = p.o, h->o_ts = dv;
    } else {
        h->o = (float *)s->o + t0 * s->o_ts, h->o_ts = s->o_ts;
    }
}

static void prefetch_rows(const void *x, linattn_dtype t, int64_t ts, int64_t t0, int64_t n,
                          int64_t d)
{
    const int64_t bytes = d * (int64_t)la_dtype_size(t);
    for (int64_t i = 0; i < n; i++) {
        const char *row = la_at(x, t, (t0 + i) * ts);
        for (int64_t b = 0; b < bytes; b += 64)
            __builtin_prefetch(row + b, 0, 2);
    }
}

void la_stage_prefetch(const la_source *s, int64_t t0, int64_t n, unsigned parts)
{
    n = t0 + n > s->T ? s->T - t0 : n;
    if (parts & LA_STAGE_Q)
        prefetch_rows(s->q, s->dt.q, s->q_ts, t0, n, s->dk);
    if (parts & LA_STAGE_KV) {
        prefetch_rows(s->k, s->dt.k, s->k_ts, t0, n, s->dk);
        prefetch_rows(s->v, s->dt.v, s->v_ts, t0, n, s->dv);
    }
}

void la_stage_out(const la_stage_ops *ops, const la_source *s, int64_t t0, int64_t n,
                  const la_head *h, int64_t j0, int64_t nj)
{
    if (s->dt.o == LINATTN_F32)
        return;
    if (j0 == 0 && nj == s->dv && s->o_ts == s->dv && h->o_ts == s->dv) { /* whole rows, one run */
        ops->store(s->dt.o, h->o, n * nj, (void *)la_at(s->o, s->dt.o, t0 * s->o_ts));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        ops->store(s->dt.o, h->o + i * h->o_ts + j0, nj,
                   (void *)la_at(s->o, s->dt.o, (t0 + i) * s->o_ts + j0));
}
