// ECO_HD marks element math shared by the CPU and CUDA backends: __host__ __device__ under nvcc,
// plain inline under a host compiler. Everything in src/base/math must compile both ways.
#pragma once
#if defined(__CUDACC__)
#define ECO_HD __host__ __device__ inline
#else
#define ECO_HD inline
#endif
