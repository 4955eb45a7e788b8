/* isa_dispatch.h: how a family's entry point picks its kernel variant
 * (internal to the core), generated from isa_table.h.
 *
 *   WAVEPE_ISA_CALL(isa, wavepe_alibi_f32, (a, begin, end));
 *
 * calls wavepe_alibi_f32_<kernel_isa> for the vector ISA `isa` names, when this
 * build has it -- <kernel_isa> the table's column: the ISA's own name, or that of
 * the ISA whose kernels it runs (avx512bf16 and amx: avx512's) -- and
 * wavepe_alibi_f32_scalar otherwise, inside the kernels'
 * floating-point environment (fpenv.h: flush-to-zero and denormals-are-zero,
 * the caller's state restored afterwards).
 *
 *   switch (isa) { WAVEPE_ISA_CASES(wavepe_relbias_f32, _chunks, (a), return); default: ... }
 *
 * are the cases of such a switch, one per vector ISA of this build:
 * `case WAVEPE_ISA_AVX2: return wavepe_relbias_f32_avx2_chunks(a);` (the
 * kernel's name is prefix_<kernel_isa>suffix; `stmt` is what precedes the call,
 * and a `break` follows it).  The attention, whose every ISA has kernels of
 * its own, dispatches through its phase tables (attention.c) instead.
 */
#ifndef WAVEPE_ISA_DISPATCH_H
#define WAVEPE_ISA_DISPATCH_H

#include "fpenv.h"
#include "isa.h"

#define WAVEPE_ISA_CASE_(ID, name, arch, lanes_f32, lanes_f64, bf16_engine, half_blocks, kernel_isa, prefix, suffix, \
                         args, stmt)                                                                               \
    WAVEPE_IF_VECTOR_##arch(case WAVEPE_ISA_##ID: stmt prefix##_##kernel_isa##suffix args; break;)
#define WAVEPE_ISA_CASES(prefix, suffix, args, stmt) WAVEPE_ISA_TABLE(WAVEPE_ISA_CASE_, prefix, suffix, args, stmt)

#define WAVEPE_ISA_SWITCH_(isa, name, args)                                                     \
    switch (isa) {                                                                              \
    WAVEPE_ISA_CASES(name, , args, )                                                            \
    default: name##_scalar args; break;                                                         \
    }

#define WAVEPE_ISA_CALL(isa, name, args)                                                        \
    do {                                                                                        \
        const wavepe_fpenv wavepe_env_ = wavepe_fpenv_enter();                                  \
        WAVEPE_ISA_SWITCH_(isa, name, args);                                                    \
        wavepe_fpenv_leave(wavepe_env_);                                                        \
    } while (0)

#endif
