/* Checks of linattn_run and plans beyond la_check's (check.c): the operand
 * struct, packed sequences (cu_seqlens), the state pool (slot count,
 * strides, address ranges), the read, write and snapshot slots of every
 * sequence, and the overlap rules between sequences; then the values
 * (la_check_values), so that a call refused for any of these reads no
 * element of its arrays. Nothing is written before all of them pass;
 * every failure names the field, and the sequence or slot, in
 * linattn_last_error(). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ranges.h"
#include "serve.h"
#include "table.h"

/* ---- the operand struct ---------------------------------------------- */

/* The 0.3.0 layouts, which ended before the 0.4.0 fields. */
#define OPERANDS_V3_SIZE offsetof(linattn_operands, A_log)
#define CONFIG_V3_SIZE LA_CONFIG_V2_SIZEOF /* 0.2's layout (call.h) */

linattn_status la_run_args(const linattn_config *cfg, const linattn_operands *ops,
                           la_run_arg_copy *copy, const linattn_config **cfg_out,
                           const linattn_operands **ops_out)
{
    *cfg_out = cfg, *ops_out = ops;
    if (ops == NULL)
        return la_fail(LINATTN_E_NULL, "ops is NULL");
    if (cfg == NULL)
        return la_fail(LINATTN_E_NULL, "cfg is NULL");
    if (ops->struct_size != sizeof *ops && ops->struct_size != OPERANDS_V3_SIZE)
        return la_fail(LINATTN_E_ARG,
                       "ops->struct_size = %zu, expected %zu (or %zu for a 0.3 caller): fill "
                       "ops with linattn_operands_init",
                       ops->struct_size, sizeof *ops, (size_t)OPERANDS_V3_SIZE);
    if (cfg->struct_size != sizeof *cfg && !LA_IS_CONFIG_V2_SIZE(cfg->struct_size))
        return la_fail(LINATTN_E_ARG,
                       "cfg->struct_size = %zu, expected %zu (or %zu for a 0.3 caller): fill "
                       "cfg with linattn_config_init",
                       cfg->struct_size, sizeof *cfg, (size_t)CONFIG_V3_SIZE);
    /* an older caller's structs end early: the rest keeps the defaults */
    if (ops->struct_size != sizeof *ops) {
        linattn_operands_init(&copy->ops);
        memcpy(&copy->ops, ops, ops->struct_size);
        copy->ops.struct_size = sizeof copy->ops;
        *ops_out = &copy->ops;
    }
    if (cfg->struct_size != sizeof *cfg) {
        memset(&copy->cfg, 0, sizeof copy->cfg);
        memcpy(&copy->cfg, cfg, LA_CONFIG_V2_END); /* not the tail padding */
        copy->cfg.struct_size = sizeof copy->cfg;
        *cfg_out = &copy->cfg;
    }
    return LINATTN_OK;
}

linattn_status la_check_run_fields(linattn_op op, const linattn_config *cfg,
                                   const linattn_operands *ops)
{
    if (ops == NULL)
        return la_fail(LINATTN_E_NULL, "ops is NULL");
    if (ops->struct_size != sizeof *ops)
        return la_fail(LINATTN_E_ARG,
                       "ops->struct_size = %zu, expected %zu: fill ops with "
                       "linattn_operands_init",
                       ops->struct_size, sizeof *ops);
    if ((unsigned)op > LINATTN_OP_DELTA_STEP)
        return la_fail(LINATTN_E_ARG, "op = %d is not a linattn_op", (int)op);
    if (cfg == NULL)
        return la_fail(LINATTN_E_NULL, "cfg is NULL");
    if (cfg->struct_size != sizeof *cfg)
        return la_fail(LINATTN_E_ARG,
                       "cfg->struct_size = %zu, expected %zu: linattn_run takes the "
                       "config of this version; fill cfg with linattn_config_init",
                       cfg->struct_size, sizeof *cfg);
    if (ops->cu_seqlens == NULL && ops->num_seqs != 0)
        return la_fail(LINATTN_E_ARG,
                       "num_seqs = %lld but cu_seqlens is NULL: num_seqs counts packed sequences",
                       (long long)ops->num_seqs);
    return LINATTN_OK;
}

