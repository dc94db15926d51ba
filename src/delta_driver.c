/* The delta family's driver. Value columns of the state are independent
 * (see delta.h), so a unit of work is (batch entry, q/k head, some of the
 * value heads that read it, column tile): B = 1 decode and prefill still
 * spread over every thread, and each column is computed exactly the same
 * way whatever the thread count. Per block of tokens a unit runs the input
 * stage (stage.h) and the kernels for each of its value heads in turn, so
 * the q/k panels of a block are made once for all of them. */
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "pack.h"
#include "serve.h"
#include "stage.h"
#include "table.h"
#include "threads.h"

enum {
    /* tokens per stage block of the recurrent form (the kernels make their
     * features for as many at once) */
    RECURRENT_BLOCK = 32,
    /* value heads of one q/k head a unit takes at most */
    MAX_MEMBERS = 8,
};

/* A step keeps its workspace on the stack when it fits (dk = dv up to 368;
 * 58 on the scalar table): decode calls of such heads do not allocate
 * (each thread has its own stack). */
enum { STEP_STACK_BYTES = 16384 };

/* The algorithm, chunk and stage block of a call: never the thread count. */
typedef struct {
    int chunked;
    int64_t chunk, block;
} delta_algo;

static delta_algo choose_algo(const la_kernels *kern, const la_call *c)
{
    const la_tuning *t = kern->delta_tuning;
    delta_algo a = {0};
    a.chunked = !c->step && (c->algo == LINATTN_ALGO_CHUNKED ||
                             (c->algo == LINATTN_ALGO_AUTO &&
                              la_tuned_chunked(t->delta_chunked_above_dk, c->dk, c->gate)));
    if (a.chunked) {
        a.chunk = c->chunk ? c->chunk : la_tuned_chunk(t->delta_chunk, c->dk, c->dv, c->gate);
        if (a.chunk > c->T)
            a.chunk = c->T;
    }
    /* chunked: a block is one chunk, so the kernel sees the same chunks as
     * on the whole sequence */
    a.block = a.chunked ? a.chunk : c->T < RECURRENT_BLOCK ? c->T : RECURRENT_BLOCK;
    return a;
}

static size_t kernel_bytes(const la_kernels *kern, const la_call *c, const delta_algo *a,
                           int64_t nj)
{
    return la_size_up64(a->chunked ? kern->delta->chunked_bytes(a->chunk, c->dk, nj)
                                   : kern->delta->recurrent_bytes(a->block, c->dk, nj));
}

/* Whether the recurrent form works on the kernels' packed copy of the
 * state (never for a step): from delta_pack_from_T tokens on (tuning.h),
 * where the copy costs two passes over a state the kernels could sweep
 * where it lies. moved: the caller copies the state into a float working
 * copy and back in any case, so filling the packed copy instead costs
 * nothing more: it packs from one token on wherever the entry packs at
 * all (plan.c run_packed says for which pools, with figures). */
static int packs(const la_kernels *kern, const la_call *c, const delta_algo *a, int moved)
{
    const int64_t from = kern->delta_tuning->delta_pack_from_T;
    return !c->step && !a->chunked && kern->delta->pack_tile > 0 && c->T >= 1 &&
           from != LA_TUNE_NEVER && c->T >= (moved ? 1 : from);
}

/* The packed copy's tile (columns) and row stride (floats) under this
 * machine's tuning entry (0: the table does not pack). */
static int64_t pack_tile(const la_kernels *kern)
{
    const la_delta_ops *d = kern->delta;
    return d->pack_tile > 0 ? d->pack_columns(kern->delta_tuning->delta_pack_columns) : 0;
}

static int64_t pack_ld(const la_kernels *kern)
{
    return pack_tile(kern) + kern->delta->pack_pad;
}

static size_t packed_bytes(const la_kernels *kern, const la_call *c, int64_t nj)
{
    return la_size_up64(la_packed_bytes(c->dk, nj, pack_tile(kern), pack_ld(kern)));
}

