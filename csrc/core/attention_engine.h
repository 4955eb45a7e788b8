/* attention_engine.h: the matrix engine interfaces of the CPU attention, declared once -- the vector
 * engine's products the algorithm (attention_simd.h) leaves to it and the packing of their operands, and
 * the block engine's operations (below).  Part of attention_simd.h's template (its types: work, group,
 * kblock, score_rows), included once per instantiation after those types; the engines that implement them
 * for this instantiation (ATTN_ENGINE_FILE below, ATTN_BLOCKS_FILE in attention_simd.h: by the type and the
 * vocabulary's flags, checked against the ISA table's row) are included where their building blocks are
 * defined (the micro-kernels, row_pv, rows_times_panels; group_softmax, pack_group).
 *
 * Engines:
 *   attention_engine_fma.h    vector fused multiply-adds on float32 / float64 operands (attention_mk.h):
 *                             every ISA, every type;
 *   attention_engine_pairs.h  paired bf16 dot products (vdpbf16ps): bfloat16 where the vocabulary has
 *                             them (WP_HAS_DPBF16; isa_table.h's bf16_engine PAIRS: avx512bf16, amx).
 * Beside them, the block operations below: the amx ISA's whole-block products on tiles.
 *
 * The operations.  Shapes: a group is ATTN_MR (6) query rows, a strip NR (2 vectors) keys; out rows have
 * stride ldo and NR columns written; every engine computes the same sums, each with its own rounding
 * (the engine file states its bound).
 *
 *   eng_scratch_sizes     the engine's pieces of a thread's scratch, in elements of T (work_alloc);
 *   eng_pack_group        group gi's query rows rp as the A operand of its scores and bias windows
 *                         (beside g->qp, the scaled float32 packing every engine's algorithm reads);
 *   eng_pack_dout_group   group gi's dO rows as the A operand of dP = dO . V^T (backward);
 *   eng_pack_fwd_block    a forward key block: keys as the B operand of S, values of O += P V;
 *   eng_pack_bwd_block    a backward key block: keys as the B operand of S, values of dP;
 *   eng_score_strip       out[t][j] = init[t][j] (0 where init is NULL) + scale q_t . k_j for strip st;
 *   eng_window_strip      out[t][i] = scale q_t . T_p (p = st NR + i) of the packed table's strip st over
 *                         its columns [clo, chi) (the table is zero outside them);
 *   eng_dp_strip          out[t][j] = dO_t . v_j of group gi for strip st;
 *   eng_group_pv          o_t += sum_{jl[t] <= j < jv[t]} P[t][j] v_j for a group's rows, P = w->s (rows
 *                         of ATTN_SLD); a key a row does not see never meets that row's product (its
 *                         value may be NaN or inf).
 */

typedef struct {
    int64_t kp, vp, dop;                 /* float32 operands: key strips, value panels / strips, dO groups */
    int64_t qb, kpb, dob, vpb, vpp, pp;  /* bf16 pairs (uint32_t, counted as T of the same size) */
} FN(eng_scratch);

static inline FN(eng_scratch) FN(eng_scratch_sizes)(int64_t d, int64_t dpad, int64_t rpad, int bwd, int narrow);
static inline void FN(eng_pack_group)(FN(work) * w, FN(group) * g, int64_t gi, const S *const *rp, int nrows,
                                      int64_t d);
static inline void FN(eng_pack_dout_group)(FN(work) * w, int64_t gi, const S *const *rp, int nrows, int64_t d);
static inline void FN(eng_pack_fwd_block)(FN(work) * w, const FN(kblock) * kb);
static inline void FN(eng_pack_bwd_block)(FN(work) * w, const FN(kblock) * kb);
static inline void FN(eng_score_strip)(const FN(work) * w, const FN(group) * g, int64_t st, const T *const *init,
                                       T *out, int64_t ldo);
static inline void FN(eng_window_strip)(const wavepe_attention_plan *p, const FN(group) * g, int64_t st,
                                        int64_t clo, int64_t chi, T *out, int64_t ldo);
static inline void FN(eng_dp_strip)(const FN(work) * w, int64_t gi, int64_t st, T *out, int64_t ldo);
static inline void FN(eng_group_pv)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb,
                                    const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR], T *o, int64_t ldo);

