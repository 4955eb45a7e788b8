// common.cuh: what every wavepe CUDA kernel file shares.
//
// * the element types and their accumulators (fp32 for fp32/bf16/fp16,
//   fp64 for fp64) with conversions;
// * the tensor-core primitive (mma.sync m16n8k16, bf16/fp16 in, fp32
//   accumulate) and the fragment layouts it implies;
// * warp reductions, the launch helper (which also runs the kernels on the
//   CPU emulator when compiled with -DWAVEPE_CUDA_EMU, see emu/cuda_emu.h)
//   and the launchers' helpers.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA), lane = 4 * g + t:
//   A (16 x 16, row-major)  reg j holds A[g + 8 (j % 2)][2 t + 8 (j / 2) + {0, 1}]
//   B (16 x 8,  k x n)      reg j holds B[2 t + 8 j + {0, 1}][g]
//   C (16 x 8, fp32)        c[i] = C[g + 8 (i / 2)][2 t + (i % 2)]
// (two 16-bit values per 32-bit register, the lower index in the low half).
// The fp32 / fp64 kernels use the same ownership of C elements without tensor
// cores (plain FMA, no TF32), so everything after the products is shared.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef WAVEPE_CUDA_EMU
#include "emu/cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../core/checked.h"
#include "wavepe_cuda.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "wavepe's CUDA kernels use mma.sync.m16n8k16 with bf16 and need sm_80 or newer"
#endif

#define WAVEPE_DEVICE __device__ __forceinline__

#ifdef WAVEPE_CUDA_EMU
#define WAVEPE_SHARED_BASE(name) unsigned char *name = ::wavepe_emu::dynamic_smem()
#else
#define WAVEPE_SHARED_BASE(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace wavepe_cuda {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;

// ---- element types ---------------------------------------------------------------
template <class T>
struct Traits;
template <>
struct Traits<float> {
    using Acc = float;
    static constexpr bool kTensorCore = false;
};
template <>
struct Traits<double> {
    using Acc = double;
    static constexpr bool kTensorCore = false;
};
template <>
struct Traits<__nv_bfloat16> {
    using Acc = float;
    static constexpr bool kTensorCore = true;
};
template <>
struct Traits<__half> {
    using Acc = float;
    static constexpr bool kTensorCore = true;
};
template <class T>
using acc_t = typename Traits<T>::Acc;

WAVEPE_DEVICE float to_acc(float x) { return x; }
WAVEPE_DEVICE double to_acc(double x) { return x; }
WAVEPE_DEVICE float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
WAVEPE_DEVICE float to_acc(__half x) { return __half2float(x); }

template <class T>
WAVEPE_DEVICE T from_acc(acc_t<T> x);
template <>
WAVEPE_DEVICE float from_acc<float>(float x) { return x; }
template <>
WAVEPE_DEVICE double from_acc<double>(double x) { return x; }
template <>
WAVEPE_DEVICE __nv_bfloat16 from_acc<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
WAVEPE_DEVICE __half from_acc<__half>(float x) { return __float2half_rn(x); }

template <class T>
WAVEPE_DEVICE T zero_value() {
    return from_acc<T>(acc_t<T>(0));
}

WAVEPE_DEVICE uint32_t bits16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
WAVEPE_DEVICE uint32_t bits16(__half x) { return __half_as_ushort(x); }

// Two values rounded to T (16-bit) in one register, `lo` in the low half.
template <class T>
WAVEPE_DEVICE uint32_t pack2(float lo, float hi) {
    return bits16(from_acc<T>(lo)) | (bits16(from_acc<T>(hi)) << 16);
}
template <class T>
WAVEPE_DEVICE uint32_t pack2_raw(T lo, T hi) {
    return bits16(lo) | (bits16(hi) << 16);
}

// Aligned 4-, 8- and 16-byte copies (memcpy in the emulator: no aliasing games on the host).
WAVEPE_DEVICE uint32_t ld32(const void *p) {
#ifdef WAVEPE_CUDA_EMU
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return *static_cast<const uint32_t *>(p);
#endif
}
WAVEPE_DEVICE void copy8(void *dst, const void *src) {
#ifdef WAVEPE_CUDA_EMU
    memcpy(dst, src, 8);
#else
    *static_cast<uint2 *>(dst) = *static_cast<const uint2 *>(src);
#endif
}
WAVEPE_DEVICE void copy16(void *dst, const void *src) {
#ifdef WAVEPE_CUDA_EMU
    memcpy(dst, src, 16);
#else
    *static_cast<uint4 *>(dst) = *static_cast<const uint4 *>(src);
#endif
}
WAVEPE_DEVICE void zero16(void *dst) {
#ifdef WAVEPE_CUDA_EMU
    memset(dst, 0, 16);
#else
    *static_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
#endif
}

