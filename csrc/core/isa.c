/* isa.c: CPU feature detection and the environment overrides. */
#include "isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"

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
    const unsigned long long xcr0 = read_xcr0();
    /* The OS must save the XMM and YMM registers (XCR0 bits 1 and 2). */
    if ((xcr0 & 0x6) != 0x6) return WAVEPE_ISA_SCALAR;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return WAVEPE_ISA_SCALAR;
    const int has_avx2 = (ebx >> 5) & 1;
    if (!has_avx2) return WAVEPE_ISA_SCALAR;
    /* AVX-512 F (ebx 16), DQ (17), BW (30), VL (31), and the OS saving the
     * opmask, upper-ZMM and high-16-ZMM state (XCR0 bits 5, 6, 7). */
    const int has_avx512 = ((ebx >> 16) & 1) && ((ebx >> 17) & 1) && ((ebx >> 30) & 1) && ((ebx >> 31) & 1);
#if defined(WAVEPE_SIMDE_AVX512)
    /* test build: the AVX-512 kernels run on SIMDe's portable intrinsics */
    (void)has_avx512;
    return WAVEPE_ISA_AVX512;
#else
    if (has_avx512 && (xcr0 & 0xE0) == 0xE0) return WAVEPE_ISA_AVX512;
    return WAVEPE_ISA_AVX2;
#endif
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

/* The ISAs form a chain: a CPU that runs one runs every lower one. */
int wavepe_isa_supported(wavepe_isa isa) { return (int)isa >= 0 && (int)isa <= (int)wavepe_cpu_isa(); }

const char *wavepe_isa_name(wavepe_isa isa) {
    switch (isa) {
    case WAVEPE_ISA_AVX512: return "avx512";
    case WAVEPE_ISA_AVX2: return "avx2";
    case WAVEPE_ISA_SCALAR: return "scalar";
    }
    return "unknown";
}

int wavepe_active_isa_checked(wavepe_isa *isa, char *message, size_t message_len) {
    const wavepe_isa best = wavepe_cpu_isa();
    *isa = best;
    const char *force = getenv("WAVEPE_FORCE_SCALAR");
    if (force != NULL && force[0] != '\0' && strcmp(force, "0") != 0) {
        *isa = WAVEPE_ISA_SCALAR;
        return WAVEPE_OK;
    }
    const char *want = getenv("WAVEPE_ISA");
    if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) return WAVEPE_OK;
    for (int i = 0; i < WAVEPE_ISA_COUNT; ++i) {
        if (strcmp(want, wavepe_isa_name((wavepe_isa)i)) != 0) continue;
        if (wavepe_isa_supported((wavepe_isa)i)) {
            *isa = (wavepe_isa)i;
            return WAVEPE_OK;
        }
        if (message != NULL && message_len > 0)
            snprintf(message, message_len,
                     "WAVEPE_ISA=%s, but this CPU (or this build of wavepe) cannot run %s kernels; "
                     "the best it supports is %s (unset WAVEPE_ISA to use it)",
                     want, want, wavepe_isa_name(best));
        return WAVEPE_E_INVALID;
    }
    if (message != NULL && message_len > 0)
        snprintf(message, message_len,
                 "WAVEPE_ISA=%.40s is not an instruction set wavepe knows; use scalar, avx2, avx512 or auto "
                 "(this CPU supports up to %s)",
                 want, wavepe_isa_name(best));
    return WAVEPE_E_INVALID;
}

wavepe_isa wavepe_active_isa(void) {
    wavepe_isa isa;
    wavepe_active_isa_checked(&isa, NULL, 0);
    return isa;
}
