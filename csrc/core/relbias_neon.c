/* relbias_neon.c: the relative-table bias kernels of relbias_simd.h on AArch64 NEON, float, double,
 * bfloat16 and float16. */
#if defined(__aarch64__)
#include "simd_neon.h"
#define WP_TYPE_F32
#include "relbias_simd.h"
#define WP_TYPE_F64
#include "relbias_simd.h"
#define WP_TYPE_BF16
#include "relbias_simd.h"
#define WP_TYPE_F16
#include "relbias_simd.h"
#else
typedef int wavepe_relbias_neon_unused;
#endif
