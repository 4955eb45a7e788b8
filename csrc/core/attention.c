/* attention.c: plans, the scalar reference kernels, the split-N combine and
 * the table-gradient reduction of the fused attention (the rules are in
 * attention.h).
 *
 * The scalar reference is deliberately plain: one query row at a time, the
 * online softmax over its keys, every score computed from the formula in
 * attention.h.  It accumulates in double whatever the element type (the
 * reference should be the most accurate variant, not the fastest); half
 * types are widened element by element and each output rounded from double
 * through float32 (a double rounding: at most one float32 ulp beyond the
 * half type's half ulp, far inside every tolerance that compares it).
 *
 * Two element types meet here: the data's (a->dtype: q, k, v, table, out,
 * dout, dq, dk, dv, dtable) and the accumulator type (p->acc: float64 for
 * float64 data, float32 otherwise: slopes, lse, dlse, dslopes and the plan's
 * own buffers -- packed table, split-N partials, GQA and half-type dk / dv
 * partials, table-gradient partials).
 */
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_internal.h"
#include "checked.h"
#include "fpenv.h"
#include "half.h"
#include "scratch.h"
#include "tiles.h"

/* ---- small helpers ------------------------------------------------------ */

/* Element i of an array of wavepe_dtype dtype, in double / stored. */
static inline double ld(const void *base, int64_t i, int dtype) {
    switch (dtype) {
    case WAVEPE_F64: return ((const double *)base)[i];
    case WAVEPE_BF16: return (double)wp_bf16_to_f32(((const uint16_t *)base)[i]);
    case WAVEPE_F16: return (double)wp_f16_to_f32(((const uint16_t *)base)[i]);
    default: return (double)((const float *)base)[i];
    }
}

static inline void st(void *base, int64_t i, double v, int dtype) {
    switch (dtype) {
    case WAVEPE_F64: ((double *)base)[i] = v; break;
    case WAVEPE_BF16: ((uint16_t *)base)[i] = wp_f32_to_bf16((float)v); break;
    case WAVEPE_F16: ((uint16_t *)base)[i] = wp_f32_to_f16((float)v); break;
    default: ((float *)base)[i] = (float)v; break;
    }
}

static inline int64_t iabs64(int64_t x) { return x < 0 ? -x : x; }

/* The scans of a packed table row (float32, or float64 when f64) for its nonzero columns (NaN is not
 * zero), eight elements a test: a decoding step's plan scans its whole window of table rows on every
 * call, and element by element (a compare and a branch each) that scan was three quarters of
 * pack_table, a quarter of the C time of a bf16 decoding call (one Llama layer, 1024 keys, 8/4 heads,
 * d = 64; perf).
 */
#define ZERO_SCAN_RUN 8
/* T: the element type, U: the unsigned integer of its size.  An element is zero when its bits without
 * the sign are (+0 and -0; NaN and everything else are not): tested on the bits, which compile to
 * vector shifts and ORs (compares of floats unroll into one ucomiss each). */
#define ZERO_SCAN_(T, U)                                                                                             \
    static inline U nonzero_bits_##T(const T *x) {                                                                   \
        U u;                                                                                                         \
        memcpy(&u, x, sizeof u);                                                                                     \
        return (U)(u << 1);                                                                                          \
    }                                                                                                                \
    /* the first column in [c, end) that is not zero, else end */                                                   \
    static int64_t first_nonzero_##T(const T *row, int64_t c, int64_t end) {                                        \
        for (; c + ZERO_SCAN_RUN <= end; c += ZERO_SCAN_RUN) {                                                       \
            U any = 0;                                                                                               \
            for (int i = 0; i < ZERO_SCAN_RUN; ++i) any |= nonzero_bits_##T(row + c + i);                            \
            if (any) break;                                                                                          \
        }                                                                                                            \
        while (c < end && !nonzero_bits_##T(row + c)) ++c;                                                           \
        return c;                                                                                                    \
    }                                                                                                                \
    /* one past the last column in [lo, e) that is not zero, else lo */                                             \
    static int64_t end_nonzero_##T(const T *row, int64_t lo, int64_t e) {                                           \
        for (; e - ZERO_SCAN_RUN >= lo; e -= ZERO_SCAN_RUN) {                                                        \
            U any = 0;                                                                                               \
            for (int i = 1; i <= ZERO_SCAN_RUN; ++i) any |= nonzero_bits_##T(row + e - i);                           \
            if (any) break;                                                                                          \
        }                                                                                                            \
        while (e > lo && !nonzero_bits_##T(row + e - 1)) --e;                                                       \
        return e;                                                                                                    \
    }                                                                                                                \
    /* the largest |x| of columns [lo, hi) as nonzero_bits' (without the sign, shifted left): their integer         \
     * order is the values', a NaN's above every other's (it wins), and the loop vectorises */                      \
    static U abs_max_bits_##T(const T *row, int64_t lo, int64_t hi) {                                                \
        U m = 0;                                                                                                     \
        for (int64_t c = lo; c < hi; ++c) {                                                                          \
            const U b = nonzero_bits_##T(row + c);                                                                   \
            m = b > m ? b : m;                                                                                       \
        }                                                                                                            \
        return m;                                                                                                    \
    }
ZERO_SCAN_(float, uint32_t)
ZERO_SCAN_(double, uint64_t)
#undef ZERO_SCAN_

/* ---- plans ------------------------------------------------------------------ */

void wavepe_attention_plan_free(wavepe_attention_plan *p) {
    if (p == NULL) return;
    wavepe_scratch_free(p->tpack);
    wavepe_scratch_free(p->trow);
    wavepe_scratch_free(p->tvnni);
    wavepe_scratch_free(p->tpairs);
    free(p->strip_clo);
    free(p->strip_chi);
    free(p->strip_amax);
    free((void *)p->taken);
    wavepe_scratch_free(p->partial);
    wavepe_scratch_free(p->dt_partial);
    wavepe_scratch_free(p->dkv_partial);
    free(p->dslope_partial);
    free(p);
}

int wavepe_attention_plan_kind(const wavepe_attention_plan *p) { return p->kind; }

/* The ISA a plan runs: a vector ISA this build has kernels for, else scalar. */
#define ATTN_BUILT_(ID, name, arch, ...) WAVEPE_IF_VECTOR_##arch(case WAVEPE_ISA_##ID:)
static wavepe_isa plan_isa(wavepe_isa isa) {
    switch (isa) {
    WAVEPE_ISA_TABLE(ATTN_BUILT_, _)
        return isa;
    default: return WAVEPE_ISA_SCALAR;
    }
}
#undef ATTN_BUILT_

