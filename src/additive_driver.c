/* The additive family's driver: resolves strides and state into one la_head
 * per (batch, head) and runs the resolved ops: chunked on threads over
 * heads, or over the chunks of a head when there are fewer heads than
 * threads; the tiled recurrent form over (head, value-column) units; steps
 * and short AUTO calls through the token loop. Every op call gets the same
 * operands in the same order whatever the thread count, so results are
 * bitwise identical for any num_threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "call.h"
#include "table.h"
#include "threads.h"

/* AUTO runs sequences of at most this many tokens token by token (the
 * step's kernel): below it the chunk machinery costs more than it saves. */
enum { AUTO_RECURRENT_MAX_T = 16 };

static int64_t chunk_for(const la_tuning *t, const la_call *c)
{
    const int64_t n =
        c->chunk ? c->chunk : la_tuned_chunk(t->additive_chunk, c->dk, c->dv, c->gate);
    return n < c->T ? n : c->T;
}

static int64_t chunk_rows(int64_t T, int64_t t0, int64_t chunk)
{
    return T - t0 < chunk ? T - t0 : chunk;
}

/* A head problem of the call without its operands or state: the input
 * stage (stage.h) fills in the operands per block from the head's
 * la_source, bind() the state. */
static la_head head_base(const la_call *c)
{
    return (la_head){
        .T = c->T,
        .dk = c->dk,
        .dv = c->dv,
        .scale = c->scale,
        .eps = c->eps,
        .phi = c->phi,
        .gate = c->gate,
    };
}

/* Workspace of one head, carved from one per-thread block:
 *   zero state (no user state) | z compensation (token loop) |
 *   stage panels | u, uz + pack (chunked)
 * The stage makes its panels just before the ops read them: a token at a
 * time in the token loop, a chunk at a time in the chunked form, a block
 * of LA_NONCAUSAL_BLOCK tokens in the non-causal passes. */
typedef struct {
    size_t zero, zc, stage, chunk_state, pack, total;
} head_ws;

static size_t zero_state_bytes(const la_call *c)
{
    return c->s ? 0 : la_size_floats(c->head_state_elems);
}

/* The stage's panels for blocks of n tokens. */
static size_t stage_bytes(const la_call *c, int64_t n)
{
    const la_source src = la_source_at(c, 0);
    return la_size_up64(la_stage_bytes(&src, n));
}

static head_ws ws_plan(const la_call *c, int chunked, int64_t chunk, size_t pack_bytes)
{
    head_ws w = {0};
    const size_t state = la_size_floats(c->head_state_elems);
    const size_t dk = (size_t)c->dk;
    w.zero = zero_state_bytes(c);
    /* the token loop compensates z within the call even when the caller
     * keeps no compensation */
    w.zc = !chunked && c->normalize && !c->z_compensated && c->T > 1 ? la_size_floats(dk) : 0;
    w.stage = stage_bytes(c, !c->causal ? LA_NONCAUSAL_BLOCK : chunked ? chunk : 1);
    w.chunk_state = chunked ? state : 0;
    w.pack = chunked ? la_size_up64(pack_bytes) : 0;
    w.total = la_size_add(la_size_add(la_size_add(w.zero, w.zc),
                                      la_size_add(w.stage, w.chunk_state)),
                          w.pack);
    return w;
}

/* The caller's normaliser of head i ([dk], or [2][dk] with z_compensated). */
static float *caller_z(const la_call *c, int64_t i)
{
    return c->z ? c->z + i * c->dk * (1 + c->z_compensated) : NULL;
}

/* The view of tokens [t0, t0 + n) of head h (source src) that the ops take
 * at token *at: a block of n tokens from the stage (*at = 0), or, when the
 * stage has nothing to do, the whole head (*at = t0), whose later rows the
 * ops may prefetch. */
/* The token at which the ops read block t0 in view_of's view. */
static int64_t view_token(const la_source *src, int64_t t0)
{
    return la_stage_passthrough(src) ? t0 : 0;
}

static la_head view_of(const la_stage_ops *stage, const la_head *h, const la_source *src,
                       int64_t t0, int64_t n, void *buf, int64_t *at)
{
    la_head x = *h;
    if (la_stage_passthrough(src))
        la_stage_in(stage, src, 0, src->T, buf, &x);
    else
        la_stage_in(stage, src, t0, n, buf, &x);
    *at = view_token(src, t0);
    return x;
}

