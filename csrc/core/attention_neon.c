/* attention_neon.c: the tiled fused attention of attention_simd.h on AArch64 NEON,
 * float, double, bfloat16 and float16. */
#if defined(__aarch64__)
#include "simd_neon.h"
#include "vecmath.h"
#define WP_TYPE_F32
#include "attention_simd.h"
#define WP_TYPE_F64
#include "attention_simd.h"
#define WP_TYPE_BF16
#include "attention_simd.h"
#define WP_TYPE_F16
#include "attention_simd.h"
#else
typedef int wavepe_attention_neon_unused;
#endif
