/* isa.h: which instruction set the kernels run with.
 *
 * Every hot loop has a scalar reference (always built) and, on x86-64, an
 * AVX2+FMA variant built from a *_avx2.c file.  Callers ask for the active ISA
 * once per operation (wavepe_active_isa) and pass it to the kernels, so one
 * operation never mixes variants even when the environment changes meanwhile.
 */
#ifndef WAVEPE_ISA_H
#define WAVEPE_ISA_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wavepe_isa {
    WAVEPE_ISA_SCALAR = 0,
    WAVEPE_ISA_AVX2 = 1 /* AVX2 + FMA3, with OS support for the YMM state */
} wavepe_isa;

/* The best ISA this CPU and OS support and this build contains (cached). */
wavepe_isa wavepe_cpu_isa(void);

/* wavepe_cpu_isa(), lowered by the environment, read on every call so that
 * tests can switch paths at run time:
 *   WAVEPE_FORCE_SCALAR=1          -> scalar
 *   WAVEPE_ISA=scalar|avx2         -> at most that ISA
 */
wavepe_isa wavepe_active_isa(void);

const char *wavepe_isa_name(wavepe_isa isa);

#ifdef __cplusplus
}
#endif
#endif
