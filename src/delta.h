/* Private: the delta-rule family (DeltaNet, Gated DeltaNet, Kimi Delta
 * Attention), its ops and their contract.
 *
 * Maths, per value head, tokens t = 0..T-1, state S [dk][dv]:
 *   qh_t = scale * phi(q_t), kh_t = phi(k_t)  (unit L2 norms: the input stage)
 *   S = L_t S                        decay first: 1, e^g, or row i times e^g[i]
 *   u_t = beta_t (v_t - S^T kh_t)    with the decayed S
 *   S = S + kh_t u_t^T
 *   o_t = S^T qh_t                   with the updated S
 *
 * Value column j of S, u and o depends only on column j and the shared
 * qh, kh, decay and beta: both algorithms run on a tile of value columns
 * [j0, j0 + nj), so the driver can spread (batch, head, tile) units over
 * threads with no communication and results independent of the split.
 *
 * recurrent: token order, the dk x nj slice of S kept hot for all T tokens.
 * chunked: the WY (UT-transform) form per chunk of C tokens, gate prefix
 *   sums G restarted at each chunk so every exponent is <= 0:
 *     A = strictly_lower(diag(beta) (Kh Kh^T) o Gamma), Gamma_ij = e^(G_i - G_j)
 *     Tm = (I + A)^-1 diag(beta)          forward substitution
 *     W = Tm (Kh o e^G), U = Tm V, V' = U - W S
 *     O = (Qh o e^G) S + tril((Qh Kh^T) o Gamma) V'
 *     S = e^(G_last) S + (Kh o e^(G_last - G))^T V'
 *   (per-channel gates: G per channel, Gamma and the products per channel.)
 */
#ifndef LINATTN_DELTA_H
#define LINATTN_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "gate.h"
#include "head.h"
#include "linattn.h"
#include "sizes.h"


typedef struct la_delta_ops {
    /* Value columns per unit of work (the driver's tile width). */
    int64_t (*tile_columns)(int64_t dk, int64_t dv);
    /* Workspace bytes of one recurrent call of T tokens / one chunked call
     * on a tile of nj columns (saturating arithmetic; SIZE_MAX: too big). */
    size_t (*recurrent_bytes)(int64_t T, int64_t dk, int64_t nj);
    size_t (*chunked_bytes)(int64_t chunk, int64_t dk, int64_t nj);
    /* All T tokens of h on columns [j0, j0 + nj) of S and o; ws is 64-byte
     * aligned, of the size above. */
    void (*recurrent)(const la_head *h, int64_t j0, int64_t nj, void *ws);
    void (*chunked)(const la_head *h, int64_t j0, int64_t nj, void *ws);
    /* recurrent on a V-first state (h->s, or a bfloat16 h->s_bf16 in
     * one-token calls; h->s_vld), workspace as recurrent_bytes. The dot
     * products run along the key axis, so the results agree with
     * recurrent's to rounding, not bit for bit. */
    void (*recurrent_vfirst)(const la_head *h, int64_t j0, int64_t nj, void *ws);
    /* The recurrent form's packed working copy of columns [j0, j0 + nj) of
     * a float state (pack.h): tiles of h->pack_tile columns, rows that
     * plus pack_pad floats apart. recurrent runs on it when h->s_packed (h->s the copy,
     * its column 0 being j0). Each register tile's rows are contiguous
     * there, so a tile that fits in L1 is not spread over a fraction of
     * L1's sets by the row stride (tuning.h's delta_pack_from_T says when).
     * The driver fills the copy from the state in whatever layout it lies
     * (K-first rows, or a V-first pool through the stage's transposes).
     * pack_tile 0: the table does not pack. pack_tile is the widest tile;
     * pack_columns(n) gives the width for a tuning entry's
     * delta_pack_columns n (whole vectors, at most pack_tile; 0: pack_tile),
     * and rows are that width plus pack_pad floats apart. */
    int64_t pack_tile, pack_pad;
    int64_t (*pack_columns)(int64_t n);
    /* (The default chunk and AUTO's choice are the table's tuning data,
     * tuning.h.) */
} la_delta_ops;

#endif
