/* The delta family's driver. Value columns of the state are independent
 * (see delta.h), so the work units are (batch, value head, column tile):
 * B = 1 decode and prefill still spread over every thread, and each unit
 * computes exactly the same thing whatever the thread count. */
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "table.h"
#include "threads.h"

static la_delta_head head_at(const la_call *c, int64_t i, int64_t chunk)
{
    const la_head_operands p = la_head_operands_at(c, i);
    return (la_delta_head){
        .T = c->T,
        .dk = c->dk,
        .dv = c->dv,
        .q = p.q,
        .k = p.k,
        .v = p.v,
        .g = p.g,
        .beta = p.beta,
        .o = p.o,
        .q_ts = c->sq.token,
        .k_ts = c->sk.token,
        .v_ts = c->sv.token,
        .g_ts = c->sg.token, /* 0 without a gate */
        .beta_ts = c->sbeta.token,
        .o_ts = c->so.token,
        .scale = c->scale,
        .phi = c->phi,
        .l2norm = c->qk_l2norm,
        .gate = c->gate,
        .chunk = chunk,
    };
}

/* A step keeps the kernel workspace on the stack when it fits: decode
 * calls never allocate (each thread has its own stack). */
enum { STEP_STACK_BYTES = 8192 };

typedef struct {
    const la_delta_ops *ops;
    const la_call *c;
    int chunked;
    int64_t chunk, tile, ntiles;
    size_t zero_bytes, kernel_bytes, per_thread;
    unsigned char *ws;
} delta_job;

static void run_unit(const delta_job *j, int64_t unit, int tid)
{
    const la_call *c = j->c;
    const int64_t i = unit / j->ntiles, j0 = unit % j->ntiles * j->tile;
    const int64_t nj = c->dv - j0 < j->tile ? c->dv - j0 : j->tile;
    _Alignas(64) unsigned char stack[STEP_STACK_BYTES];
    unsigned char *mine = j->ws ? j->ws + j->per_thread * (size_t)tid : stack;
    la_delta_head h = head_at(c, i, j->chunk);
    if (c->s) {
        h.s = c->s + (size_t)i * c->head_state_elems;
    } else { /* a zero initial state; only this tile's columns are used */
        h.s = (float *)mine;
        for (int64_t r = 0; r < c->dk; r++)
            memset(h.s + r * c->dv + j0, 0, (size_t)nj * sizeof(float));
    }
    void *kws = mine + j->zero_bytes;
    if (j->chunked)
        j->ops->chunked(&h, j0, nj, kws);
    else
        j->ops->recurrent(&h, j0, nj, kws);
}

/* The algorithm and chunk of a call: never the thread count. */
static void choose_algo(delta_job *j, const la_kernels *kern, const la_call *c)
{
    const la_tuning *t = kern->delta_tuning;
    j->chunked = !c->step && (c->algo == LINATTN_ALGO_CHUNKED ||
                              (c->algo == LINATTN_ALGO_AUTO &&
                               la_tuned_chunked(t->delta_chunked_above_dk, c->dk, c->gate)));
    if (j->chunked) {
        j->chunk = c->chunk ? c->chunk : la_tuned_chunk(t->delta_chunk, c->dk, c->dv, c->gate);
        if (j->chunk > c->T)
            j->chunk = c->T;
    }
}

linattn_status la_delta_run(const la_kernels *kern, const la_call *c)
{
    const la_delta_ops *ops = kern->delta;
    delta_job j = {.ops = ops, .c = c};
    const int wanted = la_threads_wanted(c->num_threads);
    const int64_t heads = c->B * c->H;
    /* the table's unit width, narrowed (to whole 16-column groups) when
     * there are fewer units than threads; a step takes whole heads: one
     * head's columns split over threads made a step 3-15x slower (1 head,
     * dk = dv = 128: 1.6 us on one thread, 5-25 us on two) */
    j.tile = c->step ? c->dv : ops->tile_columns(c->dk, c->dv);
    if (!c->step && heads * ((c->dv + j.tile - 1) / j.tile) < wanted) {
        const int64_t per_head = (wanted + heads - 1) / heads;
        j.tile = ((c->dv + per_head - 1) / per_head + 15) / 16 * 16;
    }
    if (j.tile > c->dv)
        j.tile = c->dv;
    j.ntiles = (c->dv + j.tile - 1) / j.tile;
    choose_algo(&j, kern, c);
    j.zero_bytes = c->s ? 0 : la_size_floats(c->head_state_elems);
    j.kernel_bytes = la_size_up64(j.chunked ? ops->chunked_bytes(j.chunk, c->dk, j.tile)
                                            : ops->recurrent_bytes(c->T, c->dk, j.tile));
    j.per_thread = la_size_add(j.zero_bytes, j.kernel_bytes);

    const int64_t units = heads * j.ntiles;
    const int nt = la_team_size(wanted, units);
    if (!(c->step && j.per_thread <= STEP_STACK_BYTES)) {
        const size_t bytes = la_size_mul(j.per_thread, (size_t)nt);
        j.ws = bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
        if (j.ws == NULL)
            return la_fail(LINATTN_E_NOMEM, "out of memory: %zu bytes of workspace", bytes);
    }
    LA_FOR_EACH_UNIT(nt, units, unit, tid, run_unit(&j, unit, tid));
    free(j.ws);
    return LINATTN_OK;
}

/* ---- one head's column tile on the calling thread (state pools, packed
 * sequences, plans). c is a B = H = 1 call whose s is the unit's working
 * state; a column's arithmetic does not depend on the tile. */
int64_t la_delta_unit_columns(const la_kernels *kern, const la_call *c)
{
    const int64_t w = c->step ? c->dv : kern->delta->tile_columns(c->dk, c->dv);
    return w < c->dv ? w : c->dv;
}

size_t la_delta_head_bytes(const la_kernels *kern, const la_call *c, int64_t nj)
{
    if (c->T < 1)
        return 0;
    delta_job j = {0};
    choose_algo(&j, kern, c);
    return la_size_up64(j.chunked ? kern->delta->chunked_bytes(j.chunk, c->dk, nj)
                                  : kern->delta->recurrent_bytes(c->T, c->dk, nj));
}

void la_delta_head_run(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj, void *ws)
{
    if (c->T < 1)
        return;
    delta_job j = {0};
    choose_algo(&j, kern, c);
    la_delta_head h = head_at(c, 0, j.chunk);
    h.s = c->s;
    if (j.chunked)
        kern->delta->chunked(&h, j0, nj, ws);
    else
        kern->delta->recurrent(&h, j0, nj, ws);
}

/* The same on a V-first state in place (value column j of the head at
 * s + j * ld), for calls that run the recurrent algorithm
 * (la_delta_head_recurrent); chunked ones work on a K-first copy. */
int la_delta_head_recurrent(const la_kernels *kern, const la_call *c)
{
    delta_job j = {0};
    choose_algo(&j, kern, c);
    return !j.chunked;
}

void la_delta_head_run_vfirst(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                              float *s, int64_t ld, void *ws)
{
    delta_job j = {0};
    choose_algo(&j, kern, c);
    if (c->T < 1)
        return;
    la_delta_head h = head_at(c, 0, j.chunk);
    h.s = s;
    h.s_vld = ld;
    kern->delta->recurrent_vfirst(&h, j0, nj, ws);
}
