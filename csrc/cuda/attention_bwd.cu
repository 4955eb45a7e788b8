// attention_bwd.cu: fused attention backward on the GPU (FlashAttention-2
// recompute from the saved log-sum-exp), deterministic: no atomics, every
// output block has one owner CTA that reduces in a fixed order.
//
//   delta   D[m] = dO[m] . O[m] - dlse[m]             (one warp per row; dlse = the
//           gradient of the lse output, which adds dlse[m] P[m, n] to dS)
//   dkdv    a CTA owns B keys of one (batch, kv head); for every query head
//           of the GQA group and every query block that can see the keys (their
//           documents' queries, from the keys on when causal, within the window) it
//           recomputes S^T = K Q^T (+ bias) and dP^T = V dO^T, then
//           P^T = exp(S^T - lse), dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q.
//           The bias needs G = Q T_win^T of all query groups of the tile: each
//           warp computes one group's G into shared memory, every warp reads
//           the transposed skew.
//   dq      a CTA owns B query rows: recompute S, P, dP, dS per key block,
//           dQ += dS K, and for the table bias dQ += H T_win where H is dS
//           skewed into window coordinates (H[m][m - n + B - 1] = dS[m][n]).
//   dtable  (learned relative table only) tiles on one diagonal i - j of the
//           M x N tile grid share their table window (with BM = BN = B), so a
//           CTA per (diagonal, group of heads) recomputes dS along its
//           diagonal and accumulates dT_win = H^T Q into its own slot of a
//           float workspace; a fold kernel sums the slots of each table row in
//           a fixed order (clamp: every distance beyond the table into its
//           edge row).  Workspace O((M + N) d) per head group, never M x N.
//           bf16/fp16 at head_dim 64 / 128: attn_bwd_dtable_tc_kernel, the same walk
//           on the tensor cores (tiles of 64, dT_win in registers).
// dK, dQ and dT carry the scale: s = scale (q.k + q.T).
// Masks: every (query, key) pair that wavepe_attention_keys excludes -- documents,
// causality, the sliding window -- and padding; the dK/dV kernel bounds its
// query blocks, and masks its pairs, with the inverse (key_queries).
// Soft-cap (softcap > 0): P is recomputed from the capped score
// x = cap tanh(s / cap), and dS = P (dP - D) is multiplied by
// d x / d s = 1 - (x / cap)^2 before it feeds dQ, dK, dT and d slopes.
#include "attention_bwd.cuh"

namespace wavepe_cuda {
namespace {

template <class T, int B>
struct BwdLayout {
    SmemPlan plan;
    int a, b, c, dd, t, g, lse, delta, mask, pscr, rows;
    // a, b: the CTA's own rows (dkdv: K, V; dq/dtable: Q, dO); c, dd: the streamed ones
    __host__ __device__ BwdLayout(int64_t d_pad, bool table) {
        using A = acc_t<T>;
        const size_t row = sizeof(T) * size_t(tile_ld<T>(d_pad));
        a = plan.add(B * row);
        b = plan.add(B * row);
        c = plan.add(B * row);
        dd = plan.add(B * row);
        t = plan.add(table ? 2 * B * row : 0);
        g = plan.add(table ? sizeof(A) * B * size_t(g_ld<A>(B)) : 0);
        lse = plan.add(sizeof(A) * B);
        delta = plan.add(sizeof(A) * B);
        mask = plan.add(B);
        pscr = plan.add(sizeof(A) * (B / 16) * rb_scratch_elems<T>(B));
        rows = plan.add(2 * B * sizeof(int64_t));  // the query rows' keys [lo, hi)
    }
};

template <class T>
__global__ void __launch_bounds__(128) attn_bwd_delta_kernel(AttnParams p) {
    using A = acc_t<T>;
    const int64_t rows = p.a.batch * p.a.heads * p.a.m;
    const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // warp-uniform, no barriers in this kernel
    const int64_t bh = row / p.a.m, m = row % p.a.m, b = bh / p.a.heads, h = bh % p.a.heads;
    const T *o = static_cast<const T *>(p.a.out) + b * p.a.out_strides[0] + h * p.a.out_strides[1] + m * p.a.out_strides[2];
    const T *go = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1] + m * p.a.dout_strides[2];
    A sum = 0;
    for (int64_t c = lane; c < p.a.d; c += 32) sum += to_acc(o[c]) * to_acc(go[c]);
    sum = warp_sum(sum);
    if (p.a.dlse != nullptr) sum -= static_cast<const A *>(p.a.dlse)[row];
    if (lane == 0) static_cast<A *>(p.delta)[row] = sum;
}


template <class T, int DMAX, int B, int CS>
__global__ void __launch_bounds__(B * 2, 1) attn_bwd_dkdv_kernel(AttnParams p) {
    using A = acc_t<T>;
    constexpr int NT = B / 8, DT = DMAX / 8 / CS;
    const ColSlice<DMAX, CS> cs(int(blockIdx.x % CS), p.a.d);
    const int64_t cta = blockIdx.x / CS;
    WAVEPE_SHARED_BASE(smem);
    const bool has_table = p.pos_enc == WAVEPE_CUDA_PE_TABLE;
    const BwdLayout<T, B> L(p.d_pad, has_table);
    T *Ks = reinterpret_cast<T *>(smem + L.plan.off[L.a]);
    T *Vs = reinterpret_cast<T *>(smem + L.plan.off[L.b]);
    T *Qs = reinterpret_cast<T *>(smem + L.plan.off[L.c]);
    T *dOs = reinterpret_cast<T *>(smem + L.plan.off[L.dd]);
    T *Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    A *Gs = reinterpret_cast<A *>(smem + L.plan.off[L.g]);
    A *lse_s = reinterpret_cast<A *>(smem + L.plan.off[L.lse]);
    A *delta_s = reinterpret_cast<A *>(smem + L.plan.off[L.delta]);
    uint8_t *kmask = smem + L.plan.off[L.mask];
    const int ld = tile_ld<T>(p.d_pad), gld = g_ld<A>(B);
    const int warp = threadIdx.x / 32, t4 = threadIdx.x & 3;
    A *pscr = reinterpret_cast<A *>(smem + L.plan.off[L.pscr]) + warp * rb_scratch_elems<T>(B);
    // key c is seen by the queries at positions [qlo[c], qhi[c]) (empty: by none)
    int64_t *const qlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const qhi = qlo + B;
    const int ksteps = int(p.d_pad / 16), dt_active = cs.dt_active;

    const int64_t nblocks = ceil_div(p.a.n, B);
    const int64_t nb = cta % nblocks, bhk = cta / nblocks;
    const int64_t b = bhk / p.a.kv_heads, hk = bhk % p.a.kv_heads;
    const int64_t n0 = nb * B, wn0 = n0 + 16 * warp;
    const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
    const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
    load_key_queries(qlo, qhi, kmask, B, p, b, n0);
    __syncthreads();
    load_tile(Ks, ld, B, p.a.d, p.d_pad, p.vec_k, [&](int r) -> const T * {
        return kmask[r] ? nullptr : kg + (n0 + r) * p.a.k_strides[2];
    });
    load_tile(Vs, ld, B, p.a.d, p.d_pad, p.vec_v, [&](int r) -> const T * {
        return kmask[r] ? nullptr : vg + (n0 + r) * p.a.v_strides[2];
    });

    A dk[DT][4], dv[DT][4];
    zero_frags(dk);
    zero_frags(dv);
    const A scale = A(p.a.scale);
    const KeyBlockQueries kq = key_block_queries(qlo, qhi, B, B, p);
    const int64_t i_start = kq.i_start, i_end = kq.i_end;
    const A scale_log2 = scale * A(kLog2e);  // as the forward's scores (scores_log2)
    // the band split's second partial (kGeneralBandSplit): the tensor-core dK/dV's CTA holding these keys took the
    // interior query blocks beyond its band, [sib, sbb) and [sbe, sie) (this CTA's blocks: 16 rows), every head's
    int64_t sib = 0, sbb = 0, sbe = 0, sie = 0;
    if constexpr (kGeneralBandSplit<T, DMAX>) {
        static_assert(B == kTc256DkdvRows, "the general dK/dV's query blocks: the tensor-core one's");
        KeyBlockQueries g = kq;
        if (p.band_part == 2 && dkdv_band_split_blocks<kTc256DkdvKeys, kTc256DkdvRows>(p, b, n0, B, g, sbb, sbe))
            sib = g.ib, sie = g.ie;
    }
    for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
        const int64_t bh = b * p.a.heads + h;
        const A slope_log2 = head_slope<T>(p, h) * A(kLog2e);
        const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
        const T *gog = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1];
        for (int64_t i = i_start; i < i_end; ++i) {
            if (kGeneralBandSplit<T, DMAX> && ((i >= sib && i < sbb) || (i >= sbe && i < sie))) continue;  // (uniform)
            const int64_t m0 = i * B;
            const int64_t base = p.a.q_offset + m0 - n0 - p.a.r_lo;
            const bool tile_bias = has_table && table_rows_hit(p, base - (B - 1), base + B - 1);
            __syncthreads();  // previous query block consumed
            load_tile(Qs, ld, B, p.a.d, p.d_pad, p.vec_q, [&](int r) -> const T * {
                const int64_t m = m0 + r;
                return m < p.a.m ? qg + m * p.a.q_strides[2] : nullptr;
            });
            load_tile(dOs, ld, B, p.a.d, p.d_pad, p.vec_go, [&](int r) -> const T * {
                const int64_t m = m0 + r;
                return m < p.a.m ? gog + m * p.a.dout_strides[2] : nullptr;
            });
            for (int r = threadIdx.x; r < B; r += blockDim.x) {
                const int64_t m = m0 + r;
                const A l = m < p.a.m ? static_cast<const A *>(p.a.lse)[bh * p.a.m + m] : neg_inf<A>();
                lse_s[r] = l == neg_inf<A>() || l == -neg_inf<A>() ? neg_inf<A>() : l * A(kLog2e);  // (row_stats)
                delta_s[r] = m < p.a.m ? static_cast<const A *>(p.delta)[bh * p.a.m + m] : A(0);
            }
            if (tile_bias)
                load_tile(Ts, ld, 2 * B, p.a.d, p.d_pad, p.vec_t,
                          [&](int w) -> const T * { return window_row_ptr<T>(p, base, B, w); });
            __syncthreads();
            if (tile_bias) {  // warp w: G of query group w (zeros outside the table)
                A *gw = Gs + warp * 16 * gld;
                if (table_rows_hit(p, base + 16 * warp - (B - 1), base + 16 * warp + 15)) {
                    warp_window_products<T, B>(gw, gld, Qs + 16 * warp * ld, Ts + 16 * warp * ld, ld, ksteps);
                } else {
                    for (int e = threadIdx.x & 31; e < 16 * gld; e += 32) gw[e] = A(0);
                }
            }
            __syncthreads();
            if (wn0 >= p.a.n) continue;  // warp-uniform
            int c_lo[2], c_hi[2];
            if (!lane_key_columns(p, qlo, qhi, warp, m0, B, c_lo, c_hi)) continue;  // (no query sees a key)

            // S^T (16 keys x B queries) and dP^T = V dO^T; then P^T into st, dS^T into dpt
            A st[NT][4], dpt[NT][4];
            zero_frags(st);
            warp_abt<T, NT>(st, Ks + 16 * warp * ld, ld, Qs, ld, ksteps);
            zero_frags(dpt);
            warp_abt<T, NT>(dpt, Vs + 16 * warp * ld, ld, dOs, ld, ksteps);
            const A *gq = tile_bias ? Gs : nullptr;
            if (p.cap_log2 > 0.0)  // uniform: the soft-cap's loop, or the plain one
                dkdv_probs<true>(st, dpt, p, gq, gld, 16 * warp, p.a.q_offset + m0 - wn0, c_lo, c_hi, lse_s, delta_s,
                                 scale_log2, slope_log2);
            else
                dkdv_probs<false>(st, dpt, p, gq, gld, 16 * warp, p.a.q_offset + m0 - wn0, c_lo, c_hi, lse_s,
                                  delta_s, scale_log2, slope_log2);
            warp_rb<T, NT, DT>(dv, st, dOs + cs.c0, ld, dt_active, pscr);
            warp_rb<T, NT, DT>(dk, dpt, Qs + cs.c0, ld, dt_active, pscr);
        }
    }

    if (wn0 >= p.a.n) return;  // after the last barrier
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        const int64_t n = wn0 + frag_row(2 * ri);
        if (n >= p.a.n) continue;
        const int64_t row = (b * p.a.kv_heads + hk) * p.a.n + n;
        T *dkr = static_cast<T *>(p.a.dk) + row * p.a.d;
        T *dvr = static_cast<T *>(p.a.dv) + row * p.a.d;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = cs.c0 + dt * 8 + 2 * t4 + e;
                if (dt < dt_active && col < p.a.d) {
                    if constexpr (kGeneralBandSplit<T, DMAX>) {
                        if (p.band_part == 2) {  // the first partial's fp32 sums (dK's rows, then dV's)
                            const float *const sk = static_cast<const float *>(p.split_dkv) + row * p.a.d;
                            dk[dt][2 * ri + e] += sk[col];
                            dv[dt][2 * ri + e] += sk[p.a.batch * p.a.kv_heads * p.a.n * p.a.d + col];
                        }
                    }
                    dkr[col] = from_acc<T>(dk[dt][2 * ri + e] * scale);
                    dvr[col] = from_acc<T>(dv[dt][2 * ri + e]);
                }
            }
    }
}