/* ---- the pool's memory ------------------------------------------------ */

/* Both present and sharing a byte. */
static int present_overlap(range a, range b) { return a.hi && b.hi && ranges_overlap(a, b); }

/* The pool (s, then z) against every array of the call. */
static linattn_status check_state_memory(const la_serve *sv)
{
    const la_call *c = &sv->c;
    const int64_t zd = c->dk * (1 + c->z_compensated);
    const layout ls = {4, {sv->slots, c->H, c->dk, c->dv},
                       {sv->s_slot, sv->s_head, sv->s_row, sv->s_col}};
    const layout lz = {3, {sv->slots, c->H, zd}, {sv->z_slot, sv->z_head, 1}};
    range s = {0, 0}, z = {0, 0};
    if (!range_of(sv->s, &ls, la_dtype_size(c->dt.s), &s))
        return la_fail(LINATTN_E_SHAPE,
                       "s: the pool's %lld slots and strides address more bytes than fit in memory",
                       (long long)sv->slots);
    if (self_overlaps(&ls))
        return la_fail(LINATTN_E_OVERLAP,
                       "s: the pool's strides (slot %lld, head %lld, row %lld, col %lld) do not "
                       "nest (sorted, each must step past what the smaller ones span), so two "
                       "(slot, head, row, column) may reach one element",
                       (long long)sv->s_slot, (long long)sv->s_head, (long long)sv->s_row,
                       (long long)sv->s_col);
    if (sv->z) {
        if (!range_of(sv->z, &lz, sizeof(float), &z))
            return la_fail(LINATTN_E_SHAPE,
                           "z: the pool's %lld slots and strides (z_slot %lld, z_head %lld) "
                           "address more bytes than fit in memory",
                           (long long)sv->slots, (long long)sv->z_slot, (long long)sv->z_head);
        if (self_overlaps(&lz))
            return la_fail(LINATTN_E_OVERLAP,
                           "z: the pool's z strides (slot %lld, head %lld) do not nest (a head "
                           "holds %lld floats), so two (slot, head) may reach one element",
                           (long long)sv->z_slot, (long long)sv->z_head, (long long)zd);
        if (present_overlap(s, z))
            return la_fail(LINATTN_E_OVERLAP, "s overlaps z in the pool");
    }
    const int64_t T = c->T;
    const struct {
        const char *name;
        const void *p;
        layout l;
        size_t elem;
    } arrays[] = {
        {"q", c->q, {4, {c->B, c->qk_heads, T, c->dk}, {c->sq.batch, c->sq.head, c->sq.token, 1}},
         la_dtype_size(c->dt.q)},
        {"k", c->k, {4, {c->B, c->qk_heads, T, c->dk}, {c->sk.batch, c->sk.head, c->sk.token, 1}},
         la_dtype_size(c->dt.k)},
        {"v", c->v, {4, {c->B, c->H, T, c->dv}, {c->sv.batch, c->sv.head, c->sv.token, 1}},
         la_dtype_size(c->dt.v)},
        {"o", c->o, {4, {c->B, c->H, T, c->dv}, {c->so.batch, c->so.head, c->so.token, 1}},
         la_dtype_size(c->dt.o)},
        {"g", c->g, {4, {c->B, c->H, T, c->gate == LA_GATE_CHANNEL ? c->dk : 1},
                     {c->sg.batch, c->sg.head, c->sg.token, 1}}, sizeof(float)},
        {"beta", c->beta, {3, {c->B, c->H, T}, {c->sbeta.batch, c->sbeta.head, c->sbeta.token}},
         la_dtype_size(c->dt.beta)},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        range a = {0, 0};
        if (arrays[i].p == NULL || !range_of(arrays[i].p, &arrays[i].l, arrays[i].elem, &a))
            continue; /* absent, or already rejected by la_check */
        if (present_overlap(s, a) || present_overlap(z, a))
            return la_fail(LINATTN_E_OVERLAP,
                           "%s overlaps the state pool (%s): the pool is written, so it must not "
                           "share memory with inputs or o",
                           arrays[i].name, present_overlap(s, a) ? "s" : "z");
    }
    return LINATTN_OK;
}

