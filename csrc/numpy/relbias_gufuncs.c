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
 * Each outer iteration is one (M, d) query matrix.  The core wants the head
 * and key dimensions contiguous and the table dense; other layouts (or
 * misaligned data) go through contiguous scratch copies.  The AVX2 workspace
 * (packed table) is reused across iterations that share table and positions.
 *
 * Arguments are validated by wavepe/ufuncs.py before the gufunc runs.  A
 * direct call with values the core rejects (positions beyond +-2^61, clamp
 * with an empty table) cannot raise from inside the loop: the loop fills
 * that output with NaN and raises the floating-point invalid flag, which
 * NumPy reports as "invalid value encountered in rel_bias".
 */
#include "np_common.h"

#include <fenv.h>
#include <math.h>
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

static void fill_nan(char *out, npy_intp rows, npy_intp cols, npy_intp s_row, npy_intp s_col, int f32) {
    for (npy_intp i = 0; i < rows; ++i)
        for (npy_intp j = 0; j < cols; ++j) {
            char *p = out + i * s_row + j * s_col;
            if (f32) {
                const float v = NAN;
                memcpy(p, &v, sizeof v);
            } else {
                const double v = NAN;
                memcpy(p, &v, sizeof v);
            }
        }
    feraiseexcept(FE_INVALID); /* NumPy turns the flag into its invalid-value warning */
}

static void rel_bias_loop(char **args, const npy_intp *dims, const npy_intp *steps, int f32) {
    const npy_intp item = f32 ? 4 : 8;
    const npy_intp outer = dims[0], m = dims[1], d = dims[2], rows = dims[3], n = dims[4];
    const npy_intp qs_m = steps[7], qs_d = steps[8], ts_r = steps[9], ts_d = steps[10];
    const npy_intp os_m = steps[11], os_n = steps[12];
    const wavepe_isa isa = wavepe_active_isa();

    /* scratch for layouts the core cannot take in place, and the workspace */
    void *q_buf = NULL, *t_buf = NULL, *o_buf = NULL, *ws = NULL;
    int64_t ws_bytes = 0;
    const char *prepared_table = NULL;
    int64_t prepared_r_lo = 0, prepared_off = 0;
    int prepared_causal = -1, failed_alloc = 0;

    for (npy_intp it = 0; it < outer; ++it) {
        char *q = args[0] + it * steps[0], *table = args[1] + it * steps[1], *out = args[6] + it * steps[6];
        int64_t r_lo, q_offset;
        npy_bool causal, clamp;
        memcpy(&r_lo, args[2] + it * steps[2], sizeof r_lo);
        memcpy(&q_offset, args[3] + it * steps[3], sizeof q_offset);
        memcpy(&causal, args[4] + it * steps[4], sizeof causal);
        memcpy(&clamp, args[5] + it * steps[5], sizeof clamp);

        wavepe_relbias_args a;
        memset(&a, 0, sizeof a);
        a.batch = 1;
        a.m = m;
        a.n = n;
        a.d = d;
        a.rows = rows;
        a.r_lo = r_lo;
        a.q_offset = q_offset;
        a.causal = causal != 0;
        a.clamp = clamp != 0;
        a.q_stride_m = d;
        a.bias_stride_m = n;
        /* sizes and positions only: placeholder pointers pass the NULL checks */
        a.q = a.table = (const void *)&a;
        a.bias = (void *)&a;
        if (wavepe_relbias_validate(&a, WAVEPE_RELBIAS_FORWARD, item) != WAVEPE_OK) {
            fill_nan(out, m, n, os_m, os_n, f32);
            continue;
        }

        /* q: in place when rows are contiguous */
        if (dense_rows(q, m, d, qs_m, qs_d, item)) {
            a.q = q;
            a.q_stride_m = m > 1 ? qs_m / item : d;
        } else {
            if (q_buf == NULL && (q_buf = malloc((size_t)(m * d * item) + 1)) == NULL) failed_alloc = 1;
            if (!failed_alloc) copy_matrix(q, m, d, qs_m, qs_d, q_buf, item, 1);
            a.q = q_buf;
            a.q_stride_m = d;
        }
        /* table: in place when dense (rows of d) */
        if (dense_rows(table, rows, d, ts_r, ts_d, item) && (rows <= 1 || ts_r == d * item)) {
            a.table = table;
        } else {
            if (t_buf == NULL && (t_buf = malloc((size_t)(rows * d * item) + 1)) == NULL) failed_alloc = 1;
            if (!failed_alloc && table != prepared_table) copy_matrix(table, rows, d, ts_r, ts_d, t_buf, item, 1);
            a.table = t_buf;
        }
        /* out: in place when rows are contiguous */
        const int out_direct = dense_rows(out, m, n, os_m, os_n, item);
        if (out_direct) {
            a.bias = out;
            a.bias_stride_m = m > 1 ? os_m / item : n;
        } else {
            if (o_buf == NULL && (o_buf = malloc((size_t)(m * n * item) + 1)) == NULL) failed_alloc = 1;
            a.bias = o_buf;
            a.bias_stride_m = n;
        }
        if (failed_alloc) { /* out of memory inside a loop that cannot raise */
            fill_nan(out, m, n, os_m, os_n, f32);
            break;
        }

        /* the packed table, rebuilt only when table or positions change */
        const int64_t need = f32 ? wavepe_relbias_f32_workspace_bytes(isa, &a, WAVEPE_RELBIAS_FORWARD)
                                 : wavepe_relbias_f64_workspace_bytes(isa, &a, WAVEPE_RELBIAS_FORWARD);
        if (need > ws_bytes) {
            free(ws);
            ws = need > 0 ? malloc((size_t)need) : NULL;
            ws_bytes = ws != NULL ? need : 0;
            prepared_table = NULL; /* a fresh buffer: nothing prepared in it */
        }
        a.workspace = ws; /* NULL (no memory, or none needed): the scalar kernel runs */
        if (ws != NULL && !(table == prepared_table && r_lo == prepared_r_lo && q_offset == prepared_off &&
                            (int)a.causal == prepared_causal)) {
            if (f32) wavepe_relbias_f32_prepare(isa, &a, WAVEPE_RELBIAS_FORWARD, 0, wavepe_relbias_f32_chunks(isa, &a));
            else wavepe_relbias_f64_prepare(isa, &a, WAVEPE_RELBIAS_FORWARD, 0, wavepe_relbias_f64_chunks(isa, &a));
        }
        prepared_table = table;
        prepared_r_lo = r_lo;
        prepared_off = q_offset;
        prepared_causal = a.causal;

        if (f32) wavepe_relbias_f32(isa, &a, 0, m);
        else wavepe_relbias_f64(isa, &a, 0, m);
        if (!out_direct) copy_matrix(out, m, n, os_m, os_n, o_buf, item, 0);
    }
    free(q_buf);
    free(t_buf);
    free(o_buf);
    free(ws);
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