template <class T, int DMAX, int B, int CS>
__global__ void __launch_bounds__(B * 2, 1) attn_bwd_dq_kernel(AttnParams p) {
    using A = acc_t<T>;
    constexpr int NT = B / 8, GT = (B + 16) / 8, DT = DMAX / 8 / CS;
    const ColSlice<DMAX, CS> cs(int(blockIdx.x % CS), p.a.d);
    const int64_t cta = blockIdx.x / CS;
    WAVEPE_SHARED_BASE(smem);
    const bool has_table = p.pos_enc == WAVEPE_CUDA_PE_TABLE;
    const BwdLayout<T, B> L(p.d_pad, has_table);
    T *Qs = reinterpret_cast<T *>(smem + L.plan.off[L.a]);
    T *dOs = reinterpret_cast<T *>(smem + L.plan.off[L.b]);
    T *Ks = reinterpret_cast<T *>(smem + L.plan.off[L.c]);
    T *Vs = reinterpret_cast<T *>(smem + L.plan.off[L.dd]);
    T *Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    A *Gs = reinterpret_cast<A *>(smem + L.plan.off[L.g]);
    uint8_t *kmask = smem + L.plan.off[L.mask];
    const int ld = tile_ld<T>(p.d_pad), gld = g_ld<A>(B);
    const int warp = threadIdx.x / 32, t4 = threadIdx.x & 3;
    A *pscr = reinterpret_cast<A *>(smem + L.plan.off[L.pscr]) + warp * rb_scratch_elems<T>(B);
    int64_t *const rlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const rhi = rlo + B;
    const int64_t *const wlo = rlo + 16 * warp, *const whi = rhi + 16 * warp;  // this warp's rows
    const int ksteps = int(p.d_pad / 16), dt_active = cs.dt_active;

    const int64_t mblocks = ceil_div(p.a.m, B);
    const int64_t mb = mblocks - 1 - cta % mblocks, bh = cta / mblocks;
    const int64_t b = bh / p.a.heads, h = bh % p.a.heads, hk = h / p.group;
    const int64_t m0 = mb * B, wm0 = m0 + 16 * warp;
    const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
    const T *gog = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1];
    const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
    const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
    load_tile(Qs, ld, B, p.a.d, p.d_pad, p.vec_q, [&](int r) -> const T * {
        const int64_t m = m0 + r;
        return m < p.a.m ? qg + m * p.a.q_strides[2] : nullptr;
    });
    load_tile(dOs, ld, B, p.a.d, p.d_pad, p.vec_go, [&](int r) -> const T * {
        const int64_t m = m0 + r;
        return m < p.a.m ? gog + m * p.a.dout_strides[2] : nullptr;
    });
    A lse2[2], dl[2];
    row_stats(lse2, dl, p, bh, wm0);
    const A scale = A(p.a.scale), slope = head_slope<T>(p, h);
    A dq[DT][4];
    zero_frags(dq);

    // the key blocks some row of this CTA sees (keys [rlo[0], rhi[B - 1]), read from shared
    // memory where used: not held in registers across the loop)
    load_row_keys(rlo, rhi, B, p, b, m0);
    __syncthreads();
    const int64_t kb_start = rlo[0] / B, kb_stop = rhi[B - 1] > rlo[0] ? ceil_div(rhi[B - 1], B) : 0;
    const bool warp_rows = wm0 < p.a.m;
    A *gw = Gs + warp * 16 * gld;
    A slope_acc = 0;  // this lane's share of d loss / d slope_h
    // the band split's second partial (kGeneralBandSplit): the tensor-core dQ's CTA holding these rows took its
    // interior key blocks beyond its band, [sib, sbb) and [sbe, sie) -- none where it is a partial last one
    // (band_split_blocks' WHOLE groups: its 64 rows; blocks of 16 keys, this CTA's)
    int64_t sib = kb_stop, sie = kb_stop, sbb = kb_stop, sbe = kb_stop;
    if constexpr (kGeneralBandSplit<T, DMAX>) {
        static_assert(B == kTc256DqKeys && kTc256DqRows % B == 0, "the general dQ's blocks: within the tensor-core one's");
        if (p.band_part == 2)
            band_split_blocks<kTc256DqRows, true>(p, b, m0, kTc256DqKeys, B, kb_stop, sib, sie, sbb, sbe);
    }
    for (int64_t j = kb_start; j < kb_stop; ++j) {
        if (kGeneralBandSplit<T, DMAX> && ((j >= sib && j < sbb) || (j >= sbe && j < sie))) continue;  // (uniform)
        const int64_t n0 = j * B;
        const int64_t base = p.a.q_offset + m0 - n0 - p.a.r_lo;
        const bool tile_bias = has_table && table_rows_hit(p, base - (B - 1), base + B - 1);
        __syncthreads();
        // keys no row of this CTA sees are zero rows (0 * garbage never reaches dQ)
        load_tile(Ks, ld, B, p.a.d, p.d_pad, p.vec_k, [&](int r) -> const T * {
            const int64_t n = n0 + r;
            return key_row_seen(p, b, n, rlo[0], rhi[B - 1]) ? kg + n * p.a.k_strides[2] : nullptr;
        });
        load_tile(Vs, ld, B, p.a.d, p.d_pad, p.vec_v, [&](int r) -> const T * {
            const int64_t n = n0 + r;
            return key_row_seen(p, b, n, rlo[0], rhi[B - 1]) ? vg + n * p.a.v_strides[2] : nullptr;
        });
        if (tile_bias)
            load_tile(Ts, ld, 2 * B, p.a.d, p.d_pad, p.vec_t,
                      [&](int w) -> const T * { return window_row_ptr<T>(p, base, B, w); });
        load_key_mask(kmask, B, p, b, n0);
        __syncthreads();
        if (!warp_rows || n0 >= whi[15] || n0 + B <= wlo[0]) continue;  // warp-uniform: no row sees a key
        const bool warp_bias = tile_bias && table_rows_hit(p, base + 16 * warp - (B - 1), base + 16 * warp + 15);
        A ds[NT][4];
        warp_dscores<T, B>(ds, p, Qs + 16 * warp * ld, dOs + 16 * warp * ld, Ks, Vs, Ts + 16 * warp * ld, gw,
                           warp_bias, ld, gld, ksteps, wm0, n0, kmask, wlo, whi, scale, slope, lse2, dl);
        // dS K (the band's keys row by row where they hold inf/NaN)
        warp_rb_masked<T, NT, DT>(dq, ds, Ks, ld, cs.c0, dt_active, pscr, p, n0, wlo, whi, rlo[0], rhi[B - 1]);
        if (p.a.dslopes != nullptr) slope_grad(slope_acc, ds, p, wm0, n0);
        if (warp_bias) {  // dq += H T_win, H = dS skewed into window columns
            for (int e = threadIdx.x & 31; e < 16 * gld; e += 32) gw[e] = A(0);
            __syncwarp();
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = frag_row(e), c = frag_col(nt, e);
                    gw[r * gld + r - c + B - 1] = ds[nt][e];
                }
            __syncwarp();
            A hr[GT][4];
#pragma unroll
            for (int gt = 0; gt < GT; ++gt)
#pragma unroll
                for (int e = 0; e < 4; ++e) hr[gt][e] = gw[frag_row(e) * gld + frag_col(gt, e)];
            warp_rb<T, GT, DT>(dq, hr, Ts + 16 * warp * ld + cs.c0, ld, dt_active, pscr);
            __syncwarp();
        }
    }

    if (p.a.dslopes != nullptr && cs.c0 == 0) {  // every warp of slice 0 writes its slot (0 without rows)
        slope_acc = warp_sum(slope_acc);
        if ((threadIdx.x & 31) == 0)
            static_cast<A *>(p.slope_part)[(bh * mblocks + mb) * (B / 16) + warp] = slope_acc;  // (p.dq_rows = B)
    }
    if (!warp_rows) return;
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        const int64_t m = wm0 + frag_row(2 * ri);
        if (m >= p.a.m) continue;
        T *dqr = static_cast<T *>(p.a.dq) + (bh * p.a.m + m) * p.a.d;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = cs.c0 + dt * 8 + 2 * t4 + e;
                if (dt < dt_active && col < p.a.d) {
                    if constexpr (kGeneralBandSplit<T, DMAX>) {
                        if (p.band_part == 2)  // the first partial's fp32 sums
                            dq[dt][2 * ri + e] += static_cast<const float *>(p.split_dq)[(bh * p.a.m + m) * p.a.d + col];
                    }
                    dqr[col] = from_acc<T>(dq[dt][2 * ri + e] * scale);
                }
            }
    }
}

// ---- the tensor-core dQ of the models' head dims ----------------------------------------------
// bf16/fp16, head_dim 64, 128 or 256, 16-byte rows of q, k, v and dO (and the table's) (use_tc_dq): the
// FlashAttention-2 loop of the query side.  A CTA owns 64 query rows of a (batch,
// head) (warp w: rows 16w .. 16w+15; Q and dO staged once, lse and D of the lane's rows in registers) and
// walks the key blocks its rows see (32 keys at head_dim 128, 64 at 64, 16 at 256): per block, by ldmatrix from rows
// padded by 16 bytes, S = Q_w K^T and dP = dO_w V^T on the tensor cores 32 keys at a time, dS = P (dP - D)
// in registers, dQ += dS K with dS as the A operand straight from its C fragments (ldmatrix.trans of K).
// K, V (and the key mask) have two buffers: the next block's copies are in flight while this one is
// computed, one barrier a block.  The masked blocks (the causal diagonal, window and document edges,
// padding, soft-cap, the last partial block) run first, through scores_log2_impl, dscores_of and
// warp_rb_masked as attn_bwd_dq_kernel; then the interior blocks -- every row sees every key -- without
// masks (with ALiBi a loop of its own, which also sums d loss / d slope).  With a relative table (TABLE: a
// kernel of its own) the band's interior blocks come first, and they and the masked blocks meeting the
// table add the bias (window_bias_add, the forward's) and dQ += H T_win, H = dS skewed into window columns, built
// in registers (skewed_ds_products); the window has one buffer, refilled after a second barrier.  The wide instance
// (TcDqTiles' MT 2, wide_dq): 128 rows a CTA, 32 a warp, the interior blocks' products for both m-tiles at once.
constexpr int kTcDqRows = 64;  // query rows of a tensor-core dQ CTA (16 a warp; the wide instance's: 2x)
// Head dim 256: blocks of 16 keys (dQ's accumulators take 128 registers a lane; Q and dO 66 KiB of shared
// memory, so that with two buffers of K and V of 16 keys the CTA stays within the 113 KiB that lets two share
// an H100's SM), taken in one chunk.
// MT: the m-tiles of 16 query rows a warp takes -- 1, or 2 (the wide instance, attn_bwd_dq_tc_wide_kernel: each
// K and V fragment of S, dP and dQ ldmatrix'd once for both, ~0.6x the shared-memory bytes per HMMA; head_dim 64
// or 128, no table; the same blocks and chunks of keys: S's and dP's 64 accumulators a lane beside dQ's 128 at 128)
// VONE: V in one buffer (attn_bwd_dq_tc_vone_kernel), a block's keys in one chunk -- at head_dim 256 without a table
// the two buffers take the CTA to 102,432 bytes, 1,056 past the 99 KiB of sm_86, sm_89 and sm_120; with one, 93,984.
// At 64 the two buffers' 56,448 bytes hold one CTA on those 100 KiB SMs; with one, 47,232, two (S's and dP's 32
// accumulators a lane each for the block's 64 keys, beside dQ's 32).
template <class T, int D, int MT, bool VONE = false>
struct TcDqTiles {
    static_assert(D == 64 || D == 128 || D == 256, "the tensor-core dQ's head dims");
    static_assert(MT == 1 || (MT == 2 && D <= 128), "32 rows a warp: head_dim 64 or 128");
    static_assert(!VONE || ((D == 64 || D == 256) && MT == 1), "V in one buffer: the 16-row dQ at head_dim 64 or 256");
    static constexpr int BM = kTcDqRows * MT, BN = D <= 64 ? 64 : D <= 128 ? 32 : 16, LD = D + int(16 / sizeof(T)),
                         KC = VONE ? BN : D <= 128 ? 32 : 16;
    // (with a table the window's bias reaches S, and dS reaches dQ through the window, in registers:
    // window_bias_add, skewed_ds_products -- no scratch)
    SmemPlan plan;
    int q, go, k, v, mask, rows, kv, stats, t;
    __host__ __device__ explicit TcDqTiles(bool table) {
        q = plan.add(sizeof(T) * BM * LD);
        go = plan.add(sizeof(T) * BM * LD);
        k = plan.add(2 * sizeof(T) * BN * LD);  // two buffers of each
        v = plan.add((VONE ? 1 : 2) * sizeof(T) * BN * LD);
        mask = plan.add(2 * BN);
        rows = plan.add(2 * BM * sizeof(int64_t));  // each query row's keys [lo, hi)
        // 32 rows a warp (fewer registers held through the loops): K's and V's first rows of the (batch, kv head),
        // and each query row's lse (log2 domain) and D, read at each block
        kv = plan.add(MT > 1 ? 2 * sizeof(const T *) : 0);
        stats = plan.add(MT > 1 ? BM * sizeof(float2) : 0);
        t = plan.add(table ? sizeof(T) * (BM + BN) * LD : 0);  // the window: one buffer
    }
};
template <class T, int D>
using TcDqLayout = TcDqTiles<T, D, 1>;
static_assert(TcDqLayout<__half, 256>::BM == kTc256DqRows && TcDqLayout<__half, 256>::BN == kTc256DqKeys,
              "the band split onto the general dQ follows these blocks");
template <class T, int D>
using TcDqWideLayout = TcDqTiles<T, D, 2>;

// dq (16 x 8 DT) += H T_win for the warp's dS of key columns [C0, C0 + 8 NT) of a block of BN keys, packed as the
// A fragments of dS K (pack_p_frags: rounded to T), H[r][r - c + BN - 1] = dS[r][c], the skew into window columns:
// H's A fragments are built in registers by window_bias_add's exchange (SkewQuad, W = BN: H[r][x] = dS[r][r + BN - 1
// - x]), a 32-bit word of dS's (elements 2 h, 2 h + 1 of a tile) sent for each element and the half wanted taken by
// the receiver (which half: odd, the same for every lane of a quad), a pair of H's 8-column tiles at a time,
// each multiplied by the window's rows 16 pp .. 16 pp + 15 (b_rows(16 pp): their first row; ldmatrix.trans).  The
// chunk's columns reach H's pairs P0 = (BN - C0) / 16 - NT / 2 .. P0 + NT / 2.  SPLIT (a block in two chunks, BN =
// 16 NT: first C0 = 0, then C0 = 8 NT): the pair both reach (the first's P0, the second's last) is kept by the first
// (SPLIT 1, in `keep`) and joined by the second (SPLIT 2): each chunk's half is exactly 0 where the other's holds a
// value, so OR joins them bit for bit.  (Until 2026-11-29 H went through a scratch of the warp's -- zeroed, 2-byte
// stores of the skew, 2-way bank-conflicted, then ldmatrix --: 16 x (BN + 24) elements a warp of shared memory.)
template <class T, int BN, int NT, int C0, int DT, int LD, int SPLIT, class BR>
WAVEPE_DEVICE void skewed_ds_products(float (&acc)[DT][4], const uint32_t (&pa)[NT / 2][4], const BR &b_rows,
                                      uint32_t (&keep)[4]) {
    constexpr int P0 = (BN - C0) / 16 - NT / 2, P1 = P0 + NT / 2;
    static_assert(BN % 16 == 0 && NT % 2 == 0 && P0 >= 0 && P1 <= BN / 16, "pairs of H's tiles inside the window");
    static_assert(SPLIT == 0 ? C0 == 0 && BN == 8 * NT : BN == 16 * NT && C0 == (SPLIT - 1) * 8 * NT, "the chunks");
    const int lane = threadIdx.x & 31;
    const SkewQuad sq(lane >> 2);
    // (two chunks, head_dim 64: the warp is converged here -- wbias is warp-uniform --, said to nvcc, which otherwise
    // guards these shuffles with divergence checks and fallback copies, ~110 instructions in the band loop; at 128 and
    // 256 it guards none, and at 256 ptxas spilled 8 bytes on sm_90 with the __syncwarp)
    if constexpr (SPLIT != 0) __syncwarp();
    // the receiver's halves: element b = 0 the high half of its word where odd (then b = 1 the low: odd[1] is
    // odd[0]'s opposite), else the low and the high
    const unsigned halves = sq.odd[0] ? 0x5432u : 0x7610u;
    // dS's word of chunk tile n (elements 2 h, 2 h + 1), 0 outside the chunk (n known at compile time once unrolled)
    auto word = [&](int n, int h) -> uint32_t {
        const int c = n < 0 ? 0 : n >= NT ? NT - 1 : n;
        return n >= 0 && n < NT ? pa[c / 2][2 * (c % 2) + h] : 0u;
    };
#pragma unroll
    for (int pp = P0; pp <= P1; ++pp) {
        uint32_t a[4];
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int n = h + (BN - C0) / 8 - (2 * pp + e);  // dS's tile (hi; lo: n - 1) of H's tile 2 pp + e
                const uint32_t lo = word(n - 1, h), hi = word(n, h);
                const uint32_t w0 = __shfl_sync(kFullMask, sq.lower[0] ? lo : hi, sq.src[0]);
                const uint32_t w1 = __shfl_sync(kFullMask, sq.lower[1] ? lo : hi, sq.src[1]);
                a[2 * e + h] = __byte_perm(w0, w1, halves);
            }
        if (SPLIT == 1 && pp == P0) {
#pragma unroll
            for (int i = 0; i < 4; ++i) keep[i] = a[i];
            continue;
        }
        if (SPLIT == 2 && pp == P1)
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] |= keep[i];
        const T *const brow = b_rows(16 * pp) + (lane & 15) * LD;  // (as pv_step's)
#pragma unroll
        for (int dt = 0; dt < DT; dt += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, brow + (dt + (lane >> 4)) * 8);
            mma16816<T>(acc[dt], a, b);
            mma16816<T>(acc[dt + 1], a, b + 2);
        }
    }
}

