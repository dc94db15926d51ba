/* Per-op tests: every op a table provides itself (not the scalar fallback
 * the registry would resolve) against the scalar table's same op, called
 * directly on shapes that straddle every register tile and vector width, so
 * a kernel author sees which op broke, in which table, on which shape.
 *
 * Ops whose state or pack is private to a table run as pairs from one
 * table (chunk_pack + chunk_output, chunk_pack + chunk_state +
 * state_combine); only what the driver sees is compared: o rows, u and uz,
 * the state. The delta ops run on a tile of value columns (j0 > 0, nj odd)
 * and are compared with the scalar op over the whole width, which also
 * checks the scalar table's own tiling. Every user array ends at a
 * PROT_NONE page, so reading past its last row faults.
 *
 * Tables this CPU cannot run are reported as skipped; nothing exits 77. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "half.h"
#include "harness.h"
#include "table.h"
#include "tolerance.h"

/* Sizes below, at and above every register tile and vector width. */
static const int64_t dims[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65};
static const int64_t rows[] = {1, 2, 5, 6, 7, 12, 23, 24, 25, 30, 31, 64};
enum { NDIMS = sizeof dims / sizeof dims[0], NROWS = sizeof rows / sizeof rows[0] };
/* Every dim_step-th size of dims (LINATTN_TEST_OPS_DIM_STEP; 1 natively): under
 * an emulator the whole grid takes many minutes. */
static int dim_step = 1;

static const la_table *scalar;

static const char *const gate_names[] = {"none", "token", "channel"};
static const char *const phi_names[] = {"elu1", "relu", "identity"};

/* ---- guarded buffers, released together --------------------------------- */

typedef struct {
    unsigned char *base[48];
    size_t len[48];
    int n;
} arena;

/* n floats ending exactly at a PROT_NONE page; 64-byte aligned when asked
 * (the driver's workspaces), else wherever the end puts them (user arrays). */
static float *guarded(arena *a, size_t n, int aligned64)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (aligned64)
        bytes = (bytes + 63) & ~(size_t)63;
    const size_t data = (bytes + page - 1) / page * page;
    unsigned char *base = guard_pages_get(data + page); /* reused where it can be */
    if (a->n == 48)
        abort();
    a->base[a->n] = base, a->len[a->n++] = data + page;
    return (float *)(void *)(base + data - bytes);
}

static void *guarded_bytes(arena *a, size_t bytes)
{
    return guarded(a, (bytes + sizeof(float) - 1) / sizeof(float), 1);
}

/* bytes ending exactly at a PROT_NONE page, at any alignment */
static void *guarded_end(arena *a, size_t bytes)
{
    const size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
    return (unsigned char *)guarded(a, n, 0) + (n * sizeof(float) - bytes);
}

static void arena_free(arena *a)
{
    for (int i = 0; i < a->n; i++)
        guard_pages_put(a->base[i], a->len[i]);
    a->n = 0;
}

static float *filled(arena *a, size_t n, float lo, float hi)
{
    float *x = guarded(a, n, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = rand_uniform(lo, hi);
    return x;
}

/* Value that marks elements an op must not write. */
#define UNTOUCHED 7777.0f

/* ---- comparison and reporting ------------------------------------------- */

typedef struct {
    const char *op;
    long cases, failed;
    double worst; /* max relative error seen, as a fraction of LA_TOL_OP */
} op_stat;

enum { MAX_REPORTS = 8 };

/* A block of rows x cols floats (row strides xs, rs) of the table's result
 * x against the scalar's ref: max |x - ref| / max(1, max |ref|) within
 * LA_TOL_OP; NaN or Inf where ref is finite fails. */
static int compare(op_stat *st, const char *table, const char *shape, const char *what,
                   const float *x, int64_t xs, const float *ref, int64_t rs, int64_t nrows,
                   int64_t ncols)
{
    double scale = 1.0, err = 0.0;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t c = 0; c < ncols; c++) {
            const double a = fabs((double)ref[r * rs + c]);
            scale = a > scale ? a : scale;
        }
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t c = 0; c < ncols; c++) {
            const double d = fabs((double)x[r * xs + c] - (double)ref[r * rs + c]);
            err = d > err || isnan(d) ? d : err;
        }
    const double ratio = isnan(err) ? INFINITY : err / scale / LA_TOL_OP;
    st->worst = ratio > st->worst ? ratio : st->worst;
    if (ratio <= 1.0)
        return 1;
    if (st->failed++ < MAX_REPORTS)
        printf("FAIL %s %s, %s: %s differs from scalar by %.3g of the tolerance\n", table,
               st->op, shape, what, ratio);
    return 0;
}

/* Elements outside what an op may write must keep their value. */
static int untouched(op_stat *st, const char *table, const char *shape, const char *what,
                     const float *x, const float *before, size_t n)
{
    if (memcmp(x, before, n * sizeof(float)) == 0)
        return 1;
    if (st->failed++ < MAX_REPORTS)
        printf("FAIL %s %s, %s: wrote %s outside its rows/columns\n", table, st->op, shape,
               what);
    return 0;
}

/* ---- the additive family -------------------------------------------------- */

/* One problem: inputs for T = t0 + n tokens, the initial state, and what
 * the ops read from the head. */
typedef struct {
    int64_t dk, dv, n, chunk, t0, T;
    la_gate gate;
    int head_gate; /* TOKEN with g_ts = 0 (how the driver passes a HEAD gate) */
    linattn_phi phi;
    int norm;
    const float *q, *k, *v, *g;
    int64_t q_ts, k_ts, v_ts, o_ts, g_ts;
    const float *s0, *z0;
    char name[160];
} add_case;

static la_head head_of(const add_case *c, float *o, float *s, float *z)
{
    return (la_head){
        .T = c->T,
        .dk = c->dk,
        .dv = c->dv,
        .q = c->q,
        .k = c->k,
        .v = c->v,
        .g = c->gate == LA_GATE_NONE ? NULL : c->g,
        .o = o,
        .q_ts = c->q_ts,
        .k_ts = c->k_ts,
        .v_ts = c->v_ts,
        .g_ts = c->g_ts,
        .o_ts = c->o_ts,
        .s = s,
        .z = c->norm ? z : NULL,
        .scale = 0.75f,
        .eps = 1e-6f,
        .phi = c->phi,
        .gate = c->gate,
        .chunk = c->chunk,
    };
}

enum { OP_OUTPUT, OP_STATE, OP_COMBINE, OP_TOKEN, OP_NONCAUSAL, N_ADD_OPS };
static const char *const add_op_names[] = {"chunk_pack+chunk_output", "chunk_pack+chunk_state",
                                           "state_combine", "token",
                                           "noncausal_state+noncausal_output"};

/* One table's buffers for one shape, allocated once and refilled for
 * every gate, phi and normaliser (mapping them per call costs more than
 * the ops). */
typedef struct {
    arena mem;
    void *pack1, *pack2;
    size_t pack_bytes;
    float *o, *u, *uz, *s, *z, *u_in, *uz_in; /* chunk ops */
    float *ot, *st, *zt, *zc;                /* token */
    float *on, *sn, *zn;                     /* the non-causal passes */
} add_bufs;

static void add_bufs_make(add_bufs *b, const la_additive_ops *ops, const add_case *c)
{
    const size_t no = (size_t)(c->T * c->o_ts), ns = (size_t)(c->dk * c->dv), nz = (size_t)c->dk;
    memset(b, 0, sizeof *b);
    arena *a = &b->mem;
    const size_t pack = la_size_up64(ops->pack_bytes(c->chunk, c->dk, c->dv));
    b->pack1 = guarded_bytes(a, pack), b->pack2 = guarded_bytes(a, pack);
    b->pack_bytes = pack;
    b->o = guarded(a, no, 0), b->ot = guarded(a, no, 0), b->on = guarded(a, no, 0);
    b->u = guarded(a, ns, 1), b->u_in = guarded(a, ns, 1);
    b->uz = guarded(a, nz, 1), b->uz_in = guarded(a, nz, 1), b->zc = guarded(a, nz, 1);
    b->s = guarded(a, ns, 0), b->st = guarded(a, ns, 0), b->sn = guarded(a, ns, 0);
    b->z = guarded(a, nz, 0), b->zt = guarded(a, nz, 0), b->zn = guarded(a, nz, 0);
}

static void fill(float *x, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        x[i] = value;
}

