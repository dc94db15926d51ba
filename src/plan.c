/* Plans: a validated serving call (serve.h) cut into independent work units
 * of (sequence, value head, column tile). A unit gathers its state columns
 * from the read slot into a contiguous K-first working copy in the caller's
 * workspace (zeros for a negative read slot), runs its tokens through the
 * family driver's single-head path (the last K one at a time, storing each
 * snapshot), and scatters the final state to the write slot. Units share
 * nothing they write (the checks rule out two sequences writing one slot or
 * writing another's read slot; a sequence's tiles touch disjoint columns),
 * so any partition over any threads gives the same bits, with no locks and
 * no allocation. Units are numbered longest sequence first, so threads that
 * take the next unit as they finish (OpenMP's dynamic schedule, or a shared
 * counter in a host pool) balance one long and many short sequences. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "half.h"
#include "serve.h"
#include "table.h"
#include "threads.h"

struct linattn_plan {
    la_serve sv;
    const la_kernels *kern;
    int64_t units, ntiles;
    int64_t *order; /* unit -> (n * H + h) * ntiles + tile */
    int64_t *cost; /* unit -> its tokens (at least 1), in descending order */
    size_t state_bytes, ws_bytes;
};

/* Head h of sequence n, tokens [ta, ta + len) of it, as a B = H = 1 call on
 * the working state W (z: Wz). */
static la_call head_call(const la_serve *sv, int64_t n, int64_t h, int64_t ta, int64_t len,
                         float *W, float *Wz)
{
    const la_call *c = &sv->c;
    int64_t b, t0;
    la_serve_tokens(sv, n, &b, &t0);
    const int64_t t = t0 + ta, qh = la_qk_head(c, h);
    la_call x = *c;
    x.B = x.H = x.qk_heads = 1;
    x.T = c->step ? 1 : len;
    x.num_threads = 1;
    x.q = la_at(c->q, c->dt.q, b * c->sq.batch + qh * c->sq.head + t * c->sq.token);
    x.k = la_at(c->k, c->dt.k, b * c->sk.batch + qh * c->sk.head + t * c->sk.token);
    x.v = la_at(c->v, c->dt.v, b * c->sv.batch + h * c->sv.head + t * c->sv.token);
    x.o = (void *)la_at(c->o, c->dt.o, b * c->so.batch + h * c->so.head + t * c->so.token);
    x.g = c->g ? c->g + b * c->sg.batch + h * c->sg.head + t * c->sg.token : NULL;
    x.beta = la_at(c->beta, c->dt.beta,
                   b * c->sbeta.batch + h * c->sbeta.head + t * c->sbeta.token);
    /* the single head keeps its gate parameters: A_log[h], dt_bias row h */
    x.A_log = c->A_log ? c->A_log + h : NULL;
    x.dt_bias = c->dt_bias ? c->dt_bias + h * (c->gate == LA_GATE_CHANNEL ? c->dk : 1) : NULL;
    x.s = W;
    x.z = c->family == LA_FAMILY_ADDITIVE && c->normalize ? Wz : NULL;
    return x;
}

/* The pool's layout: rows of dv contiguous values, dv apart (K-first and
 * dense, as a contiguous call's state), or columns of dk keys at least dk
 * apart (V-first). A state with dk = dv = 1 is both; it is taken as K-first, the
 * layout whose kernels linattn_run uses on a contiguous state, so that a
 * plan gives its bits (the V-first ops sum and decay otherwise: a fuzz
 * finding). */
static int kfirst_pool(const la_serve *sv) { return sv->s_col == 1 && sv->s_row == sv->c.dv; }

static int vfirst_pool(const la_serve *sv)
{
    return !kfirst_pool(sv) && sv->s_row == 1 && sv->s_col >= sv->c.dk;
}

/* Whether a delta unit's state is moved into a float copy whatever its
 * call (a float V-first pool: transposed), so that the copy may as well be
 * the kernels' packed one from any length (run_packed). */
static int state_moved(const la_serve *sv)
{
    return vfirst_pool(sv) && sv->c.dt.s == LINATTN_F32;
}

static size_t head_bytes(const linattn_plan *p, const la_call *x)
{
    return p->sv.c.family == LA_FAMILY_DELTA
               ? la_delta_head_bytes(p->kern, x, p->sv.tile, state_moved(&p->sv))
               : la_additive_head_bytes(p->kern, x);
}

