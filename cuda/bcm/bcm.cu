// Block-circulant layers in the frequency domain (Dong et al. 2020, with the paper's conjugates
// corrected; the conventions are those of pipeline/models/bcm/reference.py).
//
// Every pass (forward, weight gradient, input gradient) is one "product" over k' = k/2+1
// frequencies:   R[u, v, f] = sum_s  A[u, s, f] * opB(B[v, s, f]),   opB = identity or conj.
// Element (u, s, f) of A sits at A[u*au + s*as + f] (f is always innermost, the cuFFT R2C
// layout), likewise B[v*bv + s*bs + f] and R[u*ru + v*rv + f]. The host picks the roles:
//   forward      u=b, v=i, s=j:  A = FFT(X) (n,q,k'),  B = FFT(W) (p,q,k'),  R = (n,p,k')
//   weight grad  u=i, v=j, s=b:  A = FFT(G) (n,p,k'),  B = conj FFT(X),      R = (p,q,k')
//   input grad   u=b, v=j, s=i:  A = FFT(G),           B = conj FFT(W),      R = (n,q,k')
//
// Kernels, by the paper's variants:
//   bcm_mul_full + bcm_sum_real  baseline: multiply into an (U,V,S,k') intermediate, an IFFT of
//                                every product (host, cuFFT), then a real-domain sum over s
//   bcm_mul_o1 / bcm_mul_o2      occupancy-first / data-reuse-first multiply (intermediate kept in
//                                the frequency domain), followed by bcm_reduce (Algorithm 3)
//   bcm_fused                    Kernel Fusion (Algorithm 4): multiply + sum, one thread per output
//   bcm_tiled                    beyond the paper: a shared-memory tiled complex "GEMM" over all
//                                frequencies at once, register-blocked 4x4, split over s
// plus helpers: bcm_reverse (reorder), bcm_add_bias, bcm_bias_grad, im2col / col2im (NHWC).
#include "cplx.cuh"

extern "C" {

// ------------------------------------------------------------------------------ baseline flow

// T[((u*V + v)*S + s)*KF + f] = A(u,s,f) * opB(B(v,s,f)); grid (S, V, U), block (KF)
__global__ void bcm_mul_full(const float2* __restrict__ A, const float2* __restrict__ B,
                             float2* __restrict__ T, int U, int V, int S, int KF,
                             int au, int as, int bv, int bs, int conj_b)
{
    int f = threadIdx.x, s = blockIdx.x, v = blockIdx.y, u = blockIdx.z;
    if (f >= KF) return;
    float2 a = A[(size_t)u * au + (size_t)s * as + f];
    float2 b = B[(size_t)v * bv + (size_t)s * bs + f];
    float2 r = make_float2(0.f, 0.f);
    cfma(r, a, b, conj_b != 0);
    T[(((size_t)u * V + v) * S + s) * KF + f] = r;
}

// out[(u*V + v)*K + t] = sum_s T[((u*V + v)*S + s)*K + t] (+ bias[v*K + t]);  grid (V, U), block (K)
__global__ void bcm_sum_real(const float* __restrict__ T, const float* __restrict__ bias,
                             float* __restrict__ out, int U, int V, int S, int K)
{
    int t = threadIdx.x, v = blockIdx.x, u = blockIdx.y;
    if (t >= K) return;
    const float* p = T + ((size_t)u * V + v) * S * K + t;
    float acc = 0.f;
    for (int s = 0; s < S; ++s) acc += p[(size_t)s * K];
    if (bias) acc += bias[(size_t)v * K + t];
    out[((size_t)u * V + v) * K + t] = acc;
}

// The reorder of the baseline: y[r, t] = x[r, (K - t) mod K] for R rows of length K.
__global__ void bcm_reverse(const float* __restrict__ x, float* __restrict__ y, long long R, int K)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * K) return;
    long long r = i / K;
    int t = (int)(i - r * K);
    int src = t == 0 ? 0 : K - t;
    y[i] = x[r * K + src];
}