/* ---- slots ------------------------------------------------------------- */

typedef struct {
    int64_t slot, seq;
} slot_use;

static int by_slot(const void *a, const void *b)
{
    const slot_use *x = a, *y = b;
    return x->slot != y->slot ? (x->slot < y->slot ? -1 : 1)
                              : (x->seq != y->seq ? (x->seq < y->seq ? -1 : 1) : 0);
}

static linattn_status slot_in_pool(const la_serve *sv, int64_t slot, int64_t n,
                                   const char *field, int64_t j)
{
    if (slot < sv->slots)
        return LINATTN_OK;
    if (j >= 0)
        return la_fail(LINATTN_E_ARG,
                       "%s[%lld][%lld] = %lld (sequence %lld): past the pool's %lld slots",
                       field, (long long)n, (long long)j, (long long)slot, (long long)n,
                       (long long)sv->slots);
    if (field == NULL)
        return la_fail(LINATTN_E_ARG,
                       "sequence %lld: read_slots is NULL, so it uses slot %lld, past the "
                       "pool's %lld slots",
                       (long long)n, (long long)slot, (long long)sv->slots);
    return la_fail(LINATTN_E_ARG, "%s[%lld] = %lld (sequence %lld): past the pool's %lld slots",
                   field, (long long)n, (long long)slot, (long long)n, (long long)sv->slots);
}

/* Every index in the pool; no slot written by two sequences; no sequence
 * writing a slot another reads. A sequence may read and write one slot, and
 * its snapshots may name its own read slot (it is read before any write). */
static linattn_status check_slots(const la_serve *sv)
{
    linattn_status st;
    const int64_t K = sv->K;
    for (int64_t n = 0; n < sv->N; n++) {
        int64_t rd = sv->read_slots ? sv->read_slots[n] : n;
        int64_t wr = sv->write_slots ? sv->write_slots[n] : rd;
        if ((st = slot_in_pool(sv, rd, n, sv->read_slots ? "read_slots" : NULL, -1)) ||
            (st = slot_in_pool(sv, wr, n, sv->write_slots ? "write_slots" : "read_slots", -1)))
            return st;
        for (int64_t j = 0; j < K; j++)
            if ((st = slot_in_pool(sv, sv->snapshot_slots[n * K + j], n, "snapshot_slots", j)))
                return st;
    }
    /* writes that will happen: sorted by slot */
    size_t cap = la_size_mul(la_size_of_dim(sv->N), la_size_add(la_size_of_dim(K), 1));
    slot_use small[64]; /* a decode batch needs no allocation here */
    slot_use *w = cap <= 64        ? small
                  : cap == SIZE_MAX ? NULL
                                    : malloc(la_size_mul(cap, sizeof *w) + 1);
    if (w == NULL)
        return la_fail(LINATTN_E_NOMEM, "out of memory checking %lld sequences' slots",
                       (long long)sv->N);
    size_t m = 0;
    for (int64_t n = 0; n < sv->N; n++) {
        int64_t rd, wr, b, t0;
        if (la_serve_slots(sv, n, &rd, &wr))
            continue;
        const int64_t len = la_serve_tokens(sv, n, &b, &t0);
        if (wr >= 0)
            w[m++] = (slot_use){wr, n};
        for (int64_t j = 0; j < K; j++)
            if (sv->snapshot_slots[n * K + j] >= 0 && len - K + j >= 0)
                w[m++] = (slot_use){sv->snapshot_slots[n * K + j], n};
    }
    qsort(w, m, sizeof *w, by_slot);
    for (size_t i = 1; i < m; i++)
        if (w[i].slot == w[i - 1].slot && w[i].seq != w[i - 1].seq) {
            st = la_fail(LINATTN_E_OVERLAP,
                         "sequences %lld and %lld both write slot %lld: each written slot "
                         "belongs to one sequence",
                         (long long)w[i - 1].seq, (long long)w[i].seq, (long long)w[i].slot);
            if (w != small)
                free(w);
            return st;
        }
    for (int64_t n = 0; n < sv->N; n++) {
        int64_t rd, wr;
        if (la_serve_slots(sv, n, &rd, &wr) || rd < 0)
            continue;
        size_t lo = 0, hi = m; /* first use of slot rd */
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (w[mid].slot < rd)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < m && w[lo].slot == rd; lo++)
            if (w[lo].seq != n) {
                st = la_fail(LINATTN_E_OVERLAP,
                             "sequence %lld writes slot %lld, which sequence %lld reads: "
                             "a slot read in a call is written only by its reader",
                             (long long)w[lo].seq, (long long)rd, (long long)n);
                if (w != small)
                    free(w);
                return st;
            }
    }
    if (w != small)
        free(w);
    return LINATTN_OK;
}