static void head_run(const linattn_plan *p, const la_call *x, int64_t j0, int64_t nj,
                     const float *next, void *ws)
{
    if (p->sv.c.family == LA_FAMILY_DELTA)
        la_delta_head_run(p->kern, x, j0, nj, next, ws);
    else
        la_additive_head_run(p->kern, x, ws);
}

/* A state with neither unit stride (rare layouts) against the K-first
 * copy, element by element in 16 x 16 blocks: a whole column of the copy
 * at once would touch dk lines dv floats apart, which share L1 sets. A
 * V-first pool (unit row stride) goes through the table's tile transpose
 * instead (stage.h: transpose_in, transpose_out). */
#define TRANSPOSE_BLOCKS(ASSIGN)                                                                  \
    for (int64_t jb = j0; jb < j0 + nj; jb += 16)                                                 \
        for (int64_t ib = 0; ib < dk; ib += 16)                                                   \
            for (int64_t j = jb; j < (jb + 16 < j0 + nj ? jb + 16 : j0 + nj); j++)                \
                for (int64_t i = ib; i < (ib + 16 < dk ? ib + 16 : dk); i++)                      \
                    ASSIGN

/* Element e of a state of type t as a float, and a float rounded into it. */
static inline float state_get(linattn_dtype t, const void *p, int64_t e)
{
    return t == LINATTN_BF16 ? la_bf16_to_f32(((const uint16_t *)p)[e]) : ((const float *)p)[e];
}

static inline void state_put(linattn_dtype t, void *p, int64_t e, float x)
{
    if (t == LINATTN_BF16)
        ((uint16_t *)p)[e] = la_f32_to_bf16(x);
    else
        ((float *)p)[e] = x;
}

/* The normaliser z of head h in `slot` (with its compensation) into Wz,
 * or zeros for slot < 0. */
static void z_load(const la_serve *sv, int64_t slot, int64_t h, float *Wz)
{
    const size_t zd = (size_t)(sv->c.dk * (1 + sv->c.z_compensated)) * sizeof(float);
    if (slot < 0)
        memset(Wz, 0, zd);
    else
        memcpy(Wz, la_serve_z(sv, slot, h), zd);
}

/* Columns [j0, j0 + nj) of head h's state in `slot` into W (row stride dv),
 * or zeros for slot < 0; with Wz, z too. Once per unit and call (and per
 * snapshot). A K-first pool is copied row by row, a V-first one
 * transposed in register tiles, anything else read along its smaller
 * stride. A bfloat16 state is widened here (and rounded to nearest even in
 * state_store): the kernels always work on float32. */
static void state_load(const la_serve *sv, const la_stage_ops *st, int64_t slot, int64_t h,
                       int64_t j0, int64_t nj, float *W, float *Wz)
{
    const int64_t dk = sv->c.dk, dv = sv->c.dv;
    const linattn_dtype t = sv->c.dt.s;
    if (Wz)
        z_load(sv, slot, h, Wz);
    if (slot < 0) {
        for (int64_t i = 0; i < dk; i++)
            memset(W + i * dv + j0, 0, (size_t)nj * sizeof(float));
        return;
    }
    const void *src = la_serve_state(sv, slot, h);
    const int64_t row = sv->s_row, col = sv->s_col;
    if (col == 1) {
        for (int64_t i = 0; i < dk; i++)
            st->load(t, la_at(src, t, i * row + j0), nj, W + i * dv + j0);
    } else if (row == 1) { /* V-first: the table's tile transpose */
        st->transpose_in(t, la_at(src, t, j0 * col), col, nj, dk, W + j0, dv);
    } else if (col > row) {
        TRANSPOSE_BLOCKS(W[i * dv + j] = state_get(t, src, j * col + i * row));
    } else {
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = j0; j < j0 + nj; j++)
                W[i * dv + j] = state_get(t, src, j * col + i * row);
    }
}

static void state_store(const la_serve *sv, const la_stage_ops *st, int64_t slot, int64_t h,
                        int64_t j0, int64_t nj, const float *W, const float *Wz)
{
    const int64_t dk = sv->c.dk, dv = sv->c.dv, zd = dk * (1 + sv->c.z_compensated);
    const linattn_dtype t = sv->c.dt.s;
    void *dst = la_serve_state(sv, slot, h);
    const int64_t row = sv->s_row, col = sv->s_col;
    if (col == 1) {
        for (int64_t i = 0; i < dk; i++)
            st->store(t, W + i * dv + j0, nj, (void *)la_at(dst, t, i * row + j0));
    } else if (row == 1) {
        st->transpose_out(t, W + j0, dv, dk, nj, (void *)la_at(dst, t, j0 * col), col);
    } else if (col > row) {
        TRANSPOSE_BLOCKS(state_put(t, dst, j * col + i * row, W[i * dv + j]));
    } else {
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = j0; j < j0 + nj; j++)
                state_put(t, dst, j * col + i * row, W[i * dv + j]);
    }
    if (Wz)
        memcpy(la_serve_z(sv, slot, h), Wz, (size_t)zd * sizeof(float));
}

