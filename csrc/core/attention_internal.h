/* attention_internal.h: the plan shared by attention.c (scalar reference,
 * plan building, reductions) and the tiled kernels of attention_simd.h
 * (attention_<isa>.c).  Not part of the public API. */
#ifndef WAVEPE_ATTENTION_INTERNAL_H
#define WAVEPE_ATTENTION_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "attention.h"

enum { ATTN_BIAS_NONE = 0, ATTN_BIAS_TABLE = 1, ATTN_BIAS_ALIBI = 2 };
enum { ATTN_KIND_SCALAR = 0, ATTN_KIND_TILED = 1, ATTN_KIND_DECODE = 2 };

/* Most partial table-gradient buffers of a backward: bounds its extra memory
 * by a constant times the table size, independently of B * H. */
#define ATTN_MAX_TABLE_SLOTS 8
/* Key rows per phase-1 unit of the GQA dk/dv reduction. */
#define ATTN_KV_REDUCE_ROWS 64
/* The amx forward's per-thread cache of packed key blocks (attention_blocks_tiles.h, kv_cache_alloc), for threads
 * that run two units or more: at most this many bytes a thread (8 MiB: 8192 keys of d = 128 at 2 x 2 bytes a
 * key element; on a machine of many threads, units per thread are few and so are caches); longer sequences
 * pack per query block. */
#define ATTN_KV_CACHE_BYTES ((int64_t)8 << 20)

/* Tiling of the vector kernels (attention_simd.h).  A micro-tile is MR rows x
 * NR = 2 vectors of accumulators (12 vector registers); NR is 2 * the lanes
 * of the ISA (float32: 16 on AVX2, 32 on AVX-512, 8 on NEON).  Query blocks are BM rows,
 * key blocks BN keys (multiples of MR and of every ISA's NR).  The forward streams all of K and
 * V once per query block, so its blocks are tall (K/V traffic ~ 1/BM; its
 * queries are processed 6 rows at a time, so BM costs only the O
 * accumulators); the backward streams Q and dO once per key block, so its
 * blocks are wide.  Sized so that a block's working set stays in a 512 KiB L2. */
#define ATTN_MR 6
/* Forward query blocks: these rows for 8-lane (AVX2) float vectors, scaled with the
 * vector width (AVX-512: 384 rows, NEON: 96).  A block streams every key it sees once, so
 * taller blocks read K and V less often: at L = 16384 on a Sapphire Rapids core the
 * 384-row block took ~6 % less time than 192 rows (its working set, ~0.5 MiB, sits
 * in the 1-2 MiB L2 of the CPUs that have AVX-512; AVX2's 192 fits 512 KiB). */
#define ATTN_FBM_F32 192 /* forward */
#define ATTN_FBN_F32 128
#define ATTN_BBM_F32 96  /* backward */
#define ATTN_BBN_F32 256
#define ATTN_FBM_F64 96
#define ATTN_FBN_F64 64
#define ATTN_BBM_F64 48
#define ATTN_BBN_F64 128
/* Split-N decoding: at most this many queries per head, and chunks of keys
 * per (batch, kv head) so that there are about DECODE_SPLIT of them. */
#define ATTN_DECODE_MAX_M 16
#define ATTN_DECODE_SPLIT 16
/* ... but no chunk shorter than this many key blocks: a chunk costs a work
 * area, a query packing and a partial result to combine, which at a few
 * hundred keys (a small model's decoding step) took as long as the keys. */
#define ATTN_DECODE_MIN_BLOCKS 4
/* Decoding with at most this many query rows per kv head runs the narrow kernels (scores
 * straight from the key rows, P V row by row), not the 6-row micro-tiles. */
#define ATTN_NARROW_ROWS 4

struct wavepe_attention_plan {
    wavepe_attention_args a; /* copy of the caller's arguments */
    wavepe_isa isa;
    int f64;                 /* compute type: 0 float32 (float32 and half data), 1 float64 */
    int acc;                 /* the accumulator's wavepe_dtype (slopes, lse, the plan's buffers) */
    int backward;
    int kind;                /* ATTN_KIND_* */
    int bias;                /* ATTN_BIAS_* */
    int64_t hg;              /* query heads per kv head */
    int64_t esize;           /* bytes per element of the compute type (the plan's buffers) */