// VONE: V in one buffer (TcDqTiles): a block's V is read by S's and dP's products only, so the next block's V is
// staged after a second barrier, under dS and dQ += dS K (its K, two buffers, at the step's start as elsewhere)
template <class T, int D, bool TABLE, int MT, bool BAND = false, bool ALIBI = false, bool VONE = false>
WAVEPE_DEVICE void attn_bwd_dq_tc_cta(const AttnParams &p) {
    using Lay = TcDqTiles<T, D, MT, VONE>;
    constexpr int BM = Lay::BM, BN = Lay::BN, LD = Lay::LD, KC = Lay::KC, NT = KC / 8, DT = D / 8, KS = D / 16;
    constexpr int WR = 16 * MT;  // the warp's rows
    static_assert(Traits<T>::kTensorCore && BN % KC == 0 && BN <= 2 * KC, "the tensor-core dQ takes bf16/fp16, "
                  "one or two whole chunks");
    static_assert(MT == 1 || !TABLE, "32 rows a warp: no table");  // (nor d loss / d slope: wide_dq)
    static_assert(!ALIBI || (MT > 1 && !BAND), "ALiBi's 32-row instance: one of its own");
    static_assert(!VONE || (!TABLE && !BAND && BN == KC), "V in one buffer: no table, one chunk a block");
    // 32 rows a warp: S's and dP's 16-column steps unrolled by 2 (fully, ptxas hoisted their fragments' loads and
    // spilled: 4 bytes at head_dim 64, more at 128); not unrolled in ALiBi's instance at 128 (by 2: 8 bytes spilled
    // on sm_90)
    constexpr int QK_UNROLL = ALIBI && D == 128 ? 1 : 2;
    WAVEPE_SHARED_BASE(smem);
    constexpr bool has_table = TABLE;  // (a kernel of its own: the others keep their registers)
    // the band split (bwd_band_split): 1, the table-free instance over the interior blocks beyond the band (at
    // head_dim 64 and 128 the wide one -- at 64 on the 100 KiB SMs V's one buffer, VONE: dq_band_first_vone); 2, the
    // table's over the others, adding the first's sums
    auto part_of = [](const AttnParams &q) { return VONE ? q.band_part : band_part_of<D, MT, BAND>(q); };
    const int part = part_of(p);
    const Lay L(has_table);
    T *const Qs = reinterpret_cast<T *>(smem + L.plan.off[L.q]);
    T *const dOs = reinterpret_cast<T *>(smem + L.plan.off[L.go]);
    T *const K0 = reinterpret_cast<T *>(smem + L.plan.off[L.k]);
    T *const V0 = reinterpret_cast<T *>(smem + L.plan.off[L.v]);
    T *const Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    uint8_t *const kmask0 = smem + L.plan.off[L.mask];
    int64_t *const rlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const rhi = rlo + BM;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t *const wlo = rlo + WR * warp, *const whi = rhi + WR * warp;  // this warp's rows (m-tile 0's)

    // (32 rows a warp: 32 bits, fewer registers held to the end -- M < 2^35, blocks of 128 rows; a grid's x < 2^31)
    using Idx = std::conditional_t<MT == 1, int64_t, int>;
    const Idx mblocks = Idx(ceil_div(p.a.m, BM)), cta = Idx(blockIdx.x);
    const Idx mb = mblocks - 1 - cta % mblocks, bh = cta / mblocks;
    const int64_t b = bh / p.a.heads, h = bh % p.a.heads, hk = h / p.group;
    const int64_t m0 = int64_t(mb) * BM, wm0 = m0 + WR * warp;
    const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
    const T *gog = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1];
    const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
    const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
    const int64_t kstride = p.a.k_strides[2], vstride = p.a.v_strides[2];
    const T **const kv_rows = reinterpret_cast<const T **>(smem + L.plan.off[L.kv]);
    float2 *const stats = reinterpret_cast<float2 *>(smem + L.plan.off[L.stats]);
    if constexpr (MT > 1) {  // (visible after the first barrier)
        if (threadIdx.x == 0) kv_rows[0] = kg, kv_rows[1] = vg;
        for (int r = threadIdx.x; r < BM; r += blockDim.x) row_stat(stats[r].x, stats[r].y, p, bh, m0 + r);
    }
    load_row_keys(rlo, rhi, BM, p, b, m0);
    load_tile_async(Qs, LD, BM, D, D, [&](int r) -> const T * {
        return m0 + r < p.a.m ? qg + (m0 + r) * p.a.q_strides[2] : nullptr;
    });
    load_tile_async(dOs, LD, BM, D, D, [&](int r) -> const T * {
        return m0 + r < p.a.m ? gog + (m0 + r) * p.a.dout_strides[2] : nullptr;
    });
    __syncthreads();
    // The key blocks in the order taken: [kb_start, ib) and [ie, kb_stop) -- masks, padding, soft-cap,
    // the last partial block --, then the interior [ib, ie): keys every row sees (from the last row's
    // first key to the first row's last, all < N), whole rows (< M), the table's band [bb, be) first (as
    // the forward's), then [ib, bb) and [be, ie); the n-th lands in buffer n % 2.
    const int64_t cta_lo = rlo[0], cta_hi = rhi[BM - 1];
    const int64_t kb_start = cta_lo / BN, kb_stop = cta_hi > cta_lo ? ceil_div(cta_hi, BN) : kb_start;
    int64_t ib = kb_stop, ie = kb_stop;
    const bool capped = p.cap_log2 > 0.0;
    int64_t bb = ie, be = ie;
    if (D <= 128 && part != 0 && kb_start < kb_stop) {
        // (the band split at 64 and 128: the 128-row group's blocks -- a partial last CTA's too, its rows past M
        // as the wide instance's below)
        band_split_blocks(p, b, m0, BN, BN, kb_stop, ib, ie, bb, be);
    } else if (!(capped && p.pos_enc == WAVEPE_CUDA_PE_ALIBI) && p.a.key_padding_mask == nullptr &&
               (m0 + BM <= p.a.m || MT > 1) && kb_start < kb_stop) {
        // (32 rows a warp: a partial last CTA too, as the wide forward's -- its rows past M hold the last query's
        // keys (load_row_keys), zero Q and dO rows and lse -inf (dS 0 by selection), and are not written)
        const int64_t hi = rhi[0] < p.a.n ? rhi[0] : p.a.n;
        ib = ceil_div(rlo[BM - 1], BN) > kb_start ? ceil_div(rlo[BM - 1], BN) : kb_start;
        ie = hi / BN < kb_stop ? hi / BN : kb_stop;
        if (ie <= ib) ib = ie = kb_stop;
        bb = be = ie;
        if ((has_table || part == 1) && ib < ie) table_band_key_blocks(p, m0, BM, BN, ib, ie, bb, be);
    }
    // (the band's blocks run only in the table's instance; the band split's parts take their blocks alone)
    const int64_t n_head = part == 1 ? 0 : ib - kb_start, n_masked = part == 1 ? 0 : n_head + (kb_stop - ie),
                  n_band = TABLE ? be - bb : 0, n_pre = bb - ib,
                  total = n_masked + n_band + (part == 2 ? 0 : n_pre + (ie - be));
    auto block_of = [=](int64_t t) {
        if (t < n_masked) return t < n_head ? kb_start + t : ie + (t - n_head);
        t -= n_masked;
        return t < n_band ? bb + t : t - n_band < n_pre ? ib + (t - n_band) : be + (t - n_band - n_pre);
    };
    // does the window of key block n0 (table rows c - BN + 1 .. c + BM - 1, c = q_offset + m0 - n0 - r_lo)
    // meet the table -- and that of the warp's rows?
    auto block_bias = [&](int64_t n0) {
        const int64_t c = p.a.q_offset + m0 - n0 - p.a.r_lo;
        return has_table && table_rows_hit(p, c - (BN - 1), c + BM - 1);
    };
    auto warp_bias = [&](int64_t n0) {
        const int64_t c = p.a.q_offset + wm0 - n0 - p.a.r_lo;
        return table_rows_hit(p, c - (BN - 1), c + 15);
    };
    // does the t-th block (key block j) need the window: a band block, or a masked one meeting the table?
    auto needs_window = [&](int64_t t, int64_t j) {
        return t < total && (t < n_masked ? has_table && block_bias(j * BN) : t < n_masked + n_band);
    };
    // The window is a ring: key block j + 1's window rows BN .. BM + BN - 1 are block j's 0 .. BM - 1, so from the
    // band's second block on only its first BN rows are copied, over block j's last BN (after the second barrier:
    // the window's buffer is free) -- a third of the window at head_dim 128, half at 64 (at 256, where it would be a
    // fifth, ptxas spilled 8 bytes with it on sm_90: whole windows there; tried again on 2026-11-30 -- sm_90 would
    // issue ~1,210 instructions a warp a band block for 224 HMMA, not ~1,410 -- with 32-bit block indices, bh held in
    // Q's padding or derived again at the end, the ring's offset a function of the step: each variant spilled 4-20
    // bytes on sm_80 or on sm_90, which take the same PTX).  Row w of the current window sits at
    // (w + ring) mod (BM + BN); a whole window is copied at ring 0.
    constexpr int W = BM + BN;
    constexpr bool kRing = D <= 128;
    int ring = 0;
    auto stage_window = [&](int64_t j) {  // the window of key block j, whole (cp.async; the caller commits)
        ring = 0;
        load_window_async<T, W, D, LD, 128>(Ts, p, p.a.q_offset + m0 - j * BN - p.a.r_lo, BN);
    };
    auto stage_window_next = [&](int64_t j) {  // ... of key block j, the window of j - 1 in place
        ring = ring + W - BN < W ? ring + W - BN : ring - BN;
        load_window_async<T, BN, D, LD, 128>(Ts + ring * LD, p, p.a.q_offset + m0 - j * BN - p.a.r_lo, BN);
    };
    // the window's row r (a multiple of 16: the warp's rows of a 16-row step)
    auto window_rows = [&](int r) {
        const int x = r + ring;
        return Ts + (x < W ? x : x - W) * LD;
    };
    // stage the t-th block, key block j (none: j < 0) (cp.async; zero rows and the key mask by plain stores,
    // visible after the next barrier).  INTERIOR: an interior block (or none): every key present and seen.  WHAT: 1
    // its K (and key mask), 2 its V, 3 both (VONE: V apart, once every warp is done with the block before).
    auto stage = [&](auto interior_tag, int64_t t, int64_t j, auto what_tag) {
        constexpr bool INTERIOR = decltype(interior_tag)::value;
        constexpr int WHAT = decltype(what_tag)::value;
        if (j < 0) return;
        const int64_t n0 = j * BN;
        const int buf = int(t & 1);
        T *const Kb = K0 + buf * BN * LD, *const Vb = V0 + (VONE ? 0 : buf * BN * LD);
        if (INTERIOR || t >= n_masked) {
            const T *const kb = MT > 1 ? kv_rows[0] : kg, *const vb = MT > 1 ? kv_rows[1] : vg;
            if constexpr (WHAT & 1) load_rows_async<T, BN, D, LD, 128>(Kb, kb + n0 * kstride, kstride);
            if constexpr (WHAT & 2) load_rows_async<T, BN, D, LD, 128>(Vb, vb + n0 * vstride, vstride);
        } else {
            // keys no row of the CTA sees are zero rows (0 * garbage never reaches dQ)
            if constexpr (WHAT & 1)
                load_tile_async(Kb, LD, BN, D, D, [&](int r) -> const T * {
                    return key_row_seen(p, b, n0 + r, cta_lo, cta_hi) ? kg + (n0 + r) * kstride : nullptr;
                });
            if constexpr (WHAT & 2)
                load_tile_async(Vb, LD, BN, D, D, [&](int r) -> const T * {
                    return key_row_seen(p, b, n0 + r, cta_lo, cta_hi) ? vg + (n0 + r) * vstride : nullptr;
                });
            if constexpr (WHAT & 1) load_key_mask(kmask0 + buf * BN, BN, p, b, n0);
        }
    };
    using KOnly = std::integral_constant<int, 1>;
    using VOnly = std::integral_constant<int, 2>;
    using KAndV = std::integral_constant<int, 3>;
    using KFirst = std::conditional_t<VONE, KOnly, KAndV>;  // (what a step stages at its start)
    using Interior = std::true_type;
    using AnyBlock = std::false_type;

    // the lane's rows' lse and D (32 rows a warp: read from `stats` at each block instead -- held through the
    // loops, 8 registers, ptxas spilled at head_dim 128)
    float lse2[2], dl[2];
    if constexpr (MT == 1) row_stats(lse2, dl, p, bh, wm0);
    // m-tile mt's: rows g and g + 8 of the lane
    auto staged_stats = [&](float (&l2)[2], float (&d2)[2], int mt) {
        const float2 *const st = stats + WR * warp + 16 * mt + (lane >> 2);
        l2[0] = st[0].x, d2[0] = st[0].y, l2[1] = st[8].x, d2[1] = st[8].y;
    };
    const float scale_log2 = float(p.a.scale) * float(kLog2e), slope = head_slope<T>(p, h);
    const float slope_log2 = slope * float(kLog2e);
    const bool warp_rows = wm0 < p.a.m;
    float dq[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) zero_frags(dq[mt]);
    float slope_acc = 0.f;  // this lane's share of d loss / d slope_h
    // the lanes' ldmatrix addresses: A = the warp's first 16 rows of Q / dO (m-tile mt: 16 mt rows further), B = 16
    // key rows at a time
    const int arow = (WR * warp + (lane & 15)) * LD + 8 * (lane >> 4);
    const int brow = ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
    const int64_t j_first = total > 0 ? block_of(0) : -1;
    stage(AnyBlock{}, 0, j_first, KAndV{});
    if (needs_window(0, j_first)) stage_window(j_first);
    cp_async_commit();  // (with Q and dO)
    const float cap = float(p.cap_log2), cap_k = scale_log2 * float(p.icap_log2);
    // the warp's rows of the window tile (16 w .. 16 w + BN + 15), ldmatrix addressed as K's (a ring or not)
    [[maybe_unused]] auto trow_ring = [&](int r) { return window_rows(16 * warp + r) + brow; };
    [[maybe_unused]] const T *const trow = Ts + 16 * warp * LD + brow;
    // BIAS: 0 the block has no table bias, 1 it has (the band), 2 it has if its window meets the table (masked
    // blocks of a table's call).  The window has one buffer, read through the whole step (the bias, then
    // dQ += H T_win): the next block's is staged after a second barrier (at once when this block has none).
    // The t-th block is key block j, the next one jn (none: -1).
    auto step = [&](auto kind_tag, auto bias_tag, int64_t t, int64_t j, int64_t jn) {
        constexpr int kind = decltype(kind_tag)::value, BIAS = decltype(bias_tag)::value;
        cp_async_wait<0>();
        __syncthreads();  // block t has landed; every warp is done with block t - 1's buffer
        if (kind == kMasked || kind == kPrefix)
            stage(AnyBlock{}, t + 1, jn, KFirst{});
        else
            stage(Interior{}, t + 1, jn, KFirst{});  // (the interior blocks come last)
        const int64_t n0 = j * BN;
        bool bias = false, next_window = false;
        if constexpr (BIAS != 0) {
            bias = BIAS == 1 || block_bias(n0);
            next_window = needs_window(t + 1, jn);
            if (!bias && next_window) stage_window(jn);  // (the window's buffer is free)
        }
        cp_async_commit();
        const int buf = int(t & 1);
        const T *const Kb = K0 + buf * BN * LD, *const Vb = V0 + (VONE ? 0 : buf * BN * LD);
        // warp-uniform: does some row of the warp see a key of the block?
        const bool active =
            (kind != kMasked && kind != kPrefix) || (warp_rows && n0 < whi[WR - 1] && n0 + BN > wlo[0]);
        // the table's bias of the warp's rows: G = Q_w T_win^T skewed (window_bias_add, the forward's), H = dS
        // skewed into window columns, dQ += H T_win
        const bool wbias = BIAS != 0 && bias && active && warp_bias(n0);
        [[maybe_unused]] uint32_t keep[4];  // (skewed_ds_products: H's pair both chunks reach)
        // an interior chunk's dS = P (dP - D) of an m-tile (rows 16 mt ..) in place of its S: keys c0 .. of the block
        auto interior_dscores = [&](float (&sm)[NT][4], const float (&dpm)[NT][4], const float (&l2)[2],
                                    const float (&d2)[2], int mt, int c0) {
            // the distance pos_q - n of the lane's element (0, 0): row g, column 2 t
            const float d0 = float(p.a.q_offset + wm0 + 16 * mt - n0 - c0 + (lane >> 2) - 2 * (lane & 3));
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int ri = e / 2;
                    [[maybe_unused]] const float dist = d0 + float(8 * ri - 8 * nt - e % 2);  // (not kPlain)
                    float x, th = 0.f;
                    if constexpr (kind == kPlain)
                        x = fma_(sm[nt][e], scale_log2, -l2[ri]);
                    else
                        x = interior_score<kind>(sm[nt][e], scale_log2, slope_log2, dist, cap, cap_k, th) - l2[ri];
                    const float dpd = dpm[nt][e] - d2[ri];
                    // a row coded lse +-inf (row_stats: -inf) contributes nothing: 0 by selection
                    const float ds = l2[ri] == neg_inf<float>()
                                         ? 0.f
                                         : exp2_(x) * (kind == kCap ? dpd * (1.f - th * th) : dpd);
                    sm[nt][e] = ds;
                    if constexpr (kind == kAlibi && MT == 1) slope_acc -= ds * fabsf(dist);
                }
        };
        // a masked chunk of m-tile mt (whose rows' keys meet the block's): S (s: zero, or the table's bias) and dP,
        // the masks, dS, dQ += dS K
        // (its S and dP; then masked_rest)
        auto masked_rest = [&](float (&s)[NT][4], float (&dp)[NT][4], int mt, int c0) {
            const int r0 = WR * warp + 16 * mt;
            bool seen[2] = {false, false};  // (the forward's lse already says which rows are NaN)
            scores_log2_impl<2>(s, p, wm0 + 16 * mt, n0 + c0, kmask0 + buf * BN + c0, rlo + r0, rhi + r0, scale_log2,
                                slope_log2, seen);
            if constexpr (MT == 1) {
                dscores_of<2>(s, dp, p, lse2, dl);
            } else {
                float l2[2], d2[2];
                staged_stats(l2, d2, mt);
                dscores_of<2>(s, dp, p, l2, d2);
            }
            if (MT == 1 && p.a.dslopes != nullptr) slope_grad(slope_acc, s, p, wm0 + 16 * mt, n0 + c0);
            // dS K (the band's keys row by row where they hold inf/NaN)
            warp_rb_masked<T, NT, DT>(dq[mt], s, Kb + c0 * LD, LD, 0, DT, nullptr, p, n0 + c0, rlo + r0, rhi + r0,
                                      cta_lo, cta_hi);
        };
        auto masked_chunk = [&](float (&s)[NT][4], int mt, int c0) {
            warp_abt_ldm<T, NT, KS, LD>(s, Qs + arow + 16 * mt * LD, Kb + c0 * LD + brow);
            float dp[NT][4];
            zero_frags(dp);
            warp_abt_ldm<T, NT, KS, LD>(dp, dOs + arow + 16 * mt * LD, Vb + c0 * LD + brow);
            masked_rest(s, dp, mt, c0);
        };
        // a prefix block (kPrefix): do K's rows of keys some row of the warp does not see hold inf / NaN (dS 0
        // times them would reach it; warp-uniform)?  Then each m-tile's dS K takes warp_rb_masked.
        [[maybe_unused]] bool careful = false;
        if constexpr (kind == kPrefix) {
            if (active) {
                careful = prefix_band_nonfinite<T, BN>(Kb, LD, p, n0, rhi[WR * warp], cta_hi);
            }
        }
        auto chunk = [&](auto c0_tag) {  // KC keys at a time (registers: S and dP of 16 x KC an m-tile)
            constexpr int c0 = decltype(c0_tag)::value;
            if constexpr (MT > 1) {
                if constexpr (kind == kMasked) {
                    // 32 rows a warp: each m-tile in turn, as a 16-row warp takes it (these blocks are O(1) a
                    // query block)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const int r0 = WR * warp + 16 * mt;  // warp-uniform: does some row of the m-tile see a key?
                        if (wm0 + 16 * mt < p.a.m && n0 < rhi[r0 + 15] && n0 + BN > rlo[r0]) {
                            float s[NT][4];
                            zero_frags(s);
                            masked_chunk(s, mt, c0);
                        }
                    }
                } else {
                    // both m-tiles' S and dP, each K and V fragment ldmatrix'd once for them; dS packed as the A
                    // operand (S's and dP's fp32 die); dQ += dS K, each K fragment read once for both.  A prefix
                    // block: each row's dS past its last key 0 by selection (its S or dP may be inf / NaN there)
                    float s[MT][NT][4], dp[MT][NT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) zero_frags(s[mt]), zero_frags(dp[mt]);
                    qk_products_rows<T, NT, KS, LD, MT, QK_UNROLL>(s, Qs + arow, Kb + c0 * LD + brow);
                    qk_products_rows<T, NT, KS, LD, MT, QK_UNROLL>(dp, dOs + arow, Vb + c0 * LD + brow);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        float l2[2], d2[2];
                        staged_stats(l2, d2, mt);
                        interior_dscores(s[mt], dp[mt], l2, d2, mt, c0);
                        if constexpr (kind == kPrefix) {
#pragma unroll
                            for (int ri = 0; ri < 2; ++ri) {
                                const int lim =
                                    prefix_row_limit(p, rhi[WR * warp + 16 * mt + frag_row(2 * ri)], n0 + c0, KC);
#pragma unroll
                                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                                    for (int e = 0; e < 2; ++e)
                                        if (frag_col(nt, e) >= lim) s[mt][nt][2 * ri + e] = 0.f;
                            }
                        }
                    }
                    if (kind == kPrefix && careful) {  // (warp-uniform)
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            const int r0 = WR * warp + 16 * mt;
                            warp_rb_masked<T, NT, DT>(dq[mt], s[mt], Kb + c0 * LD, LD, 0, DT, nullptr, p, n0 + c0,
                                                      rlo + r0, rhi + r0, cta_lo, cta_hi);
                        }
                    } else {
                        uint32_t pa[MT][NT / 2][4];
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) pack_p_frags<T, NT>(s[mt], pa[mt]);  // (as warp_rb rounds dS)
                        pv_products_rows<T, NT / 2, DT, MT>(dq, pa, Kb + c0 * LD, LD);
                    }
                }
                return;
            }
            float s[NT][4];
            zero_frags(s);
            if (BIAS != 0 && wbias) {
                if constexpr (kRing)
                    window_bias_add<T, BN, KC, c0, 0, KS, LD, 1>(s, static_cast<const T *>(Qs + arow), trow_ring);
                else
                    window_bias_add<T, BN, KC, c0, 0, KS, LD, 1>(s, static_cast<const T *>(Qs + arow), trow);
            }
            if constexpr (kind == kMasked) {
                masked_chunk(s, 0, c0);
            } else {
                warp_abt_ldm<T, NT, KS, LD>(s, Qs + arow, Kb + c0 * LD + brow);
                float dp[NT][4];
                zero_frags(dp);
                warp_abt_ldm<T, NT, KS, LD>(dp, dOs + arow, Vb + c0 * LD + brow);
                interior_dscores(s, dp, lse2, dl, 0, c0);
                if constexpr (BIAS == 0) warp_rb<T, NT, DT>(dq[0], s, Kb + c0 * LD, LD, DT, nullptr);
            }
            if constexpr (BIAS != 0 && MT == 1) {
                // dS packed (S's fp32 die): dQ += dS K (warp_rb's products), and dQ += H T_win, H[r][r - c + BN - 1]
                // = dS[r][c], from the same words
                uint32_t pa[MT][NT / 2][4];
                if (kind != kMasked || wbias) pack_p_frags<T, NT>(s, pa[0]);
                if constexpr (kind != kMasked) pv_products_rows<T, NT / 2, DT, MT>(dq, pa, Kb + c0 * LD, LD);
                if (wbias) {
                    constexpr int SPLIT = BN > KC ? 1 + c0 / KC : 0;
                    if constexpr (kRing)
                        skewed_ds_products<T, BN, NT, c0, DT, LD, SPLIT>(
                            dq[0], pa[0], [&](int r) { return window_rows(16 * warp + r); }, keep);
                    else
                        skewed_ds_products<T, BN, NT, c0, DT, LD, SPLIT>(
                            dq[0], pa[0], [&](int r) { return Ts + (16 * warp + r) * LD; }, keep);
                }
            }
        };
        if constexpr (VONE) {
            // S and dP (every warp's V read), a barrier, the next block's V staged, then dS and dQ += dS K
            float s[NT][4], dp[NT][4];
            zero_frags(s);
            zero_frags(dp);
            if (active) {
                warp_abt_ldm<T, NT, KS, LD>(s, Qs + arow, Kb + brow);
                warp_abt_ldm<T, NT, KS, LD>(dp, dOs + arow, Vb + brow);
            }
            __syncthreads();  // every warp is done with V
            if (kind == kMasked)
                stage(AnyBlock{}, t + 1, jn, VOnly{});
            else
                stage(Interior{}, t + 1, jn, VOnly{});
            cp_async_commit();
            if (active) {
                if constexpr (kind == kMasked) {
                    masked_rest(s, dp, 0, 0);
                } else {
                    interior_dscores(s, dp, lse2, dl, 0, 0);
                    warp_rb<T, NT, DT>(dq[0], s, Kb, LD, DT, nullptr);
                }
            }
        } else if (active) {
            chunk(std::integral_constant<int, 0>{});
            if constexpr (BN > KC) chunk(std::integral_constant<int, KC>{});
        }
        if constexpr (BIAS != 0) {
            if (bias && next_window) {  // CTA-uniform
                __syncthreads();  // every warp is done with the window
                if (kRing && BIAS == 1 && jn == j + 1)  // (the band's next block)
                    stage_window_next(jn);
                else
                    stage_window(jn);
                cp_async_commit();
            }
        }
    };
    using Masked = std::integral_constant<int, kMasked>;
    using NoBias = std::integral_constant<int, 0>;
    using Band = std::integral_constant<int, 1>;
    using MaybeBias = std::integral_constant<int, 2>;
    auto next_block = [&](int64_t t) { return t + 1 < total ? block_of(t + 1) : int64_t(-1); };
    if constexpr (has_table) {
        for (int64_t t = 0; t < n_masked; ++t) step(Masked{}, MaybeBias{}, t, block_of(t), next_block(t));
    } else {
        // 32 rows a warp at head_dim 64, no padding nor soft-cap (the wide dQ: never ALiBi): the masked blocks whose
        // keys every row of the CTA sees from the first on (from the last row's first key's block on: the causal
        // diagonal; a window's or a document's far edge) come last and run as prefix blocks (kPrefix), both
        // m-tiles at once as an interior block, in a loop of their own (in the masked loop, beside what it holds,
        // ptxas spilled).  Not at 128, where that loop's registers cost the main loop 0.35 instructions an HMMA
        // (ptxas allocated it differently): more than the prefix blocks save beyond L ~ 4k.
        constexpr bool PREFIX_LOOP = MT > 1 && D <= 64 && !BAND && !ALIBI;
        int64_t n_plain = n_masked;
        if (PREFIX_LOOP && !capped && p.a.key_padding_mask == nullptr) {
            const int64_t first = ceil_div(rlo[BM - 1], BN);
            n_plain = (first < kb_start ? kb_start : first > kb_stop ? kb_stop : first) - kb_start;
            n_plain = n_plain < n_masked ? n_plain : n_masked;
        }
        for (int64_t t = 0; t < n_plain; ++t) step(Masked{}, NoBias{}, t, block_of(t), next_block(t));
        if constexpr (PREFIX_LOOP)
            for (int64_t t = n_plain; t < n_masked; ++t)
                step(std::integral_constant<int, kPrefix>{}, NoBias{}, t, block_of(t), next_block(t));
    }
    // the interior blocks, each next one without block_of: the band [bb, be), then [ib, bb) and [be, ie)
    auto interior = [&](auto kind_tag) {
        // (32-bit block indices, fewer registers through the loop: tc_backward_applies bounds N)
        const int b_lo = int(bb), b_hi = int(be), i_hi = int(ie);
        const int pure_first = part == 2 ? -1 : n_pre > 0 ? int(ib) : b_hi < i_hi ? b_hi : -1;
        int t = int(n_masked);
        if constexpr (TABLE) {
            for (int j = b_lo; j < b_hi; ++j, ++t) step(kind_tag, Band{}, t, j, j + 1 < b_hi ? j + 1 : pure_first);
        }
        for (int j = pure_first; j >= 0; ++t) {  // [ib, bb) then [be, ie): one loop
            const int jn = j + 1 == b_lo ? (b_hi < i_hi ? b_hi : -1) : j + 1 < i_hi ? j + 1 : -1;
            step(kind_tag, NoBias{}, t, j, jn);
            j = jn;
        }
    };
    if constexpr (ALIBI)  // (never with a soft-cap: wide_dq)
        interior(std::integral_constant<int, kAlibi>{});
    else if (capped)  // (CTA-uniform; never with ALiBi)
        interior(std::integral_constant<int, kCap>{});
    else if (!TABLE && MT == 1 && p.pos_enc == WAVEPE_CUDA_PE_ALIBI)  // (32 rows a warp: ALiBi's own instance)
        interior(std::integral_constant<int, kAlibi>{});
    else
        interior(std::integral_constant<int, kPlain>{});

    if (MT == 1 && p.a.dslopes != nullptr) {  // every warp writes its slot (0 without rows): p.dq_rows = BM
        slope_acc = warp_sum(slope_acc);
        if (lane == 0) static_cast<float *>(p.slope_part)[(bh * mblocks + mb) * (BM / 16) + warp] = slope_acc;
    }
    if (!warp_rows) return;
    const float scale = float(p.a.scale);