/* Runs every op of `ops` on c, into b. */
static void run_additive(const la_additive_ops *ops, const add_case *c, add_bufs *b)
{
    const int64_t dk = c->dk, dv = c->dv, T = c->T;
    const size_t no = (size_t)(T * c->o_ts), ns = (size_t)(dk * dv), nz = (size_t)dk;

    /* chunk_pack + chunk_output, from the state before the chunk; the
     * packs poisoned, so that a lane read before it is written shows */
    fill(b->pack1, b->pack_bytes / sizeof(float), NAN);
    fill(b->pack2, b->pack_bytes / sizeof(float), NAN);
    fill(b->o, no, UNTOUCHED);
    la_head h = head_of(c, b->o, NULL, NULL);
    ops->chunk_pack(&h, c->t0, c->n, b->pack1);
    ops->chunk_output(&h, b->pack1, c->t0, c->n, c->s0, c->norm ? c->z0 : NULL);

    /* chunk_pack + chunk_state + state_combine, on a pack of their own */
    fill(b->u, ns, UNTOUCHED);
    fill(b->uz, nz, UNTOUCHED);
    memcpy(b->s, c->s0, ns * sizeof(float));
    memcpy(b->z, c->z0, nz * sizeof(float));
    h = head_of(c, b->o, b->s, b->z);
    ops->chunk_pack(&h, c->t0, c->n, b->pack2);
    ops->chunk_state(&h, b->pack2, c->t0, c->n, b->u, c->norm ? b->uz : NULL);
    memcpy(b->u_in, b->u, ns * sizeof(float));
    memcpy(b->uz_in, b->uz, nz * sizeof(float));
    ops->state_combine(&h, b->pack2, c->n, b->s, c->norm ? b->z : NULL, b->u_in,
                       c->norm ? b->uz_in : NULL);

    /* token: the n tokens from t0, carrying the state; the Kahan
     * compensation of z (the recurrent forward) on every other shape */
    fill(b->ot, no, UNTOUCHED);
    memcpy(b->st, c->s0, ns * sizeof(float));
    memcpy(b->zt, c->z0, nz * sizeof(float));
    h = head_of(c, b->ot, b->st, b->zt);
    if (c->norm && (dk + dv + c->n) % 2 == 0) {
        memset(b->zc, 0, nz * sizeof(float));
        h.zc = b->zc;
    }
    for (int64_t t = c->t0; t < T; t++)
        ops->token(&h, c->q + t * c->q_ts, c->k + t * c->k_ts, c->v + t * c->v_ts,
                   c->gate == LA_GATE_NONE ? NULL : c->g + t * c->g_ts, b->ot + t * c->o_ts);

    /* the non-causal passes: gate NONE, all T tokens in one block, or in
     * blocks of 2, 7 and the rest (sums regrouped where a table blocks its
     * tokens: compared with the scalar table within the tolerance) */
    if (c->gate == LA_GATE_NONE) {
        fill(b->on, no, UNTOUCHED);
        memcpy(b->sn, c->s0, ns * sizeof(float));
        memcpy(b->zn, c->z0, nz * sizeof(float));
        h = head_of(c, b->on, b->sn, b->zn);
        if (T % 3 == 0) {
            ops->noncausal_state(&h);
            ops->noncausal_output(&h);
        } else {
            const int64_t cut[] = {0, T < 2 ? T : 2, T < 9 ? T : 9, T};
            for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < 3; i++) {
                    la_head blk = h;
                    blk.q += cut[i] * blk.q_ts, blk.k += cut[i] * blk.k_ts;
                    blk.v += cut[i] * blk.v_ts, blk.o += cut[i] * blk.o_ts;
                    blk.T = cut[i + 1] - cut[i];
                    if (blk.T > 0)
                        (pass ? ops->noncausal_output : ops->noncausal_state)(&blk);
                }
        }
    }
}

static void compare_additive(const la_table *t, const add_case *c, const add_bufs *x,
                             const add_bufs *ref, op_stat st[])
{
    const int64_t dk = c->dk, dv = c->dv, n = c->n, t0 = c->t0, ots = c->o_ts;
    const char *tn = t->name, *sh = c->name;
    /* rows t0.. of o; the rows before and the padding must stay untouched */
    st[OP_OUTPUT].cases++;
    compare(&st[OP_OUTPUT], tn, sh, "o", x->o + t0 * ots, ots, ref->o + t0 * ots, ots, n, dv);
    untouched(&st[OP_OUTPUT], tn, sh, "o", x->o, ref->o, (size_t)(t0 * ots));
    for (int64_t i = t0; i < c->T; i++)
        untouched(&st[OP_OUTPUT], tn, sh, "o padding", x->o + i * ots + dv, ref->o + i * ots + dv,
                  (size_t)(ots - dv));

    st[OP_STATE].cases++;
    compare(&st[OP_STATE], tn, sh, "u", x->u, dv, ref->u, dv, dk, dv);
    if (c->norm)
        compare(&st[OP_STATE], tn, sh, "uz", x->uz, dk, ref->uz, dk, 1, dk);
    else
        untouched(&st[OP_STATE], tn, sh, "uz (not normalising)", x->uz, ref->uz, (size_t)dk);

    st[OP_COMBINE].cases++;
    compare(&st[OP_COMBINE], tn, sh, "s", x->s, dv, ref->s, dv, dk, dv);
    if (c->norm)
        compare(&st[OP_COMBINE], tn, sh, "z", x->z, dk, ref->z, dk, 1, dk);
    else
        untouched(&st[OP_COMBINE], tn, sh, "z (not normalising)", x->z, c->z0, (size_t)dk);

    st[OP_TOKEN].cases++;
    compare(&st[OP_TOKEN], tn, sh, "o", x->ot + t0 * ots, ots, ref->ot + t0 * ots, ots, n, dv);
    compare(&st[OP_TOKEN], tn, sh, "s", x->st, dv, ref->st, dv, dk, dv);
    if (c->norm)
        compare(&st[OP_TOKEN], tn, sh, "z", x->zt, dk, ref->zt, dk, 1, dk);
    untouched(&st[OP_TOKEN], tn, sh, "o", x->ot, ref->ot, (size_t)(t0 * ots));

    if (c->gate == LA_GATE_NONE) {
        st[OP_NONCAUSAL].cases++;
        compare(&st[OP_NONCAUSAL], tn, sh, "o", x->on, ots, ref->on, ots, c->T, dv);
        compare(&st[OP_NONCAUSAL], tn, sh, "s", x->sn, dv, ref->sn, dv, dk, dv);
        if (c->norm)
            compare(&st[OP_NONCAUSAL], tn, sh, "z", x->zn, dk, ref->zn, dk, 1, dk);
    }
}

/* ---- tables under test, and where a crash happened ---------------------- */

/* delta forms tested: recurrent, chunked, recurrent_vfirst, and the two
 * recurrent ones on a bfloat16 state (run_delta) */
enum { N_DELTA_FORMS = 5 };

typedef struct {
    const la_table *t;
    op_stat add[N_ADD_OPS], delta[N_DELTA_FORMS], size, transpose[2];
} table_run;

static table_run runs[16];
static int nruns;

/* What runs now, printed if an op crashes (a fault past a guard page). */
static char current[320];