/* The widening of half-type table rows on a vector ISA: that ISA's (attention_simd.h), which
 * converts a vector at a time (F16C, AVX-512, NEON); the plans that pack a table have one. */
#define ATTN_WIDEN_(ID, name, arch, ...)                                                                 \
    WAVEPE_IF_VECTOR_##arch(case WAVEPE_ISA_##ID: return dtype == WAVEPE_BF16  ? attn_widen_bf16_##name \
                                                         : dtype == WAVEPE_F16 ? attn_widen_f16_##name  \
                                                                               : NULL;)
attn_widen_fn attn_table_widen(wavepe_isa isa, int dtype) {
    switch (isa) {
    WAVEPE_ISA_TABLE(ATTN_WIDEN_, _)
    default: return NULL;
    }
}
#undef ATTN_WIDEN_

/* Elements 2 c2 and 2 c2 + 1 of a stored half-type table row of d elements as one pair (the first in
 * the low half; zero past d): what the bf16 pair products read. */
static inline uint32_t table_pair(const uint16_t *t, int64_t c2, int64_t d) {
    return (uint32_t)t[2 * c2] | (2 * c2 + 1 < d ? (uint32_t)t[2 * c2 + 1] << 16 : 0u);
}

/* The distances [*lo, *hi] the operation can touch (the table's rows it reads, clamped or not);
 * returns 0 when there are none. */
static int table_distances(const wavepe_attention_args *a, int64_t *lo_out, int64_t *hi_out) {
    int64_t lo = a->q_offset - (a->n - 1), hi = a->q_offset + a->m - 1;
    if (a->causal && lo < 0) lo = 0;
    if (a->window > 0) { /* no key at a distance >= window is seen */
        if (lo < 1 - a->window) lo = 1 - a->window;
        if (hi > a->window - 1) hi = a->window - 1;
    }
    if (!a->clamp) {
        if (lo < a->r_lo) lo = a->r_lo;
        if (hi > a->r_lo + a->table_rows - 1) hi = a->r_lo + a->table_rows - 1;
    }
    *lo_out = lo;
    *hi_out = hi;
    return lo <= hi;
}

/* The window's rows (distance hi - row for row < rows) into p->trow, row-major in the accumulator type
 * (half types widened here, once per plan), zero past d and in the rows no table row fills. */
static void table_rows_widened(wavepe_attention_plan *p, int64_t rows) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, es = p->esize, ds = wavepe_dtype_size(a->dtype);
    const attn_widen_fn widen = attn_table_widen(p->isa, a->dtype);
    unsigned char *trow = p->trow;
    /* what no table row fills is cleared, and only that (the window is written anew every call) */
    memset(trow + (size_t)(rows * dpad * es), 0, (size_t)((p->prows - rows) * dpad * es));
    for (int64_t row = 0; row < rows; ++row) {
        const int64_t idx = attn_table_index(a, p->pr_hi - row);
        unsigned char *dst_row = trow + (size_t)(row * dpad * es);
        if (idx < 0) {
            memset(dst_row, 0, (size_t)(dpad * es));
            continue;
        }
        memset(dst_row + (size_t)(d * es), 0, (size_t)((dpad - d) * es));
        const unsigned char *src = (const unsigned char *)a->table + idx * d * ds;
        float *dst = (float *)dst_row;
        if (a->dtype == p->acc) memcpy(dst, src, (size_t)(d * es));
        else widen((const uint16_t *)src, dst, d);
    }
}

/* Strip s's columns that are not zero (NaN is not zero), [strip_clo, strip_chi), and with amax its
 * largest |entry| (NaN wins: a strip holding one is never left out), for the kernels that leave out
 * strips no weight can see (attn_strip_negligible: not the narrow decoding ones).  Each row is scanned
 * only outside the range found so far (a wavelet table's rows share long zero runs, which a decoding
 * step's plan scanned whole every call). */
static void table_strip_range(wavepe_attention_plan *p, int64_t s, int amax) {
    const int64_t nr = p->nr, d = p->a.d, dpad = p->dpad;
    int64_t clo = d, chi = 0;
    for (int64_t row = s * nr; row < (s + 1) * nr; ++row) {
        const int64_t at = row * dpad; /* the row's first element, in the buffer's own type */
        const int64_t c = p->f64 ? first_nonzero_double((const double *)p->trow + at, 0, clo)
                                 : first_nonzero_float((const float *)p->trow + at, 0, clo);
        if (c < clo) clo = c;
        const int64_t lim = chi > c ? chi : c;
        const int64_t e = p->f64 ? end_nonzero_double((const double *)p->trow + at, lim, d)
                                 : end_nonzero_float((const float *)p->trow + at, lim, d);
        if (e > lim) chi = e;
    }
    if (chi <= clo) clo = chi = 0;
    p->strip_clo[s] = (int32_t)clo;
    p->strip_chi[s] = (int32_t)chi;
    uint64_t top = 0;
    for (int64_t row = s * nr; row < (s + 1) * nr && amax; ++row) {
        const uint64_t b = p->f64 ? abs_max_bits_double((const double *)p->trow + row * dpad, clo, chi)
                                  : abs_max_bits_float((const float *)p->trow + row * dpad, clo, chi);
        top = b > top ? b : top;
    }
    double m = INFINITY;
    if (amax && p->f64) {
        top >>= 1;
        memcpy(&m, &top, sizeof m);
    } else if (amax) {
        const uint32_t bits = (uint32_t)(top >> 1);
        float f;
        memcpy(&f, &bits, sizeof f);
        m = f;
    }
    p->strip_amax[s] = m;
}

/* The strips as the vector kernels' engine reads them (p->tpack): bf16 pairs of the stored rows
 * [strip][c2][lane] (the pairs engine: group_bias reads the pairs [clo / 2, (chi + 1) / 2) of a strip, an
 * edge pair's other half zero or masked there), else the window's rows transposed [strip][c][lane] (the
 * FMA engine's mk_nt reads c in [clo, chi)). */
