/* Private: the additive linear-attention family, its ops and their contract.
 *
 * The family's driver (additive_driver.c) walks (batch, head), resolves all
 * strides and state pointers into one la_head per (b, h), and calls the ops
 * the registry resolved for this family. Each ISA folder may provide a
 * `const la_additive_ops`; a table without one uses the scalar ops.
 *
 * Maths, per head, tokens t = 0..T-1:
 *   qh_t = scale * phi(q_t), kh_t = phi(k_t), a_t = decay of token t
 *   S_t = a_t S_{t-1} + kh_t v_t^T,  z_t = a_t z_{t-1} + kh_t
 *   o_t = qh_t^T S_t / (qh_t . z_t + eps)   (or without the division)
 *
 * Gates as the kernels see them: the driver turns LINATTN_GATE_HEAD into
 * LA_GATE_TOKEN with g_ts = 0, so only three kinds reach a kernel.
 *
 * Chunked causal forward (prefill). The driver owns the loop over chunks of
 * n <= chunk rows starting at t0, and composes four table operations:
 *
 *   chunk_pack(h, t0, n, pack)        phi, scale and the gate prefix sums
 *                                      b_i = sum_{l=t0..t0+i} g_l (per channel
 *                                      for CHANNEL) into the table's private
 *                                      pack layout.
 *   chunk_output(h, pack, t0, n, s, z) rows t0..t0+n-1 of o from the state
 *                                      before the chunk:
 *       O = diag(e^b) Qh S + ((Qh Kh^T) o D) V,  D_ij = e^(b_i - b_j), j <= i
 *       den = diag(e^b) Qh z + rowsum((Qh Kh^T) o D) + eps   (normalising)
 *   chunk_state(h, pack, t0, n, u, uz) the chunk's own state contribution,
 *                                      from zero: u = (diag(e^(b_last - b)) Kh)^T V,
 *                                      uz = column sums of that matrix.
 *   state_combine(h, pack, n, s, z, u, uz)  s = e^(b_last) o s + u (row c
 *                                      scaled by e^(b_last,c) for CHANNEL),
 *                                      z likewise; one rounding per element
 *                                      (fmaf or a vector FMA).
 *
 * Only chunk_pack reads q and k (and applies phi); the other three read its
 * pack. With qk_l2norm the driver gives chunk_pack alone a view of the
 * chunk's tokens whose q and k are unit-norm rows (t0 = 0, T = n).
 *
 * Splitting the state update into chunk_state + state_combine lets the
 * driver run chunk_state of all chunks in parallel and still give results
 * bitwise equal to the sequential loop. Decay factors are always formed as
 * e^(x) with x <= 0 (differences of prefix sums in the right order), never
 * as e^(b_i) * e^(-b_j): strong decay (g = -20 per token) must stay finite.
 *
 * Thread safety: kernels write only h->o rows of their call, the state they
 * are given and their pack/workspace; no globals.
 */
#ifndef LINATTN_ADDITIVE_H
#define LINATTN_ADDITIVE_H

#include <stddef.h>
#include <stdint.h>

#include "gate.h"
#include "head.h"
#include "linattn.h"
#include "sizes.h"