static void on_fault(int sig)
{
    static const char head[] = "CRASH in ";
    if (write(STDOUT_FILENO, head, sizeof head - 1) < 0 ||
        write(STDOUT_FILENO, current, strlen(current)) < 0 || write(STDOUT_FILENO, "\n", 1) < 0)
        _exit(1);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Every shape x gate x phi x normaliser: the scalar op once, then every
 * table that provides the op. The scalar table's additive ops are the
 * reference (the kernels suite checks them against the double oracle); here
 * they still run on guarded buffers. */
static void additive_all(void)
{
    const la_additive_ops *ref_ops = scalar->additive;
    for (int id = 0; id < NDIMS; id += dim_step)
        for (int iv = 0; iv < NDIMS; iv += dim_step)
            for (int in = 0; in < NROWS; in++) {
                arena inputs = {0};
                add_case c = {.dk = dims[id], .dv = dims[iv], .n = rows[in], .t0 = 2};
                const int64_t dk = c.dk, dv = c.dv;
                /* a last chunk shorter than the chunk size on some shapes */
                c.chunk = c.n + c.n % 3;
                c.T = c.t0 + c.n;
                c.q_ts = dk, c.k_ts = dk + 3, c.v_ts = dv, c.o_ts = dv + 1;
                const float *q_any = filled(&inputs, (size_t)(c.T * c.q_ts), -1, 1);
                const float *k_any = filled(&inputs, (size_t)(c.T * c.k_ts), -1, 1);
                /* identity features with a normaliser: q, k >= 0 so the
                 * denominator cannot cancel to ~0 (an ill-posed comparison) */
                const float *q_pos = filled(&inputs, (size_t)(c.T * c.q_ts), 0, 1);
                const float *k_pos = filled(&inputs, (size_t)(c.T * c.k_ts), 0, 1);
                c.v = filled(&inputs, (size_t)(c.T * c.v_ts), -1, 1);
                c.g = filled(&inputs, (size_t)(c.T * dk), -1, 0);
                c.s0 = filled(&inputs, (size_t)(dk * dv), -1, 1);
                c.z0 = filled(&inputs, (size_t)dk, 0, 2);
                add_bufs ref, bufs[16];
                add_bufs_make(&ref, ref_ops, &c);
                for (int r = 0; r < nruns; r++)
                    if (runs[r].t->additive && runs[r].t != scalar)
                        add_bufs_make(&bufs[r], runs[r].t->additive, &c);

                for (int gate = 0; gate < 4; gate++)
                    for (int phi = 0; phi < 3; phi++)
                        for (int norm = 0; norm <= 1; norm++) {
                            c.gate = gate == 3 ? LA_GATE_TOKEN : (la_gate)gate;
                            c.head_gate = gate == 3;
                            c.g_ts = c.head_gate ? 0 : c.gate == LA_GATE_CHANNEL ? dk : 1;
                            c.phi = (linattn_phi)phi;
                            c.norm = norm;
                            const int pos = norm && c.phi == LINATTN_PHI_IDENTITY;
                            c.q = pos ? q_pos : q_any;
                            c.k = pos ? k_pos : k_any;
                            snprintf(c.name, sizeof c.name,
                                     "dk=%lld dv=%lld n=%lld chunk=%lld t0=%lld gate=%s%s "
                                     "phi=%s z=%d",
                                     (long long)dk, (long long)dv, (long long)c.n,
                                     (long long)c.chunk, (long long)c.t0, gate_names[c.gate],
                                     c.head_gate ? " (per head, g_ts=0)" : "", phi_names[phi],
                                     norm);
                            snprintf(current, sizeof current, "scalar additive ops, %s", c.name);
                            run_additive(ref_ops, &c, &ref);
                            for (int r = 0; r < nruns; r++) {
                                const la_table *t = runs[r].t;
                                if (!t->additive || t == scalar)
                                    continue;
                                snprintf(current, sizeof current, "%s additive ops, %s", t->name,
                                         c.name);
                                run_additive(t->additive, &c, &bufs[r]);
                                compare_additive(t, &c, &bufs[r], &ref, runs[r].add);
                            }
                        }
                for (int r = 0; r < nruns; r++)
                    if (runs[r].t->additive && runs[r].t != scalar)
                        arena_free(&bufs[r].mem);
                arena_free(&ref.mem);
                arena_free(&inputs);
            }
}

/* ---- the delta family ----------------------------------------------------- */

typedef struct {
    int64_t dk, dv, T, chunk, j0, nj;
    la_gate gate;
    int head_gate;
    linattn_phi phi;
    const float *q, *k, *v, *g, *beta, *s0;
    int64_t q_ts, k_ts, v_ts, o_ts, g_ts;
    char name[200];
} delta_case;

static la_head delta_head_of(const delta_case *c, float *o, float *s)
{
    return (la_head){
        .T = c->T,
        .dk = c->dk,
        .dv = c->dv,
        .q = c->q,
        .k = c->k,
        .v = c->v,
        .g = c->gate == LA_GATE_NONE ? NULL : c->g,
        .beta = c->beta,
        .o = o,
        .q_ts = c->q_ts,
        .k_ts = c->k_ts,
        .v_ts = c->v_ts,
        .g_ts = c->g_ts,
        .beta_ts = 1,
        .o_ts = c->o_ts,
        .s = s,
        .scale = 0.75f,
        .phi = c->phi,
        .gate = c->gate,
        .chunk = c->chunk,
    };
}

/* Buffers of one table for one delta shape: workspaces for the tile, o
 * and s. */
typedef struct {
    arena mem;
    void *ws[2]; /* recurrent (and recurrent_vfirst), chunked */
    size_t ws_bytes[2];
    float *o, *s, *sv; /* sv: the state V-first, for recurrent_vfirst */
    uint16_t *s16;     /* a bfloat16 state, K-first or V-first */
} delta_bufs;

static void delta_bufs_make(delta_bufs *b, const la_delta_ops *ops, const delta_case *c,
                            int64_t nj)
{
    memset(b, 0, sizeof *b);
    b->ws_bytes[0] = la_size_up64(ops->recurrent_bytes(c->T, c->dk, nj));
    b->ws_bytes[1] = la_size_up64(ops->chunked_bytes(c->chunk, c->dk, nj));
    b->ws[0] = guarded_bytes(&b->mem, b->ws_bytes[0]);
    b->ws[1] = guarded_bytes(&b->mem, b->ws_bytes[1]);
    b->o = guarded(&b->mem, (size_t)(c->T * c->o_ts), 0);
    b->s = guarded(&b->mem, (size_t)(c->dk * c->dv), 0);
    b->sv = guarded(&b->mem, (size_t)(c->dk * c->dv), 0);
    b->s16 = guarded_bytes(&b->mem, (size_t)(c->dk * c->dv) * sizeof(uint16_t));
}

/* chunked 0: recurrent, 1: chunked, 2: recurrent_vfirst (on a V-first copy
 * of the state, turned back to K-first for the comparison), 3 and 4: the
 * recurrent forms on a bfloat16 state, K-first and V-first (one-token
 * calls: the state is rounded once per token; c->s0 holds bfloat16
 * values), widened back into s; on columns [j0, j0 + nj) */
static void run_delta(const la_delta_ops *ops, const delta_case *c, int chunked, int64_t j0,
                      int64_t nj, delta_bufs *b)
{
    fill(b->o, (size_t)(c->T * c->o_ts), UNTOUCHED);
    memcpy(b->s, c->s0, (size_t)(c->dk * c->dv) * sizeof(float));
    for (int i = 0; i < 2; i++) /* a lane read before it is written shows */
        fill(b->ws[i], b->ws_bytes[i] / sizeof(float), NAN);
    la_head h = delta_head_of(c, b->o, b->s);
    const int64_t dk = c->dk, dv = c->dv;
    if (chunked >= 3) {
        const int vfirst = chunked == 4;
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++)
                b->s16[vfirst ? j * dk + i : i * dv + j] = la_f32_to_bf16(c->s0[i * dv + j]);
        h.s = NULL, h.s_bf16 = b->s16, h.s_vld = vfirst ? dk : 0;
        if (vfirst)
            ops->recurrent_vfirst(&h, j0, nj, b->ws[0]);
        else
            ops->recurrent(&h, j0, nj, b->ws[0]);
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++)
                b->s[i * dv + j] = la_bf16_to_f32(b->s16[vfirst ? j * dk + i : i * dv + j]);
    } else if (chunked == 2) {
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++)
                b->sv[j * dk + i] = b->s[i * dv + j];
        h.s = b->sv, h.s_vld = dk;
        ops->recurrent_vfirst(&h, j0, nj, b->ws[0]);
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++)
                b->s[i * dv + j] = b->sv[j * dk + i];
    } else if (chunked) {
        ops->chunked(&h, j0, nj, b->ws[1]);
    } else {
        ops->recurrent(&h, j0, nj, b->ws[0]);
    }
}

/* One unit in the last place of a bfloat16 holding x. */
static double bf16_ulp(double x)
{
    int e;
    frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1: 8 significant bits */
    return ldexp(1.0, e - 8);
}

/* A bfloat16 state against the float reference: each element within one
 * unit in its last place of the reference, plus the float comparison's
 * tolerance (the table's sums round differently from the reference's, so
 * a value may round the other way, and a sum that cancels to near zero
 * differs by more than the bfloat16 units of its tiny result). */
static void compare_bf16(op_stat *st, const char *table, const char *shape, const float *x,
                         const float *ref, int64_t ld, int64_t nrows, int64_t j0, int64_t nj)
{
    double scale = 1.0;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t j = j0; j < j0 + nj; j++)
            scale = fabs((double)ref[r * ld + j]) > scale ? fabs((double)ref[r * ld + j]) : scale;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t j = j0; j < j0 + nj; j++) {
            const double got = x[r * ld + j], want = ref[r * ld + j];
            if (fabs(got - want) <= bf16_ulp(want) + LA_TOL_OP * scale)
                continue;
            if (st->failed++ < MAX_REPORTS)
                printf("FAIL %s %s, %s: s[%lld][%lld] is %a, the reference %a\n", table, st->op,
                       shape, (long long)r, (long long)j, got, want);
            return;
        }
}