/* Where a head's state is: float K-first (s; packed: the kernels' packed
 * copy of the columns worked on), float V-first (s, s_vld), or bfloat16
 * K-first (s16, recurrent one-token calls). */
typedef struct {
    float *s;
    int64_t s_vld;
    uint16_t *s16;
    int packed;
    const void *next; /* the state worked on next, of its type (one-token calls fetch it) */
    const void *from;  /* V-first: the state before the call, if not at s (la_head.s_from) */
} head_state;

/* Tokens [0, T) of one value head (source src, state st) on columns
 * [j0, j0 + nj), block by block through the stage. */
static void head_tokens(const la_kernels *kern, const la_call *c, const delta_algo *a,
                        const la_source *src, head_state st, int64_t j0, int64_t nj,
                        void *stage_buf, void *kws)
{
    const int64_t s_vld = st.s_vld;
    /* pairs of tokens, by the sequence's length (never a step's): the
     * call's, not the block's src holds */
    const la_tuning *tu = kern->delta_tuning;
    const int64_t pair_from = tu->delta_pair_from_T[c->gate];
    const int64_t pair_below = tu->delta_pair_below_T[c->gate];
    const int pairs = !c->step && pair_from != LA_TUNE_NEVER && c->T >= pair_from &&
                      (pair_below <= 0 || c->T < pair_below);
    for (int64_t t0 = 0; t0 < src->T; t0 += a->block) {
        const int64_t n = src->T - t0 < a->block ? src->T - t0 : a->block;
        la_head h = {.dk = c->dk, .dv = c->dv, .s = st.s, .s_bf16 = st.s16, .s_vld = s_vld,
                     .s_from = t0 == 0 ? st.from : NULL, .s_packed = st.packed,
                     .pack_tile = st.packed ? pack_tile(kern) : 0,
                     .s_next = c->T == 1 ? st.next : NULL, /* fetched by a step alone */
                     .step_columns = kern->delta_tuning->delta_step_columns,
                     .step_fuse = kern->delta_tuning->delta_step_fuse,
                     .step_bf16_sweep_fetch = kern->delta_tuning->delta_step_bf16_sweep_fetch,
                     .vfirst_read_ahead = kern->delta_tuning->delta_vfirst_read_ahead,
                     .vfirst_dot_interleave = kern->delta_tuning->delta_vfirst_dot_interleave,
                     .step_rows_bytes = kern->delta_tuning->delta_step_rows_bytes,
                     .scale = c->scale,
                     .chunk = a->chunk, .pair_tokens = pairs};
        la_stage_in(kern->stage, src, t0, n, stage_buf, &h);
        if (s_vld)
            kern->delta->recurrent_vfirst(&h, j0, nj, kws);
        else if (a->chunked)
            kern->delta->chunked(&h, j0, nj, kws);
        else
            kern->delta->recurrent(&h, j0, nj, kws);
        la_stage_out(kern->stage, src, t0, n, &h, j0, nj);
    }
}

typedef struct {
    const la_kernels *kern;
    const la_call *c;
    delta_algo a;
    int64_t group;   /* value heads per q/k head */
    int64_t members; /* value heads per unit */
    int64_t mgroups; /* units per (b, q/k head, tile) */
    int64_t tile, ntiles;
    int64_t units;
    int pack;                /* units work on packed copies of their states */
    size_t stage_bytes, zero_bytes, pack_bytes /* per member */, kws_bytes, per_thread;
    unsigned char *ws;
} delta_job;

/* Value head of member m of q/k head qh. */
static int64_t member_head(const la_call *c, int64_t group, int64_t qh, int64_t m)
{
    return c->head_map == LINATTN_HEADS_TILED ? m * c->qk_heads + qh : qh * group + m;
}

/* Where a unit lies: batch b, q/k head qh, its members m0.. of that q/k
 * head's value heads, and its column tile. */
typedef struct {
    int64_t b, qh, m0, tile;
} unit_at;