/* The block operations: an engine that multiplies whole blocks (the amx tiles: attention_blocks_tiles.h)
 * runs a key block's products at once where it can; attention_blocks_none.h is every other instantiation's
 * (all constants: the branches compile away).  ATTN_BLOCKS_FILE (attention_simd.h) picks one.
 *
 *   blk_p16, blk_weights16,    the softmax's P rounded to 16 bits for the block products (group_softmax):
 *   blk_p_store(2), blk_p_room   whether, the weights 2^arg, their store (one or two vectors), and the
 *                              log2 of the largest weight its one pass lets through;
 *   blk_work_init / _alloc / _free   the engine's part of a thread's scratch (work_alloc, work_free);
 *   blk_fwd_begin              a forward call's start (units: the thread's range; more: units it may take);
 *   blk_defer_groups           whether a query block's vector groups wait (pack_groups_late) -- 1 sets it;
 *   blk_pack_rows              the query block's rows as the engine's operand (pack_query_groups);
 *   blk_rows_on_tiles          whether the block's rows are on the engine (its scores and dP are);
 *   blk_fwd_block              a forward key block run whole (1), or not (0: the groups run it);
 *   blk_bwd_*                  the backward's: the head's transposed rows (head), a key block's operands
 *                              (pack_block: 1 where its S and dP are the engine's; key_block: 1 where dQ +=
 *                              dS K is too; key_block_end: its dK, dV added), the dO rows (dout_rows), S and
 *                              dP of a block (products: 1 where computed; group_rows: a group's rows of
 *                              them and its bias windows), whether dQ (dq_tiled), the dV / dK sums
 *                              (sums_on_tiles) and the table's products (table_on_tiles) are the engine's,
 *                              and those sums (sums: returns the keys left to the vector kernels). */
static inline int FN(blk_p16)(void);
static inline VT FN(blk_weights16)(VT arg);
static inline void FN(blk_p_store)(uint16_t *p, VT e);
static inline void FN(blk_p_store2)(uint16_t *p, VT lo, VT hi);
static inline T FN(blk_p_room)(void);
static inline void FN(blk_work_init)(FN(work) * w);
static inline int FN(blk_work_alloc)(FN(work) * w, const wavepe_attention_plan *p, int64_t rows, int64_t bwd,
                                     int narrow);
static inline void FN(blk_work_free)(FN(work) * w);
static inline void FN(blk_fwd_begin)(FN(work) * w, int64_t units, int64_t more);
static inline int FN(blk_defer_groups)(FN(work) * w, const S *qbase, int late);
static inline void FN(blk_pack_rows)(FN(work) * w, const S *qbase, int64_t qs, int64_t rows);
static inline int FN(blk_rows_on_tiles)(const FN(work) * w);
static inline int FN(blk_fwd_block)(FN(work) * w, FN(group) * groups, int64_t ngroups, const FN(kblock) * kb,
                                    int64_t b, int64_t hk, int wide);
static inline int FN(blk_bwd_sums_on_tiles)(const FN(work) * w);
static inline int FN(blk_bwd_table_on_tiles)(const FN(work) * w, const T *dt_slot);
static inline void FN(blk_bwd_head)(FN(work) * w, int64_t b, int64_t h);
static inline int FN(blk_bwd_pack_block)(FN(work) * w, const FN(kblock) * kb);
static inline int FN(blk_bwd_key_block)(FN(work) * w, const FN(kblock) * kb, int scores_tiled);
static inline void FN(blk_bwd_dout_rows)(FN(work) * w, const S *doblk, int64_t dos, int64_t rows);
static inline void FN(blk_bwd_key_block_end)(FN(work) * w, T *dk, T *dv, int64_t nk);
static inline int FN(blk_bwd_products)(FN(work) * w, int64_t m0, int64_t rows, const int64_t *jl_all,
                                       const int64_t *jv_all, int64_t *pos);
static inline void FN(blk_bwd_group_rows)(FN(work) * w, const FN(group) * g, int64_t gi, const FN(kblock) * kb,
                                          int64_t rows, const int64_t *pos, const int64_t *jv_all,
                                          const int64_t *jv, int64_t jmax, FN(score_rows) * sr,
                                          const T **dpr);
static inline int FN(blk_bwd_dq_tiled)(const FN(work) * w, int tiled);
static inline int64_t FN(blk_bwd_sums)(FN(work) * w, int64_t m0, int64_t rows, int64_t jvb, int64_t jbround,
                                       const FN(kblock) * kb, const int64_t *jv_all, T *dt_slot, int tiled,
                                       int table_tiled);

#if defined(WP_TYPE_BF16) && defined(WP_HAS_DPBF16)
#define ATTN_ENGINE_FILE "attention_engine_pairs.h"
#define ATTN_ENGINE_KIND ATTN_ENGINE_PAIRS
#else
#define ATTN_ENGINE_FILE "attention_engine_fma.h"
#define ATTN_ENGINE_KIND ATTN_ENGINE_FMA
#endif
/* The engines compiled here are those of this ISA's row of isa_table.h (bf16_engine, half_blocks), for
 * this type: the plan (attention.c) routes by the row, the kernels are built by the vocabulary's flags. */
_Static_assert((int)WP_CAT(WP_CAT(ATTN_ENGINE_OF_, WP_TNAME), WP_CAT(_, WP_SIMD_NAME)) == (int)ATTN_ENGINE_KIND,
               "the vector engine compiled here is not the one isa_table.h's row names");
_Static_assert((int)WP_CAT(WP_CAT(ATTN_BLOCKS_OF_, WP_TNAME), WP_CAT(_, WP_SIMD_NAME)) == (int)ATTN_BLOCKS_KIND,
               "the block engine compiled here is not the one isa_table.h's row names");
