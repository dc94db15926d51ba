/* Private: a validated call of linattn_run / a plan in the serving form:
 * sequences (batch entries, or packed along the token axis by cu_seqlens),
 * each reading and writing its state through a pool addressed by element
 * strides, optionally writing K snapshots. check_pool.c builds it; plan.c
 * splits it into (sequence, head, column tile) units that any thread runs
 * on a single-head call of the family's driver, with the unit's state
 * gathered into a contiguous K-first working copy. */
#ifndef LINATTN_SERVE_H
#define LINATTN_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "call.h"

struct la_kernels;

typedef struct {
    la_call c; /* the whole call, s and z NULL (the pool below holds them) */
    int64_t N; /* sequences */
    const int64_t *cu; /* NULL: sequence n is batch entry n, c.T tokens */
    /* State: none (zero initial state, nothing written), or the pool. */
    int has_state;
    void *s; /* elements of type c.dt.s */
    float *z;
    int64_t slots, s_slot, s_head, s_row, s_col, z_slot, z_head;
    const int32_t *read_slots, *write_slots, *snapshot_slots;
    int64_t K;
    int64_t tile; /* value columns per unit (dv for the additive family) */
} la_serve;

/* check_pool.c: OK with *sv filled, or a status with linattn_last_error set.
 * Every check of la_check plus the pool's, the slots' and cu_seqlens', then
 * la_check_values: no value is read before the whole structure passes. */
linattn_status la_check_serve(la_serve *sv, linattn_op op, const linattn_config *cfg,
                              const linattn_operands *ops, const struct la_kernels *kern);

/* linattn_run's and linattn_plan_create's structs as this version's: an
 * older caller's (smaller struct_size) are copied into *copy with the new
 * fields at their defaults. */
typedef struct {
    linattn_config cfg;
    linattn_operands ops;
} la_run_arg_copy;
linattn_status la_run_args(const linattn_config *cfg, const linattn_operands *ops,
                           la_run_arg_copy *copy, const linattn_config **cfg_out,
                           const linattn_operands **ops_out);

/* The operand struct, op, config version and the fields this path
 * supports (both linattn_run paths start here, after la_run_args). */
linattn_status la_check_run_fields(linattn_op op, const linattn_config *cfg,
                                   const linattn_operands *ops);

/* plan.c: linattn_run of a pool or packed call, on the library's threads. */
linattn_status la_serve_run(linattn_op op, const linattn_config *cfg, const linattn_operands *ops);

/* The read and write slot of sequence n (-1: none); 1 when it is padding. */
static inline int la_serve_slots(const la_serve *sv, int64_t n, int64_t *rd, int64_t *wr)
{
    if (!sv->has_state) {
        *rd = *wr = -1;
        return 0;
    }
    *rd = sv->read_slots ? sv->read_slots[n] : n;
    *wr = sv->write_slots ? sv->write_slots[n] : *rd;
    if (*rd < 0)
        *rd = -1;
    if (*wr < 0)
        *wr = -1;
    return *rd < 0 && *wr < 0;
}

/* Tokens of sequence n: batch entry *b, tokens [*t0, *t0 + len). */
static inline int64_t la_serve_tokens(const la_serve *sv, int64_t n, int64_t *b, int64_t *t0)
{
    if (sv->cu) {
        *b = 0, *t0 = sv->cu[n];
        return sv->cu[n + 1] - sv->cu[n];
    }
    *b = n, *t0 = 0;
    return sv->c.T;
}

/* Element (i, j) of head h's state in slot `slot` is element
 * i * s_row + j * s_col of the result (of type c.dt.s). */
static inline void *la_serve_state(const la_serve *sv, int64_t slot, int64_t h)
{
    return (void *)la_at(sv->s, sv->c.dt.s, slot * sv->s_slot + h * sv->s_head);
}

static inline float *la_serve_z(const la_serve *sv, int64_t slot, int64_t h)
{
    return sv->z ? sv->z + slot * sv->z_slot + h * sv->z_head : NULL;
}

/* additive_driver.c, delta_driver.c: one head (B = H = 1 call, s and z the
 * working state) on the calling thread, with the workspace sized here. */
size_t la_additive_head_bytes(const struct la_kernels *kern, const la_call *c);
void la_additive_head_run(const struct la_kernels *kern, const la_call *c, void *ws);
/* A call that runs the token loop (la_additive_head_token_loop) on the
 * state s where it lies (the call's own s unused): K-first (vld 0) or
 * V-first (value column j at j * vld), float or bfloat16 (one token at a
 * time, rounded once per token). next: the state the calling thread works
 * on after this one, laid out as s, or NULL. */
int la_additive_head_token_loop(const struct la_kernels *kern, const la_call *c);
void la_additive_head_run_in_place(const struct la_kernels *kern, const la_call *c, void *s,
                                   int bf16, int64_t vld, const void *next, void *ws);
int64_t la_delta_unit_columns(const struct la_kernels *kern, const la_call *c);
size_t la_delta_head_bytes(const struct la_kernels *kern, const la_call *c, int64_t nj,
                           int moved);
/* next: the float K-first state (row stride dv) the calling thread works
 * on after this one, or NULL; a one-token call fetches its rows meanwhile */
void la_delta_head_run(const struct la_kernels *kern, const la_call *c, int64_t j0, int64_t nj,
                       const float *next, void *ws);
int la_delta_head_recurrent(const struct la_kernels *kern, const la_call *c);
/* next: as la_delta_head_run's, a V-first state laid out as s, of its type */
void la_delta_head_run_vfirst(const struct la_kernels *kern, const la_call *c, int64_t j0,
                              int64_t nj, void *s, const void *from, int bf16, int64_t ld,
                              const void *next, void *ws);
int la_delta_head_packs(const struct la_kernels *kern, const la_call *c, int moved);
void la_delta_head_run_packed(const struct la_kernels *kern, const la_call *c, int64_t j0,
                              int64_t nj, linattn_dtype t, const void *src, void *dst, int64_t row,
                              int64_t col, void *ws);
int la_delta_head_bf16_in_place(const struct la_kernels *kern, const la_call *c);
/* next: as la_delta_head_run's, a bfloat16 K-first state */
void la_delta_head_run_bf16(const struct la_kernels *kern, const la_call *c, int64_t j0,
                            int64_t nj, uint16_t *s, const uint16_t *next, void *ws);

#endif
