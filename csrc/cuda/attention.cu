// attention.cu: fused attention forward on the GPU, and its split-KV
// (decoding) variant; argument checks shared with attention_bwd.cu.
//
// FlashAttention-2 structure: a CTA owns BM query rows of one (batch, head)
// (warp w: rows 16w .. 16w+15) and walks the key blocks of BN keys:
//   1. stage K, V, the key-padding flags and, when the tile's window touches
//      the table, the BM + BN - 1 table rows of its window;
//   2. S = Q K^T (tensor cores for bf16/fp16), plus the bias Q T[r]^T read
//      as a skew of G = Q T_win^T (skipped per warp outside the table);
//   3. scale, ALiBi, the soft-cap, masks (each row's keys: its document, causal
//      frontier and window, padding, keys >= N) in the log2 domain;
//   4. online softmax in fp32: running max and sum per row, rescale O;
//   5. O += P V.
// Key blocks outside the keys of every row of the CTA (other documents of a
// packed row, past the causal frontier of its last row, before the sliding
// window of its first row) are never visited;
// warps none of whose rows sees a key block skip it.  The end
// writes O / sum and lse = max + log(sum) (natural log, -inf for a row with
// no key).  Heavier (later) query blocks are scheduled first.
//
// Split-KV: with few CTAs (decoding, M = 1) the key blocks that some query can
// see (visible_keys: causality and the window) are divided into num_splits
// ranges; each CTA writes its partial (O normalised, lse) to a workspace, and
// a combine kernel merges the splits in order, so the result does not depend
// on scheduling.
#include <type_traits>

#include "arch_tuning.cuh"
#include "attention_tile.cuh"

namespace wavepe_cuda {
namespace {

template <class T, int BM, int BN>
struct FwdLayout {
    SmemPlan plan;
    int q, k, v, k2, v2, t, t2, g, mask, pscr, rows;
    __host__ __device__ FwdLayout(int64_t d_pad, bool table, bool double_kv, bool double_t) {
        const size_t row = sizeof(T) * size_t(tile_ld<T>(d_pad));
        q = plan.add(BM * row);
        k = plan.add(BN * row);
        v = plan.add(BN * row);
        k2 = plan.add(double_kv ? BN * row : 0);
        v2 = plan.add(double_kv ? BN * row : 0);
        t = plan.add(table ? (BM + BN) * row : 0);
        t2 = plan.add(table && double_t ? (BM + BN) * row : 0);
        g = plan.add(table ? sizeof(acc_t<T>) * BM * size_t(g_ld<acc_t<T>>(BN)) : 0);
        mask = plan.add(BN);
        pscr = plan.add(sizeof(acc_t<T>) * (BM / 16) * rb_scratch_elems<T>(BN));
        rows = plan.add(2 * BM * sizeof(int64_t));  // each query row's keys [lo, hi)
    }
};

// The online softmax of one key block for a warp's 16 rows (lanes' rows g, g + 8: ri = 0, 1): s holds
// the block's scores in the log2 domain, masked ones -inf; they become P = exp2(s - max) against the
// rows' running max, and O and the running sum are rescaled to it.  In fp32 (fp64 for fp64).  SCALED:
// s holds raw q . k of a block every row sees unmasked, the log2-domain scale folded into the exponent
// (P = exp2(s scale_log2 - max), one FFMA; scale_log2 > 0 keeps the max).
template <class A, int NT, int DT, bool SCALED = false>
WAVEPE_DEVICE void online_softmax(A (&s)[NT][4], A (&o)[DT][4], A (&row_max)[2], A (&row_sum)[2],
                                  A scale_log2 = A(1)) {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        A mx = neg_inf<A>();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = max_(mx, max_(s[nt][2 * ri], s[nt][2 * ri + 1]));
        mx = quad_max(mx);
        const A new_max = max_(row_max[ri], SCALED ? mx * scale_log2 : mx);
        const A ref = new_max == neg_inf<A>() ? A(0) : new_max;  // no key yet: keep everything 0
        const A alpha = exp2_(row_max[ri] - ref);
        row_max[ri] = new_max;
        row_sum[ri] *= alpha;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            o[dt][2 * ri] *= alpha;
            o[dt][2 * ri + 1] *= alpha;
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                A &x = s[nt][2 * ri + e];
                x = exp2_(SCALED ? fma_(x, scale_log2, -ref) : x - ref);
                row_sum[ri] += x;
            }
    }
}

// The end of a forward CTA for a warp's 16 tile rows wm0 ..: out = O / sum and lse (natural log),
// or, with split-KV, the split's partial (O normalised, lse, seen flag) into the workspace.  Tile row
// r is query r of head h or, PACKED, the one query (M = 1) of head h + r.
template <class T, int DT, bool PACKED>
WAVEPE_DEVICE void write_rows(const AttnParams &p, const acc_t<T> (&o)[DT][4], const acc_t<T> (&row_max)[2],
                              const acc_t<T> (&row_sum)[2], const bool (&seen)[2], int64_t b, int64_t h,
                              int64_t split, int64_t wm0, int dt_active) {
    using A = acc_t<T>;
    const int t4 = threadIdx.x & 3;
    const int64_t bh_count = p.a.batch * p.a.heads;
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        const A sum = quad_sum(row_sum[ri]);
        const bool row_seen = quad_any(seen[ri]);
        const int64_t tr = wm0 + frag_row(2 * ri);
        if (tr >= p.m_rows) continue;
        const int64_t head = PACKED ? h + tr : h, m = PACKED ? 0 : tr, bh = b * p.a.heads + head;
        // sum > 0: the softmax; sum == 0: no key (0, lse -inf) or, in one pass, every
        // visible score -inf (NaN, 0/0, as the oracle); sum NaN: a NaN score (NaN).
        // A split's partial keeps -inf for "all -inf" (another split may see a finite
        // score) and flags the row as seen for the combine.
        // With mark_neg_inf, "every visible score -inf" is out 0, lse +inf instead (a code a finite
        // row_max never gives: the ring merges such rows without reading them on the host).
        const bool neg_inf_row = sum == A(0) && row_seen && p.num_splits == 1;
        const bool marked = neg_inf_row && p.a.mark_neg_inf;
        const bool nan_row = !(sum >= A(0)) || (neg_inf_row && !p.a.mark_neg_inf);
        const A nan = A(NAN);
        const A inv = sum > A(0) ? A(1) / sum : nan_row ? nan : A(0);
        const A lse = sum > A(0) ? (row_max[ri] + log2_(sum)) * A(kLn2)
                      : nan_row ? nan : marked ? -neg_inf<A>() : neg_inf<A>();
        if (p.num_splits == 1) {
            T *orow = static_cast<T *>(p.a.out) + b * p.a.out_strides[0] + head * p.a.out_strides[1] + m * p.a.out_strides[2];
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = dt * 8 + 2 * t4 + e;
                    if (dt < dt_active && col < p.a.d) orow[col] = from_acc<T>(o[dt][2 * ri + e] * inv);
                }
            if (t4 == 0) static_cast<A *>(p.a.lse)[bh * p.a.m + m] = lse;
        } else {
            const int64_t row = (split * bh_count + bh) * p.a.m + m;
            A *wo = static_cast<A *>(p.work_o) + row * p.a.d;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = dt * 8 + 2 * t4 + e;
                    if (dt < dt_active && col < p.a.d) wo[col] = o[dt][2 * ri + e] * inv;
                }
            if (t4 == 0) {
                static_cast<A *>(p.work_lse)[row] = lse;
                static_cast<uint8_t *>(p.work_seen)[row] = row_seen ? 1 : 0;
            }
        }
    }
}

// [begin, end): the key blocks of bn keys that split `split` of a forward CTA visits -- of its
// blocks (p.kb_first, p.blocks_per_split), those holding keys some row of the CTA sees, [rlo[0],
// rhi[bm - 1]) (load_row_keys, after its barrier).  Shared by both forward kernels.
WAVEPE_DEVICE void split_key_blocks(const AttnParams &p, const int64_t *rlo, const int64_t *rhi, int bm, int bn,
                                    int64_t split, int64_t &begin, int64_t &end) {
    const int64_t cta_lo = rlo[0], cta_hi = rhi[bm - 1];
    const int64_t stop = cta_hi > cta_lo ? ceil_div(cta_hi, bn) : 0;
    begin = p.kb_first + split * p.blocks_per_split;
    end = begin + p.blocks_per_split < stop ? begin + p.blocks_per_split : stop;
    if (begin < cta_lo / bn) begin = cta_lo / bn;
}

// The tensor-core forward's tiles (below), which the general kernel's band split partial divides its blocks by
template <class T, int D, int MT>
struct TcFwdTiles;
template <class T, int D>
using TcFwdLayout = TcFwdTiles<T, D, 1>;

