/* relbias_gufuncs.c: the gufunc _ufuncs.rel_bias over the relbias core.
 *
 *     rel_bias(q, table, <settings>, out=bias)
 *     signature (m,d),(r,d),(),...,()->(m,n)
 *
 * <settings>: one scalar operand per entry of WAVEPE_RELBIAS_SETTINGS
 * (csrc/core/relbias.h: r_lo, q_offset, causal, clamp), in its order -- the
 * torch op's schema less k_len --, typed by its kind (settings.h: INT int64,
 * BOOL bool, REAL float64); the operands, loop types, signature and docstring
 * below are generated from the list.  The key count n appears only in the
 * output, so the caller passes out= (wavepe.ufuncs.rel_bias does); NumPy >=
 * 1.26 takes an output-only core dimension from the out array.  Loops:
 * float16 (read and written as it is, summed in float32, each output rounded
 * once: the core's half-precision kernels), float32 and float64.  NumPy
 * broadcasts the batch dimensions and releases the GIL around the loop (no
 * Python objects).
 *
 * The loop hands the core's plan (csrc/core/relbias.h) as much as it can at
 * once: when every parameter (the table and the settings) is shared
 * by the outer iterations -- the usual broadcast of one table over a batch of
 * query matrices -- and q and out have contiguous rows, the outer loop is the
 * plan's batch (one table preparation, one call).  Otherwise each outer
 * iteration is its own plan, through contiguous scratch copies where the
 * layout is not the core's (strided head or key dimension, misaligned data).
 *
 * wavepe/ufuncs.py validates arguments before the gufunc runs.  A direct
 * call with values the core rejects (positions beyond +-2^60, clamp=True with
 * an empty table) raises the core's message as a ValueError (OverflowError,
 * MemoryError) from the loop, which then stops: no output is half written
 * without an exception.
 */
#include "np_common.h"

#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/relbias.h"

/* The gufunc's operands: q, table, the settings, out (k_len is out's last dimension).  args[i] and
 * steps[i] belong to operand i, and the core dimensions' steps follow them (q's m, d; table's r, d;
 * out's m, n). */
#define ARG_SETTING(kind, name, def) ARG_##name,
enum { ARG_Q, ARG_TABLE, WAVEPE_RELBIAS_SETTINGS(ARG_SETTING) ARG_OUT, N_OPERANDS };
#undef ARG_SETTING
enum { STEP_Q_M = N_OPERANDS, STEP_Q_D, STEP_T_R, STEP_T_D, STEP_O_M, STEP_O_N };

/* A (rows, cols) matrix at base with byte strides; is it usable in place? */
static int dense_rows(const char *base, npy_intp rows, npy_intp cols, npy_intp s_row, npy_intp s_col,
                      npy_intp item) {
    if ((npy_intp)(uintptr_t)base % item != 0) return 0;
    if (cols > 1 && s_col != item) return 0;
    if (rows > 1 && s_row % item != 0) return 0;
    return 1;
}

/* Copy a strided (rows, cols) matrix into dense dst (or back with to_dense = 0). */
static void copy_matrix(char *strided, npy_intp rows, npy_intp cols, npy_intp s_row, npy_intp s_col, char *dense,
                        npy_intp item, int to_dense) {
    for (npy_intp i = 0; i < rows; ++i)
        for (npy_intp j = 0; j < cols; ++j) {
            char *s = strided + i * s_row + j * s_col, *d = dense + (i * cols + j) * item;
            if (to_dense) memcpy(d, s, (size_t)item);
            else memcpy(s, d, (size_t)item);
        }
}

/* Run the forward of *a on this thread: 0, or -1 with the core's reason raised. */
static int run_plan(const wavepe_relbias_args *a) {
    wavepe_relbias_plan *plan = NULL;
    wavepe_error err = {{0}};
    const int status = wavepe_relbias_plan_create(wavepe_active_isa(), a, WAVEPE_RELBIAS_FORWARD, 1, &plan, &err);
    if (status != WAVEPE_OK) {
        wavepe_np_loop_raise(status, "rel_bias", err.message);
        return -1;
    }
    for (int phase = 0; phase < 3; ++phase) wavepe_relbias_run(plan, phase, 0, wavepe_relbias_units(plan, phase));
    wavepe_relbias_plan_free(plan);
    return 0;
}

