/* The registry: which tables this build has, which this CPU can run, which
 * one compute calls use. The choice is made once, thread-safely, on first
 * use; LINATTN_ISA forces one. An ISA with several tables (avx512 and
 * avx512bf16, which also needs AVX512-BF16) is served by the last one this
 * CPU runs: meson lists them in order of preference. A forced name that
 * is unknown or cannot run leaves no table active: compute calls return
 * LINATTN_E_ISA until linattn_set_isa succeeds (no silent fallback). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "table.h"

#define LA_TABLE(sym) extern const la_table sym;
#include "la_tables.h"
#undef LA_TABLE

/* Scalar first, then the order meson lists the ISA folders in. */
static const la_table *const tables[] = {
#define LA_TABLE(sym) &sym,
#include "la_tables.h"
#undef LA_TABLE
};
enum { TABLE_COUNT = sizeof tables / sizeof tables[0] };

static const char *const isa_names[] = {
    "auto",
#define LA_ISA(suffix, name) name,
#include "isa.def"
#undef LA_ISA
};
enum { ISA_LIMIT = sizeof isa_names / sizeof isa_names[0] }; /* isa < ISA_LIMIT */

/* isa.def and the public enum must list the ISAs in the same order. */
enum {
    ISA_INDEX_AUTO,
#define LA_ISA(suffix, name) ISA_INDEX_##suffix,
#include "isa.def"
#undef LA_ISA
};
#define LA_ISA(suffix, name)                                                                      \
    _Static_assert(LINATTN_ISA_##suffix == (int)ISA_INDEX_##suffix, "isa.def order: " name);
#include "isa.def"
#undef LA_ISA

static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint32_t cpu;
static la_uarch uarch;
static la_kernels resolved[TABLE_COUNT];
static const la_kernels *best;
static const la_kernels *_Atomic active;

int la_table_runnable(const la_table *t) { return (t->requires & ~cpu) == 0; }

/* t's entry for this CPU's microarchitecture, else its first (default). */
static const la_tuning *tuning_of(const la_table *t)
{
    for (int i = 0; i < t->ntuning; i++)
        if (t->tuning[i].uarch == uarch)
            return &t->tuning[i];
    return &t->tuning[0];
}

/* Family F of table i: its own, else that of the nearest runnable table
 * before it that is not test-only (an emulation build such as avx512-simde
 * must never serve a real table); tables[0] is scalar, with every family. */
#define RESOLVE(i, F)                                                                             \
    do {                                                                                          \
        for (int j = (i); j >= 0; j--)                                                            \
            if (tables[j]->F && la_table_runnable(tables[j]) &&                                   \
                (j == (i) || !tables[j]->test_only)) {                                            \
                resolved[i].F = tables[j]->F;                                                     \
                TUNE(resolved[i].F##_tuning = tuning_of(tables[j]));                              \
                break;                                                                            \
            }                                                                                     \
    } while (0)

static const la_kernels *by_isa(linattn_isa isa)
{
    if (isa == LINATTN_ISA_AUTO)
        return best;
    const la_kernels *found = NULL;
    for (int i = 0; i < TABLE_COUNT; i++)
        if (tables[i]->isa == isa && !tables[i]->test_only && la_table_runnable(tables[i]))
            found = &resolved[i];
    return found;
}

static void init(void)
{
    cpu = la_cpu_features();
    uarch = la_cpu_uarch();
    for (int i = 0; i < TABLE_COUNT; i++) {
        resolved[i].table = tables[i];
#define TUNE(x) x
        RESOLVE(i, additive);
        RESOLVE(i, delta);
#undef TUNE
#define TUNE(x) (void)0 /* the input stage has no tuning data */
        RESOLVE(i, stage);
#undef TUNE
        if (!tables[i]->test_only && la_table_runnable(tables[i]) &&
            (best == NULL || tables[i]->isa >= best->table->isa))
            best = &resolved[i];
    }
    const char *env = getenv("LINATTN_ISA");
    active = best;
    if (env == NULL || *env == '\0')
        return;
    active = NULL;
    for (int isa = 0; isa < ISA_LIMIT; isa++)
        if (strcmp(env, isa_names[isa]) == 0)
            active = by_isa((linattn_isa)isa);
}

const la_kernels *la_active_kernels(void)
{
    pthread_once(&once, init);
    return active;
}

const la_kernels *la_active_kernels_or_fail(void)
{
    const la_kernels *kern = la_active_kernels();
    if (kern == NULL) {
        const char *env = getenv("LINATTN_ISA");
        la_fail(LINATTN_E_ISA,
                "LINATTN_ISA=%s names no instruction set this CPU and build can run; "
                "call linattn_set_isa() to choose one",
                env ? env : "");
    }
    return kern;
}

const la_table *const *la_all_tables(int *count)
{
    pthread_once(&once, init);
    *count = TABLE_COUNT;
    return tables;
}

void la_force_table(const la_table *t)
{
    pthread_once(&once, init);
    const la_kernels *k = NULL;
    for (int i = 0; i < TABLE_COUNT; i++)
        if (tables[i] == t)
            k = &resolved[i];
    active = k;
}

void la_force_table_tuning(const la_table *t, const la_tuning *additive, const la_tuning *delta)
{
    static la_kernels forced;
    la_force_table(t);
    if (active == NULL)
        return;
    forced = *active;
    if (additive)
        forced.additive_tuning = additive;
    if (delta)
        forced.delta_tuning = delta;
    active = &forced;
}

int linattn_isa_available(linattn_isa isa)
{
    pthread_once(&once, init);
    return (unsigned)isa < ISA_LIMIT && by_isa(isa) != NULL;
}

linattn_status linattn_set_isa(linattn_isa isa)
{
    pthread_once(&once, init);
    const la_kernels *k = (unsigned)isa < ISA_LIMIT ? by_isa(isa) : NULL;
    if (k == NULL)
        return la_fail(LINATTN_E_ISA,
                       "linattn_set_isa(%d, \"%s\"): this CPU or this build cannot run it",
                       (int)isa, linattn_isa_name(isa));
    active = k;
    la_succeed();
    return LINATTN_OK;
}

linattn_isa linattn_get_isa(void)
{
    const la_kernels *k = la_active_kernels();
    return (k ? k : best)->table->isa;
}

const char *linattn_isa_name(linattn_isa isa)
{
    return (unsigned)isa < ISA_LIMIT ? isa_names[isa] : "unknown";
}

const char *linattn_tuning_name(void)
{
    pthread_once(&once, init);
    return la_uarch_name(uarch);
}
