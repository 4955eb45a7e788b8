/* alibi_functions.c: _ufuncs.alibi_bias and _ufuncs.sinusoidal_table.
 *
 * Plain functions rather than gufuncs: their outputs have dimensions that no
 * input carries.  Arguments arrive already validated by wavepe/ufuncs.py;
 * what is checked here is what the C core needs to stay memory safe.
 */
#include "np_common.h"

#include "../core/alibi.h"
#include "../core/checked.h"

/* The core's reason, naming the argument: OverflowError for sizes and
 * positions out of range, ValueError otherwise. */
static PyObject *raise_error(int status, const wavepe_error *err, const char *what) {
    PyErr_Format(status == WAVEPE_E_OVERFLOW ? PyExc_OverflowError : PyExc_ValueError, "%s: %s", what,
                 err->message[0] ? err->message : wavepe_status_str(status));
    return NULL;
}

/* PyArg_ParseTuple's target type and format unit per setting kind (csrc/core/settings.h) */
typedef long long PARSE_TYPE_INT;
typedef int PARSE_TYPE_BOOL;
typedef double PARSE_TYPE_REAL;
#define PARSE_FMT_INT "L"
#define PARSE_FMT_BOOL "p"
#define PARSE_FMT_REAL "d"

static PyObject *py_alibi_bias(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *slopes_obj;
    long long q_len, k_len;
    /* the settings (WAVEPE_ALIBI_SETTINGS, csrc/core/alibi.h) follow q_len, k_len in the list's order */
#define PARSE_VAR(kind, name, def) PARSE_TYPE_##kind name = (def);
#define PARSE_FMT(kind, name, def) PARSE_FMT_##kind
#define PARSE_PTR(kind, name, def) , &name
    WAVEPE_ALIBI_SETTINGS(PARSE_VAR)
    if (!PyArg_ParseTuple(args, "OLL" WAVEPE_ALIBI_SETTINGS(PARSE_FMT) ":alibi_bias", &slopes_obj, &q_len,
                          &k_len WAVEPE_ALIBI_SETTINGS(PARSE_PTR)))
        return NULL;
    PyArrayObject *slopes = (PyArrayObject *)PyArray_FROM_OF(slopes_obj, NPY_ARRAY_IN_ARRAY);
    if (slopes == NULL) return NULL;
    const int type = PyArray_TYPE(slopes);
    if (PyArray_NDIM(slopes) != 1 || (type != NPY_FLOAT && type != NPY_DOUBLE)) {
        Py_DECREF(slopes);
        PyErr_SetString(PyExc_TypeError, "slopes: expected a 1-d float32 or float64 array");
        return NULL;
    }
    wavepe_alibi_args a = wavepe_alibi_args_defaults();
    wavepe_error err = {{0}};
    a.dtype = type == NPY_FLOAT ? WAVEPE_F32 : WAVEPE_F64;
    a.heads = PyArray_DIM(slopes, 0);
    a.m = q_len;
    a.n = k_len;
#define FILL(kind, name, def) a.name = (wavepe_setting_##kind)name;
    WAVEPE_ALIBI_SETTINGS(FILL)
#undef FILL
#undef PARSE_VAR
#undef PARSE_FMT
#undef PARSE_PTR
    a.slopes = PyArray_DATA(slopes);
    a.out_stride_h = a.m * a.n; /* dense; validated before the product is used */
    a.out_stride_m = a.n;
    /* sizes and positions first (no output yet: a placeholder pointer passes the NULL check) */
    a.out = &a;
    int status = wavepe_alibi_validate(&a, &err);
    if (status != WAVEPE_OK) {
        Py_DECREF(slopes);
        return raise_error(status, &err, "alibi_bias");
    }
    npy_intp dims[3] = {(npy_intp)a.heads, (npy_intp)a.m, (npy_intp)a.n};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(3, dims, type);
    if (out == NULL) {
        Py_DECREF(slopes);
        return NULL;
    }
    a.out = PyArray_DATA(out);
    wavepe_isa isa;
    if (wavepe_np_active_isa(&isa) < 0) {
        Py_DECREF(out);
        Py_DECREF(slopes);
        return NULL;
    }
    wavepe_alibi_plan *plan = NULL;
    status = wavepe_alibi_plan_create(isa, &a, &plan, &err);
    if (status != WAVEPE_OK) {
        Py_DECREF(slopes);
        Py_DECREF(out);
        return raise_error(status, &err, "alibi_bias");
    }
    Py_BEGIN_ALLOW_THREADS;
    wavepe_alibi_run(plan, 0, 0, wavepe_alibi_units(plan, 0));
    Py_END_ALLOW_THREADS;
    wavepe_alibi_plan_free(plan);
    Py_DECREF(slopes);
    return (PyObject *)out;
}

static PyObject *py_sinusoidal_table(PyObject *self, PyObject *args) {
    (void)self;
    long long len, d, offset;
    double base;
    int use_double;
    if (!PyArg_ParseTuple(args, "LLLdp:sinusoidal_table", &len, &d, &offset, &base, &use_double))
        return NULL;
    wavepe_error err = {{0}};
    int status = wavepe_sinusoidal_validate(len, d, offset, base, use_double ? 8 : 4, &err);
    if (status != WAVEPE_OK) return raise_error(status, &err, "sinusoidal_table");
    npy_intp dims[2] = {(npy_intp)len, (npy_intp)d};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(2, dims, use_double ? NPY_DOUBLE : NPY_FLOAT);
    if (out == NULL) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = use_double ? wavepe_sinusoidal_f64(len, d, offset, base, (double *)PyArray_DATA(out), &err)
                        : wavepe_sinusoidal_f32(len, d, offset, base, (float *)PyArray_DATA(out), &err);
    Py_END_ALLOW_THREADS;
    if (status != WAVEPE_OK) {
        Py_DECREF(out);
        return raise_error(status, &err, "sinusoidal_table");
    }
    return (PyObject *)out;
}

static PyMethodDef alibi_methods[] = {
    {"alibi_bias", py_alibi_bias, METH_VARARGS,
     "alibi_bias(slopes, q_len, k_len, q_offset, causal) -> (H, q_len, k_len) array."},
    {"sinusoidal_table", py_sinusoidal_table, METH_VARARGS,
     "sinusoidal_table(length, d, offset, base, double) -> (length, d) array."},
    {NULL, NULL, 0, NULL},
};

int wavepe_np_add_alibi_functions(PyObject *module) { return PyModule_AddFunctions(module, alibi_methods); }
