/* Table choice: once, thread-safely, on first use; LINATTN_ISA forces one.
 * A forced name that is unknown or cannot run here leaves no table active:
 * compute calls return LINATTN_E_ISA until linattn_set_isa succeeds. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* In order of preference, best last. */
static const la_kernels *const tables[] = {
    &la_kernels_scalar,
#ifdef LINATTN_HAVE_AVX2
    &la_kernels_avx2,
#endif
#ifdef LINATTN_HAVE_AVX512
    &la_kernels_avx512,
#endif
#ifdef LINATTN_HAVE_NEON
    &la_kernels_neon,
#endif
#ifdef LINATTN_HAVE_AVX512_SIMDE
    &la_kernels_avx512_simde, /* test-only: never chosen by AUTO or by name */
#endif
};
enum { TABLE_COUNT = sizeof tables / sizeof tables[0] };

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int cpu_ok[LINATTN_ISA_NEON + 1];
static const la_kernels *best;
static const la_kernels *_Atomic active;

static int is_test_only(const la_kernels *t) { return strchr(t->name, '-') != NULL; }

int la_table_runnable(const la_kernels *t) { return cpu_ok[t->isa]; }

static const la_kernels *table_for(linattn_isa isa)
{
    if (isa == LINATTN_ISA_AUTO)
        return best;
    for (int i = 0; i < TABLE_COUNT; i++)
        if (tables[i]->isa == isa && !is_test_only(tables[i]) && cpu_ok[isa])
            return tables[i];
    return NULL;
}

static void init(void)
{
    for (int isa = LINATTN_ISA_SCALAR; isa <= LINATTN_ISA_NEON; isa++)
        cpu_ok[isa] = la_cpu_has((linattn_isa)isa);
    for (int i = 0; i < TABLE_COUNT; i++)
        if (!is_test_only(tables[i]) && cpu_ok[tables[i]->isa])
            best = tables[i];

    const char *env = getenv("LINATTN_ISA");
    if (env == NULL || *env == '\0') {
        active = best;
        return;
    }
    active = NULL; /* an unknown or unavailable name: no silent fallback */
    for (int isa = LINATTN_ISA_AUTO; isa <= LINATTN_ISA_NEON; isa++)
        if (strcmp(env, linattn_isa_name((linattn_isa)isa)) == 0)
            active = table_for((linattn_isa)isa);
}

const la_kernels *la_active_table(void)
{
    pthread_once(&once, init);
    return active;
}

const la_kernels *const *la_all_tables(int *count)
{
    pthread_once(&once, init);
    *count = TABLE_COUNT;
    return tables;
}

void la_force_table(const la_kernels *t)
{
    pthread_once(&once, init);
    active = t;
}

int linattn_isa_available(linattn_isa isa)
{
    pthread_once(&once, init);
    if ((unsigned)isa > LINATTN_ISA_NEON)
        return 0;
    return table_for(isa) != NULL;
}

linattn_status linattn_set_isa(linattn_isa isa)
{
    pthread_once(&once, init);
    const la_kernels *t = (unsigned)isa > LINATTN_ISA_NEON ? NULL : table_for(isa);
    if (t == NULL)
        return LINATTN_E_ISA;
    active = t;
    return LINATTN_OK;
}

linattn_isa linattn_get_isa(void)
{
    const la_kernels *t = la_active_table();
    return t ? t->isa : best->isa;
}

const char *linattn_isa_name(linattn_isa isa)
{
    static const char *const names[] = {"auto", "scalar", "avx2", "avx512", "neon"};
    return (unsigned)isa <= LINATTN_ISA_NEON ? names[isa] : "unknown";
}