    /* tiles (vector ISAs) */
    int64_t bm, bn, nr, dpad; /* dpad: d rounded up to nr */
    int64_t nqb, nkb;         /* query / key block counts */

    /* Table over the distances [pr_lo, pr_hi] the operation can need, in
     * decreasing order: packed row p holds distance pr_hi - p (p < prows, a
     * multiple of nr; rows past the range are zero).  With clamp, distances
     * outside the table repeat its edge rows. */
    int64_t pr_lo, pr_hi, prows, nstrips; /* prows == 0: no table work at all */
    /* A decoding step of one query position (m = 1) with the narrow kernels: the table's rows
     * are added to the keys whole (narrow_dots_rr), so no strip's column range is read */
    int fold_table;
    void *tpack;       /* [strip][d][nr]: strips transposed, operand of q . T; where attn_dpbf16,
                        * [strip][ceil(d/2)][nr] uint32 bf16 pairs of the stored table (mk_dp); written
                        * only over each strip's columns [clo, chi) (the pairs holding them): all that
                        * is read */
    void *trow;        /* [prows][dpad] row-major, zero padded: operand of ds . T */
    int32_t *strip_clo; /* per strip: columns [clo, chi) hold every nonzero */
    int32_t *strip_chi; /* clo == chi: the strip is all zero */
    double *strip_amax; /* the largest |entry| of the strip (NaN if it holds one): attn_strip_negligible */
    /* the amx ISA's half-type blocks on tiles (the tile engine, attention_blocks_tiles.h; tiles.h): whether this plan's
     * products run there, and the packed table transposed in pairs of the stored elements, the B operand
     * of the bias windows, strip after strip of 16 rows (tiles.h): tvnni[wavepe_tile_b_index(k2, p, 16, 16
     * k2pad)] = the pair (2 k2, 2 k2 + 1) of packed row p, k2 < k2pad (the pairs of d rounded up to 16), zero past d
     * and for p in [prows, prows + 16) */
    int tiles;
    uint32_t *tvnni;
    /* bf16 backward plans on tiles (ATTN_TILES_BWD): the packed table in pairs of rows, the B operand of
     * dQ += dS T: tpairs[r2 * dpad + c] = the pair (rows 2 r2, 2 r2 + 1) of packed column c, zero past d
     * and for rows in [prows, prows + 64) (a product's pairs run past the window by up to 32 rows) */
    uint32_t *tpairs;

    /* the tiled forward's units, each taken once (attn_take_unit): a thread done with its own range goes on
     * with units no thread has begun, the last first -- calloc'd, one byte a unit; NULL for other kinds */
    atomic_uchar *taken;

    /* split-N decoding */
    int64_t chunk, nchunks; /* keys per chunk (multiple of bn), chunks per head */
    int64_t key_lo;         /* the first chunk's first key (the keys before it no query sees) */
    void *partial;          /* (B*H*M, nchunks, dpad + 2): acc, max, sum */

    /* backward */
    int64_t nunits;      /* (batch, query head) units */
    int64_t nslots;      /* phase-0 units: slot s runs units s, s + nslots, ... */
    void *dkv_partial;   /* GQA or half data: (B, H, N, d) dk then dv per query head, accumulator
                          * type, or NULL (H == Hkv, float32 / float64: straight into dk, dv) */
    int64_t nkv_chunks;  /* phase-1 units reducing dk/dv over each kv head's query heads */
    void *dt_partial;    /* (nslots, rows, cols) table gradient per slot, or NULL */
    int64_t dt_rows, dt_cols; /* scalar: (R, d); vector: (prows, dpad) */
    double *dslope_partial; /* (B, H) */
};