// ---- asynchronous copies (sm_80 cp.async) ---------------------------------------------------
// 16 bytes global -> shared, bypassing L1 (.cg); src_bytes = 0 zero-fills
// (the source address is then not read but must still be a valid pointer).
WAVEPE_DEVICE void cp_async16(void *smem_dst, const void *gmem_src, bool valid) {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::cp_async(smem_dst, gmem_src, valid ? 16 : 0, 16);
#else
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(valid ? 16 : 0));
#endif
}
// Close the group of this thread's copies issued since the last commit.
WAVEPE_DEVICE void cp_async_commit() {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most N of this thread's committed groups are still in flight
// (a __syncthreads after it makes every thread's copies visible to all).
template <int N>
WAVEPE_DEVICE void cp_async_wait() {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// ---- math on the accumulator types ---------------------------------------------------
WAVEPE_DEVICE float exp2_(float x) { return exp2f(x); }
WAVEPE_DEVICE double exp2_(double x) { return exp2(x); }
WAVEPE_DEVICE float log2_(float x) { return log2f(x); }
WAVEPE_DEVICE double log2_(double x) { return log2(x); }
// tanh (the attention's logit soft-cap): CUDA's tanhf (2 ulp; +-1 at +-inf, NaN stays NaN) and tanh
WAVEPE_DEVICE float tanh_(float x) { return tanhf(x); }
WAVEPE_DEVICE double tanh_(double x) { return tanh(x); }
// tanh y = sign(y) (1 - 2 / (e^{2|y|} + 1)) in a few instructions (one exp2, one reciprocal): within a
// few units of fp32 of tanhf in absolute terms (near 0 the subtraction leaves ~1e-7 absolute, not
// relative, error) -- for the soft-cap's scores, where cap tanh(s / cap) is an additive score error.
WAVEPE_DEVICE float tanh_exp2(float y) {
    const float e = exp2f(2.8853900817779268f * fabsf(y));  // e^{2|y|}
    return copysignf(1.f - __fdividef(2.f, e + 1.f), y);
}
WAVEPE_DEVICE float fma_(float a, float b, float c) { return fmaf(a, b, c); }
WAVEPE_DEVICE double fma_(double a, double b, double c) { return fma(a, b, c); }
WAVEPE_DEVICE float max_(float a, float b) { return fmaxf(a, b); }
WAVEPE_DEVICE double max_(double a, double b) { return fmax(a, b); }
template <class A>
WAVEPE_DEVICE A neg_inf() {
    return -A(INFINITY);
}

// ---- warp reductions -----------------------------------------------------------------
// Over the 4 lanes of a quad (the lanes sharing rows g, g + 8 of a C fragment).
template <class A>
WAVEPE_DEVICE A quad_max(A v) {
    v = max_(v, __shfl_xor_sync(kFullMask, v, 1));
    v = max_(v, __shfl_xor_sync(kFullMask, v, 2));
    return v;
}
template <class A>
WAVEPE_DEVICE A quad_sum(A v) {
    v += __shfl_xor_sync(kFullMask, v, 1);
    v += __shfl_xor_sync(kFullMask, v, 2);
    return v;
}
template <class A>
WAVEPE_DEVICE A warp_sum(A v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

// ---- tensor cores -------------------------------------------------------------------
// d += a * b for one m16n8k16 tile (layouts in the header comment).
template <class T>
WAVEPE_DEVICE void mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]);

template <>
WAVEPE_DEVICE void mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::mma_m16n8k16(d, a, b, true);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
template <>
WAVEPE_DEVICE void mma16816<__half>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::mma_m16n8k16(d, a, b, false);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Two / four 8x8 matrices of 16-bit values, transposed, from shared memory:
// lane 8i + r gives the address of row r of matrix i (16-byte aligned);
// regs[i] = (M_i[2 (lane%4)][lane/4], M_i[2 (lane%4) + 1][lane/4]) — the
// B fragment of mma.m16n8k16 when M_0, M_1 are rows k0..k0+7, k0+8..k0+15
// of a row-major [k][n] tile at columns n0..n0+7.
WAVEPE_DEVICE void ldmatrix_x2_trans(uint32_t regs[2], const void *row_addr) {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::ldmatrix(regs, 2, true, row_addr);
#else
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(regs[0]), "=r"(regs[1])
                 : "r"(a));
#endif
}
WAVEPE_DEVICE void ldmatrix_x4_trans(uint32_t regs[4], const void *row_addr) {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::ldmatrix(regs, 4, true, row_addr);
#else
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(a));
#endif
}

// Four 8x8 matrices of 16-bit values, as stored: lane 8i + r gives the address of row r of matrix
// i (16-byte aligned); regs[i] = (M_i[lane/4][2 (lane%4)], M_i[lane/4][2 (lane%4) + 1]).  With the
// four matrices rows 0-7 / 8-15 x columns k0..k0+7 / k0+8..k0+15 of a row-major tile (lane l: row
// l % 16, column k0 + 8 (l / 16)) that is the A fragment of mma.m16n8k16; with rows n0..n0+7 of a
// row-major [n][k] tile (the keys of S = Q K^T) at columns k0, k0+8 it is the B fragment of n0.
WAVEPE_DEVICE void ldmatrix_x4(uint32_t regs[4], const void *row_addr) {
#ifdef WAVEPE_CUDA_EMU
    ::wavepe_emu::ldmatrix(regs, 4, false, row_addr);
#else
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(a));
#endif
}