// The general forward's CTA (attn_fwd_kernel): BM query rows, a warp each 16.  BAND: the band split's
// second partial on a device whose shared memory holds the tensor-core forward's CTA at head_dim 256 without the
// table's window only (band_split_on_general): every key block of the CTA's but the interior ones beyond the band of
// the tensor-core CTA's 64 rows, which the first partial took there (band_split_blocks); one CTA a unit, its
// partial in split slot 1.
template <class T, int DMAX, int BM, int BN, bool BAND>
WAVEPE_DEVICE void attn_fwd_cta(const AttnParams &p) {
    using A = acc_t<T>;
    constexpr int NT = BN / 8, DT = DMAX / 8;
    WAVEPE_SHARED_BASE(smem);
    const bool has_table = p.pos_enc == WAVEPE_CUDA_PE_TABLE;
    // K / V (and the window) double-buffered with cp.async where the launcher found room (BAND: never -- the double
    // buffers with the window, 125,472 bytes at head_dim 256, fit no device where the tensor-core CTA with it,
    // 119,328, does not: band_split_on_general; launch_fwd_cfg keeps them off, so block j's buffer stays j - kb_begin's
    // parity's.  Still a run-time flag there: at compile time, ptxas built sm_120's loop heavier, 6,838 instructions
    // for 166 HMMA where the general kernel's has 5,220)
    const bool async_kv = p.async_kv, async_t = p.async_t;
    const FwdLayout<T, BM, BN> L(p.d_pad, has_table, async_kv, async_t);
    T *Qs = reinterpret_cast<T *>(smem + L.plan.off[L.q]);
    T *const K0 = reinterpret_cast<T *>(smem + L.plan.off[L.k]), *const K1 = reinterpret_cast<T *>(smem + L.plan.off[L.k2]);
    T *const V0 = reinterpret_cast<T *>(smem + L.plan.off[L.v]), *const V1 = reinterpret_cast<T *>(smem + L.plan.off[L.v2]);
    T *const T0 = reinterpret_cast<T *>(smem + L.plan.off[L.t]), *const T1 = reinterpret_cast<T *>(smem + L.plan.off[L.t2]);
    A *Gs = reinterpret_cast<A *>(smem + L.plan.off[L.g]);
    uint8_t *kmask = smem + L.plan.off[L.mask];
    const int ld = tile_ld<T>(p.d_pad), gld = g_ld<A>(BN);
    const int warp = threadIdx.x / 32;
    const int ksteps = int(p.d_pad / 16), dt_active = int(ceil_div(p.a.d, 8));
    A *pscr = reinterpret_cast<A *>(smem + L.plan.off[L.pscr]) + warp * rb_scratch_elems<T>(BN);
    int64_t *const rlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const rhi = rlo + BM;

    int64_t bid = blockIdx.x;
    const int64_t mblocks = ceil_div(p.a.m, BM);
    const int64_t mb = mblocks - 1 - bid % mblocks;
    bid /= mblocks;
    const int64_t split = BAND ? 1 : bid % p.num_splits, bh = BAND ? bid : bid / p.num_splits;
    const int64_t b = bh / p.a.heads, h = bh % p.a.heads, hk = h / p.group;
    const int64_t m0 = mb * BM, wm0 = m0 + 16 * warp;
    const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
    const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
    const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
    const A scale_log2 = A(p.a.scale) * A(kLog2e), slope_log2 = head_slope<T>(p, h) * A(kLog2e);  // exp2 domain

    load_row_keys(rlo, rhi, BM, p, b, m0);
    __syncthreads();
    // keys some row of this CTA sees, [rlo[0], rhi[BM - 1]) (no row sees another: their tile rows
    // are zero, whatever they hold -- NaN/inf never reach P V), and this split's key blocks among
    // them.  (Read from shared memory where used: not held in registers across the loop.)
    int64_t kb_begin, kb_end;
    split_key_blocks(p, rlo, rhi, BM, BN, BAND ? 0 : split, kb_begin, kb_end);
    // BAND: the blocks the first partial took, [ib, bb) and [be, ie), are stepped over (next_block), in 32 bits
    // (tc_forward_shape's bound at head_dim 256: fewer than 2^31 blocks)
    int ib = 0, ie = 0, bb = 0, be = 0;
    if constexpr (BAND) {
        using Tc = TcFwdLayout<T, 256>;
        static_assert(DMAX == 256 && BN == Tc::BN && Tc::BM % BM == 0, "the tensor-core partial's blocks");
        int64_t i0, i1, b0, b1;
        band_split_blocks<Tc::BM, true>(p, b, m0, Tc::BN, BN, kb_end, i0, i1, b0, b1);
        ib = int(i0), ie = int(i1), bb = int(b0), be = int(b1);
    }
    auto next_block = [&](int64_t j) -> int64_t {  // the block after j taken (BAND: past the first partial's)
        if constexpr (BAND) {
            if (j == ib) j = bb;
            if (j == be) j = ie;
        }
        return j;
    };
    kb_begin = next_block(kb_begin);
    // q, only where a key block is visited (CTA-uniform: an empty split, or query rows that see no
    // key, only write their empty rows); visible to every warp after the loop's first barrier
    if (kb_begin < kb_end)
        load_tile(Qs, ld, BM, p.a.d, p.d_pad, p.vec_q, [&](int r) -> const T * {
            const int64_t m = m0 + r;
            return m < p.a.m ? qg + m * p.a.q_strides[2] : nullptr;
        });

    A o[DT][4];
    zero_frags(o);
    A row_max[2] = {neg_inf<A>(), neg_inf<A>()}, row_sum[2] = {A(0), A(0)};
    bool seen[2] = {false, false};
    const bool warp_rows = wm0 < p.a.m;

    auto k_row = [&](int64_t n0) {
        return [=, &p](int r) -> const T * {
            const int64_t n = n0 + r;
            return key_row_seen(p, b, n, rlo[0], rhi[BM - 1]) ? kg + n * p.a.k_strides[2] : nullptr;
        };
    };
    auto v_row = [&](int64_t n0) {
        return [=, &p](int r) -> const T * {
            const int64_t n = n0 + r;
            return key_row_seen(p, b, n, rlo[0], rhi[BM - 1]) ? vg + n * p.a.v_strides[2] : nullptr;
        };
    };
    // Does key block j's window touch the table (then its rows are staged)?
    auto block_bias = [&](int64_t j) {
        const int64_t base = p.a.q_offset + m0 - j * BN - p.a.r_lo;
        return has_table && table_rows_hit(p, base - (BN - 1), base + BM - 1);
    };
    auto window_row = [&](int64_t j) {
        const int64_t base = p.a.q_offset + m0 - j * BN - p.a.r_lo;
        return [=, &p](int w) -> const T * { return window_row_ptr<T>(p, base, BN, w); };
    };
    // Block kb_begin's K/V (and window) in flight before the loop; then each
    // iteration issues the next block's copies into the other buffers before
    // computing, one commit group per block.
    if (async_kv && kb_begin < kb_end) {
        load_tile_async(K0, ld, BN, p.a.d, p.d_pad, k_row(kb_begin * BN));
        load_tile_async(V0, ld, BN, p.a.d, p.d_pad, v_row(kb_begin * BN));
        if (async_t && block_bias(kb_begin)) load_tile_async(T0, ld, BM + BN, p.a.d, p.d_pad, window_row(kb_begin));
        cp_async_commit();
    }

    for (int64_t j = kb_begin; j < kb_end; j = next_block(j + 1)) {
        const int64_t n0 = j * BN, jn = next_block(j + 1);  // (jn: the next block taken)
        const int64_t base = p.a.q_offset + m0 - n0 - p.a.r_lo;
        const bool tile_bias = block_bias(j);
        const int cur = async_kv ? int((j - kb_begin) & 1) : 0;
        T *const Ks = cur ? K1 : K0, *const Vs = cur ? V1 : V0;
        T *const Ts = (async_t && cur) ? T1 : T0;
        __syncthreads();  // the previous tile is consumed (its buffers are free)
        if (async_kv) {
            if (jn < kb_end) {
                load_tile_async(cur ? K0 : K1, ld, BN, p.a.d, p.d_pad, k_row(jn * BN));
                load_tile_async(cur ? V0 : V1, ld, BN, p.a.d, p.d_pad, v_row(jn * BN));
                if (async_t && block_bias(jn))
                    load_tile_async(cur ? T0 : T1, ld, BM + BN, p.a.d, p.d_pad, window_row(jn));
            }
            cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning block j
        } else {
            load_tile(Ks, ld, BN, p.a.d, p.d_pad, p.vec_k, k_row(n0));
            load_tile(Vs, ld, BN, p.a.d, p.d_pad, p.vec_v, v_row(n0));
        }
        if (tile_bias && !async_t) load_tile(Ts, ld, BM + BN, p.a.d, p.d_pad, p.vec_t, window_row(j));
        load_key_mask(kmask, BN, p, b, n0);
        if (async_kv) cp_async_wait<1>();  // block j's copies have landed (this thread's)
        __syncthreads();                     // ... and every other thread's
        // (the warp's rows' ranges: rlo + 16 warp, rhi + 16 warp)
        if (!warp_rows || n0 >= rhi[16 * warp + 15] || n0 + BN <= rlo[16 * warp]) continue;  // warp-uniform

        A s[NT][4];
        zero_frags(s);
        warp_abt<T, NT>(s, Qs + 16 * warp * ld, ld, Ks, ld, ksteps);
        if (tile_bias && table_rows_hit(p, base + 16 * warp - (BN - 1), base + 16 * warp + 15)) {
            A *gw = Gs + warp * 16 * gld;
            warp_window_products<T, BN>(gw, gld, Qs + 16 * warp * ld, Ts + 16 * warp * ld, ld, ksteps);
            __syncwarp();
            add_skewed_bias<A, NT, BN>(s, gw, gld);
            __syncwarp();
        }
        scores_log2(s, p, wm0, n0, kmask, rlo + 16 * warp, rhi + 16 * warp, scale_log2, slope_log2, seen);

        online_softmax<A, NT, DT>(s, o, row_max, row_sum);
        // P V (the band's keys row by row where they hold inf/NaN)
        warp_rb_masked<T, NT, DT>(o, s, Vs, ld, 0, dt_active, pscr, p, n0, rlo + 16 * warp, rhi + 16 * warp, rlo[0],
                                  rhi[BM - 1]);
    }

    if (!warp_rows) return;  // after the last barrier
    write_rows<T, DT, false>(p, o, row_max, row_sum, seen, b, h, split, wm0, dt_active);
}

template <class T, int DMAX, int BM, int BN>
__global__ void __launch_bounds__(BM * 2) attn_fwd_kernel(AttnParams p) {
    attn_fwd_cta<T, DMAX, BM, BN, false>(p);
}

// The band split's second partial where the first runs on the tensor cores without the table's window (attn_fwd_cta's
// BAND): bf16 / fp16 at head_dim 256
template <class T>
__global__ void __launch_bounds__(FwdCfg<T, 256>::BM * 2) attn_fwd_band_kernel(AttnParams p) {
    attn_fwd_cta<T, 256, FwdCfg<T, 256>::BM, FwdCfg<T, 256>::BN, true>(p);
}

// ---- the tensor-core forward of the models' head dims ---------------------------------------
// bf16/fp16, head_dim 64, 128 or 256, 16-byte rows (every bias, soft-cap, window, padding, documents and
// split-KV alike: use_tc_forward): the FlashAttention-2 loop.  A CTA owns 64 query rows (warp w:
// 16w .. 16w+15) and walks key blocks of 64 keys (128 at head_dim 64, 32 at 256):
//   * each warp's Q fragments are loaded once, by ldmatrix, into registers (at head_dim 256 read from
//     the Q tile at each step: TcFwdLayout::QREG);
//   * K and V have one buffer each: V's copies are in flight while S = Q K^T is computed, the next
//     block's K's (and its table window's) while O += P V is -- two barriers per key block, one
//     cp.async group in flight;
//   * K's and V's fragments come by ldmatrix (.trans for V) from rows padded by 16 bytes, so that
//     the 8 rows each 8-lane phase reads start 4 banks apart: no bank conflict, on loads or on the
//     16-byte copies (a quarter-warp writes 128 contiguous bytes of one row);
//   * the CTA's key blocks are taken in separate loops.  The interior blocks -- every query row of
//     the CTA sees every key, no padding mask -- run loops with nothing else: copies without per-row
//     tests, no mask, P V on the tensor cores without the non-finite check (no row is masked); those
//     whose window meets the table (the band: the wavelet's support ends at a few thousand
//     distances) first, adding the table's bias; then the others, the scale folded into the
//     exponent's FFMA (with ALiBi, a loop of its own adding -slope |distance|; with a soft-cap,
//     loops of their own -- band and others -- applying cap tanh(x / cap) by tanh_exp2; ALiBi with a
//     soft-cap takes the masked loop).  The masked blocks (the causal diagonal, a window's or
//     document's edges, padding, the last partial block) run before them, through scores_log2 and
//     warp_rb_masked as in attn_fwd_kernel,
//     whose softmax, key ranges, zero rows, split-KV partials and ends (write_rows) this kernel
//     shares;
//   * a band block adds the table's bias q . T[r] on the tensor cores: G = Q_w T_win^T from the
//     warp's Q fragments and the window's rows by ldmatrix, read back skewed through the warp's
//     scratch (add_table_bias), only by the warps whose rows' window meets the table;
//   * decoding one query with GQA (PACKED), the group's heads are the CTA's rows.
// 64 keys a block (128 at head_dim 64, so that the per-block softmax and O rescale weigh as at 128; 32 at
// 256, TcFwdLayout).
// With a table, the window's BM + BN rows (the bias it gives reaches the scores by shuffles: add_table_bias).
// At head_dim 256, 32 keys a block: the same 128 HMMA a warp a block as at 128 (Q K^T 4 x 16, P V 2 x 32), the O
// accumulators (128 registers a lane) leaving no room for Q's fragments (64 more): they are read from the Q tile
// by ldmatrix at each step (QREG false), one load per 4 HMMA of Q K^T, as FlashAttention-2 does at 256.
// MT: the m-tiles of 16 query rows a warp takes -- 1, or 2 (the wide instance, attn_fwd_tc_wide_kernel: each K
// and V fragment ldmatrix'd once for both, half the shared-memory bytes per HMMA; head_dim 64 or 128, no table)
template <class T, int D, int MT>
struct TcFwdTiles {
    static_assert(D == 64 || D == 128 || D == 256, "the tensor-core forward's head dims");
    static_assert(MT == 1 || (MT == 2 && D <= 128), "32 rows a warp: head_dim 64 or 128");
    // (32 rows a warp: blocks of 32 keys at head_dim 128, S's 32 accumulators a lane beside O's 128 -- with 64,
    // ptxas spilled; 64 at head_dim 64, S's 64 beside O's 64)
    static constexpr int BM = 64 * MT, BN = MT > 1 ? (D <= 64 ? 64 : 32) : D <= 64 ? 128 : D <= 128 ? 64 : 32,
                         LD = D + int(16 / sizeof(T));
    // the warp's Q fragments in registers (32 rows a warp: read at each step -- at head_dim 128 O's 128 and S's 32
    // accumulators a lane leave no room for them)
    static constexpr bool QREG = D <= 128 && MT == 1;
    SmemPlan plan;
    int q, k, v, t, mask, rows;
    // Q's fragments in registers and no window staged: the Q tile is read once, into them, before V's first copy
    // -- it lies in V's tile (BN >= BM rows there), 17,408 bytes fewer at head_dim 128: 35,904 a CTA, two an SM
    // on the 100 KiB SMs of sm_86, sm_89 and sm_120 (wide_holds_sm).  With a window, the warps' rows of the Q
    // tile hold their window products (add_table_bias's PREV, cw): a tile of its own.
    bool q_in_v;
    __host__ __device__ explicit TcFwdTiles(bool table) : q_in_v(QREG && !table) {
        static_assert(!QREG || BN >= BM, "Q's tile in V's");
        q = plan.add(q_in_v ? 0 : sizeof(T) * BM * LD);  // (every region's index a constant: no run-time indexing)
        k = plan.add(sizeof(T) * BN * LD);
        v = plan.add(sizeof(T) * BN * LD);
        t = plan.add(table ? sizeof(T) * (BM + BN) * LD : 0);
        mask = plan.add(BN);
        rows = plan.add(2 * BM * sizeof(int64_t));  // each query row's keys [lo, hi)
    }
};
template <class T, int D>
using TcFwdWideLayout = TcFwdTiles<T, D, 2>;

// The warp's relative-table bias of a key block added to its scores s, half a block at a time, in registers
// (window_bias_add: shuffles within quads of lanes, no shared memory) (ROW_SHIFT 0: every row at the same position,
// the packed heads of one query).  PREV (the band loop's blocks, Q's fragments in registers): the window rows this
// block shares with the next are kept in the warp's scratch cw, and those it shares with the previous one read from
// there where `prev` (window_products's PREV).
// (TR: window_products's)
template <class T, int BN, int KS, int LD, int ROW_SHIFT, bool PREV = false, class QF, class TR>
WAVEPE_DEVICE void add_table_bias(float (&s)[BN / 8][4], const QF &qf, const TR &trow, float *cw = nullptr,
                                  bool prev = false) {
    constexpr int HC = BN / 2;
    float carry[2][4] = {};  // (G of the window rows both halves read: computed once)
    window_bias_add<T, BN, HC, 0, 0, KS, LD, ROW_SHIFT, 1, PREV>(s, qf, trow, carry, cw, prev);
    window_bias_add<T, BN, HC, HC, HC / 8, KS, LD, ROW_SHIFT, 2, PREV>(s, qf, trow, carry, cw);
}