/* Longest delta call on a V-first pool run in place on the V-first
 * recurrent kernels; longer ones are transposed onto the K-first kernels
 * (the packed copy, where the table packs). serve-bench pool_prefill T
 * (B = 16, H = 32, dk = dv = 128, one thread, Zen 3, 3 interleaved runs,
 * ratio to the contiguous call), in place against transposed onto the
 * packed copy: 1.14-1.22 / 1.36-1.42 (T = 6), 1.19-1.24 / 1.27-1.32 (8),
 * 1.24-1.29 / 1.23-1.28 (10), 1.27-1.32 / 1.18-1.24 (12), 1.33-1.36 /
 * 1.08-1.20 (16). Level at 10; 8 since the packed kernels gain more on
 * the Xeon (0.52 of the zmm peak against 0.32 unpacked). 16 before the
 * transposes filled the packed copy directly (docs/kernels.md). */
#ifndef LA_VFIRST_MAX_T /* a variant build may set it, to measure either form */
#define LA_VFIRST_MAX_T 8
#endif
enum { VFIRST_MAX_T = LA_VFIRST_MAX_T };

/* An in-place unit's write slot starts as its read slot's state (zeros for
 * a negative read slot): nrows runs of count elements of head h, the first
 * at element first, stride elements apart. */
static void start_from_read_slot(const la_serve *sv, int64_t rd, int64_t wr, int64_t h,
                                 int64_t first, int64_t nrows, int64_t stride, int64_t count)
{
    if (rd == wr)
        return;
    const size_t es = la_dtype_size(sv->c.dt.s);
    unsigned char *dst = la_serve_state(sv, wr, h);
    const unsigned char *src = rd < 0 ? NULL : la_serve_state(sv, rd, h);
    for (int64_t r = 0; r < nrows; r++) {
        const size_t at = (size_t)(first + r * stride) * es;
        if (src)
            memcpy(dst + at, src + at, (size_t)count * es);
        else
            memset(dst + at, 0, (size_t)count * es);
    }
}

/* The V-first kernel on columns [j0, j0 + nj) of head h, its state read
 * from slot `at` and written to slot `to`: where they differ, the first
 * token reads the state where it lies (la_delta_head_run_vfirst's from), so
 * a move costs no copy first (ggml_op's read slot b and write slot B + b;
 * the same bits as copying first). A zero start (at negative) or a call
 * without tokens fills `to` first. */
static void vfirst_between_slots(const linattn_plan *p, const la_call *x, int64_t h, int64_t at,
                                 int64_t to, int64_t j0, int64_t nj, const void *next,
                                 void *kws)
{
    const la_serve *sv = &p->sv;
    const int64_t ld = sv->s_col;
    const void *from = NULL;
    if (at >= 0 && at != to && x->T >= 1)
        from = la_serve_state(sv, at, h);
    else
        start_from_read_slot(sv, at, to, h, j0 * ld, nj, ld, sv->c.dk); /* columns j0.. */
    la_delta_head_run_vfirst(p->kern, x, j0, nj, la_serve_state(sv, to, h), from,
                             sv->c.dt.s == LINATTN_BF16, ld, next, kws);
}

/* A delta unit on a V-first pool, from its read slot into its write slot
 * (float, or bfloat16 in one-token calls: the kernel widens and rounds each
 * element once, as a K-first bfloat16 step does): 1 when done, 0 when its
 * call runs chunked (nothing touched yet). next: as la_delta_head_run's,
 * in the pool's layout. */
static int run_vfirst(const linattn_plan *p, int64_t n, int64_t h, int64_t rd, int64_t wr,
                      int64_t len, int64_t j0, int64_t nj, const void *next, void *kws)
{
    const la_call x = head_call(&p->sv, n, h, 0, len, NULL, NULL);
    if (!la_delta_head_recurrent(p->kern, &x))
        return 0;
    vfirst_between_slots(p, &x, h, rd, wr, j0, nj, next, kws);
    return 1;
}