static void compare_delta(const la_table *t, const delta_case *c, const delta_bufs *x,
                          const delta_bufs *ref, int bf16, op_stat *os)
{
    const int64_t dk = c->dk, dv = c->dv, T = c->T, j0 = c->j0, nj = c->nj, ots = c->o_ts;
    os->cases++;
    compare(os, t->name, c->name, "o", x->o + j0, ots, ref->o + j0, ots, T, nj);
    if (bf16)
        compare_bf16(os, t->name, c->name, x->s, ref->s, dv, dk, j0, nj);
    else
        compare(os, t->name, c->name, "s", x->s + j0, dv, ref->s + j0, dv, dk, nj);
    /* other columns of o and s: never written */
    int clean = 1;
    for (int64_t r = 0; r < T; r++)
        for (int64_t j = 0; j < ots; j++)
            if ((j < j0 || j >= j0 + nj) && x->o[r * ots + j] != UNTOUCHED)
                clean = 0;
    for (int64_t r = 0; r < dk; r++)
        for (int64_t j = 0; j < dv; j++)
            if ((j < j0 || j >= j0 + nj) &&
                memcmp(&x->s[r * dv + j], &c->s0[r * dv + j], sizeof(float)) != 0)
                clean = 0;
    if (!clean && os->failed++ < MAX_REPORTS)
        printf("FAIL %s %s, %s: wrote columns outside its tile\n", t->name, os->op, c->name);
}

/* Every shape x gate x features, both algorithms: the scalar op over the
 * whole width, then every table that provides the op (scalar included) on
 * a tile that does not start at column 0 and has an odd width. */
static void delta_all(void)
{
    const la_delta_ops *ref_ops = scalar->delta;
    for (int id = 0; id < NDIMS; id += dim_step)
        for (int iv = 0; iv < NDIMS; iv += dim_step)
            for (int in = 0; in < NROWS; in++) {
                arena inputs = {0};
                delta_case c = {.dk = dims[id], .dv = dims[iv], .T = rows[in]};
                const int64_t dk = c.dk, dv = c.dv, T = c.T;
                c.j0 = dv / 3;
                c.nj = (dv - c.j0) % 2 ? dv - c.j0 : dv - c.j0 - 1;
                c.chunk = T / 2 + 1; /* several chunks, the last one short */
                c.q_ts = dk, c.k_ts = dk + 3, c.v_ts = dv, c.o_ts = dv + 1;
                c.q = filled(&inputs, (size_t)(T * c.q_ts), -1, 1);
                /* keys of norm <= 1 keep the rule stable; elu+1 is e^k
                 * below 0, so keys in [-8, -3] give features of norm
                 * <= 0.05 sqrt(dk) */
                const float bound = 1.0f / sqrtf((float)dk);
                const float *k_small = filled(&inputs, (size_t)(T * c.k_ts), -bound, bound);
                const float *k_neg = filled(&inputs, (size_t)(T * c.k_ts), -8, -3);
                c.v = filled(&inputs, (size_t)(T * c.v_ts), -1, 1);
                c.g = filled(&inputs, (size_t)(T * dk), -1, 0);
                c.beta = filled(&inputs, (size_t)T, 0, 2);
                float *s0 = filled(&inputs, (size_t)(dk * dv), -1, 1);
                if (T == 1) /* the bfloat16 state forms start from it exactly */
                    for (int64_t e = 0; e < dk * dv; e++)
                        s0[e] = la_bf16_to_f32(la_f32_to_bf16(s0[e]));
                c.s0 = s0;
                delta_bufs ref, bufs[16];
                delta_bufs_make(&ref, ref_ops, &c, dv);
                for (int r = 0; r < nruns; r++)
                    if (runs[r].t->delta)
                        delta_bufs_make(&bufs[r], runs[r].t->delta, &c, c.nj);

                for (int gate = 0; gate < 4; gate++)
                    for (int variant = 0; variant < 3; variant++)
                        for (int chunked = 0; chunked < N_DELTA_FORMS; chunked++) {
                            if (chunked >= 3 && T != 1) /* bfloat16 states: one-token calls */
                                continue;
                            c.gate = gate == 3 ? LA_GATE_TOKEN : (la_gate)gate;
                            c.head_gate = gate == 3;
                            c.g_ts = c.head_gate ? 0 : c.gate == LA_GATE_CHANNEL ? dk : 1;
                            /* each phi on small keys (unit norms are the input
                             * stage's, tested on their own) */
                            c.phi = (linattn_phi)variant;
                            c.k = c.phi == LINATTN_PHI_ELU1 ? k_neg : k_small;
                            char algo[48] = "recurrent";
                            if (chunked >= 3)
                                snprintf(algo, sizeof algo, "%s, bf16 state",
                                         chunked == 4 ? "recurrent_vfirst" : "recurrent");
                            else if (chunked == 2)
                                snprintf(algo, sizeof algo, "recurrent_vfirst");
                            else if (chunked)
                                snprintf(algo, sizeof algo, "chunked chunk=%lld",
                                         (long long)c.chunk);
                            snprintf(c.name, sizeof c.name,
                                     "%s dk=%lld dv=%lld T=%lld columns [%lld, %lld) gate=%s%s "
                                     "phi=%s",
                                     algo, (long long)dk, (long long)dv, (long long)T,
                                     (long long)c.j0, (long long)(c.j0 + c.nj),
                                     gate_names[c.gate], c.head_gate ? " (per head, g_ts=0)" : "",
                                     phi_names[c.phi]);
                            snprintf(current, sizeof current, "scalar delta ops, %s", c.name);
                            /* V-first against the scalar K-first recurrent op */
                            run_delta(ref_ops, &c, chunked == 1, 0, dv, &ref);
                            for (int r = 0; r < nruns; r++) {
                                const la_table *t = runs[r].t;
                                if (!t->delta)
                                    continue;
                                snprintf(current, sizeof current, "%s delta ops, %s", t->name,
                                         c.name);
                                run_delta(t->delta, &c, chunked, c.j0, c.nj, &bufs[r]);
                                compare_delta(t, &c, &bufs[r], &ref, chunked >= 3,
                                              &runs[r].delta[chunked]);
                            }
                        }
                for (int r = 0; r < nruns; r++)
                    if (runs[r].t->delta)
                        arena_free(&bufs[r].mem);
                arena_free(&ref.mem);
                arena_free(&inputs);
            }
}

/* ---- the stage's transposes (V-first pool <-> K-first tile) ------------------- */

static uint32_t rand_bits32(void)
{
    const uint32_t a = (uint32_t)rand_uniform(0.0f, 65536.0f) & 0xffffu;
    return a << 16 | ((uint32_t)rand_uniform(0.0f, 65536.0f) & 0xffffu);
}

/* Floats for a transpose: any bit pattern (NaN, infinities, subnormals,
 * -0), bfloat16 ties, ordinary values. */
static float transpose_value(int64_t i)
{
    const uint32_t r = rand_bits32();
    switch (i % 4) {
    case 0: return la_bits_f32(r);
    case 1: return la_bits_f32((r & 0xffff0000u) | 0x8000u);
    default: return rand_uniform(-2.0f, 2.0f);
    }
}

/* Element e of a buffer of type t (bfloat16 or float) as its bits. */
static uint32_t bits_at(linattn_dtype t, const void *p, int64_t e)
{
    return t == LINATTN_BF16 ? ((const uint16_t *)p)[e] : la_f32_bits(((const float *)p)[e]);
}

/* Every table's transpose_in and transpose_out against their definition,
 * y[c * ldy + r] = x[r * ldx + c], bitwise (moves, exact widening and
 * half.h's rounding to nearest even, NaN included): rows and columns
 * around every vector width, rows padded (ldx > cols, ldy > rows) or not,
 * starts at odd elements, float32 and bfloat16. x ends at a guard page and
 * y's elements outside the rows x cols block (its row padding included)
 * must keep their marker. */
