/* The only file that asks the CPU what it can do: a mask of LA_FEAT_* bits,
 * read once by the registry. LINATTN_TEST_CPU_OFF (tests only) removes
 * features from it, so one machine exercises every fallback (libdeflate's
 * way): a comma-separated list of avx2, fma, avx512, asimd; a name it does
 * not know removes every feature, so a typo cannot pass for a full CPU. */
#include <stdlib.h>
#include <string.h>

#include "table.h"

static uint32_t detect(void);

uint32_t la_cpu_features(void)
{
    static const struct {
        const char *name;
        uint32_t bit;
    } names[] = {{"avx2", LA_FEAT_AVX2},
                 {"fma", LA_FEAT_FMA},
                 {"avx512", LA_FEAT_AVX512},
                 {"asimd", LA_FEAT_ASIMD}};
    uint32_t m = detect();
    const char *off = getenv("LINATTN_TEST_CPU_OFF");
    while (off != NULL && *off != '\0') {
        size_t len = strcspn(off, ",");
        uint32_t bit = ~0u;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && strncmp(off, names[i].name, len) == 0)
                bit = names[i].bit;
        m &= ~bit;
        off += len + (off[len] == ',');
    }
    return m;
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpu_features/cpuinfo_x86.h>

static uint32_t detect(void)
{
    /* cpu_features clears the AVX/AVX-512 bits when the OS does not save
     * those registers, so these bits mean "usable". They are 1-bit signed
     * bitfields: compare with 0. */
    const X86Features f = GetX86Info().features;
    uint32_t m = 0;
    if (f.avx2 != 0)
        m |= LA_FEAT_AVX2;
    if (f.fma3 != 0)
        m |= LA_FEAT_FMA;
    if (f.avx512f != 0 && f.avx512vl != 0 && f.avx512bw != 0 && f.avx512dq != 0)
        m |= LA_FEAT_AVX512;
    return m;
}

#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>

static uint32_t detect(void)
{
    /* getauxval, not cpu_features 0.7: when AT_HWCAP2 is 0 (QEMU cortex-a72)
     * GetAarch64Info prints to stdout, and a library's stdout must stay clean. */
    return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0 ? LA_FEAT_ASIMD : 0;
}

#else
static uint32_t detect(void) { return 0; }
#endif
