/* attention_engine.h: the matrix engine interface of the CPU attention's vector kernels -- the block
 * products the algorithm (attention_simd.h) leaves to an engine, and the packing of their operands,
 * declared once.  Part of attention_simd.h's template (its types: work, group, kblock), included once per
 * instantiation after those types; the engine that implements the interface for this instantiation
 * (ATTN_ENGINE_FILE, chosen below by the ISA and the type) is included where its building blocks are
 * defined (the micro-kernels, row_pv, rows_times_panels).
 *
 * Engines:
 *   attention_engine_fma.h    vector fused multiply-adds on float32 / float64 operands (attention_mk.h):
 *                             every ISA, every type;
 *   attention_engine_pairs.h  paired bf16 dot products (vdpbf16ps): bfloat16 where the vocabulary has
 *                             them (WP_HAS_DPBF16: the avx512bf16 and amx ISAs).
 * (The amx ISA's whole-block products on tiles, ATTN_TILES in attention_simd.h, sit beside these.)
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

#if defined(WP_TYPE_BF16) && defined(WP_HAS_DPBF16)
#define ATTN_ENGINE_FILE "attention_engine_pairs.h"
#else
#define ATTN_ENGINE_FILE "attention_engine_fma.h"
#endif
