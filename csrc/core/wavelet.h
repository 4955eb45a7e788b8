/* wavelet.h: the four mother wavelets psi(t) of the wavelet position encoding.
 *
 * Amplitudes are not normalised (eq. 8 of Oka et al., ICLR 2025):
 *   ricker    (1 - t^2) exp(-t^2 / 2)        "Mexican hat"
 *   gaussian  -t exp(-t^2 / 2)               first derivative of a Gaussian
 *   morlet    cos(5 t) exp(-t^2 / 2)         real Morlet
 *   haar      1 on [0, 1/2), -1 on [1/2, 1), 0 elsewhere
 * psi(+-inf) = 0 and psi(NaN) = NaN for every family.  The dispatched kernels
 * run with subnormals flushed (fpenv.h): a subnormal t reads as 0 and results
 * below the normal range are 0.
 */
#ifndef WAVEPE_WAVELET_H
#define WAVEPE_WAVELET_H

#include <stdint.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wavepe_wavelet {
    WAVEPE_WAVELET_RICKER = 0,
    WAVEPE_WAVELET_GAUSSIAN = 1,
    WAVEPE_WAVELET_MORLET = 2,
    WAVEPE_WAVELET_HAAR = 3
} wavepe_wavelet;
#define WAVEPE_WAVELET_COUNT 4

const char *wavepe_wavelet_name(wavepe_wavelet w);

/* One value, scalar reference.  The float32 version evaluates in double and
 * rounds once, so it is the correctly rounded-ish value of psi at that float. */
double wavepe_psi_f64(wavepe_wavelet w, double t);
float wavepe_psi_f32(wavepe_wavelet w, float t);

/* y[i * sy] = psi(x[i * sx]) for i in [0, n); strides in elements (any sign).
 * Dispatches on isa; x and y may alias exactly (in place) but not partially. */
void wavepe_wavelet_f32(wavepe_isa isa, wavepe_wavelet w, int64_t n, const float *x, int64_t sx,
                        float *y, int64_t sy);
void wavepe_wavelet_f64(wavepe_isa isa, wavepe_wavelet w, int64_t n, const double *x, int64_t sx,
                        double *y, int64_t sy);

/* The variants behind the dispatch, one pair per kernel_isa of isa_table.h
 * (avx512bf16 and amx run avx512's; the vector ones exist in builds for
 * their architecture only). */
#define WAVEPE_WAVELET_KERNELS_(ID, name, arch, l32, l64, bf16, blocks, kernel_isa, ...) \
    void wavepe_wavelet_f32_##kernel_isa(wavepe_wavelet w, int64_t n, const float *x, int64_t sx, float *y, \
                                   int64_t sy);                                                  \
    void wavepe_wavelet_f64_##kernel_isa(wavepe_wavelet w, int64_t n, const double *x, int64_t sx, double *y, \
                                   int64_t sy);
WAVEPE_ISA_TABLE(WAVEPE_WAVELET_KERNELS_, _)
#undef WAVEPE_WAVELET_KERNELS_

/* max |psi(t)| over t, found numerically (golden-section search on a grid). */
double wavepe_wavelet_peak(wavepe_wavelet w);

/* The support of psi in t, computed numerically for a precision:
 * outside [*t_lo, *t_hi] |psi| is below half the smallest normal number of
 * that precision (double_precision = 0: float32, 1: float64), so the kernels,
 * which flush subnormal results (fpenv.h), give exactly zero there; or, with
 * tol > 0, |psi| stays at or below tol * wavepe_wavelet_peak(w) outside.
 * For haar the support is [0, 1] (psi(1) itself is 0).
 * Returns WAVEPE_OK, or WAVEPE_E_INVALID for an unknown family or a tol that
 * is negative, NaN or >= 1. */
int wavepe_wavelet_support_t(wavepe_wavelet w, int double_precision, double tol, double *t_lo,
                             double *t_hi);

#ifdef __cplusplus
}
#endif
#endif