// ------------------------------------------------------------------- O1, O2 and the reduction

// O1 (occupancy first): block (N, DR) with N = max(32, k) consecutive (s, f) elements along x and
// DR = 1024 / N values of v along y sharing the A chunk through shared memory.
// grid (ceil(S*KF / N), ceil(V / DR), U). Writes T[((u*V + v)*S*KF + e] with e = s*KF + f.
__global__ void bcm_mul_o1(const float2* __restrict__ A, const float2* __restrict__ B,
                           float2* __restrict__ T, int U, int V, int S, int KF,
                           int au, int as, int bv, int bs, int conj_b)
{
    extern __shared__ float2 sA1[];
    int N = blockDim.x;
    int e = blockIdx.x * N + threadIdx.x;
    int u = blockIdx.z;
    int E = S * KF;
    int s = e / KF, f = e - (e / KF) * KF;
    if (threadIdx.y == 0)
        sA1[threadIdx.x] = e < E ? A[(size_t)u * au + (size_t)s * as + f] : make_float2(0.f, 0.f);
    __syncthreads();
    int v = blockIdx.y * blockDim.y + threadIdx.y;
    if (e >= E || v >= V) return;
    float2 b = B[(size_t)v * bv + (size_t)s * bs + f];
    float2 r = make_float2(0.f, 0.f);
    cfma(r, sA1[threadIdx.x], b, conj_b != 0);
    T[((size_t)u * V + v) * E + e] = r;
}

// O2 (data reuse first): block (KF, DR), DR = 1024 / k values of v sharing A(u, s, :).
// grid (S, ceil(V / DR), U).
__global__ void bcm_mul_o2(const float2* __restrict__ A, const float2* __restrict__ B,
                           float2* __restrict__ T, int U, int V, int S, int KF,
                           int au, int as, int bv, int bs, int conj_b)
{
    extern __shared__ float2 sA2[];
    int f = threadIdx.x, s = blockIdx.x, u = blockIdx.z;
    if (threadIdx.y == 0 && f < KF) sA2[f] = A[(size_t)u * au + (size_t)s * as + f];
    __syncthreads();
    int v = blockIdx.y * blockDim.y + threadIdx.y;
    if (f >= KF || v >= V) return;
    float2 b = B[(size_t)v * bv + (size_t)s * bs + f];
    float2 r = make_float2(0.f, 0.f);
    cfma(r, sA2[f], b, conj_b != 0);
    T[(((size_t)u * V + v) * S + s) * KF + f] = r;
}

// Algorithm 3: R(u, v, f) = sum_s T[((u*V + v)*S + s)*KF + f];  grid (V, U), block (KF)
__global__ void bcm_reduce(const float2* __restrict__ T, float2* __restrict__ R, int U, int V, int S,
                           int KF, int ru, int rv)
{
    int f = threadIdx.x, v = blockIdx.x, u = blockIdx.y;
    if (f >= KF) return;
    const float2* p = T + ((size_t)u * V + v) * S * KF + f;
    float2 acc = make_float2(0.f, 0.f);
    for (int s = 0; s < S; ++s) acc = cadd(acc, p[(size_t)s * KF]);
    R[(size_t)u * ru + (size_t)v * rv + f] = acc;
}

// ------------------------------------------------------------------------------ Kernel Fusion

// Algorithm 4: one thread per output (u, v, f), looping over s. block (KF, DR), grid (ceil(V/DR), U)
__global__ void bcm_fused(const float2* __restrict__ A, const float2* __restrict__ B,
                          float2* __restrict__ R, int U, int V, int S, int KF,
                          int au, int as, int bv, int bs, int ru, int rv, int conj_b)
{
    int f = threadIdx.x;
    int v = blockIdx.x * blockDim.y + threadIdx.y;
    int u = blockIdx.y;
    if (f >= KF || v >= V) return;
    const float2* pa = A + (size_t)u * au + f;
    const float2* pb = B + (size_t)v * bv + f;
    float2 acc = make_float2(0.f, 0.f);
    bool cj = conj_b != 0;
    #pragma unroll 4
    for (int s = 0; s < S; ++s) cfma(acc, pa[(size_t)s * as], pb[(size_t)s * bs], cj);
    R[(size_t)u * ru + (size_t)v * rv + f] = acc;
}

