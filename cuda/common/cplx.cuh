// Complex float helpers (float2: x = real, y = imaginary), shared by every model's kernels.
#pragma once
#include <cuda_runtime.h>

__device__ __forceinline__ float2 cmake(float re, float im) { return make_float2(re, im); }
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
// a * conj(b)
__device__ __forceinline__ float2 cmulc(float2 a, float2 b) {
    return make_float2(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y);
}
// acc += a * (conj_b ? conj(b) : b)
__device__ __forceinline__ void cfma(float2 &acc, float2 a, float2 b, bool conj_b) {
    float by = conj_b ? -b.y : b.y;
    acc.x = fmaf(a.x, b.x, fmaf(-a.y, by, acc.x));
    acc.y = fmaf(a.x, by, fmaf(a.y, b.x, acc.y));
}