/* A delta unit of a float V-first pool whose every token leaves its state
 * in a slot (K >= len snapshots, the last token's in the write slot when
 * there is one): speculative-decoding verification as vLLM calls it. Token
 * by token, the V-first kernel reads the state from the slot the previous
 * token left it in and writes it to the slot it goes to, in the pool's own
 * layout (through a K-first copy, each snapshot was a transpose of the
 * state). The results are the pool's decode steps', token after token,
 * bit for bit. 1 when done, 0 when not taken (a token with no slot to work
 * in, a chunked call: nothing touched). A bfloat16 pool keeps the route
 * through a float copy: there, as in vLLM's kernel, the tokens carry the
 * float state and only what is stored is rounded, where stepping from slot
 * to slot would start each token from the rounded snapshot; the slot to
 * slot form was tried and measured level with it (pool_spec_bf16, 4
 * tokens, Zen 3: 1.88-2.16x the contiguous call against 1.98-2.13x). */
static int run_vfirst_snapshots(const linattn_plan *p, int64_t n, int64_t h, int64_t rd,
                                int64_t wr, int64_t len, int64_t j0, int64_t nj, void *kws)
{
    const la_serve *sv = &p->sv;
    const int64_t ld = sv->s_col, dk = sv->c.dk, first = len - sv->K;
    if (len < 1 || first > 0)
        return 0;
    const int32_t *snap = sv->snapshot_slots + (n * sv->K - first); /* snap[t]: token t's */
    for (int64_t t = 0; t < len; t++)
        if (snap[t] < 0 && !(t == len - 1 && wr >= 0))
            return 0;
    la_call x = head_call(sv, n, h, 0, 1, NULL, NULL);
    if (!la_delta_head_recurrent(p->kern, &x))
        return 0;
    int64_t at = rd; /* the slot holding the state so far (negative: zeros) */
    for (int64_t t = 0; t < len; t++) {
        const int64_t to = t == len - 1 && wr >= 0 ? wr : snap[t];
        x = head_call(sv, n, h, t, 1, NULL, NULL);
        vfirst_between_slots(p, &x, h, at, to, j0, nj, NULL, kws);
        at = to;
    }
    if (snap[len - 1] >= 0)
        start_from_read_slot(sv, at, snap[len - 1], h, j0 * ld, nj, ld, dk);
    return 1;
}

/* A one-token delta unit in place on a K-first bfloat16 pool (rows of dv
 * elements): 1 when done, 0 when its call runs chunked (nothing touched).
 * The kernels' sweep widens and rounds the state itself, so the step reads
 * and writes each element once, 2 bytes, instead of widening into a float
 * copy and rounding it back (1.35-1.57x the float32 step on Zen 3, against
 * a goal of 0.6x). */
static int run_bf16_in_place(const linattn_plan *p, int64_t n, int64_t h, int64_t rd,
                             int64_t wr, int64_t len, int64_t j0, int64_t nj,
                             const uint16_t *next, void *kws)
{
    const la_serve *sv = &p->sv;
    la_call x = head_call(sv, n, h, 0, len, NULL, NULL);
    if (!la_delta_head_bf16_in_place(p->kern, &x))
        return 0;
    start_from_read_slot(sv, rd, wr, h, j0, sv->c.dk, sv->c.dv, nj); /* rows' columns j0.. */
    la_delta_head_run_bf16(p->kern, &x, j0, nj, la_serve_state(sv, wr, h), next, kws);
    return 1;
}

/* An additive unit in place through the token loop, where a K-first
 * float pool's in-place path does not take it: a one-token call on a
 * K-first bfloat16 pool, as run_bf16_in_place for the delta rule (the
 * token op widens and rounds the state itself; 36 layers of 32 heads of
 * 128 x 128 from memory on Zen 5, one thread, B = 1: 42 us a layer against
 * 117 through the float copy), or a V-first pool's call of up to
 * VFIRST_MAX_T tokens (bfloat16: one), through the token_vfirst op, where
 * a transpose into the float copy and back read and wrote the state once
 * more (vLLM keeps Mamba-2's SSM state V-first). Each row fetches that row
 * of the next unit's state. The write slot, and z (float, the write
 * slot's), start from the read slot's. 1 when done, 0 when the call does
 * not run the token loop (nothing touched). */