// The tensor-core forward's CTA: 4 warps of MT m-tiles of 16 query rows (attn_fwd_tc_kernel: 1; the wide
// instance, attn_fwd_tc_wide_kernel: 2, never with a table or packed heads).  PACKED: decoding one query (M = 1),
// a GQA group's heads as the rows (p.pack_heads: pack_heads).
template <class T, int D, bool PACKED, int MT, bool BAND = false>
WAVEPE_DEVICE void attn_fwd_tc_cta(const AttnParams &p) {
    using A = acc_t<T>;
    using Lay = TcFwdTiles<T, D, MT>;
    constexpr int BM = Lay::BM, BN = Lay::BN, LD = Lay::LD, NT = BN / 8, DT = D / 8, KS = D / 16;
    constexpr int WR = 16 * MT;  // a warp's rows
    constexpr int kThreads = 4 * 32;  // (the CTA: attn_fwd_tc_kernel's, attn_fwd_tc_wide_kernel's launch bounds)
    static_assert(Traits<T>::kTensorCore && NT % 2 == 0, "the tensor-core forward takes bf16/fp16, 16-key pairs");
    static_assert(MT == 1 || !PACKED, "the packed heads' CTA: 4 warps of 16 rows");
    WAVEPE_SHARED_BASE(smem);
    const bool has_table = MT == 1 && p.pos_enc == WAVEPE_CUDA_PE_TABLE;  // (the wide instance: never)
    // the band split's first partial takes only blocks beyond the band: no window staged, none reserved
    // (band_split: at head_dim 256 both partials run this instance, at 64 and 128 the first the wide one -- or this
    // one where an SM holds fewer wide CTAs than 16-row ones: launch_fwd_tc, wide_holds_sm; never with packed heads,
    // whose loops stay as they were)
    const int part = MT == 1 && !PACKED ? p.band_part : band_part_of<D, MT, BAND>(p);
    const bool stage_table = has_table && part != 1;
    const Lay L(stage_table);
    T *const Ks = reinterpret_cast<T *>(smem + L.plan.off[L.k]);
    T *const Vs = reinterpret_cast<T *>(smem + L.plan.off[L.v]);
    T *const Qs = L.q_in_v ? Vs : reinterpret_cast<T *>(smem + L.plan.off[L.q]);
    T *const Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    uint8_t *const kmask = smem + L.plan.off[L.mask];
    int64_t *const rlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const rhi = rlo + BM;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;

    int64_t bid = blockIdx.x;
    const int64_t mblocks = ceil_div(p.a.m, BM);
    const int64_t mb = mblocks - 1 - bid % mblocks;  // heavier (later) query blocks first
    bid /= mblocks;
    // the CTA's unit: a (batch, head) or, packing a GQA group's heads as its rows, a (batch, kv head); the
    // band split's partials are two launches, each of every unit
    const int64_t split = part ? part - 1 : bid % p.num_splits, unit = part ? bid : bid / p.num_splits;
    const int64_t per_b = PACKED ? p.a.heads / p.group : p.a.heads;
    const int64_t b = unit / per_b, h = PACKED ? (unit % per_b) * p.group : unit % per_b, hk = h / p.group;
    const int64_t m0 = mb * BM, wm0 = m0 + WR * warp;
    const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
    const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
    const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
    const int64_t kstride = p.a.k_strides[2], vstride = p.a.v_strides[2];
    const A scale_log2 = A(p.a.scale) * A(kLog2e), slope_log2 = head_slope<T>(p, h) * A(kLog2e);

    load_row_keys(rlo, rhi, BM, p, b, m0);
    __syncthreads();
    int64_t kb_begin, kb_end;
    split_key_blocks(p, rlo, rhi, BM, BN, part ? 0 : split, kb_begin, kb_end);
    // The key blocks in the order taken: [kb_begin, ib) and [ie, kb_end), the blocks with masks,
    // padding or a soft-cap; then, of the interior [ib, ie) -- keys every row sees (from the last row's
    // first key to the first row's last, all < N), nothing to apply but the scale and the table's or
    // ALiBi's bias (CTA-uniform) --, the table's band [bb, be), then [ib, bb) and [be, ie).
    int64_t ib = kb_end, ie = kb_end, bb = kb_end, be = kb_end;
    // (a soft-cap: interior too, but for ALiBi's blocks, which take the masked loop with it)
    const bool capped = p.cap_log2 > 0.0;
    if (D <= 128 && part != 0 && kb_begin < kb_end) {
        // (the band split at 64 and 128: the 128-row group's blocks, in the 16-row instance's key blocks)
        band_split_blocks(p, b, m0, TcFwdTiles<T, D, 1>::BN, BN, kb_end, ib, ie, bb, be);
    } else if (!(capped && p.pos_enc == WAVEPE_CUDA_PE_ALIBI) && p.a.key_padding_mask == nullptr &&
               (m0 + BM <= p.a.m || PACKED || MT > 1) && kb_begin < kb_end) {
        // (packed: every row the one query's keys; 32 rows a warp: a partial last CTA too -- its rows past M hold
        // the last query's keys (load_row_keys), so [ib, ie) are keys every row sees; a 128-row CTA would otherwise
        // leave calls of fewer than 128 queries, or a last CTA of up to 127, to the masked loop)
        const int64_t hi = rhi[0] < p.a.n ? rhi[0] : p.a.n;
        ib = ceil_div(rlo[BM - 1], BN) > kb_begin ? ceil_div(rlo[BM - 1], BN) : kb_begin;
        ie = hi / BN < kb_end ? hi / BN : kb_end;
        if (ie <= ib) ib = ie = kb_end;
        bb = be = ie;
        if (has_table && ib < ie) table_band_key_blocks(p, m0, BM, BN, ib, ie, bb, be);
    }
    // Counts of blocks: at head_dim 256 in 32 bits, two registers fewer each (ptxas spilled 8 bytes on sm_90
    // with 64; use_tc_forward bounds M and N there), elsewhere in 64 (in 32, 0.06 more instructions per
    // HMMA in the main loop at 128)
    // The band split's partials: 1 takes the pure blocks only, 2 the others and the band.
    using Count = std::conditional_t<Lay::QREG, int64_t, int>;
    const Count n_head = part == 1 ? 0 : Count(ib - kb_begin), n_other = part == 1 ? 0 : n_head + Count(kb_end - ie),
                n_pre = Count(bb - ib), n_pure = part == 2 ? 0 : n_pre + Count(ie - be);
    // the band's blocks taken: [band_begin, be) (32 rows a warp: none -- no table; the first partial's [bb, be)
    // is the gap in its blocks)
    const int64_t band_begin = MT > 1 || part == 1 ? be : bb;
    auto other_block = [=](Count t) { return t < n_head ? kb_begin + t : ie + (t - n_head); };
    auto pure_block = [=](Count t) { return t < n_pre ? ib + t : be + (t - n_pre); };
    const int64_t first_pure = n_pure > 0 ? pure_block(0) : -1,
                  first_interior = band_begin < be ? band_begin : first_pure;

    // the warp's m-tile mt: rows wm0 + 16 mt .., their O, running max and sum, whether they saw a key
    A o[MT][DT][4], row_max[MT][2], row_sum[MT][2];
    bool seen[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        zero_frags(o[mt]);
        row_max[mt][0] = row_max[mt][1] = neg_inf<A>();
        row_sum[mt][0] = row_sum[mt][1] = A(0);
        seen[mt][0] = seen[mt][1] = false;
    }
    const bool warp_rows = wm0 < p.m_rows;

    if (n_other > 0 || first_interior >= 0) {  // CTA-uniform
        auto k_row = [&](int64_t n0) {
            return [=, &p](int r) -> const T * {
                const int64_t n = n0 + r;
                return key_row_seen(p, b, n, rlo[0], rhi[BM - 1]) ? kg + n * kstride : nullptr;
            };
        };
        auto v_row = [&](int64_t n0) {
            return [=, &p](int r) -> const T * {
                const int64_t n = n0 + r;
                return key_row_seen(p, b, n, rlo[0], rhi[BM - 1]) ? vg + n * vstride : nullptr;
            };
        };
        // does key block j's window meet the table (then its BM + BN rows are staged with its K)?
        auto block_bias = [&](int64_t j) {
            const int64_t base = p.a.q_offset + m0 - j * BN - p.a.r_lo;
            return stage_table && table_rows_hit(p, base - (BN - 1), base + BM - 1);
        };
        auto load_window = [&](int64_t j) {  // key block j's window (BM + BN table rows) into Ts
            load_window_async<T, BM + BN, D, LD, kThreads>(Ts, p, p.a.q_offset + m0 - j * BN - p.a.r_lo, BN);
        };
        // K (and the window) of block j, rows tested one by one (any block)
        auto load_k = [&](int64_t j) {
            load_tile_rows_async<T, BN, D, LD, kThreads>(Ks, k_row(j * BN));
            if (block_bias(j)) load_window(j);
            load_key_mask(kmask, BN, p, b, j * BN);
        };
        load_tile_rows_async<T, BM, D, LD, kThreads>(Qs, [&](int r) -> const T * {
            if (PACKED) return r < p.m_rows ? qg + r * p.a.q_strides[1] : nullptr;  // head h + r, query 0
            const int64_t m = m0 + r;
            return m < p.a.m ? qg + m * p.a.q_strides[2] : nullptr;
        });
        load_k(n_other > 0 ? other_block(0) : first_interior);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        // the warp's Q fragments: lane l addresses row l % 16, columns 8 (l / 16) .. of each 16-column step;
        // loaded once into registers, or (head_dim 256; 32 rows a warp) the lane's address in the Q tile, read
        // at each step (the warp's m-tile mt: 16 mt rows further)
        std::conditional_t<Lay::QREG, uint32_t[KS][4], const T *> qf;
        {
            const T *qrow = Qs + (WR * warp + (lane & 15)) * LD + 8 * (lane >> 4);
            if constexpr (Lay::QREG) {
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) ldmatrix_x4(qf[ks], qrow + 16 * ks);
                __syncwarp();  // (the warp's Q rows, read: from here its window scratch, cw)
                if (L.q_in_v) __syncthreads();  // (CTA-uniform) every warp's Q read before V's first copy over it
            } else {
                qf = qrow;
            }
        }
        const int lane_row = ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
        // the window rows of the warp's rows start 16 w rows in (packed heads: all at the query's position)
        constexpr int row_shift = PACKED ? 0 : 1;
        const T *const krow = Ks + lane_row, *const trow = Ts + WR * warp * row_shift * LD + lane_row;
        // Q's fragments in registers (16 rows a warp) at head_dim 128: the warp's rows of the Q tile hold the window
        // products the band loop's next block reuses (add_table_bias's PREV; 1 KiB of the warp's 4,352 bytes), and
        // whether the warp computed its window for the previous block of that loop.  (At 64 ptxas spilled 8 bytes on
        // sm_80 with it, 8 HMMA of a band block's 200 saved: not taken.)
        [[maybe_unused]] constexpr bool kPrev = Lay::QREG && MT == 1 && D == 128;
        [[maybe_unused]] float *const cw = reinterpret_cast<float *>(Qs + 16 * warp * LD);
        [[maybe_unused]] bool prev_window = false;
        // The band loop's window (W = BM + BN rows) is a ring: block j + 1's window rows BN .. W - 1 are block j's
        // rows 0 .. BM - 1, so only its first BN rows are copied, over block j's last BN, and window row w sits at
        // (w + ring) mod W, ring moving BM rows (mod W) a copy: half the window's copies at head_dim 128 (BM = BN = 64:
        // w ^ ring, ring 0 or 64), a third at 256 (32 of 96 rows; BM = 64, BN = 32); the BN new rows wrap past the
        // tile's end where they must (load_window_async's WRAP).  Every other window (the masked blocks', the band
        // loop's first) is copied whole, at ring 0.  (At 64 -- 128 new rows of 192 -- ptxas spilled 8 bytes on sm_80,
        // with the pieces copied by two calls or by one wrapping; without a spill on 2026-11-30, but a band block on
        // sm_90 then issued 1,422 instructions a warp for its 200 HMMA where it issues 1,375: the ring's row
        // arithmetic (BM != BN: a compare and a select a row) costs more than the 4 copies of 12 a thread it saves.
        // Not taken.)
        constexpr bool kRing = MT == 1 && D != 64;  // (16 rows a warp: the instances with a table)
        constexpr int W = BM + BN;
        [[maybe_unused]] int ring = 0;
        // does the window of the warp's rows for the block at n0 meet the table (warp-uniform)?
        auto warp_bias = [&](int64_t n0) {
            const int64_t base = p.a.q_offset + wm0 * row_shift - n0 - p.a.r_lo;
            return has_table && table_rows_hit(p, base - (BN - 1), base + 15);
        };

        // 32 rows a warp, no padding, ALiBi nor soft-cap (CTA-uniform): a masked block whose keys every row sees
        // from the first on (rlo[BM - 1] <= n0: the causal diagonal of a plain call) takes prefix_block
        [[maybe_unused]] const bool prefix_blocks =
            MT > 1 && !capped && p.pos_enc != WAVEPE_CUDA_PE_ALIBI && p.a.key_padding_mask == nullptr;
        // Such a block for the warp's m-tiles (V landed): S by qk_products_rows; a row's keys past its last (rhi,
        // N) -inf by selection -- what scores_log2 would mask; the online softmax with the scale folded; P V by
        // pv_products_rows, or, where V's rows of keys some row of the warp does not see hold inf / NaN (0 times
        // them would reach it), each m-tile through warp_rb_masked as the other masked blocks.
        auto prefix_block = [&](int64_t n0) {
            if constexpr (MT > 1) {  // (32 rows a warp: Q's fragments read at each step)
                A s[MT][NT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) zero_frags(s[mt]);
                qk_products_rows<T, NT, KS, LD, MT, qk_unroll<KS>()>(s, qf, krow);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int ri = 0; ri < 2; ++ri) {
                        const int lim = prefix_row_limit(p, rhi[WR * warp + 16 * mt + frag_row(2 * ri)], n0, BN);
                        seen[mt][ri] |= lim > 0;
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                            for (int e = 0; e < 2; ++e)
                                if (frag_col(nt, e) >= lim) s[mt][nt][2 * ri + e] = neg_inf<A>();
                    }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    online_softmax<A, NT, DT, true>(s[mt], o[mt], row_max[mt], row_sum[mt], scale_log2);
                if (prefix_band_nonfinite<T, BN>(Vs, LD, p, n0, rhi[WR * warp], rhi[BM - 1])) {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const int r0 = WR * warp + 16 * mt;
                        warp_rb_masked<T, NT, DT>(o[mt], s[mt], Vs, LD, 0, DT, nullptr, p, n0, rlo + r0, rhi + r0,
                                                  rlo[0], rhi[BM - 1]);
                    }
                } else {
                    uint32_t pa[MT][NT / 2][4];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) pack_p_frags<T, NT>(s[mt], pa[mt]);
                    pv_products_rows<T, NT / 2, DT, MT>(o, pa, Vs, LD);
                }
            }
        };

        // the blocks with masks, padding, ALiBi or a soft-cap (with the table's bias where their window
        // meets it)
        for (Count t = 0; t < n_other; ++t) {
            {
                const int64_t j = other_block(t), n0 = j * BN;
                const int64_t next = t + 1 < n_other ? other_block(t + 1) : first_interior;
                // (V's buffer is free: the last barrier passed)
                load_tile_rows_async<T, BN, D, LD, kThreads>(Vs, v_row(n0));
                cp_async_commit();
                if constexpr (MT > 1) {
                    // 32 rows a warp: each m-tile's S, softmax and P V in turn (one S live: registers), once V has
                    // landed -- these blocks are O(1) a query block, their copies not hidden
                    cp_async_wait<0>();
                    __syncthreads();  // V has landed
                    if (prefix_blocks && rlo[BM - 1] <= n0) {
                        // every row of the CTA sees the block's keys from its first on, up to its own last (the
                        // causal diagonal; a window's or a document's far edge): both m-tiles at once, as an
                        // interior block, each row's keys past its last -inf by selection
                        if (wm0 < p.m_rows && n0 < rhi[WR * warp + WR - 1])  // warp-uniform: some row sees a key
                            prefix_block(n0);
                    } else {
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            const int r0 = WR * warp + 16 * mt;  // warp-uniform: does some row of the m-tile see a key?
                            if (wm0 + 16 * mt < p.m_rows && n0 < rhi[r0 + 15] && n0 + BN > rlo[r0]) {
                                A s[NT][4];
                                zero_frags(s);
                                qk_products<T, NT, KS, LD>(s, qf + 16 * mt * LD, krow);
                                scores_log2<PACKED>(s, p, wm0 + 16 * mt, n0, kmask, rlo + r0, rhi + r0, scale_log2,
                                                    slope_log2, seen[mt]);
                                online_softmax<A, NT, DT>(s, o[mt], row_max[mt], row_sum[mt]);
                                warp_rb_masked<T, NT, DT>(o[mt], s, Vs, LD, 0, DT, nullptr, p, n0, rlo + r0, rhi + r0,
                                                          rlo[0], rhi[BM - 1]);
                            }
                        }
                    }
                    __syncthreads();  // K, V and the key mask are consumed
                    if (next >= 0) load_k(next);
                    cp_async_commit();
                    cp_async_wait<0>();
                    __syncthreads();  // the next K has landed
                    continue;
                }
                // warp-uniform: does some row of the warp see a key of the block?
                const bool active = warp_rows && n0 < rhi[16 * warp + 15] && n0 + BN > rlo[16 * warp];
                // S = the table's bias (before the products: fewer registers live beside the window's) + Q K^T
                A s[NT][4];
                zero_frags(s);
                if constexpr (MT == 1)
                    if (active && warp_bias(n0) && block_bias(j))
                        add_table_bias<T, BN, KS, LD, row_shift>(s, qf, trow);
                qk_products<T, NT, KS, LD>(s, qf, krow);  // (an inactive warp's are not used)
                if (active) {
                    scores_log2<PACKED>(s, p, wm0, n0, kmask, rlo + 16 * warp, rhi + 16 * warp, scale_log2, slope_log2,
                                        seen[0]);
                    online_softmax<A, NT, DT>(s, o[0], row_max[0], row_sum[0]);
                }
                cp_async_wait<0>();
                __syncthreads();  // V has landed; K, the window and the key mask are consumed
                if (next >= 0) load_k(next);
                cp_async_commit();
                if (active)
                    warp_rb_masked<T, NT, DT>(o[0], s, Vs, LD, 0, DT, nullptr, p, n0, rlo + 16 * warp, rhi + 16 * warp,
                                              rlo[0], rhi[BM - 1]);
                cp_async_wait<0>();
                __syncthreads();  // the next K has landed; V is consumed
            }
        }
        // the interior blocks: every warp active, every key seen; the band's first, with the table's bias
        // (the next block's window staged with its K), then the others (with ALiBi's bias, if any)
        if (band_begin < be || n_pure > 0)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) seen[mt][0] = seen[mt][1] = true;
        enum { kNoBias, kTableBias, kAlibiBias };
        // CAP: the soft-cap x -> cap tanh(x / cap) of the scaled scores (tanh_exp2), then the plain softmax
        auto interior = [&](auto bias_kind, auto cap_tag, int64_t j, int64_t next) {
            constexpr int kind = decltype(bias_kind)::value;
            constexpr bool CAP = decltype(cap_tag)::value;
            {
                const int64_t n0 = j * BN;
                load_rows_async<T, BN, D, LD, 4 * 32>(Vs, vg + n0 * vstride, vstride);
                cp_async_commit();
                A s[MT][NT][4];
                [[maybe_unused]] uint32_t pa[MT][NT / 2][4];  // (32 rows a warp: P packed for P V)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) zero_frags(s[mt]);
                if constexpr (MT == 1) {
                    if constexpr (kind == kTableBias) {  // (the band's blocks, in turn: j - 1 the previous one)
                        const bool window = warp_bias(n0);
                        if (window) {
                            if constexpr (kRing) {
                                const T *const tbase = Ts + lane_row;
                                const int wrow = WR * warp * row_shift, r = ring;
                                auto rows = [=](int x) {
                                    if constexpr (BM == BN) {
                                        return tbase + ((wrow + x) ^ r) * LD;
                                    } else {
                                        const int w = wrow + x + r;  // (< 2 W)
                                        return tbase + (w >= W ? w - W : w) * LD;
                                    }
                                };
                                add_table_bias<T, BN, KS, LD, row_shift, kPrev>(s[0], qf, rows, cw,
                                                                                     prev_window);
                            } else {
                                add_table_bias<T, BN, KS, LD, row_shift, kPrev>(s[0], qf, trow, cw,
                                                                                     prev_window);
                            }
                        }
                        prev_window = window;
                    }
                    qk_products<T, NT, KS, LD>(s[0], qf, krow);
                } else {
                    qk_products_rows<T, NT, KS, LD, MT, qk_unroll<KS>()>(s, qf, krow);  // each K fragment read once for the m-tiles
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if constexpr (kind == kAlibiBias) {
                        // scores_log2's x = s scale_log2 - slope_log2 |pos_q - pos_k|, without its masks: the
                        // distance of element (nt, i) is d0 + 8 (i / 2) - 8 nt - i % 2 (frag_row, frag_col)
                        const A d0 = A(p.a.q_offset + wm0 + 16 * mt - n0 + (lane >> 2) - 2 * (lane & 3));
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                            for (int i = 0; i < 4; ++i) {
                                const A dist = d0 + A(8 * (i / 2) - 8 * nt - i % 2);
                                s[mt][nt][i] = s[mt][nt][i] * scale_log2 - slope_log2 * (dist < A(0) ? -dist : dist);
                            }
                        online_softmax<A, NT, DT>(s[mt], o[mt], row_max[mt], row_sum[mt]);
                    } else if constexpr (CAP) {
                        const A cap = A(p.cap_log2), k = scale_log2 * A(p.icap_log2);
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                            for (int i = 0; i < 4; ++i) s[mt][nt][i] = cap * tanh_exp2(s[mt][nt][i] * k);
                        online_softmax<A, NT, DT>(s[mt], o[mt], row_max[mt], row_sum[mt]);
                    } else {
                        online_softmax<A, NT, DT, true>(s[mt], o[mt], row_max[mt], row_sum[mt], scale_log2);
                    }
                    if constexpr (MT > 1) pack_p_frags<T, NT>(s[mt], pa[mt]);  // (S's fp32 die here)
                }
                cp_async_wait<0>();
                __syncthreads();  // V has landed; K (and the window) are consumed
                if (next >= 0) {
                    load_rows_async<T, BN, D, LD, 4 * 32>(Ks, kg + next * BN * kstride, kstride);
                    if (kind == kTableBias && block_bias(next)) {
                        if (kRing && next == j + 1 && block_bias(j)) {  // (CTA-uniform)
                            // the next window's first BN rows, over this one's last
                            const int64_t base = p.a.q_offset + m0 - next * BN - p.a.r_lo;
                            if constexpr (BM == BN) {
                                ring ^= BN;
                                load_window_async<T, BN, D, LD, kThreads>(Ts + ring * LD, p, base, BN);
                            } else {
                                ring = ring + BM >= W ? ring + BM - W : ring + BM;
                                load_window_async<T, BN, D, LD, kThreads, W>(Ts, p, base, BN, ring);
                            }
                        } else {
                            ring = 0;
                            load_window(next);
                        }
                    }
                }
                cp_async_commit();
                if constexpr (MT == 1)
                    warp_rb<T, NT, DT>(o[0], s[0], Vs, LD, DT, nullptr);
                else
                    pv_products_rows<T, NT / 2, DT, MT>(o, pa, Vs, LD);  // each V fragment read once for the m-tiles
                cp_async_wait<0>();
                __syncthreads();  // the next K has landed; V is consumed
            }
        };
        using TableBias = std::integral_constant<int, kTableBias>;
        using AlibiBias = std::integral_constant<int, kAlibiBias>;
        using NoBias = std::integral_constant<int, kNoBias>;
        using Cap = std::true_type;
        using NoCap = std::false_type;
        auto next_band = [&](int64_t j) { return j + 1 < be ? j + 1 : first_pure; };
        auto next_pure = [&](Count t) { return t + 1 < n_pure ? pure_block(t + 1) : int64_t(-1); };
        if (capped) {  // (CTA-uniform; never with ALiBi)
            for (int64_t j = band_begin; j < be; ++j) interior(TableBias{}, Cap{}, j, next_band(j));
            for (Count t = 0; t < n_pure; ++t) interior(NoBias{}, Cap{}, pure_block(t), next_pure(t));
        } else {
            for (int64_t j = band_begin; j < be; ++j) interior(TableBias{}, NoCap{}, j, next_band(j));
            if (!PACKED && !BAND && p.pos_enc == WAVEPE_CUDA_PE_ALIBI) {  // (CTA-uniform; never packed, nor a table's)
                for (Count t = 0; t < n_pure; ++t) interior(AlibiBias{}, NoCap{}, pure_block(t), next_pure(t));
            } else {
                for (Count t = 0; t < n_pure; ++t) interior(NoBias{}, NoCap{}, pure_block(t), next_pure(t));
            }
        }
    }
    if (!warp_rows) return;  // after the last barrier
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        if (wm0 + 16 * mt < p.m_rows)
            write_rows<T, DT, PACKED>(p, o[mt], row_max[mt], row_sum[mt], seen[mt], b, h, split, wm0 + 16 * mt, DT);
}