/* Whether table strip st adds nothing a weight can show to the scores of query rows whose largest L1 norm
 * times |scale| is qbound: |scale q . T| <= qbound max |T| (a bound, not an estimate), and where that is at
 * most eps -- the compute type's rounding of 1 (2^-24 float32, 2^-53 float64) -- adding it would scale each
 * weight by a factor that rounds to 1.  Such strips (a wavelet table's far rows: with the 8 x 16 grid and
 * unit-size queries in float32, those past distance ~900) are left out of the bias; a NaN or inf in the
 * rows or the strip leaves it in. */
static inline int attn_strip_negligible(const wavepe_attention_plan *p, int64_t st, double qbound, double eps) {
    return qbound * p->strip_amax[st] <= eps;
}

/* Whether this call runs unit u of the tiled forward: it takes it unless a call took it first.  Units are
 * computed the same whichever thread runs them, so the outputs do not depend on who took what; the taking
 * itself needs no order with the units' writes (the thread pool's join orders those). */
static inline int attn_take_unit(wavepe_attention_plan *p, int64_t u) {
    return p->taken == NULL || (atomic_load_explicit(&p->taken[u], memory_order_relaxed) == 0 &&
                                atomic_exchange_explicit(&p->taken[u], 1, memory_order_relaxed) == 0);
}

/* Pointers into the strided tensors. */
static inline int64_t attn_off(const int64_t s[3], int64_t b, int64_t h, int64_t row) {
    return b * s[0] + h * s[1] + row * s[2];
}

/* Where the backward of query head h accumulates dk and dv (dense N x d):
 * the outputs when each kv head has one query head, else h's partial. */
static inline void *attn_dk_dest(const wavepe_attention_plan *p, int64_t b, int64_t h) {
    const wavepe_attention_args *a = &p->a;
    if (p->dkv_partial == NULL) return (char *)a->dk + (b * a->kv_heads + h) * a->n * a->d * p->esize;
    return (char *)p->dkv_partial + (b * a->heads + h) * 2 * a->n * a->d * p->esize;
}

static inline void *attn_dv_dest(const wavepe_attention_plan *p, int64_t b, int64_t h) {
    const wavepe_attention_args *a = &p->a;
    if (p->dkv_partial == NULL) return (char *)a->dv + (b * a->kv_heads + h) * a->n * a->d * p->esize;
    return (char *)p->dkv_partial + ((b * a->heads + h) * 2 + 1) * a->n * a->d * p->esize;
}

/* Table row index of distance r within the plan's table, or -1 for a zero row. */
static inline int64_t attn_table_index(const wavepe_attention_args *a, int64_t r) {
    int64_t i = r - a->r_lo;
    if (i < 0 || i >= a->table_rows) {
        if (!a->clamp) return -1;
        i = i < 0 ? 0 : a->table_rows - 1;
    }
    return i;
}

/* The CPU attention's matrix engines of each ISA, from isa_table.h's columns bf16_engine and half_blocks
 * (attention_engine.h).  Per instantiation (type tname, ISA name) as enum constants,
 * ATTN_ENGINE_OF_<tname>_<name> and ATTN_BLOCKS_OF_<tname>_<name>, which each instantiation checks the
 * engines it compiled against (attention_engine.h); per ISA at run time (the plan: attn_dpbf16, plan_tiles). */
enum { ATTN_ENGINE_FMA = 1, ATTN_ENGINE_PAIRS, ATTN_BLOCKS_NONE, ATTN_BLOCKS_TILES };
#define ATTN_ENGINES_OF_(ID, name, arch, l32, l64, bf16, blocks, ...)                                    \
    ATTN_ENGINE_OF_bf16_##name = ATTN_ENGINE_##bf16, ATTN_ENGINE_OF_f16_##name = ATTN_ENGINE_FMA,           \
    ATTN_ENGINE_OF_f32_##name = ATTN_ENGINE_FMA, ATTN_ENGINE_OF_f64_##name = ATTN_ENGINE_FMA,               \
    ATTN_BLOCKS_OF_bf16_##name = ATTN_BLOCKS_##blocks, ATTN_BLOCKS_OF_f16_##name = ATTN_BLOCKS_##blocks,    \
    ATTN_BLOCKS_OF_f32_##name = ATTN_BLOCKS_NONE, ATTN_BLOCKS_OF_f64_##name = ATTN_BLOCKS_NONE,
