/* Private: the choices a kernel table makes from measurements (AUTO's
 * algorithm, the default chunk), as data per microarchitecture. Each table
 * lists entries measured on named machines (docs/kernels.md has the figures,
 * scripts/tune.py prints an entry); the registry picks the entry for the
 * microarchitecture cpu.c reports once at load time, else the table's first
 * entry. Nothing here depends on timing at load time or on the thread count,
 * so a result never depends on either. */
#ifndef LINATTN_TUNING_H
#define LINATTN_TUNING_H

#include <stdint.h>

#include "gate.h"

/* Machines entries were measured on; cpu.c maps a CPU to the nearest one
 * and names it (la_uarch_name, linattn_tuning_name). */
typedef enum {
    LA_UARCH_OTHER,            /* none of these: each table's first entry */
    LA_UARCH_ZEN4,             /* AMD Zen, families 0x17-0x19 (measured: Zen 4) */
    LA_UARCH_ZEN5,             /* AMD family 0x1A and later (measured: Zen 5, model 2) */
    LA_UARCH_SAPPHIRE_RAPIDS,  /* Intel family 6 with AVX-512 (measured: model 207) */
    LA_UARCH_COUNT
} la_uarch;

enum { LA_GATES = 3 };                   /* la_gate values */
#define LA_TUNE_NEVER INT64_MAX          /* a dk threshold no call exceeds */

typedef struct la_tuning {
    la_uarch uarch;
    /* AUTO runs the chunked form when dk > chunked_above_dk[gate] (the
     * additive family only above its few-token limit); LA_TUNE_NEVER: the
     * recurrent form at every dk. */
    int64_t additive_chunked_above_dk[LA_GATES];
    int64_t delta_chunked_above_dk[LA_GATES];
    /* chunk = 0: chunk[max(dk, dv) > 64][gate]. */
    int64_t additive_chunk[2][LA_GATES];
    int64_t delta_chunk[2][LA_GATES];
    /* The delta recurrent forward works on a packed copy of a unit's state
     * columns (pack.h, with la_delta_ops.pack_tile and pack_pad: each
     * register tile's rows contiguous, so a tile the size of L1 maps onto
     * all of its sets) in calls of at least this many tokens;
     * LA_TUNE_NEVER: on the state where it lies. The copy changes no
     * arithmetic: results are the same bits either way. */
    int64_t delta_pack_from_T;
    /* Value columns per register tile on that copy, rounded up to whole
     * vectors, at most the table's packed tile; 0: the table's. A tile of
     * dk rows should fit in L1 beside the token's features. The results
     * are the same bits for any width. */
    int64_t delta_pack_columns;
    /* The same for the additive family's value-tiled recurrent forward
     * (la_additive_ops.pack). */
    int64_t additive_pack_from_T;
    /* Value columns per register tile of the delta recurrent form in a
     * one-token call on a float K-first state (a decode step), rounded up
     * to whole vectors, at most the table's tile; 0: the table's tile.
     * Each tile's sweep fetches the next tile's rows (the last tile: the
     * next state's) into L2, so narrower tiles leave less of the state to
     * wait for. The results are the same bits for any width. */
    int64_t delta_step_columns;
    /* 1: in such a call each tile's sweep also sums the next tile's S^T k
     * (read from its rows, fetched a few rows ahead), so that the next
     * tile skips its read-only pass and the state is read from memory
     * while the current tile is rewritten; 0: the sweep only fetches the
     * next tile's rows. The sums are the same operations in the same
     * order: the same bits either way. */
    int delta_step_fuse;
    /* 1: a one-token call on a bfloat16 K-first state fetches the next
     * tile's (or state's) rows in its read-write pass alone; 0: spread
     * over its read-only pass and its read-write pass, as a float state's
     * are. Prefetches only: the same bits either way. */
    int delta_step_bf16_sweep_fetch;
    /* Bytes of a V-first state (bfloat16 or float) whose dot products a
     * one-token call reads before it updates those rows (delta_kernels.h,
     * delta_vfirst_token); 0: the table's 64 KiB. Less keeps fewer lines
     * in flight, more waits longer before the rows are rewritten. The
     * results are the same bits for any value. */
    int64_t delta_vfirst_read_ahead;
    /* 1: a one-token V-first call's read-only pass (above) sums the rows
     * of a group of four chunk after chunk, the rows sharing each load of
     * kn; 0: row after row, one address-ordered stream for the prefetchers
     * (delta_kernels.h, delta_vfirst_dot). The same operations in either
     * order: the same bits. */
    int delta_vfirst_dot_interleave;
    /* A one-token call (or block) on a K-first state (float or bfloat16),
     * not packed, whose columns are wider than the table's register tile
     * reads its rows whole (delta_kernels.h, delta_step_rows) when the
     * head's columns take at most this many bytes; larger heads go by
     * tiles, each fetching the next while it is swept. A head swept whole
     * stays in L2 between its two passes while the next one comes in: both
     * must fit. 0: the table's 256 KiB. The results are the same bits
     * either way. */
    int64_t delta_step_rows_bytes;
    /* The delta recurrent forward on a float K-first state (packed or not)
     * runs its tokens two at a time in sequences of at least
     * delta_pair_from_T[gate] tokens (delta_kernels.h, delta_pair_terms:
     * one read-write pass over a tile per pair, half the loads and stores,
     * 6-7 FP operations per element and pair against 6-8; the sums are
     * regrouped, so results differ from one token at a time in rounding
     * only); LA_TUNE_NEVER: one at a time. Decode steps, and the steps of a
     * call's snapshots, go one at a time always. delta_pair_below_T[gate]
     * (0: no bound) ends the range: sequences of that many tokens or more
     * go one at a time (the length of the sequence decides, never how the
     * state is laid out or packed, so a pool's results stay the bits of
     * the contiguous call's). */
    int64_t delta_pair_from_T[LA_GATES];
    int64_t delta_pair_below_T[LA_GATES];
    /* The additive family's value-tiled recurrent forward takes its tokens
     * four at a time (else two at a time) in calls of at least
     * additive_quad_from_T[gate] tokens (additive_kernels.h, add_quad: one
     * read-write pass over a tile per four tokens; the sums are regrouped,
     * so results differ from pairs in rounding only); LA_TUNE_NEVER: in
     * pairs. */
    int64_t additive_quad_from_T[LA_GATES];
    /* How the additive value-tiled recurrent forward fetches its rows
     * ahead (additive_kernels.h, "Fetching ahead"): 0, the next block's
     * at once (q, k and v while its features are made, o before its
     * sweep); N > 0, each loop N tokens ahead of the token it is at, a
     * few tokens at a time. Prefetches only: the same bits either way. */
    int64_t additive_fetch_tokens;
} la_tuning;

