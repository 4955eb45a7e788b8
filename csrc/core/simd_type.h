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
 */
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
#elif defined(WP_TYPE_F64)
#define T double
#define VT vf64
#define MT mf64
#define VL WP_VL_F64
#define V(op) vf64_##op
#define M(op) mf64_##op
#define WP_TNAME f64
#define T_FMA fma
#else
#error "define WP_TYPE_F32 or WP_TYPE_F64 before including simd_type.h"
#endif

#define FN(name) WP_CAT(WP_CAT(name##_, WP_TNAME), WP_CAT(_, WP_SIMD_NAME))
