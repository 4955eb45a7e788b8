/* attention_simd.h: the tiled attention kernels, written once (simd_type.h)
 * and instantiated per ISA by attention_<isa>.c (attention_avx2.c,
 * attention_avx512.c, attention_neon.c) for float, double, bfloat16 and
 * float16.
 *
 * Half types (S = uint16_t, T = float): the caller's q, k, v, out, dout, dq
 * are read and written as they are stored; every read widens a tile in
 * registers on its way into the packed operands (query groups, key strips,
 * value panels, all float32 and in L1/L2), so the products, the softmax
 * statistics and every accumulator are float32, and each output element is
 * rounded once (half.h): out at the end of its row, dq once its head is
 * done, dk / dv in the plan's float32 reduction (attention.c).
 *
 * Structure (BLIS-like): loops around register-blocked micro-kernels of MR = 6
 * rows x NR = 2 vectors (attention_mk.h).  The products whose operands an
 * engine packs its own way -- the scores S = Q K^T, the bias windows
 * G = Q T_win^T, O += P V and the backward's dP = dO V^T -- go through the
 * matrix engine interface (attention_engine.h): vector FMA
 * (attention_engine_fma.h) or paired bf16 dot products
 * (attention_engine_pairs.h), one per instantiation.
 *
 * Queries are processed in groups of 6 rows against a key block of BN keys:
 * scores (with the bias as the accumulators' initial value), the online
 * softmax on those 6 rows, then P V -- all in L1.  The relative bias of a
 * group is q . T over the window of distances the group can see, computed
 * strip by strip of the packed table and only on the columns that hold a
 * nonzero in that strip (scale-major wavelet grids: large distances touch
 * only the high-scale columns); strips outside the support cost nothing.
 *
 * A block engine may run a key block's products whole (attention_engine.h's
 * block operations): the amx ISA's bf16 / fp16 kernels on tiles
 * (attention_blocks_tiles.h), the vector engine's where tiles do not run;
 * every other instantiation has none (attention_blocks_none.h).
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_internal.h"
#include "checked.h"
#include "scratch.h"
#include "simd_type.h"

/* Tiles of this type (attention_internal.h): micro-tile MR x NR, NR = 2 vectors. */
#define NR (2 * VL)
#if defined(WP_COMPUTE_F32)
#define ATTN_NEGLIGIBLE 0x1p-24 /* the compute type's rounding of 1: attn_strip_negligible */
#define ATTN_FBM (ATTN_FBM_F32 * VL / 8) /* attn_fwd_block_rows */
#define ATTN_FBN ATTN_FBN_F32
#define ATTN_BBM ATTN_BBM_F32
#define ATTN_BBN ATTN_BBN_F32
#define ATTN_TB WP_TB_F32 /* transpose block (the vocabulary's) */
#else
#define ATTN_NEGLIGIBLE 0x1p-53
#define ATTN_FBM (ATTN_FBM_F64 * VL / 4) /* attn_fwd_block_rows */
#define ATTN_FBN ATTN_FBN_F64
#define ATTN_BBM ATTN_BBM_F64
#define ATTN_BBN ATTN_BBN_F64
#define ATTN_TB WP_TB_F64
#endif
/* The block engine (attention_engine.h): the amx ISA's bf16 / fp16 kernels multiply whole blocks on tiles
 * (attention_blocks_tiles.h), whose forward takes keys 256 at a time: each P V product then runs 8 steps
 * along the keys per load and store of its O tiles instead of 4, and the per-block work (O rescaled per
 * row, the row maxima and sums) halves.  Every other instantiation has none (attention_blocks_none.h). */
#if defined(WP_HAS_TILES) && defined(WP_STORAGE_HALF)
#define ATTN_BLOCKS_FILE "attention_blocks_tiles.h"
#define ATTN_BLOCKS_KIND ATTN_BLOCKS_TILES
#undef ATTN_FBN
#define ATTN_FBN ATTN_BBN_F32
#else
#define ATTN_BLOCKS_FILE "attention_blocks_none.h"
#define ATTN_BLOCKS_KIND ATTN_BLOCKS_NONE
#endif

/* ATTN_FBM x ATTN_FBN forward blocks, ATTN_BBM x ATTN_BBN backward blocks */
#define ATTN_BNMAX (ATTN_FBN > ATTN_BBN ? ATTN_FBN : ATTN_BBN)
#define ATTN_SLD (ATTN_BNMAX + NR)           /* score / P / dS tile row stride */
#define ATTN_GLD (ATTN_BNMAX + 2 * NR + 64)  /* bias window row stride */
#define ATTN_ALD (ATTN_BNMAX + NR)           /* ALiBi row stride */
/* The tiles' S and dP (float32) and P (half) row strides: one tile row past 1 KiB and 512 bytes, whose
 * powers of two put a 16-row tile's stores in 4 (S) or 8 (P) of L1's 64 sets (same-process A/B, Emerald
 * Rapids, L=4096 H=2 bf16, one thread, medians of 80: wavelet 0.995x, nope 0.988x; minima 0.975, 0.976x) */
#define ATTN_TSLD (ATTN_BNMAX + 16)
#define ATTN_TPLD (ATTN_BNMAX + 32)
#define ATTN_TGW (ATTN_BNMAX + 48)           /* tile bias window row stride: 16 rows' window + a tile */
#define ATTN_TWW (ATTN_BBM + ATTN_BNMAX + 64) /* the backward's tile table window row stride: a block's window,
                                                * its start rounded to a pair, and a product's 32 past it */

/* ---- horizontal reductions and masks -------------------------------------- */

/* lanes where jl <= j0 + lane < jv */
static inline MT FN(lanes_within)(int64_t j0, int64_t jl, int64_t jv) {
    return M(andnot)(M(first)(jl - j0), M(first)(jv - j0));
}

#include "attention_mk.h"

/* ---- shared state of one unit of work ------------------------------------------------- */

typedef struct {
    const wavepe_attention_plan *p;
    T *qp;     /* packed scaled query groups [group][d][6] */
    T *kp;     /* packed key strips of the current block (the fma engine's) */
    uint32_t *qb;  /* the pairs engine's: query groups as bf16 pairs [group][ceil(d/2)][6], unscaled */
    uint32_t *kpb; /* the pairs engine's: key strips of the current block as bf16 pairs */
    uint32_t *dob, *vpb; /* the pairs engine's, backward: dout groups and value strips as bf16 pairs (dop, vp unused) */
    uint32_t *vpp; /* the pairs engine's, forward: value panels as bf16 pairs along the keys (vp unused) */
    uint32_t *pp;  /* the pairs engine's, forward: the group's P rounded to bf16, ATTN_MR x ATTN_SLD elements */
    T *vp;     /* forward: value panels; backward: packed value strips */
    T *dop;    /* backward: packed dout groups */
    T *s;      /* scores / P: rows x ATTN_SLD */
    T *ds;     /* backward: dP / dS: BM x ATTN_SLD */
    T *g;      /* bias window (and its gradient): 6 x ATTN_GLD */
    T *al;     /* ALiBi rows: 6 x ATTN_ALD */
    T *kpm;    /* key block's additive mask: 0 or -inf */
    T *o;      /* accumulators: rows x dpad */
    T *mst, *lst; /* online softmax max and sum per row */
    T *dqa, *dka, *dva; /* backward accumulators */
    T *dqh;    /* backward, half types: the head's dq in float32 (M x d), rounded once at the end */
    T *dgt;    /* backward: skewed dS tile for the table gradient */
    T *qr;     /* narrow decoding groups: scaled query rows, ATTN_NARROW_ROWS x dpad */
    T *zr;     /* a row of dpad zeros (table rows outside the table) */
    T *kpan, *qpan, *dopan; /* backward: K block, Q block, dO block as column panels */
    T *rbad;   /* backward: 1 where the block's q or dO row holds a NaN/inf (0 elsewhere) */
    int any_bad; /* backward: some row of the block is flagged in rbad */
    double *dvec; /* backward: D per query row */
    void *block;
    /* the tile engine's (attention_blocks_tiles.h; p->tiles): allocated only where it runs, zero elsewhere */
    uint16_t *ta;  /* the query block's rows, half elements [rows16][tlda], zero padded: A of S and G */
    uint16_t *tdo; /* backward: the block's dO rows, likewise: A of dP */
    uint32_t *tk;  /* the key block transposed in pairs [tk2][ATTN_BNMAX]: B of S */
    uint32_t *tv;  /* forward: value rows in pairs along the keys [ATTN_BNMAX / 2][dpad]: B of P V;
                    * backward: the values transposed in pairs [tk2][ATTN_BNMAX]: B of dP */
    float *tsc;    /* the block's S [rows16][ATTN_TSLD] (unscaled) */
    float *tdp;    /* backward: the block's dP [rows16][ATTN_TSLD] */
    uint16_t *tp;  /* forward: the block's P rounded [rows16][ATTN_TPLD]: A of P V */
    float *tg;     /* bias windows of two 16-row tiles [32][ATTN_TGW] (unscaled; tiles_windows) */
    int64_t tgp[(ATTN_FBM > ATTN_BBM ? ATTN_FBM : ATTN_BBM) / 16 + 1]; /* each 16-row tile's first packed row */
    float tqn[(ATTN_FBM > ATTN_BBM ? ATTN_FBM : ATTN_BBM) / 16 + 1];   /* each 16-row tile's largest |q|_1 */
    int64_t tg_next;   /* the next 16-row tile whose window tiles_windows may compute in this key block */
    int64_t tlda, tk2; /* ta's row length (2 tk2), pairs of d rounded up to a tile's 16 */
    int tiles_rows;    /* the query block's rows (and dO) are packed in ta (tdo): its blocks run on tiles */
    int groups_late;   /* the forward's groups are not packed for the vector kernels yet (pack_groups_late) */
    const S *groups_q; /* their first query row */
    void *tblock;
    /* the forward's packed key blocks of one (batch, kv head), kept across the thread's units (which run
     * that head's query blocks one after another): block n0 = slot * ATTN_FBN packed whole (its keys up to
     * n), once, instead of once per query block.  NULL when too large (ATTN_KV_CACHE_BYTES) */
    uint32_t *kvc;
    int64_t kvc_bh, kvc_slots, kvc_stride; /* the (b, kv head) cached (-1: none); slots; uint32 per slot */
    signed char *kvc_state;                /* per slot: 0 not packed, 1 packed, 2 packed, not finite */
    uint32_t *tk0, *tv0;                   /* the scratch tk / tv, for blocks the cache does not hold */
    /* the backward's accumulating products on tiles (tiles_block_backward; NULL where they do not run) */
    uint16_t *tqt, *tdot; /* the head's q and dO rows transposed per query block [nqb][dpad][ATTN_BBM]: A of
                           * dK^T and dV^T; a row holding a NaN or inf is zero (bad_rows_backward adds it) */
    uint16_t *tds;        /* the block's dS rounded [ATTN_BBM][ATTN_BNMAX]: A of dQ; tpr: two P rows rounded */
    uint16_t *tpr;
    uint32_t *tpp, *tdsp; /* P and dS in pairs of rows [ATTN_BBM / 2][ATTN_BNMAX]: B of dV^T and dK^T */
    uint32_t *tkp;        /* the key block in pairs along the keys [ATTN_BNMAX / 2][dpad]: B of dQ */
    float *dvt, *dkt;     /* the key block's dV^T and dK^T [dpad][ATTN_BBN] */
    int tk_finite;        /* the key block's unmasked keys are finite (else dQ runs the vector kernels: a
                           * tile product would meet 0 * inf where a row does not see a key) */
    uint16_t *tgw;        /* a table's: the block's dS skewed onto its table window, rounded [ATTN_BBM][ATTN_TWW] */
    uint32_t *tgwp;       /* with a table gradient: tgw in pairs of rows [ATTN_BBM / 2][ATTN_TWW], and */
    float *tdt;           /* the window's dT^T [dpad][ATTN_TWW] */
} FN(work);

typedef struct {
    int rows;                /* valid rows, 1..6 */
    int64_t pos[ATTN_MR];    /* query positions */
    int64_t klo[ATTN_MR], khi[ATTN_MR]; /* the keys [klo, khi) each row sees (wavepe_attention_keys) */
    T slope[ATTN_MR];        /* ALiBi slope of each row's head */
    const T *qp;             /* packed scaled rows [d][6] */
    T qn;                    /* the largest L1 norm of the group's rows in qp (scaled): attn_strip_negligible */
    const uint32_t *qb;      /* the pairs engine's: the rows as bf16 pairs [ceil(d/2)][6] (else NULL) */
    const T *qr;             /* narrow groups (rows <= ATTN_NARROW_ROWS): scaled rows, stride dpad; else NULL */
} FN(group);

typedef struct {
    int64_t n0, nk;          /* first key, keys in the block */
    int64_t nrun;            /* keys from n0 to the end of the range being run (software prefetch bound) */
    const S *k, *v;          /* rows of key n0 */
    int64_t ks, vs;          /* row strides */
    int masked;              /* key padding present: w->kpm holds the mask */
} FN(kblock);

/* Where group_softmax reads a group's scores: row t's score for key j is
 *     scale * (src[t][j] + win[t][j]) + post[t][j]        (win, post: none where NULL)
 * The vector kernels' scores come scaled, their bias in them (scale 1, neither row: P overwrites them in
 * place); the tiles' are the block's S beside the bias window G, both unscaled, or S and ALiBi's rows --
 * read where the products left them, not copied into one row first. */