#pragma unroll
    for (int r2 = 0; r2 < 2 * MT; ++r2) {  // m-tile r2 / 2's rows g (ri 0) and g + 8 (ri 1)
        const int mt = r2 / 2, ri = r2 % 2;
        const int64_t m = wm0 + 16 * mt + frag_row(2 * ri);
        if (m >= p.a.m) continue;
        T *dqr = static_cast<T *>(p.a.dq) + (bh * p.a.m + m) * p.a.d;
        float *sq = static_cast<float *>(p.split_dq) + (bh * p.a.m + m) * p.a.d;  // (band split)
        // (the part read again: no register held through the loops -- held, ptxas spilled 8 bytes on sm_80)
        const int end_part = part_of(p);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            const int col = dt * 8 + 2 * (lane & 3);
            if (end_part == 1) {  // the sums beyond the band, for the second launch
                *reinterpret_cast<float2 *>(sq + col) = float2{dq[mt][dt][2 * ri], dq[mt][dt][2 * ri + 1]};
                continue;
            }
            if (end_part == 2) {
                const float2 q2 = *reinterpret_cast<const float2 *>(sq + col);
                dq[mt][dt][2 * ri] += q2.x, dq[mt][dt][2 * ri + 1] += q2.y;
            }
#pragma unroll
            for (int e = 0; e < 2; ++e) dqr[col + e] = from_acc<T>(dq[mt][dt][2 * ri + e] * scale);
        }
    }
}

template <class T, int D, bool TABLE>
__global__ void __launch_bounds__(128, 2) attn_bwd_dq_tc_kernel(AttnParams p) {
    attn_bwd_dq_tc_cta<T, D, TABLE, 1>(p);
}

// V in one buffer (TcDqTiles' VONE), a block's keys in one chunk, no table (use_tc_dq_vone): at head_dim 256 on 99 KiB
// devices, one CTA an SM; at 64 on 100 KiB SMs, two
template <class T, int D>
__global__ void __launch_bounds__(128, D == 64 ? 2 : 1) attn_bwd_dq_tc_vone_kernel(AttnParams p) {
    attn_bwd_dq_tc_cta<T, D, false, 1, false, false, true>(p);
}

// 32 query rows a warp, a 128-row CTA (TcDqWideLayout): table-free calls at head_dim 64 and 128 (wide_dq); BAND,
// the band split's first partial of a table's call (bwd_band_split: the interior blocks beyond its band)
template <class T, int D, bool BAND>
__global__ void __launch_bounds__(128, 2) attn_bwd_dq_tc_wide_kernel(AttnParams p) {
    attn_bwd_dq_tc_cta<T, D, false, 2, BAND>(p);
}
// ALiBi's calls without a soft-cap nor d loss / d slope asked (wide_dq) -- an instance of their own, so that the
// others' loops keep their registers
template <class T, int D>
__global__ void __launch_bounds__(128, 2) attn_bwd_dq_tc_wide_alibi_kernel(AttnParams p) {
    attn_bwd_dq_tc_cta<T, D, false, 2, false, true>(p);
}

// One CTA per (tile diagonal, group of batch*heads): the partial dT of its
// window, 2B rows x d, in its own workspace slot.  CAP: whether p has a soft-cap (warp_dscores).
template <class T, int DMAX, int B, int CS, bool CAP>
__global__ void __launch_bounds__(B * 2, 1) attn_bwd_dtable_kernel(AttnParams p) {
    using A = acc_t<T>;
    constexpr int NT = B / 8, DT = DMAX / 8 / CS;
    const ColSlice<DMAX, CS> cs(int(blockIdx.x % CS), p.a.d);
    const int64_t cta = blockIdx.x / CS;
    WAVEPE_SHARED_BASE(smem);
    const BwdLayout<T, B> L(p.d_pad, true);
    T *Qs = reinterpret_cast<T *>(smem + L.plan.off[L.a]);
    T *dOs = reinterpret_cast<T *>(smem + L.plan.off[L.b]);
    T *Ks = reinterpret_cast<T *>(smem + L.plan.off[L.c]);
    T *Vs = reinterpret_cast<T *>(smem + L.plan.off[L.dd]);
    T *Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    A *Gs = reinterpret_cast<A *>(smem + L.plan.off[L.g]);
    uint8_t *kmask = smem + L.plan.off[L.mask];
    const int ld = tile_ld<T>(p.d_pad), gld = g_ld<A>(B);
    const int warp = threadIdx.x / 32;
    A *pscr = reinterpret_cast<A *>(smem + L.plan.off[L.pscr]) + warp * rb_scratch_elems<T>(B);
    int64_t *const rlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const rhi = rlo + B;
    const int ksteps = int(p.d_pad / 16), dt_active = cs.dt_active;

    const int64_t mblocks = ceil_div(p.a.m, B), nblocks = ceil_div(p.a.n, B);
    const int64_t diag = cta % p.n_diag, grp = cta / p.n_diag;
    const int64_t delta = diag - (nblocks - 1);  // i - j
    const int64_t base = p.a.q_offset - p.a.r_lo + delta * B;
    if (!table_rows_hit(p, base - (B - 1), base + B - 1)) return;  // CTA-uniform, before any barrier
    if (p.a.causal && -delta * B > p.a.q_offset + B - 1) return;       // every tile of the diagonal is future
    {  // every distance of the diagonal, q_offset + delta B + (r - c) with |r - c| < B, outside the window
        const int64_t dmid = p.a.q_offset + delta * B;
        if (p.a.window > 0 && (dmid - (B - 1) >= p.a.window || dmid + (B - 1) <= -p.a.window)) return;
    }
    load_tile(Ts, ld, 2 * B, p.a.d, p.d_pad, p.vec_t, [&](int w) -> const T * { return window_row_ptr<T>(p, base, B, w); });
    A *part = static_cast<A *>(p.dt_part) + (diag * p.dt_groups + grp) * (2 * B) * p.a.d;
    A *gw = Gs + warp * 16 * gld;
    const A scale = A(p.a.scale);

    const int64_t bh_count = p.a.batch * p.a.heads;
    const int64_t bh_end = (grp + 1) * p.bh_per_group < bh_count ? (grp + 1) * p.bh_per_group : bh_count;
    const int64_t i_begin = delta > 0 ? delta : 0;
    const int64_t i_end = mblocks < nblocks + delta ? mblocks : nblocks + delta;
    for (int64_t bh = grp * p.bh_per_group; bh < bh_end; ++bh) {
        const int64_t b = bh / p.a.heads, h = bh % p.a.heads, hk = h / p.group;
        const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
        const T *gog = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1];
        const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
        const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
        for (int64_t i = i_begin; i < i_end; ++i) {
            const int64_t m0 = i * B, n0 = (i - delta) * B, wm0 = m0 + 16 * warp;
            __syncthreads();  // Gs / tiles / row ranges of the previous tile consumed
            load_row_keys(rlo, rhi, B, p, b, m0);
            __syncthreads();
            if (n0 >= rhi[B - 1] || n0 + B <= rlo[0]) continue;  // CTA-uniform: no row sees a key of the tile
            load_tile(Qs, ld, B, p.a.d, p.d_pad, p.vec_q, [&](int r) -> const T * {
                const int64_t m = m0 + r;
                return m < p.a.m ? qg + m * p.a.q_strides[2] : nullptr;
            });
            load_tile(dOs, ld, B, p.a.d, p.d_pad, p.vec_go, [&](int r) -> const T * {
                const int64_t m = m0 + r;
                return m < p.a.m ? gog + m * p.a.dout_strides[2] : nullptr;
            });
            // keys no row of the tile sees: zero rows
            load_tile(Ks, ld, B, p.a.d, p.d_pad, p.vec_k, [&](int r) -> const T * {
                const int64_t n = n0 + r;
                return key_row_seen(p, b, n, rlo[0], rhi[B - 1]) ? kg + n * p.a.k_strides[2] : nullptr;
            });
            load_tile(Vs, ld, B, p.a.d, p.d_pad, p.vec_v, [&](int r) -> const T * {
                const int64_t n = n0 + r;
                return key_row_seen(p, b, n, rlo[0], rhi[B - 1]) ? vg + n * p.a.v_strides[2] : nullptr;
            });
            load_key_mask(kmask, B, p, b, n0);
            __syncthreads();
            const bool live = wm0 < p.a.m && n0 < rhi[16 * warp + 15] && n0 + B > rlo[16 * warp];
            A ds[NT][4];
            if (live) {
                A lse2[2], dl[2];
                row_stats(lse2, dl, p, bh, wm0);
                const bool warp_bias = table_rows_hit(p, base + 16 * warp - (B - 1), base + 16 * warp + 15);
                warp_dscores<T, B, CAP ? 1 : 0>(ds, p, Qs + 16 * warp * ld, dOs + 16 * warp * ld, Ks, Vs, Ts + 16 * warp * ld, gw,
                                   warp_bias, ld, gld, ksteps, wm0, n0, kmask, rlo + 16 * warp, rhi + 16 * warp, scale, head_slope<T>(p, h), lse2,
                                   dl);
            }
            for (int e = threadIdx.x & 31; e < 16 * gld; e += 32) gw[e] = A(0);
            __syncwarp();
            if (live) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = frag_row(e), c = frag_col(nt, e);
                        gw[r * gld + r - c + B - 1] = ds[nt][e];
                    }
            }
            __syncthreads();
            // dT_win rows 32 warp .. 32 warp + 31 (window row w, query m): H^T Q
