// Fused softmax + top-N over the rows of an L x K float32 logit matrix (Argueta & Chiang,
// Algorithm 4, corrected). Outputs, per row, the N largest probabilities P (float32, descending)
// and their 0-based column indices I (int32).
//
// Ordering (the same in every kernel and in the NumPy reference):
//   * keys: a float maps to an order-preserving uint32 (negative: ~bits, else bits | 0x80000000),
//     every NaN to 0xFFFFFFFF, so NaN ranks above +inf; -0.0 ranks just below +0.0;
//   * ties: the smaller column index first, through the 64-bit packed key
//     (ord(x) << 32) | (0xFFFFFFFF - index), compared as unsigned;
//   * the packed key 0 is below every real element (it is the empty slot).
// Softmax: p = exp(x - max) / sum(exp(x - max)) accumulated with the online normalizer
// (Milakov & Gimelshein) in float32; a row holding a NaN or +inf gives NaN probabilities (as float64
// NumPy does) with the indices still ranked as above; a row of only -inf gives NaN probabilities.
#include <stdint.h>

#include "topn_keys.cuh"

// Block-wide merge of every thread's (m, d); all threads get the result. Needs blockDim.x % 32 == 0.
__device__ void block_softmax_stats(float& m, float& d)
{
    __shared__ float sm[32], sd[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), d2 = __shfl_xor_sync(0xFFFFFFFFu, d, o);
        online_merge(m, d, m2, d2);
    }
    __syncthreads();                         // sm/sd may still be read by a previous call
    if (lane == 0) { sm[warp] = m; sd[warp] = d; }
    __syncthreads();
    m = -INFINITY; d = 0.f;
    if (lane < nw) { m = sm[lane]; d = sd[lane]; }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), d2 = __shfl_xor_sync(0xFFFFFFFFu, d, o);
        online_merge(m, d, m2, d2);
    }
}

__device__ __forceinline__ void write_result(u64 key, float m, float d, float* P, int* I)
{
    const float x = key_float((unsigned)(key >> 32));
    *P = expf(x - m) / d;
    *I = (int)key_index(key);
}

// ------------------------------------------------------------------ the paper's kernel, corrected
// One block per row; N packed keys in shared memory, inserted by 64-bit atomicMax with the paper's
// swap-and-carry loop (the slots stay sorted in descending order). early != 0 adds the early exit:
// a carried key not above the current N-th slot is dropped (slots only grow, so this is exact).
// Dynamic shared memory: 8 * N bytes.
extern "C" __global__ void topn_atomic(const float* __restrict__ X, int K, int N, int early,
                                       float* __restrict__ P, int* __restrict__ I)
{
    extern __shared__ u64 slots[];
    volatile u64* vslots = slots;
    const float* row = X + (size_t)blockIdx.x * K;
    for (int n = threadIdx.x; n < N; n += blockDim.x) slots[n] = 0ull;
    __syncthreads();
    float m = -INFINITY, d = 0.f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        const float x = row[k];
        online_add(m, d, x);
        u64 y = pack_key(x, (unsigned)k);
        if (early && y <= vslots[N - 1]) continue;
        for (int n = 0; n < N; ++n) {
            if (early && vslots[n] >= y) continue;          // atomicMax would not change slot n
            const u64 c = atomicMax(&slots[n], y);
            if (c < y) y = c;
            if (y == 0ull || (early && y <= vslots[N - 1])) break;
        }
    }
    block_softmax_stats(m, d);               // its barriers also order the atomics before the reads
    __syncthreads();
    const size_t o = (size_t)blockIdx.x * N;
    for (int n = threadIdx.x; n < N; n += blockDim.x) write_result(slots[n], m, d, P + o + n, I + o + n);
}

