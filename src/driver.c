/* The ISA-independent driver: resolves strides and state into one la_head
 * per (batch, head) and runs the table's kernels, on threads over heads, or
 * over the chunks of a head when there are fewer heads than threads. Either
 * way every kernel call gets the same operands in the same order whatever
 * the thread count, so results are bitwise identical for any num_threads. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

enum { ALIGN = 64 };

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Threads the caller asked for (0: the OpenMP default; 1 without OpenMP). */
static int threads_wanted(const linattn_config *cfg)
{
    int n = cfg->num_threads;
#ifdef _OPENMP
    if (n == 0)
        n = omp_get_max_threads();
#else
    n = 1;
#endif
    return n < 1 ? 1 : n;
}

static int thread_count(const linattn_config *cfg, int64_t heads)
{
    const int n = threads_wanted(cfg);
    return heads < n ? (int)heads : n;
}

/* Kernels see three gate kinds: HEAD is TOKEN with a token stride of 0. */
static la_gate kernel_gate(linattn_gate gate)
{
    return gate == LINATTN_GATE_NONE      ? LA_GATE_NONE
           : gate == LINATTN_GATE_CHANNEL ? LA_GATE_CHANNEL
                                          : LA_GATE_TOKEN;
}

int64_t la_chunk_for(const la_kernels *t, const linattn_config *cfg)
{
    const int64_t c =
        cfg->chunk ? cfg->chunk : t->default_chunk(cfg->dk, cfg->dv, kernel_gate(cfg->gate));
    return c < cfg->seq_len ? c : cfg->seq_len;
}

/* Rows of the chunk starting at t0. */
static int64_t chunk_rows(int64_t T, int64_t t0, int64_t chunk)
{
    return T - t0 < chunk ? T - t0 : chunk;
}

/* The head problem of (b, h) for a call of T tokens. */
static la_head head_at(const linattn_config *cfg, int64_t b, int64_t hd, int64_t T,
                       const float *q, const float *k, const float *v, const float *g,
                       float *o)
{
    la_head h;
    memset(&h, 0, sizeof h);
    h.T = T;
    h.dk = cfg->dk;
    h.dv = cfg->dv;
    h.q = q + b * cfg->q.batch + hd * cfg->q.head;
    h.k = k + b * cfg->k.batch + hd * cfg->k.head;
    h.v = v + b * cfg->v.batch + hd * cfg->v.head;
    h.o = o + b * cfg->o.batch + hd * cfg->o.head;
    h.q_ts = cfg->q.token;
    h.k_ts = cfg->k.token;
    h.v_ts = cfg->v.token;
    h.o_ts = cfg->o.token;
    h.scale = cfg->scale;
    h.eps = cfg->eps;
    h.phi = cfg->phi;
    h.gate = kernel_gate(cfg->gate);
    if (h.gate != LA_GATE_NONE) {
        h.g = g + b * cfg->g.batch + hd * cfg->g.head;
        h.g_ts = cfg->gate == LINATTN_GATE_HEAD ? 0 : cfg->g.token; /* HEAD: constant in time */
    }
    return h;
}

/* Points h at the state of head i: the caller's s and z, or a zeroed state
 * in `zero` (state_floats + dk floats) when the caller gave none. */
static void bind_state(la_head *h, const linattn_config *cfg, int64_t i, float *s, float *z,
                       unsigned char *zero, size_t zero_bytes)
{
    const int64_t dk = cfg->dk, dv = cfg->dv;
    if (s) {
        h->s = s + i * dk * dv;
        h->z = cfg->normalize ? z + i * dk : NULL;
    } else {
        memset(zero, 0, zero_bytes);
        h->s = (float *)zero;
        h->z = cfg->normalize ? h->s + dk * dv : NULL;
    }
}

static void run_chunked(const la_kernels *t, const la_head *h, unsigned char *ws)
{
    const size_t state_floats = (size_t)(h->dk * h->dv);
    float *u = (float *)ws;
    float *uz = u + state_floats;
    void *pack = ws + round_up((state_floats + (size_t)h->dk) * sizeof(float));
    for (int64_t t0 = 0; t0 < h->T; t0 += h->chunk) {
        const int64_t n = chunk_rows(h->T, t0, h->chunk);
        t->chunk_pack(h, t0, n, pack);
        t->chunk_output(h, pack, t0, n, h->s, h->z);
        t->chunk_state(h, pack, t0, n, u, uz);
        t->state_combine(h, pack, n, h->s, h->z, u, uz);
    }
}