// ----------------------------------------------------------------------- tiled (beyond paper)

#define TILE 16      // u and v per block
#define REG 4        // u and v per thread (REG x REG accumulators)
#define TS 4         // s per shared-memory stage
#define GROUPS ((TILE / REG) * (TILE / REG))

// block: KF * GROUPS threads (thread = one frequency x one 4x4 (u, v) register tile);
// grid (ceil(V/TILE), ceil(U/TILE), SPLIT): blockIdx.z takes the s-range [z*SC, (z+1)*SC).
// Dynamic shared memory: 2 * TILE * TS * KF float2. With SPLIT > 1, R must be zeroed first
// and partial sums are added atomically.
__global__ void bcm_tiled(const float2* __restrict__ A, const float2* __restrict__ B,
                          float2* __restrict__ R, int U, int V, int S, int KF,
                          int au, int as, int bv, int bs, int ru, int rv, int conj_b, int SC)
{
    extern __shared__ float2 smem[];
    float2* sA = smem;                       // [TILE][TS][KF]
    float2* sB = smem + TILE * TS * KF;      // [TILE][TS][KF]
    const int tid = threadIdx.x;
    const int f = tid % KF;
    const int g = tid / KF;                  // 0 .. GROUPS-1
    const int ug = g / (TILE / REG), vg = g % (TILE / REG);
    const int u0 = blockIdx.y * TILE, v0 = blockIdx.x * TILE;
    const int s_begin = blockIdx.z * SC;
    const int s_end = min(S, s_begin + SC);
    const bool cj = conj_b != 0;
    const int nthreads = blockDim.x;
    const int tile_elems = TILE * TS * KF;

    float2 acc[REG][REG];
    #pragma unroll
    for (int i = 0; i < REG; ++i)
        #pragma unroll
        for (int j = 0; j < REG; ++j) acc[i][j] = make_float2(0.f, 0.f);

    for (int s0 = s_begin; s0 < s_end; s0 += TS) {
        for (int idx = tid; idx < tile_elems; idx += nthreads) {
            int ff = idx % KF;
            int ss = (idx / KF) % TS;
            int rr = idx / (KF * TS);
            int s = s0 + ss;
            int u = u0 + rr, v = v0 + rr;
            sA[idx] = (u < U && s < s_end) ? A[(size_t)u * au + (size_t)s * as + ff] : make_float2(0.f, 0.f);
            sB[idx] = (v < V && s < s_end) ? B[(size_t)v * bv + (size_t)s * bs + ff] : make_float2(0.f, 0.f);
        }
        __syncthreads();
        if (g < GROUPS) {
            #pragma unroll
            for (int ss = 0; ss < TS; ++ss) {
                float2 ra[REG], rb[REG];
                #pragma unroll
                for (int i = 0; i < REG; ++i) ra[i] = sA[((ug * REG + i) * TS + ss) * KF + f];
                #pragma unroll
                for (int j = 0; j < REG; ++j) rb[j] = sB[((vg * REG + j) * TS + ss) * KF + f];
                #pragma unroll
                for (int i = 0; i < REG; ++i)
                    #pragma unroll
                    for (int j = 0; j < REG; ++j) cfma(acc[i][j], ra[i], rb[j], cj);
            }
        }
        __syncthreads();
    }
    if (g >= GROUPS) return;
    const bool split = gridDim.z > 1;
    #pragma unroll
    for (int i = 0; i < REG; ++i) {
        int u = u0 + ug * REG + i;
        if (u >= U) continue;
        #pragma unroll
        for (int j = 0; j < REG; ++j) {
            int v = v0 + vg * REG + j;
            if (v >= V) continue;
            float2* out = R + (size_t)u * ru + (size_t)v * rv + f;
            if (split) {
                atomicAdd(&out->x, acc[i][j].x);
                atomicAdd(&out->y, acc[i][j].y);
            } else {
                *out = acc[i][j];
            }
        }
    }
}