// ------------------------------------------------------------------ radix select (our design)
// Exact top-N of `cnt` elements held in shared memory: high words hi[i] (ordered float keys) and
// low words lo(i) (0xFFFFFFFF - index); an MSB-first 8-bit radix select finds the N-th largest
// packed key T, then every key >= T (exactly N) is gathered into cand[0..N).
struct SelectScratch {
    unsigned hist[256];
    unsigned digit, remain, eq, count;
};

__device__ __forceinline__ unsigned low_word(const unsigned* lo, unsigned base, int i)
{
    return lo ? lo[i] : 0xFFFFFFFFu - (base + (unsigned)i);
}

// One radix pass: histogram of digit (shift) over elements whose word (hi or low) matches
// prefix/mask (and, for low passes, whose hi word equals hiT); then the digit of rank `remain`.
__device__ void radix_pass(const unsigned* hi, const unsigned* lo, unsigned base, int cnt, bool low,
                           unsigned hiT, unsigned prefix, unsigned mask, int shift, SelectScratch& s)
{
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s.hist[i] = 0u;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    for (int b0 = 0; b0 < cnt; b0 += blockDim.x) {
        const int i = b0 + threadIdx.x;
        unsigned bin = 256u;
        if (i < cnt) {
            const unsigned h = hi[i];
            if (!low) {
                if ((h & mask) == prefix) bin = (h >> shift) & 0xFFu;
            } else if (h == hiT) {
                const unsigned w = low_word(lo, base, i);
                if ((w & mask) == prefix) bin = (w >> shift) & 0xFFu;
            }
        }
        if (__any_sync(0xFFFFFFFFu, bin < 256u)) {        // later passes: most warps have no match
            const unsigned peers = __match_any_sync(0xFFFFFFFFu, bin);
            if (bin < 256u && lane == __ffs(peers) - 1) atomicAdd(&s.hist[bin], (unsigned)__popc(peers));
        }
    }
    __syncthreads();
    if (threadIdx.x < 32) digit_of_rank<false>(s.hist, s.digit, s.remain, s.eq);
    __syncthreads();
}

// Requires cnt >= N >= 1. Leaves the N largest packed keys, unordered, in cand[0..N).
__device__ void select_topn(const unsigned* hi, const unsigned* lo, unsigned base, int cnt, int N,
                            u64* cand, SelectScratch& s)
{
    if (threadIdx.x == 0) s.remain = (unsigned)N;
    __syncthreads();
    unsigned prefix = 0u, mask = 0u;
    for (int shift = 24; shift >= 0; shift -= 8) {
        radix_pass(hi, lo, base, cnt, false, 0u, prefix, mask, shift, s);
        prefix |= s.digit << shift;
        mask |= 0xFFu << shift;
    }
    const unsigned hiT = prefix;
    unsigned loT = 0u;
    if (s.remain != s.eq) {                  // ties at the threshold: rank them by index
        prefix = 0u; mask = 0u;
        for (int shift = 24; shift >= 0; shift -= 8) {
            radix_pass(hi, lo, base, cnt, true, hiT, prefix, mask, shift, s);
            prefix |= s.digit << shift;
            mask |= 0xFFu << shift;
        }
        loT = prefix;
    }
    const u64 T = ((u64)hiT << 32) | loT;
    if (threadIdx.x == 0) s.count = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
        const u64 kk = ((u64)hi[i] << 32) | low_word(lo, base, i);
        if (kk >= T) cand[atomicAdd(&s.count, 1u)] = kk;
    }
    __syncthreads();
}

// Bitonic sort of cand[0..NP) in descending order (NP a power of two).
__device__ void sort_desc(u64* cand, int NP)
{
    for (int size = 2; size <= NP; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < NP; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool desc = (i & size) == 0;
                    const u64 a = cand[i], b = cand[j];
                    if ((a < b) == desc) { cand[i] = b; cand[j] = a; }
                }
            }
            __syncthreads();
        }
}