static int run_additive_in_place(const linattn_plan *p, int64_t n, int64_t h, int64_t rd,
                                 int64_t wr, int64_t len, const void *next, void *kws)
{
    const la_serve *sv = &p->sv;
    const la_call *c = &sv->c;
    float *z = la_serve_z(sv, wr, h);
    la_call x = head_call(sv, n, h, 0, len, NULL, z);
    if (!la_additive_head_token_loop(p->kern, &x))
        return 0;
    const int vfirst = vfirst_pool(sv);
    if (vfirst)
        start_from_read_slot(sv, rd, wr, h, 0, c->dv, sv->s_col, c->dk);
    else
        start_from_read_slot(sv, rd, wr, h, 0, c->dk, sv->s_row, c->dv);
    if (z && rd != wr)
        z_load(sv, rd, h, z);
    la_additive_head_run_in_place(p->kern, &x, la_serve_state(sv, wr, h),
                                  c->dt.s == LINATTN_BF16, vfirst ? sv->s_col : 0, next, kws);
    return 1;
}

/* A delta unit whose call runs on the kernels' packed copy of its columns
 * (la_delta_head_packs): the copy is filled straight from the read slot (or
 * zeros) and written straight to the write slot, whichever of the rows or
 * columns is contiguous (a V-first pool: through the tile transposes), with
 * no K-first working copy between. A float V-first pool's state is
 * transposed into a float copy whatever the call, so its units pack from
 * any length where the table packs at all (pool_prefill 20 on Zen 3:
 * 1.13-1.17x the contiguous call before, 1.08-1.12x). bfloat16 pools keep
 * the entry's threshold: at a few tokens the packed copy measured slower
 * (pool_prefill_bf16 4, V-first: 1.16-1.24x against 1.08-1.15x; K-first,
 * widened a tile's width at a time: 1.3-1.4x), at 16 level. 1 when done,
 * 0 when the call does not pack (nothing touched). */
static int run_packed(const linattn_plan *p, int64_t n, int64_t h, int64_t rd, int64_t wr,
                      int64_t len, int64_t j0, int64_t nj, void *kws)
{
    const la_serve *sv = &p->sv;
    la_call x = head_call(sv, n, h, 0, len, NULL, NULL);
    if (!la_delta_head_packs(p->kern, &x, state_moved(sv)))
        return 0;
    la_delta_head_run_packed(p->kern, &x, j0, nj, sv->c.dt.s,
                             rd < 0 ? NULL : la_serve_state(sv, rd, h),
                             wr < 0 ? NULL : la_serve_state(sv, wr, h), sv->s_row, sv->s_col, kws);
    return 1;
}

/* The state unit u reads first (its read slot's head), or NULL: a unit
 * the calling thread runs next, whose rows the kernels fetch while they
 * work on the current one. */
static const void *unit_read_state(const linattn_plan *p, int64_t u)
{
    if (u < 0 || u >= p->units)
        return NULL;
    const la_serve *sv = &p->sv;
    const int64_t nh = p->order[u] / p->ntiles;
    int64_t rd, wr;
    if (la_serve_slots(sv, nh / sv->c.H, &rd, &wr) || rd < 0)
        return NULL;
    return la_serve_state(sv, rd, nh % sv->c.H);
}