static void transpose_all(void)
{
    static const int64_t sizes[] = {1,  2,  3,  4,  5,  7,  8,  9,  15,
                                    16, 17, 31, 32, 33, 63, 64, 65, 129};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    for (int ir = 0; ir < NS; ir += dim_step)
        for (int ic = 0; ic < NS; ic += dim_step)
            for (int variant = 0; variant < 8; variant++) {
                const int64_t rows = sizes[ir], cols = sizes[ic];
                const int pad = variant & 1, out = (variant >> 1) & 1, bf = variant >> 2;
                const linattn_dtype t = bf ? LINATTN_BF16 : LINATTN_F32;
                /* in: x is the state (type t), y the float tile; out: reverse */
                const size_t xes = out || !bf ? sizeof(float) : 2;
                const size_t yes = out && bf ? 2 : sizeof(float);
                const int64_t ldx = cols + (pad ? 3 : 0), ldy = rows + (pad ? 5 : 0);
                const int64_t nx = (rows - 1) * ldx + cols, ny = (cols - 1) * ldy + rows;
                arena mem = {0};
                /* x and y end at their guard pages, so their starts
                 * (and rows) are mostly unaligned */
                void *x = guarded_end(&mem, (size_t)nx * xes);
                for (int64_t e = 0; e < nx; e++) {
                    const float v = transpose_value(e);
                    if (xes == 2)
                        ((uint16_t *)x)[e] = (uint16_t)(la_f32_bits(v) >> 16);
                    else
                        ((float *)x)[e] = v;
                }
                void *want = guarded_bytes(&mem, (size_t)ny * yes);
                const linattn_dtype yt = out ? t : LINATTN_F32;
                for (int64_t e = 0; e < ny; e++) { /* markers */
                    if (yes == 2)
                        ((uint16_t *)want)[e] = 0xabcd;
                    else
                        ((float *)want)[e] = UNTOUCHED;
                }
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++) {
                        const int64_t xe = r * ldx + c, ye = c * ldy + r;
                        if (!out)
                            ((float *)want)[ye] = bf ? la_bf16_to_f32(((uint16_t *)x)[xe])
                                                     : ((float *)x)[xe];
                        else if (bf)
                            ((uint16_t *)want)[ye] = la_f32_to_bf16(((float *)x)[xe]);
                        else
                            ((float *)want)[ye] = ((float *)x)[xe];
                    }
                void *y = guarded_end(&mem, (size_t)ny * yes);
                char shape[160];
                snprintf(shape, sizeof shape, "%s %s rows=%lld cols=%lld ldx=%lld ldy=%lld",
                         out ? "out" : "in", bf ? "bf16" : "f32", (long long)rows,
                         (long long)cols, (long long)ldx, (long long)ldy);
                for (int ri = 0; ri < nruns; ri++) {
                    const la_table *tb = runs[ri].t;
                    op_stat *st = &runs[ri].transpose[out];
                    if (!tb->stage)
                        continue;
                    snprintf(current, sizeof current, "%s stage transpose_%s", tb->name, shape);
                    memcpy(y, want, (size_t)ny * yes);
                    for (int64_t r = 0; r < rows; r++) /* a stale tile must be overwritten */
                        for (int64_t c = 0; c < cols; c++) {
                            if (yes == 2)
                                ((uint16_t *)y)[c * ldy + r] = 0x1234;
                            else
                                ((float *)y)[c * ldy + r] = -1.0f;
                        }
                    if (out)
                        tb->stage->transpose_out(t, x, ldx, rows, cols, y, ldy);
                    else
                        tb->stage->transpose_in(t, x, ldx, rows, cols, y, ldy);
                    st->cases++;
                    for (int64_t e = 0; e < ny; e++)
                        if (bits_at(yt, y, e) != bits_at(yt, want, e)) {
                            if (st->failed++ < MAX_REPORTS)
                                printf("FAIL %s %s, %s: element %lld (row %lld, column %lld of "
                                       "y) is 0x%x, want 0x%x\n",
                                       tb->name, st->op, shape, (long long)e,
                                       (long long)(e / ldy), (long long)(e % ldy),
                                       (unsigned)bits_at(yt, y, e), (unsigned)bits_at(yt, want, e));
                            break;
                        }
                }
                arena_free(&mem);
            }
}

/* ---- size functions never wrap ---------------------------------------------- */

/* Byte counts from the size ops: monotone in every argument and at least
 * the features they must hold (q and k rows: chunk * dk * 8 bytes), or
 * SIZE_MAX. A wrapped product shows as a count that shrinks when an
 * argument doubles. */
static void size_ops(const la_table *t, op_stat *st)
{
    for (int fn = 0; fn < 3; fn++) {
        if (fn == 0 && !t->additive)
            continue;
        if (fn > 0 && !t->delta)
            continue;
        static const char *const names[] = {"pack_bytes", "delta chunked_bytes",
                                            "delta recurrent_bytes"};
        for (int e1 = 0; e1 <= 62; e1++) {
            size_t prev = 0;
            for (int e2 = 0; e2 <= 62; e2++) {
                const int64_t x = (int64_t)1 << e1, y = (int64_t)1 << e2;
                size_t b;
                double need; /* bytes the op must at least count */
                if (fn == 0) {
                    b = t->additive->pack_bytes(y, x, 64), need = 8.0 * (double)x * (double)y;
                } else if (fn == 1) {
                    b = t->delta->chunked_bytes(y, x, 64), need = 8.0 * (double)x * (double)y;
                } else {
                    b = t->delta->recurrent_bytes(1, x, y), need = 4.0 * (double)x;
                }
                st->cases++;
                const int ok = (b == SIZE_MAX || (double)b >= need) && b >= prev;
                if (!ok && st->failed++ < MAX_REPORTS)
                    printf("FAIL %s %s(%s = 2^%d, %s = 2^%d) = %zu: wrapped (needs >= %.3g, "
                           "previous %zu)\n",
                           t->name, names[fn], fn == 2 ? "dk" : "chunk", e2,
                           fn == 2 ? "nj" : "dk", e1, b, need, prev);
                prev = b > prev ? b : prev;
            }
        }
    }
}

/* ---- the test ------------------------------------------------------------- */

static void report(const la_table *t, const op_stat *st, int n)
{
    for (int i = 0; i < n; i++)
        if (st[i].cases)
            printf("%-12s %-24s %6ld cases, worst %.3g of the tolerance%s\n", t->name, st[i].op,
                   st[i].cases, st[i].worst, st[i].failed ? ", FAILED" : "");
}

/* One pass over the shapes for all tables: the scalar reference is
 * computed once per case. */
START_TEST(every_op_of_every_table)
{
    for (int r = 0; r < nruns; r++) {
        table_run *run = &runs[r];
        run->size = (op_stat){"size ops", 0, 0, 0};
        for (int i = 0; i < N_ADD_OPS; i++)
            run->add[i] = (op_stat){add_op_names[i], 0, 0, 0};
        run->delta[0] = (op_stat){"delta recurrent", 0, 0, 0};
        run->delta[1] = (op_stat){"delta chunked", 0, 0, 0};
        run->delta[2] = (op_stat){"delta recurrent_vfirst", 0, 0, 0};
        run->delta[3] = (op_stat){"delta recurrent bf16", 0, 0, 0};
        run->delta[4] = (op_stat){"delta vfirst bf16", 0, 0, 0};
        run->transpose[0] = (op_stat){"stage transpose_in", 0, 0, 0};
        run->transpose[1] = (op_stat){"stage transpose_out", 0, 0, 0};
        snprintf(current, sizeof current, "%s size ops", run->t->name);
        size_ops(run->t, &run->size);
    }
    additive_all();
    delta_all();
    transpose_all();

    long failed = 0;
    for (int r = 0; r < nruns; r++) {
        const table_run *run = &runs[r];
        const la_table *t = run->t;
        report(t, &run->size, 1);
        if (t == scalar)
            printf("%-12s additive ops: the reference\n", t->name);
        else if (t->additive)
            report(t, run->add, N_ADD_OPS);
        else
            printf("%-12s additive ops: not provided (the registry resolves a lower table's)\n",
                   t->name);
        if (t->delta)
            report(t, run->delta, N_DELTA_FORMS);
        else
            printf("%-12s delta ops: not provided (the registry resolves a lower table's)\n",
                   t->name);
        report(t, run->transpose, 2);
        failed += run->size.failed + run->transpose[0].failed + run->transpose[1].failed;
        for (int i = 0; i < N_DELTA_FORMS; i++)
            failed += run->delta[i].failed;
        for (int i = 0; i < N_ADD_OPS; i++)
            failed += run->add[i].failed;
    }
    fflush(stdout);
    ck_assert_msg(failed == 0, "%ld op comparisons failed (see the FAIL lines)", failed);
}
END_TEST

/* recurrent_vfirst of each table on columns [0, dv) in one call, and in
 * pieces cut at every offset modulo 4 and of every width up to 5 (the
 * kernels work on groups of columns, and threads cut a head where the plan
 * says): the same bits, o and state, for any cut. T = 40 crosses a block
 * of tokens; a bfloat16 state with T = 1. The last run reads the state
 * from another buffer (la_head.s_from) into one filled with NaN: the same
 * bits again, and the source unchanged. */
