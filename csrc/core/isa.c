/* isa.c: CPU feature detection and the environment overrides. */
#include "isa.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#define WAVEPE_X86_64 1
#include <cpuid.h>
#endif

#ifdef WAVEPE_X86_64
static unsigned long long read_xcr0(void) {
    unsigned int eax, edx;
    /* xgetbv with ecx = 0; spelled as asm so the file needs no -mxsave. */
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static wavepe_isa detect_isa(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return WAVEPE_ISA_SCALAR;
    const int has_fma = (ecx >> 12) & 1;
    const int has_osxsave = (ecx >> 27) & 1;
    const int has_avx = (ecx >> 28) & 1;
    if (!(has_fma && has_osxsave && has_avx)) return WAVEPE_ISA_SCALAR;
    /* The OS must save the XMM and YMM registers (XCR0 bits 1 and 2). */
    if ((read_xcr0() & 0x6) != 0x6) return WAVEPE_ISA_SCALAR;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return WAVEPE_ISA_SCALAR;
    const int has_avx2 = (ebx >> 5) & 1;
    return has_avx2 ? WAVEPE_ISA_AVX2 : WAVEPE_ISA_SCALAR;
}
#else
static wavepe_isa detect_isa(void) { return WAVEPE_ISA_SCALAR; }
#endif

wavepe_isa wavepe_cpu_isa(void) {
    /* Benign race: every thread computes the same value. */
    static volatile int cached = -1;
    if (cached < 0) cached = (int)detect_isa();
    return (wavepe_isa)cached;
}

wavepe_isa wavepe_active_isa(void) {
    wavepe_isa isa = wavepe_cpu_isa();
    const char *force = getenv("WAVEPE_FORCE_SCALAR");
    if (force != NULL && force[0] != '\0' && strcmp(force, "0") != 0) return WAVEPE_ISA_SCALAR;
    const char *want = getenv("WAVEPE_ISA");
    if (want != NULL && strcmp(want, "scalar") == 0) return WAVEPE_ISA_SCALAR;
    return isa;
}

const char *wavepe_isa_name(wavepe_isa isa) {
    switch (isa) {
    case WAVEPE_ISA_AVX2: return "avx2";
    case WAVEPE_ISA_SCALAR: return "scalar";
    }
    return "unknown";
}