/* Fewer heads than threads: one head at a time, its chunks spread over the
 * threads in blocks. For each block, chunk_pack + chunk_state of every chunk
 * run in parallel, then one thread folds the chunk states in order (keeping
 * the state before each chunk), then chunk_output of every chunk runs in
 * parallel. Every kernel sees the same inputs as in run_chunked, so the
 * results are bitwise those of one thread. */
static linattn_status run_sequence_parallel(const la_kernels *t, const linattn_config *cfg,
                                            int nt, const float *q, const float *k,
                                            const float *v, const float *g, float *o, float *s,
                                            float *z)
{
    const int64_t heads = cfg->batch * cfg->heads, dk = cfg->dk, dv = cfg->dv;
    const int64_t T = cfg->seq_len, chunk = la_chunk_for(t, cfg);
    const int64_t nchunks = (T + chunk - 1) / chunk;
    const int64_t block = nchunks < 4 * (int64_t)nt ? nchunks : 4 * (int64_t)nt;
    const size_t state_floats = (size_t)(dk * dv);
    const size_t state_bytes = round_up((state_floats + (size_t)dk) * sizeof(float));
    const size_t pack_bytes = t->pack_bytes(chunk, dk, dv);
    if (pack_bytes > SIZE_MAX / 4 / (size_t)block)
        return LINATTN_E_NOMEM;
    /* ws: a zero state, then per chunk of a block a slot holding its pack,
     * its own state u (+ uz) and the state before it (+ z) */
    const size_t per_chunk = round_up(pack_bytes) + 2 * state_bytes;
    unsigned char *ws = aligned_alloc(ALIGN, state_bytes + per_chunk * (size_t)block);
    if (ws == NULL)
        return LINATTN_E_NOMEM;
#define SLOT_PACK(j) (ws + state_bytes + per_chunk * (size_t)(j))
#define SLOT_U(j) ((float *)(SLOT_PACK(j) + round_up(pack_bytes)))
#define SLOT_BEFORE(j) ((float *)(SLOT_PACK(j) + round_up(pack_bytes) + state_bytes))

    for (int64_t i = 0; i < heads; i++) {
        la_head h = head_at(cfg, i / cfg->heads, i % cfg->heads, T, q, k, v, g, o);
        h.chunk = chunk;
        bind_state(&h, cfg, i, s, z, ws, state_bytes);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
        for (int64_t c0 = 0; c0 < nchunks; c0 += block) {
            const int64_t m = nchunks - c0 < block ? nchunks - c0 : block;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t j = 0; j < m; j++) {
                const int64_t t0 = (c0 + j) * chunk, n = chunk_rows(T, t0, chunk);
                t->chunk_pack(&h, t0, n, SLOT_PACK(j));
                t->chunk_state(&h, SLOT_PACK(j), t0, n, SLOT_U(j), SLOT_U(j) + state_floats);
            }
#ifdef _OPENMP
#pragma omp single
#endif
            for (int64_t j = 0; j < m; j++) {
                const int64_t n = chunk_rows(T, (c0 + j) * chunk, chunk);
                memcpy(SLOT_BEFORE(j), h.s, state_floats * sizeof(float));
                if (h.z)
                    memcpy(SLOT_BEFORE(j) + state_floats, h.z, (size_t)dk * sizeof(float));
                t->state_combine(&h, SLOT_PACK(j), n, h.s, h.z, SLOT_U(j),
                                 SLOT_U(j) + state_floats);
            }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t j = 0; j < m; j++) {
                const int64_t t0 = (c0 + j) * chunk, n = chunk_rows(T, t0, chunk);
                const float *before = SLOT_BEFORE(j);
                t->chunk_output(&h, SLOT_PACK(j), t0, n, before,
                                h.z ? before + state_floats : NULL);
            }
        }
    }
#undef SLOT_PACK
#undef SLOT_U
#undef SLOT_BEFORE
    free(ws);
    return LINATTN_OK;
}

/* One forward call, shared by the threads. */
typedef struct {
    const la_kernels *t;
    const linattn_config *cfg;
    const float *q, *k, *v, *g;
    float *o, *s, *z;
    int chunked;
    int64_t chunk;
    unsigned char *ws; /* per_thread bytes for each thread */
    size_t per_thread, state_bytes;
} forward_call;