/* view_of for a pass that reads only some operands (LA_STAGE_*). */
static la_head view_parts_of(const la_stage_ops *stage, const la_head *h, const la_source *src,
                             int64_t t0, int64_t n, void *buf, int64_t *at, unsigned parts)
{
    if (la_stage_passthrough(src))
        return view_of(stage, h, src, t0, n, buf, at);
    la_head x = *h;
    la_stage_in_parts(stage, src, t0, n, buf, &x, parts);
    *at = view_token(src, t0);
    return x;
}

/* Binds head i's state (the user's, or a zeroed one) and its z compensation.
 * bf16: c->s is a bfloat16 state, worked on in place (one-token calls). */
static void bind(la_head *h, const la_call *c, int64_t i, unsigned char *ws, const head_ws *w,
                 int bf16)
{
    const size_t elems = c->head_state_elems;
    if (c->s && bf16) {
        h->s_bf16 = (uint16_t *)c->s + (size_t)i * (size_t)(c->dk * c->dv);
        h->z = caller_z(c, i);
    } else if (c->s) {
        h->s = (float *)c->s + (size_t)i * (size_t)(c->dk * c->dv);
        h->z = caller_z(c, i);
    } else {
        memset(ws, 0, elems * sizeof(float));
        h->s = (float *)ws;
        h->z = c->normalize ? h->s + c->dk * c->dv : NULL;
    }
    if (c->z_compensated)
        h->zc = h->z + c->dk; /* the caller's compensation, carried across calls */
    if (w->zc) {
        memset(ws + w->zero, 0, (size_t)c->dk * sizeof(float));
        h->zc = h->z ? (float *)(ws + w->zero) : NULL;
    }
}

/* The chunk ops keep no compensation: fold the caller's into z first (the
 * chunked sums round once per chunk, not per token). */
static void fold_compensation(la_head *h)
{
    if (h->zc == NULL)
        return;
    for (int64_t c = 0; c < h->dk; c++) {
        h->z[c] += h->zc[c];
        h->zc[c] = 0.0f;
    }
    h->zc = NULL;
}

/* The token loop of steps and short AUTO calls on the value columns
 * [j0, j0 + nj), each token through the stage (buf: its panels for one
 * token). A share of the columns is a view of them (la_head.s_ld); a
 * V-first state (la_head.s_vld) is one unit of all of them. */
static void run_tokens(const la_kernels *kern, const la_head *h, const la_source *src, void *buf,
                       int64_t j0, int64_t nj)
{
    int64_t a;
    for (int64_t t = 0; t < h->T; t++) {
        const la_head x = view_of(kern->stage, h, src, t, 1, buf, &a);
        if (x.s_vld) {
            kern->additive->token_vfirst(&x, x.q + a * x.q_ts, x.k + a * x.k_ts,
                                         x.v + a * x.v_ts,
                                         x.gate == LA_GATE_NONE ? NULL : x.g + a * x.g_ts,
                                         x.o + a * x.o_ts);
            la_stage_out(kern->stage, src, t, 1, &x, 0, x.dv);
            continue;
        }
        la_head cols = x;
        cols.dv = nj, cols.s_ld = h->dv;
        if (x.s_bf16)
            cols.s_bf16 = x.s_bf16 + j0;
        else
            cols.s = x.s + j0;
        kern->additive->token(&cols, x.q + a * x.q_ts, x.k + a * x.k_ts, x.v + a * x.v_ts + j0,
                              x.gate == LA_GATE_NONE ? NULL : x.g + a * x.g_ts,
                              x.o + a * x.o_ts + j0);
        la_stage_out(kern->stage, src, t, 1, &x, j0, nj);
    }
}

/* The tokens [at, at + n) of view x as a head of n tokens. */
static la_head tokens_of(const la_head *x, int64_t at, int64_t n)
{
    la_head b = *x;
    b.q += at * b.q_ts, b.k += at * b.k_ts, b.v += at * b.v_ts, b.o += at * b.o_ts;
    b.T = n;
    return b;
}

/* The non-causal forward: every block into the state, then every block's
 * outputs from the final state, each block through the stage in turn (k
 * and v for the first pass, q for the second, so each row is made once).
 * The blocks are the same whether the stage copies or not, so the results
 * do not depend on it. */