enum { WAVEPE_ISA_TABLE(ATTN_ENGINES_OF_, _) };
#undef ATTN_ENGINES_OF_
#define ATTN_BF16_ENGINE_(ID, name, arch, l32, l64, bf16, ...) [WAVEPE_ISA_##ID] = ATTN_ENGINE_##bf16,
#define ATTN_HALF_BLOCKS_(ID, name, arch, l32, l64, bf16, blocks, ...) [WAVEPE_ISA_##ID] = ATTN_BLOCKS_##blocks,
static const unsigned char attn_bf16_engine[WAVEPE_ISA_COUNT] = {WAVEPE_ISA_TABLE(ATTN_BF16_ENGINE_, _)};
static const unsigned char attn_half_blocks[WAVEPE_ISA_COUNT] = {WAVEPE_ISA_TABLE(ATTN_HALF_BLOCKS_, _)};
#undef ATTN_BF16_ENGINE_
#undef ATTN_HALF_BLOCKS_

/* Whether the plan's tiled kernels compute q . k and q . T from bf16 pairs (the pairs engine,
 * attention_engine_pairs.h: bfloat16 where the ISA's row says PAIRS -- avx512bf16, and amx). */
static inline int attn_dpbf16(const wavepe_attention_plan *p) {
    return attn_bf16_engine[p->isa] == ATTN_ENGINE_PAIRS && p->a.dtype == WAVEPE_BF16;
}

/* Whether the ISA's row has a block engine on tiles for the half types (amx). */
static inline int attn_half_tiles(wavepe_isa isa) { return attn_half_blocks[isa] == ATTN_BLOCKS_TILES; }

/* Vector lanes of an ISA (isa_table.h). */
static inline int64_t attn_isa_lanes(wavepe_isa isa, int f64) {
    return f64 ? wavepe_isa_lanes_f64(isa) : wavepe_isa_lanes_f32(isa);
}
/* The forward query block of an ISA (attention_simd.h's ATTN_FBM, the same formula). */
static inline int64_t attn_fwd_block_rows(wavepe_isa isa, int f64) {
    return f64 ? ATTN_FBM_F64 * attn_isa_lanes(isa, 1) / 4 : ATTN_FBM_F32 * attn_isa_lanes(isa, 0) / 8;
}

/* Vector phases (attention_<isa>.c, one per vector ISA of isa_table.h), and the widening of
 * half-type table rows (pack_table). */
#define ATTN_DECLARE_PHASES_(ID, name, ...)                                                      \
    int attn_fwd_tiled_f32_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);        \
    int attn_fwd_decode_f32_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);       \
    int attn_bwd_f32_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);              \
    int attn_fwd_tiled_f64_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);        \
    int attn_fwd_decode_f64_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);       \
    int attn_bwd_f64_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);              \
    int attn_fwd_tiled_bf16_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);       \
    int attn_fwd_decode_bf16_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);      \
    int attn_bwd_bf16_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);             \
    int attn_fwd_tiled_f16_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);        \
    int attn_fwd_decode_f16_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);       \
    int attn_bwd_f16_##name(wavepe_attention_plan *p, int64_t begin, int64_t end);             \
    void attn_widen_bf16_##name(const uint16_t *src, float *dst, int64_t n);                    \
    void attn_widen_f16_##name(const uint16_t *src, float *dst, int64_t n);
WAVEPE_ISA_TABLE(ATTN_DECLARE_PHASES_, _)
#undef ATTN_DECLARE_PHASES_

/* n bf16 (dtype WAVEPE_BF16) or float16 (WAVEPE_F16) elements widened to float32 by a vector ISA's
 * kernels (attention.c; NULL for the scalar ISA and other dtypes): how pack_table widens a half-type
 * table. */
typedef void (*attn_widen_fn)(const uint16_t *src, float *dst, int64_t n);
attn_widen_fn attn_table_widen(wavepe_isa isa, int dtype);

#endif