START_TEST(vfirst_any_split_same_bits)
{
    static const int64_t dks[] = {5, 17, 128}, Ts[] = {1, 3, 40};
    static const int64_t cuts[][6] = {{0, 23}, {0, 1, 6, 11, 12, 23}, {0, 2, 5, 9, 14, 23},
                                      {0, 3, 7, 8, 10, 23}};
    for (int r = 0; r < nruns; r++) {
        const la_table *t = runs[r].t;
        if (!t->delta)
            continue;
        for (size_t id = 0; id < sizeof dks / sizeof dks[0]; id++)
            for (size_t it = 0; it < sizeof Ts / sizeof Ts[0] + 1; it++)
                for (int gate = 0; gate < 3; gate++) {
                    const int bf16 = it == sizeof Ts / sizeof Ts[0];
                    const size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);
                    arena mem = {0};
                    const int64_t dk = dks[id], dv = 23, T = bf16 ? 1 : Ts[it];
                    delta_case c = {.dk = dk, .dv = dv, .T = T, .chunk = 1, .gate = (la_gate)gate,
                                    .phi = LINATTN_PHI_IDENTITY, .q_ts = dk, .k_ts = dk,
                                    .v_ts = dv, .o_ts = dv,
                                    .g_ts = gate == LA_GATE_CHANNEL ? dk : 1};
                    const float bound = 1.0f / sqrtf((float)dk);
                    c.q = filled(&mem, (size_t)(T * dk), -1, 1);
                    c.k = filled(&mem, (size_t)(T * dk), -bound, bound);
                    c.v = filled(&mem, (size_t)(T * dv), -1, 1);
                    c.g = filled(&mem, (size_t)(T * dk), -1, 0);
                    c.beta = filled(&mem, (size_t)T, 0, 2);
                    float *s0 = filled(&mem, (size_t)(dk * dv), -1, 1);
                    void *ws =
                        guarded_bytes(&mem, la_size_up64(t->delta->recurrent_bytes(T, dk, dv)));
                    float *o[5];
                    unsigned char *s[5], *from = guarded_bytes(&mem, (size_t)(dk * dv) * es);
                    for (int k = 0; k < 5; k++) {
                        o[k] = guarded(&mem, (size_t)(T * dv), 0);
                        s[k] = guarded_bytes(&mem, (size_t)(dk * dv) * es);
                        unsigned char *init = k == 4 ? from : s[k];
                        for (int64_t e = 0; e < dk * dv; e++)
                            if (bf16)
                                ((uint16_t *)init)[e] = la_f32_to_bf16(s0[e]);
                            else
                                ((float *)init)[e] = s0[e];
                        if (k == 4) /* NaN in every type */
                            memset(s[k], 0xff, (size_t)(dk * dv) * es);
                        la_head h = delta_head_of(&c, o[k], bf16 ? NULL : (float *)s[k]);
                        h.s_bf16 = bf16 ? (uint16_t *)s[k] : NULL;
                        h.s_vld = dk;
                        h.s_from = k == 4 ? from : NULL;
                        const int64_t *cut = cuts[k % 4 + (k == 4)];
                        for (int p = 0; p < 5 && cut[p] < dv; p++)
                            t->delta->recurrent_vfirst(&h, cut[p], cut[p + 1] - cut[p], ws);
                        ck_assert_msg(memcmp(o[k], o[0], (size_t)(T * dv) * sizeof(float)) == 0 &&
                                          memcmp(s[k], s[0], (size_t)(dk * dv) * es) == 0,
                                      "%s recurrent_vfirst dk=%lld T=%lld gate=%s%s: %s gives "
                                      "other bits than one call",
                                      t->name, (long long)dk, (long long)T, gate_names[gate],
                                      bf16 ? " bf16 state" : "",
                                      k == 4 ? "from another buffer" : "a cut");
                    }
                    for (int64_t e = 0; e < dk * dv; e++) /* the source: read, not written */
                        expect_msg(bf16 ? ((uint16_t *)from)[e] == la_f32_to_bf16(s0[e])
                                        : ((float *)from)[e] == s0[e],
                                   "%s recurrent_vfirst: s_from was written", t->name);
                    arena_free(&mem);
                }
    }
}
END_TEST

/* The additive token op of each table on columns [0, dv) in one call, and
 * on views of column pieces (la_head.s_ld: a step's columns shared over
 * threads), cut inside and at the edges of every register tile: the same
 * bits, o and state, for any cut. No normaliser (a split step has none). */
START_TEST(token_any_split_same_bits)
{
    static const int64_t dks[] = {5, 17, 128};
    static const int64_t cuts[][6] = {{0, 150}, {0, 1, 6, 11, 12, 150}, {0, 23, 128, 150},
                                      {0, 16, 144, 150}, {0, 64, 96, 150}};
    for (int r = 0; r < nruns; r++) {
        const la_table *t = runs[r].t;
        if (!t->additive)
            continue;
        for (size_t id = 0; id < sizeof dks / sizeof dks[0]; id++)
            for (int gate = 0; gate < 3; gate++) {
                arena mem = {0};
                const int64_t dk = dks[id], dv = 150, T = 3;
                add_case c = {.dk = dk, .dv = dv, .n = T, .T = T, .chunk = 1,
                              .gate = (la_gate)gate, .phi = (linattn_phi)(id % 3), .q_ts = dk,
                              .k_ts = dk, .v_ts = dv, .o_ts = dv,
                              .g_ts = gate == LA_GATE_CHANNEL ? dk : 1};
                c.q = filled(&mem, (size_t)(T * dk), -1, 1);
                c.k = filled(&mem, (size_t)(T * dk), -1, 1);
                c.v = filled(&mem, (size_t)(T * dv), -1, 1);
                c.g = filled(&mem, (size_t)(T * dk), -1, 0);
                const float *s0 = filled(&mem, (size_t)(dk * dv), -1, 1);
                float *o[5], *s[5];
                for (int k = 0; k < 5; k++) {
                    o[k] = guarded(&mem, (size_t)(T * dv), 0);
                    s[k] = guarded(&mem, (size_t)(dk * dv), 0);
                    memcpy(s[k], s0, (size_t)(dk * dv) * sizeof(float));
                    const int64_t *cut = cuts[k];
                    for (int64_t i = 0; i < T; i++)
                        for (int p = 0; p < 5 && cut[p] < dv; p++) {
                            la_head h = head_of(&c, o[k], s[k], NULL);
                            h.dv = cut[p + 1] - cut[p];
                            h.s = s[k] + cut[p];
                            h.s_ld = dv;
                            t->additive->token(&h, c.q + i * dk, c.k + i * dk,
                                               c.v + i * dv + cut[p],
                                               gate == LA_GATE_NONE ? NULL : c.g + i * c.g_ts,
                                               o[k] + i * dv + cut[p]);
                        }
                    ck_assert_msg(memcmp(o[k], o[0], (size_t)(T * dv) * sizeof(float)) == 0 &&
                                      memcmp(s[k], s[0], (size_t)(dk * dv) * sizeof(float)) == 0,
                                  "%s token dk=%lld gate=%s: cut %d gives other bits than one "
                                  "call",
                                  t->name, (long long)dk, gate_names[gate], k);
                }
                arena_free(&mem);
            }
    }
}
END_TEST

/* The additive token op of each table on a V-first state (token_vfirst:
 * value column j at j * ld, ld = dk + 3, the padding marked) against the
 * same table's K-first token op over T = 3 tokens carrying the state (one
 * for a bfloat16 state where the bits may differ: see below): o
 * and z to rounding (o sums along the key axis), the state to rounding,
 * and on avx512 (whose K-first op decays and updates each element the same
 * way) bit for bit; the padding kept, every row ending at a guard page.
 * Float and bfloat16 states; dk below, at and above a vector and the op's
 * panel of 256 keys; dv below and above its group of 4 columns; with and
 * without a normaliser (compensated or not). */