/* ---- the whole call ---------------------------------------------------- */

static linattn_status check_cu(la_serve *sv, const linattn_operands *ops)
{
    const int64_t *cu = ops->cu_seqlens, N = ops->num_seqs;
    if (N < 1)
        return la_fail(LINATTN_E_SHAPE, "num_seqs = %lld: packed sequences need num_seqs >= 1",
                       (long long)N);
    if (cu[0] != 0)
        return la_fail(LINATTN_E_ARG, "cu_seqlens[0] = %lld: it must be 0", (long long)cu[0]);
    for (int64_t n = 0; n < N; n++)
        if (cu[n + 1] < cu[n])
            return la_fail(LINATTN_E_ARG,
                           "cu_seqlens[%lld] = %lld < cu_seqlens[%lld] = %lld: offsets must not "
                           "fall (sequence %lld)",
                           (long long)n + 1, (long long)cu[n + 1], (long long)n, (long long)cu[n],
                           (long long)n);
    if (cu[N] != sv->c.T)
        return la_fail(LINATTN_E_ARG,
                       "cu_seqlens[num_seqs = %lld] = %lld: it must equal cfg->seq_len = %lld",
                       (long long)N, (long long)cu[N], (long long)sv->c.T);
    sv->N = N;
    sv->cu = cu;
    return LINATTN_OK;
}

static linattn_status check_pool_fields(la_serve *sv, const linattn_state_pool *p)
{
    if (p->slots < 1)
        return la_fail(LINATTN_E_SHAPE, "pool->slots = %lld: a pool has at least one slot",
                       (long long)p->slots);
    const struct {
        const char *name;
        int64_t v;
    } strides[] = {{"slot", p->slot},     {"head", p->head},     {"row", p->row},
                   {"col", p->col},       {"z_slot", p->z_slot}, {"z_head", p->z_head}};
    for (int i = 0; i < (sv->z ? 6 : 4); i++)
        if (strides[i].v < 0)
            return la_fail(LINATTN_E_STRIDE, "pool->%s = %lld: strides must be >= 0",
                           strides[i].name, (long long)strides[i].v);
    if (p->snapshots < 0)
        return la_fail(LINATTN_E_ARG, "pool->snapshots = %lld: K must be >= 0",
                       (long long)p->snapshots);
    if (p->snapshots > 0 && p->snapshot_slots == NULL)
        return la_fail(LINATTN_E_NULL, "pool->snapshot_slots is NULL but pool->snapshots = %lld",
                       (long long)p->snapshots);
    /* the last K tokens run one at a time, which a non-causal call's
     * outputs (every one from the final state) cannot */
    if (p->snapshots > 0 && !sv->c.causal)
        return la_fail(LINATTN_E_ARG,
                       "pool->snapshots = %lld with cfg->causal = 0: snapshots need a causal "
                       "call (a non-causal output reads the sequence's final state)",
                       (long long)p->snapshots);
    sv->slots = p->slots;
    sv->s_slot = p->slot, sv->s_head = p->head, sv->s_row = p->row, sv->s_col = p->col;
    sv->z_slot = p->z_slot, sv->z_head = p->z_head;
    sv->read_slots = p->read_slots, sv->write_slots = p->write_slots;
    sv->K = p->snapshots;
    sv->snapshot_slots = p->snapshots > 0 ? p->snapshot_slots : NULL;
    return LINATTN_OK;
}