/* Unit u; next_u: the unit the calling thread runs next, or -1. */
static void run_unit(const linattn_plan *p, int64_t u, int64_t next_u, unsigned char *ws)
{
    const la_serve *sv = &p->sv;
    const la_call *c = &sv->c;
    const int64_t idx = p->order[u], tile = idx % p->ntiles, nh = idx / p->ntiles;
    const int64_t h = nh % c->H, n = nh / c->H;
    int64_t rd, wr, b, t0;
    if (la_serve_slots(sv, n, &rd, &wr))
        return; /* padding: nothing read, written or computed */
    const int64_t len = la_serve_tokens(sv, n, &b, &t0);
    const int64_t j0 = tile * sv->tile, nj = c->dv - j0 < sv->tile ? c->dv - j0 : sv->tile;
    float *W = (float *)ws;
    float *Wz = c->family == LA_FAMILY_ADDITIVE && c->normalize
                    ? (float *)(ws + la_size_floats((size_t)(c->dk * c->dv)))
                    : NULL;
    /* z belongs to the unit of column 0 (the additive family has one tile) */
    float *Wz_pool = tile == 0 && sv->z ? Wz : NULL;
    void *kws = ws + p->state_bytes;
    /* A K-first pool without snapshots is worked on in place: the write
     * slot starts as the read slot's state (or zeros) and the kernels run
     * on it, so a decode step copies nothing. Otherwise the unit works on a
     * K-first copy in its workspace (same arithmetic, same bits). */
    const la_stage_ops *st = p->kern->stage;
    const int f32 = c->dt.s == LINATTN_F32; /* a bfloat16 state is worked on in a float copy */
    if (sv->K > 0 && f32 && c->family == LA_FAMILY_DELTA && vfirst_pool(sv) &&
        run_vfirst_snapshots(p, n, h, rd, wr, len, j0, nj, kws))
        return;
    const int in_place =
        f32 && wr >= 0 && sv->K == 0 && kfirst_pool(sv) && (Wz == NULL || sv->z != NULL);
    /* A V-first pool of the delta family runs calls of up to VFIRST_MAX_T
     * tokens in place on the kernels' V-first recurrent form (a step: about
     * 1.0x the contiguous one, against 1.8x through the transposes, which
     * read and write the state once more in L2); longer ones are
     * transposed onto the K-first kernels, whose cost per token is lower
     * than the V-first form's (two horizontal sums per group of columns
     * and token) once the transposes' cost per call is spread thin. A
     * bfloat16 V-first pool runs one-token calls in place (the kernel
     * rounds the state once per token, as the K-first bfloat16 step does);
     * longer calls widen it once into the float copy and round it once. */
    if (wr >= 0 && sv->K == 0 && c->family == LA_FAMILY_DELTA && vfirst_pool(sv) &&
        (f32 ? len <= VFIRST_MAX_T : len == 1) &&
        run_vfirst(p, n, h, rd, wr, len, j0, nj, unit_read_state(p, next_u), kws))
        return;
    if (c->dt.s == LINATTN_BF16 && wr >= 0 && sv->K == 0 && c->family == LA_FAMILY_DELTA &&
        len == 1 && kfirst_pool(sv) &&
        run_bf16_in_place(p, n, h, rd, wr, len, j0, nj, unit_read_state(p, next_u), kws))
        return;
    const int kfirst_bf16_step = !f32 && len == 1 && kfirst_pool(sv);
    const int vfirst_short = vfirst_pool(sv) && (f32 ? len <= VFIRST_MAX_T : len == 1);
    if (wr >= 0 && sv->K == 0 && c->family == LA_FAMILY_ADDITIVE &&
        (kfirst_bf16_step || vfirst_short) && (Wz == NULL || sv->z != NULL) &&
        run_additive_in_place(p, n, h, rd, wr, len, unit_read_state(p, next_u), kws))
        return;
    if (sv->K == 0 && c->family == LA_FAMILY_DELTA && (sv->s_col == 1 || sv->s_row == 1) &&
        run_packed(p, n, h, rd, wr, len, j0, nj, kws))
        return;
    if (in_place) {
        W = la_serve_state(sv, wr, h);
        Wz = la_serve_z(sv, wr, h); /* NULL but for the additive family, one tile */
        if (rd != wr)
            state_load(sv, st, rd, h, j0, nj, W, Wz);
    } else {
        state_load(sv, st, rd, h, j0, nj, W, Wz_pool);
        if (Wz && !Wz_pool)
            memset(Wz, 0, (size_t)(c->dk * (1 + c->z_compensated)) * sizeof(float));
    }
    const int64_t first = len - sv->K; /* position of snapshot 0 */
    const int64_t pre = first > 0 ? first : 0;
    if (sv->K == 0 || pre > 0) {
        const la_call x = head_call(sv, n, h, 0, sv->K ? pre : len, W, Wz);
        /* in place, the next unit's state is laid out as this one */
        head_run(p, &x, j0, nj, in_place ? unit_read_state(p, next_u) : NULL, kws);
    }
    for (int64_t t = pre; sv->K > 0 && t < len; t++) {
        const la_call x = head_call(sv, n, h, t, 1, W, Wz);
        head_run(p, &x, j0, nj, NULL, kws);
        const int64_t slot = sv->snapshot_slots[n * sv->K + (t - first)];
        if (slot >= 0)
            state_store(sv, st, slot, h, j0, nj, W, Wz_pool);
    }
    if (wr >= 0 && !in_place)
        state_store(sv, st, wr, h, j0, nj, W, Wz_pool);
}

typedef struct {
    int64_t cost, idx;
} unit_cost;

/* linattn_run takes units in runs of consecutive ones that sweep about
 * this many state elements in all (32 tokens of a 128 x 128 head) */