static unit_at unit_where(const delta_job *j, int64_t unit)
{
    const int64_t rest = unit / j->ntiles, bq = rest / j->mgroups;
    return (unit_at){.b = bq / j->c->qk_heads, .qh = bq % j->c->qk_heads,
                     .m0 = rest % j->mgroups * j->members, .tile = unit % j->ntiles};
}

/* Index (b * H + value head) of member m of the unit at u. */
static int64_t unit_member(const delta_job *j, unit_at u, int64_t m)
{
    return u.b * j->c->H + member_head(j->c, j->group, u.qh, u.m0 + m);
}

/* end: where the calling thread's range of units ends (threads.h) */
static void run_unit(const delta_job *j, int64_t unit, int64_t end, int tid)
{
    const la_call *c = j->c;
    const unit_at u = unit_where(j, unit);
    const int64_t nm = j->group - u.m0 < j->members ? j->group - u.m0 : j->members;
    const int64_t j0 = u.tile * j->tile, nj = c->dv - j0 < j->tile ? c->dv - j0 : j->tile;
    _Alignas(64) unsigned char stack[STEP_STACK_BYTES];
    unsigned char *mine = j->ws ? j->ws + j->per_thread * (size_t)tid : stack;
    void *stage_buf = mine;
    float *zero = (float *)(mine + j->stage_bytes);
    float *packed = (float *)(mine + j->stage_bytes + j->zero_bytes);
    void *kws = mine + j->stage_bytes + j->zero_bytes + j->pack_bytes * (size_t)j->members;
    la_source src[MAX_MEMBERS];
    float *state[MAX_MEMBERS];
    la_stage_reset(stage_buf);
    for (int64_t m = 0; m < nm; m++) {
        const int64_t i = unit_member(j, u, m);
        src[m] = la_source_at(c, i);
        if (c->s) {
            state[m] = (float *)c->s + (size_t)i * c->head_state_elems;
        } else { /* a zero initial state; only this tile's columns are used */
            state[m] = zero + (size_t)m * c->head_state_elems;
            for (int64_t r = 0; r < c->dk; r++)
                memset(state[m] + r * c->dv + j0, 0, (size_t)nj * sizeof(float));
        }
    }
    /* a step sweeps each state from L2 after one read from memory:
     * meanwhile the next member's comes in, and after the last member the
     * next unit's first when this thread runs it (not another thread's,
     * whose lines that thread is writing) */
    const int fetch = c->T == 1 && c->s && !j->pack;
    head_state st[MAX_MEMBERS];
    for (int64_t m = 0; m < nm; m++) {
        st[m] = (head_state){.s = state[m]};
        if (j->pack) {
            st[m] = (head_state){
                .s = (float *)((unsigned char *)packed + j->pack_bytes * (size_t)m), .packed = 1};
            la_pack_tiles(state[m], c->dk, c->dv, j0, nj, pack_tile(j->kern),
                          pack_ld(j->kern), st[m].s);
        }
        if (fetch && m > 0)
            st[m - 1].next = state[m];
    }
    if (fetch && unit + 1 < end) /* a step's units are whole heads: column 0 */
        st[nm - 1].next = (const float *)c->s + (size_t)unit_member(j, unit_where(j, unit + 1), 0) *
                                                    c->head_state_elems;
    /* block-major: the q/k panels of a block serve every member */
    for (int64_t t0 = 0; t0 < c->T; t0 += j->a.block) {
        const int64_t n = c->T - t0 < j->a.block ? c->T - t0 : j->a.block;
        for (int64_t m = 0; m < nm; m++) {
            const la_source blk = la_source_tokens(&src[m], t0, n);
            /* the memo keys on the block's rows: advancing both q and k by
             * t0 keeps members of one q/k head equal */
            head_tokens(j->kern, c, &j->a, &blk, st[m], j0, nj, stage_buf, kws);
        }
    }
    for (int64_t m = 0; m < nm && j->pack && c->s; m++)
        la_unpack_tiles(state[m], c->dk, c->dv, j0, nj, pack_tile(j->kern), pack_ld(j->kern),
                        st[m].s);
}

