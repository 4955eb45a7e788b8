/* module.c: the extension module wavepe._ufuncs (CPython + NumPy C API).
 *
 * Holds the NumPy API tables and a few plain functions that expose the core's
 * bookkeeping (ISA, wavelet peak and support); the ufuncs and gufuncs are
 * added by their own files through wavepe_np_add_* functions.
 */
#define WAVEPE_NP_MODULE_MAIN
#include "np_common.h"

#include "../core/checked.h"
#include "../core/isa.h"
#include "../core/tiles.h"
#include "../core/wavelet.h"

static int parse_family(PyObject *arg, wavepe_wavelet *out) {
    const long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v >= WAVEPE_WAVELET_COUNT) {
        PyErr_Format(PyExc_ValueError, "family: unknown wavelet family code %ld", v);
        return -1;
    }
    *out = (wavepe_wavelet)v;
    return 0;
}

static PyObject *py_cpu_isa(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(wavepe_isa_name(wavepe_cpu_isa()));
}

/* The ISAs of the core's table (isa_table.h) this machine runs, in the table's order. */
static PyObject *py_supported_isas(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (int i = 0; i < WAVEPE_ISA_COUNT; ++i) {
        if (!wavepe_isa_supported((wavepe_isa)i)) continue;
        PyObject *name = PyUnicode_FromString(wavepe_isa_name((wavepe_isa)i));
        if (name == NULL || PyList_Append(out, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(name);
    }
    PyObject *tuple = PyList_AsTuple(out);
    Py_DECREF(out);
    return tuple;
}

static PyObject *py_active_isa(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    wavepe_isa isa;
    if (wavepe_np_active_isa(&isa) < 0) return NULL;
    return PyUnicode_FromString(wavepe_isa_name(isa));
}

/* How the amx ISA's tile products run here: "hardware", or "emulated" and why (tiles.h). */
static PyObject *py_tiles(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    const char *why = NULL;
    if (wavepe_tiles_hardware(&why)) return PyUnicode_FromString("hardware (AMX instructions)");
    return PyUnicode_FromFormat("emulated (%s)", why != NULL ? why : "no AMX on this CPU");
}

static PyObject *py_wavelet_peak(PyObject *self, PyObject *arg) {
    (void)self;
    wavepe_wavelet w;
    if (parse_family(arg, &w) < 0) return NULL;
    return PyFloat_FromDouble(wavepe_wavelet_peak(w));
}

static PyObject *py_wavelet_support_t(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *fam;
    int double_precision;
    double tol;
    if (!PyArg_ParseTuple(args, "Opd:wavelet_support_t", &fam, &double_precision, &tol)) return NULL;
    wavepe_wavelet w;
    if (parse_family(fam, &w) < 0) return NULL;
    double lo, hi;
    const int status = wavepe_wavelet_support_t(w, double_precision, tol, &lo, &hi);
    if (status != WAVEPE_OK) {
        PyErr_Format(PyExc_ValueError, "support_tol: %R is not in [0, 1) (%s)",
                     PyTuple_GET_ITEM(args, 2), wavepe_status_str(status));
        return NULL;
    }
    return Py_BuildValue("(dd)", lo, hi);
}

static PyMethodDef module_methods[] = {
    {"cpu_isa", py_cpu_isa, METH_NOARGS,
     "The ISA the kernels default to: 'amx', 'avx512bf16', 'avx512', 'avx2', 'neon' or 'scalar'."},
    {"tiles", py_tiles, METH_NOARGS, "How the amx ISA's tile products run here: hardware, or emulated and why."},
    {"supported_isas", py_supported_isas, METH_NOARGS,
     "The ISAs this machine runs (the names WAVEPE_ISA takes), scalar first, in the core's table order."},
    {"active_isa", py_active_isa, METH_NOARGS,
     "The ISA kernels use now (after WAVEPE_ISA / WAVEPE_FORCE_SCALAR); ValueError for an ISA this CPU lacks."},
    {"wavelet_peak", py_wavelet_peak, METH_O, "max |psi| of a family code, found numerically."},
    {"wavelet_support_t", py_wavelet_support_t, METH_VARARGS,
     "wavelet_support_t(family, double_precision, tol) -> (t_lo, t_hi)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "wavepe._ufuncs",
    "wavepe's NumPy extension: wavelet ufuncs and gufuncs over the C core.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ufuncs(void) {
    import_array();
    import_umath();
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (wavepe_np_add_wavelet_ufuncs(m) < 0 || wavepe_np_add_alibi_functions(m) < 0 ||
        wavepe_np_add_relbias_gufuncs(m) < 0 || wavepe_np_add_rope_gufunc(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
