// Fused softmax + top-N in one pass over each row held in registers (our design, `topn_bucket`).
// One block per row; thread t holds the columns 4 * (j * blockDim + t) + c (j < V, c < 4), loaded as
// float4 when the row is 16-byte aligned (vec != 0), so the row is read from device memory once and
// never written to shared memory. Columns past K hold -inf and count as elements that rank below
// every real one (a real -inf has a smaller index), so no loop tests the column. Per row:
//   1. the softmax normaliser: each thread's max and sum of exp over its own values (two passes over
//      registers), merged across the block (one block reduction, each level rescaled to its max);
//   2. a lower bound on the N-th largest key: each thread's largest element is one distinct element,
//      so the N-th largest of these blockDim "thread maxima" is at most the row's N-th largest. Two
//      8-bit radix passes over the thread maxima (one shared atomic per thread each, not one per
//      element) find the 16-bit key prefix B of that maximum; every element with key >= B << 16
//      (tested as a float compare) is a candidate: at least N of them, typically N to 1.3 N;
//   3. the candidates (64-bit packed keys, unique) are appended to shared memory (one atomic per
//      warp) and ranked: rank(k) = #{candidates > k}, counted directly for up to RANK_DIRECT of
//      them, else after a counting sort by an 8-bit digit (only keys in the same bin are compared);
//      ranks < N are written out.
// Exact fallback (constant rows, rows with fewer than N threads, more than BUCKET_CAP candidates):
// an MSB-first 8-bit radix select over all the row's packed keys (value bits, then index bits for
// ties) finds the exact N-th key; the N keys >= it are ranked as above.
//
// Keys, tie rule (smaller index first), NaN and infinity rules: as in topn.cu (topn_keys.cuh).
// Requires K <= 4 * V * blockDim, blockDim % 32 == 0, 1 <= N <= min(K, BUCKET_CAP).
// Static shared memory only (about 18 KB).
#include <stdint.h>

#include "topn_keys.cuh"

#define BUCKET_CAP 1024              // candidates held in shared memory (and the largest N)
#define BUCKET_NONE 256u             // "no digit": fewer keys than wanted

struct BucketScratch {
    u64 cand[BUCKET_CAP], cand2[BUCKET_CAP];
    unsigned hist[256], hist2[256];
    float wm[32], wd[32];
    unsigned whi[32];
    unsigned count, digit, remain, eq;
};

// Warp 0 only: the digit holding the key of rank s.remain (digit_of_rank, topn_keys.cuh), or
// s.digit = BUCKET_NONE when the histogram holds fewer than s.remain keys.
__device__ __forceinline__ void find_digit(const unsigned* hist, BucketScratch& s)
{
    digit_of_rank<true>(hist, s.digit, s.remain, s.eq, BUCKET_NONE);
}

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

// Block-wide (max, sum of exp) of every thread's (m, d), where d = sum exp(x - m) over the thread's
// values: each level rescales the sums to the level's max (a thread or warp whose values are all
// -inf has d = 0 and adds nothing; a NaN d poisons the result), and the largest key `hm`. All
// threads get the result. Leaves s.wm, s.wd, s.whi in use until the caller's next barrier.
__device__ __forceinline__ void block_stats(float& m, float& d, unsigned& hm, BucketScratch& s)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float M = m;
    for (int o = 16; o > 0; o >>= 1) {
        M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu, M, o));
        hm = max(hm, __shfl_xor_sync(0xFFFFFFFFu, hm, o));
    }
    d = (m == -INFINITY) ? (d != d ? d : 0.f) : d * __expf(m - M);
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xFFFFFFFFu, d, o);
    if (lane == 0) { s.wm[warp] = M; s.wd[warp] = d; s.whi[warp] = hm; }
    __syncthreads();
    m = -INFINITY; d = 0.f; hm = 0u;
    if (lane < nw) { m = s.wm[lane]; d = s.wd[lane]; hm = s.whi[lane]; }
    M = m;
    for (int o = 16; o > 0; o >>= 1) {
        M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu, M, o));
        hm = max(hm, __shfl_xor_sync(0xFFFFFFFFu, hm, o));
    }
    d = (m == -INFINITY) ? (d != d ? d : 0.f) : d * __expf(m - M);
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xFFFFFFFFu, d, o);
    m = M;
}

