/* np_common.h: what every file of the NumPy extension module includes first.
 *
 * Built against NumPy 2 headers, targeting the 1.25 C API so that the same
 * binary runs on NumPy >= 1.26 (1.26 shares 1.25's API version).
 * module.c owns the API tables; the other files import nothing themselves.
 */
#ifndef WAVEPE_NP_COMMON_H
#define WAVEPE_NP_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_25_API_VERSION
#define NPY_TARGET_VERSION NPY_1_25_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL wavepe_np_ARRAY_API
#define PY_UFUNC_UNIQUE_SYMBOL wavepe_np_UFUNC_API
#ifndef WAVEPE_NP_MODULE_MAIN
#define NO_IMPORT_ARRAY
#define NO_IMPORT_UFUNC
#endif
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

/* Each file adds its ufuncs / functions to the module; 0 on success, -1 with
 * a Python exception set. */
int wavepe_np_add_wavelet_ufuncs(PyObject *module);
int wavepe_np_add_alibi_functions(PyObject *module);
int wavepe_np_add_relbias_gufuncs(PyObject *module);
int wavepe_np_add_rope_gufunc(PyObject *module);

#include "../core/checked.h"
#include "../core/isa.h"

#include "../core/dtype.h"

/* The core's dtype of a float loop's element size: NPY_HALF is IEEE fp16, then float32, float64. */
static inline int wavepe_np_float_dtype(npy_intp itemsize) {
    return itemsize == 2 ? WAVEPE_F16 : itemsize == 4 ? WAVEPE_F32 : WAVEPE_F64;
}

/* The ISA for a call made with the GIL held: 0, or -1 with ValueError set
 * when WAVEPE_ISA names an ISA this CPU cannot run (or an unknown one).  The
 * element-wise ufunc loops use wavepe_active_isa() (which falls back to the
 * best supported ISA); the Python front ends check WAVEPE_ISA first. */
static inline int wavepe_np_active_isa(wavepe_isa *isa) {
    char message[256];
    if (wavepe_active_isa_checked(isa, message, sizeof(message)) != WAVEPE_OK) {
        PyErr_SetString(PyExc_ValueError, message);
        return -1;
    }
    return 0;
}

/* Raise from inside a ufunc loop, which runs without the GIL: an exception of the core's status
 * (MemoryError, OverflowError, else ValueError) with "<ufunc>: <message>".  NumPy checks for a
 * set exception when the loop returns and raises it; the loop must return at once (the output is
 * then never seen).  The first error of a call wins. */
static inline void wavepe_np_loop_raise(int status, const char *ufunc, const char *message) {
    PyGILState_STATE gil = PyGILState_Ensure();
    if (!PyErr_Occurred()) {
        PyObject *exc = status == WAVEPE_E_NOMEM      ? PyExc_MemoryError
                        : status == WAVEPE_E_OVERFLOW ? PyExc_OverflowError
                                                      : PyExc_ValueError;
        PyErr_Format(exc, "%s: %s", ufunc, message);
    }
    PyGILState_Release(gil);
}

/* Byte stride -> element stride; -1 when the stride is not a multiple of the
 * item size (NumPy hands legacy loops aligned data, so this is defensive). */
static inline int64_t wavepe_np_elem_stride(npy_intp byte_stride, npy_intp itemsize) {
    return (byte_stride % itemsize == 0) ? (int64_t)(byte_stride / itemsize) : -1;
}

#endif
