/* The only file that asks the CPU what it can do: a mask of LA_FEAT_* bits,
 * and which machine's tuning entries fit it best, read once by the
 * registry. LINATTN_TEST_CPU_OFF (tests only) removes features from the
 * mask, so one machine exercises every fallback (libdeflate's way): a
 * comma-separated list of avx2, fma, f16c, avx512, avx512bf16, asimd (avx512
 * also takes avx512bf16, which needs it); a name it does not know
 * removes every feature, so a typo cannot pass for a full CPU. */
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
                 {"f16c", LA_FEAT_F16C},
                 {"avx512", LA_FEAT_AVX512 | LA_FEAT_AVX512BF16},
                 {"avx512bf16", LA_FEAT_AVX512BF16},
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

/* The nearest machine a table has tuning entries for (tuning.h), by vendor
 * and family/model: AMD Zen 1-4 (families 0x17-0x19) take Zen 4's figures
 * (on Zen 3 none of the avx2 entry's fields tried measured better,
 * 2026-11-30), Zen 5 and later (0x1A on) Zen 5's where a table has them
 * (else its first entry, Zen 4's); an Intel core with AVX-512 usable
 * (Sapphire Rapids 143, Emerald Rapids 207, and the other Xeons, which like
 * them have two 512-bit FMA pipes on most parts) the Sapphire Rapids ones;
 * anything else each table's first entry. */
la_uarch la_uarch_of(const char *vendor, int family, int model, int avx512)
{
    (void)model; /* no entry tells models of one family apart yet */
    if (strcmp(vendor, "AuthenticAMD") == 0 && family >= 0x1a)
        return LA_UARCH_ZEN5;
    if (strcmp(vendor, "AuthenticAMD") == 0 && family >= 0x17)
        return LA_UARCH_ZEN4;
    if (strcmp(vendor, "GenuineIntel") == 0 && family == 6 && avx512)
        return LA_UARCH_SAPPHIRE_RAPIDS;
    return LA_UARCH_OTHER;
}

const char *la_uarch_name(la_uarch u)
{
    static const char *const names[LA_UARCH_COUNT] = {
        [LA_UARCH_OTHER] = "other",
        [LA_UARCH_ZEN4] = "zen4",
        [LA_UARCH_ZEN5] = "zen5",
        [LA_UARCH_SAPPHIRE_RAPIDS] = "sapphire_rapids",
    };
    return (unsigned)u < LA_UARCH_COUNT && names[u] ? names[u] : "unknown";
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
    if (f.f16c != 0)
        m |= LA_FEAT_F16C;
    if (f.avx512f != 0 && f.avx512vl != 0 && f.avx512bw != 0 && f.avx512dq != 0) {
        m |= LA_FEAT_AVX512;
        if (f.avx512_bf16 != 0)
            m |= LA_FEAT_AVX512BF16;
    }
    return m;
}

la_uarch la_cpu_uarch(void)
{
    const X86Info i = GetX86Info();
    return la_uarch_of(i.vendor, i.family, i.model, (la_cpu_features() & LA_FEAT_AVX512) != 0);
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

la_uarch la_cpu_uarch(void) { return LA_UARCH_OTHER; }

#else
static uint32_t detect(void) { return 0; }
la_uarch la_cpu_uarch(void) { return LA_UARCH_OTHER; }
#endif
