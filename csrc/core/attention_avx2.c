/* attention_avx2.c: the tiled fused attention of attention_simd.h on AVX2+FMA,
 * float, double, bfloat16 and float16 (micro-tiles of 6 rows x 2 vectors). */
#if defined(__x86_64__) || defined(_M_X64)
#include "simd_avx2.h"
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
typedef int wavepe_attention_avx2_unused;
#endif