#pragma unroll
            for (int sub = 0; sub < 2; ++sub) {
                const int w0 = 32 * warp + 16 * sub;
                A ht[NT][4];
#pragma unroll
                for (int mt = 0; mt < NT; ++mt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int w = w0 + frag_row(e), m = frag_col(mt, e), gq = m / 16, c = w - 16 * gq;
                        ht[mt][e] = (c >= 0 && c < B + 16) ? Gs[(gq * 16 + m % 16) * gld + c] : A(0);
                    }
                A acc[DT][4];
                zero_frags(acc);
                warp_rb<T, NT, DT>(acc, ht, Qs + cs.c0, ld, dt_active, pscr);
#pragma unroll
                for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int w = w0 + frag_row(e), col = cs.c0 + frag_col(dt, e);
                        if (dt < dt_active && col < p.a.d) part[w * p.a.d + col] += acc[dt][e];
                    }
            }
        }
    }
}

// ---- the tensor-core dT of a learned table ----------------------------------------------------
// bf16/fp16, head_dim 64 or 128, 16-byte rows (use_tc_dtable): attn_bwd_dtable_kernel's diagonal walk on the
// tensor cores, tiles of 64 x 64 (the window: 128 table rows, staged once a CTA).  A CTA per (tile diagonal,
// group of batch*heads, 64-column slice of dT) walks the diagonal's tiles of each head of its group: warp w
// recomputes dS of its 16 query rows against the tile's 64 keys (S = Q K^T + the window's bias, dP = dO V^T,
// 32 keys at a time, as the tensor-core dQ: qk_products and window_bias_add from the warp's Q fragments, held in
// registers for the tile; warp_abt_ldm) and stores it skewed into window columns
// in the CTA's H tile (H[m][m - n + 63] = dS[m][n], rounded to the input type as the dQ's H); after a barrier
// it accumulates window rows 32 w .. 32 w + 31 of dT_win += H^T Q (warp_htb) in registers (64 a lane) over
// every tile and head, and writes its columns of the CTA's workspace slot once, at the end.  The tiles with
// masks (the causal diagonal, window and document edges, padding, partial tiles) are taken in a loop of their
// own, then the interior ones (every row sees every key) without masks.  A tile's copies (cp.async) are waited
// for at once, not overlapped with the products: the dT pass runs on the table's band only (a few diagonals of
// the causal triangle), and two CTAs an SM overlap one's copies with the other's products instead.
// Two CTAs of 103 KiB an H100 / H200 SM at head_dim 128 (228 KiB, 1 KiB reserved a CTA): H takes dO's place
// (rows alike there: HLDT == LD), since a warp reads only its own 16 rows of dO (dP) and writes only its own
// rows of H -- the dP of both chunks first, then the warp's rows of H zeroed and written --; and the key mask
// lives in the window's last row, which no distance of a tile uses (its H column stays 0; window_bias_add's
// products read the row but drop its column: any bytes there are harmless).
// KSPLIT (attn_bwd_dtable_tc_ksplit_kernel, head_dim 128 where a CTA may not take 103 KiB: sm_86, sm_89 and
// sm_120 grant 99): K's tile holds its first KC rows only (94.5 KiB); its last KC land in V's first KC rows once
// every warp has read those (the first chunk's dP), while the first chunk's dS is computed.
template <class T, int D, bool KSPLIT = false>
struct TcDtLayout {
    static_assert(D == 64 || D == 128, "the tensor-core dT's head dims");
    static constexpr int B = 64, KC = 32, CS = D / 64, LD = D + int(16 / sizeof(T));
    static constexpr int KROWS = KSPLIT ? KC : B;  // K's rows staged at the tile's start
    // H's rows (queries) HLDT elements apart, an odd number of 16-byte units: ldmatrix.trans without conflicts (the
    // window's bias reaches S by shuffles, as the dQ's: window_bias_add)
    static constexpr int HLDT = 2 * B + 8;
    static_assert((HLDT * sizeof(T) / 16) % 2 == 1, "conflict-free scratch rows");
    static constexpr bool H_OVER_DO = HLDT == LD;
    static_assert(LD * sizeof(T) >= B, "the key mask fits in the window's last row");
    SmemPlan plan;
    int q, go, k, v, t, h, rows;
    __host__ __device__ TcDtLayout() {
        q = plan.add(sizeof(T) * B * LD);
        go = plan.add(sizeof(T) * B * LD);
        k = plan.add(sizeof(T) * KROWS * LD);
        v = plan.add(sizeof(T) * B * LD);
        t = plan.add(sizeof(T) * 2 * B * LD);  // the window: rows 0 .. 2B - 2; row 2B - 1 holds the key mask
        h = H_OVER_DO ? go : plan.add(sizeof(T) * B * HLDT);
        rows = plan.add(2 * B * sizeof(int64_t));  // each query row's keys [lo, hi)
    }
};

// acc[j][dt] (window rows 16 j .. 16 j + 15 of the warp's 32, columns 8 dt ..) += H^T . B over 16 KT16 query
// rows: H^T's fragments by ldmatrix.trans from H (rows = queries, HLDT apart; hcol = the lane's address: query
// row (l % 8) + 8 (l / 16), window column 8 ((l / 8) % 2) from the warp's first), B's (the queries' rows, LD
// apart: Q) by ldmatrix.trans as pv_step's; each B fragment serves both 16-row halves.
template <class T, int KT16, int DT, int LD, int HLDT>
WAVEPE_DEVICE void warp_htb(float (&acc)[2][DT][4], const T *hcol, const T *b_tile) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < KT16; ++kk) {
        uint32_t a0[4], a1[4];
        ldmatrix_x4_trans(a0, hcol + kk * 16 * HLDT);
        ldmatrix_x4_trans(a1, hcol + kk * 16 * HLDT + 16);
        const T *brow = b_tile + (kk * 16 + (lane & 15)) * LD + 8 * (lane >> 4);
#pragma unroll
        for (int dt = 0; dt < DT; dt += 2) {
            uint32_t bf[4];
            ldmatrix_x4_trans(bf, brow + dt * 8);
            mma16816<T>(acc[0][dt], a0, bf);
            mma16816<T>(acc[0][dt + 1], a0, bf + 2);
            mma16816<T>(acc[1][dt], a1, bf);
            mma16816<T>(acc[1][dt + 1], a1, bf + 2);
        }
    }
}

// CAP: whether p has a soft-cap (an instance each, as attn_bwd_dtable_kernel's); KSPLIT: TcDtLayout's.
template <class T, int D, bool CAP, bool KSPLIT>
WAVEPE_DEVICE void dtable_tc_cta(const AttnParams &p) {
    using Lay = TcDtLayout<T, D, KSPLIT>;
    constexpr int B = Lay::B, KC = Lay::KC, LD = Lay::LD, HLDT = Lay::HLDT;
    constexpr int NT = KC / 8, KS = D / 16, DTS = 64 / 8;
    static_assert(Traits<T>::kTensorCore && B == 2 * KC, "the tensor-core dT takes bf16/fp16, two chunks a tile");
    WAVEPE_SHARED_BASE(smem);
    const Lay L;
    T *const Qs = reinterpret_cast<T *>(smem + L.plan.off[L.q]);
    T *const dOs = reinterpret_cast<T *>(smem + L.plan.off[L.go]);
    T *const Ks = reinterpret_cast<T *>(smem + L.plan.off[L.k]);
    T *const Vs = reinterpret_cast<T *>(smem + L.plan.off[L.v]);
    T *const Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    T *const Hs = reinterpret_cast<T *>(smem + L.plan.off[L.h]);
    uint8_t *const kmask = reinterpret_cast<uint8_t *>(Ts + (2 * B - 1) * LD);
    int64_t *const rlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const rhi = rlo + B;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t *const wlo = rlo + 16 * warp, *const whi = rhi + 16 * warp;  // this warp's rows
    const int col0 = int(blockIdx.x % Lay::CS) * 64;
    const int64_t cta = blockIdx.x / Lay::CS;

    const int64_t mblocks = ceil_div(p.a.m, B), nblocks = ceil_div(p.a.n, B);
    const int64_t diag = cta % p.n_diag, grp = cta / p.n_diag;
    const int64_t delta = diag - (nblocks - 1);  // i - j
    const int64_t base = p.a.q_offset - p.a.r_lo + delta * B;
    // (attn_bwd_dtable_kernel's: CTA-uniform, before any barrier)
    if (!table_rows_hit(p, base - (B - 1), base + B - 1)) return;
    if (p.a.causal && -delta * B > p.a.q_offset + B - 1) return;
    {
        const int64_t dmid = p.a.q_offset + delta * B;
        if (p.a.window > 0 && (dmid - (B - 1) >= p.a.window || dmid + (B - 1) <= -p.a.window)) return;
    }
    load_window_async<T, 2 * B - 1, D, LD, 128>(Ts, p, base, B);
    cp_async_commit();
    // the window's last row: defined bytes, the key mask's written per masked tile
    for (int e = threadIdx.x; e < int(LD * sizeof(T) / 16); e += 128) zero16(kmask + 16 * e);
    // a row's entries of H outside its window columns [m, m + B) stay 0: every tile writes all of those (in dO's
    // place, each warp zeroes its rows a tile)
    if constexpr (!Lay::H_OVER_DO)
        for (int e = threadIdx.x; e < int(B * HLDT * sizeof(T) / 16); e += 128)
            zero16(reinterpret_cast<unsigned char *>(Hs) + 16 * e);

    const int64_t bh_count = p.a.batch * p.a.heads, bh_lo = grp * p.bh_per_group;
    const int64_t bh_hi = bh_lo + p.bh_per_group < bh_count ? bh_lo + p.bh_per_group : bh_count;
    const int64_t i_begin = delta > 0 ? delta : 0, i_end = mblocks < nblocks + delta ? mblocks : nblocks + delta;
    // the lanes' ldmatrix addresses: A = the warp's 16 rows of Q / dO, B = 16 key rows at a time (warp_abt_ldm's);
    // the warp's rows of the window (16 w ..), addressed as K's; H^T's (warp_htb)
    const int arow = (16 * warp + (lane & 15)) * LD + 8 * (lane >> 4);
    const int brow = ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
    const T *const trow = Ts + 16 * warp * LD + brow;
    const T *const hcol = Hs + ((lane & 7) + 8 * (lane >> 4)) * HLDT + 32 * warp + 8 * ((lane >> 3) & 1);
    const float scale_log2 = float(p.a.scale) * float(kLog2e), cap = float(p.cap_log2),
                cap_k = scale_log2 * float(p.icap_log2);
    float acc[2][DTS][4];
    zero_frags(acc[0]);
    zero_frags(acc[1]);

    // The tile of head bh, query block i (key block i - delta), when its kind is INTERIOR's.
    auto tile = [&](auto interior_tag, int64_t bh, int64_t i) {
        constexpr bool INTERIOR = decltype(interior_tag)::value;
        const int64_t b = bh / p.a.heads, h = bh % p.a.heads, hk = h / p.group;
        const int64_t m0 = i * B, n0 = (i - delta) * B, wm0 = m0 + 16 * warp;
        __syncthreads();  // the previous tile's rows, tiles and H consumed
        load_row_keys(rlo, rhi, B, p, b, m0);
        __syncthreads();
        const int64_t cta_lo = rlo[0], cta_hi = rhi[B - 1];
        if (n0 >= cta_hi || n0 + B <= cta_lo) return;  // CTA-uniform: no row sees a key of the tile
        // every row sees every key (the ranges are non-decreasing in the row), all present
        const bool interior = p.a.key_padding_mask == nullptr && m0 + B <= p.a.m && n0 + B <= p.a.n &&
                              n0 >= rlo[B - 1] && n0 + B <= rhi[0];
        if (interior != INTERIOR) return;
        const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
        const T *gog = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1];
        const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
        const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
        const int64_t qs = p.a.q_strides[2], gos = p.a.dout_strides[2], ks = p.a.k_strides[2], vs = p.a.v_strides[2];
        // K's rows R0 .. R0 + R - 1 of the tile into dst (KSPLIT: the last KC later, into V's first rows); in a masked
        // tile the keys no row sees are zero rows (0 * garbage never reaches dS)
        auto copy_keys = [&](T *dst, auto r0_tag, auto rows_tag) {
            constexpr int R0 = decltype(r0_tag)::value, R = decltype(rows_tag)::value;
            if constexpr (INTERIOR) {
                load_rows_async<T, R, D, LD, 128>(dst, kg + (n0 + R0) * ks, ks);
            } else {
                load_tile_async(dst, LD, R, D, D, [&](int r) -> const T * {
                    return key_row_seen(p, b, n0 + R0 + r, cta_lo, cta_hi) ? kg + (n0 + R0 + r) * ks : nullptr;
                });
            }
        };
        using C0 = std::integral_constant<int, 0>;  // (the tile's two chunks of keys: from 0, from KC)
        using C1 = std::integral_constant<int, KC>;
        using KRows = std::integral_constant<int, Lay::KROWS>;
        if constexpr (INTERIOR) {
            load_rows_async<T, B, D, LD, 128>(Qs, qg + m0 * qs, qs);
            load_rows_async<T, B, D, LD, 128>(dOs, gog + m0 * gos, gos);
            copy_keys(Ks, C0{}, KRows{});
            load_rows_async<T, B, D, LD, 128>(Vs, vg + n0 * vs, vs);
        } else {
            load_tile_async(Qs, LD, B, D, D, [&](int r) -> const T * {
                return m0 + r < p.a.m ? qg + (m0 + r) * qs : nullptr;
            });
            load_tile_async(dOs, LD, B, D, D, [&](int r) -> const T * {
                return m0 + r < p.a.m ? gog + (m0 + r) * gos : nullptr;
            });
            copy_keys(Ks, C0{}, KRows{});
            // (V's rows as K's: zero where no row of the tile sees the key)
            load_tile_async(Vs, LD, B, D, D, [&](int r) -> const T * {
                return key_row_seen(p, b, n0 + r, cta_lo, cta_hi) ? vg + (n0 + r) * vs : nullptr;
            });
            load_key_mask(kmask, B, p, b, n0);
        }
        cp_async_commit();
        float lse2[2], dl[2];
        row_stats(lse2, dl, p, bh, wm0);  // (while the copies land)
        cp_async_wait<0>();
        __syncthreads();
        // warp-uniform: does some row of the warp see a key of the tile; does its window meet the table?
        const bool live = INTERIOR || (wm0 < p.a.m && n0 < whi[15] && n0 + B > wlo[0]);
        const bool wbias = live && table_rows_hit(p, base + 16 * warp - (B - 1), base + 16 * warp + 15);
        uint32_t qf[KS][4];  // the warp's Q fragments: S and the bias of both chunks
        if (live) {
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) ldmatrix_x4(qf[ks], Qs + arow + 16 * ks);
        }
        using Frags = float[NT][4];  // C fragments of 16 x KC
        // dP = dO V^T of the KC keys from c0 (the warp's rows of dO)
        auto dprobs = [&](auto c0_tag, Frags &dp) {
            constexpr int c0 = decltype(c0_tag)::value;
            zero_frags(dp);
            if (live) warp_abt_ldm<T, NT, KS, LD>(dp, dOs + arow, Vs + c0 * LD + brow);
        };
        // s = dS of the KC keys from c0 (S = the window's bias + Q K^T), from their dP
        auto dscores = [&](auto c0_tag, Frags &s, const Frags &dp) {
            constexpr int c0 = decltype(c0_tag)::value;
            zero_frags(s);
            if (live) {
                if (wbias) {
                    window_bias_add<T, B, KC, c0, 0, KS, LD, 1>(s, qf, trow);
                }
                // (KSPLIT: the second chunk's keys in V's first rows)
                qk_products<T, NT, KS, LD>(s, qf, (KSPLIT && c0 == KC ? Vs : Ks + c0 * LD) + brow);
                if constexpr (INTERIOR) {
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int ri = e / 2;
                            float x, th = 0.f;
                            if constexpr (CAP)
                                x = interior_score<kCap>(s[nt][e], scale_log2, 0.f, 0.f, cap, cap_k, th) - lse2[ri];
                            else
                                x = fma_(s[nt][e], scale_log2, -lse2[ri]);
                            const float dpd = dp[nt][e] - dl[ri];
                            // a row coded lse +-inf (row_stats: -inf) contributes nothing: 0 by selection
                            s[nt][e] = lse2[ri] == neg_inf<float>() ? 0.f
                                                                    : exp2_(x) * (CAP ? dpd * (1.f - th * th) : dpd);
                        }
                } else {
                    bool seen[2] = {false, false};  // (the forward's lse already says which rows are NaN)
                    scores_log2_impl<CAP ? 1 : 0>(s, p, wm0, n0 + c0, kmask + c0, wlo, whi, scale_log2, 0.f, seen);
                    dscores_of<CAP ? 1 : 0>(s, dp, p, lse2, dl);
                }
            }
        };
        // H[m][m - n + B - 1] = dS[m][n] (0 where the warp's rows see no key of the tile)
        auto store_h = [&](auto c0_tag, const Frags &s) {
            constexpr int c0 = decltype(c0_tag)::value;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 16 * warp + frag_row(e);
                    Hs[r * HLDT + r - (c0 + frag_col(nt, e)) + B - 1] = from_acc<T>(s[nt][e]);
                }
        };
        Frags s, dp;
        dprobs(C0{}, dp);
        if constexpr (KSPLIT) {
            // every warp has read V's first KC rows: K's last KC go there, under the first chunk's dS
            __syncthreads();
            copy_keys(Vs, C1{}, C1{});
            cp_async_commit();
        }
        dscores(C0{}, s, dp);
        dprobs(C1{}, dp);  // the warp's last read of its rows of dO
        if constexpr (Lay::H_OVER_DO) {  // H in dO's place: the warp's 16 rows, window columns 0 .. 2B - 1, zeroed
            constexpr int CPR = 2 * B * int(sizeof(T)) / 16;  // 16-byte pieces a row
            __syncwarp();
#pragma unroll
            for (int e = lane; e < 16 * CPR; e += 32)
                zero16(reinterpret_cast<unsigned char *>(Hs + (16 * warp + e / CPR) * HLDT) + 16 * (e % CPR));
            __syncwarp();
        }
        store_h(C0{}, s);
        if constexpr (KSPLIT) {  // K's last KC rows landed (and the zero rows' plain stores seen)
            cp_async_wait<0>();
            __syncthreads();
        }
        dscores(C1{}, s, dp);
        store_h(C1{}, s);
        __syncthreads();  // H is whole
        warp_htb<T, B / 16, DTS, LD, HLDT>(acc, hcol, Qs + col0);
    };
    // the masked tiles, then the interior ones, each over the heads of the group in turn
    auto walk = [&](auto interior_tag) {
        int64_t bh = bh_lo, i = i_begin;
        for (int64_t t = 0, n = (bh_hi - bh_lo) * (i_end - i_begin); t < n; ++t) {
            tile(interior_tag, bh, i);
            if (++i == i_end) {
                i = i_begin;
                ++bh;
            }
        }
    };
    walk(std::false_type{});
    walk(std::true_type{});

    // window rows 32 w + 16 j + (g, g + 8), the slice's columns: this CTA's slot (the fold adds the slots up)
    float *const part = static_cast<float *>(p.dt_part) + (diag * p.dt_groups + grp) * (2 * B) * p.a.d;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int dt = 0; dt < DTS; ++dt)
