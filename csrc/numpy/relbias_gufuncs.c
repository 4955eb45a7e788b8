/* relbias_gufuncs.c: the gufunc _ufuncs.rel_bias over the relbias core.
 *
 *     rel_bias(q, table, r_lo, q_offset, causal, clamp, out=bias)
 *     signature (m,d),(r,d),(),(),(),()->(m,n)
 *
 * The key count n appears only in the output, so the caller passes out=
 * (wavepe.ufuncs.rel_bias does); NumPy >= 1.26 takes an output-only core
 * dimension from the out array.  Loops: float32 and float64 (with int64
 * r_lo / q_offset and bool causal / clamp).  NumPy broadcasts the batch
 * dimensions and releases the GIL around the loop (no Python objects).
 *
 * The loop hands the core's plan (csrc/core/relbias.h) as much as it can at
 * once: when every parameter (table, r_lo, q_offset, causal, clamp) is shared
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

/* The scalar parameters of outer iteration it into *a. */
static void read_params(char **args, const npy_intp *steps, npy_intp it, wavepe_relbias_args *a) {
    int64_t r_lo, q_offset;
    npy_bool causal, clamp;
    memcpy(&r_lo, args[2] + it * steps[2], sizeof r_lo);
    memcpy(&q_offset, args[3] + it * steps[3], sizeof q_offset);
    memcpy(&causal, args[4] + it * steps[4], sizeof causal);
    memcpy(&clamp, args[5] + it * steps[5], sizeof clamp);
    a->r_lo = r_lo;
    a->q_offset = q_offset;
    a->causal = causal != 0;
    a->clamp = clamp != 0;
}

static void rel_bias_loop(char **args, const npy_intp *dims, const npy_intp *steps, int f32) {
    const npy_intp item = f32 ? 4 : 8;
    npy_intp outer = dims[0];
    const npy_intp m = dims[1], d = dims[2], rows = dims[3], n = dims[4];
    const npy_intp qs_m = steps[7], qs_d = steps[8], ts_r = steps[9], ts_d = steps[10];
    const npy_intp os_m = steps[11], os_n = steps[12];
    if (outer == 0) return;

    wavepe_relbias_args a;
    memset(&a, 0, sizeof a);
    a.dtype = f32 ? WAVEPE_F32 : WAVEPE_F64;
    a.m = m;
    a.n = n;
    a.d = d;
    a.rows = rows;
    const int table_dense = dense_rows(args[1], rows, d, ts_r, ts_d, item) && (rows <= 1 || ts_r == d * item);
    const int shared = steps[1] == 0 && steps[2] == 0 && steps[3] == 0 && steps[4] == 0 && steps[5] == 0;
    if (shared && table_dense && dense_rows(args[0], m, d, qs_m, qs_d, item) && steps[0] % item == 0 &&
        dense_rows(args[6], m, n, os_m, os_n, item) && steps[6] % item == 0) {
        /* one plan: the outer loop is the batch */
        read_params(args, steps, 0, &a);
        a.batch = outer;
        a.q = args[0];
        a.q_stride_g = steps[0] / item;
        a.q_stride_m = m > 1 ? qs_m / item : d;
        a.table = args[1];
        a.bias = args[6];
        a.bias_stride_g = steps[6] / item;
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
        char *q = args[0] + it * steps[0], *table = args[1] + it * steps[1], *out = args[6] + it * steps[6];
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

static void rel_bias_loop_f32(char **args, const npy_intp *dims, const npy_intp *steps, void *data) {
    (void)data;
    rel_bias_loop(args, dims, steps, 1);
}

static void rel_bias_loop_f64(char **args, const npy_intp *dims, const npy_intp *steps, void *data) {
    (void)data;
    rel_bias_loop(args, dims, steps, 0);
}

static PyUFuncGenericFunction rel_bias_loops[2] = {rel_bias_loop_f32, rel_bias_loop_f64};
static char rel_bias_types[2 * 7] = {
    NPY_FLOAT, NPY_FLOAT, NPY_INT64, NPY_INT64, NPY_BOOL, NPY_BOOL, NPY_FLOAT,
    NPY_DOUBLE, NPY_DOUBLE, NPY_INT64, NPY_INT64, NPY_BOOL, NPY_BOOL, NPY_DOUBLE,
};
static void *rel_bias_data[2] = {NULL, NULL};

int wavepe_np_add_relbias_gufuncs(PyObject *module) {
    PyObject *uf = PyUFunc_FromFuncAndDataAndSignature(
        rel_bias_loops, rel_bias_data, rel_bias_types, 2, 6, 1, PyUFunc_None, "rel_bias",
        "rel_bias(q, table, r_lo, q_offset, causal, clamp, /, *, out) -> out\n\n"
        "Relative-table bias, gufunc (m,d),(r,d),(),(),(),()->(m,n):\n"
        "out[..., m, n] = q[..., m, :] . table[q_offset + m - n - r_lo] for distances inside the\n"
        "table (else 0, or the edge row with clamp); causal zeroes n > q_offset + m.\n"
        "The key count n comes from out=, which is required.  Use wavepe.ufuncs.rel_bias.",
        0, "(m,d),(r,d),(),(),(),()->(m,n)");
    if (uf == NULL) return -1;
    if (PyModule_AddObject(module, "rel_bias", uf) < 0) {
        Py_DECREF(uf);
        return -1;
    }
    return 0;
}