static void run_noncausal(const la_kernels *kern, const la_head *h, const la_source *src,
                          void *buf)
{
    const la_additive_ops *ops = kern->additive;
    const int staged = !la_stage_passthrough(src);
    for (int out = 0; out <= 1; out++) {
        const unsigned parts = out ? LA_STAGE_Q : LA_STAGE_KV;
        for (int64_t t0 = 0; t0 < h->T; t0 += LA_NONCAUSAL_BLOCK) {
            const int64_t n = chunk_rows(h->T, t0, LA_NONCAUSAL_BLOCK);
            int64_t a;
            const la_head x = view_parts_of(kern->stage, h, src, t0, n, buf, &a, parts);
            const la_head b = tokens_of(&x, a, n);
            if (staged && t0 + n < h->T)
                la_stage_prefetch(src, t0 + n, LA_NONCAUSAL_BLOCK, parts);
            if (!out) {
                ops->noncausal_state(&b);
                continue;
            }
            ops->noncausal_output(&b);
            la_stage_out(kern->stage, src, t0, n, &x, 0, h->dv);
        }
    }
}

static void run_chunks(const la_kernels *kern, const la_head *h, const la_source *src, float *u,
                       void *pack, void *buf)
{
    const la_additive_ops *ops = kern->additive;
    float *uz = u + h->dk * h->dv;
    for (int64_t t0 = 0; t0 < h->T; t0 += h->chunk) {
        const int64_t n = chunk_rows(h->T, t0, h->chunk);
        int64_t a;
        const la_head x = view_of(kern->stage, h, src, t0, n, buf, &a);
        ops->chunk_pack(&x, a, n, pack);
        ops->chunk_output(&x, pack, a, n, h->s, h->z);
        ops->chunk_state(&x, pack, a, n, u, uz);
        ops->state_combine(&x, pack, n, h->s, h->z, u, uz);
        la_stage_out(kern->stage, src, t0, n, &x, 0, h->dv);
    }
}

typedef struct {
    const la_kernels *kern;
    const la_additive_ops *ops;
    const la_call *c;
    int chunked;
    int64_t chunk;
    head_ws w;
    unsigned char *ws;     /* w.total bytes per thread */
    int64_t width, pieces; /* the token loop's columns per unit, units per head */
    int bf16_state;        /* c->s is bfloat16 (la_additive_head_run_in_place) */
    int64_t s_vld;         /* c->s is V-first, columns this far apart (0: K-first) */
    const void *next;      /* la_head.s_next of the token op */
} head_job;

/* The token loop's workspace (z compensation, one token's panels) is on
 * the stack when it fits (dk = dv up to 400; 336 for a short call that
 * normalises without the caller's compensation): steps and short AUTO
 * calls of such heads do not allocate. */
enum { STEP_STACK_BYTES = 8192 };

/* Unit u: head u / pieces, and in the token loop its share of the value
 * columns (all of them with one piece). */
static void run_head(const head_job *j, int64_t u, int tid)
{
    const int64_t i = u / j->pieces, j0 = u % j->pieces * j->width;
    const int64_t nj = j->c->dv - j0 < j->width ? j->c->dv - j0 : j->width;
    _Alignas(64) unsigned char stack[STEP_STACK_BYTES];
    unsigned char *mine = j->ws ? j->ws + j->w.total * (size_t)tid : stack;
    void *buf = mine + j->w.zero + j->w.zc;
    const la_source src = la_source_at(j->c, i);
    la_head h = head_base(j->c);
    h.chunk = j->chunk;
    bind(&h, j->c, i, mine, &j->w, j->bf16_state);
    h.s_vld = j->s_vld;
    h.s_next = j->next;
    la_stage_reset(buf);
    if (!j->c->causal || j->chunked)
        fold_compensation(&h);
    if (!j->c->causal) {
        run_noncausal(j->kern, &h, &src, buf);
    } else if (j->chunked) {
        unsigned char *after = mine + j->w.zero + j->w.zc + j->w.stage;
        run_chunks(j->kern, &h, &src, (float *)after, after + j->w.chunk_state, buf);
    } else {
        run_tokens(j->kern, &h, &src, buf, j0, nj);
    }
}

/* The token loop with fewer heads than threads: each head's value columns
 * shared out (whole vectors of 16), as long as every share holds
 * LA_MIN_BYTES_PER_THREAD of state, and only without the normaliser, whose
 * z every column's output reads and one unit would write. A column's
 * arithmetic is the same in any share, so results do not depend on it.
 * (A head of dk = dv = 128, 64 KiB, split over two threads made a step
 * 3-15x slower: its few microseconds of work cost less than the team.) */