typedef struct la_additive_ops {
    /* (The default chunk and AUTO's choice are the table's tuning data,
     * tuning.h.) */
    /* Bytes of one pack for chunks of up to `chunk` rows, formed with the
     * saturating arithmetic of sizes.h (SIZE_MAX: too big); the driver gives
     * chunk_pack a 64-byte aligned buffer of this size. */
    size_t (*pack_bytes)(int64_t chunk, int64_t dk, int64_t dv);

    void (*chunk_pack)(const la_head *h, int64_t t0, int64_t n, void *pack);
    /* s: [dk][dv] and z: [dk] (NULL when not normalising) hold the state
     * before the chunk; read only. Writes o rows t0..t0+n-1. */
    void (*chunk_output)(const la_head *h, const void *pack, int64_t t0, int64_t n,
                         const float *s, const float *z);
    /* Writes u: [dk][dv] and uz: [dk] (uz only when h->z != NULL). */
    void (*chunk_state)(const la_head *h, const void *pack, int64_t t0, int64_t n, float *u,
                        float *uz);
    void (*state_combine)(const la_head *h, const void *pack, int64_t n, float *s, float *z,
                          const float *u, const float *uz);

    /* The value-tiled recurrent forward, in blocks of tokens
     * (additive_kernels.h):
     *   features(h, t0, n, f): qh, kh, the decay and the v rows of tokens
     *     t0..t0+n-1 into f, feature_bytes(n, dk, dv) bytes;
     *   normaliser(h, f, n, zz, inv): advances zz (dk floats of z, then dk
     *     of the rounding error its sum has not absorbed) over the n tokens
     *     of f and writes inv[i] = 1 / (qh_i . z_i + eps);
     *   columns(h, f, inv, t0, n, j0, nj): the n tokens on value columns
     *     [j0, j0 + nj) of h->s and h->o (inv NULL when not normalising),
     *     f as features made it for the same t0 and n (columns uses the
     *     rest of f for its o rows).
     * Value columns are independent: units of one head on different
     * threads each make the features and take their own columns. With
     * qk_l2norm the driver gives all three, per block, a view of the
     * block's tokens (t0 = 0, T = n) whose q and k are unit-norm rows. */
    size_t (*feature_bytes)(int64_t n, int64_t dk, int64_t dv);
    void (*features)(const la_head *h, int64_t t0, int64_t n, float *f);
    void (*normaliser)(const la_head *h, const float *f, int64_t n, float *zz, float *inv);
    void (*columns)(const la_head *h, float *f, const float *inv, int64_t t0, int64_t n,
                    int64_t j0, int64_t nj);
    /* columns' packed working copy (pack.h) of a state's columns [j0, j0 +
     * nj): its bytes, and the copies in and out; columns runs on it when
     * h->s_packed (h->s the copy, its column 0 being j0). tuning.h's
     * additive_pack_from_T says when. NULL: the table does not pack. */
    size_t (*packed_bytes)(int64_t dk, int64_t nj);
    void (*pack)(const float *s, int64_t dk, int64_t dv, int64_t j0, int64_t nj, float *copy);
    void (*unpack)(float *s, int64_t dk, int64_t dv, int64_t j0, int64_t nj, const float *copy);
    /* One token of the causal recurrence, any gate: decay, update and read
     * out h->s (and h->z) in a single pass, writing o (dv floats). g is the
     * token's gate (NULL for NONE; one float for TOKEN, dk for CHANNEL).
     * linattn_step's token loop. Never allocates. With h->s_bf16 the state
     * is bfloat16, each element widened as read and rounded once as
     * written, o read out from the float before the rounding: the bits of
     * the same token on a float copy of the state, rounded afterwards. */
    void (*token)(const la_head *h, const float *q, const float *k, const float *v,
                  const float *g, float *o);
    /* The same token on a V-first state (additive_kernels.h): value column
     * j is the dk elements at j * h->s_vld of h->s (or h->s_bf16), so a
     * V-first pool's step works where the state lies. The state gets the
     * avx512 token op's bits; o sums along the key axis (the same maths,
     * other rounding). Every table has it (the generic kernel). */
    void (*token_vfirst)(const la_head *h, const float *q, const float *k, const float *v,
                         const float *g, float *o);
    /* The non-causal forward (gate NONE) in two passes over blocks of
     * tokens, so that the input stage makes the rows of one block at a
     * time: noncausal_state adds the h->T tokens of h to the state
     * (S += Kh^T V, z += sum kh), then, once every block is in,
     * noncausal_output reads out its h->T queries from the final S, z
     * (o = Qh S, divided by Qh z + eps when normalising). The driver's
     * blocks are a multiple of each table's own token blocking, so the
     * sums are those of one call over the whole head. */
    void (*noncausal_state)(const la_head *h);
    void (*noncausal_output)(const la_head *h);
} la_additive_ops;

/* Tokens per block of the non-causal passes: a multiple of every table's
 * token blocking (each table asserts it). */
#define LA_NONCAUSAL_BLOCK 64

#endif /* LINATTN_ADDITIVE_H */