__device__ __forceinline__ void write_out(u64 key, unsigned r, float M, float D, float* P, int* I)
{
    const float xv = key_float((unsigned)(key >> 32));
    P[r] = expf(xv - M) / D;
    I[r] = (int)key_index(key);
}

// Rank each of the C candidates in s.cand (unique packed keys) by counting the larger ones and
// write those of rank < N. Up to RANK_DIRECT candidates: g lanes per candidate (g * C <= blockDim)
// each count over a share of all C. More: a counting sort by an 8-bit digit of (value key - lo),
// shift chosen so that the candidates between lo and hi span the 256 bins, then counting inside
// each bin only.
#define RANK_DIRECT 256

// Bin of a candidate for the counting sort: 0 for the largest keys; monotone (non-increasing) in
// the key for keys >= lo; clamped, so a key above the block's largest thread maximum (+0.0 beside
// a -0.0 that fmaxf returned) still lands in bin 0.
__device__ __forceinline__ unsigned rank_bin(u64 key, unsigned lo, int sh)
{
    return 255u - min(255u, ((unsigned)(key >> 32) - lo) >> sh);
}

__device__ __forceinline__ void rank_and_write(int C, int N, unsigned lo, unsigned hi, float M, float D,
                                               float* P, int* I, BucketScratch& s)
{
    if (C <= RANK_DIRECT) {
        int g = 1;
        while (g < 32 && 2 * g * C <= (int)blockDim.x) g <<= 1;
        const int groups = blockDim.x / g, q = threadIdx.x & (g - 1), gi = threadIdx.x / g;
        for (int i0 = 0; i0 < C; i0 += groups) {
            const int i = i0 + gi;
            u64 key = 0ull;
            unsigned r = 0u;
            if (i < C) {
                key = s.cand[i];
                for (int j = q; j < C; j += g) r += s.cand[j] > key ? 1u : 0u;
            }
            for (int w = 1; w < g; w <<= 1) r += __shfl_xor_sync(0xFFFFFFFFu, r, w);
            if (i < C && q == 0 && r < (unsigned)N) write_out(key, r, M, D, P, I);
        }
        return;
    }
    const unsigned span = hi - lo;
    const int sh = span ? max(0, 24 - __clz(span)) : 0;          // (hi - lo) >> sh < 256
    unsigned* cnt = s.hist;                                       // per bin, then the bin's cursor
    unsigned* start = s.hist2;                                    // first position of each bin
    for (int i = threadIdx.x; i < 256; i += blockDim.x) cnt[i] = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        atomicAdd(&cnt[rank_bin(s.cand[i], lo, sh)], 1u);
    __syncthreads();
    if (threadIdx.x < 32) {                                       // exclusive scan of the 256 bins
        const int lane = threadIdx.x;
        unsigned c[8], tot = 0u;
#pragma unroll
        for (int t = 0; t < 8; ++t) { c[t] = cnt[8 * lane + t]; tot += c[t]; }
        unsigned incl = tot;
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += v;
        }
        unsigned run = incl - tot;
#pragma unroll
        for (int t = 0; t < 8; ++t) { start[8 * lane + t] = run; cnt[8 * lane + t] = run; run += c[t]; }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < C; i += blockDim.x) {          // scatter into bin order
        const u64 k = s.cand[i];
        s.cand2[atomicAdd(&cnt[rank_bin(k, lo, sh)], 1u)] = k;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < C; p += blockDim.x) {
        const u64 k = s.cand2[p];
        const unsigned b = rank_bin(k, lo, sh);
        const unsigned b0 = start[b], b1 = cnt[b];                // cnt[b] is now the bin's end
        if (b0 >= (unsigned)N) continue;                          // the whole bin ranks N or later
        unsigned r = b0;
        for (unsigned j = b0; j < b1; ++j) r += s.cand2[j] > k ? 1u : 0u;
        if (r < (unsigned)N) write_out(k, r, M, D, P, I);
    }
}

