/* rope_gufunc.c: the gufunc _ufuncs.rope over the C core's RoPE kernels.
 *
 *   rope(x, positions, inv_freq, scale, mode) -> y     signature (l,d),(l),(p),(),()->(l,d)
 *
 * x float32 / float64 (the output has its type); positions int64; inv_freq
 * float64 with p = rotary_pairs entries (p <= d/2); scale float64; mode int64
 * with bit 0 = interleaved layout, bit 1 = inverse rotation.  NumPy
 * broadcasts the loop dimensions, so positions (L,) serve every head of an
 * (..., H, L, d) array and positions (B, 1, L) one row per batch.
 *
 * The inner loop hands the whole outer loop to the core's plan in one call: when
 * positions are shared by the outer iterations they become the core's heads
 * (cos/sin computed once per position for all of them); otherwise its batch.
 * wavepe/ufuncs.py validates arguments before the gufunc runs.  A direct call
 * with values the core cannot take (odd d, p > d/2, a mode outside 0..3, a
 * non-finite scale or inv_freq) raises a ValueError naming the argument and
 * its value from the loop, which then stops: it never reads out of bounds and
 * never returns an output without an exception.
 */
#include "np_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/rope.h"

enum { ARG_X, ARG_POS, ARG_INV, ARG_SCALE, ARG_MODE, ARG_OUT, N_ARGS };

typedef struct loop_geometry {
    npy_intp n, len, d, pairs;
    const npy_intp *steps; /* outer steps [N_ARGS], then the core steps */
    npy_intp x_sl, x_sd, pos_sl, inv_sp, out_sl, out_sd;
} loop_geometry;

/* The core's plan over *a, run on this thread; 0, or -1 with the core's reason raised (it
 * rejects the arguments, or is out of memory). */
static int run_core(wavepe_rope_args *a, npy_intp itemsize) {
    a->dtype = wavepe_np_float_dtype(itemsize);
    wavepe_rope_plan *plan = NULL;
    wavepe_error err = {{0}};
    const int status = wavepe_rope_plan_create(wavepe_active_isa(), a, &plan, &err);
    if (status != WAVEPE_OK) {
        wavepe_np_loop_raise(status, "rope", err.message);
        return -1;
    }
    wavepe_rope_run(plan, 0, 0, wavepe_rope_units(plan, 0));
    wavepe_rope_plan_free(plan);
    return 0;
}

/* Parameters of outer iteration i as core arguments; inv is a contiguous copy
 * when the operand is strided.  Returns 0, or -1 with a ValueError raised that
 * names the invalid argument and its value. */
static int read_params(char **args, const loop_geometry *g, npy_intp i, const double **inv, double *inv_buf,
                       wavepe_rope_args *a) {
    double scale;
    npy_int64 mode;
    memcpy(&scale, args[ARG_SCALE] + i * g->steps[ARG_SCALE], sizeof scale);
    memcpy(&mode, args[ARG_MODE] + i * g->steps[ARG_MODE], sizeof mode);
    char message[160];
    if (mode < 0 || mode > 3)
        snprintf(message, sizeof message,
                 "mode=%" PRId64 " is not one of 0..3 (bit 0: interleaved layout, bit 1: inverse)", (int64_t)mode);
    else if (!isfinite(scale))
        snprintf(message, sizeof message, "scale=%g must be finite", scale);
    else if (g->d % 2 != 0)
        snprintf(message, sizeof message, "x's last dimension d=%" PRId64 " must be even (pairs)", (int64_t)g->d);
    else if (g->pairs > g->d / 2)
        snprintf(message, sizeof message, "inv_freq has %" PRId64 " entries, more than the d/2=%" PRId64 " pairs of x",
                 (int64_t)g->pairs, (int64_t)(g->d / 2));
    else
        message[0] = '\0';
    if (message[0] != '\0') {
        wavepe_np_loop_raise(WAVEPE_E_INVALID, "rope", message);
        return -1;
    }
    const char *src = args[ARG_INV] + i * g->steps[ARG_INV];
    if (g->inv_sp == (npy_intp)sizeof(double) && (uintptr_t)src % sizeof(double) == 0) {
        *inv = (const double *)src;
    } else {
        for (npy_intp p = 0; p < g->pairs; ++p) memcpy(&inv_buf[p], src + p * g->inv_sp, sizeof(double));
        *inv = inv_buf;
    }
    for (npy_intp p = 0; p < g->pairs; ++p)
        if (!isfinite((*inv)[p])) {
            snprintf(message, sizeof message, "inv_freq[%" PRId64 "]=%g must be finite", (int64_t)p, (*inv)[p]);
            wavepe_np_loop_raise(WAVEPE_E_INVALID, "rope", message);
            return -1;
        }
    a->layout = (mode & 1) ? WAVEPE_ROPE_INTERLEAVED : WAVEPE_ROPE_HALF;
    a->inverse = (mode & 2) ? 1 : 0;
    a->scale = scale;
    a->inv_freq = *inv;
    a->rotary_pairs = g->pairs;
    a->head_dim = g->d;
    return 0;
}