// ------------------------------------------------------------------------------------ helpers

// a[r, c] += bias[c] for an (R, C) row-major matrix
__global__ void bcm_add_bias(float* __restrict__ a, const float* __restrict__ bias, long long R, int C)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * C) return;
    a[i] += bias[i % C];
}

// db[c] = sum_r g[r, c]. block (32, 8): 32 columns x 8 row lanes; grid (ceil(C/32), RB): each block
// sums rows r = blockIdx.y*8 + ty, step gridDim.y*8, then adds its partial atomically (db zeroed).
__global__ void bcm_bias_grad(const float* __restrict__ g, float* __restrict__ db, int R, int C)
{
    __shared__ float part[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (c < C)
        for (int r = blockIdx.y * 8 + threadIdx.y; r < R; r += gridDim.y * 8) acc += g[(size_t)r * C + c];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.f;
        #pragma unroll
        for (int y = 0; y < 8; ++y) s += part[y][threadIdx.x];
        atomicAdd(&db[c], s);
    }
}

// im2col, NHWC input (N, H, W, C) -> cols (N*Ho*Wo, KH*KW*C), column order (kh, kw, c).
__global__ void bcm_im2col(const float* __restrict__ x, float* __restrict__ cols, int N, int H, int W, int C,
                           int KH, int KW, int pad, int stride, int Ho, int Wo)
{
    long long total = (long long)N * Ho * Wo * KH * KW * C;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int c = (int)(i % C);
    long long t = i / C;
    int kw = (int)(t % KW); t /= KW;
    int kh = (int)(t % KH); t /= KH;
    int wo = (int)(t % Wo); t /= Wo;
    int ho = (int)(t % Ho);
    int n = (int)(t / Ho);
    int h = ho * stride - pad + kh, w = wo * stride - pad + kw;
    cols[i] = (h >= 0 && h < H && w >= 0 && w < W) ? x[(((size_t)n * H + h) * W + w) * C + c] : 0.f;
}

// col2im (the adjoint of im2col: overlapping taps summed), gather form, one thread per input element.
__global__ void bcm_col2im(const float* __restrict__ cols, float* __restrict__ x, int N, int H, int W, int C,
                           int KH, int KW, int pad, int stride, int Ho, int Wo)
{
    long long total = (long long)N * H * W * C;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int c = (int)(i % C);
    long long t = i / C;
    int w = (int)(t % W); t /= W;
    int h = (int)(t % H);
    int n = (int)(t / H);
    float acc = 0.f;
    int ncols = KH * KW * C;
    for (int kh = 0; kh < KH; ++kh) {
        int hh = h + pad - kh;
        if (hh < 0 || hh % stride) continue;
        int ho = hh / stride;
        if (ho >= Ho) continue;
        for (int kw = 0; kw < KW; ++kw) {
            int ww = w + pad - kw;
            if (ww < 0 || ww % stride) continue;
            int wo = ww / stride;
            if (wo >= Wo) continue;
            acc += cols[(((size_t)n * Ho + ho) * Wo + wo) * ncols + (kh * KW + kw) * C + c];
        }
    }
    x[i] = acc;
}

}  // extern "C"

// ======================================================================================
// Beyond the paper, "dft": direct real DFTs into frequency-major layouts, so that each pass is one
// strided-batched complex GEMM (cuBLAS, plain fp32) with no transposes and no conjugate copies:
//   bcm_dft_rows    out[f][r] = sum_t in[r][t] exp(-2 pi i f t / K)  (or its conjugate), up to three
//                   row sets per launch; zeroes up to three buffers in the same launch
//   bcm_idft_rows   out[r][t] = (1/K) irfft(R[:][r])[t] (+ bias), optionally time-reversed, which
//                   turns the spectrum of a conjugated product into the wanted gradient:
//                   conj(Y) is the spectrum of y reversed, y'[t] = y[(K - t) mod K].
// With G' = conj(FFT(G)):  forward  A_f = X_f W_f^T,  weight grad  conj(dW_f) = G'_f^T X_f,
// input grad  conj(dX_f) = G'_f W_f.  Direct DFTs cost O(k^2) per row, cheap for k <= 64.
// ======================================================================================