static void token_loop_split(head_job *j, int wanted)
{
    const la_call *c = j->c;
    const int64_t heads = c->B * c->H;
    if (c->normalize || heads >= wanted)
        return;
    const int64_t by_size =
        (int64_t)(c->head_state_elems * sizeof(float) / LA_MIN_BYTES_PER_THREAD);
    const int64_t by_threads = (wanted + heads - 1) / heads;
    const int64_t pieces = by_size < by_threads ? by_size : by_threads;
    if (pieces < 2)
        return;
    j->width = ((c->dv + pieces - 1) / pieces + 15) / 16 * 16;
    j->pieces = (c->dv + j->width - 1) / j->width;
}

/* Fewer heads than threads: one head at a time, its chunks spread over the
 * threads in blocks. For each block, chunk_pack + chunk_state of every chunk
 * run in parallel, then one thread folds the chunk states in order (keeping
 * the state before each chunk), then chunk_output of every chunk runs in
 * parallel. Every op sees the same inputs as in run_chunks, so the results
 * are bitwise those of one thread. */
static linattn_status run_sequence_parallel(const head_job *j, int wanted)
{
    const la_additive_ops *ops = j->ops;
    const la_call *c = j->c;
    const int64_t heads = c->B * c->H, chunk = j->chunk, T = c->T;
    const int64_t nchunks = (T + chunk - 1) / chunk;
    const int nt = la_team_size(wanted, nchunks);
    const int64_t block = nchunks < 4 * (int64_t)nt ? nchunks : 4 * (int64_t)nt;
    const size_t state_floats = (size_t)(c->dk * c->dv);
    const size_t state = la_size_floats(c->head_state_elems);
    const size_t pack = la_size_up64(ops->pack_bytes(chunk, c->dk, c->dv));
    /* ws: the zero state, then per chunk of a block a slot holding its
     * pack, its own state u (+ uz), the state before it (+ z), its stage
     * panels and its view (the output pass reads the panels the first
     * pass made) */
    const size_t view_bytes = la_size_up64(sizeof(la_head));
    const size_t per_chunk = la_size_add(la_size_add(pack, la_size_mul(2, state)),
                                         la_size_add(j->w.stage, view_bytes));
    const size_t head_bytes = j->w.zero;
    const size_t bytes = la_size_add(head_bytes, la_size_mul(per_chunk, (size_t)block));
    unsigned char *ws = bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
    if (ws == NULL)
        return la_fail(LINATTN_E_NOMEM, "out of memory: %zu bytes of workspace", bytes);
    unsigned char *slots = ws + head_bytes;
#define SLOT_PACK(x) (slots + per_chunk * (size_t)(x))
#define SLOT_U(x) ((float *)(SLOT_PACK(x) + pack))
#define SLOT_BEFORE(x) ((float *)(SLOT_PACK(x) + pack + state))
#define SLOT_STAGE(x) (SLOT_PACK(x) + pack + 2 * state)
#define SLOT_VIEW(x) ((la_head *)(SLOT_STAGE(x) + j->w.stage))

    const head_ws hw = {.zero = j->w.zero};
    for (int64_t i = 0; i < heads; i++) {
        la_head h = head_base(c);
        const la_source src = la_source_at(c, i);
        h.chunk = chunk;
        bind(&h, c, i, ws, &hw, 0);
        fold_compensation(&h);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
        for (int64_t c0 = 0; c0 < nchunks; c0 += block) {
            const int64_t m = nchunks - c0 < block ? nchunks - c0 : block;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t x = 0; x < m; x++) {
                const int64_t t0 = (c0 + x) * chunk, n = chunk_rows(T, t0, chunk);
                la_stage_reset(SLOT_STAGE(x));
                la_head *view = SLOT_VIEW(x);
                int64_t a;
                *view = view_of(j->kern->stage, &h, &src, t0, n, SLOT_STAGE(x), &a);
                ops->chunk_pack(view, a, n, SLOT_PACK(x));
                ops->chunk_state(view, SLOT_PACK(x), a, n, SLOT_U(x), SLOT_U(x) + state_floats);
            }
#ifdef _OPENMP
#pragma omp single
#endif
            for (int64_t x = 0; x < m; x++) {
                const int64_t n = chunk_rows(T, (c0 + x) * chunk, chunk);
                memcpy(SLOT_BEFORE(x), h.s, state_floats * sizeof(float));
                if (h.z)
                    memcpy(SLOT_BEFORE(x) + state_floats, h.z, (size_t)c->dk * sizeof(float));
                ops->state_combine(SLOT_VIEW(x), SLOT_PACK(x), n, h.s, h.z, SLOT_U(x),
                                   SLOT_U(x) + state_floats);
            }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t x = 0; x < m; x++) {
                const int64_t t0 = (c0 + x) * chunk, n = chunk_rows(T, t0, chunk);
                const float *before = SLOT_BEFORE(x);
                const int64_t a = view_token(&src, t0);
                ops->chunk_output(SLOT_VIEW(x), SLOT_PACK(x), a, n, before,
                                  h.z ? before + state_floats : NULL);
                la_stage_out(j->kern->stage, &src, t0, n, SLOT_VIEW(x), 0, c->dv);
            }
        }
    }