template <int V>
__device__ __forceinline__ void bucket_row(const float* __restrict__ X, int K, int N, int vec,
                                           float* __restrict__ P, int* __restrict__ I, BucketScratch& s)
{
    constexpr int E = 4 * V;
    const int lane = threadIdx.x & 31;
    const float* row = X + (size_t)blockIdx.x * K;

    // ---- the row into registers (all loads issued before the first use). Columns past K read as
    // -inf: they rank below every real element (a real -inf has a smaller index), K >= N real
    // elements exist, so they never reach the top N and need no test below.
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
            const int col = 4 * ((i >> 2) * blockDim.x + threadIdx.x) + (i & 3);
            x[i] = col < K ? __ldcs(row + col) : -INFINITY;
        }
    }

    // ---- this thread's (max, sum of exp) and the key of its largest element
    float m = -INFINITY;
    bool nan = false;
#pragma unroll
    for (int i = 0; i < E; ++i) {
        m = fmaxf(m, x[i]);                           // skips NaN: a NaN poisons d below
        nan |= x[i] != x[i];
    }
    float d = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) d += x[i] == -INFINITY ? 0.f : __expf(x[i] - m);
    const unsigned mine = nan ? 0xFFFFFFFFu : ord_key(m);        // the key of one of its elements
    unsigned hm = mine;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) { s.hist[i] = 0u; s.hist2[i] = 0u; }
    if (threadIdx.x == 0) { s.count = 0u; s.remain = (unsigned)N; }
    block_stats(m, d, hm, s);                         // its barrier also publishes the zeroing
    const float M = m, D = d;

    // ---- bound: the 16-bit key prefix of the N-th largest thread maximum (two 8-bit passes)
    atomicAdd(&s.hist[mine >> 24], 1u);
    __syncthreads();
    if (threadIdx.x < 32) find_digit(s.hist, s);
    __syncthreads();
    const unsigned b1 = s.digit;
    unsigned C = BUCKET_CAP + 1, bound = 0u;
    if (b1 != BUCKET_NONE) {
        if ((mine >> 24) == b1) atomicAdd(&s.hist2[(mine >> 16) & 0xFFu], 1u);
        __syncthreads();
        if (threadIdx.x < 32) find_digit(s.hist2, s);
        __syncthreads();
        bound = (b1 << 24) | (s.digit << 16);
        // key >= bound implies x >= fb (and NaN passes): a superset of the keys >= bound, the same
        // predicate for the count and the gather
        const float fb = key_float(bound);

        // ---- candidates: every element with !(x < fb), appended with one atomic per warp
        unsigned c = 0;
#pragma unroll
        for (int i = 0; i < E; ++i) c += !(x[i] < fb) ? 1u : 0u;
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
            if (!(x[i] < fb)) {
                const unsigned col = 4u * ((i >> 2) * blockDim.x + threadIdx.x) + (i & 3);
                if (pos < BUCKET_CAP) s.cand[pos] = pack_key(x[i], col);
                ++pos;
            }
        }
        __syncthreads();
        C = s.count;
        // the smallest key a candidate can have: -0.0 passes x >= +0.0; with fb NaN every element does
        bound = fb != fb ? 0u : ord_key(fb == 0.f ? -0.f : fb);
    }
    if (C > BUCKET_CAP) {
        __syncthreads();                              // every thread has read s.count
        C = (unsigned)exact_select(row, K, N, s);
        bound = 0u;
    }
    rank_and_write((int)C, N, bound, hm, M, D, P + (size_t)blockIdx.x * N, I + (size_t)blockIdx.x * N, s);
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
