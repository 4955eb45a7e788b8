/* isa.c: CPU feature detection and the environment overrides.  Every ISA of
 * isa_table.h that this build compiles has a detect_<name>() here. */
#include "isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "tiles.h"
#include "xcr0.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>

/* AVX2 + FMA3, with the OS saving the XMM and YMM registers (XCR0 bits 1, 2). */
static int detect_avx2(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    const int has_fma = (ecx >> 12) & 1;
    const int has_osxsave = (ecx >> 27) & 1;
    const int has_avx = (ecx >> 28) & 1;
    const int has_f16c = (ecx >> 29) & 1; /* float16 <-> float32 (every AVX2 CPU has it) */
    if (!(has_fma && has_osxsave && has_avx && has_f16c)) return 0;
    if ((wavepe_xcr0() & 0x6) != 0x6) return 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    return (ebx >> 5) & 1;
}

/* AVX-512 F (ebx 16), DQ (17), BW (30), VL (31) with AVX2 + FMA, and the OS
 * saving the opmask, upper-ZMM and high-16-ZMM state (XCR0 bits 5, 6, 7). */
static int detect_avx512(void) {
    if (!detect_avx2()) return 0;
#if defined(WAVEPE_SIMDE_AVX512)
    /* test build: the AVX-512 kernels run on SIMDe's portable intrinsics */
    return 1;
#else
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    const int has_avx512 = ((ebx >> 16) & 1) && ((ebx >> 17) & 1) && ((ebx >> 30) & 1) && ((ebx >> 31) & 1);
    return has_avx512 && (wavepe_xcr0() & 0xE0) == 0xE0;
#endif
}

/* AVX-512 as above, plus AVX512_BF16 (cpuid leaf 7 subleaf 1, eax bit 5:
 * vdpbf16ps, vcvtne2ps2bf16), which uses no state beyond AVX-512's. */
static int detect_avx512bf16(void) {
    if (!detect_avx512()) return 0;
#if defined(WAVEPE_SIMDE_AVX512)
    return 1; /* test build: SIMDe emulates vdpbf16ps too */
#else
    unsigned int eax, ebx, ecx, edx;
    /* leaf 7 subleaf 0's eax: the last subleaf there is */
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || eax < 1) return 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return 0;
    return (eax >> 5) & 1;
#endif
}
#endif

#if defined(__aarch64__)
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1) /* arch/arm64/include/uapi/asm/hwcap.h */
#endif
#endif

/* Advanced SIMD: every AArch64 CPU that runs a general-purpose OS has it,
 * but the architecture lets an implementation leave it out, and Linux says
 * which through HWCAP_ASIMD; elsewhere the compiler's __ARM_NEON (the
 * platform ABI's baseline) is the guarantee. */
static int detect_neon(void) {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#elif defined(__ARM_NEON)
    return 1;
#else
    return 0;
#endif
}
#endif

#if defined(__x86_64__) || defined(_M_X64)
/* avx512bf16 with Intel's AMX tiles (tiles.h): runs wherever avx512bf16 runs -- on tiles where the CPU
 * has them, through their emulation elsewhere (then never the default: preferred()). */
static int detect_amx(void) { return detect_avx512bf16(); }

/* Whether the CPU is an Intel one (cpuid leaf 0's vendor string). */
static int intel_cpu(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return 0;
    return ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu; /* "Genu" "ineI" "ntel" */
}
#endif

static int detect_scalar(void) { return 1; }

/* One detector per ISA this build compiles (the others stay NULL). */
#define DETECTOR_(ID, name, arch, ...) WAVEPE_IF_VECTOR_##arch([WAVEPE_ISA_##ID] = detect_##name, )
static int (*const detectors[WAVEPE_ISA_COUNT])(void) = {
    [WAVEPE_ISA_SCALAR] = detect_scalar,
    WAVEPE_ISA_TABLE(DETECTOR_, _)
};
#undef DETECTOR_

/* Bit i: ISA i runs here.  Benign race: every thread computes the same value. */
static unsigned supported_mask(void) {
    static volatile int cached = -1;
    if (cached < 0) {
        unsigned mask = 0;
        for (int i = 0; i < WAVEPE_ISA_COUNT; ++i)
            if (detectors[i] != NULL && detectors[i]()) mask |= 1u << i;
        cached = (int)mask;
    }
    return (unsigned)cached;
}

