/* The only file that asks the CPU what it can do. The dispatcher calls
 * la_cpu_has once per ISA, in its one-time init, and caches the answers. */
#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpu_features/cpuinfo_x86.h>

int la_cpu_has(linattn_isa isa)
{
    /* cpu_features clears the AVX/AVX-512 bits when the OS does not save
     * those registers, so these bits mean "usable". They are 1-bit signed
     * bitfields: compare with 0. */
    const X86Features f = GetX86Info().features;
    switch (isa) {
    case LINATTN_ISA_SCALAR: return 1;
    case LINATTN_ISA_AVX2: return f.avx2 != 0 && f.fma3 != 0;
    case LINATTN_ISA_AVX512:
        return f.avx512f != 0 && f.avx512vl != 0 && f.avx512bw != 0 && f.avx512dq != 0 &&
               f.fma3 != 0;
    default: return 0;
    }
}

#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>

int la_cpu_has(linattn_isa isa)
{
    /* getauxval, not cpu_features 0.7: when AT_HWCAP2 is 0 (QEMU cortex-a72)
     * GetAarch64Info prints to stdout, and a library's stdout must stay clean. */
    switch (isa) {
    case LINATTN_ISA_SCALAR: return 1;
    case LINATTN_ISA_NEON: return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
    default: return 0;
    }
}

#else
int la_cpu_has(linattn_isa isa) { return isa == LINATTN_ISA_SCALAR; }
#endif