#define DFT_ROWS 32

__device__ __forceinline__ void zero_span(float* p, long long n, long long gtid, long long gstride)
{
    if (!p) return;
    for (long long i = gtid; i < n; i += gstride) p[i] = 0.f;
}

// Both transforms use the symmetries of a real signal, then register blocking:
//  * DFT: with s[t] = x[t] + x[K-t], d[t] = x[t] - x[K-t] (t = 1..H-1, H = K/2), one pass over t
//    gives two frequencies f and H - f: Re X[f] = x0 + (-1)^f xH + Se + So, Im X[f] = De + Do,
//    Re X[H-f] = x0 + (-1)^(H-f) xH + Se - So, Im X[H-f] = Do - De, where Se/So (De/Do) sum
//    s[t] cos (d[t] sin, signed as the transform) over even/odd t: a quarter of the direct FMAs.
//    A thread computes DFT_DR rows x DFT_DF such frequency pairs.
//  * IDFT: y[t] and y[t + H] share every twiddle (w^(f(t+H)) = (-1)^f w^(ft)): with E/O the sums
//    over even/odd f, y[t] = (X0 + (-1)^t XH + 2(E + O)) / K and y[t+H] the same with E - O and
//    (-1)^(t+H). A thread computes IDFT_DR rows x such a time pair.
// Shared-memory reads, not FLOPs, bound these kernels; the host sizes blocks from the constants.
#define DFT_DR 2
#define DFT_DF 2
#define IDFT_DR 4

// tw[m] = (cos, +-sin)(2 pi m / K) for m < K (plus: exp(+i...), else exp(-i...)), by the whole block.
__device__ __forceinline__ void twiddles(float2* tw, int K, bool plus)
{
    for (int m = threadIdx.x; m < K; m += blockDim.x) {
        float s, c;
        sincospif(2.0f * (float)m / (float)K, &s, &c);
        tw[m] = make_float2(c, plus ? s : -s);
    }
}