#pragma unroll
            for (int ri = 0; ri < 2; ++ri) {
                const int w = 32 * warp + 16 * j + frag_row(2 * ri), col = col0 + dt * 8 + 2 * (lane & 3);
                float2 v;
                v.x = acc[j][dt][2 * ri];
                v.y = acc[j][dt][2 * ri + 1];
                copy8(part + w * p.a.d + col, &v);
            }
}
template <class T, int D, bool CAP>
__global__ void __launch_bounds__(128, 2) attn_bwd_dtable_tc_kernel(AttnParams p) {
    dtable_tc_cta<T, D, CAP, false>(p);
}
// Head dim 128 on a device that grants a CTA less than TcDtLayout's 103 KiB (sm_86, sm_89, sm_120: 99 KiB;
// use_tc_dtable_ksplit asks the device): K in two halves (94.5 KiB, one CTA an SM).
template <class T, int D, bool CAP>
__global__ void __launch_bounds__(128, 1) attn_bwd_dtable_tc_ksplit_kernel(AttnParams p) {
    static_assert(D == 128, "K in halves at head_dim 128 only (64's whole tiles take 72 KiB)");
    dtable_tc_cta<T, D, CAP, true>(p);
}

// dT[t] = scale * sum over (diagonal, window row, head group) slots whose
// table row is t (clamp: rows beyond the edges fold into them), in a fixed order.
template <class T, int B>
__global__ void __launch_bounds__(256) attn_bwd_dtable_fold_kernel(AttnParams p) {
    using A = acc_t<T>;
    const A *part = static_cast<const A *>(p.dt_part);
    T *dtable = static_cast<T *>(p.a.dtable);
    const int64_t total = p.a.table_rows * p.a.d;
    const int64_t nblocks = ceil_div(p.a.n, B);
    const int64_t c0 = p.a.q_offset - p.a.r_lo;
    for (int64_t idx = int64_t(blockIdx.x) * 256 + threadIdx.x; idx < total; idx += int64_t(gridDim.x) * 256) {
        const int64_t t = idx / p.a.d, col = idx % p.a.d;
        const bool to_low = p.a.clamp && t == 0, to_high = p.a.clamp && t == p.a.table_rows - 1;
        A sum = 0;
        for (int64_t diag = 0; diag < p.n_diag; ++diag) {
            const int64_t delta = diag - (nblocks - 1);
            const int64_t first = c0 + delta * B - (B - 1);  // table row of window row 0
            int64_t w_lo = to_low ? 0 : t - first, w_hi = to_high ? 2 * B - 2 : t - first;
            if (w_lo < 0) w_lo = 0;
            if (w_hi > 2 * B - 2) w_hi = 2 * B - 2;
            for (int64_t w = w_lo; w <= w_hi; ++w)
                for (int64_t g = 0; g < p.dt_groups; ++g) sum += part[((diag * p.dt_groups + g) * 2 * B + w) * p.a.d + col];
        }
        dtable[idx] = from_acc<T>(sum * A(p.a.scale));
    }
}

// dslopes[h] = sum over batch, query blocks and warps of the dq kernel's slots, in order.
template <class T>
__global__ void __launch_bounds__(128) attn_bwd_dslopes_fold_kernel(AttnParams p) {
    using A = acc_t<T>;
    const int64_t h = int64_t(blockIdx.x) * 128 + threadIdx.x;
    if (h >= p.a.heads) return;
    const int64_t slots = ceil_div(p.a.m, p.dq_rows) * (p.dq_rows / 16);
    const A *part = static_cast<const A *>(p.slope_part);
    A sum = 0;
    for (int64_t b = 0; b < p.a.batch; ++b)
        for (int64_t s = 0; s < slots; ++s) sum += part[(b * p.a.heads + h) * slots + s];
    static_cast<A *>(p.a.dslopes)[h] = sum;
}

size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

// The shared memory of the tensor-core dK/dV and dQ at head dim 64, 128 or 256, with or without the table's
// window (bf16 and fp16 alike: 2-byte elements).
size_t tc_dkdv_smem(int64_t d, bool table) { return tc_layout_bytes<TcDkdvLayout>(d, table); }
size_t tc_dq_smem(int64_t d, bool table) { return tc_layout_bytes<TcDqLayout>(d, table); }

// Do the tensor-core dK/dV and dQ kernels take the call?  bf16/fp16, head_dim 64, 128 or 256, 16-byte rows of
// q, k, v and dO (and the table's), each one's layout within the device's shared memory: past the 99 KiB every
// GPU from sm_80 on grants -- a table at head_dim 128, head_dim 256 -- the device is asked (sm_86, sm_89 and
// sm_120 run the general kernels there); the two passes choose apart.
bool tc_backward_applies(const AttnParams &p) {
    // (M, N < 2^35: the kernels count blocks of 16 or more in 32 bits)
    return (p.a.dtype == WAVEPE_BF16 || p.a.dtype == WAVEPE_F16) && (p.a.d == 64 || p.a.d == 128 || p.a.d == 256) &&
           p.vec_q && p.vec_k && p.vec_v && p.vec_go && (p.pos_enc != WAVEPE_CUDA_PE_TABLE || p.vec_t) &&
           p.a.m < (int64_t(1) << 35) && p.a.n < (int64_t(1) << 35);
}
size_t tc_dkdv_gone_smem(int64_t d) {
    return d == 64 ? TcDkdvTiles<__half, 64, true>(false).plan.total : TcDkdvTiles<__half, 256, true>(false).plan.total;
}
// Does the dK/dV pass run its instance with dO in one buffer (attn_bwd_dkdv_tc_gone_kernel)?  Without a table: at
// head_dim 256 where the whole layout exceeds the device's shared memory and this one does not: the 99 KiB of sm_86,
// sm_89 and sm_120 (102,800 bytes against 94,352), which ran the general dK/dV there (12.4 other instructions per
// HMMA in its main loop on sm_90's SASS); at 64 where an SM holds one CTA of the whole layout and two of this one:
// the 100 KiB SMs of sm_86 and sm_89 -- not sm_120's, where it is a stub (57,488 bytes against 48,272: 4 warps an
// SM, one a scheduler, against 8 -- the forward's argument, wide_holds_sm; the wide dK/dV, 113,896 bytes, does not
// fit there).  Its dO copies wait for
// every warp's dV: latency the two buffers hid, exposed for dK += dS^T Q and the next block's S^T (half of a
// block's HMMA) -- at 64 under the other CTA's products.
bool use_tc_dkdv_gone(const AttnParams &p) {
    if (p.pos_enc == WAVEPE_CUDA_PE_TABLE || !tc_backward_applies(p)) return false;
    if (p.a.d == 256) return !smem_fits_device(tc_dkdv_smem(256, false)) && smem_fits_device(tc_dkdv_gone_smem(256));
    return p.a.d == 64 && device_cc_major() < 10 &&  // (sm_86 / sm_89: a stub at 64 on sm_100 and sm_120)
           second_cta_by_smem(tc_dkdv_smem(64, false), tc_dkdv_gone_smem(64));
}
bool use_tc_dkdv(const AttnParams &p) {
    return tc_backward_applies(p) &&
           (smem_fits_device(tc_dkdv_smem(p.a.d, p.pos_enc == WAVEPE_CUDA_PE_TABLE)) || use_tc_dkdv_gone(p));
}
size_t tc_dq_vone_smem(int64_t d) {
    return d == 64 ? TcDqTiles<__half, 64, 1, true>(false).plan.total : TcDqTiles<__half, 256, 1, true>(false).plan.total;
}
// Does the dQ pass run its instance with V in one buffer (attn_bwd_dq_tc_vone_kernel)?  Without a table: at head_dim
// 256 where the whole layout exceeds the device's shared memory and this one does not: the 99 KiB of sm_86, sm_89 and
// sm_120 (102,432 bytes against 93,984), which ran the general dQ there (17.0 other instructions per HMMA in its
// main loop on sm_90's SASS); at 64 where an SM holds one CTA of the whole layout and two of this one: the 100 KiB
// SMs of sm_86, sm_89 and sm_120 (56,448 bytes against 47,232: 4 warps an SM, one a scheduler, against 8 -- the
// forward's argument, wide_holds_sm; the wide dQ there, 76,944 bytes, holds one CTA too: wide_dq yields).  Its V
// copies wait for every warp's dP: latency the two buffers hid, exposed for the dS and dQ += dS K part of a block
// (a third of its HMMA) -- at 64 under the other CTA's products.
bool dq_vone_64_pays() { return second_cta_by_smem(tc_dq_smem(64, false), tc_dq_vone_smem(64)); }
// Does the band split's first partial of the dQ (bwd_band_split, at 64 and 128) run V's one buffer, not the wide
// instance?  Where it does without a table (use_tc_dq_vone): the wide one's 76,944 bytes hold one CTA there too.
bool dq_band_first_vone(int64_t d) { return d == 64 && dq_vone_64_pays(); }
bool use_tc_dq_vone(const AttnParams &p) {
    if (p.pos_enc == WAVEPE_CUDA_PE_TABLE || !tc_backward_applies(p)) return false;
    if (p.a.d == 256) return !smem_fits_device(tc_dq_smem(256, false)) && smem_fits_device(tc_dq_vone_smem(256));
    return p.a.d == 64 && dq_vone_64_pays();
}
bool use_tc_dq(const AttnParams &p) {
    return tc_backward_applies(p) &&
           (smem_fits_device(tc_dq_smem(p.a.d, p.pos_enc == WAVEPE_CUDA_PE_TABLE)) || use_tc_dq_vone(p));
}
size_t tc_dkdv_wide_smem(int64_t d) {
    return d == 64 ? TcDkdvWideLayout<__half, 64>().plan.total : TcDkdvWideLayout<__half, 128>().plan.total;
}
// Does the dK/dV pass run the wide instance (attn_bwd_dkdv_tc_wide_kernel: 32 keys a warp in 8 warps, P^T and dS^T
// through shared memory)?  At head_dim 64 and 128 without a table (its window would not fit beside the tiles), for
// more than 64 queries (wide_rows_apply, as the wide forward's and dQ's: WAVEPE_CUDA_WIDE=0 keeps such calls on the
// 16-key instance), where the device grants its shared memory (175 KiB at 128: an H100's 227; not an A100's 163 KiB,
// nor the 99 KiB of sm_86, sm_89 and sm_120; 111 KiB at 64) -- at 128 on devices below compute capability 12 only
// (attn_bwd_dkdv_tc_wide_kernel: not built for sm_120 there).  wide_dkdv_fits: all but the bias (a table's call
// runs it as the band split's first partial: bwd_dkdv_band_split).
bool wide_dkdv_fits(const AttnParams &p) {
    return wide_rows_apply(p) && use_tc_dkdv(p) && smem_fits_device(tc_dkdv_wide_smem(p.a.d)) &&
           (p.a.d == 64 || device_cc_major() < 12);
}
bool wide_dkdv(const AttnParams &p) { return p.pos_enc != WAVEPE_CUDA_PE_TABLE && wide_dkdv_fits(p); }
size_t tc_dq_wide_smem(int64_t d) {
    return d == 64 ? TcDqWideLayout<__half, 64>(false).plan.total : TcDqWideLayout<__half, 128>(false).plan.total;
}
// Does the dQ pass run the wide instance (attn_bwd_dq_tc_wide_kernel: 32 query rows a warp, a CTA of 128)?  Each K
// and V fragment a warp reads feeds two HMMA, not one: fewer shared-memory bytes per HMMA in the main loop than the
// 16-row warps', which are over the line an H100's SM serves at the tensor rate (docs/CUDA.md, "Shared-memory
// traffic").  At head_dim 64 and 128 without a table (as wide_forward), for more than 64 queries, where two of its
// CTAs share an SM (at head_dim 128 over 99 KiB: an H100's SM holds two, an A100's one -- 4 warps an SM, which would
// lose to the 16-row instance's 8); WAVEPE_CUDA_WIDE=0 keeps such calls on the 16-row instance
// (wide_rows_allowed).  ALiBi's calls (fixed slopes, as the models' -- not when d loss / d slope is asked: with its
// sums the loop spilled at head_dim 128, 12-56 bytes on sm_90, as it did summing them in the wide dK/dV) without
// a soft-cap run an instance of their own, attn_bwd_dq_tc_wide_alibi_kernel.
// wide_dq_fits: the head dim, the queries and the device (on a table's call the band split's first partial runs
// it: bwd_band_split); wide_dq adds the call's bias, and yields to V in one buffer (use_tc_dq_vone: at 64 on the 100
// KiB SMs, where an SM holds one wide CTA and two of that one).
bool wide_dq_fits(const AttnParams &p) {
    if (!(wide_rows_apply(p) && tc_backward_applies(p))) return false;
    const size_t bytes = tc_dq_wide_smem(p.a.d);
    return bytes <= 99 * 1024 ? true : smem_fits_device(bytes) && device_ctas_by_smem(bytes) >= 2;
}
bool wide_dq(const AttnParams &p) {
    return p.pos_enc != WAVEPE_CUDA_PE_TABLE &&
           (p.pos_enc != WAVEPE_CUDA_PE_ALIBI || (p.a.dslopes == nullptr && p.cap_log2 <= 0.0)) && use_tc_dq(p) &&
           wide_dq_fits(p) && !use_tc_dq_vone(p);
}
// The tensor-core dT (a learned table's gradient): head_dim 64 or 128 (103 KiB at 128; where the device grants
// less -- sm_86, sm_89 and sm_120: 99 KiB -- K in two halves, 94.5 KiB: attn_bwd_dtable_tc_ksplit_kernel).
size_t tc_dtable_smem(int64_t d, bool ksplit = false) {
    return d == 64 ? TcDtLayout<__half, 64>().plan.total
           : ksplit ? TcDtLayout<__half, 128, true>().plan.total
                    : TcDtLayout<__half, 128>().plan.total;
}
bool use_tc_dtable(const AttnParams &p) {
    return p.a.dtable != nullptr && tc_backward_applies(p) && (p.a.d == 64 || p.a.d == 128) &&
           (smem_fits_device(tc_dtable_smem(p.a.d)) || (p.a.d == 128 && smem_fits_device(tc_dtable_smem(128, true))));
}
// (use_tc_dtable given) K in two halves: the device does not grant the whole layout
bool use_tc_dtable_ksplit(const AttnParams &p) { return !smem_fits_device(tc_dtable_smem(p.a.d)); }

