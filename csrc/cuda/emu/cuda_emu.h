// cuda_emu.h: a CPU emulator of the small CUDA subset wavepe's kernels use.
//
// Why: the kernels must be correct on GPUs this project's machines do not
// have.  Compiling csrc/cuda/*.cu as plain C++ with -DWAVEPE_CUDA_EMU and
// this header runs every kernel, unchanged, on the CPU: each CUDA thread is a
// fiber, blocks run one after another, __syncthreads / __syncwarp / shuffles
// / mma.sync are cooperative barriers between the fibers of a block (or
// warp).  The tests (tests/test_cuda_emu.py) call the same extern "C"
// launchers as the torch bindings and compare with the float64 oracles.
//
// What it checks beyond the arithmetic: asynchronous copies read before
// their cp.async.wait_group (the copy lands only at the wait), barrier divergence (threads of a
// block waiting at different __syncthreads, or a deadlock), launch
// configurations (block size, dynamic shared memory above 48 KiB without the
// opt-in attribute or above the device limit), reads of uninitialised shared
// memory (it starts as NaN bytes) and, run with WAVEPE_EMU_ORDER=reverse or
// random, races that a missing barrier would hide in one fixed order; with
// WAVEPE_EMU_ORDER=serial each warp runs alone from one __syncthreads to the
// next, so a warp reading shared memory another warp writes in the same
// interval (a missing __syncthreads) reads it stale.
// What it cannot check: timing, real warp-level divergence (a warp's lanes at
// two different mma or ldmatrix calls: both wait at the emulator's one line
// for each), the memory model of a GPU, and the hardware's mma accumulation
// order.  csrc/cuda/emu/selftest.cpp breaks each rule it does check, one at a
// time (tests/test_cuda_emu.py).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "cuda_emu_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct float2 {
    float x, y;
};

namespace wavepe_emu {

struct ThreadState {
    uint3 tid;
    int linear;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};

ThreadState &self();
const uint3 &block_idx();
const dim3 &block_dim();
const dim3 &grid_dim();
unsigned char *dynamic_smem();

void syncthreads(const char *file, int line);
void syncwarp(const char *file, int line);
// exchange slot of `lane` in the current thread's warp, kSlotBytes long (a warp's 32 slots are consecutive)
constexpr size_t kSlotBytes = 64;
unsigned char *warp_slot(int lane);
int lane_id();
// A warp's exchange at one barrier: every lane fills its slot, then calls this; the last lane to arrive runs
// all_lanes(the warp's slots, its lanes: 32 but in a block's last partial warp) once, which writes each lane's
// results through the pointers its slot holds.
void warp_collective(const char *file, int line, void (*all_lanes)(unsigned char *slots, int lanes));

cudaError_t launch(const void *kernel, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
cudaError_t set_max_dynamic_smem(const void *kernel, int bytes);

template <class T>
struct ShflSlot {
    T *out;
    int src_lane;
    T value;
};

// (a source lane past a partial warp's last reads zero bytes)
template <class T>
void shfl_all_lanes(unsigned char *slots, int lanes) {
    ShflSlot<T> lane_slot[32];
    std::memset(static_cast<void *>(lane_slot), 0, sizeof(lane_slot));
    for (int l = 0; l < lanes; ++l) std::memcpy(&lane_slot[l], slots + kSlotBytes * size_t(l), sizeof(ShflSlot<T>));
    for (int l = 0; l < lanes; ++l) std::memcpy(lane_slot[l].out, &lane_slot[lane_slot[l].src_lane].value, sizeof(T));
}

template <class T>
T shfl_index(T v, int src_lane, const char *file, int line) {
    static_assert(sizeof(ShflSlot<T>) <= kSlotBytes, "shuffle of a large type");
    T out;
    const ShflSlot<T> mine{&out, src_lane & 31, v};
    std::memcpy(warp_slot(lane_id()), &mine, sizeof(mine));
    warp_collective(file, line, shfl_all_lanes<T>);
    return out;
}

// cp.async (sm_80): the copy is recorded and performed only when a
// cp.async.wait_group retires its group, so that reading the destination
// without the wait sees stale data, as it could on the GPU.
void cp_async(void *smem_dst, const void *gmem_src, int src_bytes, int total_bytes);
void cp_async_commit();
void cp_async_wait(int newest_groups_left);

// ldmatrix.sync.aligned.m8n8.x{nmat}[.trans].shared.b16: lanes 8i .. 8i+7
// give the row addresses of matrix i; regs[i] receives, without trans, row
// lane/4 columns 2 (lane%4) + {0, 1}, with trans, rows 2 (lane%4) + {0, 1} of
// column lane/4.
void ldmatrix(uint32_t *regs, int nmat, bool trans, const void *row_addr);

// d += a * b for mma.sync.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32,
// with the documented fragment layouts; `is_bf16` picks the input type.
void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool is_bf16);

}  // namespace wavepe_emu

