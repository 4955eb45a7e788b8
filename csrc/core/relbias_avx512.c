/* relbias_avx512.c: the relative-table bias kernels of relbias_simd.h on AVX-512,
 * float, double, bfloat16 and float16 (see relbias_simd.h for the algorithms). */
#if defined(__x86_64__) || defined(_M_X64)
#include "simd_avx512.h"
#define WP_TYPE_F32
#include "relbias_simd.h"
#define WP_TYPE_F64
#include "relbias_simd.h"
#define WP_TYPE_BF16
#include "relbias_simd.h"
#define WP_TYPE_F16
#include "relbias_simd.h"
#else
typedef int wavepe_relbias_avx512_unused;
#endif
