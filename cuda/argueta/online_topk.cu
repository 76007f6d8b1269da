// Baseline: the online-normalizer fused softmax + top-k of Milakov & Gimelshein (2018), as in
// NVIDIA's online-softmax benchmark: one block per row, every thread keeps its own sorted top-TOPK
// list in registers (compile-time TOPK) and the (max, sum) of the online normalizer over a strided
// slice of the row; the per-thread lists and statistics are then merged through a tree in shared
// memory. Keys, tie rule and NaN rule: as in topn.cu. Dynamic shared memory: 8 * TOPK * blockDim/2.
#include <math.h>

#ifndef TOPK
#define TOPK 10
#endif

#include "topn_keys.cuh"

// Lists up to 128 long live in registers (fully unrolled); longer ones spill to local memory anyway,
// so they are only partly unrolled (keeps the compile time of TOPK = 400 at a few seconds).
#if TOPK <= 128
#define LIST_UNROLL _Pragma("unroll")
#else
#define LIST_UNROLL _Pragma("unroll 4")
#endif

__device__ __forceinline__ void insert(u64 (&t)[TOPK], u64 y)
{
    LIST_UNROLL
    for (int j = 0; j < TOPK; ++j) {
        const u64 h = t[j] > y ? t[j] : y;
        y = t[j] > y ? y : t[j];
        t[j] = h;
    }
}

extern "C" __global__ void online_topk(const float* __restrict__ X, int K, int N,
                                       float* __restrict__ P, int* __restrict__ I)
{
    extern __shared__ u64 buf[];
    __shared__ float sm[1024], sd[1024];
    const float* row = X + (size_t)blockIdx.x * K;
    u64 t[TOPK];
#pragma unroll
    for (int j = 0; j < TOPK; ++j) t[j] = 0ull;
    float m = -INFINITY, d = 0.f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        const float x = row[k];
        online_add(m, d, x);
        const u64 y = pack_key(x, (unsigned)k);
        if (y > t[TOPK - 1]) insert(t, y);
    }
    for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
        if (threadIdx.x >= half && threadIdx.x < 2 * half) {
            u64* dst = buf + (size_t)(threadIdx.x - half) * TOPK;
#pragma unroll
            for (int j = 0; j < TOPK; ++j) dst[j] = t[j];
            sm[threadIdx.x - half] = m;
            sd[threadIdx.x - half] = d;
        }
        __syncthreads();
        if (threadIdx.x < half) {
            const u64* src = buf + (size_t)threadIdx.x * TOPK;
            for (int j = 0; j < TOPK; ++j) {
                const u64 y = src[j];
                if (y <= t[TOPK - 1]) break;          // the partner's list is sorted: the rest is smaller
                insert(t, y);
            }
            online_merge(m, d, sm[threadIdx.x], sd[threadIdx.x]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const size_t o = (size_t)blockIdx.x * N;
#pragma unroll
        for (int j = 0; j < TOPK; ++j)
            if (j < N) {
                const float x = key_float((unsigned)(t[j] >> 32));
                P[o + j] = expf(x - m) / d;
                I[o + j] = (int)key_index(t[j]);
            }
    }
}