#undef SLOT_STAGE
#undef SLOT_VIEW
#undef SLOT_PACK
#undef SLOT_U
#undef SLOT_BEFORE
    free(ws);
    return LINATTN_OK;
}

/* The value-tiled recurrent forward, in units of (batch, heads, value
 * columns). With at least as many heads as threads a unit is a head or,
 * where a head's rows lie apart, a group of whole heads run in lockstep:
 * per block of BLOCK tokens, each head of the group makes the block's
 * features, advances its own copy of the normaliser and sweeps its
 * columns, then the next head. The group's states stay in L2 and its
 * inputs are read a block of every head at a time, so with [B][T][H][D]
 * strides (each token's heads side by side) the group reads whole runs of
 * memory. With fewer heads than threads each head's columns are split so
 * that every thread gets a unit; each unit makes the features itself and
 * keeps its own normaliser (the unit holding column 0 stores it). Units
 * share nothing but the inputs, so they need no synchronisation, and since
 * a column's arithmetic is the same whichever unit holds it, results do
 * not depend on the split. (Sharing one head's features between threads
 * was tried: the feature rows one core wrote and the other read per block
 * cost more than making them twice.) With the input stage each head's
 * block goes through one buffer of the unit just before its features are
 * made (with grouped heads, the q/k panels of a block are made once for
 * the heads of a q/k head). */
enum {
    BLOCK = 32,                /* tokens whose features are made at once */
    SPLIT_COLUMNS = 16,        /* a unit's columns, when heads are split: a multiple of this */
    GROUP_STATE_BYTES = 512 << 10 /* states of one group of heads: within L2 */
};

/* The normaliser of head h as the kernels advance it: z, then the running
 * compensation (the caller's with z_compensated, else 0 at the start). */
static void z_load(const la_head *h, float *zz)
{
    memcpy(zz, h->z, (size_t)h->dk * sizeof(float));
    if (h->zc)
        memcpy(zz + h->dk, h->zc, (size_t)h->dk * sizeof(float));
    else
        memset(zz + h->dk, 0, (size_t)h->dk * sizeof(float));
}

static void z_store(const la_head *h, const float *zz)
{
    for (int64_t x = 0; x < h->dk; x++) {
        if (h->zc)
            h->z[x] = zz[x], h->zc[x] = zz[h->dk + x];
        else
            h->z[x] = zz[x] + zz[h->dk + x];
    }
}

typedef struct {
    const la_kernels *kern;
    const la_additive_ops *ops;
    const la_call *c;
    head_ws w;             /* per head: the zero state */
    int64_t block;         /* tokens per block */
    int64_t group;         /* heads per unit */
    int64_t width, pieces; /* columns per unit, units per head */
    size_t fbytes;         /* features of one block */
    size_t zbytes;         /* per head: zz (2 dk floats) */
    size_t pbytes;         /* per head: the packed copy of its columns (0: none) */
    int quads;             /* tokens four at a time (tuning.h) */
    int64_t fetch_tokens;  /* tuning.h: additive_fetch_tokens */
    size_t per_thread;     /* group x (w, zz, la_head, la_source), features, inv (block floats),
                            * the stage's panels of a block */
    unsigned char *ws;
    /* with several units per head: every head's starting z and compensation
     * (2 dk floats), taken before any unit stores its final one */
    float *z_start;
} rec_job;

