/* Private: one (batch, value head) problem as every kernel of both families
 * sees it, built by the drivers through the input stage (stage.h). All
 * operands are float32: pointers already offset to (b, h) (q and k to the
 * q/k head this value head reads); token t of q is q + t * q_ts (feature
 * dimension contiguous), likewise k, v, o, for t < T. A driver may give a
 * kernel a view of some of a head's tokens, so no kernel reads (or
 * prefetches) a row at T or beyond. The gate of token t is g[t * g_ts]
 * (LA_GATE_TOKEN, g_ts may be 0) or the dk floats at g + t * g_ts
 * (LA_GATE_CHANNEL); beta of token t is beta[t * beta_ts]. */
#ifndef LINATTN_HEAD_H
#define LINATTN_HEAD_H

#include <stdint.h>

#include "gate.h"
#include "linattn.h"

typedef struct la_head {
    int64_t T, dk, dv;
    const float *q, *k, *v, *g, *beta; /* beta: delta rule only */
    float *o;
    int64_t q_ts, k_ts, v_ts, g_ts, beta_ts, o_ts;
    /* [dk][dv], in/out, never NULL (zeroed by the driver if the user gave
     * none) unless s_bf16 holds the state */
    float *s;
    /* delta recurrent and the additive token op: when not NULL the state
     * is here instead (s unused), [dk][dv] bfloat16 (additive: row stride
     * s_ld), widened as read and rounded as written (once per token: the
     * drivers give it one-token calls, so a decode step rounds it once) */
    uint16_t *s_bf16;
    /* additive only: z [dk], NULL exactly when not normalising; zc the
     * running compensation of z (Kahan), dk floats, in the token loop (the
     * caller's with z_compensated), else NULL */
    float *z, *zc;
    /* additive token only: the state's row stride, 0 for dv. A unit of the
     * columns [j0, j0 + dv) of a wider state (a step split over threads)
     * sees s at column j0, v and o at j0, and the state's width here */
    int64_t s_ld;
    /* delta recurrent_vfirst and the additive token_vfirst: s (or s_bf16)
     * is V-first, value column j is the dk elements at s + j * s_vld (a
     * state pool's layout in vLLM, sglang, ggml) */
    int64_t s_vld;
    /* delta recurrent_vfirst only: where the state before the call is (the
     * same layout and type as s or s_bf16, a different slot), or NULL: s
     * itself. The first token reads it and writes s, so a state moves from
     * one slot to another without a copy first (ggml's src and dst, a
     * speculative token's snapshot); never written. */
    const void *s_from;
    /* delta recurrent only: s is the kernels' packed copy of the columns
     * the call works on (pack.h), in tiles of pack_tile columns (rows
     * that plus the table's la_delta_ops.pack_pad apart) */
    int s_packed;
    int64_t pack_tile;
    /* delta recurrent, and the additive token ops (bfloat16, or V-first): the
     * state the caller works on next, laid out as this one and of its
     * type (float, or bfloat16 as s_bf16), or NULL. A one-token tile's
     * passes fetch rows into L2 while they work on this state, so that
     * memory is not idle then: K-first, the next column tile of this
     * state, after the last tile s_next's first (delta_recurrent hands
     * each tile those rows, at their column 0); V-first, s_next's first
     * rows of the columns worked on, as the fetches ahead of the dot
     * products run past the unit's last row; additive K-first, each row
     * of the sweep that row of s_next (where the table fetches); additive
     * V-first, s_next's first rows, as the fetches ahead of the sweep run
     * past its last row */
    const void *s_next;
    /* delta recurrent only, one-token calls on a float K-first state:
     * with step_acc_in, step_acc holds S^T kn of the tile about to be
     * swept, summed by the previous tile's sweep; with step_acc_out the
     * sweep sums the next tile's (at s_next, as many whole vectors) into
     * it instead of fetching those rows, so that a tile's read-only pass
     * runs inside the previous tile's read-write pass */
    float *step_acc;
    int step_acc_in, step_acc_out;
    /* delta recurrent only, one-token calls on a float K-first state:
     * columns per register tile (la_tuning.delta_step_columns; 0: the
     * table's tile) */
    int64_t step_columns;
    int step_fuse; /* la_tuning.delta_step_fuse */
    int step_bf16_sweep_fetch; /* la_tuning.delta_step_bf16_sweep_fetch */
    /* delta recurrent_vfirst, one-token calls: la_tuning's
     * delta_vfirst_read_ahead (0: VFIRST_READ_AHEAD_BYTES) */
    int64_t vfirst_read_ahead;
    int vfirst_dot_interleave; /* la_tuning.delta_vfirst_dot_interleave */
    /* delta recurrent, one-token calls on a K-first state: la_tuning's
     * delta_step_rows_bytes (0: the table's) */
    int64_t step_rows_bytes;
    /* delta recurrent only, float K-first state: tokens go through the
     * tile two at a time (la_tuning.delta_pair_from_T) */
    int pair_tokens;
    /* additive value-tiled recurrent only: tokens go through the tile four
     * at a time (la_tuning.additive_quad_from_T) */
    int quad_tokens;
    /* additive value-tiled recurrent only: la_tuning.additive_fetch_tokens */
    int64_t fetch_tokens;
    float scale; /* finite */
    float eps;   /* additive: finite, >= 0 */
    linattn_phi phi; /* the stage has applied it (IDENTITY) when it made q/k panels */
    la_gate gate;
    int64_t chunk; /* chunked: rows per chunk, >= 1 */
} la_head;

#endif