#define threadIdx (::wavepe_emu::self().tid)
#define blockIdx (::wavepe_emu::block_idx())
#define blockDim (::wavepe_emu::block_dim())
#define gridDim (::wavepe_emu::grid_dim())
#define __syncthreads() ::wavepe_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::wavepe_emu::syncwarp(__FILE__, __LINE__)
#define __shfl_sync(mask, v, src, ...) ::wavepe_emu::shfl_index((v), (src), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, lm, ...) \
    ::wavepe_emu::shfl_index((v), ::wavepe_emu::lane_id() ^ (lm), __FILE__, __LINE__)

// __byte_perm(x, y, s) (PRMT): byte n of the result is byte (s >> 4 n) & 7 of the eight bytes y:x, x the low four
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const uint64_t v = uint64_t(x) | (uint64_t(y) << 32);
    unsigned int r = 0;
    for (int n = 0; n < 4; ++n) r |= unsigned((v >> (8 * ((s >> (4 * n)) & 7))) & 0xffu) << (8 * n);
    return r;
}

// ---- 16-bit floating types ---------------------------------------------------
struct __nv_bfloat16 {
    uint16_t bits;
};
struct __half {
    uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = uint32_t(h.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return __nv_bfloat16{uint16_t(u >> 16)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

// IEEE binary16 <-> binary32 by bits, as the GPU converts (exact one way, round to nearest even the other; a
// NaN stays a NaN, quieted): _Float16's conversions are libgcc calls without F16C (no ISA flag here), which made
// every fp16 test of the emulator ~1.7x its bf16 twin.  Checked against _Float16 on every binary16 and on ~33M
// binary32 values around every rounding boundary (2026-11-28).
inline float __half2float(__half h) {
    const uint32_t s = uint32_t(h.bits & 0x8000u) << 16, e = (h.bits >> 10) & 0x1fu, m = h.bits & 0x3ffu;
    uint32_t u;
    if (e == 0x1fu) {
        u = s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u);
    } else if (e != 0) {
        u = s | ((e + 112u) << 23) | (m << 13);
    } else {
        const float v = float(m) * 0x1p-24f;  // zero or a subnormal: exact
        std::memcpy(&u, &v, 4);
        u |= s;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __half __float2half_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t s = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return __half{uint16_t(s | 0x7e00u | ((a >> 13) & 0x3ffu))};
    if (a >= 0x477ff000u) return __half{uint16_t(s | 0x7c00u)};  // 65520 and beyond round to inf
    if (a >= 0x38800000u) {                                     // a normal half: rebias, round to nearest even
        uint32_t r = a - (112u << 23);
        r += 0x0fffu + ((r >> 13) & 1u);
        return __half{uint16_t(s | (r >> 13))};
    }
    float v;
    std::memcpy(&v, &a, 4);
    return __half{uint16_t(s | uint16_t(std::nearbyint(v * 0x1p24f)))};  // a subnormal (or the smallest normal)
}
// the fast division intrinsic (on the GPU: reciprocal, then multiply; here exact)
inline float __fdividef(float a, float b) { return a / b; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }

// ---- runtime API subset --------------------------------------------------------
enum cudaDeviceAttr {
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrReservedSharedMemoryPerBlock = 111,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream = nullptr);
struct cudaFuncAttributes {
    int maxThreadsPerBlock, numRegs;
};
namespace wavepe_emu {
cudaError_t func_attributes(cudaFuncAttributes *attr);
}
// The driver's answer for the emulated device: WAVEPE_EMU_NO_IMAGE=1 emulates a GPU the build has no code for
// (the tests decide which by the recipe's rule, recipe.image_for).
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, F *) {
    return ::wavepe_emu::func_attributes(attr);
}
template <class F>
cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    return ::wavepe_emu::set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), value);
}