typedef struct {
    const T *src[ATTN_MR], *win[ATTN_MR], *post[ATTN_MR];
    T scale;
} FN(score_rows);

#include "attention_engine.h"

static int64_t FN(floor_div)(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Keys [jl, jv) of the block each row sees (jl = jv = 0: none); returns the
 * maximum jv. */
static int64_t FN(valid_keys)(const FN(group) * g, const FN(kblock) * kb, int64_t jl[ATTN_MR],
                              int64_t jv[ATTN_MR]) {
    int64_t jmax = 0;
    for (int t = 0; t < ATTN_MR; ++t) {
        int64_t lo = 0, hi = 0;
        if (t < g->rows) {
            lo = g->klo[t] - kb->n0;
            hi = g->khi[t] - kb->n0;
            lo = lo < 0 ? 0 : lo;
            hi = hi > kb->nk ? kb->nk : hi;
            if (hi <= lo) lo = hi = 0;
        }
        jl[t] = lo;
        jv[t] = hi;
        if (hi > jmax) jmax = hi;
    }
    return jmax;
}

/* The row's keys: position pos of batch row b, into g->pos, klo, khi. */
static inline void FN(set_row)(const wavepe_attention_args *a, FN(group) * g, int t, int64_t b, int64_t pos) {
    g->pos[t] = pos;
    wavepe_attention_keys(a, b, pos, &g->klo[t], &g->khi[t]);
}

/* Window of packed table rows the group's (row, key) pairs map to:
 * p(t, j) = pr_hi - pos_t + n0 + j.  Returns 0 when no table row is touched. */
static int FN(table_window)(const wavepe_attention_plan *p, const FN(group) * g, const FN(kblock) * kb,
                            const int64_t jv[ATTN_MR], int64_t jmax, int64_t *p_first, int64_t *p_last) {
    if (p->prows == 0) return 0;
    int64_t pmin = INT64_MAX, pmax = INT64_MIN;
    for (int t = 0; t < g->rows; ++t) {
        if (jv[t] == 0) continue;
        if (g->pos[t] > pmax) pmax = g->pos[t];
        if (g->pos[t] < pmin) pmin = g->pos[t];
    }
    if (pmax == INT64_MIN) return 0;
    *p_first = p->pr_hi - pmax + kb->n0;
    *p_last = p->pr_hi - pmin + kb->n0 + jmax - 1;
    return !(*p_last < 0 || *p_first >= p->prows);
}

/* Bias of a group against a key block: init[t] points at row t's bias for
 * keys 0.. (at least jmax rounded up to NR of them); returns 0 for no bias. */
static int FN(group_bias)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb, const int64_t jv[ATTN_MR],
                          int64_t jmax, const T *init[ATTN_MR]) {
    const wavepe_attention_plan *p = w->p;
    const int64_t nstrip = (jmax + NR - 1) / NR;
    int has_init = 0;
    int t_ok = 0; /* a row that has keys: stands in for those that have none */
    while (t_ok < ATTN_MR - 1 && jv[t_ok] == 0) ++t_ok;
    int64_t p_first, p_last;
    if (p->bias == ATTN_BIAS_TABLE && FN(table_window)(p, g, kb, jv, jmax, &p_first, &p_last)) {
        const int64_t p_base = FN(floor_div)(p_first, NR) * NR;
        const int64_t s_lo = p_first < 0 ? 0 : p_first / NR;
        const int64_t s_hi = (p_last < p->prows ? p_last : p->prows - 1) / NR;
        int any = 0; /* (strips that no weight can see: attn_strip_negligible) */
        const double qbound = (double)g->qn;
        for (int64_t st = s_lo; st <= s_hi; ++st)
            any |= p->strip_chi[st] > p->strip_clo[st] && !attn_strip_negligible(p, st, qbound, ATTN_NEGLIGIBLE);
        if (any) {
            const int64_t width = p_last - p_base + 1 + NR;
            for (int t = 0; t < ATTN_MR; ++t)
                for (int64_t j = 0; j < width; j += VL) V(storeu)(w->g + t * ATTN_GLD + j, V(zero)());
            for (int64_t st = s_lo; st <= s_hi; ++st) {
                const int64_t clo = p->strip_clo[st], chi = p->strip_chi[st];
                if (chi <= clo || attn_strip_negligible(p, st, qbound, ATTN_NEGLIGIBLE)) continue;
                FN(eng_window_strip)(p, g, st, clo, chi, w->g + (st * NR - p_base), ATTN_GLD);
            }
            for (int t = 0; t < ATTN_MR; ++t) {
                const int tt = jv[t] > 0 ? t : t_ok;
                init[t] = w->g + t * ATTN_GLD + (p->pr_hi - g->pos[tt] + kb->n0 - p_base);
            }
            has_init = 1;
        }
    } else if (p->bias == ATTN_BIAS_ALIBI) {
        for (int t = 0; t < ATTN_MR; ++t) {
            const int tt = jv[t] > 0 ? t : t_ok;
            T *row = w->al + t * ATTN_ALD;
            const VT ns = V(set1)(-g->slope[tt]);
            for (int64_t j = 0; j < nstrip * NR; j += VL) {
                /* |pos - n0 - j - lane|: exact while positions stay below 2^24 (float) */
                const VT r = V(sub)(V(set1)((T)(g->pos[tt] - kb->n0 - j)), V(iota)());
                V(storeu)(row + j, V(mul)(ns, V(abs)(r)));
            }
            init[t] = row;
        }
        has_init = 1;
    }
    return has_init;
}

/* The first key of the block's strip that holds a key some row of the group
 * sees: keys before it (another document's) are never computed. */
static int64_t FN(first_key)(const FN(group) * g, const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR]) {
    int64_t j0 = INT64_MAX;
    for (int t = 0; t < g->rows; ++t)
        if (jv[t] > jl[t] && jl[t] < j0) j0 = jl[t];
    return j0 == INT64_MAX ? 0 : j0 / NR * NR;
}

/* Scores of a group against a key block into s (6 rows, stride lds), keys
 * j0 (a multiple of NR) up to jmax rounded to NR; bias included.  Rows/keys
 * past jv hold finite junk; keys before j0 are not written. */
static void FN(group_scores)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb, const int64_t jv[ATTN_MR],
                             int64_t j0, int64_t jmax, T *s, int64_t lds) {
    const int64_t nstrip = (jmax + NR - 1) / NR;
    const T *init[ATTN_MR];
    const int has_init = FN(group_bias)(w, g, kb, jv, jmax, init);
    for (int64_t st = j0 / NR; st < nstrip; ++st) {
        const T *ini[ATTN_MR];
        if (has_init)
            for (int t = 0; t < ATTN_MR; ++t) ini[t] = init[t] + st * NR;
        FN(eng_score_strip)(w, g, st, has_init ? ini : NULL, s + st * NR, lds);
    }
}

/* q . T[p] for VL consecutive packed table rows p0 .. p0 + VL - 1 (rows
 * outside the table are zero), over the columns that can be nonzero there. */
static inline VT FN(dot_table)(const wavepe_attention_plan *p, const T *q, int64_t p0, const T *zero_row) {
    const int64_t pa = p0 < 0 ? 0 : p0, pb = p0 + VL - 1 < p->prows ? p0 + VL - 1 : p->prows - 1;
    if (pa > pb) return V(zero)();
    int64_t clo = INT64_MAX, chi = 0;
    for (int64_t st = pa / NR; st <= pb / NR; ++st)
        if (p->strip_chi[st] > p->strip_clo[st]) {
            clo = p->strip_clo[st] < clo ? p->strip_clo[st] : clo;
            chi = p->strip_chi[st] > chi ? p->strip_chi[st] : chi;
        }
    if (chi <= clo) return V(zero)();
    const T *rows[VL];
    for (int i = 0; i < VL; ++i) {
        const int64_t r = p0 + i;
        rows[i] = (r >= 0 && r < p->prows ? (const T *)p->trow + r * p->dpad : zero_row) + clo;
    }
    VT acc[VL];
    for (int i = 0; i < VL; ++i) acc[i] = V(zero)();
    const int64_t len = chi - clo;
    int64_t c = 0;
    for (; c + VL <= len; c += VL) {
        const VT qv = V(loadu)(q + clo + c);
        for (int i = 0; i < VL; ++i) acc[i] = V(fmadd)(qv, V(loadu)(rows[i] + c), acc[i]);
    }
    if (c < len) {
        const VT qv = V(loadu_n)(q + clo + c, len - c);
        for (int i = 0; i < VL; ++i) acc[i] = V(fmadd)(qv, V(loadu_n)(rows[i] + c, len - c), acc[i]);
    }
    return V(reduce_lanes)(acc);
}

/* Narrow groups (decoding: at most ATTN_NARROW_ROWS query rows per kv head,
 * e.g. the 4 query heads of a GQA group at one token) read each key and value
 * row once for all their rows: every load of a K or V chunk -- widened once,
 * for half types -- feeds the FMAs of every row. */

/* Decoding streams K and V from memory once, a few rows per ~100 ns: while
 * the scores of key j are computed, the K and V rows of key j +
 * ATTN_PREFETCH_KEYS are requested (up to the last key of the range run,
 * nrun), so the P V pass after the scores finds the block's V rows in cache
 * too.  Measured on an AVX2 EPYC (Zen 2), one thread, 1 x 32768 keys, GQA
 * 32/8: bf16 20.1 -> 12.8 ms, float32 32.0 -> 25.3 ms (8, 16 or 32 keys ahead
 * alike; the hardware prefetcher alone left the two streams' loads waiting). */
#define ATTN_PREFETCH_KEYS 16
static inline void FN(prefetch_row)(const S *rows, int64_t stride, int64_t j, int64_t nrun, int64_t d) {
    if (j >= nrun) return;
    const char *r = (const char *)(rows + j * stride);
    for (int64_t off = 0; off < d * (int64_t)sizeof(S); off += 64) wp_prefetch(r + off);
}

/* s[t][j] = q_t . k_j for rows t < rows (scaled query rows q, stride ldq) and
 * keys [j0, j1) of the block, RR rows x VL / RR keys per step (one horizontal
 * reduction of VL sums); keys past j1 up to the step are written too, from
 * the key j1 - 1.  RR is a constant of each call site (1, 2 or 4), so the
 * loops unroll into registers (always inlined: there are six call sites,
 * which GCC otherwise compiled as one function with RR a variable, 1.6x
 * slower).
 *
 * With a table (TB; tab: the packed row of key j0, rows of stride dpad, zero
 * past d), s[t][j] = q_t . (k_j + T_j): the bias of rows at one position (a
 * decoding step's query heads) costs one addition a chunk of a key for all
 * the rows, where q_t . T_j row by row (dot_table) costs as many fused
 * multiply-adds as q . k over the table's nonzero columns.  Measured on an
 * AVX2 EPYC (Zen 3), one thread, 32/8 heads, d = 128, the paper's wavelet
 * table: 1024 keys, bf16 0.49 -> 0.385 ms (no bias: 0.32), float32 0.53 ->
 * 0.445; 128 keys, bf16 72 -> 49 us (no bias: 43).  k_j + T_j rounds once in
 * float32, so a score is within the float32 path's usual bound
 * d * 2^-24 * sum_c |q_c| (|k_c| + |T_c|) of the exact one; a non-finite k_c
 * or T_c gives what the two sums give (inf + -inf is NaN in either order). */
static inline __attribute__((always_inline)) void FN(narrow_dots_rr)(const T *q, int64_t ldq, int rows,
                                                                      const FN(kblock) * kb, const T *tab, int64_t j0,
                                                                      int64_t j1, int64_t d, int64_t dpad, T *s,
                                                                      int64_t lds, const int RR, const int TB) {
    const S *k = kb->k;
    const int64_t ks = kb->ks;
    const int KS = VL / RR;
    for (int r0 = 0; r0 < rows; r0 += RR) {
        const T *qr[VL];
        for (int r = 0; r < RR; ++r) qr[r] = q + (r0 + r < rows ? r0 + r : r0) * ldq;
        for (int64_t j = j0; j < j1; j += KS) {
            if (r0 == 0)
                for (int i = 0; i < KS; ++i) {
                    FN(prefetch_row)(k, ks, j + i + ATTN_PREFETCH_KEYS, kb->nrun, d);
                    FN(prefetch_row)(kb->v, kb->vs, j + i + ATTN_PREFETCH_KEYS, kb->nrun, d);
                }
            const S *kr[VL];
            const T *tr[VL];
            for (int i = 0; i < KS; ++i) {
                const int64_t ji = j + i < j1 ? j + i : j1 - 1;
                kr[i] = k + ji * ks;
                tr[i] = TB ? tab + (ji - j0) * dpad : NULL;
            }
            VT acc[VL]; /* acc[i * RR + r]: row r0 + r, key j + i */
            for (int i = 0; i < VL; ++i) acc[i] = V(zero)();
            int64_t c = 0;
            for (; c + VL <= d; c += VL)
                for (int i = 0; i < KS; ++i) {
                    VT kv = S_LOADU(kr[i] + c);
                    if (TB) kv = V(add)(kv, V(loadu)(tr[i] + c));
                    for (int r = 0; r < RR; ++r) acc[i * RR + r] = V(fmadd)(V(loadu)(qr[r] + c), kv, acc[i * RR + r]);
                }
            if (c < d)
                for (int i = 0; i < KS; ++i) {
                    VT kv = FN(s_loadu_n)(kr[i] + c, d - c);
                    if (TB) kv = V(add)(kv, V(loadu_n)(tr[i] + c, d - c));
                    for (int r = 0; r < RR; ++r)
                        acc[i * RR + r] = V(fmadd)(V(loadu_n)(qr[r] + c, d - c), kv, acc[i * RR + r]);
                }
            T sums[VL];
            V(storeu)(sums, V(reduce_lanes)(acc));
            for (int i = 0; i < KS; ++i)
                for (int r = 0; r < RR && r0 + r < rows; ++r) s[(r0 + r) * lds + j + i] = sums[i * RR + r];
        }
    }
}

