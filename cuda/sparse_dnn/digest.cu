// A 64-bit digest of final activations, to compare passes bit for bit without copying them back.
// Element (c, j) of a matrix is Y[c * ld_row + j * ld_col] for c < R (R = *count when count is not
// null, else rows) and j < N; it belongs to image r0 + (ids ? ids[c] : c). The digest is the sum,
// modulo 2^64, of a mix of (image, j, the value's bits) over the elements whose bits are nonzero:
// addition modulo 2^64 is associative, so the digest depends on the values and their positions
// only, not on the layout (row-major dense rows or transposed compacted columns) or on the order
// of the atomics; two activations that differ in one bit give another digest (unless the mix
// collides, with probability ~2^-64).

__device__ __forceinline__ unsigned long long digest_mix(unsigned long long x)
{
    x += 0x9E3779B97F4A7C15ull;                               // splitmix64 finaliser
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

extern "C" __global__ void digest_f32(const float* __restrict__ Y, int rows, const int* __restrict__ count, int N,
                                      long long ld_row, long long ld_col, const int* __restrict__ ids,
                                      long long r0, unsigned long long* __restrict__ out)
{
    const int R = count ? count[0] : rows;
    const long long total = (long long)R * N;
    const bool rowmajor = (ld_col == 1);                      // j fastest when rows are contiguous, else c
    unsigned long long acc = 0;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long c = rowmajor ? t / N : t % R;
        const long long j = rowmajor ? t % N : t / R;
        const unsigned bits = __float_as_uint(Y[c * ld_row + j * ld_col]);
        if (bits == 0u) continue;
        const unsigned long long img = (unsigned long long)(r0 + (ids ? ids[c] : c));
        acc += digest_mix(digest_mix(img * (unsigned long long)N + (unsigned long long)j) ^ bits);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0 && acc) atomicAdd(out, acc);
}