// Does the backward's band split divide the dK/dV pass too?  At head_dim 256 (bwd_band_split: always, its window
// costs occupancy); at 64 and 128 where the wide dK/dV may run (wide_dkdv_fits: its first partial's -- 256 bytes
// of shared memory an HMMA at 128 where the 16-key table instance moves 379 on sm_90 -- the second on the 16-key
// table instance, dkdv_band_split_blocks), else it runs once.
bool dkdv_split_applies(const AttnParams &p) { return p.a.d == 256 || wide_dkdv_fits(p); }

// The backward's band split (band_split_pays in attention.cu): the tensor-core dK/dV and dQ both take the call (or
// neither, at head_dim 256 on a 99 KiB device: bwd_band_split_on_general);
// at head_dim 256 each one's window leaves its CTA alone on an SM where two fit without it (151,376 / 160,032
// bytes against 102,800 / 102,432), both split; at 64 and 128 the dQ's first partial runs the wide instance
// (wide_dq_fits; at 64 on the 100 KiB SMs V's one buffer, dq_band_first_vone), the dK/dV's the wide one where it fits
// (bwd_dkdv_band_split); and the fp32 sums the first
// launches leave (dQ's B H M rows; where the dK/dV splits dK's and dV's B Hkv N each) stay within
// kBandSplitWorkspace.
// Do the band split's fp32 sums (dQ's B H M rows; where the dK/dV splits, dK's and dV's B Hkv N each) stay within
// kBandSplitWorkspace?  (Then M < 2^19: band_split_pays's count is short.)
bool bwd_band_split_workspace_fits(const AttnParams &p) {
    int64_t q_rows, kv_rows, rows, bytes;
    return !(wavepe_mul_overflow(p.a.batch, p.a.heads, &q_rows) || wavepe_mul_overflow(q_rows, p.a.m, &q_rows) ||
             wavepe_mul_overflow(p.a.batch, p.a.kv_heads, &kv_rows) || wavepe_mul_overflow(kv_rows, p.a.n, &kv_rows) ||
             wavepe_mul_overflow(kv_rows, dkdv_split_applies(p) ? 2 : 0, &rows) ||
             wavepe_add_overflow(rows, q_rows, &rows) || wavepe_mul_overflow(rows, p.a.d * 4, &bytes) ||
             bytes > int64_t(kBandSplitWorkspace));
}

// The table-free tensor-core dQ / dK/dV at head_dim 256 that this device holds -- with two buffers, else the one-buffer
// instance (99 KiB devices) -- as the band split onto the general kernels runs its first partial on it.
bool tc_dq_256_two_buffers() { return smem_fits_device(tc_dq_smem(256, false)); }
bool tc_dkdv_256_two_buffers() { return smem_fits_device(tc_dkdv_smem(256, false)); }

// On a device that holds the tensor-core backward's CTAs at head_dim 256 without the table's window (93,984 / 94,352
// bytes with V's / dO's one buffer) but not with it (160,032 / 151,376: past the 99 KiB of sm_86, sm_89 and sm_120),
// a table's call ran the general dQ and dK/dV whole (17.0 / 12.4 other instructions per HMMA in their main loops on
// sm_90's SASS, 2 warps a CTA).  The band split onto the general kernels: the interior blocks beyond the band on the
// tensor cores (the first partial: attn_bwd_dq_tc_vone_kernel, attn_bwd_dkdv_tc_gone_kernel -- or the two-buffer
// table-free instances where they fit), leaving their fp32 sums in the workspace; the masked and the band's blocks on
// the general kernels (the second: attn_bwd_dq_kernel / attn_bwd_dkdv_kernel with p.band_part 2, kGeneralBandSplit),
// which step over the first partial's blocks (the tensor-core CTAs': band_split_blocks for the dQ's 64 rows,
// dkdv_band_split_blocks for the dK/dV's 64 keys) and add its sums before their stores -- the same owner CTA for each
// row, a fixed order: deterministic.  From kBandSplitKeysGeneral's keys a row beyond the band, as the forward's
// (band_split_pays_general: a moved block saves most of its time; the round trip, 3 x 4 d bytes a row and key row).
bool bwd_band_split_on_general(const AttnParams &p) {
    return p.pos_enc == WAVEPE_CUDA_PE_TABLE && p.a.d == 256 && tc_backward_applies(p) && !use_tc_dq(p) &&
           !use_tc_dkdv(p) && (tc_dq_256_two_buffers() || smem_fits_device(tc_dq_vone_smem(256))) &&
           (tc_dkdv_256_two_buffers() || smem_fits_device(tc_dkdv_gone_smem(256))) && bwd_band_split_workspace_fits(p) &&
           band_split_pays_general(p);
}

bool bwd_band_split(const AttnParams &p) {
    if (p.pos_enc == WAVEPE_CUDA_PE_TABLE && p.a.d == 256 && !use_tc_dq(p) && !use_tc_dkdv(p))
        return bwd_band_split_on_general(p);
    if (p.pos_enc != WAVEPE_CUDA_PE_TABLE || !use_tc_dkdv(p) || !use_tc_dq(p) || !(p.a.d == 256 || wide_dq_fits(p)) ||
        !bwd_band_split_workspace_fits(p))
        return false;
    for (const bool dkdv : {true, false}) {
        if (p.a.d < 256) break;  // (at 64 and 128: wide_dq_fits)
        const size_t with = dkdv ? tc_dkdv_smem(p.a.d, true) : tc_dq_smem(p.a.d, true);
        const size_t without = dkdv ? tc_dkdv_smem(p.a.d, false) : tc_dq_smem(p.a.d, false);
        if (!second_cta_by_smem(with, without)) return false;
    }
    return band_split_pays(p);  // (last: its count of blocks loops over the query blocks)
}
bool bwd_dkdv_band_split(const AttnParams &p) { return dkdv_split_applies(p) && bwd_band_split(p); }

struct BwdPlan {
    int b;            // tile size
    int bt;           // the dT kernel's (diagonals of bt x bt tiles; the workspace's slots of 2 bt rows)
    int dq_rows;      // query rows of a dQ CTA (16 a d-slope slot)
    int64_t n_diag, groups, bh_per_group;
    bool band_split, dkdv_split;  // bwd_band_split, bwd_dkdv_band_split: split_bytes of fp32 sums, dQ's then dK's
                                  // and dV's
    size_t delta_bytes, part_bytes, slope_bytes, split_bytes;
    size_t bytes() const { return delta_bytes + part_bytes + slope_bytes + split_bytes; }
};

template <class T>
int bwd_tile(int64_t d) {
    if constexpr (sizeof(T) == 8) return dmax_bucket(d) == 64 ? BwdCfg<T, 64>::B : BwdCfg<T, 128>::B;
    switch (dmax_bucket(d)) {
    case 64: return BwdCfg<T, 64>::B;
    case 128: return BwdCfg<T, 128>::B;
    }
    return BwdCfg<T, 256>::B;
}

BwdPlan bwd_plan(const wavepe_attention_args *a) {
    BwdPlan pl{};
    dispatch_dtype(a->dtype, [&](auto tag) {
        pl.b = bwd_tile<decltype(tag)>(a->d);
        return cudaSuccess;
    });
    const size_t acc = a->dtype == WAVEPE_F64 ? 8 : 4;
    const int64_t bh = a->batch * a->heads;
    pl.delta_bytes = align256(size_t(bh * a->m) * acc);
    const AttnParams p = attention_params(a);
    pl.bt = use_tc_dtable(p) ? TcDtLayout<__half, 64>::B : pl.b;
    const int64_t mb = ceil_div(a->m, pl.bt), nb = ceil_div(a->n, pl.bt);
    pl.n_diag = (mb > 0 && nb > 0) ? mb + nb - 1 : 0;
    pl.dq_rows = wide_dq(p) ? TcDqWideLayout<__half, 64>::BM : use_tc_dq(p) ? kTcDqRows : pl.b;
    if (a->dslopes) pl.slope_bytes = align256(size_t(bh * ceil_div(a->m, pl.dq_rows) * (pl.dq_rows / 16)) * acc);
    pl.groups = 1;
    if (a->dtable && pl.n_diag > 0 && bh > 0) {
        const int64_t want = ceil_div(2 * int64_t(device_sm_count()), pl.n_diag);
        pl.groups = want < 1 ? 1 : (want > bh ? bh : want);
        pl.bh_per_group = ceil_div(bh, pl.groups);
        pl.groups = ceil_div(bh, pl.bh_per_group);
        pl.part_bytes = align256(size_t(pl.n_diag) * size_t(pl.groups) * size_t(2 * pl.bt) * size_t(a->d) * acc);
    }
    pl.band_split = bwd_band_split(p);
    pl.dkdv_split = pl.band_split && dkdv_split_applies(p);
    if (pl.band_split)  // (within kBandSplitWorkspace: no overflow)
        pl.split_bytes = align256(size_t(bh * a->m * a->d) * 4) +
                         (pl.dkdv_split ? 2 * size_t(a->batch * a->kv_heads * a->n * a->d) * 4 : 0);
    return pl;
}


// The dK/dV pass: a CTA per (batch, kv head, block of keys).
template <class T, int DMAX>
cudaError_t launch_dkdv(AttnParams p, cudaStream_t stream) {
    if constexpr (Traits<T>::kTensorCore) {
        if (use_tc_dkdv(p)) {
            using Lay = TcDkdvLayout<T, DMAX>;
            const int64_t ctas = p.a.batch * p.a.kv_heads * ceil_div(p.a.n, Lay::BN) * Lay::CS;
            if constexpr (DMAX <= 128) {
                // the wide dK/dV: a table-free call's, or the band split's first partial (p.split_dkv: the second
                // on the 16-key table instance); an instance per kind of interior block (registers)
                const bool split = p.band_part != 0 && p.split_dkv != nullptr;
                if (split || wide_dkdv(p)) {
                    AttnParams q = p;
                    q.band_part = split ? 1 : 0;
                    const int64_t wide_ctas = p.a.batch * p.a.kv_heads * ceil_div(p.a.n, TcDkdvWideLayout<T, DMAX>::BN);
                    const size_t smem = TcDkdvWideLayout<T, DMAX>().plan.total;
                    const TcDkdvKernel wide = p.cap_log2 > 0.0                     ? TcDkdvKernel::kWideCap
                                              : p.pos_enc == WAVEPE_CUDA_PE_ALIBI ? TcDkdvKernel::kWideAlibi
                                                                                  : TcDkdvKernel::kWidePlain;
                    const cudaError_t err = launch_tc_dkdv<T, DMAX>(wide, q, wide_ctas, smem, stream);
                    if (!split || err != cudaSuccess || ctas == 0) return err;
                    q.band_part = 2;
                    return launch_tc_dkdv<T, DMAX>(TcDkdvKernel::kTable, q, ctas, Lay(true).plan.total, stream);
                }
                p.band_part = 0;  // (the band split without the wide dK/dV: the dQ's alone)
            }
            if (ctas == 0) return cudaSuccess;
            if constexpr (DMAX == 256 || DMAX == 64) {
                if (use_tc_dkdv_gone(p))
                    return launch_tc_dkdv<T, DMAX>(TcDkdvKernel::kOneBuffer, p, ctas, tc_dkdv_gone_smem(DMAX), stream);
            }
            return launch_tc_dkdv_band_parts<T, DMAX>(p, ctas, stream);
        }
    }
    if constexpr (kGeneralBandSplit<T, DMAX>) {
        if (p.band_part != 0) {  // (bwd_band_split_on_general) the first partial on the table-free tensor-core dK/dV
            using Lay = TcDkdvLayout<T, 256>;
            const int64_t tc_ctas = p.a.batch * p.a.kv_heads * ceil_div(p.a.n, Lay::BN) * Lay::CS;
            AttnParams q = p;
            q.band_part = 1;
            const cudaError_t err =
                tc_ctas == 0                ? cudaSuccess
                : tc_dkdv_256_two_buffers()
                    ? launch_tc_dkdv<T, 256>(TcDkdvKernel::kTwoBuffers, q, tc_ctas, Lay(false).plan.total, stream)
                    : launch_tc_dkdv<T, 256>(TcDkdvKernel::kOneBuffer, q, tc_ctas, tc_dkdv_gone_smem(256), stream);
            if (err != cudaSuccess) return err;
            p.band_part = 2;
        }
    }
    constexpr int B = BwdCfg<T, DMAX>::B, CS = BwdCfg<T, DMAX>::CS_DKDV;
    const int64_t ctas = p.a.batch * p.a.kv_heads * ceil_div(p.a.n, B);
    if (ctas == 0 || p.a.d == 0) return cudaSuccess;
    const BwdLayout<T, B> L(p.d_pad, p.pos_enc == WAVEPE_CUDA_PE_TABLE);
    auto kernel = attn_bwd_dkdv_kernel<T, DMAX, B, CS>;
    const cudaError_t err = allow_dynamic_smem(kernel, L.plan.total);
    return err != cudaSuccess ? err : launch(kernel, dim3(unsigned(ctas * CS)), dim3(B * 2), L.plan.total, stream, p);
}

