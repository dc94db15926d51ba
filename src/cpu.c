/* The only file that asks the CPU what it can do: a mask of LA_FEAT_* bits,
 * read once by the registry. */
#include "table.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpu_features/cpuinfo_x86.h>

uint32_t la_cpu_features(void)
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

uint32_t la_cpu_features(void)
{
    /* getauxval, not cpu_features 0.7: when AT_HWCAP2 is 0 (QEMU cortex-a72)
     * GetAarch64Info prints to stdout, and a library's stdout must stay clean. */
    return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0 ? LA_FEAT_ASIMD : 0;
}

#else
uint32_t la_cpu_features(void) { return 0; }
#endif