static void table_strips_packed(wavepe_attention_plan *p, int64_t rows) {
    const wavepe_attention_args *a = &p->a;
    const int64_t nr = p->nr, d = a->d, dpad = p->dpad;
    if (attn_dpbf16(p)) {
        const int64_t d2 = (d + 1) / 2;
        uint32_t *tp = p->tpack;
        for (int64_t s = 0; s < p->nstrips; ++s) {
            const int64_t c2lo = p->strip_clo[s] / 2, c2hi = (p->strip_chi[s] + 1) / 2;
            for (int64_t lane = 0; lane < nr && c2lo < c2hi; ++lane) {
                const int64_t row = s * nr + lane, idx = row < rows ? attn_table_index(a, p->pr_hi - row) : -1;
                uint32_t *dst = tp + s * d2 * nr + lane;
                if (idx < 0) {
                    for (int64_t c2 = c2lo; c2 < c2hi; ++c2) dst[c2 * nr] = 0;
                    continue;
                }
                const uint16_t *t = (const uint16_t *)a->table + idx * d;
                for (int64_t c2 = c2lo; c2 < c2hi; ++c2) dst[c2 * nr] = table_pair(t, c2, d);
            }
        }
        return;
    }
    for (int64_t s = 0; s < p->nstrips; ++s) {
        const int64_t clo = p->strip_clo[s], chi = p->strip_chi[s];
        for (int64_t lane = 0; lane < nr; ++lane) {
            const int64_t at = (s * nr + lane) * dpad, to = s * d * nr + lane;
            if (p->f64) {
                const double *src = (const double *)p->trow + at;
                double *dst = (double *)p->tpack + to;
                for (int64_t c = clo; c < chi; ++c) dst[c * nr] = src[c];
            } else {
                const float *src = (const float *)p->trow + at;
                float *dst = (float *)p->tpack + to;
                for (int64_t c = clo; c < chi; ++c) dst[c * nr] = src[c];
            }
        }
    }
}

/* The tiles' bias windows (p->tvnni): pairs (k2) of the stored table's rows in packed order (row), strip
 * after strip of 16 rows (tiles.h's wavepe_tile_b_index with ldb 16, ldbs 16 k2pad, as TILES_AT_T of
 * attention_blocks_tiles.h).  A window's product reads every pair of its rows over the union of their strips'
 * ranges: zero everywhere first, then each row's pairs inside its own strip's range (outside it the
 * table is zero).  The bf16 backward's also in pairs of rows (p->tpairs: B of a table's dQ on tiles). */
static int table_tiles_packed(wavepe_attention_plan *p, int64_t rows) {
    const wavepe_attention_args *a = &p->a;
    const int64_t nr = p->nr, d = a->d, dpad = p->dpad, prows = p->prows;
    const uint16_t *tab = a->table;
    const int64_t k2pad = ((d + 1) / 2 + 15) / 16 * 16, ld = prows + 16;
    const int64_t tdims[2] = {k2pad, ld};
    int status = wavepe_checked_numel(2, tdims, 4, NULL);
    if (status != WAVEPE_OK) return status;
    p->tvnni = wavepe_scratch_alloc((size_t)(k2pad * ld * 4));
    if (p->tvnni == NULL) return WAVEPE_E_NOMEM;
    uint32_t *tv = p->tvnni; /* (locals: a store through it could alias the ranges, so no reload) */
    memset(tv, 0, (size_t)(k2pad * ld * 4));
    for (int64_t row = 0; row < rows; ++row) {
        const int64_t idx = attn_table_index(a, p->pr_hi - row), s = row / nr;
        if (idx < 0) continue;
        const uint16_t *t = tab + idx * d;
        const int64_t c2lo = p->strip_clo[s] / 2, c2hi = (p->strip_chi[s] + 1) / 2;
        for (int64_t c2 = c2lo; c2 < c2hi; ++c2) tv[wavepe_tile_b_index(c2, row, 16, 16 * k2pad)] = table_pair(t, c2, d);
    }
    if (!p->backward || a->dtype != WAVEPE_BF16) return WAVEPE_OK;
    const int64_t pdims[2] = {(prows + 64) / 2, dpad};
    if ((status = wavepe_checked_numel(2, pdims, 4, NULL)) != WAVEPE_OK) return status;
    const size_t pbytes = (size_t)(pdims[0] * dpad * 4);
    p->tpairs = wavepe_scratch_alloc(pbytes);
    if (p->tpairs == NULL) return WAVEPE_E_NOMEM;
    memset(p->tpairs, 0, pbytes);
    for (int64_t row = 0; row < rows; ++row) { /* zero outside the strip's range, as above */
        const int64_t idx = attn_table_index(a, p->pr_hi - row), s = row / nr;
        if (idx < 0) continue;
        const uint16_t *t = tab + idx * d;
        uint32_t *pairs = p->tpairs + row / 2 * dpad; /* the pair's first row in the low half */
        const int64_t clo = p->strip_clo[s], chi = p->strip_chi[s];
        const int shift = 16 * (int)(row % 2);
        for (int64_t c = clo; c < chi; ++c) pairs[c] |= (uint32_t)t[c] << shift;
    }
    return WAVEPE_OK;
}

/* Pack the table over the distances the operation can touch (see the plan):
 * row-major rows, nonzero column range per strip -- unless no kernel
 * reads the ranges (p->fold_table: every strip's range is all d columns) --,
 * and -- unless only narrow decoding kernels will run -- the strips the
 * engine reads, and the tiles' forms where tiles run.  A decoding step of one
 * query position folds the rows into its keys whole (narrow_dots_rr) and
 * reads no range: the scan of a 2048-row window was ~3 % of such a call
 * (32/8 heads, d = 128, 1024 keys, bf16 or float32, one thread, AVX2 EPYC
 * Zen 3: 0.388 -> 0.375 ms).
 *
 * Each packed form is written only where it is read, and each table pair built from the stored table
 * once per use: a wavelet table's rows are mostly zero columns (its packed window at L = 4096 holds ~37
 * nonzero of d = 128 per row), and these loops -- the float strips copied an element per memcpy call --
 * were most of a plan's time (1.4-1.8 ms at L = 4096, d = 128; 60-70 us at L = 256, d = 64; AVX2 EPYC),
 * serial before a call's threads start. */
static int pack_table(wavepe_attention_plan *p, int need_strips) {
    const wavepe_attention_args *a = &p->a;
    p->prows = 0;
    int64_t lo, hi;
    if (p->bias != ATTN_BIAS_TABLE || a->m == 0 || a->n == 0 || !table_distances(a, &lo, &hi)) return WAVEPE_OK;
    const int64_t nr = p->nr, dpad = p->dpad, es = p->esize; /* es: the accumulator type's */
    const int64_t rows = hi - lo + 1;
    const int64_t nstrips = (rows + nr - 1) / nr;
    const int64_t dims[2] = {nstrips * nr, dpad};
    int status = wavepe_checked_numel(2, dims, 2 * es, NULL);
    if (status != WAVEPE_OK) return status;
    const int64_t prows = nstrips * nr;
    const size_t bytes = (size_t)(prows * dpad * es);
    p->pr_lo = lo;
    p->pr_hi = hi;
    p->prows = prows;
    p->nstrips = nstrips;
    p->trow = wavepe_scratch_alloc(bytes);
    p->strip_clo = malloc(sizeof(int32_t) * (size_t)nstrips);
    p->strip_chi = malloc(sizeof(int32_t) * (size_t)nstrips);
    p->strip_amax = malloc(sizeof(double) * (size_t)nstrips);
    if (need_strips) p->tpack = wavepe_scratch_alloc(bytes);
    if (!p->trow || !p->strip_clo || !p->strip_chi || !p->strip_amax || (need_strips && !p->tpack)) return WAVEPE_E_NOMEM;
    table_rows_widened(p, rows);
    for (int64_t s = 0; s < nstrips; ++s) {
        if (p->fold_table) { /* every column may be nonzero (never negligible: nothing was scanned) */
            p->strip_clo[s] = 0;
            p->strip_chi[s] = (int32_t)a->d;
            p->strip_amax[s] = INFINITY;
        } else {
            table_strip_range(p, s, need_strips);
        }
    }
    if (need_strips) table_strips_packed(p, rows);
    return p->tiles ? table_tiles_packed(p, rows) : WAVEPE_OK;
}