// grid (ceil(max rows / DFT_ROWS), nseg), block >= (DFT_ROWS/DFT_DR) * ceil((K/4+1)/DFT_DF) threads
// (any count works); dynamic smem: DFT_ROWS*(K+1) floats + DFT_ROWS*(K/2+1) float2 + K float2.
extern "C" __global__ void bcm_dft_rows(const float* __restrict__ in0, float2* __restrict__ out0, int rows0, int conj0,
                                        const float* __restrict__ in1, float2* __restrict__ out1, int rows1, int conj1,
                                        const float* __restrict__ in2, float2* __restrict__ out2, int rows2, int conj2,
                                        float* z0, long long zn0, float* z1, long long zn1, int K, int KF)
{
    extern __shared__ float2 dsm2[];
    long long gstride = (long long)gridDim.x * gridDim.y * blockDim.x;
    long long gtid = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    zero_span(z0, zn0, gtid, gstride);
    zero_span(z1, zn1, gtid, gstride);
    const int H = K / 2, Q = K / 4, SD = H + 1;
    float2* tw = dsm2;                                   // K twiddles (cos, -+sin)(2 pi m / K)
    float2* sd = dsm2 + K;                               // [DFT_ROWS][H + 1]: (s, d); [r][0] = (x0, xH)
    float* xs = reinterpret_cast<float*>(sd + DFT_ROWS * SD);   // [DFT_ROWS][K + 1]
    const float* in; float2* out; int rows, cj;
    if (blockIdx.y == 0) { in = in0; out = out0; rows = rows0; cj = conj0; }
    else if (blockIdx.y == 1) { in = in1; out = out1; rows = rows1; cj = conj1; }
    else { in = in2; out = out2; rows = rows2; cj = conj2; }
    int r0 = blockIdx.x * DFT_ROWS;
    if (r0 >= rows) return;
    int nr = min(DFT_ROWS, rows - r0);
    twiddles(tw, K, cj);
    for (int i = threadIdx.x; i < nr * K; i += blockDim.x) {
        int r = i / K, t = i - (i / K) * K;
        xs[r * (K + 1) + t] = in[(size_t)r0 * K + i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < DFT_ROWS * SD; i += blockDim.x) {
        int r = i / SD, t = i - (i / SD) * SD;
        float2 v = make_float2(0.f, 0.f);
        if (r < nr) {
            const float* x = xs + r * (K + 1);
            v = (t == 0) ? make_float2(x[0], x[H]) : make_float2(x[t] + x[K - t], x[t] - x[K - t]);
        }
        sd[i] = v;
    }
    __syncthreads();
    const int RG = DFT_ROWS / DFT_DR, FG = (Q + 1 + DFT_DF - 1) / DFT_DF;
    for (int u = threadIdx.x; u < RG * FG; u += blockDim.x) {
        int rg = u % RG, fg = u / RG;             // rg fastest: coalesced frequency-major stores
        float se[DFT_DR][DFT_DF], so[DFT_DR][DFT_DF], de[DFT_DR][DFT_DF], dO[DFT_DR][DFT_DF];
        #pragma unroll
        for (int j = 0; j < DFT_DR; ++j)
            #pragma unroll
            for (int i = 0; i < DFT_DF; ++i) se[j][i] = so[j][i] = de[j][i] = dO[j][i] = 0.f;
        #pragma unroll 2
        for (int t = 1; t < H; t += 2) {          // odd t, then the even t + 1 (H itself is xH)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                int tt = t + e;
                if (tt >= H) break;
                float2 v[DFT_DR];
                #pragma unroll
                for (int j = 0; j < DFT_DR; ++j) v[j] = sd[(rg + j * RG) * SD + tt];
                #pragma unroll
                for (int i = 0; i < DFT_DF; ++i) {
                    float2 w = tw[((fg + i * FG) * tt) & (K - 1)];
                    #pragma unroll
                    for (int j = 0; j < DFT_DR; ++j) {
                        if (e == 0) { so[j][i] = fmaf(v[j].x, w.x, so[j][i]); dO[j][i] = fmaf(v[j].y, w.y, dO[j][i]); }
                        else        { se[j][i] = fmaf(v[j].x, w.x, se[j][i]); de[j][i] = fmaf(v[j].y, w.y, de[j][i]); }
                    }
                }
            }
        }
        #pragma unroll
        for (int i = 0; i < DFT_DF; ++i) {
            int f = fg + i * FG;
            if (f > Q) continue;
            #pragma unroll
            for (int j = 0; j < DFT_DR; ++j) {
                int r = rg + j * RG;
                if (r >= nr) continue;
                float2 e0 = sd[r * SD];                // (x0, xH)
                float re1 = e0.x + ((f & 1) ? -e0.y : e0.y) + se[j][i] + so[j][i];
                out[(size_t)f * rows + r0 + r] = make_float2(re1, de[j][i] + dO[j][i]);
                int f2 = H - f;
                if (f2 != f) {
                    float re2 = e0.x + ((f2 & 1) ? -e0.y : e0.y) + se[j][i] - so[j][i];
                    out[(size_t)f2 * rows + r0 + r] = make_float2(re2, dO[j][i] - de[j][i]);
                }
            }
        }
    }
}

