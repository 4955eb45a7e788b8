/* isa.h: which instruction set the kernels run with.
 *
 * Every hot loop has a scalar reference (always built) and, on x86-64,
 * vector variants compiled from one template per kernel family (simd_avx2.h,
 * simd_avx512.h): AVX2+FMA (x86-64-v3) and AVX-512 F/BW/VL/DQ (x86-64-v4).
 * Callers ask for the active ISA once per operation and pass it to the
 * kernels, so one operation never mixes variants even when the environment
 * changes meanwhile.
 */
#ifndef WAVEPE_ISA_H
#define WAVEPE_ISA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wavepe_isa {
    WAVEPE_ISA_SCALAR = 0,
    WAVEPE_ISA_AVX2 = 1,  /* AVX2 + FMA3, with OS support for the YMM state */
    WAVEPE_ISA_AVX512 = 2 /* AVX-512 F, BW, VL, DQ (+ AVX2, FMA), with OS support for ZMM and opmask state */
} wavepe_isa;
#define WAVEPE_ISA_COUNT 3

/* The best ISA this CPU and OS support and this build contains (cached). */
wavepe_isa wavepe_cpu_isa(void);

/* Whether `isa` can run here (CPU, OS and build). */
int wavepe_isa_supported(wavepe_isa isa);

/* The ISA kernels use now: wavepe_cpu_isa(), or what the environment asks
 * for, read on every call so that tests can switch variants at run time:
 *   WAVEPE_ISA=scalar|avx2|avx512   exactly that ISA (auto or empty: the best)
 *   WAVEPE_FORCE_SCALAR=1           scalar (older spelling; wins over WAVEPE_ISA)
 * Returns WAVEPE_OK with *isa set, or WAVEPE_E_INVALID when WAVEPE_ISA names
 * an unknown ISA or one this machine cannot run; then `message` (if not
 * NULL) receives a sentence naming the variable, its value and what this CPU
 * supports, and *isa the best supported ISA. */
int wavepe_active_isa_checked(wavepe_isa *isa, char *message, size_t message_len);

/* wavepe_active_isa_checked without the error: an unusable request falls
 * back to wavepe_cpu_isa().  For callers that report errors elsewhere. */
wavepe_isa wavepe_active_isa(void);

const char *wavepe_isa_name(wavepe_isa isa);

#ifdef __cplusplus
}
#endif
#endif