static wavepe_attention_plan *plan_common(wavepe_isa isa, int f64, const wavepe_attention_args *a, int backward) {
    wavepe_attention_plan *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    p->a = *a;
    p->isa = plan_isa(isa);
    p->f64 = f64 ? 1 : 0;
    p->acc = wavepe_dtype_acc(a->dtype);
    p->backward = backward;
    p->esize = f64 ? 8 : 4;
    p->hg = a->heads / a->kv_heads;
    p->bias = a->table != NULL ? ATTN_BIAS_TABLE : (a->slopes != NULL ? ATTN_BIAS_ALIBI : ATTN_BIAS_NONE);
    p->nr = 2 * attn_isa_lanes(p->isa, f64); /* two vectors */
    if (backward) {
        p->bm = f64 ? ATTN_BBM_F64 : ATTN_BBM_F32;
        p->bn = f64 ? ATTN_BBN_F64 : ATTN_BBN_F32;
    } else {
        p->bm = attn_fwd_block_rows(p->isa, f64);
        p->bn = f64 ? ATTN_FBN_F64 : ATTN_FBN_F32;
    }
    p->dpad = (a->d + p->nr - 1) / p->nr * p->nr;
    p->nqb = (a->m + p->bm - 1) / p->bm;
    p->nkb = (a->n + p->bn - 1) / p->bn;
    p->kind = p->isa != WAVEPE_ISA_SCALAR ? ATTN_KIND_TILED : ATTN_KIND_SCALAR;
    return p;
}

/* Whether a plan's block products run on tiles: the amx ISA, a half type that has tiles here
 * (tiles.h: the instructions, or their emulation on a CPU without AMX), and the tiled forward or the
 * backward (decoding keeps the vector kernels: a step reads each key once). */
static int plan_tiles(const wavepe_attention_plan *p) {
    if (!attn_half_tiles(p->isa) || (p->a.dtype != WAVEPE_BF16 && p->a.dtype != WAVEPE_F16)) return 0;
    if (!p->backward && p->kind != ATTN_KIND_TILED) return 0;
    return wavepe_tiles_mode(p->a.dtype == WAVEPE_BF16 ? WAVEPE_TILE_BF16 : WAVEPE_TILE_F16) != WAVEPE_TILES_NONE;
}

/* The CPU kernels take every element type (validate checked the tag); the
 * boundaries' values are checked here, on the host. */
static int cpu_check(const wavepe_attention_args *a, wavepe_error *err) {
    return wavepe_attention_check_cu_seqlens(a, err);
}

int wavepe_attention_check_cu_seqlens(const wavepe_attention_args *a, wavepe_error *err) {
    if (a->cu_seqlens == NULL) return WAVEPE_OK;
    for (int64_t b = 0; b < a->batch; ++b) {
        const int32_t *cu = a->cu_seqlens + b * a->cu_stride;
        for (int64_t i = 1; i < a->cu_len; ++i)
            if (cu[i] < cu[i - 1])
                return wavepe_fail(err, WAVEPE_E_INVALID,
                                   "cu_seqlens of batch row %lld must not decrease, got cu_seqlens[%lld]=%d after %d",
                                   (long long)b, (long long)i, (int)cu[i], (int)cu[i - 1]);
    }
    return WAVEPE_OK;
}

int wavepe_attention_fwd_plan(wavepe_isa isa, const wavepe_attention_args *a, wavepe_attention_plan **out,
                              wavepe_error *err) {
    *out = NULL;
    int status = wavepe_attention_validate(a, 0, err);
    if (status == WAVEPE_OK) status = cpu_check(a, err);
    if (status != WAVEPE_OK) return status;
    const int f64 = a->dtype == WAVEPE_F64;
    wavepe_attention_plan *p = plan_common(isa, f64, a, 0);
    if (p == NULL) return wavepe_fail(err, WAVEPE_E_NOMEM, "out of memory for an attention plan");
    if (p->kind == ATTN_KIND_TILED && a->m >= 1 && a->m <= ATTN_DECODE_MAX_M && p->nkb >= 1) {
        /* few queries: the keys split into chunks whose partial softmaxes are combined
         * (one chunk below ATTN_DECODE_MIN_BLOCKS blocks), each chunk run for all the query
         * rows of a kv head at once -- the narrow kernels where they are a few.  Also with one
         * block of keys: a decoding step over a short cache went through the tiled kernels,
         * one 6-row micro-tile per query head and a 192-row work area cleared per head
         * (float32, 8 query heads over 4 kv heads, d = 64, 40 keys: 46 -> 31 us a call) */
        p->kind = ATTN_KIND_DECODE;
        /* the chunks cover only the keys some query can see: with a sliding window, those of the last
         * window positions, not the whole cache (causality and the window; documents and padding are
         * the kernels') */
        int64_t lo = 0, hi = a->n;
        if (a->window > 0 && a->q_offset - a->window + 1 > lo) lo = a->q_offset - a->window + 1;
        if (a->causal && a->q_offset + a->m < hi) hi = a->q_offset + a->m;
        if (a->window > 0 && !a->causal && a->q_offset + a->m - 1 + a->window < hi)
            hi = a->q_offset + a->m - 1 + a->window;
        if (lo > a->n) lo = a->n;
        if (hi < lo) hi = lo;
        p->key_lo = lo;
        const int64_t kblocks = (hi - lo + p->bn - 1) / p->bn;
        const int64_t blocks = (kblocks + ATTN_DECODE_SPLIT - 1) / ATTN_DECODE_SPLIT;
        p->chunk = p->bn * (blocks > ATTN_DECODE_MIN_BLOCKS ? blocks : ATTN_DECODE_MIN_BLOCKS);
        p->nchunks = (hi - lo + p->chunk - 1) / p->chunk;
        if (p->nchunks < 1) p->nchunks = 1; /* no key to see: one chunk writes the rows' zeros */
        const int64_t dims[3] = {a->batch * a->heads * a->m, p->nchunks > 1 ? p->nchunks : 0, p->dpad + 2};
        if ((status = wavepe_checked_numel(3, dims, p->esize, NULL)) != WAVEPE_OK) goto fail;
        p->partial = wavepe_scratch_alloc((size_t)(dims[0] * dims[1] * dims[2] * p->esize));
        if (p->partial == NULL && dims[0] * dims[1] > 0) {
            status = WAVEPE_E_NOMEM;
            goto fail;
        }
    }
    /* the decoding path with a few query rows per kv head (ATTN_NARROW_ROWS) reads
     * only the row-major table (narrow kernels) */
    const int narrow = p->kind == ATTN_KIND_DECODE && p->hg * a->m <= ATTN_NARROW_ROWS;
    p->fold_table = narrow && a->m == 1;
    if (p->kind == ATTN_KIND_TILED) {
        const int64_t units = wavepe_attention_units(p, 0);
        p->taken = calloc((size_t)(units > 0 ? units : 1), sizeof *p->taken);
        if (p->taken == NULL) {
            status = WAVEPE_E_NOMEM;
            goto fail;
        }
    }
    p->tiles = plan_tiles(p);
    if (p->kind != ATTN_KIND_SCALAR && (status = pack_table(p, !narrow)) != WAVEPE_OK) goto fail;
    *out = p;
    return WAVEPE_OK;
fail:
    wavepe_attention_plan_free(p);
    return wavepe_fail(err, status, "the attention's scratch buffers: %s", wavepe_status_str(status));
}