template <class T, int D, bool PACKED>
__global__ void __launch_bounds__(128) attn_fwd_tc_kernel(AttnParams p) {
    attn_fwd_tc_cta<T, D, PACKED, 1>(p);
}

// 32 query rows a warp, a 128-row CTA (TcFwdWideLayout): table-free calls at head_dim 64 and 128 (wide_forward);
// BAND, the band split's first partial of a table's call (band_split: the interior blocks beyond its band)
template <class T, int D, bool BAND>
__global__ void __launch_bounds__(128) attn_fwd_tc_wide_kernel(AttnParams p) {
    attn_fwd_tc_cta<T, D, false, 2, BAND>(p);
}

// Merge the splits of each row: lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) out_s.  One warp per
// (batch, head, row).  Latency, not bytes, is its cost (decoding: 32 rows of 33-64 splits, a few hundred KB): so the
// lanes read the splits' lse at once (lane l: splits l, l + 32, ...) and reduce them by shuffles, and each lane sums
// its columns' partials with every split's 16-byte load issued before the sums that wait on it (unrolled) -- where
// it read each split's lse twice and its partials one column at a time, one load in flight a lane: measured on an
// H200 (2026-11-30), decoding one query against 32k keys (GQA 32/8, 33 splits), 44 us of the call's ~100.  The sums'
// order is fixed (a lane's splits in order, then the shuffle tree): deterministic.
template <class T>
__global__ void __launch_bounds__(128) attn_combine_kernel(AttnParams p) {
    using A = acc_t<T>;
    constexpr int V = 16 / int(sizeof(A));  // partials a 16-byte load
    const int64_t bh_count = p.a.batch * p.a.heads, rows = bh_count * p.a.m;
    const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // no barriers in this kernel (a warp's lanes all return here or none)
    const int64_t bh = row / p.a.m, m = row % p.a.m, b = bh / p.a.heads, h = bh % p.a.heads;
    const A *wl = static_cast<const A *>(p.work_lse);
    const A *wo = static_cast<const A *>(p.work_o);
    const uint8_t *ws = static_cast<const uint8_t *>(p.work_seen);
    const auto at = [&](int64_t s) { return (s * bh_count + bh) * p.a.m + m; };  // a split's row in the workspace
    A mx = neg_inf<A>();
    bool nan_split = false, seen = false;
    for (int64_t s = lane; s < p.num_splits; s += 32) {
        const A ls = wl[at(s)];
        mx = max_(mx, ls);
        nan_split |= ls != ls;
        seen |= ws[at(s)] != 0;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = max_(mx, __shfl_xor_sync(kFullMask, mx, off));
    nan_split = warp_any(nan_split);
    seen = warp_any(seen);
    A sum = 0;
    if (mx != neg_inf<A>())
        for (int64_t s = lane; s < p.num_splits; s += 32) sum += exp2_((wl[at(s)] - mx) * A(kLog2e));
    sum = warp_sum(sum);
    // a NaN split, or keys seen whose scores are all -inf: NaN (as one pass gives); no key: -inf
    // (with mark_neg_inf the latter is out 0, lse +inf, as in one pass)
    const bool marked = !nan_split && mx == neg_inf<A>() && seen && p.a.mark_neg_inf;
    const bool nan_row = nan_split || (mx == neg_inf<A>() && seen && !p.a.mark_neg_inf);
    const A lse = nan_row ? A(NAN) : marked ? -neg_inf<A>() : mx == neg_inf<A>() ? mx : mx + log2_(sum) * A(kLn2);
    const bool sums = !nan_row && !marked && lse != neg_inf<A>();
    T *orow = static_cast<T *>(p.a.out) + b * p.a.out_strides[0] + h * p.a.out_strides[1] + m * p.a.out_strides[2];
    if (p.a.d % V == 0 && (reinterpret_cast<uintptr_t>(wo) & 15) == 0) {  // (then every row's partials: 16 bytes)
        for (int64_t c0 = int64_t(V) * lane; c0 < p.a.d; c0 += 32 * V) {
            A acc[V];
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] = nan_row ? A(NAN) : A(0);
            const auto add_split = [&](int64_t s) {
                const int64_t r = at(s);
                const A ls = wl[r];
                alignas(16) A x[V];
                copy16(x, wo + r * p.a.d + c0);  // (read whatever the split left: used only if it saw a key)
                if (ls != neg_inf<A>()) {
                    const A w = exp2_((ls - lse) * A(kLog2e));
#pragma unroll
                    for (int i = 0; i < V; ++i) acc[i] += w * x[i];
                }
            };
            if (sums) {
                if constexpr (sizeof(A) == 4) {
#pragma unroll 8
                    for (int64_t s = 0; s < p.num_splits; ++s) add_split(s);
                } else {  // (fp64: 8 in flight spilled on sm_100)
#pragma unroll 4
                    for (int64_t s = 0; s < p.num_splits; ++s) add_split(s);
                }
            }
#pragma unroll
            for (int i = 0; i < V; ++i) orow[c0 + i] = from_acc<T>(acc[i]);
        }
    } else {
        for (int64_t col = lane; col < p.a.d; col += 32) {
            A acc = nan_row ? A(NAN) : A(0);
            if (sums) {
                for (int64_t s = 0; s < p.num_splits; ++s) {
                    const A ls = wl[at(s)];
                    if (ls != neg_inf<A>()) acc += exp2_((ls - lse) * A(kLog2e)) * wo[at(s) * p.a.d + col];
                }
            }
            orow[col] = from_acc<T>(acc);
        }
    }
    if (lane == 0) static_cast<A *>(p.a.lse)[bh * p.a.m + m] = lse;
}