static void rec_unit(const rec_job *j, int64_t unit, int tid)
{
    const la_call *c = j->c;
    const la_additive_ops *ops = j->ops;
    const int64_t heads = c->B * c->H, i0 = unit / j->pieces * j->group;
    const int64_t ng = heads - i0 < j->group ? heads - i0 : j->group;
    const int64_t j0 = unit % j->pieces * j->width;
    const int64_t nj = c->dv - j0 < j->width ? c->dv - j0 : j->width;
    const size_t per_head = j->w.total + j->zbytes + j->pbytes +
                            la_size_up64(sizeof(la_head)) + la_size_up64(sizeof(la_source));
    unsigned char *mine = j->ws + j->per_thread * (size_t)tid;
    float *f = (float *)(mine + per_head * (size_t)j->group);
    float *inv = (float *)((unsigned char *)f + j->fbytes);
    void *buf = (unsigned char *)inv + la_size_floats((size_t)j->block);
#define HEAD(g) ((la_head *)(mine + per_head * (size_t)(g) + j->w.total + j->zbytes + j->pbytes))
#define COPY(g) ((float *)(mine + per_head * (size_t)(g) + j->w.total + j->zbytes))
#define ZZ(g) ((float *)(mine + per_head * (size_t)(g) + j->w.total))
#define SRC(g) ((la_source *)((unsigned char *)HEAD(g) + la_size_up64(sizeof(la_head))))
    la_stage_reset(buf);
    for (int64_t g = 0; g < ng; g++) {
        la_head *h = HEAD(g);
        *h = head_base(c);
        h->quad_tokens = j->quads;
        h->fetch_tokens = j->fetch_tokens;
        *SRC(g) = la_source_at(c, i0 + g); /* once per head, not per block */
        bind(h, c, i0 + g, mine + per_head * (size_t)g, &j->w, 0);
        if (h->z && j->z_start)
            memcpy(ZZ(g), j->z_start + 2 * c->dk * (i0 + g), 2 * (size_t)c->dk * sizeof(float));
        else if (h->z)
            z_load(h, ZZ(g));
        if (j->pbytes) {
            ops->pack(h->s, c->dk, c->dv, j0, nj, COPY(g));
            h->s = COPY(g);
            h->s_packed = 1;
        }
    }
    for (int64_t t0 = 0; t0 < c->T; t0 += j->block) {
        const int64_t n = chunk_rows(c->T, t0, j->block);
        for (int64_t g = 0; g < ng; g++) {
            /* the ops get the block from the stage, or the whole head
             * when it has nothing to do (features then prefetches ahead) */
            const la_source *src = SRC(g);
            int64_t at;
            const la_head h = view_of(j->kern->stage, HEAD(g), src, t0, n, buf, &at);
            ops->features(&h, at, n, f);
            if (h.z)
                ops->normaliser(&h, f, n, ZZ(g), inv);
            ops->columns(&h, f, h.z ? inv : NULL, at, n, j0, nj);
            la_stage_out(j->kern->stage, src, t0, n, &h, j0, nj);
        }
    }
    /* (a zero initial state needs no copy back: it was the workspace's) */
    for (int64_t g = 0; g < ng && j->pbytes && c->s; g++)
        ops->unpack((float *)c->s + (size_t)(i0 + g) * (size_t)(c->dk * c->dv), c->dk, c->dv, j0,
                    nj, COPY(g));
    for (int64_t g = 0; g < ng && j0 == 0; g++)
        if (HEAD(g)->z)
            z_store(HEAD(g), ZZ(g));
#undef HEAD
#undef COPY
#undef ZZ
#undef SRC
}

/* Columns per unit: all of a head's, or with fewer heads than threads a
 * share of them, so that every thread gets a unit. */
static int64_t unit_width(const la_call *c, int wanted)
{
    const int64_t heads = c->B * c->H;
    if (heads >= wanted)
        return c->dv;
    const int64_t per_head = (wanted + heads - 1) / heads;
    const int64_t w = ((c->dv + per_head - 1) / per_head + SPLIT_COLUMNS - 1) / SPLIT_COLUMNS *
                      SPLIT_COLUMNS;
    return w < c->dv ? w : c->dv;
}

/* Whether every head's q, k, v and o rows follow one another in memory. */
static int rows_contiguous(const la_call *c)
{
    return c->sq.token == c->dk && c->sk.token == c->dk && c->sv.token == c->dv &&
           c->so.token == c->dv;
}

/* Unit shape and per-thread workspace of the tiled recurrent forward for
 * `wanted` threads (everything but ws and z_start). */