int wavepe_attention_bwd_plan(wavepe_isa isa, const wavepe_attention_args *a, wavepe_attention_plan **out,
                              wavepe_error *err) {
    *out = NULL;
    int status = wavepe_attention_validate(a, 1, err);
    if (status == WAVEPE_OK) status = cpu_check(a, err);
    if (status != WAVEPE_OK) return status;
    const int f64 = a->dtype == WAVEPE_F64, half = wavepe_dtype_size(a->dtype) == 2;
    wavepe_attention_plan *p = plan_common(isa, f64, a, 1);
    if (p == NULL) return wavepe_fail(err, WAVEPE_E_NOMEM, "out of memory for an attention plan");
    p->nunits = a->batch * a->heads;
    p->nslots = p->nunits;
    if ((p->hg > 1 || half) && a->n > 0) {
        /* grouped-query: each query head accumulates its own dk, dv; phase 1
         * sums them over the group in head order.  Half types: always, the
         * sums are float32 and phase 1 rounds them once into dk, dv */
        const int64_t dims[4] = {a->batch * a->heads, 2, a->n, a->d};
        if ((status = wavepe_checked_numel(4, dims, p->esize, NULL)) != WAVEPE_OK) goto fail;
        p->dkv_partial = wavepe_scratch_alloc((size_t)(dims[0] * 2 * a->n * a->d * p->esize));
        if (p->dkv_partial == NULL && dims[0] > 0) {
            status = WAVEPE_E_NOMEM;
            goto fail;
        }
        p->nkv_chunks = a->batch * a->kv_heads * ((a->n + ATTN_KV_REDUCE_ROWS - 1) / ATTN_KV_REDUCE_ROWS);
    }
    p->tiles = plan_tiles(p);
    if (p->kind != ATTN_KIND_SCALAR && (status = pack_table(p, 1)) != WAVEPE_OK) goto fail;
    if (a->dtable != NULL) {
        /* table gradient: per-slot partials, reduced in a fixed order */
        if (p->nslots > ATTN_MAX_TABLE_SLOTS) p->nslots = ATTN_MAX_TABLE_SLOTS;
        if (p->kind == ATTN_KIND_SCALAR) {
            p->dt_rows = a->table_rows;
            p->dt_cols = a->d;
        } else {
            p->dt_rows = p->prows;
            p->dt_cols = p->dpad;
        }
        const int64_t esz = p->kind == ATTN_KIND_SCALAR ? 8 : p->esize;
        const int64_t dims[3] = {p->nslots, p->dt_rows, p->dt_cols};
        if ((status = wavepe_checked_numel(3, dims, esz, NULL)) != WAVEPE_OK) goto fail;
        const size_t bytes = (size_t)(dims[0] * dims[1] * dims[2] * esz);
        if (bytes > 0) {
            p->dt_partial = wavepe_scratch_alloc(bytes);
            if (p->dt_partial == NULL) {
                status = WAVEPE_E_NOMEM;
                goto fail;
            }
            memset(p->dt_partial, 0, bytes);
        }
    }
    if (a->dslopes != NULL) {
        p->dslope_partial = calloc((size_t)(a->batch * a->heads) + 1, sizeof(double));
        if (p->dslope_partial == NULL) {
            status = WAVEPE_E_NOMEM;
            goto fail;
        }
    }
    *out = p;
    return WAVEPE_OK;
fail:
    wavepe_attention_plan_free(p);
    return wavepe_fail(err, status, "the attention's scratch buffers: %s", wavepe_status_str(status));
}

int64_t wavepe_attention_units(const wavepe_attention_plan *p, int phase) {
    const wavepe_attention_args *a = &p->a;
    if (p->backward) {
        if (phase == 0) return p->nslots;
        if (phase == 1)
            return (a->dtable != NULL ? a->table_rows : 0) + (a->dslopes != NULL ? 1 : 0) + p->nkv_chunks;
        return 0;
    }
    switch (p->kind) {
    case ATTN_KIND_SCALAR: return phase == 0 ? a->batch * a->heads * a->m : 0;
    case ATTN_KIND_TILED: return phase == 0 ? a->batch * a->heads * p->nqb : 0;
    case ATTN_KIND_DECODE:
        if (phase == 0) return a->batch * a->kv_heads * p->nchunks;
        return phase == 1 && p->nchunks > 1 ? a->batch * a->heads * a->m : 0; /* one chunk: finished in phase 0 */
    }
    return 0;
}

int64_t wavepe_attention_grain(const wavepe_attention_plan *p, int phase) {
    if (p->backward) return phase == 0 ? 1 : 16;
    if (p->kind == ATTN_KIND_SCALAR) {
        const int64_t work = p->a.n * p->a.d;
        return work >= 65536 ? 1 : 65536 / (work > 0 ? work : 1);
    }
    return phase == 0 ? 1 : 64;
}

