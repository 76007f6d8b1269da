// Block-level helpers shared by the SLIDE kernels: exclusive scan of one int per thread, binary
// search, bitonic sort of a power-of-two array (shared or global memory, generic pointers).
#pragma once
#include <stdint.h>

typedef unsigned long long u64;

// Exclusive scan of v over the block (blockDim.x a multiple of 32, <= 1024); *total gets the sum.
// Starts and ends with a barrier, so it may be called in a loop with the same scratch.
__device__ __forceinline__ int block_excl_scan(int v, int* total, int* sh /* 33 ints */)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xFFFFFFFFu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) sh[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int s = lane < nw ? sh[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xFFFFFFFFu, s, o);
            if (lane >= o) s += y;
        }
        if (lane < nw) sh[lane] = s;                 // inclusive warp totals
        if (lane == 31) sh[32] = s;
    }
    __syncthreads();
    const int before = warp ? sh[warp - 1] : 0;
    *total = sh[32];
    __syncthreads();
    return before + x - v;
}

// First position in a[0..n) (ascending) whose value is >= key.
template <typename T>
__device__ __forceinline__ int lower_bound(const T* a, int n, T key)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (a[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// The low 32-bit words of a u64 array (little-endian), as searched by lower_bound_low.
__device__ __forceinline__ int lower_bound_low(const u64* a, int n, unsigned key)
{
    const unsigned* w = reinterpret_cast<const unsigned*>(a);
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (w[2 * mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Ascending bitonic sort of a[0..n), n a power of two, by the whole block. The caller orders the
// writes of a[] before the call with a barrier; the sort ends with one.
template <typename T>
__device__ void bitonic_sort(T* a, int n)
{
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < (n >> 1); i += blockDim.x) {
                const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
                const bool asc = (lo & size) == 0;
                const T x = a[lo], y = a[hi];
                if ((x > y) == asc) { a[lo] = y; a[hi] = x; }
            }
            __syncthreads();
        }
}

__device__ __forceinline__ int pow2_ceil(int n)
{
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}
