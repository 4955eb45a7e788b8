/* simd_type.h: binds the element type of a kernel template instantiation.
 *
 * A kernel template (`<family>_simd.h`) is written once over an element type
 * T and the vocabulary of simd_avx2.h / simd_avx512.h / simd_neon.h.  Before each inclusion
 * of the template, the instantiating file defines WP_TYPE_F32 or WP_TYPE_F64
 * and includes this header; after it, simd_type_end.h.  This header defines:
 *
 *   T        float / double          VT, MT   the vector and lane-mask types
 *   VL       lanes per vector        V(op)    the vocabulary op for T: V(fmadd) = vf32_fmadd
 *                                    M(op)    a lane-mask op: M(and) = mf32_and
 *   FN(x)    x_f32_avx2, x_f64_neon etc.: the name of x for this type and ISA (exported
 *            functions are named this way; static helpers too, to keep the
 *            two instantiations in one file apart)
 *   T_FMA    the scalar fused multiply-add of T (fmaf / fma)
 *
 * Templates that read and write half types (rope_simd.h, relbias_simd.h,
 * alibi_simd.h, attention_simd.h) also instantiate WP_TYPE_BF16 / WP_TYPE_F16:
 * the elements are stored as 16 bits and computed in float32 (T, VT, V(op)
 * are float32's).  For every type:
 *
 *   S                 the storage type of an element (T; uint16_t for half types)
 *   S_LOADU(p)        VL elements at p as a VT (widened)
 *   S_STOREU(p, v)    v stored at p (rounded to nearest even once, half.h)
 *   S_STOREU2(p, v0, v1)   2 VL elements, v0's first (one store where the ISA packs them)
 *   S_BCAST(p)        the element at p, widened, in every lane
 *   S_TO_T(x), T_TO_S(x)   one element, the same conversions
 *   WP_COMPUTE_F32    defined when T is float (f32, bf16, f16)
 *   WP_STORAGE_HALF   defined when S is a half type (bf16, f16)
 *
 * bfloat16 alone also has the parity-split access (cheaper than the above
 * where a kernel's elements come in pairs or their order is its own: no
 * widening shuffle, no pack; vf32_loadu_bf16_pairs in simd_avx2.h):
 *
 *   WP_STORAGE_PAIRS            defined for bf16
 *   S_LOADU_PAIRS(p, e, o)      2 VL elements at p: the even-indexed into *e, the odd into *o
 *   S_STOREU_PAIRS(p, e, o)     the inverse, each element rounded as S_STOREU
 */
#include <stdint.h>

#include "half.h"
#define WP_CAT_(a, b) a##b
#define WP_CAT(a, b) WP_CAT_(a, b)

#if defined(WP_TYPE_F32)
#define T float
#define VT vf32
#define MT mf32
#define VL WP_VL_F32
#define V(op) vf32_##op
#define M(op) mf32_##op
#define WP_TNAME f32
#define T_FMA fmaf
#define S float
#define S_LOADU(p) vf32_loadu(p)
#define S_STOREU(p, v) vf32_storeu(p, v)
#define S_STOREU2(p, v0, v1) (vf32_storeu(p, v0), vf32_storeu((p) + VL, v1))
#define S_BCAST(p) vf32_bcast(p)
#define S_TO_T(x) (x)
#define T_TO_S(x) (x)
#define WP_COMPUTE_F32
#elif defined(WP_TYPE_BF16) || defined(WP_TYPE_F16)
#define T float
#define VT vf32
#define MT mf32
#define VL WP_VL_F32
#define V(op) vf32_##op
#define M(op) mf32_##op
#define T_FMA fmaf
#define S uint16_t
#define WP_COMPUTE_F32
#define WP_STORAGE_HALF
#if defined(WP_TYPE_BF16)
#define WP_TNAME bf16
#define S_LOADU(p) vf32_loadu_bf16(p)
#define S_STOREU(p, v) vf32_storeu_bf16(p, v)
#define S_STOREU2(p, v0, v1) vf32_storeu2_bf16(p, v0, v1)
#define WP_STORAGE_PAIRS
#define S_LOADU_PAIRS(p, e, o) vf32_loadu_bf16_pairs(p, e, o)
#define S_STOREU_PAIRS(p, e, o) vf32_storeu_bf16_pairs(p, e, o)
#define S_BCAST(p) vf32_bcast_bf16(p)
#define S_TO_T(x) wp_bf16_to_f32(x)
#define T_TO_S(x) wp_f32_to_bf16(x)
#else
#define WP_TNAME f16
#define S_LOADU(p) vf32_loadu_f16(p)
#define S_STOREU(p, v) vf32_storeu_f16(p, v)
#define S_STOREU2(p, v0, v1) (vf32_storeu_f16(p, v0), vf32_storeu_f16((p) + VL, v1))
#define S_BCAST(p) vf32_bcast_f16(p)
#define S_TO_T(x) wp_f16_to_f32(x)
#define T_TO_S(x) wp_f32_to_f16(x)
#endif
#elif defined(WP_TYPE_F64)
#define T double
#define VT vf64
#define MT mf64
#define VL WP_VL_F64
#define V(op) vf64_##op
#define M(op) mf64_##op
#define WP_TNAME f64
#define T_FMA fma
#define S double
#define S_LOADU(p) vf64_loadu(p)
#define S_STOREU(p, v) vf64_storeu(p, v)
#define S_STOREU2(p, v0, v1) (vf64_storeu(p, v0), vf64_storeu((p) + VL, v1))
#define S_BCAST(p) vf64_bcast(p)
#define S_TO_T(x) (x)
#define T_TO_S(x) (x)
#else
#error "define WP_TYPE_F32, WP_TYPE_F64, WP_TYPE_BF16 or WP_TYPE_F16 before including simd_type.h"
#endif

#define FN(name) WP_CAT(WP_CAT(name##_, WP_TNAME), WP_CAT(_, WP_SIMD_NAME))