enum { RUN_STATE_FLOATS = 32 * 128 * 128 };

static int by_cost(const void *a, const void *b)
{
    const unit_cost *x = a, *y = b;
    return x->cost != y->cost ? (x->cost > y->cost ? -1 : 1) : (x->idx < y->idx ? -1 : 1);
}

static linattn_status plan_make(linattn_plan **out, linattn_op op, const linattn_config *cfg,
                                const linattn_operands *ops)
{
    *out = NULL;
    const la_kernels *kern = la_active_kernels_or_fail();
    if (kern == NULL)
        return LINATTN_E_ISA;
    la_run_arg_copy copy;
    linattn_status st = la_run_args(cfg, ops, &copy, &cfg, &ops);
    if (st != LINATTN_OK)
        return st;
    linattn_plan *p = calloc(1, sizeof *p);
    if (p == NULL)
        return la_fail(LINATTN_E_NOMEM, "out of memory for a plan");
    st = la_check_serve(&p->sv, op, cfg, ops, kern);
    if (st != LINATTN_OK) {
        free(p);
        return st;
    }
    const la_serve *sv = &p->sv;
    const la_call *c = &sv->c;
    p->kern = kern;
    p->ntiles = (c->dv + sv->tile - 1) / sv->tile;
    size_t units = la_size_mul(la_size_mul(la_size_of_dim(sv->N), la_size_of_dim(c->H)),
                               la_size_of_dim(p->ntiles));
    unit_cost *uc = units >= (size_t)INT64_MAX / 2 ? NULL : malloc(units * sizeof *uc + 1);
    p->order = uc ? malloc(units * sizeof *p->order + 1) : NULL;
    p->cost = p->order ? malloc(units * sizeof *p->cost + 1) : NULL;
    if (p->cost == NULL) {
        free(p->order);
        free(uc);
        free(p);
        return la_fail(LINATTN_E_NOMEM, "out of memory for a plan of %zu units", units);
    }
    /* workspace: the working state, then the largest kernel workspace of
     * any run of tokens a unit makes */
    static float marker; /* a non-NULL working state, for sizing only */
    p->state_bytes = la_size_add(la_size_floats((size_t)(c->dk * c->dv)),
                                 la_size_floats(2 * (size_t)c->dk));
    size_t kbytes = 0;
    for (int64_t n = 0; n < sv->N; n++) {
        int64_t b, t0;
        const int64_t len = la_serve_tokens(sv, n, &b, &t0);
        const int64_t first = len - sv->K, runs[2] = {sv->K ? (first > 0 ? first : 0) : len,
                                                      sv->K && len > 0 ? 1 : 0};
        for (int r = 0; r < 2; r++) {
            const la_call x = head_call(sv, n, 0, 0, runs[r], &marker, &marker);
            const size_t kb = head_bytes(p, &x);
            kbytes = kb > kbytes ? kb : kbytes;
        }
        for (int64_t i = 0; i < c->H * p->ntiles; i++) {
            const int64_t idx = n * c->H * p->ntiles + i;
            uc[idx] = (unit_cost){len > 0 ? len : 1, idx};
        }
    }
    p->ws_bytes = la_size_up64(la_size_add(p->state_bytes, kbytes));
    if (p->ws_bytes == SIZE_MAX) {
        free(uc);
        linattn_plan_destroy(p);
        return la_fail(LINATTN_E_SHAPE, "the workspace of one unit is too large to address");
    }
    size_t sorted = 1; /* steps and equal lengths are in order already */
    while (sorted < units && by_cost(&uc[sorted - 1], &uc[sorted]) < 0)
        sorted++;
    if (sorted < units)
        qsort(uc, units, sizeof *uc, by_cost);
    for (size_t u = 0; u < units; u++)
        p->order[u] = uc[u].idx, p->cost[u] = uc[u].cost;
    free(uc);
    p->units = (int64_t)units;
    *out = p;
    return LINATTN_OK;
}

linattn_status linattn_plan_create(linattn_plan **plan, linattn_op op, const linattn_config *cfg,
                                   const linattn_operands *ops)
{
    if (plan == NULL)
        return la_fail(LINATTN_E_NULL, "plan is NULL");
    const linattn_status st = plan_make(plan, op, cfg, ops);
    if (st == LINATTN_OK)
        la_succeed();
    return st;
}

int64_t linattn_plan_units(const linattn_plan *plan) { return plan ? plan->units : 0; }

size_t linattn_plan_workspace_size(const linattn_plan *plan) { return plan ? plan->ws_bytes : 0; }

