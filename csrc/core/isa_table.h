/* isa_table.h: the one list of instruction sets wavepe has kernels for.
 *
 * Everything that depends on the set of ISAs is generated from this table:
 * the wavepe_isa enum and the names (isa.h, isa.c), which ISAs a build has
 * and how each is detected (isa.c), the per-ISA kernel prototypes of every
 * family header, the dispatch of every family (isa_dispatch.h) and the lane
 * counts the plans size their tiles with, and which matrix engines the
 * CPU attention runs on it (attention_engine.h).  Adding an ISA: a line here, a
 * vocabulary header simd_<name>.h, one instantiation file <family>_<name>.c
 * per family (the attention alone where kernel_isa names another ISA), a
 * detection function detect_<name>() in isa.c, and a build
 * rule for <family>_<name>.c (python/wavepe/_build/recipe.py SUFFIX_RULES).
 * An ISA that extends another may share its vocabulary and templates:
 * avx512bf16 is AVX-512 plus AVX512_BF16 (vdpbf16ps); attention_avx512bf16.c
 * defines WAVEPE_AVX512BF16 and includes attention_avx512.c, and
 * simd_avx512.h then names the kernels *_avx512bf16 and adds the bf16 dot
 * product, which only attention's bfloat16 kernels use (its PAIRS engine,
 * attention_engine_pairs.h).  amx is avx512bf16 with Intel's AMX tiles
 * (tiles.h): attention_amx.c defines WAVEPE_AMX and includes
 * attention_avx512bf16.c; the attention's bf16 / fp16 block products run on
 * tiles (its TILES block engine, attention_blocks_tiles.h) -- the
 * instructions, or their emulation on a CPU without them, where amx runs only
 * when asked for (WAVEPE_ISA=amx, the tests).  Those extensions serve the
 * attention alone, so the other families (wavelet, alibi, relbias, rope) run
 * their avx512 kernels on both ISAs (the kernel_isa column) and have no files
 * of theirs: their instantiations under the avx512bf16 and amx names were
 * the avx512 machine code again, instruction for instruction (objdump, GCC
 * 12, 2026-12-01) -- compiled, shipped and tested three times.
 *
 *   X(ID, name, arch, lanes_f32, lanes_f64, bf16_engine, half_blocks, kernel_isa, ...)
 *
 * ID     the enum constant WAVEPE_ISA_<ID>; the order of the lines is the
 *        order of the values (never reorder: 0 is scalar) and, among the
 *        ISAs a machine supports, the later one is preferred;
 * name   WAVEPE_ISA=<name>, wavepe.cpu_isa(), the suffix of the attention's
 *        kernels and instantiation file (attn_bwd_f32_<name>, attention_<name>.c)
 *        and, where kernel_isa is the same, of the other families' (wavepe_alibi_f32_<name>);
 * arch   the architecture whose builds compile the ISA's vector kernels
 *        (X86_64, AARCH64; NONE: the scalar reference, built everywhere);
 * lanes  elements per vector register for float32 / float64.
 * bf16_engine   the CPU attention's matrix engine for bfloat16 (attention_engine.h): FMA (vector
 *        fused multiply-adds on float32 operands, every type's on every ISA) or PAIRS (vdpbf16ps on
 *        bf16 pairs: the vocabulary's WP_HAS_DPBF16);
 * half_blocks   its block engine for bfloat16 and float16: NONE, or TILES (whole blocks on AMX tiles:
 *        the vocabulary's WP_HAS_TILES).  Each attention instantiation checks at compile time that the
 *        engines it was built with are its row's (attention_engine.h).
 * kernel_isa    the name of the ISA whose kernels the families other than attention run on this
 *        one: its own, or that of an ISA it extends whose kernels serve unchanged (above), which
 *        every CPU running this one runs too.  The dispatch (isa_dispatch.h) and the families'
 *        prototypes follow it; wavepe_isa_kernel_isa() reads it.
 * ...    passed through to X unchanged (callers' extra arguments).
 */
#ifndef WAVEPE_ISA_TABLE_H
#define WAVEPE_ISA_TABLE_H

#define WAVEPE_ISA_TABLE(X, ...)                                                                 \
    X(SCALAR, scalar, NONE, 1, 1, FMA, NONE, scalar, __VA_ARGS__)                                \
    X(AVX2, avx2, X86_64, 8, 4, FMA, NONE, avx2, __VA_ARGS__)                                    \
    X(AVX512, avx512, X86_64, 16, 8, FMA, NONE, avx512, __VA_ARGS__)                             \
    X(NEON, neon, AARCH64, 4, 2, FMA, NONE, neon, __VA_ARGS__)                                   \
    X(AVX512BF16, avx512bf16, X86_64, 16, 8, PAIRS, NONE, avx512, __VA_ARGS__)                   \
    X(AMX, amx, X86_64, 16, 8, PAIRS, TILES, avx512, __VA_ARGS__)

/* WAVEPE_IF_VECTOR_<arch>(...): its arguments where this build compiles the
 * vector kernels of <arch>, nothing elsewhere. */
#if defined(__x86_64__) || defined(_M_X64)
#define WAVEPE_IF_VECTOR_X86_64(...) __VA_ARGS__
#else
#define WAVEPE_IF_VECTOR_X86_64(...)
#endif
#if defined(__aarch64__)
#define WAVEPE_IF_VECTOR_AARCH64(...) __VA_ARGS__
#else
#define WAVEPE_IF_VECTOR_AARCH64(...)
#endif
#define WAVEPE_IF_VECTOR_NONE(...)

#endif
