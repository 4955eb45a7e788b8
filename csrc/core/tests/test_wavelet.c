/* test_wavelet.c: the wavelet kernels, scalar vs AVX2, and the support. */
#include <math.h>
#include <stdint.h>

#include "../checked.h"
#include "../wavelet.h"
#include "harness.h"

static double psi_formula(wavepe_wavelet w, double t) {
    switch (w) {
    case WAVEPE_WAVELET_RICKER: return (1 - t * t) * exp(-t * t / 2);
    case WAVEPE_WAVELET_GAUSSIAN: return -t * exp(-t * t / 2);
    case WAVEPE_WAVELET_MORLET: return cos(5 * t) * exp(-t * t / 2);
    case WAVEPE_WAVELET_HAAR: return (t >= 0 && t < 0.5) ? 1.0 : (t >= 0.5 && t < 1.0) ? -1.0 : 0.0;
    }
    return NAN;
}

void test_wavelet(void) {
    enum { N = 1003 }; /* not a multiple of the vector width: exercises the tail */
    float x32[N], y32s[N], y32v[N];
    double x64[N], y64s[N], y64v[N];
    unsigned long long seed = 42;
    for (int i = 0; i < N; ++i) {
        x64[i] = test_uniform(&seed, -20.0, 20.0);
        x32[i] = (float)x64[i];
    }
    for (int w = 0; w < WAVEPE_WAVELET_COUNT; ++w) {
        wavepe_wavelet_f32(WAVEPE_ISA_SCALAR, (wavepe_wavelet)w, N, x32, 1, y32s, 1);
        wavepe_wavelet_f64(WAVEPE_ISA_SCALAR, (wavepe_wavelet)w, N, x64, 1, y64s, 1);
        wavepe_wavelet_f32(wavepe_test_isa, (wavepe_wavelet)w, N, x32, 1, y32v, 1);
        wavepe_wavelet_f64(wavepe_test_isa, (wavepe_wavelet)w, N, x64, 1, y64v, 1);
        for (int i = 0; i < N; ++i) {
            const double t = x64[i], env = exp(-t * t / 2) * (1 + t * t) * (1 + fabs(5 * t));
            CHECK_CLOSE(y64s[i], psi_formula((wavepe_wavelet)w, t), 1e-14, 1e-15 * env);
            CHECK_CLOSE(y64v[i], y64s[i], 1e-14, 1e-14 * env);
            CHECK_CLOSE(y32v[i], y32s[i], 2e-6, 1e-6 * env + 1e-44);
        }
        /* strided, in place */
        double buf[2 * 64];
        for (int i = 0; i < 64; ++i) buf[2 * i] = x64[i];
        wavepe_wavelet_f64(wavepe_test_isa, (wavepe_wavelet)w, 64, buf, 2, buf, 2);
        for (int i = 0; i < 64; ++i) CHECK_CLOSE(buf[2 * i], y64v[i], 0, 0); /* same kernel, same bits */
        /* special values */
        const double specials[4] = {INFINITY, -INFINITY, 1e300, NAN};
        double out[4];
        wavepe_wavelet_f64(wavepe_test_isa, (wavepe_wavelet)w, 4, specials, 1, out, 1);
        CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0 && isnan(out[3]));
    }
    /* support: every kernel gives exactly zero in float32 beyond t_hi (below
     * the normal range: flushed), and not zero before */
    double lo, hi;
    CHECK(wavepe_wavelet_support_t(WAVEPE_WAVELET_RICKER, 0, 0.0, &lo, &hi) == WAVEPE_OK);
    CHECK(hi > 13.0 && hi < 15.5 && lo == -hi);
    for (int v = 0; v < 2; ++v) {
        const wavepe_isa isa = v ? wavepe_test_isa : WAVEPE_ISA_SCALAR;
        const float beyond = (float)(hi * 1.0001), before = (float)(hi * 0.99);
        float y_beyond, y_before;
        wavepe_wavelet_f32(isa, WAVEPE_WAVELET_RICKER, 1, &beyond, 1, &y_beyond, 1);
        wavepe_wavelet_f32(isa, WAVEPE_WAVELET_RICKER, 1, &before, 1, &y_before, 1);
        CHECK(y_beyond == 0.0f && y_before != 0.0f);
    }
    CHECK(wavepe_wavelet_support_t(WAVEPE_WAVELET_HAAR, 0, 0.0, &lo, &hi) == WAVEPE_OK && lo == 0 && hi == 1);
    CHECK(wavepe_wavelet_support_t(WAVEPE_WAVELET_RICKER, 0, NAN, &lo, &hi) == WAVEPE_E_INVALID);
    CHECK(wavepe_wavelet_support_t(WAVEPE_WAVELET_RICKER, 0, 1.0, &lo, &hi) == WAVEPE_E_INVALID);
    CHECK(wavepe_wavelet_support_t((wavepe_wavelet)7, 0, 0.0, &lo, &hi) == WAVEPE_E_INVALID);
    CHECK_CLOSE(wavepe_wavelet_peak(WAVEPE_WAVELET_GAUSSIAN), exp(-0.5), 1e-12, 0);
    CHECK_CLOSE(wavepe_wavelet_peak(WAVEPE_WAVELET_RICKER), 1.0, 1e-12, 0);
}
