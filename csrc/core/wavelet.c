/* wavelet.c: scalar reference of the mother wavelets, their peak and support. */
#include "wavelet.h"

#include <float.h>
#include <math.h>

#include "checked.h"
#include "isa_dispatch.h"

const char *wavepe_wavelet_name(wavepe_wavelet w) {
    switch (w) {
    case WAVEPE_WAVELET_RICKER: return "ricker";
    case WAVEPE_WAVELET_GAUSSIAN: return "gaussian";
    case WAVEPE_WAVELET_MORLET: return "morlet";
    case WAVEPE_WAVELET_HAAR: return "haar";
    }
    return "unknown";
}

double wavepe_psi_f64(wavepe_wavelet w, double t) {
    if (w == WAVEPE_WAVELET_HAAR) {
        if (isnan(t)) return t;
        if (t >= 0.0 && t < 0.5) return 1.0;
        if (t >= 0.5 && t < 1.0) return -1.0;
        return 0.0;
    }
    const double t2 = t * t;
    /* Far in the tail the envelope alone is below the normal range while the
     * product with the polynomial factor (up to ~t^2) is not: form it scaled
     * by e^700 and apply e^-700 last, so that a flushed intermediate (the
     * kernels run with flush-to-zero) never loses a normal result. */
    const int far = t2 > 1400.0;
    const double envelope = exp(-0.5 * t2 + (far ? 700.0 : 0.0));
    const double post = far ? 9.85967654375977e-305 : 1.0; /* e^-700 */
    /* Where the envelope underflows the product is 0, also for t = +-inf,
     * where the polynomial factor would turn 0 * inf into NaN. */
    if (envelope == 0.0) return 0.0;
    switch (w) {
    case WAVEPE_WAVELET_RICKER: return (1.0 - t2) * envelope * post;
    case WAVEPE_WAVELET_GAUSSIAN: return -t * envelope * post;
    case WAVEPE_WAVELET_MORLET: return cos(5.0 * t) * envelope * post;
    case WAVEPE_WAVELET_HAAR: break;
    }
    return NAN;
}

float wavepe_psi_f32(wavepe_wavelet w, float t) { return (float)wavepe_psi_f64(w, (double)t); }

void wavepe_wavelet_f32_scalar(wavepe_wavelet w, int64_t n, const float *x, int64_t sx, float *y,
                               int64_t sy) {
    for (int64_t i = 0; i < n; ++i) y[i * sy] = wavepe_psi_f32(w, x[i * sx]);
}

void wavepe_wavelet_f64_scalar(wavepe_wavelet w, int64_t n, const double *x, int64_t sx, double *y,
                               int64_t sy) {
    for (int64_t i = 0; i < n; ++i) y[i * sy] = wavepe_psi_f64(w, x[i * sx]);
}

void wavepe_wavelet_f32(wavepe_isa isa, wavepe_wavelet w, int64_t n, const float *x, int64_t sx,
                        float *y, int64_t sy) {
    WAVEPE_ISA_CALL(isa, wavepe_wavelet_f32, (w, n, x, sx, y, sy));
}

void wavepe_wavelet_f64(wavepe_isa isa, wavepe_wavelet w, int64_t n, const double *x, int64_t sx,
                        double *y, int64_t sy) {
    WAVEPE_ISA_CALL(isa, wavepe_wavelet_f64, (w, n, x, sx, y, sy));
}

/* ---- peak ------------------------------------------------------------- */

static double abs_psi(wavepe_wavelet w, double t) { return fabs(wavepe_psi_f64(w, t)); }

double wavepe_wavelet_peak(wavepe_wavelet w) {
    /* Coarse grid over [-8, 8] (every family's envelope is below 1e-13 out
     * there), then golden-section refinement around the best grid point. */
    const double lo = -8.0, step = 1.0 / 256.0;
    double best_t = lo, best = -1.0;
    for (int i = 0; i <= 16 * 256; ++i) {
        const double t = lo + i * step;
        const double v = abs_psi(w, t);
        if (v > best) {
            best = v;
            best_t = t;
        }
    }
    if (w == WAVEPE_WAVELET_HAAR) return best; /* piecewise constant */
    const double g = 0.5 * (sqrt(5.0) - 1.0);
    double a = best_t - step, b = best_t + step;
    double c = b - g * (b - a), d = a + g * (b - a);
    for (int it = 0; it < 200 && b - a > 1e-15; ++it) {
        if (abs_psi(w, c) > abs_psi(w, d)) b = d;
        else a = c;
        c = b - g * (b - a);
        d = a + g * (b - a);
    }
    const double refined = abs_psi(w, 0.5 * (a + b));
    return refined > best ? refined : best;
}

/* ---- support ---------------------------------------------------------- */

/* log of an upper bound of |psi(t)| for t >= 2 that decreases in t: the
 * polynomial factor's magnitude times the envelope, in the log domain so that
 * the bound itself never underflows before the true product does (a kernel
 * may form factor * exp(-t^2/2) without the intermediate underflow). */
static double tail_log_bound(wavepe_wavelet w, double t) {
    const double log_envelope = -0.5 * t * t;
    switch (w) {
    case WAVEPE_WAVELET_RICKER: return log(t * t - 1.0) + log_envelope;
    case WAVEPE_WAVELET_GAUSSIAN: return log(t) + log_envelope;
    case WAVEPE_WAVELET_MORLET: return log_envelope; /* |cos| <= 1 */
    case WAVEPE_WAVELET_HAAR: break;
    }
    return -INFINITY;
}

/* Is a value below exp(log_bound) zero in the given precision (or below the
 * threshold)?  The kernels flush results below the normal range to zero
 * (fpenv.h), so zero means below half the smallest normal number: it flushes
 * with a factor-2 margin for the last-bit differences between kernels, and no
 * table built over the support ever holds a subnormal. */
static int negligible(double log_bound, int double_precision, double threshold) {
    if (threshold > 0.0) return log_bound <= log(threshold);
    const double log2_limit = double_precision ? -1023.0 : -127.0; /* log2(smallest normal / 2) */
    return log_bound < log2_limit * 0.69314718055994530942;
}

int wavepe_wavelet_support_t(wavepe_wavelet w, int double_precision, double tol, double *t_lo,
                             double *t_hi) {
    if (!(tol >= 0.0 && tol < 1.0)) return WAVEPE_E_INVALID; /* rejects NaN too */
    if (w == WAVEPE_WAVELET_HAAR) {
        *t_lo = 0.0;
        *t_hi = 1.0;
        return WAVEPE_OK;
    }
    if (w != WAVEPE_WAVELET_RICKER && w != WAVEPE_WAVELET_GAUSSIAN && w != WAVEPE_WAVELET_MORLET)
        return WAVEPE_E_INVALID;
    const double threshold = tol * wavepe_wavelet_peak(w);
    /* Bisection for the smallest t >= 2 beyond which the decreasing bound is
     * negligible.  At t = 2 no family is negligible for tol < 1 except with
     * thresholds near the peak, which the clamp below handles. */
    double lo = 2.0, hi = 64.0; /* exp(-2048) is 0 in double */
    if (negligible(tail_log_bound(w, lo), double_precision, threshold)) {
        hi = lo;
    } else {
        for (int it = 0; it < 200 && hi - lo > 1e-12; ++it) {
            const double mid = 0.5 * (lo + hi);
            if (negligible(tail_log_bound(w, mid), double_precision, threshold)) hi = mid;
            else lo = mid;
        }
    }
    /* All three envelope families are even in |psi|, so the support is symmetric. */
    *t_lo = -hi;
    *t_hi = hi;
    return WAVEPE_OK;
}
