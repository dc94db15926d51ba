/* Private: a kernel table is an identity (name, ISA, the CPU features it
 * needs, test-only or not) plus one ops struct per kernel family. A family
 * a table leaves NULL is resolved from a lower table that has it, down to
 * the scalar table, which has every family: a new family can land in scalar
 * first and gain SIMD ops one table at a time, each tested on its own.
 *
 * Each ISA folder defines one `const la_table la_table_<name>` and its
 * meson.build adds that symbol to `table_symbols`; meson generates the list
 * (la_tables.h) the registry walks. */
#ifndef LINATTN_TABLE_H
#define LINATTN_TABLE_H

#include <stdint.h>

#include "additive.h"
#include "delta.h"
#include "linattn.h"
#include "stage.h"
#include "tuning.h"

/* CPU features a table can require; cpu.c answers with a mask of these. */
enum {
    LA_FEAT_AVX2 = 1u << 0,
    LA_FEAT_FMA = 1u << 1,
    LA_FEAT_AVX512 = 1u << 2, /* F + VL + BW + DQ, with OS support for zmm state */
    LA_FEAT_ASIMD = 1u << 3,  /* AArch64 Advanced SIMD */
    LA_FEAT_F16C = 1u << 4,   /* x86 half-precision conversions (every AVX2 CPU has them) */
    LA_FEAT_AVX512BF16 = 1u << 5, /* AVX512-BF16's conversions, with LA_FEAT_AVX512 */
};

typedef struct la_table {
    const char *name;  /* "scalar", "avx2", ...; LINATTN_ISA names the non-test ones */
    linattn_isa isa;   /* the public ISA this table implements */
    uint32_t requires; /* LA_FEAT_* mask */
    int test_only;     /* never chosen by AUTO or by name (an emulation build) */
    const la_additive_ops *additive;
    const la_delta_ops *delta;
    const la_stage_ops *stage; /* the input stage's vector work (stage.h) */
    /* Measured choices per microarchitecture, the default first (tuning.h). */
    const la_tuning *tuning;
    int ntuning;
} la_table;

/* A table with every family resolved: what a compute call runs on. */
typedef struct la_kernels {
    const la_table *table; /* identity; its ops may be NULL, these never are */
    const la_additive_ops *additive;
    const la_delta_ops *delta;
    const la_stage_ops *stage;
    /* the entry for this CPU of the table each family came from */
    const la_tuning *additive_tuning, *delta_tuning;
} la_kernels;

/* cpu.c: the LA_FEAT_* this CPU and OS can run. */
uint32_t la_cpu_features(void);

/* registry.c */
/* The resolved table compute calls use, or NULL while a forced ISA cannot run. */
const la_kernels *la_active_kernels(void);
/* The same, naming LINATTN_ISA in linattn_last_error when it is NULL: every
 * compute entry point asks this first, before looking at its arguments. */
const la_kernels *la_active_kernels_or_fail(void);
/* Every table of this build (test-only ones included), scalar first. */
const la_table *const *la_all_tables(int *count);
int la_table_runnable(const la_table *t);
/* Tests: run compute calls on t (must be runnable; NULL: as if a forced ISA
 * could not run). */
void la_force_table(const la_table *t);
/* Tests: as la_force_table, with a family's tuning entry replaced (NULL:
 * the table's own), to run every choice an entry can make on any CPU. */
void la_force_table_tuning(const la_table *t, const la_tuning *additive, const la_tuning *delta);

#endif
