/* dtype.h: element types of the tensors an op family reads and writes.
 *
 * One tag shared by every device: the CPU kernels run F32 and F64, and those
 * of RoPE (rope.h), the relative bias (relbias.h), the ALiBi bias (alibi.h)
 * and the fused attention (attention.h) also BF16 and F16, read natively; the
 * CUDA kernels also read BF16 and F16 natively.  Quantities that are accumulated rather than stored element-wise
 * (ALiBi slopes, the attention's log-sum-exp and their gradients) travel in
 * the accumulator type: F64 for F64 data, F32 for every other type.
 */
#ifndef WAVEPE_DTYPE_H
#define WAVEPE_DTYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wavepe_dtype {
    WAVEPE_F32 = 0,
    WAVEPE_F64 = 1,
    WAVEPE_BF16 = 2,
    WAVEPE_F16 = 3
} wavepe_dtype;

/* Bytes per element, or 0 for an unknown tag. */
static inline int64_t wavepe_dtype_size(int dtype) {
    switch (dtype) {
    case WAVEPE_F32: return 4;
    case WAVEPE_F64: return 8;
    case WAVEPE_BF16:
    case WAVEPE_F16: return 2;
    }
    return 0;
}

/* The accumulator type of data of type dtype. */
static inline int wavepe_dtype_acc(int dtype) { return dtype == WAVEPE_F64 ? WAVEPE_F64 : WAVEPE_F32; }

static inline const char *wavepe_dtype_name(int dtype) {
    switch (dtype) {
    case WAVEPE_F32: return "float32";
    case WAVEPE_F64: return "float64";
    case WAVEPE_BF16: return "bfloat16";
    case WAVEPE_F16: return "float16";
    }
    return "unknown";
}

#ifdef __cplusplus
}
#endif
#endif
