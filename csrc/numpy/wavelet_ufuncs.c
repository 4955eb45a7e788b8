/* wavelet_ufuncs.c: the ufuncs ricker, gaussian, morlet and haar.
 *
 * One inner loop per dtype (float32, float64); the family travels in the
 * loop's data pointer.  NumPy releases the GIL around these loops (they never
 * touch Python objects) and handles broadcasting, out= and dtype=.
 *
 * The loops save and restore the floating-point environment: the kernels
 * raise spurious flags on purpose-handled inputs (t*t overflowing for huge t,
 * NaN through an int conversion), which NumPy would report as warnings.
 */
#include "np_common.h"

#include <fenv.h>
#include <string.h>

#include "../core/wavelet.h"

static void psi_loop_f32(char **args, const npy_intp *dimensions, const npy_intp *steps,
                         void *data) {
    const wavepe_wavelet w = (wavepe_wavelet)(intptr_t)data;
    const npy_intp n = dimensions[0];
    fenv_t env;
    feholdexcept(&env);
    const int64_t sx = wavepe_np_elem_stride(steps[0], sizeof(float));
    const int64_t sy = wavepe_np_elem_stride(steps[1], sizeof(float));
    if (sx >= 0 && sy >= 0 && (intptr_t)args[0] % sizeof(float) == 0 &&
        (intptr_t)args[1] % sizeof(float) == 0) {
        wavepe_wavelet_f32(wavepe_active_isa(), w, n, (const float *)args[0], sx, (float *)args[1], sy);
        fesetenv(&env);
        return;
    }
    for (npy_intp i = 0; i < n; ++i) { /* unaligned: copy through a local, one element per call */
        float t, y;
        memcpy(&t, args[0] + i * steps[0], sizeof t);
        wavepe_wavelet_f32(WAVEPE_ISA_SCALAR, w, 1, &t, 1, &y, 1);
        memcpy(args[1] + i * steps[1], &y, sizeof y);
    }
    fesetenv(&env);
}

static void psi_loop_f64(char **args, const npy_intp *dimensions, const npy_intp *steps,
                         void *data) {
    const wavepe_wavelet w = (wavepe_wavelet)(intptr_t)data;
    const npy_intp n = dimensions[0];
    fenv_t env;
    feholdexcept(&env);
    const int64_t sx = wavepe_np_elem_stride(steps[0], sizeof(double));
    const int64_t sy = wavepe_np_elem_stride(steps[1], sizeof(double));
    if (sx >= 0 && sy >= 0 && (intptr_t)args[0] % sizeof(double) == 0 &&
        (intptr_t)args[1] % sizeof(double) == 0) {
        wavepe_wavelet_f64(wavepe_active_isa(), w, n, (const double *)args[0], sx, (double *)args[1],
                           sy);
        fesetenv(&env);
        return;
    }
    for (npy_intp i = 0; i < n; ++i) {
        double t, y;
        memcpy(&t, args[0] + i * steps[0], sizeof t);
        wavepe_wavelet_f64(WAVEPE_ISA_SCALAR, w, 1, &t, 1, &y, 1);
        memcpy(args[1] + i * steps[1], &y, sizeof y);
    }
    fesetenv(&env);
}

static PyUFuncGenericFunction psi_loops[2] = {psi_loop_f32, psi_loop_f64};
static char psi_types[4] = {NPY_FLOAT, NPY_FLOAT, NPY_DOUBLE, NPY_DOUBLE};
static void *psi_data[WAVEPE_WAVELET_COUNT][2] = {
    {(void *)(intptr_t)WAVEPE_WAVELET_RICKER, (void *)(intptr_t)WAVEPE_WAVELET_RICKER},
    {(void *)(intptr_t)WAVEPE_WAVELET_GAUSSIAN, (void *)(intptr_t)WAVEPE_WAVELET_GAUSSIAN},
    {(void *)(intptr_t)WAVEPE_WAVELET_MORLET, (void *)(intptr_t)WAVEPE_WAVELET_MORLET},
    {(void *)(intptr_t)WAVEPE_WAVELET_HAAR, (void *)(intptr_t)WAVEPE_WAVELET_HAAR},
};

static const char *psi_docs[WAVEPE_WAVELET_COUNT] = {
    "ricker(t, /, out=None, *, where=True, dtype=None, ...)\n--\n\n"
    "Ricker (Mexican hat) wavelet psi(t) = (1 - t**2) * exp(-t**2 / 2), not normalised.\n"
    "Elementwise ufunc with float32 and float64 loops; other real inputs are cast to float64.",
    "gaussian(t, /, out=None, *, where=True, dtype=None, ...)\n--\n\n"
    "First derivative of a Gaussian, psi(t) = -t * exp(-t**2 / 2), not normalised.\n"
    "Elementwise ufunc with float32 and float64 loops.",
    "morlet(t, /, out=None, *, where=True, dtype=None, ...)\n--\n\n"
    "Real Morlet wavelet psi(t) = cos(5 t) * exp(-t**2 / 2), not normalised.\n"
    "Elementwise ufunc with float32 and float64 loops.",
    "haar(t, /, out=None, *, where=True, dtype=None, ...)\n--\n\n"
    "Haar wavelet: 1 on [0, 1/2), -1 on [1/2, 1), 0 elsewhere (NaN stays NaN).\n"
    "Elementwise ufunc with float32 and float64 loops.",
};

int wavepe_np_add_wavelet_ufuncs(PyObject *module) {
    for (int w = 0; w < WAVEPE_WAVELET_COUNT; ++w) {
        const char *name = wavepe_wavelet_name((wavepe_wavelet)w);
        PyObject *uf = PyUFunc_FromFuncAndData(psi_loops, psi_data[w], psi_types, 2, 1, 1,
                                               PyUFunc_None, name, psi_docs[w], 0);
        if (uf == NULL) return -1;
        if (PyModule_AddObject(module, name, uf) < 0) {
            Py_DECREF(uf);
            return -1;
        }
    }
    return 0;
}