// The dQ pass (and ALiBi's d slope partials): a CTA per (batch, head, block of p.dq_rows queries).
template <class T, int DMAX>
cudaError_t launch_dq(AttnParams p, cudaStream_t stream) {
    const int64_t ctas = p.a.batch * p.a.heads * ceil_div(p.a.m, p.dq_rows);
    if (ctas == 0 || (p.a.d == 0 && p.a.dslopes == nullptr)) return cudaSuccess;
    if constexpr (Traits<T>::kTensorCore) {
        if constexpr (DMAX <= 128) {
            if (p.band_part) {  // the band split: the wide instance beyond the band, then the 16-row table one
                // (at 64 on the 100 KiB SMs the first on V's one buffer: two CTAs an SM, the wide one's one)
                using Wide = TcDqWideLayout<T, DMAX>;
                using Narrow = TcDqLayout<T, DMAX>;
                const int64_t bh = p.a.batch * p.a.heads;
                AttnParams q = p;
                q.band_part = 1;
                cudaError_t err;
                if (dq_band_first_vone(DMAX))
                    err = launch_tc(attn_bwd_dq_tc_vone_kernel<T, 64>, bh * ceil_div(p.a.m, Narrow::BM),
                                    tc_dq_vone_smem(64), stream, q);
                else
                    err = launch_tc(attn_bwd_dq_tc_wide_kernel<T, DMAX, true>, bh * ceil_div(p.a.m, Wide::BM),
                                    Wide(false).plan.total, stream, q);
                q.band_part = 2;
                return err != cudaSuccess ? err
                                          : launch_tc(attn_bwd_dq_tc_kernel<T, DMAX, true>, bh * ceil_div(p.a.m, Narrow::BM),
                                                      Narrow(true).plan.total, stream, q);
            }
            if (wide_dq(p)) {  // (p.dq_rows = 128)
                auto kernel = p.pos_enc == WAVEPE_CUDA_PE_ALIBI ? attn_bwd_dq_tc_wide_alibi_kernel<T, DMAX>
                                                                : attn_bwd_dq_tc_wide_kernel<T, DMAX, false>;
                return launch_tc(kernel, ctas, TcDqWideLayout<T, DMAX>(false).plan.total, stream, p);
            }
        }
        if constexpr (DMAX == 256 || DMAX == 64) {
            if (use_tc_dq_vone(p))
                return launch_tc(attn_bwd_dq_tc_vone_kernel<T, DMAX>, ctas, tc_dq_vone_smem(DMAX), stream, p);
        }
        if (use_tc_dq(p))
            return launch_band_parts(
                p, [](bool w) { return w ? attn_bwd_dq_tc_kernel<T, DMAX, true> : attn_bwd_dq_tc_kernel<T, DMAX, false>; },
                [](bool w) { return TcDqLayout<T, DMAX>(w).plan.total; }, ctas, stream);
    }
    if constexpr (kGeneralBandSplit<T, DMAX>) {
        if (p.band_part != 0) {  // (bwd_band_split_on_general) the first partial on the table-free tensor-core dQ
            using Lay = TcDqLayout<T, 256>;
            const int64_t tc_ctas = p.a.batch * p.a.heads * ceil_div(p.a.m, Lay::BM);
            AttnParams q = p;
            q.band_part = 1;
            const cudaError_t err =
                tc_dq_256_two_buffers()
                    ? launch_tc(attn_bwd_dq_tc_kernel<T, 256, false>, tc_ctas, Lay(false).plan.total, stream, q)
                    : launch_tc(attn_bwd_dq_tc_vone_kernel<T, 256>, tc_ctas, tc_dq_vone_smem(256), stream, q);
            if (err != cudaSuccess) return err;
            p.band_part = 2;
        }
    }
    constexpr int B = BwdCfg<T, DMAX>::B, CS = BwdCfg<T, DMAX>::CS_DQ;
    const BwdLayout<T, B> L(p.d_pad, p.pos_enc == WAVEPE_CUDA_PE_TABLE);
    auto kernel = attn_bwd_dq_kernel<T, DMAX, B, CS>;
    const cudaError_t err = allow_dynamic_smem(kernel, L.plan.total);
    return err != cudaSuccess ? err : launch(kernel, dim3(unsigned(ctas * CS)), dim3(B * 2), L.plan.total, stream, p);
}

// dT from the dT kernel's slots (tiles of B): a thread per (table row, column), a grid of at most 16 CTAs an SM.
template <class T, int B>
cudaError_t launch_dtable_fold(const AttnParams &p, cudaStream_t stream) {
    const int64_t cap = int64_t(device_sm_count()) * 16;
    int64_t blocks = ceil_div(p.a.table_rows * p.a.d, 256);
    if (blocks > cap) blocks = cap;
    return launch(attn_bwd_dtable_fold_kernel<T, B>, dim3(unsigned(blocks)), dim3(256), 0, stream, p);
}

template <class T, int DMAX>
cudaError_t launch_bwd_cfg(AttnParams p, const BwdPlan &pl, cudaStream_t stream) {
    constexpr int B = BwdCfg<T, DMAX>::B;
    const bool table = p.pos_enc == WAVEPE_CUDA_PE_TABLE;
    const BwdLayout<T, B> L(p.d_pad, table);
    const int64_t bh = p.a.batch * p.a.heads;
    cudaError_t err = cudaSuccess;
    if (bh * p.a.m > 0)
        err = launch(attn_bwd_delta_kernel<T>, dim3(unsigned(ceil_div(bh * p.a.m, 4))), dim3(128), 0, stream, p);
    if (err != cudaSuccess) return err;
    err = launch_dkdv<T, DMAX>(p, stream);
    if (err != cudaSuccess) return err;
    err = launch_dq<T, DMAX>(p, stream);
    if (err != cudaSuccess) return err;
    if (p.a.dslopes != nullptr && p.a.heads > 0) {
        err = launch(attn_bwd_dslopes_fold_kernel<T>, dim3(unsigned(ceil_div(p.a.heads, 128))), dim3(128), 0, stream,
                     p);
        if (err != cudaSuccess) return err;
    }
    if (p.a.dtable != nullptr && p.a.table_rows * p.a.d > 0) {
        if (pl.n_diag > 0 && bh > 0) {
            err = cudaMemsetAsync(p.dt_part, 0, pl.part_bytes, stream);
            if constexpr (Traits<T>::kTensorCore && DMAX <= 128) {
                if (use_tc_dtable(p)) {
                    if constexpr (DMAX == 128) {
                        if (use_tc_dtable_ksplit(p)) {
                            const size_t bytes = tc_dtable_smem(128, true);
                            auto kernel = p.cap_log2 > 0.0 ? attn_bwd_dtable_tc_ksplit_kernel<T, 128, true>
                                                           : attn_bwd_dtable_tc_ksplit_kernel<T, 128, false>;
                            if (err == cudaSuccess) err = allow_dynamic_smem(kernel, bytes);
                            if (err == cudaSuccess)
                                err = launch(kernel, dim3(unsigned(pl.n_diag * pl.groups * TcDtLayout<T, 128>::CS)),
                                             dim3(128), bytes, stream, p);
                            if (err != cudaSuccess) return err;
                            return launch_dtable_fold<T, TcDtLayout<T, 128>::B>(p, stream);
                        }
                    }
                    using Lay = TcDtLayout<T, DMAX>;
                    const Lay LT;
                    auto kernel = p.cap_log2 > 0.0 ? attn_bwd_dtable_tc_kernel<T, DMAX, true>
                                                   : attn_bwd_dtable_tc_kernel<T, DMAX, false>;
                    if (err == cudaSuccess) err = allow_dynamic_smem(kernel, LT.plan.total);
                    if (err == cudaSuccess)
                        err = launch(kernel, dim3(unsigned(pl.n_diag * pl.groups * Lay::CS)), dim3(128),
                                     LT.plan.total, stream, p);
                    if (err != cudaSuccess) return err;
                    return launch_dtable_fold<T, Lay::B>(p, stream);
                }
            }
            const BwdLayout<T, B> LT(p.d_pad, true);
            constexpr int CS = BwdCfg<T, DMAX>::CS_DT;
            auto kernel = p.cap_log2 > 0.0 ? attn_bwd_dtable_kernel<T, DMAX, B, CS, true>
                                           : attn_bwd_dtable_kernel<T, DMAX, B, CS, false>;
            if (err == cudaSuccess) err = allow_dynamic_smem(kernel, LT.plan.total);
            if (err == cudaSuccess)
                err = launch(kernel, dim3(unsigned(pl.n_diag * pl.groups * CS)), dim3(B * 2), LT.plan.total, stream,
                             p);
            if (err != cudaSuccess) return err;
        }
        err = launch_dtable_fold<T, B>(p, stream);
    }
    return err;
}

template <class T>
cudaError_t launch_bwd(AttnParams p, const BwdPlan &pl, cudaStream_t stream) {
    if constexpr (sizeof(T) == 8) {
        if (dmax_bucket(p.a.d) == 64) return launch_bwd_cfg<T, 64>(p, pl, stream);
        return launch_bwd_cfg<T, 128>(p, pl, stream);
    } else {
        switch (dmax_bucket(p.a.d)) {
        case 64: return launch_bwd_cfg<T, 64>(p, pl, stream);
        case 128: return launch_bwd_cfg<T, 128>(p, pl, stream);
        }
        return launch_bwd_cfg<T, 256>(p, pl, stream);
    }
}

template <class T, int DMAX>
size_t bwd_smem(const wavepe_attention_args *a) {
    // the dT kernel always stages the window: the largest of the three
    const BwdLayout<T, BwdCfg<T, DMAX>::B> L(ceil_div(a->d, 16) * 16, a->table != nullptr || a->dtable != nullptr);
    return L.plan.total;
}

// The backward's padded call (padded_call, attention.cu: "Padded head dims"), where a tensor-core dQ or dK/dV takes it
PaddedCall bwd_padded(const wavepe_attention_args *a, void *workspace) {
    PaddedCall c = padded_call(a, true, workspace);
    if (c.on) {
        const AttnParams p = attention_params(&c.a);
        c.on = use_tc_dq(p) || use_tc_dkdv(p) || bwd_band_split_on_general(p);
    }
    return c;
}

}  // namespace
}  // namespace wavepe_cuda

using namespace wavepe_cuda;

extern "C" size_t wavepe_cuda_attention_bwd_smem_bytes(const wavepe_attention_args *a) {
    if (a == nullptr || dtype_size(a->dtype) == 0 || a->d < 0 || a->d > WAVEPE_CUDA_MAX_HEAD_DIM) return 0;
    const PaddedCall c = bwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_bwd_smem_bytes(&c.a);
    size_t bytes = 0;
    dispatch_dtype(a->dtype, [&](auto tag) {
        using T = decltype(tag);
        switch (dmax_bucket(a->d)) {
        case 64: bytes = bwd_smem<T, 64>(a); break;
        case 128: bytes = bwd_smem<T, 128>(a); break;
        default:
            if constexpr (sizeof(T) != 8) bytes = bwd_smem<T, 256>(a);
        }
        if constexpr (Traits<T>::kTensorCore) {
            // the largest of the kernels that run: the tensor-core dK/dV's, dQ's and dT's where they do, else
            // the general layout (the general dT's too)
            const AttnParams p = attention_params(a);
            const bool table = a->table != nullptr, kv = use_tc_dkdv(p), q = use_tc_dq(p), dt = use_tc_dtable(p);
            if (bwd_band_split_on_general(p)) {  // (the general kernels' and the table-free tensor-core ones')
                const size_t on_kv = tc_dkdv_256_two_buffers() ? tc_dkdv_smem(256, false) : tc_dkdv_gone_smem(256);
                const size_t on_q = tc_dq_256_two_buffers() ? tc_dq_smem(256, false) : tc_dq_vone_smem(256);
                if (on_kv > bytes) bytes = on_kv;
                if (on_q > bytes) bytes = on_q;
            } else if (kv || q || dt) {
                const size_t general = bytes;
                size_t on_kv = wide_dkdv(p)          ? tc_dkdv_wide_smem(a->d)
                               : use_tc_dkdv_gone(p) ? tc_dkdv_gone_smem(a->d)
                               : kv                  ? tc_dkdv_smem(a->d, table)
                                                     : general;
                size_t on_q = wide_dq(p)          ? tc_dq_wide_smem(a->d)
                              : use_tc_dq_vone(p) ? tc_dq_vone_smem(a->d)
                              : q                 ? tc_dq_smem(a->d, table)
                                                  : general;
                const size_t on_dt = a->dtable == nullptr ? 0
                                     : dt                 ? tc_dtable_smem(a->d, use_tc_dtable_ksplit(p))
                                                          : general;
                // (the dK/dV's band split at 64 and 128: the wide dK/dV's and the 16-key table instance's)
                if (a->d <= 128 && bwd_dkdv_band_split(p)) {
                    const size_t wide = tc_dkdv_wide_smem(a->d);
                    if (wide > on_kv) on_kv = wide;
                }
                // (the dQ's at 64 and 128: the first partial's instance and the table's)
                if (a->d <= 128 && bwd_band_split(p)) {
                    const size_t first = dq_band_first_vone(a->d) ? tc_dq_vone_smem(64) : tc_dq_wide_smem(a->d);
                    if (first > on_q) on_q = first;
                }
                bytes = on_kv > on_q ? on_kv : on_q;
                if (on_dt > bytes) bytes = on_dt;
            }
        }
        return cudaSuccess;
    });
    return bytes;
}

extern "C" const char *wavepe_cuda_attention_bwd_kernel(const wavepe_attention_args *a) {
    if (a == nullptr) return nullptr;
    const PaddedCall c = bwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_bwd_kernel(&c.a);
    const AttnParams p = attention_params(a);
    const bool kv = use_tc_dkdv(p), q = use_tc_dq(p);
    if (bwd_band_split_on_general(p)) return "band split: tensor-core beyond the band, general";
    if (kv && q && bwd_band_split(p)) return "tensor-core, band split";
    if (kv && q && wide_dq(p)) return "tensor-core, dQ 32 rows a warp";
    return kv && q ? "tensor-core" : q ? "tensor-core dQ, general dK/dV" : kv ? "tensor-core dK/dV, general dQ" : "general";
}

extern "C" const char *wavepe_cuda_attention_bwd_dkdv_kernel(const wavepe_attention_args *a) {
    if (a == nullptr) return nullptr;
    const PaddedCall c = bwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_bwd_dkdv_kernel(&c.a);
    const AttnParams p = attention_params(a);
    if (bwd_band_split_on_general(p)) return "band split: tensor-core beyond the band, general";
    if (bwd_dkdv_band_split(p)) return "tensor-core, band split";
    return wide_dkdv(p) ? "tensor-core, 32 keys a warp" : use_tc_dkdv(p) ? "tensor-core" : "general";
}

extern "C" const char *wavepe_cuda_attention_bwd_dtable_kernel(const wavepe_attention_args *a) {
    if (a == nullptr) return nullptr;
    if (a->dtable == nullptr) return "none";
    const PaddedCall c = bwd_padded(a, nullptr);
    if (c.on) return wavepe_cuda_attention_bwd_dtable_kernel(&c.a);
    const AttnParams p = attention_params(a);
    return !use_tc_dtable(p) ? "general" : use_tc_dtable_ksplit(p) ? "tensor-core, K in two halves" : "tensor-core";
}

extern "C" size_t wavepe_cuda_attention_bwd_workspace_bytes(const wavepe_attention_args *a) {
    if (a == nullptr || wavepe_cuda_attention_check(a, 1, 1, nullptr) != WAVEPE_OK) return 0;
    const PaddedCall c = bwd_padded(a, nullptr);
    if (c.on) return c.bytes + wavepe_cuda_attention_bwd_workspace_bytes(&c.a);
    return bwd_plan(a).bytes();
}

extern "C" cudaError_t wavepe_cuda_attention_bwd(const wavepe_attention_args *a, void *workspace,
                                                 size_t workspace_bytes, cudaStream_t stream) {
    if (wavepe_cuda_attention_check(a, 1, 1, nullptr) != WAVEPE_OK) return cudaErrorInvalidValue;
    const PaddedCall c = bwd_padded(a, workspace);
    if (c.on) {  // (the copies first in the workspace, the padded call's own after them)
        if (workspace == nullptr || workspace_bytes < wavepe_cuda_attention_bwd_workspace_bytes(a))
            return cudaErrorInvalidValue;
        cudaError_t err = padded_inputs(a, c, true, stream);
        if (err == cudaSuccess)
            err = wavepe_cuda_attention_bwd(&c.a, static_cast<unsigned char *>(workspace) + c.bytes,
                                            workspace_bytes - c.bytes, stream);
        return err == cudaSuccess ? padded_outputs(a, c, true, stream) : err;
    }
    const BwdPlan pl = bwd_plan(a);
    const size_t need = pl.bytes();
    if (need > 0 && (workspace == nullptr || workspace_bytes < need)) return cudaErrorInvalidValue;
    AttnParams p = attention_params(a);
    p.delta = workspace;
    p.dt_part = static_cast<unsigned char *>(workspace) + pl.delta_bytes;
    p.slope_part = static_cast<unsigned char *>(workspace) + pl.delta_bytes + pl.part_bytes;
    if (pl.band_split) {
        p.band_part = 1;  // (launch_dkdv and launch_dq take both parts)
        p.split_dq = static_cast<unsigned char *>(workspace) + pl.delta_bytes + pl.part_bytes + pl.slope_bytes;
        if (pl.dkdv_split)  // (dK's and dV's sums)
            p.split_dkv = static_cast<unsigned char *>(p.split_dq) + align256(size_t(a->batch * a->heads * a->m * a->d) * 4);
    }
    p.n_diag = pl.n_diag;
    p.dq_rows = pl.dq_rows;
    p.dt_groups = pl.groups;
    p.bh_per_group = pl.bh_per_group;
    return dispatch_dtype(a->dtype, [&](auto tag) { return launch_bwd<decltype(tag)>(p, pl, stream); });
}

extern "C" int64_t wavepe_cuda_attention_bwd_padded_head_dim(const wavepe_attention_args *a) {
    if (a == nullptr || dtype_size(a->dtype) == 0) return 0;
    const PaddedCall c = bwd_padded(a, nullptr);
    return c.on ? c.a.d : 0;
}