/* ---- scalar reference ------------------------------------------------------ */

/* One score from the formula (double), or -inf when masked. */
static double score_scalar(const wavepe_attention_plan *p, int64_t b, int64_t h, const void *qrow_base,
                           int64_t qoff, int64_t pos, int64_t n) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, hk = h / p->hg;
    const int64_t koff = attn_off(a->k_strides, b, hk, n);
    double s = 0.0;
    for (int64_t c = 0; c < d; ++c) s += ld(qrow_base, qoff + c, a->dtype) * ld(a->k, koff + c, a->dtype);
    if (p->bias == ATTN_BIAS_TABLE) {
        const int64_t idx = attn_table_index(a, pos - n);
        if (idx >= 0) {
            double t = 0.0;
            for (int64_t c = 0; c < d; ++c) t += ld(qrow_base, qoff + c, a->dtype) * ld(a->table, idx * d + c, a->dtype);
            s += t;
        }
    }
    s *= a->scale;
    if (p->bias == ATTN_BIAS_ALIBI) s -= ld(a->slopes, h, p->acc) * (double)iabs64(pos - n);
    if (a->softcap > 0.0) s = a->softcap * tanh(s / a->softcap);
    return s;
}

static inline int key_masked(const wavepe_attention_args *a, int64_t b, int64_t n) {
    return a->key_padding_mask != NULL && a->key_padding_mask[b * a->kpm_stride + n] != 0;
}


static int fwd_scalar(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d;
    double *acc = malloc(sizeof(double) * (size_t)d);
    if (acc == NULL) return WAVEPE_E_NOMEM;
    for (int64_t row = begin; row < end; ++row) {
        const int64_t m = row % a->m, bh = row / a->m, h = bh % a->heads, b = bh / a->heads;
        const int64_t hk = h / p->hg, pos = a->q_offset + m;
        const int64_t qoff = attn_off(a->q_strides, b, h, m);
        double mx = -INFINITY, l = 0.0;
        int seen = 0;
        for (int64_t c = 0; c < d; ++c) acc[c] = 0.0;
        int64_t nbeg, nend;
        wavepe_attention_keys(a, b, pos, &nbeg, &nend);
        for (int64_t n = nbeg; n < nend; ++n) {
            if (key_masked(a, b, n)) continue;
            seen = 1;
            const double s = score_scalar(p, b, h, a->q, qoff, pos, n);
            if (s > mx) {
                const double corr = exp(mx - s);
                l *= corr;
                for (int64_t c = 0; c < d; ++c) acc[c] *= corr;
                mx = s;
            }
            /* a score of -inf (an infinite k or bias) weighs 0, even before any finite score */
            const double pr = s == -INFINITY ? 0.0 : exp(s - mx);
            l += pr;
            const int64_t voff = attn_off(a->v_strides, b, hk, n);
            for (int64_t c = 0; c < d; ++c) acc[c] += pr * ld(a->v, voff + c, a->dtype);
        }
        const int64_t ooff = attn_off(a->out_strides, b, h, m);
        if (seen && l == 0.0) { /* keys seen, every score -inf: 0/0, as the formula, or mark_neg_inf's code */
            if (a->mark_neg_inf) {
                for (int64_t c = 0; c < d; ++c) st(a->out, ooff + c, 0.0, a->dtype);
                st(a->lse, bh * a->m + m, INFINITY, p->acc);
                continue;
            }
            l = NAN;
        }
        const int any = l > 0.0 || isnan(l);
        for (int64_t c = 0; c < d; ++c) st(a->out, ooff + c, any ? acc[c] / l : 0.0, a->dtype);
        st(a->lse, bh * a->m + m, any ? mx + log(l) : -INFINITY, p->acc);
    }
    free(acc);
    return WAVEPE_OK;
}

/* Backward of one (batch, query head) unit: dq of that head, its dk/dv
 * contribution (the kv head's outputs, or its GQA partial), table / slope
 * partials. */
static int bwd_scalar_unit(wavepe_attention_plan *p, int64_t unit, int64_t slot, double *scratch) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, N = a->n, M = a->m;
    const int64_t b = unit / a->heads, h = unit % a->heads, hk = h / p->hg;
    double *dk = scratch, *dv = scratch + N * d, *dq = scratch + 2 * N * d;
    double *dt = p->dt_partial != NULL ? (double *)p->dt_partial + slot * p->dt_rows * p->dt_cols : NULL;
    memset(dk, 0, sizeof(double) * (size_t)(2 * N * d));
    double dslope = 0.0;
    for (int64_t m = 0; m < M; ++m) {
        const int64_t pos = a->q_offset + m, bhm = (b * a->heads + h) * M + m;
        const int64_t qoff = attn_off(a->q_strides, b, h, m);
        const int64_t ooff = attn_off(a->out_strides, b, h, m);
        const int64_t gooff = attn_off(a->dout_strides, b, h, m);
        const double lse = ld(a->lse, bhm, p->acc);
        for (int64_t c = 0; c < d; ++c) dq[c] = 0.0;
        if (!isinf(lse)) { /* -inf: no key seen; +inf: mark_neg_inf's zero-weight row (attention.h) */
            double D = 0.0;
            for (int64_t c = 0; c < d; ++c) D += ld(a->dout, gooff + c, a->dtype) * ld(a->out, ooff + c, a->dtype);
            if (a->dlse != NULL) D -= ld(a->dlse, bhm, p->acc);
            int64_t nbeg, nend;
            wavepe_attention_keys(a, b, pos, &nbeg, &nend);
            for (int64_t n = nbeg; n < nend; ++n) {
                if (key_masked(a, b, n)) continue;
                const double s = score_scalar(p, b, h, a->q, qoff, pos, n);
                const double pr = exp(s - lse);
                const int64_t koff = attn_off(a->k_strides, b, hk, n);
                const int64_t voff = attn_off(a->v_strides, b, hk, n);
                double dp = 0.0;
                for (int64_t c = 0; c < d; ++c) dp += ld(a->dout, gooff + c, a->dtype) * ld(a->v, voff + c, a->dtype);
                double ds = pr * (dp - D);
                if (a->softcap > 0.0) { /* through softcap * tanh(s / softcap): s is the capped score */
                    const double th = s / a->softcap;
                    ds *= 1.0 - th * th;
                }
                const double dss = ds * a->scale;
                const int64_t idx = p->bias == ATTN_BIAS_TABLE ? attn_table_index(a, pos - n) : -1;
                for (int64_t c = 0; c < d; ++c) {
                    const double qc = ld(a->q, qoff + c, a->dtype);
                    dv[n * d + c] += pr * ld(a->dout, gooff + c, a->dtype);
                    dk[n * d + c] += dss * qc;
                    dq[c] += dss * ld(a->k, koff + c, a->dtype);
                    if (idx >= 0) {
                        dq[c] += dss * ld(a->table, idx * d + c, a->dtype);
                        if (dt != NULL) dt[idx * d + c] += dss * qc;
                    }
                }
                dslope -= ds * (double)iabs64(pos - n);
            }
        }
        for (int64_t c = 0; c < d; ++c) st(a->dq, bhm * d + c, dq[c], a->dtype);
    }
    if (p->dslope_partial != NULL) p->dslope_partial[b * a->heads + h] = dslope;
    void *dkd = attn_dk_dest(p, b, h), *dvd = attn_dv_dest(p, b, h);
    const int dkv = p->dkv_partial != NULL ? p->acc : a->dtype; /* a partial, or the outputs */
    for (int64_t i = 0; i < N * d; ++i) {
        st(dkd, i, dk[i], dkv);
        st(dvd, i, dv[i], dkv);
    }
    return WAVEPE_OK;
}

