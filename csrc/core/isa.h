/* isa.h: which instruction set the kernels run with.
 *
 * Every hot loop has a scalar reference (always built) and vector variants
 * compiled from one template per kernel family over a vector vocabulary
 * (simd_avx2.h, simd_avx512.h on x86-64; simd_neon.h on AArch64).  The ISAs
 * are listed once, in isa_table.h: AVX2+FMA (x86-64-v3), AVX-512 F/BW/VL/DQ
 * (x86-64-v4), AVX-512 with AVX512_BF16 (avx512bf16: the AVX-512 kernels, and
 * vdpbf16ps in the bf16 attention), amx (avx512bf16 and the attention's
 * half-type block products on AMX tiles), NEON (AArch64's Advanced SIMD).  Callers ask for the active ISA
 * once per operation and pass it to the kernels, so one operation never
 * mixes variants even when the environment changes meanwhile.
 */
#ifndef WAVEPE_ISA_H
#define WAVEPE_ISA_H

#include <stddef.h>

#include "isa_table.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WAVEPE_ISA_ENUM_(ID, ...) WAVEPE_ISA_##ID,
typedef enum wavepe_isa { WAVEPE_ISA_TABLE(WAVEPE_ISA_ENUM_, _) } wavepe_isa;
#undef WAVEPE_ISA_ENUM_
#define WAVEPE_ISA_COUNT_(...) +1
enum { WAVEPE_ISA_COUNT = 0 WAVEPE_ISA_TABLE(WAVEPE_ISA_COUNT_, _) };
#undef WAVEPE_ISA_COUNT_

/* The best ISA this CPU and OS support and this build contains (cached):
 * of those supported, the one listed last in isa_table.h -- except amx
 * where its tiles are only emulated, and avx512bf16 on Intel CPUs (slower
 * than avx512 there: isa.c, preferred()). */
wavepe_isa wavepe_cpu_isa(void);

/* Whether `isa` can run here: this build has its kernels, and the CPU and
 * the OS support it (each ISA detected on its own: an ISA of another
 * architecture is never supported). */
int wavepe_isa_supported(wavepe_isa isa);

/* The ISA kernels use now: wavepe_cpu_isa(), or what the environment asks
 * for, read on every call so that tests can switch variants at run time:
 *   WAVEPE_ISA=<name>               exactly that ISA (a name of isa_table.h;
 *                                   auto or empty: the best)
 *   WAVEPE_FORCE_SCALAR=1           scalar (older spelling; wins over WAVEPE_ISA)
 * Returns WAVEPE_OK with *isa set, or WAVEPE_E_INVALID when WAVEPE_ISA names
 * an unknown ISA or one this machine cannot run; then `message` (if not
 * NULL) receives a sentence naming the variable, its value and what this CPU
 * supports, and *isa the best supported ISA. */
int wavepe_active_isa_checked(wavepe_isa *isa, char *message, size_t message_len);

/* wavepe_active_isa_checked without the error: an unusable request falls
 * back to wavepe_cpu_isa().  For callers that report errors elsewhere. */
wavepe_isa wavepe_active_isa(void);

/* The table's name of `isa` ("unknown" for a value outside it). */
const char *wavepe_isa_name(wavepe_isa isa);

/* Elements per vector of `isa` for float32 / float64 (1 for scalar). */
int wavepe_isa_lanes_f32(wavepe_isa isa);
int wavepe_isa_lanes_f64(wavepe_isa isa);

/* The ISA whose kernels the families other than attention (wavelet, alibi,
 * relbias, rope) run on `isa`: isa_table.h's kernel_isa -- `isa` itself, or
 * the ISA it extends (avx512 for avx512bf16 and amx); scalar for a value
 * outside the table. */
wavepe_isa wavepe_isa_kernel_isa(wavepe_isa isa);

#ifdef __cplusplus
}
#endif
#endif