/* The delta family's algorithm on every table so far, measured on Zen 4
 * and on a Xeon (model 207): the recurrent form keeps its tile of the state
 * in L1/L2 and needs a third of the chunked form's flops; chunks of 32.
 * Each entry also sets delta_pack_from_T and additive_pack_from_T (the test
 * of the entries rejects one left at 0). */
#define LA_DELTA_TUNING_ZEN4                                                                     \
    .delta_chunked_above_dk = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},                     \
    .delta_chunk = {{32, 32, 32}, {32, 32, 32}}

static inline int la_tuned_chunked(const int64_t above[LA_GATES], int64_t dk, la_gate gate)
{
    return dk > above[gate];
}

static inline int64_t la_tuned_chunk(const int64_t chunk[2][LA_GATES], int64_t dk, int64_t dv,
                                     la_gate gate)
{
    return chunk[dk > 64 || dv > 64][gate];
}

/* cpu.c: the entry key of this CPU, and of any CPU by its CPUID vendor
 * string, family and model (both as displayed, extended fields added) and
 * whether AVX-512 is usable; pure, so that tests can check it. */
la_uarch la_cpu_uarch(void);
la_uarch la_uarch_of(const char *vendor, int family, int model, int avx512);
/* "other", "zen4", "zen5", "sapphire_rapids"; "unknown" outside the enum. */
const char *la_uarch_name(la_uarch u);

#endif