linattn_status la_delta_run(const la_kernels *kern, const la_call *c)
{
    const la_delta_ops *ops = kern->delta;
    delta_job j = {.kern = kern, .c = c, .a = choose_algo(kern, c)};
    const int wanted = la_threads_for_call(c->num_threads, c->B, c->T, c->H, c->dk, c->dv);
    j.group = c->H / c->qk_heads;
    j.members = j.group < MAX_MEMBERS ? j.group : MAX_MEMBERS;
    j.tile = c->step ? c->dv : ops->tile_columns(c->dk, c->dv);
    if (j.tile > c->dv)
        j.tile = c->dv;
    j.ntiles = (c->dv + j.tile - 1) / j.tile;
#define UNITS() (c->B * c->qk_heads * ((j.group + j.members - 1) / j.members) * j.ntiles)
    /* fewer units than threads: first fewer value heads per unit, then
     * (not for a step) narrower tiles, in whole 16-column groups; a step
     * takes whole heads: one head's columns split over threads made a step
     * 3-15x slower (1 head, dk = dv = 128: 1.6 us on one thread, 5-25 us
     * on two) */
    while (UNITS() < wanted && j.members > 1)
        j.members = (j.members + 1) / 2;
    if (!c->step && UNITS() < wanted) {
        const int64_t heads = c->B * c->H, per_head = (wanted + heads - 1) / heads;
        j.tile = ((c->dv + per_head - 1) / per_head + 15) / 16 * 16;
        if (j.tile > c->dv)
            j.tile = c->dv;
        j.ntiles = (c->dv + j.tile - 1) / j.tile;
    }
    /* units that do not share evenly leave threads idle in the last round
     * (16 units on 12 threads: two rounds for 1.33 units of work each):
     * split further while 1/8 or more of the rounds' thread time would idle,
     * value heads first, then (not for a step) tiles down to 32 columns */
    while (la_idle_eighths(UNITS(), wanted) > 0) {
        if (j.members > 1) {
            j.members = (j.members + 1) / 2;
        } else if (!c->step && j.tile > 32) {
            j.tile = (j.tile / 2 + 15) / 16 * 16;
            j.ntiles = (c->dv + j.tile - 1) / j.tile;
        } else {
            break;
        }
    }
    j.mgroups = (j.group + j.members - 1) / j.members;
    const int64_t units = UNITS();
    j.units = units;
#undef UNITS
    const la_source any = la_source_at(c, 0);
    j.stage_bytes = la_stage_bytes(&any, j.a.block);
    j.zero_bytes = c->s ? 0 : la_size_mul(la_size_floats(c->head_state_elems), (size_t)j.members);
    j.kws_bytes = kernel_bytes(kern, c, &j.a, j.tile);
    j.pack = packs(kern, c, &j.a, 0);
    j.pack_bytes = j.pack ? packed_bytes(kern, c, j.tile) : 0;
    j.per_thread = la_size_add(la_size_add(j.stage_bytes, j.zero_bytes),
                               la_size_add(la_size_mul(j.pack_bytes, (size_t)j.members),
                                           j.kws_bytes));

    const int nt = la_team_size(wanted, units);
    if (!(c->step && j.per_thread <= STEP_STACK_BYTES)) {
        const size_t bytes = la_size_mul(j.per_thread, (size_t)nt);
        j.ws = bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
        if (j.ws == NULL)
            return la_fail(LINATTN_E_NOMEM, "out of memory: %zu bytes of workspace", bytes);
    }
    LA_FOR_EACH_UNIT(nt, units, unit, end, tid, run_unit(&j, unit, end, tid));
    free(j.ws);
    return LINATTN_OK;
}

/* ---- one head's column tile on the calling thread (state pools, packed
 * sequences, plans). c is a B = H = 1 call whose s is the unit's working
 * state; a column's arithmetic does not depend on the tile. Workspace: the
 * stage buffer, then the kernels'. */