static int bwd_scalar(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    const int64_t d = p->a.d, N = p->a.n;
    double *scratch = malloc(sizeof(double) * (size_t)(2 * N * d + d));
    if (scratch == NULL) return WAVEPE_E_NOMEM;
    int status = WAVEPE_OK;
    for (int64_t slot = begin; slot < end && status == WAVEPE_OK; ++slot)
        for (int64_t unit = slot; unit < p->nunits && status == WAVEPE_OK; unit += p->nslots)
            status = bwd_scalar_unit(p, unit, slot, scratch);
    free(scratch);
    return status;
}

/* ---- phase 1: reductions -------------------------------------------------- */

/* acc[0..d) += w * row[0..d) for a partial row in the accumulator type, and
 * out[0..d) = acc[0..d) * inv in the data's: loops the compiler vectorizes, the
 * dtype tested once a row.  Element by element through ld() / st() (a switch
 * per element) and a division each, the combine cost ~7 cycles an element
 * (one thread, 32/8 heads, d = 128, 1024 keys in 2 chunks, AVX2 EPYC Zen 3:
 * float32 0.382 -> 0.36 ms a call). */
static void add_scaled_row(double *restrict acc, const void *row, double w, int64_t d, int f64) {
    if (f64) {
        const double *r = (const double *)row;
        for (int64_t j = 0; j < d; ++j) acc[j] += w * r[j];
    } else {
        const float *r = (const float *)row;
        for (int64_t j = 0; j < d; ++j) acc[j] += w * (double)r[j];
    }
}

static void store_scaled_row(void *out, int64_t off, const double *acc, double inv, int64_t d, int dtype) {
    switch (dtype) {
    case WAVEPE_F64:
        for (int64_t j = 0; j < d; ++j) ((double *)out)[off + j] = acc[j] * inv;
        break;
    case WAVEPE_F32:
        for (int64_t j = 0; j < d; ++j) ((float *)out)[off + j] = (float)(acc[j] * inv);
        break;
    default:
        for (int64_t j = 0; j < d; ++j) st(out, off + j, acc[j] * inv, dtype);
        break;
    }
}

/* Split-N decoding: merge the chunks' (max, sum, acc) of each query row in
 * chunk order. */
static int fwd_combine(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, C = p->nchunks, stride = dpad + 2;
    double *acc = malloc(sizeof(double) * (size_t)d);
    if (acc == NULL) return WAVEPE_E_NOMEM;
    for (int64_t row = begin; row < end; ++row) {
        const int64_t m = row % a->m, bh = row / a->m, h = bh % a->heads, b = bh / a->heads;
        const int64_t base = row * C * stride;
        /* a NaN chunk maximum makes the row NaN; a chunk whose visible keys
         * all scored -inf marks its sum -0.0 (attention_simd.h) */
        double mx = -INFINITY;
        int saw_only_neg_inf = 0;
        for (int64_t c = 0; c < C; ++c) {
            const double mc = ld(p->partial, base + c * stride + dpad, p->acc);
            if (mc > mx || mc != mc) mx = mc != mc || mx != mx ? NAN : mc;
            const double lc = ld(p->partial, base + c * stride + dpad + 1, p->acc);
            saw_only_neg_inf |= lc == 0.0 && signbit(lc);
        }
        const int64_t ooff = attn_off(a->out_strides, b, h, m);
        if (mx == -INFINITY && saw_only_neg_inf && a->mark_neg_inf) { /* zero weight: out = 0, lse = +inf */
            for (int64_t j = 0; j < d; ++j) st(a->out, ooff + j, 0.0, a->dtype);
            st(a->lse, row, INFINITY, p->acc);
            continue;
        }
        double l = mx == -INFINITY && saw_only_neg_inf ? NAN : 0.0;
        for (int64_t c = 0; c < d; ++c) acc[c] = 0.0;
        if (mx != -INFINITY) {
            for (int64_t c = 0; c < C; ++c) {
                const int64_t o = base + c * stride;
                const double mc = ld(p->partial, o + dpad, p->acc);
                if (mc == -INFINITY) continue;
                const double w = exp(mc - mx);
                l += w * ld(p->partial, o + dpad + 1, p->acc);
                add_scaled_row(acc, (const char *)p->partial + o * p->esize, w, d, p->acc == WAVEPE_F64);
            }
        }
        const int any = l > 0.0 || isnan(l);
        /* a NaN l multiplies through as the division did; 1 / l of a finite l > 0 may be
         * inf only for l < 2^-1024, which a sum of weights containing exp(0) = 1 never is */
        store_scaled_row(a->out, ooff, acc, any ? 1.0 / l : 0.0, d, a->dtype);
        st(a->lse, row, any ? mx + log(l) : -INFINITY, p->acc);
    }
    free(acc);
    return WAVEPE_OK;
}

/* GQA: dk, dv of key rows [n0, n1) of (b, hk) = the sum of its query heads'
 * partials, in head order. */
