/* alibi_avx2.c: the ALiBi kernels of alibi_simd.h on AVX2+FMA, float, double,
 * bfloat16 and float16. */
#if defined(__x86_64__) || defined(_M_X64)
#include "simd_avx2.h"
#define WP_TYPE_F32
#include "alibi_simd.h"
#define WP_TYPE_F64
#include "alibi_simd.h"
#define WP_TYPE_BF16
#include "alibi_simd.h"
#define WP_TYPE_F16
#include "alibi_simd.h"
#else
typedef int wavepe_alibi_avx2_unused;
#endif