/* One setting operand's element at p, by kind (the NumPy types of NP_TYPE_<kind>). */
#define NP_TYPE_INT NPY_INT64
#define NP_TYPE_BOOL NPY_BOOL
#define NP_TYPE_REAL NPY_DOUBLE
static inline void read_INT(const char *p, int64_t *v) { memcpy(v, p, sizeof *v); }
static inline void read_BOOL(const char *p, int *v) {
    npy_bool b;
    memcpy(&b, p, sizeof b);
    *v = b != 0;
}
static inline void read_REAL(const char *p, double *v) { memcpy(v, p, sizeof *v); }

/* The settings of outer iteration it into *a. */
static void read_params(char **args, const npy_intp *steps, npy_intp it, wavepe_relbias_args *a) {
#define READ_SETTING(kind, name, def) read_##kind(args[ARG_##name] + it * steps[ARG_##name], &a->name);
    WAVEPE_RELBIAS_SETTINGS(READ_SETTING)
#undef READ_SETTING
}

static void rel_bias_loop(char **args, const npy_intp *dims, const npy_intp *steps, npy_intp item) {
    npy_intp outer = dims[0];
    const npy_intp m = dims[1], d = dims[2], rows = dims[3], n = dims[4];
    const npy_intp qs_m = steps[STEP_Q_M], qs_d = steps[STEP_Q_D], ts_r = steps[STEP_T_R], ts_d = steps[STEP_T_D];
    const npy_intp os_m = steps[STEP_O_M], os_n = steps[STEP_O_N];
    if (outer == 0) return;

    wavepe_relbias_args a = wavepe_relbias_args_defaults();
    a.dtype = wavepe_np_float_dtype(item);
    a.m = m;
    a.n = n;
    a.d = d;
    a.rows = rows;
    const int table_dense =
        dense_rows(args[ARG_TABLE], rows, d, ts_r, ts_d, item) && (rows <= 1 || ts_r == d * item);
    int shared = 1; /* the table and every parameter: one for all outer iterations */
    for (int i = ARG_TABLE; i < ARG_OUT; ++i) shared = shared && steps[i] == 0;
    if (shared && table_dense && dense_rows(args[ARG_Q], m, d, qs_m, qs_d, item) && steps[ARG_Q] % item == 0 &&
        dense_rows(args[ARG_OUT], m, n, os_m, os_n, item) && steps[ARG_OUT] % item == 0) {
        /* one plan: the outer loop is the batch */
        read_params(args, steps, 0, &a);
        a.batch = outer;
        a.q = args[ARG_Q];
        a.q_stride_g = steps[ARG_Q] / item;
        a.q_stride_m = m > 1 ? qs_m / item : d;
        a.table = args[ARG_TABLE];
        a.bias = args[ARG_OUT];
        a.bias_stride_g = steps[ARG_OUT] / item;
        a.bias_stride_m = m > 1 ? os_m / item : n;
        run_plan(&a);
        return;
    }

    /* one plan per outer iteration, with scratch copies where the core cannot read in place */
    char *q_buf = malloc((size_t)(m * d * item) + 1), *t_buf = malloc((size_t)(rows * d * item) + 1);
    char *o_buf = malloc((size_t)(m * n * item) + 1);
    a.batch = 1;
    if (q_buf == NULL || t_buf == NULL || o_buf == NULL) {
        wavepe_np_loop_raise(WAVEPE_E_NOMEM, "rel_bias", "out of memory for the scratch copies of one iteration");
        outer = 0;
    }
    for (npy_intp it = 0; it < outer; ++it) {
        char *q = args[ARG_Q] + it * steps[ARG_Q], *table = args[ARG_TABLE] + it * steps[ARG_TABLE];
        char *out = args[ARG_OUT] + it * steps[ARG_OUT];
        read_params(args, steps, it, &a);
        if (dense_rows(q, m, d, qs_m, qs_d, item)) {
            a.q = q;
            a.q_stride_m = m > 1 ? qs_m / item : d;
        } else {
            copy_matrix(q, m, d, qs_m, qs_d, q_buf, item, 1);
            a.q = q_buf;
            a.q_stride_m = d;
        }
        if (dense_rows(table, rows, d, ts_r, ts_d, item) && (rows <= 1 || ts_r == d * item)) {
            a.table = table;
        } else {
            copy_matrix(table, rows, d, ts_r, ts_d, t_buf, item, 1);
            a.table = t_buf;
        }
        const int out_direct = dense_rows(out, m, n, os_m, os_n, item);
        a.bias = out_direct ? out : o_buf;
        a.bias_stride_m = out_direct && m > 1 ? os_m / item : n;
        if (run_plan(&a) < 0) break;
        if (!out_direct) copy_matrix(out, m, n, os_m, os_n, o_buf, item, 0);
    }
    free(q_buf);
    free(t_buf);
    free(o_buf);
}