static void reduce_kv_rows(wavepe_attention_plan *p, int64_t b, int64_t hk, int64_t n0, int64_t n1) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d;
    /* a chunk at a time, heads outer and the types' switches outside the element loops (which the compiler
     * vectorizes): element by element through ld / st this was a tenth of a bf16 backward (perf, Zen 4) */
    enum { CHUNK = 512 };
    double s[CHUNK];
    for (int which = 0; which < 2; ++which) {
        void *dst = which == 0 ? a->dk : a->dv;
        const int64_t obase = (b * a->kv_heads + hk) * a->n * d;
        for (int64_t i0 = n0 * d; i0 < n1 * d; i0 += CHUNK) {
            const int64_t len = n1 * d - i0 < CHUNK ? n1 * d - i0 : CHUNK;
            for (int64_t i = 0; i < len; ++i) s[i] = 0.0;
            for (int64_t h = hk * p->hg; h < (hk + 1) * p->hg; ++h) { /* in head order, as before */
                const int64_t src = ((b * a->heads + h) * 2 + which) * a->n * d + i0;
                if (p->acc == WAVEPE_F64) {
                    const double *x = (const double *)p->dkv_partial + src;
                    for (int64_t i = 0; i < len; ++i) s[i] += x[i];
                } else {
                    const float *x = (const float *)p->dkv_partial + src;
                    for (int64_t i = 0; i < len; ++i) s[i] += (double)x[i];
                }
            }
            switch (a->dtype) {
            case WAVEPE_F64:
                for (int64_t i = 0; i < len; ++i) ((double *)dst)[obase + i0 + i] = s[i];
                break;
            case WAVEPE_BF16:
                for (int64_t i = 0; i < len; ++i) ((uint16_t *)dst)[obase + i0 + i] = wp_f32_to_bf16((float)s[i]);
                break;
            case WAVEPE_F16:
                for (int64_t i = 0; i < len; ++i) ((uint16_t *)dst)[obase + i0 + i] = wp_f32_to_f16((float)s[i]);
                break;
            default:
                for (int64_t i = 0; i < len; ++i) ((float *)dst)[obase + i0 + i] = (float)s[i];
                break;
            }
        }
    }
}

/* Phase 1 of the backward, units in this order: table-gradient rows, the
 * slopes (one unit), chunks of dk/dv rows to reduce over query heads (GQA). */
static int bwd_reduce(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, R = a->dtable != NULL ? a->table_rows : 0;
    const int64_t S = a->dslopes != NULL ? 1 : 0;
    for (int64_t row = begin; row < end; ++row) {
        if (row >= R + S) {
            const int64_t u = row - R - S, per = (a->n + ATTN_KV_REDUCE_ROWS - 1) / ATTN_KV_REDUCE_ROWS;
            const int64_t bk = u / per, n0 = (u % per) * ATTN_KV_REDUCE_ROWS;
            const int64_t n1 = n0 + ATTN_KV_REDUCE_ROWS < a->n ? n0 + ATTN_KV_REDUCE_ROWS : a->n;
            reduce_kv_rows(p, bk / a->kv_heads, bk % a->kv_heads, n0, n1);
            continue;
        }
        if (row >= R) { /* slopes: sum over the batch in order */
            for (int64_t h = 0; h < a->heads; ++h) {
                double s = 0.0;
                for (int64_t b = 0; b < a->batch; ++b) s += p->dslope_partial[b * a->heads + h];
                st(a->dslopes, h, s, p->acc);
            }
            continue;
        }
        for (int64_t c = 0; c < d; ++c) {
            double s = 0.0;
            for (int64_t slot = 0; slot < p->nslots; ++slot) {
                if (p->dt_partial == NULL) break;
                if (p->kind == ATTN_KIND_SCALAR) {
                    s += ((const double *)p->dt_partial)[(slot * p->dt_rows + row) * p->dt_cols + c];
                    continue;
                }
                if (p->prows == 0) continue;
                /* packed rows whose distance maps to this table row */
                const int64_t r = a->r_lo + row;
                int64_t rmin = r, rmax = r;
                if (a->clamp && row == 0) rmin = p->pr_lo;
                if (a->clamp && row == R - 1) rmax = p->pr_hi;
                if (rmin < p->pr_lo) rmin = p->pr_lo;
                if (rmax > p->pr_hi) rmax = p->pr_hi;
                const int64_t base = slot * p->dt_rows * p->dt_cols;
                for (int64_t rr = rmax; rr >= rmin; --rr)
                    s += ld(p->dt_partial, base + (p->pr_hi - rr) * p->dt_cols + c, p->acc);
            }
            st(a->dtable, row * d + c, s, a->dtype);
        }
    }
    return WAVEPE_OK;
}

/* ---- dispatch ------------------------------------------------------------------ */

/* The vector phases of a plan's ISA (a plan has a vector kind only with an
 * ISA this build has: plan_isa). */
typedef int (*attn_phase)(wavepe_attention_plan *p, int64_t begin, int64_t end);
enum { ATTN_PHASE_FWD_TILED = 0, ATTN_PHASE_FWD_DECODE = 1, ATTN_PHASE_BWD = 2 };
#define ATTN_PHASES_(ID, name, arch, ...)                                                        \
    WAVEPE_IF_VECTOR_##arch(case WAVEPE_ISA_##ID: {                                              \
        static const attn_phase phases[4][3] = { /* by wavepe_dtype */                           \
            {attn_fwd_tiled_f32_##name, attn_fwd_decode_f32_##name, attn_bwd_f32_##name},        \
            {attn_fwd_tiled_f64_##name, attn_fwd_decode_f64_##name, attn_bwd_f64_##name},        \
            {attn_fwd_tiled_bf16_##name, attn_fwd_decode_bf16_##name, attn_bwd_bf16_##name},     \
            {attn_fwd_tiled_f16_##name, attn_fwd_decode_f16_##name, attn_bwd_f16_##name}};       \
        return phases[p->a.dtype][which];                                                        \
    })
static attn_phase vector_phase(const wavepe_attention_plan *p, int which) {
    (void)which;
    switch (p->isa) {
    WAVEPE_ISA_TABLE(ATTN_PHASES_, _)
    default: return NULL;
    }
}
#undef ATTN_PHASES_

static int run_phase(wavepe_attention_plan *p, int phase, int64_t begin, int64_t end) {
    if (p->backward) {
        if (phase == 1) return bwd_reduce(p, begin, end);
        if (p->kind != ATTN_KIND_SCALAR) return vector_phase(p, ATTN_PHASE_BWD)(p, begin, end);
        return bwd_scalar(p, begin, end);
    }
    if (phase == 1) return fwd_combine(p, begin, end);
    if (p->kind == ATTN_KIND_TILED) return vector_phase(p, ATTN_PHASE_FWD_TILED)(p, begin, end);
    if (p->kind == ATTN_KIND_DECODE) return vector_phase(p, ATTN_PHASE_FWD_DECODE)(p, begin, end);
    return fwd_scalar(p, begin, end);
}

int wavepe_attention_run(wavepe_attention_plan *p, int phase, int64_t begin, int64_t end) {
    if (begin >= end) return WAVEPE_OK;
    const wavepe_fpenv env = wavepe_fpenv_enter();
    const int status = run_phase(p, phase, begin, end);
    wavepe_fpenv_leave(env);
    return status;
}
