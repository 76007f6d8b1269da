// Order-preserving packed keys and the online softmax normalizer, shared by every top-N kernel
// (ours in cuda/argueta/topn.cu and the online-normalizer baseline in online_topk.cu).
//   * ord_key: float -> unsigned, monotone, NaN above +inf; key_float inverts it;
//   * pack_key: (ord(x) << 32) | (0xFFFFFFFF - index): ties rank the smaller index first;
//   * online_add / online_merge: Milakov & Gimelshein's running (max, sum of exp) in float32.
#pragma once
#include <math.h>

typedef unsigned long long u64;

__device__ __forceinline__ unsigned ord_key(float x)
{
    const unsigned b = __float_as_uint(x);
    if (x != x) return 0xFFFFFFFFu;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_float(unsigned u)
{
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}

__device__ __forceinline__ u64 pack_key(float x, unsigned idx)
{
    return ((u64)ord_key(x) << 32) | (u64)(0xFFFFFFFFu - idx);
}

__device__ __forceinline__ unsigned key_index(u64 k) { return 0xFFFFFFFFu - (unsigned)(k & 0xFFFFFFFFull); }

__device__ __forceinline__ void online_add(float& m, float& d, float x)
{
    if (x > m) {
        d = (m == -INFINITY) ? 1.f : d * expf(m - x) + 1.f;
        m = x;
        if (x == INFINITY) d = NAN;          // exp(inf - inf) is NaN in the float64 reference too
    } else if (x != -INFINITY) {
        d += expf(x - m);                     // a NaN x makes d NaN
    }
}

__device__ __forceinline__ void online_merge(float& m, float& d, float m2, float d2)
{
    const float mm = fmaxf(m, m2);
    const float a = (m == -INFINITY) ? 0.f : d * expf(m - mm);
    const float b = (m2 == -INFINITY) ? 0.f : d2 * expf(m2 - mm);
    float s = a + b;
    if (d != d || d2 != d2) s = NAN;
    m = mm;
    d = s;
}

// Radix select, one 8-bit digit: warp 0 of the block finds the bin of a 256-bin histogram (bins
// scanned from 255 down, lane j owning bins 255-8j .. 248-8j) that holds the key of rank `remain`
// (1-based, descending), and one lane sets digit = that bin, remain = the rank inside it, eq = its
// count. MAY_MISS: when the histogram holds fewer than `remain` keys, digit = `none` instead (without
// it the caller guarantees enough keys). remain is read by every lane before one lane rewrites it.
template <bool MAY_MISS>
__device__ __forceinline__ void digit_of_rank(const unsigned* hist, unsigned& digit, unsigned& remain,
                                              unsigned& eq, unsigned none = 256u)
{
    const int lane = threadIdx.x & 31;
    unsigned c = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t) c += hist[255 - 8 * lane - t];
    unsigned incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
        if (lane >= o) incl += v;
    }
    const unsigned want = remain;
    __syncwarp();
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, incl >= want);
    if (MAY_MISS && ballot == 0u) {
        if (lane == 0) digit = none;
        return;
    }
    if (lane == __ffs(ballot) - 1) {
        unsigned before = incl - c;
        for (int t = 0; t < 8; ++t) {
            const unsigned bin = 255 - 8 * lane - t, h = hist[bin];
            if (before + h >= want) { digit = bin; remain = want - before; eq = h; break; }
            before += h;
        }
    }
}