static void rec_setup(rec_job *j, const la_kernels *kern, const la_call *c, int wanted)
{
    const int64_t heads = c->B * c->H;
    const la_additive_ops *ops = kern->additive;
    *j = (rec_job){.kern = kern, .ops = ops, .c = c, .width = unit_width(c, wanted), .group = 1};
    j->w.zero = j->w.total = zero_state_bytes(c); /* the kernels compensate z themselves */
    j->pieces = (c->dv + j->width - 1) / j->width;
    /* groups of whole heads, as many per thread as fit GROUP_STATE_BYTES,
     * where a head's rows lie apart: with each head's rows one run of
     * memory ([B][H][T][D]) a head at a time streams fewer runs at once
     * (Xeon, identity, dk 64, H 8: 0.61-0.635 -> 0.63-0.65 of the zmm peak;
     * [B][T][H][D] in groups: 0.58, one at a time 0.57) */
    if (j->pieces == 1 && !rows_contiguous(c)) {
        const int64_t per_thread = (heads + wanted - 1) / wanted;
        const int64_t fit = (int64_t)(GROUP_STATE_BYTES / la_size_floats(c->head_state_elems));
        j->group = per_thread < fit ? per_thread : fit > 1 ? fit : 1;
    }
    j->block = BLOCK < c->T ? BLOCK : c->T;
    j->quads = c->T >= kern->additive_tuning->additive_quad_from_T[c->gate];
    j->fetch_tokens = kern->additive_tuning->additive_fetch_tokens;
    j->fbytes = la_size_up64(ops->feature_bytes(j->block, c->dk, c->dv));
    j->zbytes = la_size_floats(2 * (size_t)c->dk);
    j->pbytes = ops->pack && c->T >= kern->additive_tuning->additive_pack_from_T
                    ? la_size_up64(ops->packed_bytes(c->dk, j->width))
                    : 0;
    const size_t per_head = la_size_add(la_size_add(la_size_add(j->w.total, j->zbytes), j->pbytes),
                                        la_size_up64(sizeof(la_head)) +
                                            la_size_up64(sizeof(la_source)));
    const size_t inv_bytes = la_size_floats((size_t)j->block);
    j->per_thread = la_size_add(la_size_add(la_size_mul(per_head, (size_t)j->group), j->fbytes),
                                la_size_add(inv_bytes, stage_bytes(c, j->block)));
}

static linattn_status run_recurrent(const la_kernels *kern, const la_call *c, int wanted)
{
    const int64_t heads = c->B * c->H;
    rec_job j;
    rec_setup(&j, kern, c, wanted);
    const int64_t units = (heads + j.group - 1) / j.group * j.pieces;
    const int nt = la_team_size(wanted, units);
    const int shared_z = j.pieces > 1 && c->normalize && c->s;
    const size_t z_bytes =
        shared_z ? la_size_floats(la_size_mul(2 * (size_t)c->dk, (size_t)heads)) : 0;
    const size_t bytes = la_size_add(la_size_mul(j.per_thread, (size_t)nt), z_bytes);
    j.ws = bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
    if (j.ws == NULL)
        return la_fail(LINATTN_E_NOMEM, "out of memory: %zu bytes of workspace", bytes);
    if (shared_z) {
        j.z_start = (float *)(j.ws + j.per_thread * (size_t)nt);
        for (int64_t i = 0; i < heads; i++) {
            la_head h = {.dk = c->dk, .z = caller_z(c, i)};
            h.zc = c->z_compensated ? h.z + c->dk : NULL;
            z_load(&h, j.z_start + 2 * c->dk * i);
        }
    }
    LA_FOR_EACH_UNIT(nt, units, unit, end, tid, rec_unit(&j, unit, tid));
    free(j.ws);
    return LINATTN_OK;
}

/* AUTO above a handful of tokens: the table's measured choice for the
 * shape. Never the thread count: results must not depend on it. */
static int auto_recurrent(const la_tuning *t, const la_call *c)
{
    return c->T > AUTO_RECURRENT_MAX_T &&
           !la_tuned_chunked(t->additive_chunked_above_dk, c->dk, c->gate);
}

/* ---- one head on the calling thread (state pools, packed sequences, plans)
 * c is a B = H = 1 call whose s (and z) are the unit's working state; the
 * path is chosen as la_additive_run chooses it, so a head computes the same
 * bits whichever way it is run. */
static int head_recurrent(const la_kernels *kern, const la_call *c)
{
    return c->causal && !c->step &&
           (c->algo == LINATTN_ALGO_RECURRENT ||
            (c->algo == LINATTN_ALGO_AUTO && auto_recurrent(kern->additive_tuning, c)));
}