int64_t la_delta_unit_columns(const la_kernels *kern, const la_call *c)
{
    const int64_t w = c->step ? c->dv : kern->delta->tile_columns(c->dk, c->dv);
    return w < c->dv ? w : c->dv;
}

/* (enough for la_delta_head_run_packed too, moved as there) */
size_t la_delta_head_bytes(const la_kernels *kern, const la_call *c, int64_t nj, int moved)
{
    if (c->T < 1)
        return 0;
    const delta_algo a = choose_algo(kern, c);
    const la_source src = la_source_at(c, 0);
    return la_size_add(la_size_add(la_size_up64(la_stage_bytes(&src, a.block)),
                                   packs(kern, c, &a, moved) ? packed_bytes(kern, c, nj) : 0),
                       kernel_bytes(kern, c, &a, nj));
}

static void head_run(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                     head_state st, void *ws)
{
    if (c->T < 1)
        return;
    const delta_algo a = choose_algo(kern, c);
    const la_source src = la_source_at(c, 0);
    const size_t sb = la_size_up64(la_stage_bytes(&src, a.block));
    la_stage_reset(ws);
    /* a float K-first state: on the packed copy when the tuning says so */
    const size_t pb = st.s && !st.s_vld && packs(kern, c, &a, 0) ? packed_bytes(kern, c, nj) : 0;
    float *copy = (float *)((unsigned char *)ws + sb);
    if (pb) {
        la_pack_tiles(st.s, c->dk, c->dv, j0, nj, pack_tile(kern), pack_ld(kern), copy);
        head_tokens(kern, c, &a, &src, (head_state){.s = copy, .packed = 1}, j0, nj, ws,
                    (unsigned char *)ws + sb + pb);
        la_unpack_tiles(st.s, c->dk, c->dv, j0, nj, pack_tile(kern), pack_ld(kern), copy);
        return;
    }
    head_tokens(kern, c, &a, &src, st, j0, nj, ws, (unsigned char *)ws + sb);
}

void la_delta_head_run(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                       const float *next, void *ws)
{
    head_run(kern, c, j0, nj, (head_state){.s = c->s, .next = next}, ws);
}

/* The same on a V-first state (value column j of the head at s + j * ld
 * elements; float, or bfloat16 in one-token calls), for calls that run the
 * recurrent algorithm (la_delta_head_recurrent); chunked ones work on a
 * K-first copy. from: the state before the call, in the same layout (its
 * columns [j0, j0 + nj) read, never written), or NULL: s, in place. A call
 * of T >= 1 tokens writes the columns of s either way. */
int la_delta_head_recurrent(const la_kernels *kern, const la_call *c)
{
    return !choose_algo(kern, c).chunked;
}

void la_delta_head_run_vfirst(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                              void *s, const void *from, int bf16, int64_t ld,
                              const void *next, void *ws)
{
    const head_state st =
        bf16 ? (head_state){.s_vld = ld, .s16 = s, .from = from, .next = next}
             : (head_state){.s = s, .s_vld = ld, .from = from, .next = next};
    head_run(kern, c, j0, nj, st, ws);
}

/* A one-token recurrent call on a K-first bfloat16 state in place (row i
 * of the head at s + i * dv): the sweep widens and rounds the state itself,
 * so a decode step reads and writes 2 bytes per element, once. */
int la_delta_head_bf16_in_place(const la_kernels *kern, const la_call *c)
{
    return c->T == 1 && !choose_algo(kern, c).chunked;
}

void la_delta_head_run_bf16(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                            uint16_t *s, const uint16_t *next, void *ws)
{
    head_run(kern, c, j0, nj, (head_state){.s16 = s, .next = next}, ws);
}

/* Whether a call works on the packed copy (moved: see packs). */
int la_delta_head_packs(const la_kernels *kern, const la_call *c, int moved)
{
    const delta_algo a = choose_algo(kern, c);
    return packs(kern, c, &a, moved);
}