/* narrow_dots_rr for the group's row count, with the table rows tab (or NULL: none). */
static void FN(narrow_dots)(const T *q, int64_t ldq, int rows, const FN(kblock) * kb, const T *tab, int64_t j0,
                            int64_t j1, int64_t d, int64_t dpad, T *s, int64_t lds) {
    if (j1 <= j0) return;
    const int tb = tab != NULL;
    if (rows == 1 || VL < 2) {
        if (tb) FN(narrow_dots_rr)(q, ldq, rows, kb, tab, j0, j1, d, dpad, s, lds, 1, 1);
        else FN(narrow_dots_rr)(q, ldq, rows, kb, tab, j0, j1, d, dpad, s, lds, 1, 0);
    } else if (rows == 2 || VL < 4) {
        if (tb) FN(narrow_dots_rr)(q, ldq, rows, kb, tab, j0, j1, d, dpad, s, lds, 2, 1);
        else FN(narrow_dots_rr)(q, ldq, rows, kb, tab, j0, j1, d, dpad, s, lds, 2, 0);
    } else {
        if (tb) FN(narrow_dots_rr)(q, ldq, rows, kb, tab, j0, j1, d, dpad, s, lds, 4, 1);
        else FN(narrow_dots_rr)(q, ldq, rows, kb, tab, j0, j1, d, dpad, s, lds, 4, 0);
    }
}

/* Scores of a narrow group straight from the key and table rows: no packing,
 * no idle micro-kernel rows; every row over the keys any row sees (a row's
 * keys outside its own range are masked by selection in group_forward). */
static void FN(narrow_scores)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb, const int64_t jl[ATTN_MR],
                              const int64_t jv[ATTN_MR], int64_t jmax, T *s, int64_t lds) {
    const wavepe_attention_plan *p = w->p;
    const int64_t d = p->a.d, dpad = p->dpad;
    const T *init[ATTN_MR];
    const int table = p->bias == ATTN_BIAS_TABLE && p->prows > 0;
    const int has_init = table ? 0 : FN(group_bias)(w, g, kb, jv, jmax, init);
    int64_t jlo = jmax;
    for (int t = 0; t < g->rows; ++t)
        if (jv[t] > 0 && jl[t] / VL * VL < jlo) jlo = jl[t] / VL * VL;
    if (table && p->fold_table) { /* every row at one position: the table folded into the keys (narrow_dots_rr)
                                   * for the keys with a table row */
        const int64_t p0 = p->pr_hi - g->pos[0] + kb->n0;
        int64_t ja = -p0 > jlo ? -p0 : jlo, jb = p->prows - p0 < jmax ? p->prows - p0 : jmax;
        if (jb < ja) ja = jb = jmax;
        FN(narrow_dots)(g->qr, dpad, g->rows, kb, NULL, jlo, ja, d, dpad, s, lds);
        if (jb > ja)
            FN(narrow_dots)(g->qr, dpad, g->rows, kb, (const T *)p->trow + (p0 + ja) * dpad, ja, jb, d, dpad, s, lds);
        FN(narrow_dots)(g->qr, dpad, g->rows, kb, NULL, jb, jmax, d, dpad, s, lds);
        return;
    }
    FN(narrow_dots)(g->qr, dpad, g->rows, kb, NULL, jlo, jmax, d, dpad, s, lds);
    for (int t = 0; t < g->rows; ++t) {
        if (jv[t] == 0 || (!has_init && !table)) continue;
        const T *q = g->qr + t * dpad;
        const int64_t p0 = p->pr_hi - g->pos[t] + kb->n0;
        int64_t j = jl[t] / VL * VL, jend = jv[t];
        if (table) { /* only the keys whose VL table rows p0 + j .. p0 + j + VL - 1 meet [0, prows): the
                      * others add nothing (a long cache's keys lie mostly beyond the wavelets' support) */
            const int64_t first = -p0 - (VL - 1); /* the first j whose last row is >= 0 */
            if (j < first) j += (first - j + VL - 1) / VL * VL;
            if (jend > p->prows - p0) jend = p->prows - p0;
        }
        for (; j < jend; j += VL) {
            VT x = V(loadu)(s + t * lds + j);
            if (has_init) x = V(add)(x, V(loadu)(init[t] + j));
            if (table) x = V(add)(x, FN(dot_table)(p, q, p0 + j, w->zr));
            V(storeu)(s + t * lds + j, x);
        }
    }
}

/* o_t[0..d) += sum_{j0 <= j < j1} p_t[j] v_j for the rows t < R (P rows of
 * stride lds, O rows of stride ldo with whole vectors past d): each chunk of a
 * value row loaded once for every row.  R: a constant of each call site. */
static inline void FN(rows_pv_keys)(const T *p, int64_t lds, int64_t j0, int64_t j1, const S *v, int64_t vs,
                                    int64_t d, T *o, int64_t ldo, const int R) {
    for (int64_t c0 = 0; c0 < d; c0 += 2 * VL) {
        VT acc[ATTN_NARROW_ROWS][2];
        for (int r = 0; r < R; ++r)
            for (int h = 0; h < 2; ++h) acc[r][h] = V(loadu)(o + r * ldo + c0 + h * VL);
        const int full = c0 + 2 * VL <= d;
        for (int64_t j = j0; j < j1; ++j) {
            const S *vr = v + j * vs + c0;
            const VT v0 = full ? S_LOADU(vr) : FN(s_loadu_n)(vr, d - c0);
            const VT v1 = full ? S_LOADU(vr + VL) : FN(s_loadu_n)(vr + VL, d - c0 - VL);
            for (int r = 0; r < R; ++r) {
                const VT pr = V(bcast)(p + r * lds + j);
                acc[r][0] = V(fmadd)(pr, v0, acc[r][0]);
                acc[r][1] = V(fmadd)(pr, v1, acc[r][1]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int h = 0; h < 2; ++h)
                if (c0 + h * VL < d) V(storeu)(o + r * ldo + c0 + h * VL, acc[r][h]);
    }
}

/* The columns go 2 vectors at a time, so over a whole key block the d / 2VL
 * passes would fetch the value rows from L2 again and again (perf put ~65 %
 * of the product on its value loads): ATTN_PV_KEYS keys at a time keep them
 * in L1. */
#define ATTN_PV_KEYS 32
static inline void FN(rows_pv_r)(const T *p, int64_t lds, int64_t j0, int64_t j1, const S *v, int64_t vs, int64_t d,
                                 T *o, int64_t ldo, const int R) {
    for (int64_t jb = j0; jb < j1; jb += ATTN_PV_KEYS)
        FN(rows_pv_keys)(p, lds, jb, jb + ATTN_PV_KEYS < j1 ? jb + ATTN_PV_KEYS : j1, v, vs, d, o, ldo, R);
}

/* Kept out of line: inlined into the block loop, GCC spilled the 2R
 * accumulators to the stack (a store-forwarding chain per FMA; perf: 61 % of
 * a bf16 decode), alone the constant R keeps them in registers. */
static __attribute__((noinline)) void FN(rows_pv)(const T *p, int64_t lds, int rows, int64_t j0, int64_t j1,
                                                  const S *v, int64_t vs, int64_t d, T *o, int64_t ldo) {
    switch (rows) {
    case 2: FN(rows_pv_r)(p, lds, j0, j1, v, vs, d, o, ldo, 2); break;
    case 3: FN(rows_pv_r)(p, lds, j0, j1, v, vs, d, o, ldo, 3); break;
    default: FN(rows_pv_r)(p, lds, j0, j1, v, vs, d, o, ldo, 4); break;
    }
}

/* o[0..d) += sum_j p[j] v_j for one row, 8 vectors of columns at a time (o
 * has dpad columns: whole vectors are stored past d). */
static void FN(row_pv)(const T *p, int64_t nk, const S *v, int64_t vs, int64_t d, T *o, const T *kpm) {
    if (kpm != NULL) { /* padded keys never reach the product (their values may be anything) */
        for (int64_t j = 0; j < nk; ++j)
            if (kpm[j] == (T)0) FN(row_pv)(p + j, 1, v + j * vs, vs, d, o, NULL);
        return;
    }
    int64_t c0 = 0;
    for (; c0 + 8 * VL <= d; c0 += 8 * VL) {
        VT acc[8];
        for (int i = 0; i < 8; ++i) acc[i] = V(loadu)(o + c0 + i * VL);
        for (int64_t j = 0; j < nk; ++j) {
            const VT a = V(bcast)(p + j);
            const S *vr = v + j * vs + c0;
            for (int i = 0; i < 8; ++i) acc[i] = V(fmadd)(a, S_LOADU(vr + i * VL), acc[i]);
        }
        for (int i = 0; i < 8; ++i) V(storeu)(o + c0 + i * VL, acc[i]);
    }
    for (; c0 < d; c0 += 4 * VL) { /* the last < 8 vectors, 4 at a time, lanes past d read as 0 */
        VT acc[4];
        for (int i = 0; i < 4; ++i) acc[i] = V(loadu)(o + c0 + i * VL);
        for (int64_t j = 0; j < nk; ++j) {
            const VT a = V(bcast)(p + j);
            const S *vr = v + j * vs + c0;
            for (int i = 0; i < 4; ++i) acc[i] = V(fmadd)(a, FN(s_loadu_n)(vr + i * VL, d - c0 - i * VL), acc[i]);
        }
        for (int i = 0; i < 4; ++i)
            if (c0 + i * VL < d) V(storeu)(o + c0 + i * VL, acc[i]);
    }
}

/* [*lmax, *hmin): the keys of the block every row of the group sees (empty when *hmin <= *lmax). */
static inline void FN(shared_keys)(const FN(group) * g, const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR],
                                   int64_t *lmax, int64_t *hmin) {
    *lmax = 0, *hmin = INT64_MAX;
    for (int t = 0; t < g->rows; ++t) {
        *lmax = jl[t] > *lmax ? jl[t] : *lmax;
        *hmin = jv[t] < *hmin ? jv[t] : *hmin;
    }
}

/* C[t] += sum_{jl[t] <= j < jv[t]} A[t][j] B[j] for the rows t < g->rows of
 * a group: the keys every row sees in one register-blocked product, the few
 * keys that only some rows see (the causal diagonal, a document boundary)
 * row by row, so that a key a row cannot see never meets that row (its B row
 * may be NaN or inf, and 0 * NaN is NaN).  B is column panels of NR
 * (pack_panels, ldp keys each). */
static void FN(rows_times_panels)(const FN(group) * g, const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR],
                                  const T *a, int64_t lda, const T *panels, int64_t ldp, int64_t d, T *c,
                                  int64_t ldc) {
    int64_t lmax, hmin;
    FN(shared_keys)(g, jl, jv, &lmax, &hmin);
    if (hmin <= lmax) lmax = hmin = 0; /* no key every row sees */
    if (hmin > lmax)
        for (int64_t c0 = 0; c0 < d; c0 += NR)
            FN(mk_gen)(hmin - lmax, a + lmax, lda, 1, panels + c0 * ldp + lmax * NR, NR, NR, c + c0, ldc, g->rows);
    for (int t = 0; t < g->rows; ++t) {
        /* the row's keys outside [lmax, hmin): [jl, lmax) and [hmin, jv), or all of [jl, jv) */
        const int64_t r[2][2] = {{jl[t], hmin > lmax ? lmax : jv[t]}, {hmin > lmax ? hmin : 0, hmin > lmax ? jv[t] : 0}};
        for (int k = 0; k < 2; ++k)
            if (r[k][1] > r[k][0])
                for (int64_t c0 = 0; c0 < d; c0 += NR)
                    FN(mk_gen)(r[k][1] - r[k][0], a + t * lda + r[k][0], 0, 1, panels + c0 * ldp + r[k][0] * NR, NR,
                               NR, c + t * ldc + c0, 0, 1);
    }
}

#include ATTN_ENGINE_FILE


/* ---- forward -------------------------------------------------------------------------------- */


/* A row's scores at keys j .. j + VL - 1 as the max pass compares them: src + win, unscaled (the scale is
 * > 0, so the maximum commutes with it), or, with a post row, the score itself. */
static inline __attribute__((always_inline)) VT FN(score_z)(const T *src, const T *win, const T *post, VT vscale,
                                                            int64_t j) {
    VT z = V(loadu)(src + j);
    if (win != NULL) z = V(add)(z, V(loadu)(win + j));
    if (post != NULL) z = V(fmadd)(vscale, z, V(loadu)(post + j));
    return z;
}

/* Lanes j .. j + VL - 1 that a row seeing keys [jl, n) keeps: inside that range, and not padding (kpm, the
 * block's additive mask, where there is one). */
