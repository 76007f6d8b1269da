// Sparse DNN inference kernels (HPEC Sparse DNN Challenge semantics):
//   Y_out = min(ymax, max(0, Z + bias * [Z != 0])),  Z = Y_in W
// Y buffers are dense (rows x N) float; per-(row, section) flags say whether a section may hold a
// nonzero. Invariant: flag == 0  =>  the section is all zero (a flag of 1 promises nothing).
//
// Determinism of the snig kernels: the forward feeding scatters each product into the output
// with shared-memory atomics, whose order changes from run to run. Float additions in another
// order give other roundings, so the partial sums are kept in 64-bit fixed point instead: each
// product y * w is formed exactly in double, scaled by 2^K (scale = 2^K, inv = 2^-K, K chosen
// by the host so that ymax * the largest column sum of |W| stays below 2^62) and rounded once to
// an integer; integer addition is associative, so the sum does not depend on the order of the
// atomics. The output is then (double)sum * 2^-K + bias rounded to float32 once.

__device__ __forceinline__ unsigned long long snig_fixed(float y, float w, double scale)
{
    return (unsigned long long)__double2ll_rn((double)y * (double)w * scale);
}

__device__ __forceinline__ float snig_out(unsigned long long acc, double inv, float bias, float ymax)
{
    const long long z = (long long)acc;
    if (z == 0) return 0.0f;                                  // bias only on nonzero sums
    return fminf(fmaxf(__double2float_rn((double)z * inv + (double)bias), 0.0f), ymax);
}

// SNIG forward-feeding kernel (paper Algorithm 1, negation typo corrected), one launch per layer.
// Grid (rows, S), block (dim_x, dim_y), dynamic shared memory 8 * sec bytes (fixed-point sums).
// W is one packed layer of sectioned CSR:  [col_w (S*N+1) | row_w (cap) | val_w (cap, float bits)]
// where col_w[t*N + i] .. col_w[t*N + i + 1] lists input neuron i's targets inside output section t.
extern "C" __global__ void snig_infer(const float* __restrict__ Yin, const unsigned char* __restrict__ nz_in,
                                      float* __restrict__ Yout, unsigned char* __restrict__ nz_out,
                                      const int* __restrict__ W, int N, int S, int sec, int cap,
                                      float bias, float ymax, double scale, double inv)
{
    const int* col_w = W;
    const int* row_w = W + (size_t)S * N + 1;
    const float* val_w = reinterpret_cast<const float*>(row_w + cap);
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int nthr = blockDim.x * blockDim.y;
    const size_t r = blockIdx.x;
    const int s_out = blockIdx.y;
    const size_t row = r * (size_t)N;
    const size_t out0 = row + (size_t)s_out * sec;

    bool all_zero = true;
    for (int s = 0; s < S; ++s) all_zero &= !nz_in[r * S + s];
    if (all_zero) {                                   // empty row: incremental reset only if needed
        // every thread reads the flag before thread 0 clears it (all_zero is uniform in the block);
        // without the barrier a late warp could read the cleared flag and leave its part stale
        const bool stale = nz_out[r * S + s_out] != 0;
        __syncthreads();
        if (stale) {
            for (int j = tid; j < sec; j += nthr) Yout[out0 + j] = 0.0f;
            if (tid == 0) nz_out[r * S + s_out] = 0;
        }
        return;
    }
    extern __shared__ unsigned long long res[];
    for (int k = tid; k < sec; k += nthr) res[k] = 0ull;
    __syncthreads();
    const int base = s_out * sec;
    const int* cw = col_w + (size_t)s_out * N;
    for (int s_in = 0; s_in < S; ++s_in) {
        if (!nz_in[r * S + s_in]) continue;           // skip an all-zero input section
        const int end = (s_in + 1) * sec;
        for (int j = threadIdx.y + s_in * sec; j < end; j += blockDim.y) {
            const float y = Yin[row + j];
            if (y == 0.0f) continue;                  // skip a zero input element
            const int e = cw[j + 1];
            for (int k = cw[j] + threadIdx.x; k < e; k += blockDim.x)
                atomicAdd(&res[row_w[k] - base], snig_fixed(y, val_w[k], scale));
        }
    }
    __syncthreads();
    int any = 0;
    for (int i = tid; i < sec; i += nthr) {
        const float v = snig_out(res[i], inv, bias, ymax);
        Yout[out0 + i] = v;
        any |= (v != 0.0f);
    }
    any = __syncthreads_or(any);
    if (tid == 0) nz_out[r * S + s_out] = (unsigned char)(any != 0);
}

// BF-style kernel (Bisson & Fatica 2019 as re-implemented in the SNIG paper, written correctly):
// the host passes a compacted list of nonzero rows; one block per listed row computes the whole
// output row (pulling each output neuron's in-edges: W packed as CSC [colptr (N+1) | rowidx (cap) |
// val (cap)]), and writes a per-listed-row nonzero flag for the host's next compaction.
// Deterministic: each output is summed by one thread in the fixed CSC order (float32, no atomics).
extern "C" __global__ void bf_infer(const float* __restrict__ Yin, float* __restrict__ Yout,
                                    const int* __restrict__ rows, unsigned char* __restrict__ row_nz,
                                    const int* __restrict__ W, int N, int cap, float bias, float ymax)
{
    const int* colptr = W;
    const int* rowidx = W + N + 1;
    const float* val = reinterpret_cast<const float*>(rowidx + cap);
    const size_t row = (size_t)rows[blockIdx.x] * N;
    int any = 0;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {     // unit stride per thread is blockDim.x
        float z = 0.0f;
        const int e = colptr[j + 1];
        for (int k = colptr[j]; k < e; ++k) z += Yin[row + rowidx[k]] * val[k];
        const float v = (z != 0.0f) ? fminf(fmaxf(z + bias, 0.0f), ymax) : 0.0f;
        Yout[row + j] = v;
        any |= (v != 0.0f);
    }
    any = __syncthreads_or(any);
    if (threadIdx.x == 0) row_nz[blockIdx.x] = (unsigned char)(any != 0);
}