/* Element strides, or -1 when a byte stride is not a whole number of items. */
static int64_t es(npy_intp byte_stride, npy_intp itemsize) { return wavepe_np_elem_stride(byte_stride, itemsize); }

/* Row by row through a contiguous scratch vector: for head vectors whose d
 * elements are not contiguous (or misaligned), which the core does not take.
 * 0, or -1 with an exception raised. */
static int rope_rows_via_scratch(char **args, const loop_geometry *g, npy_intp i, wavepe_rope_args *a,
                                  npy_intp itemsize, char *scratch) {
    char *in_buf = scratch, *out_buf = scratch + g->d * itemsize;
    a->batch = 1, a->len = 1;
    a->q.heads = 1;
    a->q.in = in_buf, a->q.out = out_buf;
    a->q.in_stride_b = a->q.in_stride_h = a->q.in_stride_l = 0;
    a->q.out_stride_b = a->q.out_stride_h = a->q.out_stride_l = 0;
    a->positions = NULL;
    for (npy_intp l = 0; l < g->len; ++l) {
        const char *x = args[ARG_X] + i * g->steps[ARG_X] + l * g->x_sl;
        char *y = args[ARG_OUT] + i * g->steps[ARG_OUT] + l * g->out_sl;
        npy_int64 pos;
        memcpy(&pos, args[ARG_POS] + i * g->steps[ARG_POS] + l * g->pos_sl, sizeof pos);
        for (npy_intp j = 0; j < g->d; ++j) memcpy(in_buf + j * itemsize, x + j * g->x_sd, (size_t)itemsize);
        a->offset = pos;
        if (run_core(a, itemsize) < 0) return -1;
        for (npy_intp j = 0; j < g->d; ++j) memcpy(y + j * g->out_sd, out_buf + j * itemsize, (size_t)itemsize);
    }
    return 0;
}

static void rope_loop(char **args, const npy_intp *dimensions, const npy_intp *steps, npy_intp itemsize) {
    loop_geometry g;
    g.n = dimensions[0], g.len = dimensions[1], g.d = dimensions[2], g.pairs = dimensions[3];
    g.steps = steps;
    const npy_intp *core = steps + N_ARGS;
    g.x_sl = core[0], g.x_sd = core[1], g.pos_sl = core[2], g.inv_sp = core[3], g.out_sl = core[4], g.out_sd = core[5];
    if (g.n == 0 || g.len == 0 || g.d == 0) return;

    /* Can the core read and write these arrays directly? */
    const int64_t x_sl = es(g.x_sl, itemsize), out_sl = es(g.out_sl, itemsize);
    const int64_t x_sn = es(steps[ARG_X], itemsize), out_sn = es(steps[ARG_OUT], itemsize);
    const int64_t pos_sl = es(g.pos_sl, 8), pos_sn = es(steps[ARG_POS], 8);
    const int direct = (g.d == 1 || (g.x_sd == itemsize && g.out_sd == itemsize)) && x_sl >= 0 && out_sl >= 0 &&
                       x_sn >= 0 && out_sn >= 0 && pos_sl >= 0 && pos_sn >= 0 &&
                       (uintptr_t)args[ARG_X] % (uintptr_t)itemsize == 0 &&
                       (uintptr_t)args[ARG_OUT] % (uintptr_t)itemsize == 0 &&
                       (uintptr_t)args[ARG_POS] % sizeof(npy_int64) == 0;
    const int params_shared = steps[ARG_INV] == 0 && steps[ARG_SCALE] == 0 && steps[ARG_MODE] == 0;

    double inv_stack[256];
    double *inv_buf = inv_stack;
    char *scratch = NULL;
    if (g.pairs > 256) inv_buf = malloc(sizeof(double) * (size_t)g.pairs);
    if (!direct) scratch = malloc((size_t)(2 * g.d * itemsize));
    if (inv_buf == NULL || (!direct && scratch == NULL)) {
        wavepe_np_loop_raise(WAVEPE_E_NOMEM, "rope", "out of memory for the loop's scratch vectors");
        goto done;
    }

    if (direct && params_shared) {
        /* One core call for the whole outer loop. */
        wavepe_rope_args a;
        a = wavepe_rope_args_defaults();
        const double *inv;
        if (read_params(args, &g, 0, &inv, inv_buf, &a) < 0) goto done;
        a.len = g.len;
        a.positions = (const int64_t *)args[ARG_POS];
        a.pos_stride_l = pos_sl;
        a.q.in = args[ARG_X], a.q.out = args[ARG_OUT];
        a.q.in_stride_l = x_sl, a.q.out_stride_l = out_sl;
        if (steps[ARG_POS] == 0) { /* shared positions: the outer loop is the heads */
            a.batch = 1, a.q.heads = g.n;
            a.q.in_stride_h = x_sn, a.q.out_stride_h = out_sn;
        } else { /* positions per outer iteration: the outer loop is the batch */
            a.batch = g.n, a.q.heads = 1;
            a.q.in_stride_b = x_sn, a.q.out_stride_b = out_sn, a.pos_stride_b = pos_sn;
        }
        run_core(&a, itemsize);
        goto done;
    }

    for (npy_intp i = 0; i < g.n; ++i) { /* per outer iteration */
        wavepe_rope_args a;
        a = wavepe_rope_args_defaults();
        const double *inv;
        char *out_i = args[ARG_OUT] + i * steps[ARG_OUT];
        if (read_params(args, &g, i, &inv, inv_buf, &a) < 0) break;
        if (!direct) {
            if (rope_rows_via_scratch(args, &g, i, &a, itemsize, scratch) < 0) break;
            continue;
        }
        a.batch = 1, a.len = g.len, a.q.heads = 1;
        a.positions = (const int64_t *)(args[ARG_POS] + i * steps[ARG_POS]);
        a.pos_stride_l = pos_sl;
        a.q.in = args[ARG_X] + i * steps[ARG_X], a.q.out = out_i;
        a.q.in_stride_l = x_sl, a.q.out_stride_l = out_sl;
        if (run_core(&a, itemsize) < 0) break;
    }
done:
    if (inv_buf != inv_stack) free(inv_buf);
    free(scratch);
}