int wavepe_isa_supported(wavepe_isa isa) {
    return (int)isa >= 0 && (int)isa < WAVEPE_ISA_COUNT && ((supported_mask() >> (int)isa) & 1u);
}

/* Whether a supported ISA may be the default: every one but amx without the tile instructions (its
 * emulation is for the tests) and, on Intel CPUs, avx512bf16 -- measured there (Sapphire Rapids class,
 * 2026-11-25) 1.57x the time of avx512 for the bf16 forward (vdpbf16ps is slower than widening bf16 to
 * float32 and using FMAs), where on AMD Zen 4 it is 0.61x (docs/benchmarks.md). */
static int preferred(wavepe_isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
    if (isa == WAVEPE_ISA_AMX) return wavepe_tiles_hardware(NULL);
    if (isa == WAVEPE_ISA_AVX512BF16) return !intel_cpu();
#endif
    (void)isa;
    return 1;
}

wavepe_isa wavepe_cpu_isa(void) {
    static volatile int cached = -1;
    if (cached < 0) {
        int best = WAVEPE_ISA_SCALAR;
        for (int i = 0; i < WAVEPE_ISA_COUNT; ++i)
            if (wavepe_isa_supported((wavepe_isa)i) && preferred((wavepe_isa)i)) best = i;
        cached = best;
    }
    return (wavepe_isa)cached;
}

#define NAME_(ID, name, ...) [WAVEPE_ISA_##ID] = #name,
static const char *const names[WAVEPE_ISA_COUNT] = {WAVEPE_ISA_TABLE(NAME_, _)};
#undef NAME_
#define NAME_LIST_(ID, name, ...) #name ", "
static const char name_list[] = WAVEPE_ISA_TABLE(NAME_LIST_, _) "or auto";
#undef NAME_LIST_

const char *wavepe_isa_name(wavepe_isa isa) {
    return (int)isa >= 0 && (int)isa < WAVEPE_ISA_COUNT ? names[isa] : "unknown";
}

#define LANES_F32_(ID, name, arch, f32, f64, ...) [WAVEPE_ISA_##ID] = f32,
#define LANES_F64_(ID, name, arch, f32, f64, ...) [WAVEPE_ISA_##ID] = f64,
static const int lanes_f32[WAVEPE_ISA_COUNT] = {WAVEPE_ISA_TABLE(LANES_F32_, _)};
static const int lanes_f64[WAVEPE_ISA_COUNT] = {WAVEPE_ISA_TABLE(LANES_F64_, _)};
#undef LANES_F32_
#undef LANES_F64_

int wavepe_isa_lanes_f32(wavepe_isa isa) { return (int)isa >= 0 && (int)isa < WAVEPE_ISA_COUNT ? lanes_f32[isa] : 1; }
int wavepe_isa_lanes_f64(wavepe_isa isa) { return (int)isa >= 0 && (int)isa < WAVEPE_ISA_COUNT ? lanes_f64[isa] : 1; }

/* kernel_isa names an ISA by its name; the enum constant of each name, to read the column into values */
#define NAMED_(ID, name, ...) isa_named_##name = WAVEPE_ISA_##ID,
enum { WAVEPE_ISA_TABLE(NAMED_, _) };
#undef NAMED_
#define KERNEL_ISA_(ID, name, arch, f32, f64, bf16, blocks, kernel_isa, ...) [WAVEPE_ISA_##ID] = isa_named_##kernel_isa,
static const unsigned char kernel_isas[WAVEPE_ISA_COUNT] = {WAVEPE_ISA_TABLE(KERNEL_ISA_, _)};
#undef KERNEL_ISA_

wavepe_isa wavepe_isa_kernel_isa(wavepe_isa isa) {
    return (int)isa >= 0 && (int)isa < WAVEPE_ISA_COUNT ? (wavepe_isa)kernel_isas[isa] : WAVEPE_ISA_SCALAR;
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
        if (strcmp(want, names[i]) != 0) continue;
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
                 "WAVEPE_ISA=%.40s is not an instruction set wavepe knows; use %s "
                 "(this CPU supports up to %s)",
                 want, name_list, wavepe_isa_name(best));
    return WAVEPE_E_INVALID;
}

wavepe_isa wavepe_active_isa(void) {
    wavepe_isa isa;
    wavepe_active_isa_checked(&isa, NULL, 0);
    return isa;
}