START_TEST(token_vfirst_matches_token)
{
    static const int64_t dks[] = {1, 5, 16, 17, 45, 64, 300}, dvs[] = {1, 3, 4, 7, 37};
    for (int r = 0; r < nruns; r++) {
        const la_table *t = runs[r].t;
        if (!t->additive)
            continue;
        const int same_bits = strncmp(t->name, "avx512", 6) == 0;
        long cases = 0;
        for (size_t id = 0; id < sizeof dks / sizeof dks[0]; id++)
            for (size_t iv = 0; iv < sizeof dvs / sizeof dvs[0]; iv++)
                for (int variant = 0; variant < 6; variant++) {
                    const int gate = variant % 3, bf16 = variant >= 3;
                    const int norm = (int)((id + iv + (size_t)variant) % 3); /* 2: compensated */
                    /* a bfloat16 element whose float differs in its last bit may
                     * round the other way, and the next token's o then differs by
                     * more than rounding: one token where the bits may differ */
                    const int64_t T = bf16 && !same_bits ? 1 : 3;
                    const int64_t dk = dks[id], dv = dvs[iv], ld = dk + 3;
                    const size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);
                    const linattn_phi phi = (linattn_phi)((id + iv) % 3);
                    /* identity features with a normaliser: q, k >= 0, so that the
                     * denominator cannot cancel (an ill-posed comparison) */
                    const float lo = norm && phi == LINATTN_PHI_IDENTITY ? 0.0f : -1.0f;
                    arena mem = {0};
                    add_case c = {.dk = dk, .dv = dv, .n = T, .T = T, .chunk = 1,
                                  .gate = (la_gate)gate, .phi = phi, .norm = norm != 0,
                                  .q_ts = dk, .k_ts = dk, .v_ts = dv, .o_ts = dv,
                                  .g_ts = gate == LA_GATE_CHANNEL ? dk : 1};
                    c.q = filled(&mem, (size_t)(T * dk), lo, 1);
                    c.k = filled(&mem, (size_t)(T * dk), lo, 1);
                    c.v = filled(&mem, (size_t)(T * dv), -1, 1);
                    c.g = filled(&mem, (size_t)(T * dk), -1, 0);
                    const float *s0 = filled(&mem, (size_t)(dk * dv), -1, 1);
                    const float *z0 = filled(&mem, (size_t)dk, 0, 1);
                    float *ok = guarded(&mem, (size_t)(T * dv), 0);
                    float *ov = guarded(&mem, (size_t)(T * dv), 0);
                    float *zk = guarded(&mem, (size_t)dk, 0), *zv = guarded(&mem, (size_t)dk, 0);
                    float *zck = guarded(&mem, (size_t)dk, 0);
                    float *zcv = guarded(&mem, (size_t)dk, 0);
                    unsigned char *sk = guarded_end(&mem, (size_t)(dk * dv) * es);
                    unsigned char *sv = guarded_end(&mem, (size_t)(dv * ld) * es);
                    for (int64_t i = 0; i < dk; i++)
                        for (int64_t j = 0; j < dv; j++) {
                            const float x = s0[i * dv + j];
                            if (bf16) {
                                ((uint16_t *)sk)[i * dv + j] = la_f32_to_bf16(x);
                                ((uint16_t *)sv)[j * ld + i] = la_f32_to_bf16(x);
                            } else {
                                ((float *)sk)[i * dv + j] = x;
                                ((float *)sv)[j * ld + i] = x;
                            }
                        }
                    for (int64_t j = 0; j < dv; j++)
                        for (int64_t i = dk; i < ld; i++)
                            if (bf16)
                                ((uint16_t *)sv)[j * ld + i] = la_f32_to_bf16(UNTOUCHED);
                            else
                                ((float *)sv)[j * ld + i] = UNTOUCHED;
                    memcpy(zk, z0, (size_t)dk * sizeof(float));
                    memcpy(zv, z0, (size_t)dk * sizeof(float));
                    memset(zck, 0, (size_t)dk * sizeof(float));
                    memset(zcv, 0, (size_t)dk * sizeof(float));
                    la_head hk = head_of(&c, ok, bf16 ? NULL : (float *)sk, zk);
                    la_head hv = head_of(&c, ov, bf16 ? NULL : (float *)sv, zv);
                    hk.s_bf16 = bf16 ? (uint16_t *)sk : NULL;
                    hv.s_bf16 = bf16 ? (uint16_t *)sv : NULL;
                    hv.s_vld = ld;
                    hk.zc = norm == 2 ? zck : NULL;
                    hv.zc = norm == 2 ? zcv : NULL;
                    for (int64_t i = 0; i < T; i++) {
                        const float *g = gate == LA_GATE_NONE ? NULL : c.g + i * c.g_ts;
                        t->additive->token(&hk, c.q + i * dk, c.k + i * dk, c.v + i * dv, g,
                                           ok + i * dv);
                        t->additive->token_vfirst(&hv, c.q + i * dk, c.k + i * dk,
                                                  c.v + i * dv, g, ov + i * dv);
                    }
                    char what[160];
                    snprintf(what, sizeof what, "%s token_vfirst dk=%lld dv=%lld gate=%s %s%s",
                             t->name, (long long)dk, (long long)dv, gate_names[gate],
                             bf16 ? "bf16 state" : "f32 state",
                             norm == 2 ? " z compensated" : norm ? " z" : "");
                    op_stat st = {"token_vfirst", 0, 0, 0};
                    ck_assert_msg(compare(&st, t->name, what, "o", ov, dv, ok, dv, T, dv),
                                  "%s: o differs from the K-first op's", what);
                    if (norm)
                        ck_assert_msg(compare(&st, t->name, what, "z", zv, dk, zk, dk, 1, dk),
                                      "%s: z differs from the K-first op's", what);
                    for (int64_t j = 0; j < dv; j++)
                        for (int64_t i = 0; i < ld; i++) {
                            const int64_t ev = j * ld + i, ek = i * dv + j;
                            const float a = bf16 ? la_bf16_to_f32(((uint16_t *)sv)[ev])
                                                 : ((float *)sv)[ev];
                            if (i >= dk) {
                                expect_msg(a == (bf16 ? la_bf16_to_f32(la_f32_to_bf16(
                                                            UNTOUCHED))
                                                      : UNTOUCHED),
                                           "%s: wrote the padding of column %lld", what,
                                           (long long)j);
                                continue;
                            }
                            const float b = bf16 ? la_bf16_to_f32(((uint16_t *)sk)[ek])
                                                 : ((float *)sk)[ek];
                            const double tol = bf16 ? fabs((double)b) / 128 + 1e-6
                                                    : LA_TOL_OP * fmax(1.0, fabs((double)b));
                            expect_msg(same_bits ? memcmp(&a, &b, sizeof a) == 0
                                                 : fabs((double)a - b) <= tol,
                                       "%s: S[%lld][%lld] = %a, K-first %a", what,
                                       (long long)i, (long long)j, (double)a, (double)b);
                        }
                    cases++;
                    arena_free(&mem);
                }
        printf("%-12s %-24s %6ld cases, against its own K-first token op%s\n", t->name,
               "token_vfirst", cases, same_bits ? " (the state bit for bit)" : "");
    }
}
END_TEST

/* Every table's tuning data (tuning.h), runnable here or not: a default
 * entry, each machine once, chunks of at least one row, thresholds a dk
 * can be compared with; and cpu.c's key for this CPU is one of the keys. */
START_TEST(tuning_entries)
{
    const la_uarch here = la_cpu_uarch();
    ck_assert((unsigned)here < LA_UARCH_COUNT);
    int ntables;
    const la_table *const *tables = la_all_tables(&ntables);
    for (int i = 0; i < ntables; i++) {
        const la_table *t = tables[i];
        ck_assert_msg(t->tuning != NULL && t->ntuning >= 1, "table %s: no tuning entry",
                      t->name);
        for (int e = 0; e < t->ntuning; e++) {
            const la_tuning *u = &t->tuning[e];
            for (int f = 0; f < e; f++)
                ck_assert_msg(t->tuning[f].uarch != u->uarch, "table %s: entries %d and %d "
                              "are for the same machine", t->name, f, e);
            ck_assert_msg(u->delta_pack_from_T >= 1 && u->additive_pack_from_T >= 1,
                          "table %s entry %d: a pack_from_T below 1 (left out of the entry?)",
                          t->name, e);
            ck_assert_msg(u->delta_pack_columns >= 0 && u->delta_step_columns >= 0,
                          "table %s entry %d: negative columns per tile", t->name, e);
            ck_assert_msg(u->delta_step_rows_bytes >= 0 && u->delta_vfirst_read_ahead >= 0,
                          "table %s entry %d: a negative byte count", t->name, e);
            ck_assert_msg(u->additive_fetch_tokens >= 0,
                          "table %s entry %d: fetching a negative number of tokens ahead",
                          t->name, e);
            for (int g = 0; g < LA_GATES; g++) {
                ck_assert_msg(u->additive_chunked_above_dk[g] >= 0 &&
                                  u->delta_chunked_above_dk[g] >= 0,
                              "table %s entry %d gate %d: negative threshold", t->name, e, g);
                ck_assert_msg(u->additive_quad_from_T[g] >= 4,
                              "table %s entry %d gate %d: quads from fewer than 4 tokens (left "
                              "out of the entry?)",
                              t->name, e, g);
                ck_assert_msg(u->delta_pair_from_T[g] >= 2,
                              "table %s entry %d gate %d: pairs from fewer than 2 tokens (left "
                              "out of the entry?)",
                              t->name, e, g);
                ck_assert_msg(u->delta_pair_below_T[g] == 0 ||
                                  u->delta_pair_below_T[g] > u->delta_pair_from_T[g],
                              "table %s entry %d gate %d: an empty range of paired lengths",
                              t->name, e, g);
                for (int r = 0; r < 2; r++)
                    ck_assert_msg(u->additive_chunk[r][g] >= 1 && u->delta_chunk[r][g] >= 1,
                                  "table %s entry %d gate %d: chunk below 1", t->name, e, g);
            }
        }
    }
}
END_TEST