// One block per (chunk, row): grid = (S, L). Each block loads its chunk [c0, c0 + chunk) of the row
// into shared memory as ordered keys, accumulates the online softmax statistics, and selects the
// chunk's top N. S == 1: writes the final sorted P, I. S > 1: writes N candidates (packed keys,
// padded with 0 when the chunk is shorter than N) and the chunk's (max, sum) to the workspace.
// Dynamic shared memory: 4 * chunk + 8 * NP bytes (NP: a power of two >= N).
extern "C" __global__ void topn_radix(const float* __restrict__ X, int K, int N, int NP, int chunk,
                                      float* __restrict__ P, int* __restrict__ I,
                                      u64* __restrict__ wsKey, float* __restrict__ wsM, float* __restrict__ wsD)
{
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ SelectScratch s;
    const int S = gridDim.x, c = blockIdx.x, r = blockIdx.y;
    u64* cand = reinterpret_cast<u64*>(smem);
    unsigned* hi = reinterpret_cast<unsigned*>(smem + 8 * (size_t)NP);
    const int c0 = c * chunk;
    const int cnt = max(0, min(chunk, K - c0));
    const float* row = X + (size_t)r * K + c0;
    float m = -INFINITY, d = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
        const float x = row[i];
        online_add(m, d, x);
        hi[i] = ord_key(x);
    }
    for (int i = threadIdx.x; i < NP; i += blockDim.x) cand[i] = 0ull;
    block_softmax_stats(m, d);
    __syncthreads();
    if (cnt > N) {
        select_topn(hi, nullptr, (unsigned)c0, cnt, N, cand, s);
    } else {
        for (int i = threadIdx.x; i < cnt; i += blockDim.x)
            cand[i] = ((u64)hi[i] << 32) | (u64)(0xFFFFFFFFu - (unsigned)(c0 + i));
        __syncthreads();
    }
    if (S == 1) {
        sort_desc(cand, NP);
        const size_t o = (size_t)r * N;
        for (int n = threadIdx.x; n < N; n += blockDim.x) write_result(cand[n], m, d, P + o + n, I + o + n);
    } else {
        const size_t o = ((size_t)r * S + c) * N;
        for (int n = threadIdx.x; n < N; n += blockDim.x) wsKey[o + n] = cand[n];
        if (threadIdx.x == 0) { wsM[(size_t)r * S + c] = m; wsD[(size_t)r * S + c] = d; }
    }
}

// Merge of the S partial results of each row: grid = L. Dynamic shared memory: 8 * S * N + 8 * NP.
extern "C" __global__ void topn_merge(const u64* __restrict__ wsKey, const float* __restrict__ wsM,
                                      const float* __restrict__ wsD, int S, int N, int NP,
                                      float* __restrict__ P, int* __restrict__ I)
{
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ SelectScratch s;
    const int r = blockIdx.x, cnt = S * N;
    u64* cand = reinterpret_cast<u64*>(smem);
    unsigned* hi = reinterpret_cast<unsigned*>(smem + 8 * (size_t)NP);
    unsigned* lo = hi + cnt;
    const u64* src = wsKey + (size_t)r * cnt;
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
        const u64 k = src[i];
        hi[i] = (unsigned)(k >> 32);
        lo[i] = (unsigned)(k & 0xFFFFFFFFull);
    }
    for (int i = threadIdx.x; i < NP; i += blockDim.x) cand[i] = 0ull;
    float m = -INFINITY, d = 0.f;
    for (int i = threadIdx.x; i < S; i += blockDim.x) online_merge(m, d, wsM[(size_t)r * S + i], wsD[(size_t)r * S + i]);
    block_softmax_stats(m, d);
    __syncthreads();
    select_topn(hi, lo, 0u, cnt, N, cand, s);
    sort_desc(cand, NP);
    const size_t o = (size_t)r * N;
    for (int n = threadIdx.x; n < N; n += blockDim.x) write_result(cand[n], m, d, P + o + n, I + o + n);
}
