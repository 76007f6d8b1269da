// Fused softmax + top-N in one pass over each row held in registers (our design, `topn_bucket`).
// One block per row; thread t holds the columns 4 * (j * blockDim + t) + c (j < V, c < 4), loaded as
// float4 when the row is 16-byte aligned (vec != 0), so the row is read from device memory once and
// never written to shared memory. Per row:
//   1. the softmax normaliser: each thread's max and sum of exp over its own values (two passes over
//      registers), merged across the block with the online rule (one block reduction);
//   2. a lower bound on the N-th largest key: each thread's largest key is one distinct element, so
//      the N-th largest of these blockDim "thread maxima" is at most the row's N-th largest. Two
//      8-bit radix passes over the thread maxima (one atomic per thread each, not one per element)
//      find the 16-bit key prefix B of that element; every element whose key is >= B << 16 is a
//      candidate (at least N of them, typically N to 1.3 N);
//   3. the candidates (64-bit packed keys, unique) are appended to shared memory (one atomic per
//      warp) and ranked by counting: rank(k) = #{candidates > k}; ranks < N are written out.
// Exact fallback (constant rows, rows with fewer than N threads holding elements, more than
// BUCKET_CAP candidates): an MSB-first 8-bit radix select over all the row's packed keys (value
// bits, then index bits for ties) finds the exact N-th key; the N keys >= it are ranked as above.
//
// Keys, tie rule (smaller index first), NaN and infinity rules: as in topn.cu (topn_keys.cuh).
// Requires K <= 4 * V * blockDim, blockDim % 32 == 0, 1 <= N <= min(K, BUCKET_CAP).
// Static shared memory only (about 10 KB).
#include <stdint.h>

#include "topn_keys.cuh"

#define BUCKET_CAP 1024              // candidates held in shared memory (and the largest N)
#define BUCKET_NONE 256u             // "no digit": fewer keys than wanted

struct BucketScratch {
    u64 cand[BUCKET_CAP];
    unsigned hist[256], hist2[256];
    float wm[32], wd[32];
    unsigned count, digit, remain, eq;
};

// Warp 0 only: the digit holding the key of rank s.remain (digit_of_rank, topn_keys.cuh), or
// s.digit = BUCKET_NONE when the histogram holds fewer than s.remain keys.
__device__ __forceinline__ void find_digit(const unsigned* hist, BucketScratch& s)
{
    digit_of_rank<true>(hist, s.digit, s.remain, s.eq, BUCKET_NONE);
}

template <int V>
__device__ __forceinline__ int column(int j, int c) { return 4 * (j * (int)blockDim.x + (int)threadIdx.x) + c; }

// Exact N-th largest packed key of the row: an MSB-first radix select with 8-bit digits of the
// value key, then (ties at the threshold value) of the index word. The row is read again from
// global memory (a rare path: it runs only when the bound of bucket_row leaves too many candidates),
// coalesced, each thread taking the columns threadIdx.x + k * blockDim.x. Leaves the N keys >= the
// threshold in s.cand and returns N. Every thread of the block must call it.
__device__ __noinline__ int exact_select(const float* __restrict__ row, int K, int N, BucketScratch& s)
{
    const int lane = threadIdx.x & 31;
    const int Kr = (K + 31) & ~31;                     // whole warps in every loop (for the warp votes)
    if (threadIdx.x == 0) s.remain = (unsigned)N;
    unsigned prefix = 0u, mask = 0u, hiT = 0u, loT = 0u;
    for (int word = 0; word < 2; ++word) {
        if (word == 1) {
            if (s.remain == s.eq) break;              // every key at the threshold value is in
            prefix = 0u;
            mask = 0u;
        }
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += blockDim.x) s.hist[i] = 0u;
            __syncthreads();
            for (int col = threadIdx.x; col < Kr; col += blockDim.x) {
                unsigned bin = 256u;
                if (col < K) {
                    const unsigned h = ord_key(row[col]);
                    if (word == 0) {
                        if ((h & mask) == prefix) bin = (h >> shift) & 0xFFu;
                    } else if (h == hiT) {
                        const unsigned w = 0xFFFFFFFFu - (unsigned)col;
                        if ((w & mask) == prefix) bin = (w >> shift) & 0xFFu;
                    }
                }
                if (__any_sync(0xFFFFFFFFu, bin < 256u)) {
                    const unsigned peers = __match_any_sync(0xFFFFFFFFu, bin);
                    if (bin < 256u && lane == __ffs(peers) - 1) atomicAdd(&s.hist[bin], (unsigned)__popc(peers));
                }
            }
            __syncthreads();
            if (threadIdx.x < 32) find_digit(s.hist, s);
            __syncthreads();
            prefix |= s.digit << shift;               // K >= N: a digit always exists here
            mask |= 0xFFu << shift;
        }
        if (word == 0) hiT = prefix;
        else loT = prefix;
    }
    const u64 T = ((u64)hiT << 32) | loT;
    if (threadIdx.x == 0) s.count = 0u;
    __syncthreads();
    for (int col = threadIdx.x; col < K; col += blockDim.x) {
        const u64 k = pack_key(row[col], (unsigned)col);
        if (k >= T) s.cand[atomicAdd(&s.count, 1u)] = k;
    }
    __syncthreads();
    return N;
}

