// Sparse DNN inference kernels (HPEC Sparse DNN Challenge semantics):
//   Y_out = min(ymax, max(0, Z + bias * [Z != 0])),  Z = Y_in W
// Y buffers are dense (rows x N) float; per-(row, section) flags say whether a section may hold a
// nonzero. Invariant: flag == 0  =>  the section is all zero (a flag of 1 promises nothing).

// SNIG forward-feeding kernel (paper Algorithm 1, negation typo corrected), one launch per layer.
// Grid (rows, S), block (dim_x, dim_y), dynamic shared memory 4 * sec floats.
// W is one packed layer of sectioned CSR:  [col_w (S*N+1) | row_w (cap) | val_w (cap, float bits)]
// where col_w[t*N + i] .. col_w[t*N + i + 1] lists input neuron i's targets inside output section t.
extern "C" __global__ void snig_infer(const float* __restrict__ Yin, const unsigned char* __restrict__ nz_in,
                                      float* __restrict__ Yout, unsigned char* __restrict__ nz_out,
                                      const int* __restrict__ W, int N, int S, int sec, int cap,
                                      float bias, float ymax)
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
        if (nz_out[r * S + s_out]) {
            for (int j = tid; j < sec; j += nthr) Yout[out0 + j] = 0.0f;
            if (tid == 0) nz_out[r * S + s_out] = 0;
        }
        return;
    }
    extern __shared__ float res[];
    for (int k = tid; k < sec; k += nthr) res[k] = 0.0f;
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
                atomicAdd(&res[row_w[k] - base], y * val_w[k]);
        }
    }
    __syncthreads();
    int any = 0;
    for (int i = tid; i < sec; i += nthr) {
        const float z = res[i];
        const float v = (z != 0.0f) ? fminf(fmaxf(z + bias, 0.0f), ymax) : 0.0f;
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
