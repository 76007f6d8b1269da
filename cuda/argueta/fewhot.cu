// N-hot ("few-hot") lookup C = A B: A an L x K CSR matrix (0-based, L+1 row pointers), B a dense
// row-major K x M float32 matrix, C a dense row-major L x M float32 matrix.
// Argueta & Chiang, Algorithm 2, with its index swap fixed (A_r[l], A_r[l+1], B[z][m]).

// The paper's mapping: one output element per thread in a 32 x 32 block; threadIdx.x runs over m
// so that a warp shares one row l (A reads are broadcasts, B reads are coalesced).
extern "C" __global__ void fewhot_paper(const int* __restrict__ indptr, const int* __restrict__ indices,
                                        const float* __restrict__ vals, const float* __restrict__ B,
                                        float* __restrict__ C, int L, int M)
{
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    const int l = blockIdx.y * blockDim.y + threadIdx.y;
    if (l >= L || m >= M) return;
    float x = 0.f;
    const int end = indptr[l + 1];
    for (int k = indptr[l]; k < end; ++k)
        x = fmaf(vals[k], B[(size_t)indices[k] * M + m], x);
    C[(size_t)l * M + m] = x;
}

// Improved: a 1-D block covers a slice of one row's M columns, four columns per thread through
// float4 loads and stores (needs M % 4 == 0 and 16-byte aligned B and C; the host checks), the
// non-zeros of the row are read once per thread (warp-uniform, cached), two accumulators hide the
// load latency. grid = (ceil(M / (4 * blockDim.x)), L).
// NHOT > 0: every row has exactly nhot non-zeros (indptr[l] = l * nhot, checked by the host), so
// the row-pointer load drops out of the chain of dependent loads (pointer -> index -> row of B),
// which is what a lookup of a few rows waits on.
template <bool NHOT>
__device__ __forceinline__ void row_span(const int* __restrict__ indptr, int l, int nhot, int& k, int& end)
{
    if (NHOT) { k = l * nhot; end = k + nhot; }
    else { k = __ldg(indptr + l); end = __ldg(indptr + l + 1); }
}

template <bool NHOT>
__device__ __forceinline__ void vec4_body(const int* __restrict__ indptr, const int* __restrict__ indices,
                                          const float* __restrict__ vals, const float* __restrict__ B,
                                          float* __restrict__ C, int L, int M, int nhot)
{
    const int l = blockIdx.y;
    const int q = blockIdx.x * blockDim.x + threadIdx.x;     // float4 column
    const int M4 = M >> 2;
    if (q >= M4) return;
    const float4* __restrict__ B4 = reinterpret_cast<const float4*>(B);
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
    int k, end;
    row_span<NHOT>(indptr, l, nhot, k, end);
    for (; k + 1 < end; k += 2) {
        const int z0 = __ldg(indices + k), z1 = __ldg(indices + k + 1);
        const float v0 = __ldg(vals + k), v1 = __ldg(vals + k + 1);
        const float4 r0 = __ldg(B4 + (size_t)z0 * M4 + q);
        const float4 r1 = __ldg(B4 + (size_t)z1 * M4 + q);
        a.x = fmaf(v0, r0.x, a.x); a.y = fmaf(v0, r0.y, a.y); a.z = fmaf(v0, r0.z, a.z); a.w = fmaf(v0, r0.w, a.w);
        b.x = fmaf(v1, r1.x, b.x); b.y = fmaf(v1, r1.y, b.y); b.z = fmaf(v1, r1.z, b.z); b.w = fmaf(v1, r1.w, b.w);
    }
    if (k < end) {
        const int z0 = __ldg(indices + k);
        const float v0 = __ldg(vals + k);
        const float4 r0 = __ldg(B4 + (size_t)z0 * M4 + q);
        a.x = fmaf(v0, r0.x, a.x); a.y = fmaf(v0, r0.y, a.y); a.z = fmaf(v0, r0.z, a.z); a.w = fmaf(v0, r0.w, a.w);
    }
    reinterpret_cast<float4*>(C)[(size_t)l * M4 + q] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// The same mapping, one column per thread, for any M or alignment. grid = (ceil(M / blockDim.x), L).
template <bool NHOT>
__device__ __forceinline__ void vec1_body(const int* __restrict__ indptr, const int* __restrict__ indices,
                                          const float* __restrict__ vals, const float* __restrict__ B,
                                          float* __restrict__ C, int L, int M, int nhot)
{
    const int l = blockIdx.y;
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    float a = 0.f, b = 0.f;
    int k, end;
    row_span<NHOT>(indptr, l, nhot, k, end);
    for (; k + 1 < end; k += 2) {
        a = fmaf(__ldg(vals + k), __ldg(B + (size_t)__ldg(indices + k) * M + m), a);
        b = fmaf(__ldg(vals + k + 1), __ldg(B + (size_t)__ldg(indices + k + 1) * M + m), b);
    }
    if (k < end) a = fmaf(__ldg(vals + k), __ldg(B + (size_t)__ldg(indices + k) * M + m), a);
    C[(size_t)l * M + m] = a + b;
}

#define FEWHOT_ENTRY(name, body, nhot_flag)                                                              \
    extern "C" __global__ void name(const int* __restrict__ indptr, const int* __restrict__ indices,     \
                                    const float* __restrict__ vals, const float* __restrict__ B,         \
                                    float* __restrict__ C, int L, int M, int nhot)                       \
    { body<nhot_flag>(indptr, indices, vals, B, C, L, M, nhot); }

FEWHOT_ENTRY(fewhot_vec4, vec4_body, false)
FEWHOT_ENTRY(fewhot_vec1, vec1_body, false)
FEWHOT_ENTRY(fewhot_vec4_nhot, vec4_body, true)
FEWHOT_ENTRY(fewhot_vec1_nhot, vec1_body, true)