template <int V>
__device__ __forceinline__ void bucket_row(const float* __restrict__ X, int K, int N, int vec,
                                           float* __restrict__ P, int* __restrict__ I, BucketScratch& s)
{
    constexpr int E = 4 * V;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float* row = X + (size_t)blockIdx.x * K;

    // ---- the row into registers (all loads issued before the first use)
    float x[E];
    if (vec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const int q = j * blockDim.x + threadIdx.x;
            float4 v = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            if (4 * q < K) v = __ldcs(r4 + q);        // K % 4 == 0: the whole float4 is in the row
            x[4 * j] = v.x; x[4 * j + 1] = v.y; x[4 * j + 2] = v.z; x[4 * j + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const int col = column<V>(i >> 2, i & 3);
            x[i] = col < K ? __ldcs(row + col) : -INFINITY;
        }
    }

    // ---- this thread's (max, sum of exp) and largest value key
    float m = -INFINITY;
    unsigned mine = 0u;
    bool any = false;
#pragma unroll
    for (int i = 0; i < E; ++i)
        if (column<V>(i >> 2, i & 3) < K) {
            m = fmaxf(m, x[i]);                       // NaN is skipped here and poisons d below
            mine = max(mine, ord_key(x[i]));
            any = true;
        }
    float d = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i)
        if (column<V>(i >> 2, i & 3) < K && x[i] != -INFINITY) d += expf(x[i] - m);

    // ---- block reduction of (m, d) with the online rule
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), d2 = __shfl_xor_sync(0xFFFFFFFFu, d, o);
        online_merge(m, d, m2, d2);
    }
    if (lane == 0) { s.wm[warp] = m; s.wd[warp] = d; }
    for (int i = threadIdx.x; i < 256; i += blockDim.x) { s.hist[i] = 0u; s.hist2[i] = 0u; }
    if (threadIdx.x == 0) { s.count = 0u; s.remain = (unsigned)N; }
    __syncthreads();
    m = -INFINITY; d = 0.f;
    if (lane < nw) { m = s.wm[lane]; d = s.wd[lane]; }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), d2 = __shfl_xor_sync(0xFFFFFFFFu, d, o);
        online_merge(m, d, m2, d2);
    }
    const float M = m, D = d;

    // ---- bound: the 16-bit key prefix of the N-th largest thread maximum (two 8-bit passes)
    if (any) atomicAdd(&s.hist[mine >> 24], 1u);
    __syncthreads();
    if (threadIdx.x < 32) find_digit(s.hist, s);
    __syncthreads();
    const unsigned b1 = s.digit;
    unsigned C = BUCKET_CAP + 1;
    if (b1 != BUCKET_NONE) {
        if (any && (mine >> 24) == b1) atomicAdd(&s.hist2[(mine >> 16) & 0xFFu], 1u);
        __syncthreads();
        if (threadIdx.x < 32) find_digit(s.hist2, s);
        __syncthreads();
        const unsigned bound = (b1 << 24) | (s.digit << 16);

        // ---- candidates: every key >= bound, appended with one atomic per warp
        unsigned c = 0;
#pragma unroll
        for (int i = 0; i < E; ++i)
            c += (column<V>(i >> 2, i & 3) < K && ord_key(x[i]) >= bound) ? 1u : 0u;
        unsigned incl = c;
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += v;
        }
        unsigned base = 0u;
        if (lane == 31 && incl) base = atomicAdd(&s.count, incl);
        unsigned pos = __shfl_sync(0xFFFFFFFFu, base, 31) + incl - c;
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const int col = column<V>(i >> 2, i & 3);
            if (col < K && ord_key(x[i]) >= bound) {
                if (pos < BUCKET_CAP) s.cand[pos] = pack_key(x[i], (unsigned)col);
                ++pos;
            }
        }
        __syncthreads();
        C = s.count;
    }
    if (C > BUCKET_CAP) {
        __syncthreads();                              // every thread has read s.count
        C = (unsigned)exact_select(row, K, N, s);
    }

    // ---- rank by counting: a group of g lanes per candidate (g * C <= blockDim)
    int g = 1;
    while (g < 32 && 2 * g * (int)C <= (int)blockDim.x) g <<= 1;
    const int groups = blockDim.x / g, q = threadIdx.x & (g - 1), gi = threadIdx.x / g;
    const size_t o = (size_t)blockIdx.x * N;
    for (int i0 = 0; i0 < (int)C; i0 += groups) {
        const int i = i0 + gi;
        u64 key = 0ull;
        unsigned r = 0u;
        if (i < (int)C) {
            key = s.cand[i];
            for (int j = q; j < (int)C; j += g) r += s.cand[j] > key ? 1u : 0u;
        }
        for (int w = 1; w < g; w <<= 1) r += __shfl_xor_sync(0xFFFFFFFFu, r, w);
        if (i < (int)C && q == 0 && r < (unsigned)N) {
            const float xv = key_float((unsigned)(key >> 32));
            P[o + r] = expf(xv - M) / D;
            I[o + r] = (int)key_index(key);
        }
    }
}

#define TOPN_BUCKET(V)                                                                               \
    extern "C" __global__ void __launch_bounds__(1024) topn_bucket_v##V(                             \
        const float* __restrict__ X, int K, int N, int vec, float* __restrict__ P, int* __restrict__ I) \
    {                                                                                                \
        __shared__ BucketScratch s;                                                                  \
        bucket_row<V>(X, K, N, vec, P, I, s);                                                        \
    }

TOPN_BUCKET(1)
TOPN_BUCKET(2)
TOPN_BUCKET(4)
TOPN_BUCKET(8)