static inline MT FN(kept_lanes)(int64_t j, int64_t jl, int64_t n, const T *kpm) {
    const MT keep = FN(lanes_within)(j, jl, n);
    return kpm != NULL ? M(and)(keep, V(cmpeq)(V(loadu)(kpm + j), V(zero)())) : keep;
}

/* The weights of a row's lanes from jl rounded down to a vector up to n: e = exp(u a + b) (base2: 2^), u the
 * score before the scale (win added), the score (with post) or the capped score -- or, exact, exp((s - b) a),
 * s the score rounded (u times the scale where u is unscaled): group_softmax's rows whose maximum m passes
 * 2^10, where the roundings of a = scale log2(e) and b = -m log2(e) would move u a + b by ~2^-23 |m| (at
 * scores of 1e20, infinite weights and NaN rows where the formula gives finite ones); lanes kept_lanes drops
 * give 0 (selected: never arithmetic, a masked score may be NaN) -- only the vectors outside [ji0, ji1),
 * whose lanes are all kept, select.  Stored to prow, or rounded to p16 (the tiles' P); returns the sum by
 * lanes.  Inlined with constant flags: one loop per kind of row, no test inside it. */
static inline __attribute__((always_inline)) VT FN(row_weights)(const T *src, const T *win, const T *post,
                                                                const T *kpm, int64_t jl, int64_t n, int64_t ji0,
                                                                int64_t ji1, int has_win, int has_post, int capped,
                                                                int exact, VT vscale, VT vcap, VT vzmul, VT va, VT vb,
                                                                int base2,
                                                                T *prow, uint16_t *p16, VT *zmax) {
    const VT ninf = V(set1)(-(T)INFINITY);
    VT vsum = V(zero)(), vz = ninf;
    int64_t j = jl / VL * VL;
/* arg = the exponential's argument at keys jj .. jj + VL - 1 (the maximum taken on the way) */
#define ATTN_WEIGHT_ARG(jj, select, arg)                                                                 \
    do {                                                                                                 \
        VT u = FN(score_z)(src, has_win ? win : NULL, has_post ? post : NULL, vscale, jj);               \
        if (capped) u = V(mul)(vcap, V(tanh)(V(mul)(u, vzmul)));                                         \
        if (select) u = V(blend)(FN(kept_lanes)(jj, jl, n, kpm), ninf, u);                               \
        if (zmax != NULL) vz = V(max)(vz, u);                                                            \
        arg = exact ? /* (s - m) a, s the rounded score (group_softmax: scores past 2^10) */             \
                  V(mul)(V(sub)(has_post || capped ? u : V(mul)(u, vscale), vb), va)                     \
                    : V(fmadd)(u, va, vb);                                                               \
    } while (0)
#define ATTN_WEIGHT(select)                \
    do {                                   \
        VT arg;                            \
        ATTN_WEIGHT_ARG(j, select, arg);   \
        ATTN_WEIGHT_STORE(arg);            \
    } while (0)
#define ATTN_WEIGHT_STORE(arg)                                                                     \
    do {                                                                                           \
        VT e;                                                                                      \
        if (base2) {                                                                               \
            e = FN(blk_weights16)(arg);                                                            \
            FN(blk_p_store)(p16 + j, e);                                                           \
        } else {                                                                                   \
            e = V(exp_softmax)(arg);                                                               \
            V(storeu)(prow + j, e);                                                                \
        }                                                                                          \
        vsum = V(add)(vsum, e);                                                                    \
    } while (0)
    for (; j < n && j < ji0; j += VL) ATTN_WEIGHT(1);
    if (base2) /* the tiles' P two vectors at a time, rounded and stored by one conversion where the type has it */
        for (; j + VL < ji1; j += 2 * VL) {
            VT a0, a1;
            ATTN_WEIGHT_ARG(j, 0, a0);
            ATTN_WEIGHT_ARG(j + VL, 0, a1);
            const VT e0 = FN(blk_weights16)(a0), e1 = FN(blk_weights16)(a1);
            FN(blk_p_store2)(p16 + j, e0, e1);
            vsum = V(add)(V(add)(vsum, e0), e1); /* the order of one vector at a time */
        }
    for (; j < ji1; j += VL) ATTN_WEIGHT(0);
    for (; j < n; j += VL) ATTN_WEIGHT(1);
#undef ATTN_WEIGHT_STORE
#undef ATTN_WEIGHT
#undef ATTN_WEIGHT_ARG
    if (zmax != NULL) *zmax = vz;
    return vsum;
}

/* Rows whose running maximum (scaled) passes this take the exact weights (row_weights) */
#define ATTN_EXACT_M ((T)1024)

/* A row with a finite running maximum m_ref (every key block after its first) in one pass (group_softmax, the
 * block engine's P in 16 bits): its weights against that maximum, the block's own maximum taken on the way.
 * They stand -- returns 1, the row's sum *lst added to (the maximum, the O row and the sum's scale unchanged:
 * the row's lse is m + log l whichever m) -- unless a weight passed 2^blk_p_room or a NaN came (returns 0:
 * the two passes run, as for a first block).  Where no score passes the running maximum -- most blocks --
 * this is the two passes' arithmetic exactly; the max pass re-read every score (Emerald Rapids: the vector
 * work ~60 % of the tile forward's time). */
static inline __attribute__((always_inline)) int FN(row_one_pass)(const T *src, const T *win, const T *mask,
                                                                   int64_t jl, int64_t n, int64_t jb, int64_t ji0,
                                                                   int64_t ji1, T scale, T kexp, VT vscale, VT vcap,
                                                                   VT vzmul, T m_ref, T *prow, uint16_t *p16,
                                                                   int64_t pcols, T *lst) {
    const VT va1 = V(set1)(scale * kexp), vb1 = V(set1)(-m_ref * kexp);
    VT vz;
    if (jb > 0) memset(p16, 0, sizeof(uint16_t) * (size_t)jb);
    const VT vs1 = win != NULL ? FN(row_weights)(src, win, NULL, mask, jl, n, ji0, ji1, 1, 0, 0, 0, vscale, vcap,
                                                 vzmul, va1, vb1, 1, prow, p16, &vz)
                               : FN(row_weights)(src, NULL, NULL, mask, jl, n, ji0, ji1, 0, 0, 0, 0, vscale, vcap,
                                                 vzmul, va1, vb1, 1, prow, p16, &vz);
    const T top = (scale * V(hmax)(vz) - m_ref) * kexp, sum = V(hsum)(vs1);
    if (!(top <= FN(blk_p_room)() && sum == sum)) return 0;
    const int64_t jend = (n + VL - 1) / VL * VL;
    if (jend < pcols) memset(p16 + jend, 0, sizeof(uint16_t) * (size_t)(pcols - jend));
    *lst += sum;
    return 1;
}

/* The maximum pass of group_softmax over a row's scores (keys [jb, n), [ji0, ji1) whole vectors it sees, lanes
 * selected elsewhere): the block's maximum score -- -inf where nothing is kept; capped, the cap of the largest
 * (at least -cap); NaN where every visible score is -inf or NaN and one is NaN (x86's max may drop a NaN) --
 * and in *any_kept the lanes kept. */
static inline __attribute__((always_inline)) T FN(row_block_max)(const T *src, const T *win, const T *post,
                                                                  const T *mask, int64_t jl, int64_t n, int64_t jb,
                                                                  int64_t ji0, int64_t ji1, int capped, T scale,
                                                                  VT vscale, VT vcap, VT vzmul, MT *any_kept_out) {
    const VT ninf = V(set1)(-(T)INFINITY);
    MT any_kept = *any_kept_out;
    VT vmax = ninf, vmax2 = ninf; /* two chains: the max's latency, not its throughput, bounds one */
    int64_t j = jb;
    for (; j < n && j < ji0; j += VL) {
        const MT keep = FN(kept_lanes)(j, jl, n, mask);
        any_kept = M(or)(any_kept, keep);
        vmax = V(max)(vmax, V(blend)(keep, ninf, FN(score_z)(src, win, post, vscale, j)));
    }
    if (j < ji1) {
        any_kept = M(first)(VL);
        if (win != NULL && post == NULL)
            for (; j + VL < ji1; j += 2 * VL) {
                vmax = V(max)(vmax, V(add)(V(loadu)(src + j), V(loadu)(win + j)));
                vmax2 = V(max)(vmax2, V(add)(V(loadu)(src + j + VL), V(loadu)(win + j + VL)));
            }
        else if (win == NULL && post == NULL)
            for (; j + VL < ji1; j += 2 * VL) {
                vmax = V(max)(vmax, V(loadu)(src + j));
                vmax2 = V(max)(vmax2, V(loadu)(src + j + VL));
            }
        for (; j < ji1; j += VL) vmax = V(max)(vmax, FN(score_z)(src, win, post, vscale, j));
    }
    for (; j < n; j += VL) {
        const MT keep = FN(kept_lanes)(j, jl, n, mask);
        any_kept = M(or)(any_kept, keep);
        vmax = V(max)(vmax, V(blend)(keep, ninf, FN(score_z)(src, win, post, vscale, j)));
    }
    *any_kept_out = any_kept;
    const T zmax = V(hmax)(V(max)(vmax, vmax2));
    T mx = !M(bits)(any_kept) ? -(T)INFINITY
           : capped           ? V(hmax)(V(mul)(vcap, V(tanh)(V(mul)(V(set1)(zmax), vzmul))))
           : post != NULL     ? zmax
                              : scale * zmax;
    if (mx == -(T)INFINITY && M(bits)(any_kept)) {
        /* every visible score -inf (an infinite k or bias) -- unless max dropped a NaN */
        MT nan = M(first)(0);
        for (j = jb; j < n; j += VL)
            nan = M(or)(nan, M(and)(FN(kept_lanes)(j, jl, n, mask), V(isnan)(FN(score_z)(src, win, post, vscale, j))));
        if (M(bits)(nan)) mx = (T)NAN;
    }
    return mx;
}

/* The online softmax of a group's rows over one key block (sr: the scores, keys jl[t] .. jv[t] of row t
 * seen): P (masked lanes 0), the running max and sum and the O rows updated.  P goes to ps (the vector
 * kernels: rows of stride ATTN_SLD, over the scores) or, with pout (the tiles' forward: rows of stride
 * ATTN_TPLD, pcols columns), rounded to the storage type and scaled by blk_p_store (the row sums stay those
 * of the unrounded weights), zero outside the lanes a row's vectors cover.
 *
 * Two passes over a row's scores: the maximum (a load and a max a vector, two chains), then the weights
 * (row_weights), each reading the scores from sr -- a soft-cap's tanh only in the second: it is
 * increasing, so the maximum is capped once.  The tiles' rows without ALiBi or a soft-cap take one pass
 * where they have a running maximum already (below).  Masked lanes become -inf by selection.  A NaN among the
 * visible scores makes the row NaN, as the softmax of the formula does: x86's max may drop it, but its
 * weight is NaN and so is the row's sum; only where every other score is -inf (no weight to carry it) is
 * the row searched for one. */