template <class T>
bool vec_rows(const void *base, int64_t s0, int64_t s1, int64_t s2, int64_t d) {
    const int64_t e = int64_t(sizeof(T)), V = 16 / e;
    return d % V == 0 && aligned_to(base, 16) && (s0 * e) % 16 == 0 && (s1 * e) % 16 == 0 && (s2 * e) % 16 == 0;
}

}  // namespace

// Parameters common to the forward and the backward (attention_bwd.cu): the
// caller's arguments as they are, and what the launchers derive from them.
AttnParams attention_params(const wavepe_attention_args *a) {
    AttnParams p{};
    p.a = *a;
    p.group = a->kv_heads > 0 ? a->heads / a->kv_heads : 1;
    p.d_pad = ceil_div(a->d, 16) * 16;
    p.pos_enc = a->table != nullptr ? WAVEPE_CUDA_PE_TABLE : (a->slopes != nullptr ? WAVEPE_CUDA_PE_ALIBI : WAVEPE_CUDA_PE_NONE);
    dispatch_dtype(a->dtype, [&](auto tag) {
        using T = decltype(tag);
        p.vec_q = vec_rows<T>(a->q, p.a.q_strides[0], p.a.q_strides[1], p.a.q_strides[2], p.a.d);
        p.vec_k = vec_rows<T>(a->k, p.a.k_strides[0], p.a.k_strides[1], p.a.k_strides[2], p.a.d);
        p.vec_v = vec_rows<T>(a->v, p.a.v_strides[0], p.a.v_strides[1], p.a.v_strides[2], p.a.d);
        p.vec_o = vec_rows<T>(a->out, p.a.out_strides[0], p.a.out_strides[1], p.a.out_strides[2], p.a.d);
        p.vec_go = a->dout ? vec_rows<T>(a->dout, p.a.dout_strides[0], p.a.dout_strides[1], p.a.dout_strides[2], p.a.d) : 0;
        p.vec_t = a->table ? vec_rows<T>(a->table, p.a.d, 0, 0, p.a.d) : 0;  // dense rows of d
        return cudaSuccess;
    });
    p.num_splits = 1;
    p.m_rows = a->m;
    p.cap_log2 = a->softcap > 0.0 ? a->softcap * kLog2e : 0.0;
    p.icap_log2 = a->softcap > 0.0 ? 1.0 / p.cap_log2 : 0.0;
    return p;
}

// The band split.  At head_dim 256 a table's window takes the tensor-core kernels' CTAs past half an SM's shared
// memory: the forward's to 119,328 bytes, the dK/dV's and dQ's to 151,376 and 160,032 -- one CTA, 4 warps, an SM
// of an A100 or H100, where without it (68,640, 102,800, 102,432) two fit.  Beyond the table's band (distances
// past its rows: at L = 16384 with the wavelet's default grid, most of the causal blocks) no block reads a
// window, so such a call runs each kernel as two launches over every CTA of its grid: the interior blocks
// beyond the band without the window's shared memory (two CTAs an SM), then the masked and the band's blocks
// with it; the forward's partials are merged by the split-KV combine (attn_combine_kernel, in key order), the
// backward's second launches add the first ones' fp32 sums before their stores (band_part, split_dq, split_dkv).
// It pays where the blocks beyond the band (pure_blocks) are at least a third of the call's and kBandSplitKeys
// keys a query row on average: the partials' round trip costs 16 d bytes a row (two fp32 rows written, read
// back), at an H100's ~3.3 TB/s against its mma.sync rate (~335 TFLOP/s, FlashAttention-2's) the products of
// ~1,800 keys a row at 4 d FLOP a key if a second CTA an SM saves a quarter of the blocks' time (unmeasured) --
// kBandSplitKeys is that with room (at L = 16384, causal, the default wavelet grid: ~6,300 a row; at 8192,
// ~2,200: not taken); the backward's products are 2.5x the forward's, its round trip alike.
// At head_dim 64 and 128 the window costs no occupancy but keeps a call off the wide instances (32 rows a warp: no
// table), whose main loops move ~0.6-0.7x the shared-memory bytes per HMMA of the 16-row ones (230 against 326 in
// the forward at 128, 233 against 388 in the dQ): over the line an H100's SM serves at the tensor rate, the 16-row
// loops run at ~0.8x (forward) and ~0.66x (dQ) of it (docs/CUDA.md) -- a fifth to a third of the blocks' time, as
// above (the forward's fifth measured on an H200 at ~0.1, too little for its split at L = 16384: kBandSplitKeysWide).
// There the first partial runs the wide instance (the forward's and the dQ's; the dK/dV's where the wide
// dK/dV fits, bwd_dkdv_band_split), the second the 16-row one, both dividing the blocks by 128-row groups
// (band_split_blocks; the dK/dV's by 128-key groups, dkdv_band_split_blocks).  Not with documents
// (their boundaries are on the device: the host cannot count the blocks), key padding (the kernels take no
// block as interior with it) or a clamped table (every block meets it).  Each direction adds its kernels'
// shared memory and the workspace limit, kBandSplitWorkspace (band_split here, bwd_band_split in attention_bwd.cu).
constexpr int64_t kBandSplitKeys = 3072;

// Of the key blocks (bn keys) the query blocks (bm rows) of a call visit (*all), those interior -- every row of
// the block sees every key -- and beyond the table's band (table_band_key_blocks; *pure): the host's count of
// the forward's, documents and padding aside.
static void pure_blocks(const AttnParams &p, int bm, int bn, int64_t *all_out, int64_t *pure_out) {
    int64_t all = 0, pure = 0;
    for (int64_t m0 = 0; m0 < p.a.m; m0 += bm) {
        const int64_t last = (m0 + bm < p.a.m ? m0 + bm : p.a.m) - 1;
        int64_t lo0, hi0, lo1, hi1;  // the keys of the block's first and last rows
        wavepe_attention_keys(&p.a, 0, p.a.q_offset + m0, &lo0, &hi0);
        wavepe_attention_keys(&p.a, 0, p.a.q_offset + last, &lo1, &hi1);
        if (hi1 <= lo0) continue;
        all += ceil_div(hi1, bn) - lo0 / bn;
        int64_t ib, ie, bb, be;  // (a partial query block: every block masked)
        if (last == m0 + bm - 1 && interior_band_blocks(p, m0, bm, bn, lo0, hi0, lo1, hi1, ib, ie, bb, be))
            pure += (ie - ib) - (be - bb);
    }
    *all_out = all;
    *pure_out = pure;
}

// min_keys: the blocks beyond the band's keys a query row on average for the split to pay (kBandSplitKeys, or
// kBandSplitKeysGeneral where the general kernel would take them: band_split_on_general); third: and those blocks
// at least a third of the call's.  WAVEPE_CUDA_BAND_SPLIT in the environment (read at each call) overrides the
// thresholds, never the rest: "0" splits nothing, "1" every call a split can run (its devices' shared memory and
// workspace, some block beyond the band) -- the A/B of the thresholds on a GPU, and the emulator tests' way to the
// split on rows far shorter than the thresholds ask (each such run costs them its keys' time).
static bool band_split_pays(const AttnParams &p, int64_t min_keys, bool third) {
    if (env_zero("WAVEPE_CUDA_BAND_SPLIT")) return false;
    // (the count below loops over M / 64 query blocks: the callers check their workspace first, M < 2^19)
    if (!(p.a.d == 64 || p.a.d == 128 || p.a.d == 256) || p.pos_enc != WAVEPE_CUDA_PE_TABLE || p.a.clamp ||
        p.a.key_padding_mask != nullptr || p.a.cu_seqlens != nullptr || p.a.m > (int64_t(1) << 24))
        return false;
    // the forward's tiles (the backward's cover the same pairs): at 256 the tensor-core forward's; at 64 and 128
    // the 128-row groups and key blocks both partials divide the blocks by (band_split_blocks)
    const int bm = p.a.d == 256 ? TcFwdLayout<__half, 256>::BM : 128;
    const int bn = p.a.d == 256 ? TcFwdLayout<__half, 256>::BN
                   : p.a.d == 128 ? TcFwdLayout<__half, 128>::BN : TcFwdLayout<__half, 64>::BN;
    int64_t all, pure;
    pure_blocks(p, bm, bn, &all, &pure);
    if (env_is("WAVEPE_CUDA_BAND_SPLIT", "1")) return pure > 0;
    return pure > 0 && (!third || 3 * pure >= all) && pure * bn >= min_keys * ceil_div(p.a.m, bm);
}

bool band_split_pays(const AttnParams &p) { return band_split_pays(p, kBandSplitKeys, true); }
// (kBandSplitKeysGeneral: band_split_on_general, below)
constexpr int64_t kBandSplitKeysGeneral = 512;
bool band_split_pays_general(const AttnParams &p) { return band_split_pays(p, kBandSplitKeysGeneral, false); }

