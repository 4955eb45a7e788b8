/* cuda_emu_api.h: the few CUDA runtime types wavepe_cuda.h names, for the
 * CPU emulator build (WAVEPE_CUDA_EMU).  C-compatible, values as in CUDA's
 * driver_types.h so that error codes read the same in both builds. */
#ifndef WAVEPE_CUDA_EMU_API_H
#define WAVEPE_CUDA_EMU_API_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorLaunchFailure = 719
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;

const char *cudaGetErrorString(cudaError_t error);

#ifdef __cplusplus
}
#endif
#endif