// ---- launching ------------------------------------------------------------------------
template <class... KArgs, class... Args>
cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args... args) {
#ifdef WAVEPE_CUDA_EMU
    (void)stream;
    const std::function<void()> body = [=]() { kernel(KArgs(args)...); };
    return ::wavepe_emu::launch(reinterpret_cast<const void *>(kernel), grid, block, smem, body);
#else
    kernel<<<grid, block, smem, stream>>>(KArgs(args)...);
    return cudaGetLastError();
#endif
}

// Allow `bytes` of dynamic shared memory for `kernel` (opt-in above 48 KiB);
// cudaErrorInvalidValue when the device has less.
template <class K>
cudaError_t allow_dynamic_smem(K *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    int dev = 0, optin = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (bytes > size_t(optin)) return cudaErrorInvalidValue;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// The dynamic shared memory a CTA of this device may opt in to (0 when the device cannot be asked).
inline size_t device_smem_optin() {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
    return optin > 0 ? size_t(optin) : 0;
}
// Does a CTA of `bytes` of shared memory fit this device?  Up to the 99 KiB every GPU from sm_80 on grants
// without asking (the common case: no driver call), else the device is asked.
inline bool smem_fits_device(size_t bytes) { return bytes <= 99 * 1024 || bytes <= device_smem_optin(); }

// The CTAs of `bytes` of dynamic shared memory an SM of this device holds by its shared memory alone (each CTA
// also takes the device's reserved share: 1 KiB from sm_80 on); 0 when the device cannot be asked.
inline int device_ctas_by_smem(size_t bytes) {
    int dev = 0, per_sm = 0, reserved = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
        return 0;
    return per_sm > 0 && reserved >= 0 ? int(size_t(per_sm) / (bytes + size_t(reserved))) : 0;
}
// Does an SM of this device hold two CTAs of `lighter` bytes but not two of `heavier` -- the second CTA a lighter
// layout buys (the band splits' table-free partials, the dK/dV's dO in one buffer)?
inline bool second_cta_by_smem(size_t heavier, size_t lighter) {
    return device_ctas_by_smem(heavier) < 2 && device_ctas_by_smem(lighter) >= 2;
}

// Is the environment variable `name` set to `value` (read at each call: the switches below)?
inline bool env_is(const char *name, const char *value) {
    const char *env = std::getenv(name);
    return env != nullptr && std::strcmp(env, value) == 0;
}
inline bool env_zero(const char *name) { return env_is(name, "0"); }

// May calls run the wide instances (32 query rows a warp: wide_forward, wide_dq)?  WAVEPE_CUDA_WIDE=0 in the
// environment keeps them on the 16-row ones: the A/B that bench_attention.py --device cuda times, and the emulator
// tests' way to those instances' table-free paths.
inline bool wide_rows_allowed() { return !env_zero("WAVEPE_CUDA_WIDE"); }
// WAVEPE_CUDA_WIDE=1 takes the wide forward also where an SM holds fewer of its CTAs than of the 16-row one's
// (attention.cu, wide_holds_sm): the A/B of that choice on the 100 KiB SMs that bench_attention.py --device cuda times.
inline bool wide_rows_forced() { return env_is("WAVEPE_CUDA_WIDE", "1"); }

// May calls of a head dim without a tensor-core instance run on zero-padded copies (padded_call)?  WAVEPE_CUDA_PAD=0
// keeps them on the general kernels: the A/B bench_attention.py --device cuda times, and a way out of the copies'
// workspace where memory is short.
inline bool padded_head_dims_allowed() { return !env_zero("WAVEPE_CUDA_PAD"); }

// The device's compute capability, major (0 when the device cannot be asked): which of the library's SASS it runs.
inline int device_cc_major() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess ? major : 0;
}

inline int device_sm_count() {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 1;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 1;
    return n > 0 ? n : 1;
}

// Calls f(T{}) with the element type of `dtype`.
template <class F>
cudaError_t dispatch_dtype(int dtype, F &&f) {
    switch (dtype) {
    case WAVEPE_F32: return f(float{});
    case WAVEPE_F64: return f(double{});
    case WAVEPE_BF16: return f(__nv_bfloat16{});
    case WAVEPE_F16: return f(__half{});
    }
    return cudaErrorInvalidValue;
}

inline int64_t dtype_size(int dtype) { return wavepe_dtype_size(dtype); }

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }  // b > 0

// ---- host-side helpers ----------------------------------------------------------------
// (the argument rules are the core's: csrc/core/<family>.h)
inline bool aligned_to(const void *p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

}  // namespace wavepe_cuda