static void forward_head(const forward_call *c, int64_t i, int tid)
{
    const linattn_config *cfg = c->cfg;
    unsigned char *mine = c->ws ? c->ws + c->per_thread * (size_t)tid : NULL;
    la_head h = head_at(cfg, i / cfg->heads, i % cfg->heads, cfg->seq_len, c->q, c->k, c->v,
                        c->g, c->o);
    h.chunk = c->chunk;
    bind_state(&h, cfg, i, c->s, c->z, mine, c->state_bytes);
    if (!c->s)
        mine += c->state_bytes; /* the rest of the workspace follows the zero state */
    if (!cfg->causal)
        c->t->forward_noncausal(&h);
    else if (c->chunked)
        run_chunked(c->t, &h, mine);
    else
        c->t->forward_recurrent(&h);
}

static void step_head(const forward_call *c, int64_t i, int tid)
{
    const linattn_config *cfg = c->cfg;
    (void)tid;
    la_head h = head_at(cfg, i / cfg->heads, i % cfg->heads, 1, c->q, c->k, c->v, c->g, c->o);
    h.chunk = 1;
    bind_state(&h, cfg, i, c->s, c->z, NULL, 0); /* step always has a state */
    c->t->step(&h);
}

/* Heads 0..heads-1 on nt threads, static schedule. A single thread does not
 * enter OpenMP at all: a parallel region costs more than a small call. */
static void for_each_head(const forward_call *c, int64_t heads, int nt,
                          void (*fn)(const forward_call *, int64_t, int))
{
    if (nt <= 1) {
        for (int64_t i = 0; i < heads; i++)
            fn(c, i, 0);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < heads; i++)
        fn(c, i, omp_get_thread_num());
#endif
}

linattn_status la_run_forward(const la_kernels *t, const linattn_config *cfg, const float *q,
                              const float *k, const float *v, const float *g, float *o,
                              float *s, float *z)
{
    const int64_t heads = cfg->batch * cfg->heads, dk = cfg->dk, dv = cfg->dv;
    forward_call c = {.t = t, .cfg = cfg, .q = q, .k = k, .v = v, .g = g, .o = o, .s = s,
                      .z = z, .chunk = la_chunk_for(t, cfg)};
    /* AUTO: a handful of tokens is cheapest token by token (no workspace). */
    c.chunked = cfg->causal &&
                (cfg->algo == LINATTN_ALGO_CHUNKED ||
                 (cfg->algo == LINATTN_ALGO_AUTO && cfg->seq_len > LA_AUTO_RECURRENT_MAX_T));
    c.state_bytes = round_up((size_t)(dk * dv + dk) * sizeof(float));
    const int wanted = threads_wanted(cfg);
    if (c.chunked && heads < wanted && cfg->seq_len > c.chunk)
        return run_sequence_parallel(t, cfg, wanted, q, k, v, g, o, s, z);

    /* Per-thread workspace: a zero state when the caller passed none, and
     * for the chunked path the chunk's own state (u, uz) and the pack. */
    c.per_thread = s ? 0 : c.state_bytes;
    if (c.chunked) {
        const size_t pack = t->pack_bytes(c.chunk, dk, dv);
        if (pack > SIZE_MAX / 4)
            return LINATTN_E_NOMEM;
        c.per_thread += c.state_bytes + round_up(pack);
    }
    const int nt = thread_count(cfg, heads);
    if (c.per_thread) {
        if (c.per_thread > SIZE_MAX / (size_t)nt)
            return LINATTN_E_NOMEM;
        c.ws = aligned_alloc(ALIGN, c.per_thread * (size_t)nt);
        if (c.ws == NULL)
            return LINATTN_E_NOMEM;
    }
    for_each_head(&c, heads, nt, forward_head);
    free(c.ws);
    return LINATTN_OK;
}

void la_run_step(const la_kernels *t, const linattn_config *cfg, const float *q,
                 const float *k, const float *v, const float *g, float *o, float *s, float *z)
{
    const int64_t heads = cfg->batch * cfg->heads;
    const forward_call c = {.t = t, .cfg = cfg, .q = q, .k = k, .v = v, .g = g, .o = o,
                            .s = s, .z = z, .chunk = 1};
    for_each_head(&c, heads, thread_count(cfg, heads), step_head);
}