namespace {

// The tensor-core forward's shared memory a CTA at head_dim d (64, 128 or 256), with a table or not; the wide
// instance's (64 or 128, never a table).
size_t tc_fwd_smem(int64_t d, bool table) { return tc_layout_bytes<TcFwdLayout>(d, table); }
size_t tc_fwd_wide_smem(int64_t d) {
    return d == 64 ? TcFwdWideLayout<__half, 64>(false).plan.total : TcFwdWideLayout<__half, 128>(false).plan.total;
}

// Does the call run on the tensor-core loop (attn_fwd_tc_kernel, or its wide instance: wide_forward)?  bf16/fp16,
// head_dim 64, 128 or 256 (its unrolled tiles), q, k, v (and the table's) rows on 16 bytes (cp.async, ldmatrix),
// and its CTA's shared memory within the device's: past the 99 KiB every GPU from sm_80 on grants (head_dim 256
// with a table: 116.5 KiB) the device is asked -- sm_86 / sm_89 / sm_120 run the general kernel there (but for the
// blocks beyond the table's band: band_split_on_general).
bool tc_forward_shape(const AttnParams &p) {
    // (at head_dim 256, M, N < 2^36: the kernel counts blocks of 32 keys in 32 bits)
    return (p.a.dtype == WAVEPE_BF16 || p.a.dtype == WAVEPE_F16) && (p.a.d == 64 || p.a.d == 128 || p.a.d == 256) &&
           p.vec_q && p.vec_k && p.vec_v && (p.pos_enc != WAVEPE_CUDA_PE_TABLE || p.vec_t) &&
           (p.a.d < 256 || (p.a.m < (int64_t(1) << 36) && p.a.n < (int64_t(1) << 36)));
}
bool use_tc_forward(const AttnParams &p) {
    return tc_forward_shape(p) && smem_fits_device(tc_fwd_smem(p.a.d, p.pos_enc == WAVEPE_CUDA_PE_TABLE));
}

// Does the tensor-core forward take a GQA group's heads as the rows of one CTA (decoding one query,
// every head reading its kv head's keys once)?  Not with ALiBi (a slope per head, one per CTA).
bool pack_heads(const AttnParams &p) {
    return use_tc_forward(p) && p.a.m == 1 && p.group > 1 && p.group <= 64 && p.pos_enc != WAVEPE_CUDA_PE_ALIBI;
}

// Does an SM hold as many of the wide instance's table-free CTAs (head_dim d, 64 or 128) as of the 16-row
// instance's?  The registers allow two of either (~250 a thread, 4 warps a CTA); the shared memory decides on the
// 100 KiB SMs of sm_86, sm_89 and sm_120 (50,176 bytes a CTA for two, each with its 1 KiB reserved): at head_dim 128
// one wide CTA (54,304 bytes: 4 warps an SM, one a scheduler) where two 16-row ones fit (35,904: Q's tile in V's,
// TcFwdTiles) -- 8 warps, as FlashAttention-2's 64 x 64 tiles for sm_8x, at 326 bytes of shared memory an HMMA
// where the wide loop moves 230: latency, not bandwidth, binds one warp a scheduler (the H200's profile of the
// first forward: 76 % of cycles without an eligible warp).  At 64 both hold two (38,976 and 38,016 bytes); on
// sm_80, sm_90 and sm_100 both hold two at either head dim.  A device that cannot be asked keeps the wide one, as
// WAVEPE_CUDA_WIDE=1 does (wide_rows_forced).
bool wide_holds_sm(int64_t d) {
    if (wide_rows_forced()) return true;
    constexpr int kByRegisters = 2;
    const int w = device_ctas_by_smem(tc_fwd_wide_smem(d)), n = device_ctas_by_smem(tc_fwd_smem(d, false));
    return (w < kByRegisters ? w : kByRegisters) >= (n < kByRegisters ? n : kByRegisters);
}

// Does the call run the wide instance (attn_fwd_tc_wide_kernel: 32 query rows a warp, a CTA of 128)?  Each K and
// V fragment a warp reads feeds two HMMA, not one: in its main loop 230 bytes of shared memory per HMMA at head_dim
// 128 (198 at 64) where the 16-row warps move 326, over the 256 an H100's SM serves at the tensor rate
// (docs/CUDA.md, "Shared-memory traffic").  At head_dim 64 and 128, where O's and S's accumulators of 32 rows fit
// the registers beside Q's fragments read at each step (at 256 O's alone would take them all); not with a table
// (its window for 128 rows: one CTA an SM), nor for 64 queries or fewer (a 128-row CTA half empty: decoding,
// packed heads).
// Nor where an SM holds fewer of its CTAs than of the 16-row instance's (wide_holds_sm).
// WAVEPE_CUDA_WIDE=0 keeps such calls on the 16-row instance (wide_rows_allowed).
bool wide_forward(const AttnParams &p) {
    return p.pos_enc != WAVEPE_CUDA_PE_TABLE && wide_rows_apply(p) && use_tc_forward(p) && wide_holds_sm(p.a.d);
}

// Does the forward's band split's workspace -- two fp32 partials of every row, 4x a bf16 output's bytes -- stay
// within kBandSplitWorkspace?  (Then M < 2^19: band_split_pays's count is short.)
bool band_split_workspace_fits(const AttnParams &p) {
    int64_t bytes;
    return !wavepe_mul_overflow(p.a.batch, p.a.heads, &bytes) && !wavepe_mul_overflow(bytes, p.a.m, &bytes) &&
           !wavepe_mul_overflow(bytes, 2 * (p.a.d * 4 + 4 + 1), &bytes) && bytes <= int64_t(kBandSplitWorkspace);
}

// On a device that holds the tensor-core forward's CTA at head_dim 256 without the table's window (68,640 bytes)
// but not with it (119,328: past the 99 KiB of sm_86, sm_89 and sm_120), a table's call would run the general kernel
// whole (32 x 32 tiles, 2 warps, 27.2 other instructions per HMMA in its main loop on sm_90's SASS, against the
// tensor-core loop's 3.5 executed).  The band split moves its interior blocks beyond the band onto the tensor cores
// (the first partial: attn_fwd_tc_kernel without the window), the general kernel keeping the masked and the band's
// blocks (the second, attn_fwd_band_kernel).  A block moved saves most of its time (issue-bound at ~7x the
// tensor-core loop's instructions an HMMA), so the split pays from a few hundred keys a row beyond the band: the
// partials' round trip, 16 d bytes a row (4 KiB at 256: ~4 ns at ~1 TB/s), is what ~50-80 keys a row cost the
// general kernel over the tensor-core one (such a GPU's ~80 TFLOP/s with fp32 sums, 4 d FLOP a key, 5-7x) --
// kBandSplitKeysGeneral is that with room for the two launches more; no share of the blocks asked
// (band_split_pays_general; the backward's, onto its general kernels, the same: bwd_band_split_on_general).
// Unmeasured, as the rest of the model.
bool band_split_on_general(const AttnParams &p, int64_t want) {
    if (want > 1 || p.pos_enc != WAVEPE_CUDA_PE_TABLE || p.a.d != 256 || !tc_forward_shape(p) ||
        smem_fits_device(tc_fwd_smem(256, true)) || !smem_fits_device(tc_fwd_smem(256, false)))
        return false;
    return band_split_workspace_fits(p) && band_split_pays_general(p);
}

// Where the forward's first partial at head_dim 64 or 128 buys no second CTA an SM -- only the wide rows' lighter
// shared-memory traffic (an H100 / H200, where two table CTAs fit too) --, the blocks beyond the band a query row on
// average for its split to pay.  Measured (H200, bf16, B=1 H=32 d=128 causal, 2026-11-30, bench_attention.py --device
// cuda): at L=16384 (~6,300 such keys a row) the split took 10.36 ms, the same call in one launch 9.40, where the
// 16-row instance's 1.12x the wide one's time (nope: 8.35 / 7.45 ms) saves ~0.7 ms on those blocks -- so the two
// partials' round trip, combine and second launch cost ~1.7 ms there, ~3 ns a row: paid back from ~15,000 keys a row
// (L ~ 36k causal).  kBandSplitKeysWide is that, rounded up; the backward's split paid at 16384 (bwd_band_split in
// attention_bwd.cu: ~2.9 ms of ~34 saved) and keeps kBandSplitKeys.  Past L=16384 unmeasured.
constexpr int64_t kBandSplitKeysWide = 16384;

// The forward's band split (band_split_pays): at head_dim 256 the window leaves the tensor-core forward's CTA
// alone on an SM (119,328 bytes) where two fit without it (68,640; the registers allow no more: 251-252 a thread);
// at 64 and 128 the wide instance may run (wide_rows_apply: more than 64 queries), from kBandSplitKeysWide keys a
// row where its first partial buys no second CTA an SM; and its workspace fits (band_split_workspace_fits).  Not with
// packed heads (decoding) or split-KV asked for (want > 1).  Where the tensor-core forward does not take the call, the band split
// onto the general kernel (band_split_on_general).
bool band_split(const AttnParams &p, int64_t want) {
    using Lay = TcFwdLayout<__half, 256>;  // (bf16's the same bytes)
    if (!use_tc_forward(p)) return band_split_on_general(p, want);
    if (want > 1 || p.pos_enc != WAVEPE_CUDA_PE_TABLE || pack_heads(p) ||
        !(p.a.d == 256 || wide_rows_apply(p)))
        return false;
    if (!band_split_workspace_fits(p)) return false;
    if (p.a.d == 256 && !second_cta_by_smem(Lay(true).plan.total, Lay(false).plan.total)) return false;
    if (p.a.d != 256 && !second_cta_by_smem(tc_fwd_smem(p.a.d, true), wide_holds_sm(p.a.d)
                                                                          ? tc_fwd_wide_smem(p.a.d)
                                                                          : tc_fwd_smem(p.a.d, false)))
        return band_split_pays(p, kBandSplitKeysWide, true);
    return band_split_pays(p);
}

// The tiles of the kernel that runs a call: rows and keys per CTA and key block.
struct FwdDims {
    int bm, bn;
};
FwdDims fwd_dims(const AttnParams &p) {
    if (use_tc_forward(p)) {
        if (wide_forward(p))
            return p.a.d == 64 ? FwdDims{TcFwdWideLayout<__half, 64>::BM, TcFwdWideLayout<__half, 64>::BN}
                               : FwdDims{TcFwdWideLayout<__half, 128>::BM, TcFwdWideLayout<__half, 128>::BN};
        return FwdDims{64, p.a.d == 64 ? TcFwdLayout<__half, 64>::BN
                                       : p.a.d == 128 ? TcFwdLayout<__half, 128>::BN : TcFwdLayout<__half, 256>::BN};
    }
    FwdDims out{64, 64};
    dispatch_dtype(p.a.dtype, [&](auto tag) {
        using T = decltype(tag);
        switch (dmax_bucket(p.a.d)) {
        case 64: out = {FwdCfg<T, 64>::BM, FwdCfg<T, 64>::BN}; break;
        case 128: out = {FwdCfg<T, 128>::BM, FwdCfg<T, 128>::BN}; break;
        default: out = {FwdCfg<T, 256>::BM, FwdCfg<T, 256>::BN};
        }
        return cudaSuccess;
    });
    return out;
}

// The key blocks of bn keys holding keys that some query can see (visible_keys): their count, and
// the first in *first.
int64_t visible_key_blocks(const wavepe_attention_args *a, int64_t bn, int64_t *first) {
    int64_t lo, hi;
    visible_keys(a, &lo, &hi);
    *first = lo / bn;
    return hi > lo ? ceil_div(hi, bn) - lo / bn : 0;
}

// The CTAs of one split: (batch, head, query block) or, packing heads, (batch, kv head).
int64_t fwd_units(const AttnParams &p, int bm) {
    return p.pack_heads ? p.a.batch * (p.a.heads / p.group) : p.a.batch * p.a.heads * ceil_div(p.a.m, bm);
}

// Split the visible key blocks of bn keys into p->num_splits ranges (fewer where the blocks run out);
// the grid's CTAs, 0 when there is nothing to do.
int64_t plan_splits(AttnParams *p, int bm, int bn) {
    const int64_t kb_total = visible_key_blocks(&p->a, bn, &p->kb_first);
    const int64_t splits = p->num_splits < 1 ? 1 : p->num_splits;
    p->blocks_per_split = kb_total > 0 ? ceil_div(kb_total, splits) : 1;
    p->num_splits = kb_total > 0 ? ceil_div(kb_total, p->blocks_per_split) : 1;
    return fwd_units(*p, bm) * p->num_splits;
}

// Launch a forward kernel of `threads` a CTA over its grid, then the combine of split-KV partials.
template <class T, class K>
cudaError_t launch_fwd_grid(K *kernel, const AttnParams &p, int64_t ctas, int threads, size_t smem,
                            cudaStream_t stream) {
    cudaError_t err = allow_dynamic_smem(kernel, smem);
    if (err != cudaSuccess) return err;
    err = launch(kernel, dim3(unsigned(ctas)), dim3(unsigned(threads)), smem, stream, p);
    if (err != cudaSuccess || p.num_splits == 1) return err;
    const int64_t rows = p.a.batch * p.a.heads * p.a.m;
    return launch(attn_combine_kernel<T>, dim3(unsigned(ceil_div(rows, 4))), dim3(128), 0, stream, p);
}

template <class T, int D>
cudaError_t launch_fwd_tc(AttnParams p, cudaStream_t stream) {
    using Lay = TcFwdLayout<T, D>;
    p.pack_heads = pack_heads(p) ? 1 : 0;
    p.m_rows = p.pack_heads ? p.group : p.a.m;
    if (p.band_part) {  // the band split (wavepe_cuda_attention_fwd): its two partials, then their combine
        p.num_splits = 1;
        const int64_t ctas = plan_splits(&p, Lay::BM, Lay::BN);
        if (ctas == 0) return cudaSuccess;
        p.num_splits = 2;
        static_assert(Lay::BM * 2 == 128, "launch_band_parts' CTA");
        cudaError_t err = cudaSuccess;
        bool launched = false;
        if constexpr (D <= 128) {
            if (wide_holds_sm(D)) {  // the first partial on the wide instance (its own key blocks), the second here
                using Wide = TcFwdWideLayout<T, D>;
                AttnParams q = p;
                q.num_splits = 1;
                const int64_t wide_ctas = plan_splits(&q, Wide::BM, Wide::BN);
                q.num_splits = 2;
                q.band_part = 1;
                err = launch_tc(attn_fwd_tc_wide_kernel<T, D, true>, wide_ctas, Wide(false).plan.total, stream, q);
                q = p;
                q.band_part = 2;
                if (err == cudaSuccess)
                    err = launch_tc(attn_fwd_tc_kernel<T, D, false>, ctas, Lay(true).plan.total, stream, q);
                launched = true;
            }
        }
        if (!launched)  // (at 64 and 128 too where an SM holds fewer wide CTAs: the first's CTA without the window)
            err = launch_band_parts(
                p, [](bool) { return attn_fwd_tc_kernel<T, D, false>; }, [](bool w) { return Lay(w).plan.total; },
                ctas, stream);
        if (err != cudaSuccess) return err;
        const int64_t rows = p.a.batch * p.a.heads * p.a.m;
        return launch(attn_combine_kernel<T>, dim3(unsigned(ceil_div(rows, 4))), dim3(128), 0, stream, p);
    }
    if constexpr (D <= 128) {
        if (wide_forward(p)) {
            using Wide = TcFwdWideLayout<T, D>;
            const int64_t ctas = plan_splits(&p, Wide::BM, Wide::BN);
            if (ctas == 0) return cudaSuccess;
            return launch_fwd_grid<T>(attn_fwd_tc_wide_kernel<T, D, false>, p, ctas, 128, Wide(false).plan.total, stream);
        }
    }
    const int64_t ctas = plan_splits(&p, Lay::BM, Lay::BN);
    if (ctas == 0) return cudaSuccess;
    const size_t smem = Lay(p.pos_enc == WAVEPE_CUDA_PE_TABLE).plan.total;
    if (p.pack_heads) return launch_fwd_grid<T>(attn_fwd_tc_kernel<T, D, true>, p, ctas, 128, smem, stream);
    return launch_fwd_grid<T>(attn_fwd_tc_kernel<T, D, false>, p, ctas, 128, smem, stream);
}

// BAND: the band split's second partial (band_split_on_general; the first launched), then the combine of both
template <class T, int DMAX, bool BAND = false>
cudaError_t launch_fwd_cfg(AttnParams p, cudaStream_t stream) {
    constexpr int BM = FwdCfg<T, DMAX>::BM, BN = FwdCfg<T, DMAX>::BN;
    if (BAND) p.num_splits = 1;  // (every key block, one CTA a unit; its partial in slot 1 of two)
    const int64_t ctas = plan_splits(&p, BM, BN);
    if (ctas == 0) return cudaSuccess;
    if (BAND) p.num_splits = 2;
    const bool table = p.pos_enc == WAVEPE_CUDA_PE_TABLE;
    // double-buffer K/V (and the table window) with cp.async when rows are
    // 16-byte aligned and the second buffers fit the device's shared memory
    p.async_kv = p.async_t = 0;
    if (!BAND && p.vec_k && p.vec_v && p.blocks_per_split > 1) {  // (BAND: attn_fwd_cta steps over blocks)
        const size_t optin = device_smem_optin();
        p.async_kv = FwdLayout<T, BM, BN>(p.d_pad, table, true, false).plan.total <= optin;
        p.async_t = p.async_kv && table && p.vec_t && FwdLayout<T, BM, BN>(p.d_pad, table, true, true).plan.total <= optin;
    }
    const FwdLayout<T, BM, BN> L(p.d_pad, table, p.async_kv != 0, p.async_t != 0);
    if constexpr (BAND) return launch_fwd_grid<T>(attn_fwd_band_kernel<T>, p, ctas, BM * 2, L.plan.total, stream);
    return launch_fwd_grid<T>(attn_fwd_kernel<T, DMAX, BM, BN>, p, ctas, BM * 2, L.plan.total, stream);
}

// The band split with the general kernel (band_split_on_general): the blocks beyond the band on the tensor cores
// without the window (slot 0), the others on attn_fwd_band_kernel (slot 1), then their combine
template <class T>
cudaError_t launch_fwd_band_general(AttnParams p, cudaStream_t stream) {
    using Lay = TcFwdLayout<T, 256>;
    AttnParams q = p;
    q.num_splits = 1;
    const int64_t ctas = plan_splits(&q, Lay::BM, Lay::BN);
    if (ctas == 0) return cudaSuccess;
    q.num_splits = 2;
    q.band_part = 1;
    const cudaError_t err = launch_tc(attn_fwd_tc_kernel<T, 256, false>, ctas, Lay(false).plan.total, stream, q);
    if (err != cudaSuccess) return err;
    p.band_part = 2;
    return launch_fwd_cfg<T, 256, true>(p, stream);
}

template <class T>
cudaError_t launch_fwd(AttnParams p, cudaStream_t stream) {
    if constexpr (sizeof(T) == 8) {
        if (dmax_bucket(p.a.d) == 64) return launch_fwd_cfg<T, 64>(p, stream);
        return launch_fwd_cfg<T, 128>(p, stream);
    } else {
        if constexpr (Traits<T>::kTensorCore) {
            if (use_tc_forward(p)) {
                if (p.a.d == 64) return launch_fwd_tc<T, 64>(p, stream);
                return p.a.d == 128 ? launch_fwd_tc<T, 128>(p, stream) : launch_fwd_tc<T, 256>(p, stream);
            }
        }
        if constexpr (Traits<T>::kTensorCore) {
            if (p.band_part) return launch_fwd_band_general<T>(p, stream);  // (band_split_on_general)
        }
        switch (dmax_bucket(p.a.d)) {
        case 64: return launch_fwd_cfg<T, 64>(p, stream);
        case 128: return launch_fwd_cfg<T, 128>(p, stream);
        }
        return launch_fwd_cfg<T, 256>(p, stream);
    }
}

// Effective splits for a requested count (what the kernel will run; the band split's two partials count two).
int64_t effective_splits(const wavepe_attention_args *a, int64_t want) {
    const AttnParams p = attention_params(a);
    const int64_t bn = fwd_dims(p).bn;
    int64_t first;
    const int64_t kb_total = visible_key_blocks(a, bn, &first);
    if (want <= 1 && kb_total > 0 && band_split(p, want)) return 2;
    if (want <= 1 || kb_total <= 1) return 1;
    const int64_t per = ceil_div(kb_total, want);
    return ceil_div(kb_total, per);
}

size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

template <class T, int DMAX>
size_t fwd_smem(const wavepe_attention_args *a) {
    if constexpr (Traits<T>::kTensorCore) {
        const AttnParams p = attention_params(a);
        if (use_tc_forward(p))
            return wide_forward(p) ? tc_fwd_wide_smem(a->d) : tc_fwd_smem(a->d, a->table != nullptr);
    }
    // the minimum: single-buffered K/V (the launcher double-buffers when more fits)
    const FwdLayout<T, FwdCfg<T, DMAX>::BM, FwdCfg<T, DMAX>::BN> L(ceil_div(a->d, 16) * 16, a->table != nullptr,
                                                                    false, false);
    return L.plan.total;
}

}  // namespace