static void rel_bias_loop_f16(char **args, const npy_intp *dims, const npy_intp *steps, void *data) {
    (void)data;
    rel_bias_loop(args, dims, steps, 2);
}

static void rel_bias_loop_f32(char **args, const npy_intp *dims, const npy_intp *steps, void *data) {
    (void)data;
    rel_bias_loop(args, dims, steps, 4);
}

static void rel_bias_loop_f64(char **args, const npy_intp *dims, const npy_intp *steps, void *data) {
    (void)data;
    rel_bias_loop(args, dims, steps, 8);
}

#define N_LOOPS 3
static PyUFuncGenericFunction rel_bias_loops[N_LOOPS] = {rel_bias_loop_f16, rel_bias_loop_f32, rel_bias_loop_f64};
#define TYPE_SETTING(kind, name, def) NP_TYPE_##kind,
static char rel_bias_types[N_LOOPS * N_OPERANDS] = {
    NPY_HALF, NPY_HALF, WAVEPE_RELBIAS_SETTINGS(TYPE_SETTING) NPY_HALF,
    NPY_FLOAT, NPY_FLOAT, WAVEPE_RELBIAS_SETTINGS(TYPE_SETTING) NPY_FLOAT,
    NPY_DOUBLE, NPY_DOUBLE, WAVEPE_RELBIAS_SETTINGS(TYPE_SETTING) NPY_DOUBLE,
};
#undef TYPE_SETTING
static void *rel_bias_data[N_LOOPS] = {NULL, NULL, NULL};

#define NAME_SETTING(kind, name, def) ", " #name
#define CORE_SETTING(kind, name, def) ",()"
#define SIGNATURE "(m,d),(r,d)" WAVEPE_RELBIAS_SETTINGS(CORE_SETTING) "->(m,n)"

int wavepe_np_add_relbias_gufuncs(PyObject *module) {
    PyObject *uf = PyUFunc_FromFuncAndDataAndSignature(
        rel_bias_loops, rel_bias_data, rel_bias_types, N_LOOPS, N_OPERANDS - 1, 1, PyUFunc_None, "rel_bias",
        "rel_bias(q, table" WAVEPE_RELBIAS_SETTINGS(NAME_SETTING) ", /, *, out) -> out\n\n"
        "Relative-table bias, gufunc " SIGNATURE ":\n"
        "out[..., m, n] = q[..., m, :] . table[q_offset + m - n - r_lo] for distances inside the\n"
        "table (else 0, or the edge row with clamp); causal zeroes n > q_offset + m.\n"
        "The key count n comes from out=, which is required.  Use wavepe.ufuncs.rel_bias.",
        0, SIGNATURE);
    if (uf == NULL) return -1;
    if (PyModule_AddObject(module, "rel_bias", uf) < 0) {
        Py_DECREF(uf);
        return -1;
    }
    return 0;
}