static void FN(group_softmax)(const wavepe_attention_plan *p, const FN(kblock) * kb, const T *kpm,
                              const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR], int64_t jmax,
                              const FN(score_rows) * sr, T *ps, T *mst, T *lst, T *o, uint16_t *pout, int64_t pcols) {
    const int64_t dpad = p->dpad;
    const int64_t jround = (jmax + VL - 1) / VL * VL;
    const VT vscale = V(set1)(sr->scale);
    const int capped = p->a.softcap > 0.0; /* softcap * tanh(s / softcap), before the mask */
    const T icap = (T)(capped ? 1.0 / p->a.softcap : 0.0);
    const VT vcap = V(set1)((T)p->a.softcap);
    const T *mask = kb->masked ? kpm : NULL;
    const int base2 = FN(blk_p16)() && pout != NULL; /* the tiles' P: 2^, the scale by log2(e) folded into a */
    const T kexp = base2 ? (T)WP_LOG2E : (T)1;
    for (int t = 0; t < ATTN_MR; ++t) {
        const int64_t n = jv[t];
        T *prow = ps != NULL ? ps + t * ATTN_SLD : NULL;
        uint16_t *p16 = pout != NULL ? pout + t * ATTN_TPLD : NULL;
        T m_new = -(T)INFINITY;
        MT any_kept = M(first)(0);
        const T *src = sr->src[t], *win = sr->win[t], *post = sr->post[t];
        const int plain = post == NULL && !capped; /* u = src + win; else the score (capped) */
        const VT vzmul = V(set1)(post != NULL ? icap : sr->scale * icap); /* capped: tanh's argument per u */
        const int64_t jb = jl[t] / VL * VL; /* P below it is never read (rows_times_panels, row_pv) */
        /* [ji0, ji1): whole vectors of keys the row sees (none with a key-padding mask), no lane to select */
        const int64_t ji0 = (jl[t] + VL - 1) / VL * VL, ji1 = kb->masked ? ji0 : (n / VL * VL > ji0 ? n / VL * VL : ji0);
        if (base2 && plain && n > 0 && mst[t] >= -ATTN_EXACT_M && mst[t] <= ATTN_EXACT_M &&
            FN(row_one_pass)(src, win, mask, jl[t], n, jb, ji0, ji1, sr->scale, kexp, vscale, vcap, vzmul, mst[t],
                             prow, p16, pcols, &lst[t]))
            continue;
        if (n > 0) {
            const T mx = FN(row_block_max)(src, win, post, mask, jl[t], n, jb, ji0, ji1, capped, sr->scale, vscale,
                                           vcap, vzmul, &any_kept);
            m_new = mx > mst[t] || mx != mx ? mx : mst[t];
        }
        if (m_new == -(T)INFINITY) {
            /* no key seen, or (any_kept) every score -inf: then the row's sum becomes -0.0, which
             * finish_rows (and the split-N combine) turn into NaN unless a finite score follows */
            if (M(bits)(any_kept)) lst[t] = -(T)0;
            if (prow != NULL)
                for (int64_t j = 0; j < jround; j += VL) V(storeu)(prow + j, V(zero)());
            if (p16 != NULL) memset(p16, 0, sizeof(uint16_t) * (size_t)pcols);
            continue;
        }
        /* the weights' argument u a + b: b = -m, a = the scale for plain rows, the exponential's base
         * folded into both; rows of large scores exact: (s - m) a, a the base (row_weights) */
        const int exact = base2 && (m_new > ATTN_EXACT_M || m_new < -ATTN_EXACT_M);
        const VT va = V(set1)(plain && !exact ? sr->scale * kexp : kexp), vb = V(set1)(exact ? m_new : -m_new * kexp);
        if (p16 != NULL && jb > 0) memset(p16, 0, sizeof(uint16_t) * (size_t)jb);
#define ATTN_ROW_WEIGHTS(b2, hw, hp, cp, ex)                                                          \
    FN(row_weights)(src, win, post, mask, jl[t], n, ji0, ji1, hw, hp, cp, ex, vscale, vcap, vzmul, va, vb, b2, prow, \
                    p16, NULL)
#define ATTN_ROW_WEIGHTS_ANY(b2)                                                                      \
    (plain ? (win != NULL ? ATTN_ROW_WEIGHTS(b2, 1, 0, 0, 0) : ATTN_ROW_WEIGHTS(b2, 0, 0, 0, 0))       \
           : ATTN_ROW_WEIGHTS(b2, win != NULL, post != NULL, capped, 0))
        const VT vsum = exact  ? ATTN_ROW_WEIGHTS(1, win != NULL, post != NULL, capped, 1)
                        : base2 ? ATTN_ROW_WEIGHTS_ANY(1)
                                : ATTN_ROW_WEIGHTS_ANY(0);
#undef ATTN_ROW_WEIGHTS_ANY
#undef ATTN_ROW_WEIGHTS
        if (p16 != NULL) {
            const int64_t jend = (n + VL - 1) / VL * VL;
            if (jend < pcols) memset(p16 + jend, 0, sizeof(uint16_t) * (size_t)(pcols - jend));
        }
        if (prow != NULL)
            for (int64_t j = (n + VL - 1) / VL * VL; j < jround; j += VL) V(storeu)(prow + j, V(zero)());
        const T m_old = mst[t];
        const T corr = m_old == m_new ? (T)1 : (T)exp((double)(m_old - m_new)); /* the max mostly stays put */
        lst[t] = lst[t] * corr + V(hsum)(vsum);
        if (corr != (T)1) {
            const VT vc = V(set1)(corr);
            T *orow = o + t * dpad;
            for (int64_t c = 0; c < dpad; c += VL) V(storeu)(orow + c, V(mul)(V(loadu)(orow + c), vc));
        }
        mst[t] = m_new;
    }
}

/* Online softmax update of a group's rows with one key block, then O += P V. */
static void FN(group_forward)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb, T *mst, T *lst, T *o) {
    const wavepe_attention_plan *p = w->p;
    const int64_t d = p->a.d, dpad = p->dpad;
    int64_t jl[ATTN_MR], jv[ATTN_MR];
    const int64_t jmax = FN(valid_keys)(g, kb, jl, jv);
    if (jmax == 0) return;
    T *s = w->s;
    const int64_t j0 = g->qr != NULL ? 0 : FN(first_key)(g, jl, jv);
    if (g->qr != NULL) FN(narrow_scores)(w, g, kb, jl, jv, jmax, s, ATTN_SLD);
    else FN(group_scores)(w, g, kb, jv, j0, jmax, s, ATTN_SLD);
    FN(score_rows) sr;
    sr.scale = (T)1;
    for (int t = 0; t < ATTN_MR; ++t) sr.src[t] = s + t * ATTN_SLD, sr.win[t] = sr.post[t] = NULL;
    FN(group_softmax)(p, kb, w->kpm, jl, jv, jmax, &sr, s, mst, lst, o, NULL, 0);
    if (g->qr != NULL) {
        /* the keys every row sees, for all rows at once (not with key padding: a padded key's
         * value row never meets a product, and row_pv skips it); the rest row by row */
        int64_t lmax, hmin;
        FN(shared_keys)(g, jl, jv, &lmax, &hmin);
        if (kb->masked || g->rows < 2 || hmin <= lmax) lmax = hmin = 0; /* one row: row_pv */
        if (hmin > lmax) FN(rows_pv)(s, ATTN_SLD, g->rows, lmax, hmin, kb->v, kb->vs, d, o, dpad);
        for (int t = 0; t < g->rows; ++t) {
            const int64_t r[2][2] = {{jl[t], hmin > lmax ? lmax : jv[t]}, {hmin > lmax ? hmin : 0, hmin > lmax ? jv[t] : 0}};
            for (int k = 0; k < 2; ++k)
                if (r[k][1] > r[k][0])
                    FN(row_pv)(s + t * ATTN_SLD + r[k][0], r[k][1] - r[k][0], kb->v + r[k][0] * kb->vs, kb->vs, d,
                               o + t * dpad, kb->masked ? w->kpm + r[k][0] : NULL);
        }
        return;
    }
    FN(eng_group_pv)(w, g, kb, jl, jv, o, dpad);
}


/* Group gi's rows rp (nrows of them) into the packed operands: scaled
 * float32 (g->qp) and the engine's operand of the scores (eng_pack_group). */
/* The largest L1 norm of rows [0, nrows) of a group's packed rows qp ([d][ATTN_MR]: row t's column c at
 * c * ATTN_MR + t); NaN wins, as inf.  Three vectors take 3 VL consecutive elements, a multiple of ATTN_MR
 * (VL is even), so lane j of the three always sums row j % ATTN_MR. */
static T FN(group_norm)(const T *qp, int64_t d, int nrows) {
    VT acc[3] = {V(zero)(), V(zero)(), V(zero)()};
    const int64_t n = d * ATTN_MR;
    int64_t i = 0;
    for (; i + 3 * VL <= n; i += 3 * VL)
        for (int k = 0; k < 3; ++k) acc[k] = V(add)(acc[k], V(abs)(V(loadu)(qp + i + k * VL)));
    T lanes[3 * VL], rows[ATTN_MR] = {0};
    for (int k = 0; k < 3; ++k) V(storeu)(lanes + k * VL, acc[k]);
    for (int j = 0; j < 3 * VL; ++j) rows[j % ATTN_MR] += lanes[j];
    for (; i < n; ++i) rows[i % ATTN_MR] += qp[i] < 0 ? -qp[i] : qp[i]; /* (i % ATTN_MR: from a multiple of it) */
    T top = 0;
    for (int t = 0; t < nrows; ++t) top = rows[t] > top || rows[t] != rows[t] ? rows[t] : top;
    return top;
}

static void FN(pack_group)(FN(work) * w, FN(group) * g, int64_t gi, const S *const *rp, int nrows, int64_t d,
                           T scale) {
    T *dst = w->qp + gi * ATTN_MR * d;
    FN(pack_rows)(dst, rp, nrows, d, scale);
    g->qp = dst;
    g->qn = w->p->bias == ATTN_BIAS_TABLE && w->p->prows > 0 ? FN(group_norm)(dst, d, nrows) : (T)INFINITY;
    FN(eng_pack_group)(w, g, gi, rp, nrows, d);
}

#include ATTN_BLOCKS_FILE

/* Additive key-padding mask of keys [n0, n0 + nk) of batch b into w->kpm;
 * returns the number of keys left visible. */
static int64_t FN(load_kpm)(FN(work) * w, int64_t b, int64_t n0, int64_t nk) {
    const wavepe_attention_args *a = &w->p->a;
    const uint8_t *mask = a->key_padding_mask + b * a->kpm_stride + n0;
    int64_t visible = 0;
    for (int64_t j = 0; j < nk; ++j) {
        w->kpm[j] = mask[j] ? -(T)INFINITY : (T)0;
        visible += mask[j] == 0;
    }
    for (int64_t j = nk; j < (nk + NR - 1) / NR * NR; ++j) w->kpm[j] = (T)0;
    return visible;
}


/* Run the groups of rows [0, nrows) (state in w->o, w->mst, w->lst) over keys
 * [n_begin, n_end) of (b, hk), key block by key block. */
static void FN(rows_over_keys)(FN(work) * w, FN(group) * groups, int64_t ngroups, int64_t b, int64_t hk,
                               int64_t n_begin, int64_t n_end) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t dpad = p->dpad;
    /* only the keys some row sees: blocks wholly past the causal diagonal or
     * outside the rows' documents are never visited */
    int64_t klo = INT64_MAX, khi = INT64_MIN;
    for (int64_t gi = 0; gi < ngroups; ++gi)
        for (int t = 0; t < groups[gi].rows; ++t)
            if (groups[gi].khi[t] > groups[gi].klo[t]) {
                klo = groups[gi].klo[t] < klo ? groups[gi].klo[t] : klo;
                khi = groups[gi].khi[t] > khi ? groups[gi].khi[t] : khi;
            }
    if (khi < n_end) n_end = khi;
    if (klo > n_begin) n_begin = klo;
    const S *kbase = (const S *)a->k + attn_off(a->k_strides, b, hk, 0);
    const S *vbase = (const S *)a->v + attn_off(a->v_strides, b, hk, 0);
    int wide = 0;
    for (int64_t gi = 0; gi < ngroups; ++gi) wide |= groups[gi].qr == NULL;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += ATTN_FBN) {
        FN(kblock) kb;
        kb.n0 = n0;
        kb.nk = n_end - n0 < ATTN_FBN ? n_end - n0 : ATTN_FBN;
        kb.nrun = n_end - n0;
        kb.k = kbase + n0 * a->k_strides[2];
        kb.v = vbase + n0 * a->v_strides[2];
        kb.ks = a->k_strides[2];
        kb.vs = a->v_strides[2];
        kb.masked = a->key_padding_mask != NULL;
        if (kb.masked && FN(load_kpm)(w, b, n0, kb.nk) == 0) continue;
        if (FN(blk_fwd_block)(w, groups, ngroups, &kb, b, hk, wide)) continue;
        if (wide) {
            FN(eng_pack_fwd_block)(w, &kb);
        }
        for (int64_t gi = 0; gi < ngroups; ++gi)
            FN(group_forward)(w, &groups[gi], &kb, w->mst + gi * ATTN_MR, w->lst + gi * ATTN_MR,
                              w->o + gi * ATTN_MR * dpad);
    }
}

static void FN(work_free)(FN(work) * w) {
    wavepe_scratch_free(w->block);
    FN(blk_work_free)(w);
}

/* Carve the scratch of one thread out of a single allocation. */
static int FN(work_alloc)(FN(work) * w, const wavepe_attention_plan *p, int64_t rows) {
    memset(w, 0, sizeof(*w));
    w->p = p;
    FN(blk_work_init)(w);
    const int64_t d = p->a.d, dpad = p->dpad;
    const int64_t rpad = (rows + ATTN_MR - 1) / ATTN_MR * ATTN_MR;
    /* o's rows: whole groups, and whole 16-row tiles where P V runs on tiles (it writes up16(rows) rows) */
    const int64_t orows = rpad > (rows + 15) / 16 * 16 ? rpad : (rows + 15) / 16 * 16;
    const int64_t bwd = p->backward;
    const int64_t dgt_ld = ATTN_BBM + ATTN_BBN + 2 * NR;
    /* a decoding step of a few rows per kv head reads the K and V rows where they are (narrow
     * kernels): no packed key or value block to allocate and clear (~100 KB a call) */
    const int narrow = !bwd && p->kind == ATTN_KIND_DECODE && rows <= ATTN_NARROW_ROWS;
    const FN(eng_scratch) es = FN(eng_scratch_sizes)(d, dpad, rpad, (int)bwd, narrow); /* the engine's operands */
    int64_t sizes[30] = {
        rpad * d,                           /* qp */
        es.kp, es.vp, es.dop,               /* kp, vp, dop */
        (bwd ? ATTN_BBM : ATTN_MR) * ATTN_SLD, /* s */
        bwd ? ATTN_BBM * ATTN_SLD : 0,      /* ds */
        ATTN_MR * ATTN_GLD,                 /* g */
        ATTN_MR * ATTN_ALD,                 /* al */
        ATTN_BNMAX + NR,                    /* kpm */
        bwd ? 0 : orows * dpad,             /* o */
        rpad, rpad,                         /* mst, lst */
        bwd ? ATTN_BBM * dpad : 0,          /* dqa */
        bwd ? ATTN_BBN * dpad : 0,          /* dka */
        bwd ? ATTN_BBN * dpad : 0,          /* dva */
        bwd && p->a.dtable != NULL ? ATTN_BBM * dgt_ld : 0, /* dgt */
        bwd ? (p->a.m + 1) * (int64_t)(sizeof(double) / sizeof(T)) : 0, /* dvec */
        ATTN_NARROW_ROWS * dpad,            /* qr */
        dpad,                               /* zr */
        bwd ? ATTN_BBN * dpad : 0,          /* kpan */
        bwd ? ATTN_BBM * dpad : 0,          /* qpan */
        bwd ? ATTN_BBM * dpad : 0,          /* dopan */
        bwd ? ATTN_BBM : 0,                 /* rbad */
#if defined(WP_STORAGE_HALF)
        bwd ? p->a.m * d : 0,               /* dqh */
#else
        0,
#endif
        es.qb, es.kpb, es.dob, es.vpb, es.vpp, es.pp, /* (uint32_t, as large as T) */
    };
    int64_t total = 0;
    for (int i = 0; i < 30; ++i) {
        sizes[i] = (sizes[i] + 15) / 16 * 16; /* 64-byte aligned pieces */
        if (wavepe_add_overflow(total, sizes[i], &total)) return WAVEPE_E_OVERFLOW;
    }
    if ((uint64_t)total > (uint64_t)PTRDIFF_MAX / sizeof(T)) return WAVEPE_E_OVERFLOW;
    T *base = wavepe_scratch_alloc((size_t)total * sizeof(T));
    if (base == NULL) return WAVEPE_E_NOMEM;
    w->block = base;
    T **slots[24] = {&w->qp,  &w->kp,  &w->vp, &w->dop, &w->s,  &w->ds,   &w->g,    &w->al,
                     &w->kpm, &w->o,   &w->mst, &w->lst, &w->dqa, &w->dka, &w->dva, &w->dgt,
                     NULL,    &w->qr,  &w->zr, &w->kpan, &w->qpan, &w->dopan, &w->rbad, &w->dqh};
    uint32_t **uslots[6] = {&w->qb, &w->kpb, &w->dob, &w->vpb, &w->vpp, &w->pp}; /* pieces 24.. */
    for (int i = 0; i < 30; ++i) {
        if (i >= 24) *uslots[i - 24] = sizes[i] ? (uint32_t *)base : NULL;
        else if (slots[i] != NULL) *slots[i] = sizes[i] ? base : NULL;
        else w->dvec = sizes[i] ? (double *)base : NULL;
        base += sizes[i];
    }
    /* finite contents everywhere: junk lanes are read (and ignored) */
    memset(w->block, 0, (size_t)total * sizeof(T));
    const int status = FN(blk_work_alloc)(w, p, rows, bwd, narrow); /* the block engine's part */
    if (status != WAVEPE_OK) {
        wavepe_scratch_free(w->block);
        return status;
    }
    return WAVEPE_OK;
}