// ---- Padded head dims ---------------------------------------------------------------------------------------
// The tensor-core kernels unroll their tiles over head dims 64, 128 and 256; a model with another (Phi-2's 80,
// Phi-3-mini's 96, a 112, a 192) would run the general kernels whole -- 27-60 other instructions per HMMA in the
// forward's main loops on sm_90, 12-34 in the dQ's and dK/dV's, against the tensor-core loops' 2-6 (docs/CUDA.md,
// "Padded head dims"). Zero columns change no result: zero-padded q and k give the same scores, a zero-padded table
// the same bias, zero-padded V and dO columns the same P V, dP and delta; the padded columns of O, dQ, dK, dV and dT
// come out zero and are dropped.
// So such a call runs on dense copies of its rows padded to the next instance's head dim, in the workspace, and its
// outputs' first d columns are copied back (the scale stays the caller's, the real head dim's). The copies move
// O(L d) bytes against the products' O(L^2 d) work: taken from kPadMinRows queries (not decoding, where copying K
// and V would cost each step what the kernel reads) and where the padding at most doubles the products (d > 32);
// not with WAVEPE_CUDA_PAD=0 (padded_head_dims_allowed).
constexpr int64_t kPadMinRows = 64;

namespace {

// The head dim a call's rows are padded to, or 0 (see above).
int64_t padded_head_dim(const wavepe_attention_args *a) {
    if (!(a->dtype == WAVEPE_BF16 || a->dtype == WAVEPE_F16) || a->m < kPadMinRows || a->n <= 0 || a->d <= 32 ||
        a->d >= 256 || a->d == 64 || a->d == 128 || !padded_head_dims_allowed())
        return 0;
    return a->d < 64 ? 64 : a->d < 128 ? 128 : 256;
}

// Rows of cols_in elements at src (strides: batch, head, row) into rows of cols_out elements at dst, zero beyond
// cols_in: into the padded call's rows, and its outputs back. heads: a batch row's; rows: a head's.
struct RowCopy {
    const void *src;
    void *dst;
    int64_t heads, rows, total, cols_in, cols_out;  // total: batch x heads x rows
    int64_t src_strides[3], dst_strides[3];
    int vec;  // both sides' rows on 16 bytes, both widths multiples of 8 elements: 16-byte chunks
};

// vec: a thread a 16-byte chunk of a row (the copies into the padded rows, and back where the caller's rows allow);
// else a warp a row, its lanes on consecutive elements.  Grid-strided.
template <class T>
__global__ void __launch_bounds__(256) copy_rows_kernel(RowCopy c) {
    const auto row_of = [&](int64_t i, const T *&src, T *&dst) {
        const int64_t r = i % c.rows, bh = i / c.rows, h = bh % c.heads, b = bh / c.heads;
        src = static_cast<const T *>(c.src) + b * c.src_strides[0] + h * c.src_strides[1] + r * c.src_strides[2];
        dst = static_cast<T *>(c.dst) + b * c.dst_strides[0] + h * c.dst_strides[1] + r * c.dst_strides[2];
    };
    const T *src;
    T *dst;
    if (c.vec) {
        const int64_t chunks = c.cols_out / 8, n = c.total * chunks, step = int64_t(gridDim.x) * blockDim.x;
        for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
            const int64_t col = 8 * (i % chunks);
            row_of(i / chunks, src, dst);
            if (col < c.cols_in)
                copy16(dst + col, src + col);
            else
                zero16(dst + col);
        }
        return;
    }
    const int lane = threadIdx.x & 31;
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
    for (int64_t i = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < c.total; i += warps) {
        row_of(i, src, dst);
        for (int64_t col = lane; col < c.cols_out; col += 32) dst[col] = col < c.cols_in ? src[col] : zero_value<T>();
    }
}

template <class T>
cudaError_t copy_rows(RowCopy c, cudaStream_t stream) {
    if (c.total <= 0) return cudaSuccess;
    c.vec = c.cols_in % 8 == 0 && c.cols_out % 8 == 0 && vec_rows<T>(c.src, c.src_strides[0], c.src_strides[1],
                                                                      c.src_strides[2], 8) &&
            vec_rows<T>(c.dst, c.dst_strides[0], c.dst_strides[1], c.dst_strides[2], 8);
    // 256 threads a CTA: 8 rows (warps), or 256 chunks; at most 2^20 CTAs, grid-strided beyond
    const int64_t ctas = c.vec ? ceil_div(c.total * (c.cols_out / 8), 256) : ceil_div(c.total, 8);
    return launch(copy_rows_kernel<T>, dim3(unsigned(ctas < (int64_t(1) << 20) ? ctas : int64_t(1) << 20)), dim3(256),
                  0, stream, c);
}

// A tensor of the call (batch, heads, rows of d elements at p with strides s) and its dense padded copy (rows of dp).
struct PadSlot {
    const void *user;
    int64_t batch, heads, rows;
    int64_t strides[3];
    void *padded;
    // the strides (batch, head, row) of dense rows of `cols` elements
    void dense(int64_t cols, int64_t (&st)[3]) const {
        st[0] = heads * rows * cols;
        st[1] = rows * cols;
        st[2] = cols;
    }
};

cudaError_t pad_copy(const PadSlot &s, int64_t d, int64_t dp, bool in, int dtype, cudaStream_t stream) {
    if (s.user == nullptr) return cudaSuccess;
    RowCopy c{};
    c.heads = s.heads;
    c.rows = s.rows;
    c.total = s.batch * s.heads * s.rows;
    int64_t dense[3];
    s.dense(dp, dense);
    c.src = in ? s.user : s.padded;
    c.dst = in ? s.padded : const_cast<void *>(s.user);
    c.cols_in = in ? d : dp;
    c.cols_out = in ? dp : d;
    for (int i = 0; i < 3; ++i) {
        c.src_strides[i] = in ? s.strides[i] : dense[i];
        c.dst_strides[i] = in ? dense[i] : s.strides[i];
    }
    return dtype == WAVEPE_BF16 ? copy_rows<__nv_bfloat16>(c, stream) : copy_rows<__half>(c, stream);
}

// The call's padded tensors: inputs q, k, v, the table (backward: and out, dout), outputs out (backward: dq, dk, dv,
// dtable), in that order in the workspace.
enum PadName { kPadQ, kPadK, kPadV, kPadT, kPadO, kPadDout, kPadDq, kPadDk, kPadDv, kPadDt, kPadCount };