static head_job head_job_for(const la_kernels *kern, const la_call *c)
{
    const la_additive_ops *ops = kern->additive;
    head_job j = {.kern = kern, .ops = ops, .c = c,
                  .chunk = c->step ? 1 : chunk_for(kern->additive_tuning, c),
                  .width = c->dv, .pieces = 1};
    j.chunked = c->causal && !c->step &&
                (c->algo == LINATTN_ALGO_CHUNKED || c->T > AUTO_RECURRENT_MAX_T);
    const size_t pack = j.chunked ? ops->pack_bytes(j.chunk, c->dk, c->dv) : 0;
    j.w = ws_plan(c, j.chunked, j.chunk, pack);
    return j;
}

size_t la_additive_head_bytes(const la_kernels *kern, const la_call *c)
{
    if (c->T < 1)
        return 0;
    if (head_recurrent(kern, c)) {
        rec_job j;
        rec_setup(&j, kern, c, 1);
        return j.per_thread;
    }
    return head_job_for(kern, c).w.total;
}

void la_additive_head_run(const la_kernels *kern, const la_call *c, void *ws)
{
    if (c->T < 1)
        return;
    if (head_recurrent(kern, c)) {
        rec_job j;
        rec_setup(&j, kern, c, 1);
        j.ws = ws;
        rec_unit(&j, 0, 0);
        return;
    }
    head_job j = head_job_for(kern, c);
    j.ws = ws;
    run_head(&j, 0, 0);
}

/* Whether a call runs the token loop (steps and short AUTO calls), which
 * may then work on its state where it lies (la_additive_head_run_in_place). */
int la_additive_head_token_loop(const la_kernels *kern, const la_call *c)
{
    return c->T >= 1 && c->causal && !head_recurrent(kern, c) && !head_job_for(kern, c).chunked;
}

/* The token loop on the state s where it lies: K-first (vld 0, rows of dv
 * elements) or V-first (value column j at j * vld, the token_vfirst op),
 * float or bfloat16. On a bfloat16 state the token op widens each element
 * as it reads it and rounds it once as it writes it, and reads out the
 * float before rounding, so o and the state have the bits of the same
 * token on a float copy rounded afterwards, and a decode step reads and
 * writes 2 bytes per element, once. */
void la_additive_head_run_in_place(const la_kernels *kern, const la_call *c, void *s, int bf16,
                                   int64_t vld, const void *next, void *ws)
{
    la_call x = *c;
    x.s = s;
    head_job j = head_job_for(kern, &x);
    j.bf16_state = bf16;
    j.s_vld = vld;
    j.next = next;
    j.ws = ws;
    run_head(&j, 0, 0);
}

linattn_status la_additive_run(const la_kernels *kern, const la_call *c)
{
    const la_additive_ops *ops = kern->additive;
    const int64_t heads = c->B * c->H;
    const int wanted = la_threads_for_call(c->num_threads, c->B, c->T, c->H, c->dk, c->dv);
    const int forward = c->causal && !c->step;
    if (forward && (c->algo == LINATTN_ALGO_RECURRENT ||
                    (c->algo == LINATTN_ALGO_AUTO && auto_recurrent(kern->additive_tuning, c))))
        return run_recurrent(kern, c, wanted);
    head_job j = {.kern = kern, .ops = ops, .c = c,
                  .chunk = c->step ? 1 : chunk_for(kern->additive_tuning, c),
                  .width = c->dv, .pieces = 1};
    /* AUTO runs a handful of tokens through the step's token loop (no
     * workspace, and bitwise a sequence of steps) */
    j.chunked = forward && (c->algo == LINATTN_ALGO_CHUNKED || c->T > AUTO_RECURRENT_MAX_T);
    const size_t pack = j.chunked ? ops->pack_bytes(j.chunk, c->dk, c->dv) : 0;
    j.w = ws_plan(c, j.chunked, j.chunk, pack);
    if (j.chunked && heads < wanted && c->T > j.chunk)
        return run_sequence_parallel(&j, wanted);

    const int token_loop = c->causal && !j.chunked;
    if (token_loop)
        token_loop_split(&j, wanted);
    const int nt = la_team_size(wanted, heads * j.pieces);
    if (j.w.total && !(token_loop && j.w.total <= STEP_STACK_BYTES)) {
        const size_t bytes = la_size_mul(j.w.total, (size_t)nt);
        j.ws = bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
        if (j.ws == NULL)
            return la_fail(LINATTN_E_NOMEM, "out of memory: %zu bytes of workspace", bytes);
    }
    LA_FOR_EACH_UNIT(nt, heads * j.pieces, u, end, tid, run_head(&j, u, tid));
    free(j.ws);
    return LINATTN_OK;
}
