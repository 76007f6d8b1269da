// SLIDE (G-SLIDE) locality-sensitive hashing: WTA / DWTA codes of many vectors.
//
// Compile-time shape (kernels.load defines): SLIDE_K codes per table, SLIDE_BIN window (bin size),
// SLIDE_DWTA (0: WTA, 1: densified WTA). bits per code = ceil(log2(SLIDE_BIN)).
//
// Code j of table t for a vector v: c = argmax_{k < BIN} v[bins[(t*K + j)*BIN + k]], strict '>'
// from -inf so the first maximum wins. DWTA: a bin whose maximum is <= 0 is empty and takes the
// code of bin (j + r) % K of the same table for the smallest r in 1..K-1 whose bin is non-empty;
// all K empty: code 0. bucket = sum_j c_j << ((K-1-j) * bits).
#include <math.h>
#include <stdint.h>

#ifndef SLIDE_K
#define SLIDE_K 6
#endif
#ifndef SLIDE_BIN
#define SLIDE_BIN 8
#endif
#ifndef SLIDE_DWTA
#define SLIDE_DWTA 0
#endif

constexpr int ceil_log2(int x) { return x <= 1 ? 0 : 1 + ceil_log2((x + 1) / 2); }
constexpr int BITS = ceil_log2(SLIDE_BIN);

// The bucket of vector v in table t; codes (K ints) written when codes != nullptr.
template <bool GLOBAL>
__device__ __forceinline__ int wta_bucket(const float* __restrict__ v, const int* __restrict__ bins, int t,
                                          int* __restrict__ codes)
{
    int c[SLIDE_K];
    float mx[SLIDE_K];
#pragma unroll
    for (int j = 0; j < SLIDE_K; ++j) {
        const int* bin = bins + (t * SLIDE_K + j) * SLIDE_BIN;
        float best = -INFINITY;
        int arg = 0;
#pragma unroll
        for (int k = 0; k < SLIDE_BIN; ++k) {
            const int f = __ldg(bin + k);
            const float x = GLOBAL ? __ldg(v + f) : v[f];
            if (x > best) { best = x; arg = k; }
        }
        c[j] = arg;
        mx[j] = best;
    }
    int bucket = 0;
#pragma unroll
    for (int j = 0; j < SLIDE_K; ++j) {
        int code = c[j];
#if SLIDE_DWTA
        if (!(mx[j] > 0.f)) {
            code = 0;
            bool found = false;
#pragma unroll
            for (int r = 1; r < SLIDE_K; ++r) {
                const int jj = (j + r) % SLIDE_K;
                if (!found && mx[jj] > 0.f) { code = c[jj]; found = true; }
            }
        }
#endif
        if (codes) codes[j] = code;
        bucket |= code << ((SLIDE_K - 1 - j) * BITS);
    }
    (void)mx;
    return bucket;
}

// One thread per (vector i, table t); vectors are rows of V (leading dimension ldv). Outputs:
//   codes   (n, L, K) int32, optional;  buckets (n, L) int32, optional.
extern "C" __global__ void wta_hash(const float* __restrict__ V, int ldv, int n, const int* __restrict__ bins,
                                    int L, int* __restrict__ codes, int* __restrict__ buckets)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * L) return;
    const int i = (int)(idx / L), t = (int)(idx % L);
    const int b = wta_bucket<true>(V + (size_t)i * ldv, bins, t, codes ? codes + idx * SLIDE_K : nullptr);
    if (buckets) buckets[idx] = b;
}

// Table build keys: vector i of the insertion order is row order[i] of V (hid floats, leading
// dimension ldv). A block stages TILE rows in shared memory (row stride hid + 1: no bank conflicts)
// and hashes them in every table, i fastest, so that the writes
//   keys[t * n + i] = ((t * nb + bucket) << rbits) | i
// are coalesced. One ascending sort of the keys orders them by (table, bucket, insertion rank).
// Dynamic shared memory: 4 * TILE * (hid + 1) bytes.
#define BUILD_TILE 32
extern "C" __global__ void wta_build_keys(const float* __restrict__ V, int ldv, int hid, const int* __restrict__ order,
                                          int n, const int* __restrict__ bins, int L, int nb, int rbits,
                                          unsigned long long* __restrict__ keys)
{
    extern __shared__ float tile[];
    const int i0 = blockIdx.x * BUILD_TILE, rows = min(BUILD_TILE, n - i0), st = hid + 1;
    for (int r = threadIdx.y; r < rows; r += blockDim.y) {
        const float* src = V + (size_t)__ldg(order + i0 + r) * ldv;
        for (int k = threadIdx.x; k < hid; k += blockDim.x) tile[r * st + k] = __ldg(src + k);
    }
    __syncthreads();
    const int il = threadIdx.x;                      // blockDim.x == BUILD_TILE
    if (il >= rows) return;
    for (int t = threadIdx.y; t < L; t += blockDim.y) {
        const int b = wta_bucket<false>(tile + il * st, bins, t, nullptr);
        keys[(size_t)t * n + i0 + il] = ((unsigned long long)((long long)t * nb + b) << rbits) |
                                        (unsigned long long)(i0 + il);
    }
}