// The call's tensors a padded call copies (user: a's; padded: pa's, where given).
void pad_slots(const wavepe_attention_args *a, const wavepe_attention_args *pa, bool backward, PadSlot (&s)[kPadCount]) {
    const int64_t bh[3] = {a->batch, a->heads, a->m}, bk[3] = {a->batch, a->kv_heads > 0 ? a->kv_heads : a->heads, a->n};
    const int64_t table[3] = {1, 1, a->table_rows};
    auto slot = [&](const void *user, const void *padded, const int64_t (&shape)[3], const int64_t *strides) {
        PadSlot x{};
        x.user = user;
        x.padded = const_cast<void *>(padded);
        x.batch = shape[0];
        x.heads = shape[1];
        x.rows = shape[2];
        if (strides)
            for (int i = 0; i < 3; ++i) x.strides[i] = strides[i];
        else
            x.dense(a->d, x.strides);  // (dq, dk, dv, dtable)
        return x;
    };
    const bool b = backward;
    s[kPadQ] = slot(a->q, pa ? pa->q : nullptr, bh, a->q_strides);
    s[kPadK] = slot(a->k, pa ? pa->k : nullptr, bk, a->k_strides);
    s[kPadV] = slot(a->v, pa ? pa->v : nullptr, bk, a->v_strides);
    s[kPadT] = slot(a->table, pa ? pa->table : nullptr, table, nullptr);
    s[kPadO] = slot(a->out, pa ? pa->out : nullptr, bh, a->out_strides);
    s[kPadDout] = slot(b ? a->dout : nullptr, pa ? pa->dout : nullptr, bh, a->dout_strides);
    s[kPadDq] = slot(b ? a->dq : nullptr, pa ? pa->dq : nullptr, bh, nullptr);
    s[kPadDk] = slot(b ? a->dk : nullptr, pa ? pa->dk : nullptr, bk, nullptr);
    s[kPadDv] = slot(b ? a->dv : nullptr, pa ? pa->dv : nullptr, bk, nullptr);
    s[kPadDt] = slot(b ? a->dtable : nullptr, pa ? pa->dtable : nullptr, table, nullptr);
}

}  // namespace

PaddedCall padded_call(const wavepe_attention_args *a, bool backward, void *workspace) {
    PaddedCall c{};
    c.a = *a;
    const int64_t dp = padded_head_dim(a);
    if (dp == 0) return c;
    PadSlot s[kPadCount];
    pad_slots(a, nullptr, backward, s);
    // (never dereferenced without a workspace: a base only so that the copies' pointers are set and aligned)
    const uintptr_t base = workspace ? reinterpret_cast<uintptr_t>(workspace) : uintptr_t(256);
    size_t at = 0;
    for (PadSlot &x : s) {
        if (x.user == nullptr) continue;
        int64_t elems = 0;
        if (wavepe_mul_overflow(x.batch * x.heads, x.rows, &elems) || wavepe_mul_overflow(elems, dp * 2, &elems))
            return c;  // (2 bytes an element; past int64: not padded, the general kernels take it)
        x.padded = reinterpret_cast<void *>(base + at);
        at += align256(size_t(elems));
    }
    c.a.d = dp;
    c.a.q = s[kPadQ].padded;
    c.a.k = s[kPadK].padded;
    c.a.v = s[kPadV].padded;
    s[kPadQ].dense(dp, c.a.q_strides);
    s[kPadK].dense(dp, c.a.k_strides);
    s[kPadV].dense(dp, c.a.v_strides);
    c.a.table = a->table ? s[kPadT].padded : nullptr;
    c.a.out = s[kPadO].padded;
    s[kPadO].dense(dp, c.a.out_strides);
    if (backward) {
        c.a.dout = s[kPadDout].padded;
        s[kPadDout].dense(dp, c.a.dout_strides);
        c.a.dq = s[kPadDq].padded;
        c.a.dk = s[kPadDk].padded;
        c.a.dv = s[kPadDv].padded;
        c.a.dtable = a->dtable ? s[kPadDt].padded : nullptr;
    }
    c.bytes = at;
    c.on = true;
    return c;
}

cudaError_t padded_inputs(const wavepe_attention_args *a, const PaddedCall &c, bool backward, cudaStream_t stream) {
    PadSlot s[kPadCount];
    pad_slots(a, &c.a, backward, s);
    cudaError_t err = cudaSuccess;
    for (PadName n : {kPadQ, kPadK, kPadV, kPadT, kPadO, kPadDout})
        if (err == cudaSuccess && (n != kPadO || backward))  // (the forward's O: its output)
            err = pad_copy(s[n], a->d, c.a.d, true, a->dtype, stream);
    return err;
}

cudaError_t padded_outputs(const wavepe_attention_args *a, const PaddedCall &c, bool backward, cudaStream_t stream) {
    PadSlot s[kPadCount];
    pad_slots(a, &c.a, backward, s);
    if (!backward) return pad_copy(s[kPadO], a->d, c.a.d, false, a->dtype, stream);
    cudaError_t err = cudaSuccess;
    for (PadName n : {kPadDq, kPadDk, kPadDv, kPadDt})
        if (err == cudaSuccess) err = pad_copy(s[n], a->d, c.a.d, false, a->dtype, stream);
    return err;
}

namespace {

// The forward's padded call (padded_call), where the tensor-core forward takes it (on a 99 KiB device at head_dim
// 256 with a table: where its band split puts the blocks beyond the band on it)
PaddedCall fwd_padded(const wavepe_attention_args *a, void *workspace) {
    PaddedCall c = padded_call(a, false, workspace);
    if (c.on) {
        const AttnParams p = attention_params(&c.a);
        c.on = use_tc_forward(p) || band_split_on_general(p, 1);
    }
    return c;
}

}  // namespace
}  // namespace wavepe_cuda

using namespace wavepe_cuda;

extern "C" int wavepe_cuda_attention_check(const wavepe_attention_args *a, int backward, int64_t num_splits,
                                           wavepe_error *err) {
    if (a == nullptr) return wavepe_fail(err, WAVEPE_E_NULL, "no arguments");
    int status = wavepe_attention_validate(a, backward, err);
    if (status != WAVEPE_OK) return status;
    // this device's limits: register tiles up to 256 (fp64: 128) columns, the grid's x dimension
    const int64_t dmax = a->dtype == WAVEPE_F64 ? WAVEPE_CUDA_MAX_HEAD_DIM_F64 : WAVEPE_CUDA_MAX_HEAD_DIM;
    if (a->d > dmax)
        return wavepe_fail(err, WAVEPE_E_INVALID, "head_dim must be <= %lld for %s on CUDA, got %lld", (long long)dmax,
                           wavepe_dtype_name(a->dtype), (long long)a->d);
    if (!backward && num_splits < 1)
        return wavepe_fail(err, WAVEPE_E_INVALID, "num_splits must be >= 1, got %lld", (long long)num_splits);
    // the largest grid: 16-row tiles of the queries (forward: times the splits) or, backward,
    // of the queries or keys times up to 4 column slices (BwdCfg::CS_*)
    int64_t ctas = 0;
    const int64_t splits = backward ? 4 : num_splits;
    const int64_t rows = backward && a->n > a->m ? a->n : a->m;
    if (wavepe_mul_overflow(a->batch * a->heads, ceil_div(rows, 16), &ctas) || wavepe_mul_overflow(ctas, splits, &ctas) ||
        ctas > INT32_MAX)
        return wavepe_fail(err, WAVEPE_E_OVERFLOW, "batch=%lld x heads=%lld x q_len=%lld exceed the CUDA grid",
                           (long long)a->batch, (long long)a->heads, (long long)a->m);
    return WAVEPE_OK;
}

extern "C" int64_t wavepe_cuda_attention_num_splits(const wavepe_attention_args *a) {
    if (a == nullptr || dtype_size(a->dtype) == 0 || a->d < 0 || a->n <= 0) return 1;
    const PaddedCall c = fwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_num_splits(&c.a);
    AttnParams p = attention_params(a);
    const FwdDims dims = fwd_dims(p);
    const int bn = dims.bn;
    p.pack_heads = pack_heads(p) ? 1 : 0;
    const int64_t ctas = fwd_units(p, dims.bm);
    const int64_t sms = device_sm_count();
    int64_t first;
    const int64_t kb_total = visible_key_blocks(a, bn, &first);  // with a window: its keys only
    if (ctas <= 0 || ctas >= sms || kb_total < 4) return 1;
    int64_t want = ceil_div(2 * sms, ctas);  // two CTAs per SM
    if (want > kb_total / 2) want = kb_total / 2;  // at least two key blocks per split
    if (want > 64) want = 64;
    return want < 2 ? 1 : effective_splits(a, want);
}

extern "C" size_t wavepe_cuda_attention_fwd_workspace_bytes(const wavepe_attention_args *a, int64_t num_splits) {
    if (a == nullptr || wavepe_cuda_attention_check(a, 0, num_splits, nullptr) != WAVEPE_OK) return 0;
    const PaddedCall c = fwd_padded(a, nullptr);
    if (c.on) return c.bytes + wavepe_cuda_attention_fwd_workspace_bytes(&c.a, num_splits);
    const int64_t splits = effective_splits(a, num_splits);
    if (splits <= 1) return 0;
    const size_t acc = a->dtype == WAVEPE_F64 ? 8 : 4;
    const size_t rows = size_t(splits) * size_t(a->batch * a->heads * a->m);
    return align256(rows * size_t(a->d) * acc) + align256(rows * acc) + align256(rows);  // o, lse, seen flags
}

extern "C" cudaError_t wavepe_cuda_attention_fwd(const wavepe_attention_args *a, int64_t num_splits, void *workspace,
                                                 size_t workspace_bytes, cudaStream_t stream) {
    if (wavepe_cuda_attention_check(a, 0, num_splits, nullptr) != WAVEPE_OK) return cudaErrorInvalidValue;
    const PaddedCall c = fwd_padded(a, workspace);
    if (c.on) {  // (the copies first in the workspace, the padded call's own after them)
        if (workspace == nullptr || workspace_bytes < wavepe_cuda_attention_fwd_workspace_bytes(a, num_splits))
            return cudaErrorInvalidValue;
        cudaError_t err = padded_inputs(a, c, false, stream);
        if (err == cudaSuccess)
            err = wavepe_cuda_attention_fwd(&c.a, num_splits, static_cast<unsigned char *>(workspace) + c.bytes,
                                            workspace_bytes - c.bytes, stream);
        return err == cudaSuccess ? padded_outputs(a, c, false, stream) : err;
    }
    AttnParams p = attention_params(a);
    p.num_splits = effective_splits(a, num_splits);
    p.band_part = p.num_splits == 2 && band_split(p, num_splits) ? 1 : 0;  // (the launcher takes both parts)
    if (p.num_splits > 1) {
        const size_t need = wavepe_cuda_attention_fwd_workspace_bytes(a, num_splits);
        if (workspace == nullptr || workspace_bytes < need) return cudaErrorInvalidValue;
        const size_t acc = a->dtype == WAVEPE_F64 ? 8 : 4;
        const size_t rows = size_t(p.num_splits) * size_t(a->batch * a->heads * a->m);
        p.work_o = workspace;
        p.work_lse = static_cast<unsigned char *>(workspace) + align256(rows * size_t(a->d) * acc);
        p.work_seen = static_cast<unsigned char *>(p.work_lse) + align256(rows * acc);
    }
    return dispatch_dtype(a->dtype, [&](auto tag) { return launch_fwd<decltype(tag)>(p, stream); });
}

extern "C" size_t wavepe_cuda_attention_fwd_smem_bytes(const wavepe_attention_args *a) {
    if (a == nullptr || dtype_size(a->dtype) == 0 || a->d < 0 || a->d > WAVEPE_CUDA_MAX_HEAD_DIM) return 0;
    const PaddedCall c = fwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_fwd_smem_bytes(&c.a);
    size_t bytes = 0;
    dispatch_dtype(a->dtype, [&](auto tag) {
        using T = decltype(tag);
        switch (dmax_bucket(a->d)) {
        case 64: bytes = fwd_smem<T, 64>(a); break;
        case 128: bytes = fwd_smem<T, 128>(a); break;
        default:
            if constexpr (sizeof(T) != 8) bytes = fwd_smem<T, 256>(a);
        }
        return cudaSuccess;
    });
    return bytes;
}

extern "C" const char *wavepe_cuda_attention_fwd_kernel(const wavepe_attention_args *a) {
    if (a == nullptr) return nullptr;
    const PaddedCall c = fwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_fwd_kernel(&c.a);
    const AttnParams p = attention_params(a);
    if (!use_tc_forward(p))
        return band_split(p, wavepe_cuda_attention_num_splits(a)) ? "band split: tensor-core beyond the band, general"
                                                                  : "general";
    if (pack_heads(p)) return "tensor-core, GQA heads packed";
    if (wide_forward(p)) return "tensor-core, 32 rows a warp";
    return band_split(p, wavepe_cuda_attention_num_splits(a)) ? "tensor-core, band split" : "tensor-core";
}

extern "C" int64_t wavepe_cuda_attention_fwd_padded_head_dim(const wavepe_attention_args *a) {
    if (a == nullptr || dtype_size(a->dtype) == 0) return 0;
    const PaddedCall c = fwd_padded(a, nullptr);
    return c.on ? c.a.d : 0;
}