/* Start the online softmax of rows [0, rows). */
static void FN(state_reset)(FN(work) * w, int64_t rows) {
    const int64_t dpad = w->p->dpad, rpad = (rows + ATTN_MR - 1) / ATTN_MR * ATTN_MR;
    memset(w->o, 0, sizeof(T) * (size_t)(rpad * dpad));
    for (int64_t i = 0; i < rpad; ++i) {
        w->mst[i] = -(T)INFINITY;
        w->lst[i] = (T)0;
    }
}


/* Query rows of one head: pack them scaled into groups.  late: where the block's products run on tiles the
 * vector kernels' packing waits until a key block needs them (the forward's pack_groups_late: only one with
 * a non-finite value), or for ever (the backward: its scores are the tiles' wherever the rows are). */
static void FN(pack_query_groups)(FN(work) * w, FN(group) * groups, int64_t b, int64_t h, int64_t m0,
                                  int64_t rows, int late) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d;
    const S *qbase = (const S *)a->q + attn_off(a->q_strides, b, h, m0);
    const T slope = p->bias == ATTN_BIAS_ALIBI ? ((const T *)a->slopes)[h] : (T)0;
    const int defer = FN(blk_defer_groups)(w, qbase, late);
    for (int64_t gi = 0; gi * ATTN_MR < rows; ++gi) {
        FN(group) *g = &groups[gi];
        const S *rp[ATTN_MR];
        g->rows = rows - gi * ATTN_MR < ATTN_MR ? (int)(rows - gi * ATTN_MR) : ATTN_MR;
        for (int t = 0; t < ATTN_MR; ++t) {
            const int64_t i = gi * ATTN_MR + (t < g->rows ? t : 0);
            rp[t] = qbase + i * a->q_strides[2];
            FN(set_row)(a, g, t, b, a->q_offset + m0 + i);
            g->slope[t] = slope;
        }
        if (!defer) FN(pack_group)(w, g, gi, rp, g->rows, d, (T)a->scale);
        g->qr = NULL;
    }
    FN(blk_pack_rows)(w, qbase, a->q_strides[2], rows);
}


/* out = O / l, lse = m + log l for rows of one head. */
static void FN(finish_rows)(FN(work) * w, int64_t b, int64_t h, int64_t m0, int64_t rows, const T *o,
                            const T *mst, const T *lst) {
    const wavepe_attention_args *a = &w->p->a;
    const int64_t d = a->d, dpad = w->p->dpad;
    S *out = (S *)a->out + attn_off(a->out_strides, b, h, m0);
    T *lse = (T *)a->lse + (b * a->heads + h) * a->m + m0;
    for (int64_t i = 0; i < rows; ++i) {
        T l = lst[i];
        S *orow = out + i * a->out_strides[2];
        if (l == (T)0 && signbit(l)) { /* keys seen, every score -inf: 0/0, or mark_neg_inf's code */
            if (a->mark_neg_inf) {
                for (int64_t c = 0; c < d; c += VL) FN(s_storeu_n)(orow + c, V(zero)(), d - c);
                lse[i] = (T)INFINITY;
                continue;
            }
            l = (T)NAN;
        }
        const int any = l > (T)0 || l != l;
        const VT inv = V(set1)(any ? (T)1 / l : (T)0);
        for (int64_t c = 0; c < d; c += VL) FN(s_storeu_n)(orow + c, V(mul)(V(loadu)(o + i * dpad + c), inv), d - c);
        lse[i] = any ? (T)((double)mst[i] + log((double)l)) : -(T)INFINITY;
    }
}

int FN(attn_fwd_tiled)(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    const wavepe_attention_args *a = &p->a;
    FN(work) w;
    int status = FN(work_alloc)(&w, p, a->m < ATTN_FBM ? a->m : ATTN_FBM); /* sized (and cleared) for the rows a unit has */
    if (status != WAVEPE_OK) return status;
    const int64_t units = wavepe_attention_units(p, 0), more = p->taken != NULL ? units : 0;
    FN(blk_fwd_begin)(&w, end - begin, more);
    FN(group) groups[ATTN_FBM / ATTN_MR];
    /* The units of [begin, end), then -- this thread done with its range -- those no call has begun, the last
     * first: the end of another thread's range (its last query blocks of a head, one after another, reusing
     * the packed keys).  A static split left one of two threads idle 2-8 % of a call, up to 30 % where a busy
     * neighbour slowed one core (Emerald Rapids KVM guest, L=4096 H=8, bf16). */
    for (int64_t k = begin; k < end + more; ++k) {
        const int64_t u = k < end ? k : units - 1 - (k - end);
        if (!attn_take_unit(p, u)) continue;
        /* zigzag the query blocks so that a contiguous range of units mixes
         * cheap (early) and expensive (late) causal blocks */
        const int64_t bh = u / p->nqb, z = u % p->nqb;
        const int64_t qi = z % 2 == 0 ? z / 2 : p->nqb - 1 - z / 2;
        const int64_t b = bh / a->heads, h = bh % a->heads, hk = h / p->hg;
        const int64_t m0 = qi * ATTN_FBM, rows = a->m - m0 < ATTN_FBM ? a->m - m0 : ATTN_FBM;
        const int64_t ngroups = (rows + ATTN_MR - 1) / ATTN_MR;
        FN(pack_query_groups)(&w, groups, b, h, m0, rows, 1);
        FN(state_reset)(&w, rows);
        FN(rows_over_keys)(&w, groups, ngroups, b, hk, 0, a->n);
        FN(finish_rows)(&w, b, h, m0, rows, w.o, w.mst, w.lst);
    }
    FN(work_free)(&w);
    return WAVEPE_OK;
}

/* Split-N decoding: unit (b, hk, chunk) runs every query row of the kv
 * head's query heads over one chunk of keys and leaves (acc, max, sum). */
int FN(attn_fwd_decode)(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, M = a->m, C = p->nchunks;
    const int64_t rows = p->hg * M, ngroups = (rows + ATTN_MR - 1) / ATTN_MR;
    FN(work) w;
    int status = FN(work_alloc)(&w, p, rows);
    if (status != WAVEPE_OK) return status;
    FN(group) *groups = malloc(sizeof(FN(group)) * (size_t)(ngroups > 0 ? ngroups : 1));
    if (groups == NULL) {
        FN(work_free)(&w);
        return WAVEPE_E_NOMEM;
    }
    for (int64_t u = begin; u < end; ++u) {
        const int64_t c = u % C, bk = u / C, hk = bk % a->kv_heads, b = bk / a->kv_heads;
        for (int64_t gi = 0; gi < ngroups; ++gi) {
            FN(group) *g = &groups[gi];
            const S *rp[ATTN_MR];
            g->rows = rows - gi * ATTN_MR < ATTN_MR ? (int)(rows - gi * ATTN_MR) : ATTN_MR;
            for (int t = 0; t < ATTN_MR; ++t) {
                const int64_t i = gi * ATTN_MR + (t < g->rows ? t : 0);
                const int64_t h = hk * p->hg + i / M, m = i % M;
                rp[t] = (const S *)a->q + attn_off(a->q_strides, b, h, m);
                FN(set_row)(a, g, t, b, a->q_offset + m);
                g->slope[t] = p->bias == ATTN_BIAS_ALIBI ? ((const T *)a->slopes)[h] : (T)0;
            }
            FN(pack_group)(&w, g, gi, rp, g->rows, d, (T)a->scale);
            g->qr = NULL;
            if (rows <= ATTN_NARROW_ROWS) { /* narrow: a few query rows against the chunk */
                for (int t = 0; t < g->rows; ++t)
                    for (int64_t c = 0; c < d; ++c) w.qr[t * dpad + c] = (T)a->scale * S_TO_T(rp[t][c]);
                g->qr = w.qr;
            }
        }
        FN(state_reset)(&w, rows);
        const int64_t n_begin = p->key_lo + c * p->chunk;
        const int64_t n_end = n_begin + p->chunk < a->n ? n_begin + p->chunk : a->n;
        FN(rows_over_keys)(&w, groups, ngroups, b, hk, n_begin, n_end);
        for (int64_t i = 0; i < rows; ++i) {
            const int64_t h = hk * p->hg + i / M, m = i % M;
            if (C == 1) { /* one chunk: nothing to combine, the rows are final (no second phase) */
                FN(finish_rows)(&w, b, h, m, 1, w.o + i * dpad, w.mst + i, w.lst + i);
                continue;
            }
            T *dst = (T *)p->partial + (((b * a->heads + h) * M + m) * C + c) * (dpad + 2);
            memcpy(dst, w.o + i * dpad, sizeof(T) * (size_t)dpad);
            dst[dpad] = w.mst[i];
            dst[dpad + 1] = w.lst[i];
        }
    }
    free(groups);
    FN(work_free)(&w);
    return WAVEPE_OK;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* Flag the rows of a backward query block whose q or dO holds a NaN or inf
 * (x * 0 is 0 exactly when x is finite). */
static void FN(flag_bad_rows)(FN(work) * w, const S *q, int64_t qs, const S *dout, int64_t dos, int64_t rows,
                              int64_t d) {
    w->any_bad = 0;
    const VT zero = V(zero)();
    for (int64_t t = 0; t < rows; ++t) {
        VT z = zero;
        for (int64_t c = 0; c < d; c += VL) {
            z = V(fmadd)(FN(s_loadu_n)(q + t * qs + c, d - c), zero, z);
            z = V(fmadd)(FN(s_loadu_n)(dout + t * dos + c, d - c), zero, z);
        }
        const int bad = M(bits)(V(cmpeq)(z, zero)) != M(bits)(M(first)(VL));
        w->rbad[t] = bad ? (T)1 : (T)0;
        w->any_bad |= bad;
    }
}

/* The dK, dV and dT terms of the flagged rows, over the keys each row sees. */
static void FN(bad_rows_backward)(FN(work) * w, int64_t b, int64_t h, int64_t m0, int64_t t_first, int64_t rows,
                                  const FN(kblock) * kb, const int64_t *jl_all, const int64_t *jv_all, T *dt_slot) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad;
    const T *lse = (const T *)a->lse + (b * a->heads + h) * a->m + m0;
    for (int64_t t = t_first; t < rows; ++t) {
        /* a zero-weight row (lse = +inf, mark_neg_inf) contributes nothing: 0 * inf would not be 0 */
        if (w->rbad[t] == (T)0 || jv_all[t] == 0 || lse[t] == (T)INFINITY) continue;
        const S *qrow = (const S *)a->q + attn_off(a->q_strides, b, h, m0 + t);
        const S *gorow = (const S *)a->dout + attn_off(a->dout_strides, b, h, m0 + t);
        const T *prow = w->s + t * ATTN_SLD, *dsrow = w->ds + t * ATTN_SLD;
        const int64_t pos = a->q_offset + m0 + t;
        for (int64_t j = jl_all[t]; j < jv_all[t]; ++j) {
            if (kb->masked && w->kpm[j] != (T)0) continue;
            for (int64_t c = 0; c < d; ++c) {
                w->dva[j * dpad + c] += prow[j] * S_TO_T(gorow[c]);
                w->dka[j * dpad + c] += dsrow[j] * S_TO_T(qrow[c]);
            }
            const int64_t pr = p->pr_hi - pos + kb->n0 + j;
            if (dt_slot != NULL && pr >= 0 && pr < p->prows)
                for (int64_t c = 0; c < d; ++c) dt_slot[pr * dpad + c] += dsrow[j] * S_TO_T(qrow[c]);
        }
    }
}