linattn_status linattn_plan_run(const linattn_plan *plan, int64_t first, int64_t count,
                                void *workspace)
{
    if (plan == NULL)
        return la_fail(LINATTN_E_NULL, "plan is NULL");
    if (first < 0 || count < 0 || first > plan->units || count > plan->units - first)
        return la_fail(LINATTN_E_ARG,
                       "units [%lld, %lld + %lld): outside the plan's %lld units",
                       (long long)first, (long long)first, (long long)count,
                       (long long)plan->units);
    if (count > 0 && workspace == NULL)
        return la_fail(LINATTN_E_NULL, "workspace is NULL: a running thread needs "
                                       "linattn_plan_workspace_size() bytes");
    if (((uintptr_t)workspace & 63) != 0)
        return la_fail(LINATTN_E_ARG, "workspace is not 64-byte aligned");
    for (int64_t u = first; u < first + count; u++)
        run_unit(plan, u, u + 1 < first + count ? u + 1 : -1, workspace);
    la_succeed();
    return LINATTN_OK;
}

void linattn_plan_destroy(linattn_plan *plan)
{
    if (plan == NULL)
        return;
    free(plan->order);
    free(plan->cost);
    free(plan);
}

/* linattn_run's serving form: a plan run on the library's OpenMP threads,
 * each taking the next run of units as it finishes. */
linattn_status la_serve_run(linattn_op op, const linattn_config *cfg, const linattn_operands *ops)
{
    linattn_plan *p;
    linattn_status st = plan_make(&p, op, cfg, ops);
    if (st != LINATTN_OK)
        return st;
    const la_call *c = &p->sv.c;
    const int nt =
        la_team_size(la_threads_for_call(c->num_threads, c->B, c->T, c->H, c->dk, c->dv), p->units);
    unsigned char *ws = aligned_alloc(64, la_size_mul(p->ws_bytes, (size_t)nt));
    if (ws == NULL) {
        linattn_plan_destroy(p);
        return la_fail(LINATTN_E_NOMEM, "out of memory: %zu bytes of workspace per thread",
                       p->ws_bytes);
    }
    const int64_t units = p->units;
    if (nt <= 1 || p->cost[0] == 1) {
        /* one thread, or a decode step's units, all of one cost: a
         * contiguous range per thread (threads.h), so that each unit knows
         * the next one its thread runs and fetches its state */
        LA_FOR_EACH_UNIT(nt, units, u, end, tid,
                         run_unit(p, u, u + 1 < end ? u + 1 : -1,
                                  ws + p->ws_bytes * (size_t)tid));
    } else {
        /* runs of consecutive units, longest first, each taken by the next
         * thread to free up: a unit alone once it sweeps RUN_STATE_FLOATS,
         * shorter ones together up to that and to an eighth of a thread's
         * share of the tokens. One unit a take cost a decode unit packed
         * with a prefill a third of its time (an atomic on a line the
         * threads pass around), and within a run each one-token unit but
         * the last knows the next one its thread runs and fetches its
         * state. */
        int64_t total = 0, runs = 0;
        for (int64_t u = 0; u < units; u++)
            total += p->cost[u];
        const int64_t share = total / (8 * (int64_t)nt), sweep = RUN_STATE_FLOATS / (c->dk * c->dv);
        const int64_t most = share < sweep ? (share > 1 ? share : 1) : (sweep > 1 ? sweep : 1);
        int64_t *run_at = malloc((size_t)(units + 1) * sizeof *run_at);
        if (run_at == NULL) {
            free(ws);
            linattn_plan_destroy(p);
            return la_fail(LINATTN_E_NOMEM, "out of memory: %lld runs of units",
                           (long long)units);
        }
        for (int64_t u = 0; u < units; runs++) {
            run_at[runs] = u;
            for (int64_t held = 0; u < units && (held == 0 || held + p->cost[u] <= most); u++)
                held += p->cost[u];
        }
        run_at[runs] = units;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
        for (int64_t r = 0; r < runs; r++) {
            unsigned char *mine = ws + p->ws_bytes * (size_t)la_thread_num();
            for (int64_t u = run_at[r]; u < run_at[r + 1]; u++)
                run_unit(p, u, u + 1 < run_at[r + 1] ? u + 1 : -1, mine);
        }
        free(run_at);
    }
    free(ws);
    linattn_plan_destroy(p);
    la_succeed();
    return LINATTN_OK;
}
