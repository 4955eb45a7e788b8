/* isa_dispatch.h: how a family's entry point picks its kernel variant
 * (internal to the core).
 *
 *   WAVEPE_ISA_CALL(isa, wavepe_alibi_f32, (a, begin, end));
 *
 * calls wavepe_alibi_f32_avx512 / _avx2 / _scalar by `isa`, inside the
 * kernels' floating-point environment (fpenv.h: flush-to-zero and
 * denormals-are-zero, the caller's state restored afterwards).  Builds for
 * other architectures have only the scalar variants.
 */
#ifndef WAVEPE_ISA_DISPATCH_H
#define WAVEPE_ISA_DISPATCH_H

#include "fpenv.h"
#include "isa.h"

#if defined(__x86_64__) || defined(_M_X64)
#define WAVEPE_HAVE_X86_KERNELS 1
#define WAVEPE_ISA_SWITCH_(isa, name, args)                                                     \
    switch (isa) {                                                                              \
    case WAVEPE_ISA_AVX512: name##_avx512 args; break;                                          \
    case WAVEPE_ISA_AVX2: name##_avx2 args; break;                                              \
    default: name##_scalar args; break;                                                         \
    }
#else
#define WAVEPE_ISA_SWITCH_(isa, name, args) ((void)(isa), name##_scalar args)
#endif

#define WAVEPE_ISA_CALL(isa, name, args)                                                        \
    do {                                                                                        \
        const wavepe_fpenv wavepe_env_ = wavepe_fpenv_enter();                                  \
        WAVEPE_ISA_SWITCH_(isa, name, args);                                                    \
        wavepe_fpenv_leave(wavepe_env_);                                                        \
    } while (0)

#endif
