/* wavelet_neon.c: the wavelet kernels of wavelet_simd.h on AArch64 NEON, float and double. */
#if defined(__aarch64__)
#include "simd_neon.h"
#include "vecmath.h"
#define WP_TYPE_F32
#include "wavelet_simd.h"
#define WP_TYPE_F64
#include "wavelet_simd.h"
#else
typedef int wavepe_wavelet_neon_unused;
#endif