/* Columns [j0, j0 + nj) of a state of type t (element (i, j) at i * row +
 * j * col, row or col 1) into the packed copy (src NULL: zeros), or out of
 * it. K-first rows are read in address order, each row's tiles in turn (a
 * tile's rows at a time would stride through the state a line per row);
 * a V-first tile's columns are contiguous and go through the table's tile
 * transposes. */
static void fill_packed(const la_kernels *kern, int64_t dk, int64_t j0, int64_t nj,
                        linattn_dtype t, const void *src, int64_t row, int64_t col, float *copy)
{
    const la_stage_ops *st = kern->stage;
    const int64_t tw = pack_tile(kern), ld = pack_ld(kern);
    if (col == 1) {
        for (int64_t i = 0; i < dk; i++) {
            float *to = copy + i * ld; /* row i of tile 0, then of each next tile */
            for (int64_t jb = 0; jb < nj; jb += tw, to += dk * ld) {
                const int64_t w = nj - jb < tw ? nj - jb : tw;
                if (src)
                    st->load(t, la_at(src, t, i * row + j0 + jb), w, to);
                else
                    memset(to, 0, (size_t)w * sizeof(float));
            }
        }
        return;
    }
    for (int64_t jb = 0; jb < nj; jb += tw) {
        const int64_t w = nj - jb < tw ? nj - jb : tw;
        float *tile = la_packed_tile(copy, dk, ld, jb / tw);
        if (src)
            st->transpose_in(t, la_at(src, t, (j0 + jb) * col), col, w, dk, tile, ld);
        else
            for (int64_t i = 0; i < dk; i++)
                memset(tile + i * ld, 0, (size_t)w * sizeof(float));
    }
}

static void drain_packed(const la_kernels *kern, int64_t dk, int64_t j0, int64_t nj,
                         linattn_dtype t, const float *copy, void *dst, int64_t row, int64_t col)
{
    const la_stage_ops *st = kern->stage;
    const int64_t tw = pack_tile(kern), ld = pack_ld(kern);
    if (col == 1) {
        for (int64_t i = 0; i < dk; i++) {
            const float *from = copy + i * ld;
            for (int64_t jb = 0; jb < nj; jb += tw, from += dk * ld) {
                const int64_t w = nj - jb < tw ? nj - jb : tw;
                st->store(t, from, w, (void *)la_at(dst, t, i * row + j0 + jb));
            }
        }
        return;
    }
    for (int64_t jb = 0; jb < nj; jb += tw) {
        const int64_t w = nj - jb < tw ? nj - jb : tw;
        st->transpose_out(t, la_packed_tile((float *)copy, dk, ld, jb / tw), ld, dk, w,
                          (void *)la_at(dst, t, (j0 + jb) * col), col);
    }
}

/* Such a call with the copy filled straight from a pool's state of type t
 * and written straight back (element (i, j) of the head at i * row + j *
 * col, row or col 1). src NULL: a zero state; dst NULL: the final state is
 * not kept. Through a K-first float copy the state would be moved twice
 * more (into the copy, then packed; unpacked, then out); the arithmetic is
 * the same, so are the bits. */
void la_delta_head_run_packed(const la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                              linattn_dtype t, const void *src, void *dst, int64_t row,
                              int64_t col, void *ws)
{
    const delta_algo a = choose_algo(kern, c);
    const la_source s = la_source_at(c, 0);
    const size_t sb = la_size_up64(la_stage_bytes(&s, a.block));
    float *copy = (float *)((unsigned char *)ws + sb);
    fill_packed(kern, c->dk, j0, nj, t, src, row, col, copy);
    la_stage_reset(ws);
    head_tokens(kern, c, &a, &s, (head_state){.s = copy, .packed = 1}, j0, nj, ws,
                (unsigned char *)ws + sb + packed_bytes(kern, c, nj));
    if (dst)
        drain_packed(kern, c->dk, j0, nj, t, copy, dst, row, col);
}