/* The key's names: one each, distinct, and the public name of this CPU's
 * key; "unknown" outside the enum. The public call keeps the last error. */
START_TEST(uarch_names)
{
    for (int u = 0; u < LA_UARCH_COUNT; u++) {
        const char *name = la_uarch_name((la_uarch)u);
        ck_assert_msg(strcmp(name, "unknown") != 0, "key %d has no name", u);
        for (int w = 0; w < u; w++)
            ck_assert_msg(strcmp(name, la_uarch_name((la_uarch)w)) != 0,
                          "keys %d and %d are both named %s", w, u, name);
    }
    ck_assert_str_eq(la_uarch_name(LA_UARCH_COUNT), "unknown");
    ck_assert_str_eq(la_uarch_name((la_uarch)-1), "unknown");
    ck_assert_int_eq(linattn_step(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), LINATTN_E_NULL);
    char before[256];
    snprintf(before, sizeof before, "%s", linattn_last_error());
    const char *here = linattn_tuning_name();
    printf("tuning entries for: %s\n", here);
    ck_assert_str_eq(here, la_uarch_name(la_cpu_uarch()));
    ck_assert_str_eq(linattn_last_error(), before);
}
END_TEST

/* cpu.c's key of CPUs named by their CPUID vendor, family and model: Zen 1
 * to 4 to Zen 4's entries, Zen 5 and later families to Zen 5's (with or
 * without AVX-512: a table with no entry of its own for it takes its first,
 * Zen 4's), the families before Zen to none; Intel by whether AVX-512 is
 * usable. */
START_TEST(uarch_of_known_cpus)
{
    static const struct {
        const char *vendor;
        int family, model, avx512;
        la_uarch want;
        const char *name;
    } cpus[] = {
        {"AuthenticAMD", 0x16, 0x00, 0, LA_UARCH_OTHER, "Jaguar"},
        {"AuthenticAMD", 0x17, 0x01, 0, LA_UARCH_ZEN4, "Zen 1 (Naples)"},
        {"AuthenticAMD", 0x17, 0x31, 0, LA_UARCH_ZEN4, "Zen 2 (Rome)"},
        {"AuthenticAMD", 0x19, 0x01, 0, LA_UARCH_ZEN4, "Zen 3 (Milan)"},
        {"AuthenticAMD", 0x19, 0x11, 1, LA_UARCH_ZEN4, "Zen 4 (Genoa)"},
        {"AuthenticAMD", 0x19, 0x61, 0, LA_UARCH_ZEN4, "Zen 4 with AVX-512 hidden"},
        {"AuthenticAMD", 0x1a, 0x02, 1, LA_UARCH_ZEN5, "Zen 5 (Turin)"},
        {"AuthenticAMD", 0x1a, 0x44, 0, LA_UARCH_ZEN5, "Zen 5 with AVX-512 hidden"},
        {"AuthenticAMD", 0x1b, 0x00, 1, LA_UARCH_ZEN5, "a later AMD family"},
        {"GenuineIntel", 6, 143, 1, LA_UARCH_SAPPHIRE_RAPIDS, "Sapphire Rapids"},
        {"GenuineIntel", 6, 207, 1, LA_UARCH_SAPPHIRE_RAPIDS, "Emerald Rapids"},
        {"GenuineIntel", 6, 207, 0, LA_UARCH_OTHER, "Emerald Rapids, AVX-512 masked"},
        {"GenuineIntel", 6, 151, 0, LA_UARCH_OTHER, "Alder Lake"},
        {"GenuineIntel", 15, 4, 0, LA_UARCH_OTHER, "a Pentium 4 family"},
        {"CentaurHauls", 6, 15, 0, LA_UARCH_OTHER, "another vendor"},
    };
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++) {
        const la_uarch got =
            la_uarch_of(cpus[i].vendor, cpus[i].family, cpus[i].model, cpus[i].avx512);
        ck_assert_msg(got == cpus[i].want, "%s (%s family 0x%x model 0x%x): key %d, want %d",
                      cpus[i].name, cpus[i].vendor, cpus[i].family, cpus[i].model, (int)got,
                      (int)cpus[i].want);
    }
}
END_TEST

/* stage any_outside of each table against the plain rule: every length
 * up to and past two vectors of the widest table, arrays ending at a guard
 * page at every alignment, one bad value (NaN, infinities, just above hi,
 * a positive subnormal when hi = 0) at every position, and arrays whose
 * values sit on both bounds (-0.0, lo, hi) which must pass. */
START_TEST(any_outside_of_every_table)
{
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY, 1e-3f, 1e-40f, 3.0f};
    const float his[] = {0.0f, FLT_MAX, 2.0f};
    long cases = 0, failed = 0;
    for (int r = 0; r < nruns; r++) {
        const la_table *tb = runs[r].t;
        if (!tb->stage)
            continue;
        for (int hi_i = 0; hi_i < 3; hi_i++)
            for (int64_t n = 0; n <= 70; n++)
                for (int shift = 0; shift < 4; shift++) {
                    arena mem = {0};
                    const float lo = -FLT_MAX, hi = his[hi_i];
                    /* n floats shift bytes past an alignment, ending at the guard page */
                    unsigned char *at0 = guarded_end(&mem, (size_t)n * sizeof(float) + shift);
                    float *x = (float *)(void *)(at0 + shift);
                    for (int64_t i = 0; i < n; i++) /* on and within the bounds */
                        x[i] = i % 4 == 0 ? -0.0f : i % 4 == 1 ? lo : i % 4 == 2 ? hi : -1.5f;
                    snprintf(current, sizeof current, "%s stage any_outside n=%lld", tb->name,
                             (long long)n);
                    cases++;
                    if (tb->stage->any_outside(x, n, lo, hi) != 0 && failed++ < MAX_REPORTS)
                        printf("FAIL %s stage any_outside: n=%lld hi=%g, all within, says "
                               "outside\n",
                               tb->name, (long long)n, (double)hi);
                    for (int64_t at = 0; at < n; at++)
                        for (int b = 0; b < (int)(sizeof bad / sizeof bad[0]); b++) {
                            const float v = bad[b];
                            if (v >= lo && v <= hi) /* within for this hi */
                                continue;
                            const float keep = x[at];
                            x[at] = v;
                            cases++;
                            if (tb->stage->any_outside(x, n, lo, hi) == 0 &&
                                failed++ < MAX_REPORTS)
                                printf("FAIL %s stage any_outside: n=%lld hi=%g, x[%lld] = %g "
                                       "not found\n",
                                       tb->name, (long long)n, (double)hi, (long long)at,
                                       (double)v);
                            x[at] = keep;
                        }
                    arena_free(&mem);
                }
    }
    printf("stage any_outside: %ld cases over the tables, %ld failed\n", cases, failed);
    ck_assert_msg(failed == 0, "%ld any_outside cases failed (see the FAIL lines)", failed);
}
END_TEST

int main(void)
{
    test_seed();
    int ntables;
    const la_table *const *tables = la_all_tables(&ntables);
    const char *only = getenv("LINATTN_TEST_TABLE"); /* one table and the reference */
    const char *step = getenv("LINATTN_TEST_OPS_DIM_STEP");
    if (step && atoi(step) >= 1)
        dim_step = atoi(step);
    for (int i = 0; i < ntables; i++) {
        const la_table *t = tables[i];
        if (strcmp(t->name, "scalar") == 0)
            scalar = t;
        if (!la_table_runnable(t))
            printf("SKIP table %s: this CPU cannot run it\n", t->name);
        else if (only && *only && strcmp(only, t->name) != 0 && strcmp(t->name, "scalar") != 0)
            printf("SKIP table %s: LINATTN_TEST_TABLE=%s\n", t->name, only);
        else if (nruns < 16)
            runs[nruns++].t = t;
        else
            printf("SKIP table %s: more than 16 tables\n", t->name);
    }
    if (scalar == NULL) {
        printf("no scalar table in this build\n");
        return 1;
    }
    signal(SIGSEGV, on_fault);
    signal(SIGBUS, on_fault);
    printf("tolerance: max |x - scalar| <= %g * max(1, max |scalar|) per output\n", LA_TOL_OP);
    fflush(stdout);
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, every_op_of_every_table);
    tcase_add_test(tc, tuning_entries);
    tcase_add_test(tc, uarch_of_known_cpus);
    tcase_add_test(tc, uarch_names);
    tcase_add_test(tc, vfirst_any_split_same_bits);
    tcase_add_test(tc, token_any_split_same_bits);
    tcase_add_test(tc, token_vfirst_matches_token);
    tcase_add_test(tc, any_outside_of_every_table);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