/* Row t of a group's P and dS over a backward block's keys (the scores and dP rows where sr and dprow say,
 * keys [jl, n) seen): P = exp(s - lse) -- 2^((s - lse) log2 e) where the block engine rounds it (tiled) --,
 * dS = scale P (dP - D) (times 1 - tanh^2 under a soft-cap), zero outside the keys seen and up to jbround
 * (lse and D, *dval, read only where the row sees a key: a group's rows past the block's end have neither);
 * returns vslope plus the row's ALiBi slope-gradient terms where alibi_grad. */
static inline __attribute__((always_inline)) VT FN(row_p_ds)(const FN(work) * w, const FN(kblock) * kb,
                                                              const FN(score_rows) * sr, int t, const T *dprow,
                                                              T *prow, T *drow, int64_t jl, int64_t n, int64_t j0,
                                                              int64_t jbround, const T *lse, const double *dval,
                                                              int64_t pos,
                                                              int tiled, int alibi_grad, int capped, VT vcap,
                                                              VT vicap, VT vslope) {
    const VT ninf = V(set1)(-(T)INFINITY);
    int64_t j = 0;
    if (n > 0 && !isinf(*lse)) { /* -inf: no key seen; +inf: a zero-weight row (mark_neg_inf) */
        /* keys before j0 were not computed: P = dS = 0 there (the block's products read them) */
        for (; j < j0; j += VL) {
            V(storeu)(prow + j, V(zero)());
            V(storeu)(drow + j, V(zero)());
        }
        const VT vl = V(set1)(*lse), vD = V(set1)((T)*dval), vs = V(set1)((T)w->p->a.scale);
        const VT vss = V(set1)(sr->scale);
        const T *src = sr->src[t], *win = sr->win[t], *post = sr->post[t];
        /* the tiles' P (rounded to the half type next): 2^((x - lse) log2 e), as the forward's (the
         * difference first: x log2 e - lse log2 e rounded lost the exponent at scores of 1e20) */
        const VT vlog2e = V(set1)((T)WP_LOG2E);
        for (; j < n; j += VL) {
            /* masked lanes: P = dS = 0 by selection (their scores and
             * dO . v may be NaN) */
            const MT keep = FN(kept_lanes)(j, jl, n, kb->masked ? w->kpm : NULL);
            VT x = FN(score_z)(src, win, post, vss, j), th = V(zero)();
            if (post == NULL) x = V(mul)(vss, x);
            if (capped) { /* the forward's softcap * tanh(s / softcap); dS gets 1 - tanh^2 */
                th = V(tanh)(V(mul)(x, vicap));
                x = V(mul)(vcap, th);
            }
            x = V(blend)(keep, ninf, x);
            /* selected too: with a NaN lse, exp(-inf - NaN) is NaN */
            const VT e = tiled ? FN(blk_weights16)(V(mul)(V(sub)(x, vl), vlog2e)) : V(exp_softmax)(V(sub)(x, vl));
            const VT pr = V(blend)(keep, V(zero)(), e);
            VT ds = V(mul)(pr, V(sub)(V(loadu)(dprow + j), vD));
            if (capped) ds = V(mul)(ds, V(fnmadd)(th, th, V(set1)((T)1)));
            ds = V(blend)(keep, V(zero)(), ds); /* (a masked lane's tanh may be NaN) */
            V(storeu)(prow + j, pr);
            V(storeu)(drow + j, V(mul)(ds, vs));
            if (alibi_grad) {
                const VT r = V(sub)(V(set1)((T)(pos - kb->n0 - j)), V(iota)());
                vslope = V(fmadd)(ds, V(abs)(r), vslope);
            }
        }
    }
    for (; j < jbround; j += VL) {
        V(storeu)(prow + j, V(zero)());
        V(storeu)(drow + j, V(zero)());
    }
    return vslope;
}

/* dq += dS T of a group (the vector kernels'; tiles_table_backward's where the block engine runs it): the dS
 * rows skewed onto the window of table rows the group's (row, key) pairs map to, times those rows over the
 * columns their strips hold (strips of one range in one product). */
static inline __attribute__((always_inline)) void FN(group_dq_table)(FN(work) * w, const FN(group) * g,
                                                                      const FN(kblock) * kb,
                                                                      const int64_t jv[ATTN_MR], int64_t jmax,
                                                                      const T *dss, T *dqa) {
    const wavepe_attention_plan *p = w->p;
    const int64_t dpad = p->dpad;
    int64_t p_first, p_last;
    if (!FN(table_window)(p, g, kb, jv, jmax, &p_first, &p_last)) return;
    const int64_t p_base = FN(floor_div)(p_first, NR) * NR;
    const int64_t width = p_last - p_base + 1 + NR;
    const int64_t s_lo = p_first < 0 ? 0 : p_first / NR;
    const int64_t s_hi = (p_last < p->prows ? p_last : p->prows - 1) / NR;
    for (int t = 0; t < ATTN_MR; ++t) {
        T *grow = w->g + t * ATTN_GLD;
        for (int64_t j = 0; j < width; j += VL) V(storeu)(grow + j, V(zero)());
        if (jv[t] > 0) memcpy(grow + (p->pr_hi - g->pos[t] + kb->n0 - p_base), dss + t * ATTN_SLD,
                              sizeof(T) * (size_t)jv[t]);
    }
    const T *trow = (const T *)p->trow;
    for (int64_t st = s_lo; st <= s_hi;) {
        const int32_t clo = p->strip_clo[st], chi = p->strip_chi[st];
        int64_t st_end = st + 1;
        while (st_end <= s_hi && p->strip_clo[st_end] == clo && p->strip_chi[st_end] == chi) ++st_end;
        if (chi > clo) {
            const int64_t k0 = st * NR > p_first ? st * NR : p_first;
            const int64_t k1 = st_end * NR < p_last + 1 ? st_end * NR : p_last + 1;
            for (int64_t c0 = clo / NR * NR; c0 < chi; c0 += NR)
                FN(mk_gen)(k1 - k0, w->g + (k0 - p_base), ATTN_GLD, 1, trow + k0 * dpad + c0, dpad, NR,
                           dqa + c0, dpad, g->rows);
        }
        st = st_end;
    }
}

/* dT[p] += sum_t dS[t][j(p, t)] q_t over a block's window of table rows (the vector kernels'; rows [t_first,
 * rows) of the block, jvb its keys, kt = rows - t_first; tiles_table_backward's where the block engine runs
 * it): the dS rows skewed onto the window, times the query panels. */
static inline __attribute__((always_inline)) void FN(block_dtable)(FN(work) * w, int64_t m0, int64_t t_first,
                                                                    int64_t rows, int64_t jvb,
                                                                    const FN(kblock) * kb,
                                                                    const int64_t *jv_all, T *dt_slot) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, kt = rows - t_first;
    const int64_t pos_lo = a->q_offset + m0 + t_first, pos_hi = a->q_offset + m0 + rows - 1;
    const int64_t P_first = p->pr_hi - pos_hi + kb->n0, P_last = p->pr_hi - pos_lo + kb->n0 + jvb - 1;
    const int64_t pa = P_first < 0 ? 0 : P_first, pb = P_last < p->prows ? P_last : p->prows - 1;
    if (pa <= pb) {
        const int64_t ldg = ATTN_BBM + ATTN_BBN + 2 * NR, width = P_last - P_first + 1 + ATTN_MR;
        for (int64_t t = t_first; t < rows; ++t) {
            T *grow = w->dgt + t * ldg;
            memset(grow, 0, sizeof(T) * (size_t)width);
            const int64_t pos = a->q_offset + m0 + t;
            if (jv_all[t] > 0)
                memcpy(grow + (p->pr_hi - pos + kb->n0 - P_first), w->ds + t * ATTN_SLD,
                       sizeof(T) * (size_t)jv_all[t]);
        }
        for (int64_t p0 = pa; p0 <= pb; p0 += ATTN_MR) {
            const int rr = pb - p0 + 1 < ATTN_MR ? (int)(pb - p0 + 1) : ATTN_MR;
            for (int64_t c0 = 0; c0 < d; c0 += NR)
                FN(mk_gen)(kt, w->dgt + t_first * ldg + (p0 - P_first), 1, ldg,
                           w->qpan + c0 * ATTN_BBM + t_first * NR, NR, NR, dt_slot + p0 * dpad + c0, dpad, rr);
        }
    }
}

/* One (query block, key block) tile of the backward for head h; dq: the
 * head's dq accumulator (M x d). */
static void FN(tile_backward)(FN(work) * w, FN(group) * groups, int64_t b, int64_t h, int64_t m0, int64_t rows,
                              const FN(kblock) * kb, T *dt_slot, double *dslope, T *dq_head) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, ngroups = (rows + ATTN_MR - 1) / ATTN_MR;
    const T *lse = (const T *)a->lse + (b * a->heads + h) * a->m + m0;
    int64_t jvb = 0, t_first = rows;
    int64_t jl_all[ATTN_BBM], jv_all[ATTN_BBM];
    for (int64_t gi = 0; gi < ngroups; ++gi) {
        const int64_t jm = FN(valid_keys)(&groups[gi], kb, jl_all + gi * ATTN_MR, jv_all + gi * ATTN_MR);
        if (jm > jvb) jvb = jm;
    }
    if (jvb == 0) return;
    for (int64_t t = 0; t < rows; ++t)
        if (jv_all[t] > 0) {
            t_first = t;
            break;
        }
    const int64_t jbround = (jvb + VL - 1) / VL * VL;
    memset(w->dqa, 0, sizeof(T) * (size_t)(ngroups * ATTN_MR * dpad));
    /* S (with the bias windows) and dP of the whole block by the block engine, where it runs them */
    int64_t pos[ATTN_BBM]; /* (the rows' positions: the engine's bias windows) */
    const int tiled = FN(blk_bwd_products)(w, m0, rows, jl_all, jv_all, pos);
    const int table_tiled = FN(blk_bwd_table_on_tiles)(w, dt_slot); /* the table's products (tiles_table_backward) */
    const int capped = a->softcap > 0.0;
    const VT vcap = V(set1)((T)a->softcap), vicap = V(set1)((T)(capped ? 1.0 / a->softcap : 0.0));
    for (int64_t gi = 0; gi < ngroups; ++gi) {
        const FN(group) *g = &groups[gi];
        const int64_t *jl = jl_all + gi * ATTN_MR, *jv = jv_all + gi * ATTN_MR;
        T *ps = w->s + gi * ATTN_MR * ATTN_SLD, *dss = w->ds + gi * ATTN_MR * ATTN_SLD;
        int64_t jmax = 0;
        for (int t = 0; t < ATTN_MR; ++t) jmax = jv[t] > jmax ? jv[t] : jmax;
        if (jmax == 0) {
            for (int t = 0; t < ATTN_MR; ++t)
                for (int64_t j = 0; j < jbround; j += VL) {
                    V(storeu)(ps + t * ATTN_SLD + j, V(zero)());
                    V(storeu)(dss + t * ATTN_SLD + j, V(zero)());
                }
            continue;
        }
        const int64_t j0 = FN(first_key)(g, jl, jv);
        const int64_t nstrip = (jmax + NR - 1) / NR;
        FN(score_rows) sr; /* the group's scores and dP rows: where the tile products left them, or ps, dss */
        const T *dpr[ATTN_MR];
        if (tiled) {
            FN(blk_bwd_group_rows)(w, g, gi, kb, rows, pos, jv_all, jv, jmax, &sr, dpr);
        } else {
            sr.scale = (T)1;
            for (int t = 0; t < ATTN_MR; ++t)
                sr.src[t] = ps + t * ATTN_SLD, sr.win[t] = sr.post[t] = NULL, dpr[t] = dss + t * ATTN_SLD;
            FN(group_scores)(w, g, kb, jv, j0, jmax, ps, ATTN_SLD);
            for (int64_t st = j0 / NR; st < nstrip; ++st) FN(eng_dp_strip)(w, gi, st, dss + st * NR, ATTN_SLD);
        }
        VT vslope = V(zero)();
        for (int t = 0; t < ATTN_MR; ++t) {
            const int64_t i = gi * ATTN_MR + t;
            vslope = FN(row_p_ds)(w, kb, &sr, t, dpr[t], ps + t * ATTN_SLD, dss + t * ATTN_SLD, jl[t], jv[t], j0,
                                  jbround, lse + i, w->dvec + m0 + i, g->pos[t], tiled,
                                  p->bias == ATTN_BIAS_ALIBI && dslope != NULL, capped, vcap, vicap, vslope);
        }
        if (dslope != NULL) *dslope -= (double)V(hsum)(vslope);
        /* dq += dS K (tiles_block_backward's, where it runs) */
        T *dqa = w->dqa + gi * ATTN_MR * dpad;
        if (!FN(blk_bwd_dq_tiled)(w, tiled))
            FN(rows_times_panels)(g, jl, jv, dss, ATTN_SLD, w->kpan, ATTN_BBN, d, dqa, dpad);
        /* dq += dS T: the dS rows skewed onto the window of table rows (tiles_table_backward's, where it runs) */
        if (p->bias == ATTN_BIAS_TABLE && !table_tiled) FN(group_dq_table)(w, g, kb, jv, jmax, dss, dqa);
    }
    /* dV += P^T dO, dK += dS^T Q over the block's rows */
    const int64_t kt = rows - t_first;
    /* the keys whose dV, dK the vector kernels make (the block engine's sums, where it runs them) */
    const int64_t vector_keys = FN(blk_bwd_sums)(w, m0, rows, jvb, jbround, kb, jv_all, dt_slot, tiled, table_tiled);
    for (int64_t s0 = 0; s0 < vector_keys; s0 += ATTN_MR) {
        const int rr = jvb - s0 < ATTN_MR ? (int)(jvb - s0) : ATTN_MR;
        for (int64_t c0 = 0; c0 < d; c0 += NR) {
            const int64_t pan = c0 * ATTN_BBM + t_first * NR;
            FN(mk_gen)(kt, w->s + t_first * ATTN_SLD + s0, 1, ATTN_SLD, w->dopan + pan, NR, NR,
                       w->dva + s0 * dpad + c0, dpad, rr);
            FN(mk_gen)(kt, w->ds + t_first * ATTN_SLD + s0, 1, ATTN_SLD, w->qpan + pan, NR, NR,
                       w->dka + s0 * dpad + c0, dpad, rr);
        }
    }
    /* Rows whose q or dO holds a NaN/inf were packed as zeros in qpan/dopan: in the
     * products above their P = dS = 0 at keys they do not see would have met
     * 0 * NaN. Their terms go in here, over the keys each one sees only. */
    if (w->any_bad) FN(bad_rows_backward)(w, b, h, m0, t_first, rows, kb, jl_all, jv_all, dt_slot);
    /* dT[p] += sum_t dS[t][j(p, t)] q_t over the tile's window (tiles_table_backward's, where it runs) */
    if (dt_slot != NULL && p->prows > 0 && !table_tiled) FN(block_dtable)(w, m0, t_first, rows, jvb, kb, jv_all, dt_slot);
    /* the tile's dq into the head's dq */
    T *dq = dq_head + m0 * d;
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t c = 0; c < d; ++c) dq[t * d + c] += w->dqa[t * dpad + c];
}