// Frequency-major R[f][r] -> out[r][t]; rev: output y[(K - t) mod K]; bias[(r % bmod) * K + t] added.
// grid (ceil(max rows / DFT_ROWS), nseg), block >= (DFT_ROWS/IDFT_DR) * (K/2) threads (any count
// works); dynamic smem: DFT_ROWS*(KF+1) float2 + K float2.
extern "C" __global__ void bcm_idft_rows(const float2* __restrict__ R0, float* __restrict__ out0, int rows0,
                                         const float* __restrict__ bias0, int bmod0, int rev0,
                                         const float2* __restrict__ R1, float* __restrict__ out1, int rows1,
                                         const float* __restrict__ bias1, int bmod1, int rev1,
                                         const float2* __restrict__ R2, float* __restrict__ out2, int rows2,
                                         const float* __restrict__ bias2, int bmod2, int rev2, int K, int KF)
{
    extern __shared__ float2 ism[];
    float2* tw = ism;                 // K twiddles exp(+2 pi i m / K)
    float2* rs = ism + K;             // [DFT_ROWS][KF + 1]
    const float2* R; float* out; int rows; const float* bias; int bmod, rev;
    if (blockIdx.y == 0) { R = R0; out = out0; rows = rows0; bias = bias0; bmod = bmod0; rev = rev0; }
    else if (blockIdx.y == 1) { R = R1; out = out1; rows = rows1; bias = bias1; bmod = bmod1; rev = rev1; }
    else { R = R2; out = out2; rows = rows2; bias = bias2; bmod = bmod2; rev = rev2; }
    int r0 = blockIdx.x * DFT_ROWS;
    if (r0 >= rows) return;
    int nr = min(DFT_ROWS, rows - r0);
    twiddles(tw, K, true);
    for (int i = threadIdx.x; i < nr * KF; i += blockDim.x) {
        int r = i % nr, f = i / nr;
        rs[r * (KF + 1) + f] = R[(size_t)f * rows + r0 + r];
    }
    __syncthreads();
    const float inv_k = 1.0f / (float)K;
    const int H = K / 2, RG = DFT_ROWS / IDFT_DR;
    for (int u = threadIdx.x; u < RG * H; u += blockDim.x) {
        int t = u % H, rg = u / H;                // t fastest: coalesced row-major stores
        int tt = rev ? ((K - t) & (K - 1)) : t;   // twiddle index of output t (t + H: tt + H)
        float ev[IDFT_DR], od[IDFT_DR];
        #pragma unroll
        for (int j = 0; j < IDFT_DR; ++j) ev[j] = od[j] = 0.f;
        int rr[IDFT_DR];
        #pragma unroll
        for (int j = 0; j < IDFT_DR; ++j) rr[j] = min(rg * IDFT_DR + j, DFT_ROWS - 1) * (KF + 1);
        #pragma unroll 2
        for (int f = 1; f < H; f += 2) {          // odd f, then the even f + 1
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                int ff = f + e;
                if (ff >= H) break;
                float2 w = tw[(ff * tt) & (K - 1)];
                #pragma unroll
                for (int j = 0; j < IDFT_DR; ++j) {
                    float2 X = rs[rr[j] + ff];
                    float v = fmaf(X.x, w.x, -X.y * w.y);
                    if (e == 0) od[j] += v; else ev[j] += v;
                }
            }
        }
        #pragma unroll
        for (int j = 0; j < IDFT_DR; ++j) {
            int r = rg * IDFT_DR + j;
            if (r >= nr) continue;
            const float2* X = rs + r * (KF + 1);
            float nyq = X[H].x * ((tt & 1) ? -1.f : 1.f);
            float nyq2 = ((H & 1) ? -nyq : nyq);
            float y1 = (X[0].x + nyq + 2.f * (ev[j] + od[j])) * inv_k;
            float y2 = (X[0].x + nyq2 + 2.f * (ev[j] - od[j])) * inv_k;
            if (bias) {
                const float* b = bias + (size_t)((r0 + r) % bmod) * K;
                y1 += b[t];
                y2 += b[t + H];
            }
            out[(size_t)(r0 + r) * K + t] = y1;
            out[(size_t)(r0 + r) * K + t + H] = y2;
        }
    }
}
