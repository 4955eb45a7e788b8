/* alibi_neon.c: the ALiBi kernels of alibi_simd.h on AArch64 NEON, float and double. */
#if defined(__aarch64__)
#include "simd_neon.h"
#define WP_TYPE_F32
#include "alibi_simd.h"
#define WP_TYPE_F64
#include "alibi_simd.h"
#else
typedef int wavepe_alibi_neon_unused;
#endif