static void rope_loop_f16(char **args, const npy_intp *dimensions, const npy_intp *steps, void *data) {
    (void)data;
    rope_loop(args, dimensions, steps, 2); /* npy_half: read and written natively, computed in float32 */
}

static void rope_loop_f32(char **args, const npy_intp *dimensions, const npy_intp *steps, void *data) {
    (void)data;
    rope_loop(args, dimensions, steps, sizeof(float));
}

static void rope_loop_f64(char **args, const npy_intp *dimensions, const npy_intp *steps, void *data) {
    (void)data;
    rope_loop(args, dimensions, steps, sizeof(double));
}

/* float16 first: NumPy takes the first loop an input casts to safely */
static PyUFuncGenericFunction rope_loops[3] = {rope_loop_f16, rope_loop_f32, rope_loop_f64};
static void *rope_data[3] = {NULL, NULL, NULL};
static char rope_types[3 * N_ARGS] = {
    NPY_HALF,   NPY_INT64, NPY_DOUBLE, NPY_DOUBLE, NPY_INT64, NPY_HALF,
    NPY_FLOAT,  NPY_INT64, NPY_DOUBLE, NPY_DOUBLE, NPY_INT64, NPY_FLOAT,
    NPY_DOUBLE, NPY_INT64, NPY_DOUBLE, NPY_DOUBLE, NPY_INT64, NPY_DOUBLE,
};

static const char rope_doc[] =
    "rope(x, positions, inv_freq, scale, mode, /, out=None, ...)\n--\n\n"
    "Rotary position embedding, gufunc (l,d),(l),(p),(),()->(l,d) over the C core.\n"
    "x float16/float32/float64 (float16 computed in float32, rounded once); positions int64; inv_freq float64 of the p = rotary_pairs pairs that\n"
    "rotate (p <= d/2); scale float64; mode int64: bit 0 interleaved layout, bit 1 inverse.\n"
    "Values the kernels cannot take raise ValueError; wavepe.ufuncs.rope / rope_inv_freq\n"
    "check every argument first (types, shapes, positions).";

int wavepe_np_add_rope_gufunc(PyObject *module) {
    PyObject *uf = PyUFunc_FromFuncAndDataAndSignature(rope_loops, rope_data, rope_types, 3, 5, 1, PyUFunc_None,
                                                       "rope", rope_doc, 0, "(l,d),(l),(p),(),()->(l,d)");
    if (uf == NULL) return -1;
    if (PyModule_AddObject(module, "rope", uf) < 0) {
        Py_DECREF(uf);
        return -1;
    }
    return 0;
}