// Input staging: scatter CSR rows [r0, r0 + rows) into a zeroed dense batch and set the section
// flags exactly. One block per row.
extern "C" __global__ void stage_rows(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                      const float* __restrict__ data, long long r0, int N, int S, int sec,
                                      float* __restrict__ Y, unsigned char* __restrict__ nz)
{
    const size_t r = blockIdx.x;
    const long long b = indptr[r0 + r], e = indptr[r0 + r + 1];
    for (long long k = b + threadIdx.x; k < e; k += blockDim.x) {
        const float v = data[k];
        Y[r * (size_t)N + indices[k]] = v;
        if (v != 0.0f) nz[r * S + indices[k] / sec] = 1;
    }
}

// Per-row OR of the section flags (exact categories given the invariant) into out[r0 + r].
extern "C" __global__ void row_flags(const unsigned char* __restrict__ nz, int rows, int S,
                                     unsigned char* __restrict__ out, long long r0)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    unsigned char a = 0;
    for (int s = 0; s < S; ++s) a |= nz[(size_t)r * S + s];
    out[r0 + r] = a;
}

// SNIG with R rows per block (R <= RMAX): the same forward feeding, but each weight entry loaded
// from global memory is applied to the R rows of the block, so a layer's weights are read
// rows/R times instead of rows times. Grid (ceil(rows / R), S), dynamic shared memory 8 * R * sec
// bytes (fixed-point sums, as snig_infer). Empty rows inside a block cost one flag test; a block of empty rows only resets.
#define RMAX 8
extern "C" __global__ void __launch_bounds__(1024) snig_infer_rows(const float* __restrict__ Yin, const unsigned char* __restrict__ nz_in,
                                           float* __restrict__ Yout, unsigned char* __restrict__ nz_out,
                                           const int* __restrict__ W, int N, int S, int sec, int cap,
                                           float bias, float ymax, int rows, int R, double scale,
                                           double inv)
{
    const int* col_w = W;
    const int* row_w = W + (size_t)S * N + 1;
    const float* val_w = reinterpret_cast<const float*>(row_w + cap);
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int nthr = blockDim.x * blockDim.y;
    const int r0 = blockIdx.x * R;
    const int nr = min(R, rows - r0);
    const int s_out = blockIdx.y;
    unsigned live = 0;                                  // bit rr: row r0 + rr has a nonzero input
    for (int rr = 0; rr < nr; ++rr) {
        bool nz = false;
        for (int s = 0; s < S; ++s) nz |= nz_in[(size_t)(r0 + rr) * S + s] != 0;
        live |= (unsigned)nz << rr;
    }
    extern __shared__ unsigned long long res[];
    if (live) {
        for (int k = tid; k < nr * sec; k += nthr) res[k] = 0ull;
        __syncthreads();
        const int base = s_out * sec;
        const int* cw = col_w + (size_t)s_out * N;
        for (int s_in = 0; s_in < S; ++s_in) {
            unsigned sl = 0;
            for (int rr = 0; rr < nr; ++rr)
                sl |= (unsigned)((live >> rr & 1u) && nz_in[(size_t)(r0 + rr) * S + s_in]) << rr;
            if (!sl) continue;
            const int end = (s_in + 1) * sec;
            for (int j = threadIdx.y + s_in * sec; j < end; j += blockDim.y) {
                float y[RMAX];
                bool any = false;
#pragma unroll
                for (int rr = 0; rr < RMAX; ++rr) {
                    y[rr] = (rr < nr && (sl >> rr & 1u)) ? Yin[(size_t)(r0 + rr) * N + j] : 0.0f;
                    any |= y[rr] != 0.0f;
                }
                if (!any) continue;
                const int e = cw[j + 1];
                for (int k = cw[j] + threadIdx.x; k < e; k += blockDim.x) {
                    const int o = row_w[k] - base;
                    const float w = val_w[k];
#pragma unroll
                    for (int rr = 0; rr < RMAX; ++rr)
                        if (y[rr] != 0.0f) atomicAdd(&res[rr * sec + o], snig_fixed(y[rr], w, scale));
                }
            }
        }
        __syncthreads();
    }
    for (int rr = 0; rr < nr; ++rr) {                    // uniform loop: every thread takes part
        const size_t out0 = (size_t)(r0 + rr) * N + (size_t)s_out * sec;
        unsigned char* flag = nz_out + (size_t)(r0 + rr) * S + s_out;
        if (!(live >> rr & 1u)) {                        // incremental reset of an empty row
            if (*flag) {
                for (int j = tid; j < sec; j += nthr) Yout[out0 + j] = 0.0f;
                __syncthreads();
                if (tid == 0) *flag = 0;
            }
            continue;
        }
        int any = 0;
        for (int i = tid; i < sec; i += nthr) {
            const float v = snig_out(res[rr * sec + i], inv, bias, ymax);
            Yout[out0 + i] = v;
            any |= (v != 0.0f);
        }
        any = __syncthreads_or(any);
        if (tid == 0) *flag = (unsigned char)(any != 0);
    }
}
