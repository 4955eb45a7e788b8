/* alibi_neon.c: the ALiBi kernels of alibi_simd.h on AArch64 NEON, float, double,
 * bfloat16 and float16. */
#if defined(__aarch64__)
#include "simd_neon.h"
#define WP_TYPE_F32
#include "alibi_simd.h"
#define WP_TYPE_F64
#include "alibi_simd.h"
#define WP_TYPE_BF16
#include "alibi_simd.h"
#define WP_TYPE_F16
#include "alibi_simd.h"
#else
typedef int wavepe_alibi_neon_unused;
#endif
