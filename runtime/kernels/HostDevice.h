//===- HostDevice.h - code both backends compile ----------------*- C++ -*-===//
//
// Functions the CPU kernels call and the CUDA kernels call on the GPU:
// marked for both when nvcc compiles them, plain functions otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_HOSTDEVICE_H
#define CDP_RUNTIME_KERNELS_HOSTDEVICE_H

#ifdef __CUDACC__
#define CDP_HOST_DEVICE __host__ __device__
#else
#define CDP_HOST_DEVICE
#endif

#endif // CDP_RUNTIME_KERNELS_HOSTDEVICE_H