/* sum_c o[c] g[c] with products and sums in double, for the backward's D = rowsum(O * dO): four
 * independent sums (one sum's chain of dependent double additions, d of them per query row, was ~4 % of
 * the amx backward's vector work).  Half types are widened by the ISA's vectors (exactly), not one element
 * at a time; the products stay in double: bf16's range is float32's, so a product in float32 could
 * overflow or flush where double does not.  Lanes past d are zero in both. */
static double FN(row_dot)(const S *o, const S *g, int64_t d) {
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
#if defined(WP_STORAGE_HALF)
    T ow[VL], gw[VL];
    for (int64_t c = 0; c < d; c += VL) {
        V(storeu)(ow, FN(s_loadu_n)(o + c, d - c));
        V(storeu)(gw, FN(s_loadu_n)(g + c, d - c));
        for (int i = 0; i < VL; ++i) acc[i % 4] += (double)ow[i] * (double)gw[i];
    }
#else
    int64_t c = 0;
    for (; c + 4 <= d; c += 4)
        for (int i = 0; i < 4; ++i) acc[i] += (double)o[c + i] * (double)g[c + i];
    for (; c < d; ++c) acc[0] += (double)o[c] * (double)g[c];
#endif
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* The query blocks [*i0, *i1) with a row that can see a key of keys [n0, n0 + nk) of batch row b: positions
 * from n0 (causal) or the first key's document start, to the last key's document end -- the documents as
 * they are, not clamped to the keys (a tile's queries may lie outside them); a key outside every document
 * bounds nothing.  Returns 1, 0 where no row sees the keys, -1 where no row sees them or any later key. */
static int FN(query_blocks_of_keys)(const wavepe_attention_args *a, int64_t b, int64_t n0, int64_t nk, int64_t *i0,
                                    int64_t *i1) {
    const int64_t M = a->m;
    int64_t pos_lo = a->q_offset, pos_hi = a->q_offset + M, qlo, qhi;
    wavepe_attention_queries_of_key(a, n0, &qlo, &qhi); /* causality and the window: */
    if (qlo > pos_lo) pos_lo = qlo;                    /* the first key's first query */
    wavepe_attention_queries_of_key(a, n0 + nk - 1, &qlo, &qhi);
    if (qhi < pos_hi) pos_hi = qhi;                    /* and the last key's last one */
    if (a->cu_seqlens != NULL) {
        int64_t lo, hi;
        wavepe_attention_document(a, b, n0, &lo, &hi);
        if (lo < hi && lo > pos_lo) pos_lo = lo;
        wavepe_attention_document(a, b, n0 + nk - 1, &lo, &hi);
        if (lo < hi && hi < pos_hi) pos_hi = hi;
    }
    const int64_t mfirst = pos_lo - a->q_offset, mend = pos_hi - a->q_offset;
    if (mfirst >= M) return -1;
    if (mend <= 0 || mend <= mfirst) return 0;
    *i0 = mfirst > 0 ? mfirst / ATTN_BBM : 0;
    *i1 = ((mend < M ? mend : M) + ATTN_BBM - 1) / ATTN_BBM;
    return 1;
}

/* Backward of the (b, h) unit, key blocks outer (FlashAttention-2): dq of
 * head h, its dk/dv contribution accumulated per key block. */
static void FN(unit_backward)(FN(work) * w, FN(group) * groups, int64_t unit, T *dt_slot) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, M = a->m, N = a->n;
    const int64_t b = unit / a->heads, h = unit % a->heads, hk = h / p->hg;
    T *dk = (T *)attn_dk_dest(p, b, h), *dv = (T *)attn_dv_dest(p, b, h);
    memset(dk, 0, sizeof(T) * (size_t)(N * d));
    memset(dv, 0, sizeof(T) * (size_t)(N * d));
    const S *kbase = (const S *)a->k + attn_off(a->k_strides, b, hk, 0);
    const S *vbase = (const S *)a->v + attn_off(a->v_strides, b, hk, 0);
#if defined(WP_STORAGE_HALF)
    T *dq = w->dqh; /* float32, rounded into the caller's dq at the end */
#else
    T *dq = (T *)a->dq + (b * a->heads + h) * M * d;
#endif
    if (M > 0) memset(dq, 0, sizeof(T) * (size_t)(M * d));
    for (int64_t m = 0; m < M; ++m) {
        const S *orow = (const S *)a->out + attn_off(a->out_strides, b, h, m);
        const S *gorow = (const S *)a->dout + attn_off(a->dout_strides, b, h, m);
        double s = FN(row_dot)(orow, gorow, d);
        if (a->dlse != NULL) s -= (double)((const T *)a->dlse)[(b * a->heads + h) * M + m];
        w->dvec[m] = s;
    }
    double dslope = 0.0;
    FN(blk_bwd_head)(w, b, h);
    /* the panels of q (dK, a table's dT) and dO (dV) only where the vector kernels make those sums */
    const int sums_tiled = FN(blk_bwd_sums_on_tiles)(w);
    const int dt_vector = dt_slot != NULL && p->prows > 0 && !FN(blk_bwd_table_on_tiles)(w, dt_slot);
    for (int64_t n0 = 0; n0 < N; n0 += ATTN_BBN) {
        FN(kblock) kb;
        kb.n0 = n0;
        kb.nk = N - n0 < ATTN_BBN ? N - n0 : ATTN_BBN;
        kb.nrun = N - n0;
        kb.k = kbase + n0 * a->k_strides[2];
        kb.v = vbase + n0 * a->v_strides[2];
        kb.ks = a->k_strides[2];
        kb.vs = a->v_strides[2];
        kb.masked = a->key_padding_mask != NULL;
        if (kb.masked && FN(load_kpm)(w, b, n0, kb.nk) == 0) continue;
        int64_t i0, i1;
        const int seen = FN(query_blocks_of_keys)(a, b, n0, kb.nk, &i0, &i1);
        if (seen < 0) break; /* no bound decreases with n0: no later block is seen */
        if (seen == 0) continue;
        /* the keys and values packed for the vector kernels only where these run: with the rows on the block
         * engine's tiles S and dP are tile products, and (bf16) with finite keys so is dQ += dS K
         * (blk_bwd_pack_block, blk_bwd_key_block) */
        const int scores_tiled = FN(blk_bwd_pack_block)(w, &kb);
        if (!scores_tiled) FN(eng_pack_bwd_block)(w, &kb);
        const int dq_tiled = FN(blk_bwd_key_block)(w, &kb, scores_tiled);
        if (!dq_tiled) FN(pack_panels)(w->kpan, ATTN_BBN, kb.k, kb.ks, kb.nk, d, kb.masked ? w->kpm : NULL);
        /* dka, dva: the vector kernels' dK, dV sums; with those on tiles only bad_rows_backward's terms go
         * there: cleared (and added below) at the first query block that writes them */
        int kv_vector = 0;
        for (int64_t qi = i0; qi < i1 && qi < p->nqb; ++qi) {
            const int64_t m0 = qi * ATTN_BBM, rows = M - m0 < ATTN_BBM ? M - m0 : ATTN_BBM;
            FN(pack_query_groups)(w, groups, b, h, m0, rows, 1);
            /* dP = dO V^T is the block engine's wherever the rows are on it: no dO groups */
            const int dp_tiled = FN(blk_rows_on_tiles)(w);
            for (int64_t gi = 0; gi * ATTN_MR < rows && !dp_tiled; ++gi) {
                const S *rp[ATTN_MR];
                const int gr = groups[gi].rows;
                for (int t = 0; t < ATTN_MR; ++t)
                    rp[t] = (const S *)a->dout +
                            attn_off(a->dout_strides, b, h, m0 + gi * ATTN_MR + (t < gr ? t : 0));
                FN(eng_pack_dout_group)(w, gi, rp, gr, d);
            }
            const S *qblk = (const S *)a->q + attn_off(a->q_strides, b, h, m0);
            const S *doblk = (const S *)a->dout + attn_off(a->dout_strides, b, h, m0);
            FN(blk_bwd_dout_rows)(w, doblk, a->dout_strides[2], rows);
            FN(flag_bad_rows)(w, qblk, a->q_strides[2], doblk, a->dout_strides[2], rows, d);
            if (!kv_vector && (!sums_tiled || w->any_bad)) {
                memset(w->dka, 0, sizeof(T) * (size_t)(ATTN_BBN * dpad));
                memset(w->dva, 0, sizeof(T) * (size_t)(ATTN_BBN * dpad));
                kv_vector = 1;
            }
            if (!sums_tiled || dt_vector)
                FN(pack_panels)(w->qpan, ATTN_BBM, qblk, a->q_strides[2], rows, d, w->any_bad ? w->rbad : NULL);
            if (!sums_tiled)
                FN(pack_panels)(w->dopan, ATTN_BBM, doblk, a->dout_strides[2], rows, d, w->any_bad ? w->rbad : NULL);
            FN(tile_backward)(w, groups, b, h, m0, rows, &kb, dt_slot, p->dslope_partial ? &dslope : NULL, dq);
        }
        for (int64_t j = 0; j < kb.nk && kv_vector; ++j)
            for (int64_t c = 0; c < d; ++c) {
                dk[(n0 + j) * d + c] += w->dka[j * dpad + c];
                dv[(n0 + j) * d + c] += w->dva[j * dpad + c];
            }
        FN(blk_bwd_key_block_end)(w, dk + n0 * d, dv + n0 * d, kb.nk);
    }
    if (p->dslope_partial != NULL) p->dslope_partial[b * a->heads + h] = dslope;
#if defined(WP_STORAGE_HALF)
    S *dq_out = (S *)a->dq + (b * a->heads + h) * M * d;
    for (int64_t i = 0; i < M * d; i += VL) FN(s_storeu_n)(dq_out + i, V(loadu)(dq + i), M * d - i);
#endif
}

int FN(attn_bwd)(wavepe_attention_plan *p, int64_t begin, int64_t end) {
    FN(work) w;
    int status = FN(work_alloc)(&w, p, ATTN_BBM);
    if (status != WAVEPE_OK) return status;
    FN(group) groups[ATTN_BBM / ATTN_MR];
    for (int64_t slot = begin; slot < end; ++slot) {
        T *dt_slot = p->dt_partial != NULL ? (T *)p->dt_partial + slot * p->dt_rows * p->dt_cols : NULL;
        for (int64_t unit = slot; unit < p->nunits; unit += p->nslots) FN(unit_backward)(&w, groups, unit, dt_slot);
    }
    FN(work_free)(&w);
    return WAVEPE_OK;
}

#undef ATTN_BNMAX
#undef ATTN_SLD
#undef ATTN_GLD
#undef ATTN_ALD
#undef ATTN_TGW
#undef ATTN_TSLD
#undef ATTN_TPLD
#undef ATTN_BLOCKS_FILE
#undef ATTN_BLOCKS_KIND
#undef ATTN_ENGINE_KIND
#undef NR
#undef ATTN_FBM
#undef ATTN_NEGLIGIBLE
#undef ATTN_FBN
#undef ATTN_BBM
#undef ATTN_BBN
#undef ATTN_TB
#undef MK_ACC
#undef ATTN_ENGINE_FILE
#include "simd_type_end.h"