linattn_status la_check_serve(la_serve *sv, linattn_op op, const linattn_config *cfg,
                              const linattn_operands *ops, const la_kernels *kern)
{
    linattn_status st = la_check_run_fields(op, cfg, ops);
    if (st != LINATTN_OK)
        return st;
    const la_family family =
        op == LINATTN_OP_DELTA_FORWARD || op == LINATTN_OP_DELTA_STEP ? LA_FAMILY_DELTA
                                                                      : LA_FAMILY_ADDITIVE;
    const int step = op == LINATTN_OP_STEP || op == LINATTN_OP_DELTA_STEP;
    if (step && ops->cu_seqlens)
        return la_fail(LINATTN_E_ARG, "cu_seqlens is given to a step: a step takes one token "
                                      "per batch entry (sequence n is batch entry n)");
    if (ops->cu_seqlens && cfg->batch != 1) /* before la_check: it would size B entries */
        return la_fail(LINATTN_E_ARG,
                       "cfg->batch = %lld: with cu_seqlens the sequences are packed along the "
                       "token axis of batch entry 0, so batch must be 1",
                       (long long)cfg->batch);
    /* la_check on the call with no state (the pool is checked below); a
     * step is checked as the one-token forward it is */
    linattn_config one = *cfg;
    if (step) { /* what a step ignores is not checked (token strides), but its
                 * causal flag is, as la_check checks a step's: 0 or 1 */
        one.seq_len = 1;
        one.causal = cfg->causal == 0 || cfg->causal == 1 ? 1 : cfg->causal;
        one.q.token = one.k.token = one.v.token = one.o.token = one.g.token = one.beta.token = 0;
    }
    *sv = (la_serve){0};
    la_call *c = &sv->c;
    linattn_operands stateless = *ops;
    stateless.s = NULL, stateless.z = NULL;
    if ((st = la_check(c, family, 0, &one, &stateless)) != LINATTN_OK)
        return st;
    if (step) {
        c->step = 1, c->T = 1, c->causal = 1;
        c->sq.token = c->sk.token = c->sv.token = c->so.token = c->sg.token = c->sbeta.token = 0;
    }
    sv->N = c->B;
    if (ops->cu_seqlens && (st = check_cu(sv, ops)) != LINATTN_OK)
        return st;

    const int normalising = family == LA_FAMILY_ADDITIVE && c->normalize;
    void *s = ops->s;
    float *z = normalising ? ops->z : NULL;
    const int64_t zd = c->dk * (1 + c->z_compensated);
    if (ops->pool) {
        if (s == NULL)
            return la_fail(LINATTN_E_NULL, "s is NULL: a state pool (ops->pool) needs s");
        if (normalising && z == NULL)
            return la_fail(LINATTN_E_NULL, "z is NULL: a normalising call's pool needs z");
        sv->s = s, sv->z = z;
        if ((st = check_pool_fields(sv, ops->pool)) != LINATTN_OK)
            return st;
    } else {
        if (normalising && (s == NULL) != (z == NULL))
            return la_fail(LINATTN_E_NULL,
                           "%s is NULL but %s is not: with normalize = 1, pass s and z together "
                           "(or both NULL for a zero initial state)",
                           s ? "z" : "s", s ? "s" : "z");
        if (step && s == NULL)
            return la_fail(LINATTN_E_NULL, "s is NULL: a step needs the state");
        /* the contiguous [N][H][dk][dv] state is the pool with slot n per sequence */
        sv->s = s, sv->z = s ? z : NULL;
        sv->slots = sv->N;
        sv->s_row = c->dv, sv->s_col = 1, sv->s_head = c->dk * c->dv;
        sv->s_slot = c->H * c->dk * c->dv;
        sv->z_head = zd, sv->z_slot = c->H * zd;
    }
    sv->has_state = sv->s != NULL;
    if (sv->has_state && (st = check_state_memory(sv)) != LINATTN_OK)
        return st;
    if (sv->has_state && (st = check_slots(sv)) != LINATTN_OK)
        return st;
    if ((st = la_check_values(c, kern)) != LINATTN_OK)
        return st;
    sv->tile = family == LA_FAMILY_DELTA ? la_delta_unit_columns(kern, c) : c->dv;
    return LINATTN_OK;
}
