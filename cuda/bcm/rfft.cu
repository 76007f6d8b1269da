// Block-circulant layers, the "rfft" variants (beyond the paper): real FFTs in registers, one
// thread a row, around the frequency-batched products, and the products of a conv layer computed
// with the 3 x 3 (kh x kw) window gathered inside the kernel (implicit im2col).
//
// Layouts (those of bcm.cu's "dft" kernels): a spectrum is stored frequency-major, S[f][row]
// (f < k' = k/2 + 1), so that each frequency is one contiguous matrix for the products.
//
//   bcm_rfft_rows_<K>    S[f][r] = sum_t in[r][t] exp(-2 pi i f t / K) (or its conjugate) for up to
//                        three row sets a launch; zeroes up to two buffers in the same launch
//   bcm_irfft_rows_<K>   out[r][t] = irfft(S[:][r])[t] (+ bias[(r % bmod) K + t]), optionally
//                        time-reversed (out[r][t] = y[(K - t) mod K]), up to three row sets
//   bcm_conv_prod_v<VB>  forward / input-gradient products of a conv layer, gathered (see below)
//   bcm_conv_wgrad_<MTT> weight-gradient product of a conv layer, gathered, split over pixels
//
// The FFT: a real row of K samples is a complex row of N = K/2 (z[m] = x[2m] + i x[2m+1]); a
// radix-2 complex FFT of N points runs in registers, fully unrolled (K is a template argument),
// its twiddles read from constant memory at compile-time offsets; then
//   X[f] = E[f] + W^f O[f],  E = (Z[f] + conj Z[N-f]) / 2,  O = (Z[f] - conj Z[N-f]) / 2i,
// W = exp(-2 pi i / K). The inverse runs the same steps backwards. One thread owns one row, so the
// frequency-major stores (and loads) of a warp are 32 consecutive rows: coalesced; the rows
// themselves pass through shared memory (padded to K + 2 floats: a thread's float2 accesses of its
// own row are free of bank conflicts) with 16-byte, fully unrolled global loads and stores, so that
// a thread has all its loads in flight at once.
#include "cplx.cuh"

#define RFFT_ROWS 64     // rows (= threads) a block of the transforms

// exp(-2 pi i m / 64), m < 64: the twiddles of every K <= 64 (stride 64 / K)
__constant__ float2 bcm_tw64[64] = {
    {1.000000000e+00f, -0.000000000e+00f}, {9.951847196e-01f, -9.801714122e-02f}, {9.807852507e-01f, -1.950903237e-01f}, {9.569403529e-01f, -2.902846634e-01f},
    {9.238795042e-01f, -3.826834261e-01f}, {8.819212914e-01f, -4.713967443e-01f}, {8.314695954e-01f, -5.555702448e-01f}, {7.730104327e-01f, -6.343932748e-01f},
    {7.071067691e-01f, -7.071067691e-01f}, {6.343932748e-01f, -7.730104327e-01f}, {5.555702448e-01f, -8.314695954e-01f}, {4.713967443e-01f, -8.819212914e-01f},
    {3.826834261e-01f, -9.238795042e-01f}, {2.902846634e-01f, -9.569403529e-01f}, {1.950903237e-01f, -9.807852507e-01f}, {9.801714122e-02f, -9.951847196e-01f},
    {6.123234263e-17f, -1.000000000e+00f}, {-9.801714122e-02f, -9.951847196e-01f}, {-1.950903237e-01f, -9.807852507e-01f}, {-2.902846634e-01f, -9.569403529e-01f},
    {-3.826834261e-01f, -9.238795042e-01f}, {-4.713967443e-01f, -8.819212914e-01f}, {-5.555702448e-01f, -8.314695954e-01f}, {-6.343932748e-01f, -7.730104327e-01f},
    {-7.071067691e-01f, -7.071067691e-01f}, {-7.730104327e-01f, -6.343932748e-01f}, {-8.314695954e-01f, -5.555702448e-01f}, {-8.819212914e-01f, -4.713967443e-01f},
    {-9.238795042e-01f, -3.826834261e-01f}, {-9.569403529e-01f, -2.902846634e-01f}, {-9.807852507e-01f, -1.950903237e-01f}, {-9.951847196e-01f, -9.801714122e-02f},
    {-1.000000000e+00f, -1.224646853e-16f}, {-9.951847196e-01f, 9.801714122e-02f}, {-9.807852507e-01f, 1.950903237e-01f}, {-9.569403529e-01f, 2.902846634e-01f},
    {-9.238795042e-01f, 3.826834261e-01f}, {-8.819212914e-01f, 4.713967443e-01f}, {-8.314695954e-01f, 5.555702448e-01f}, {-7.730104327e-01f, 6.343932748e-01f},
    {-7.071067691e-01f, 7.071067691e-01f}, {-6.343932748e-01f, 7.730104327e-01f}, {-5.555702448e-01f, 8.314695954e-01f}, {-4.713967443e-01f, 8.819212914e-01f},
    {-3.826834261e-01f, 9.238795042e-01f}, {-2.902846634e-01f, 9.569403529e-01f}, {-1.950903237e-01f, 9.807852507e-01f}, {-9.801714122e-02f, 9.951847196e-01f},
    {-1.836970147e-16f, 1.000000000e+00f}, {9.801714122e-02f, 9.951847196e-01f}, {1.950903237e-01f, 9.807852507e-01f}, {2.902846634e-01f, 9.569403529e-01f},
    {3.826834261e-01f, 9.238795042e-01f}, {4.713967443e-01f, 8.819212914e-01f}, {5.555702448e-01f, 8.314695954e-01f}, {6.343932748e-01f, 7.730104327e-01f},
    {7.071067691e-01f, 7.071067691e-01f}, {7.730104327e-01f, 6.343932748e-01f}, {8.314695954e-01f, 5.555702448e-01f}, {8.819212914e-01f, 4.713967443e-01f},
    {9.238795042e-01f, 3.826834261e-01f}, {9.569403529e-01f, 2.902846634e-01f}, {9.807852507e-01f, 1.950903237e-01f}, {9.951847196e-01f, 9.801714122e-02f}
};

__host__ __device__ constexpr int bcm_ilog2(int n) { return n <= 1 ? 0 : 1 + bcm_ilog2(n / 2); }
// j's lowest `bits` (<= 5) bits reversed; one expression, so that it folds to a constant in
// unrolled loops (register arrays must be indexed by constants)
__host__ __device__ constexpr int bcm_brev(int j, int bits)
{
    return (((j & 1) << 4) | ((j & 2) << 2) | (j & 4) | ((j & 8) >> 2) | ((j & 16) >> 4)) >> (5 - bits);
}

// exp(-+2 pi i m / L) for a compile-time m < L <= 64 (inv: the conjugate)
template <int L, bool INV>
__device__ __forceinline__ float2 bcm_twiddle(int m)
{
    float2 w = bcm_tw64[m * (64 / L)];
    return INV ? make_float2(w.x, -w.y) : w;
}

// One radix-2 stage (half-length H) of an in-register FFT over a[] in bit-reversed order, then
// the next stages: a[] ends in natural order. INV: exp(+...) twiddles, no scaling.
template <int N, int H, bool INV>
__device__ __forceinline__ void bcm_fft_stages(float2 (&a)[N])
{
    #pragma unroll
    for (int i = 0; i < N; i += 2 * H) {
        #pragma unroll
        for (int j = 0; j < H; ++j) {
            float2 u = a[i + j], v = a[i + j + H];
            if (j != 0) v = cmul(v, bcm_twiddle<2 * H, INV>(j));
            a[i + j] = make_float2(u.x + v.x, u.y + v.y);
            a[i + j + H] = make_float2(u.x - v.x, u.y - v.y);
        }
    }
    if constexpr (2 * H < N) bcm_fft_stages<N, 2 * H, INV>(a);
}

__device__ __forceinline__ void bcm_zero_span(float* p, long long n, long long gtid, long long gstride)
{
    if (!p) return;
    for (long long i = gtid; i < n; i += gstride) p[i] = 0.f;
}

// grid (ceil(max rows / RFFT_ROWS), nseg), block RFFT_ROWS threads.
template <int K>
__device__ __forceinline__ void bcm_rfft_body(const float* __restrict__ in0, float2* __restrict__ out0, int rows0, int conj0,
                                              const float* __restrict__ in1, float2* __restrict__ out1, int rows1, int conj1,
                                              const float* __restrict__ in2, float2* __restrict__ out2, int rows2, int conj2,
                                              float* z0, long long zn0, float* z1, long long zn1)
{
    constexpr int N = K / 2, LOG = bcm_ilog2(N), LD = K + 2;
    __shared__ __align__(16) float xs[RFFT_ROWS * LD];
    const long long gstride = (long long)gridDim.x * gridDim.y * blockDim.x;
    const long long gtid = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    bcm_zero_span(z0, zn0, gtid, gstride);
    bcm_zero_span(z1, zn1, gtid, gstride);
    const float* in; float2* out; int rows, cj;
    if (blockIdx.y == 0) { in = in0; out = out0; rows = rows0; cj = conj0; }
    else if (blockIdx.y == 1) { in = in1; out = out1; rows = rows1; cj = conj1; }
    else { in = in2; out = out2; rows = rows2; cj = conj2; }
    const int r0 = blockIdx.x * RFFT_ROWS;
    if (r0 >= rows) return;
    const int nr = min(RFFT_ROWS, rows - r0);
    const float* src = in + (size_t)r0 * K;
    if (nr == RFFT_ROWS && blockDim.x == RFFT_ROWS && (reinterpret_cast<size_t>(src) & 15) == 0) {
        const float4* s4 = reinterpret_cast<const float4*>(src);    // coalesced, all K/4 loads in flight
        float4 v[K / 4];
        #pragma unroll
        for (int it = 0; it < K / 4; ++it) v[it] = s4[threadIdx.x + it * RFFT_ROWS];
        #pragma unroll
        for (int it = 0; it < K / 4; ++it) {
            const int e = 4 * (threadIdx.x + it * RFFT_ROWS), rr = e / K, t = e % K;
            float2* d = reinterpret_cast<float2*>(xs + rr * LD + t);
            d[0] = make_float2(v[it].x, v[it].y);
            d[1] = make_float2(v[it].z, v[it].w);
        }
    } else {
        for (int i = threadIdx.x; i < nr * K; i += blockDim.x)
            xs[(i / K) * LD + (i % K)] = src[i];
    }
    __syncthreads();
    const int r = threadIdx.x;
    if (r >= nr) return;
    const float2* x = reinterpret_cast<const float2*>(xs + r * LD);   // 64-bit word (K/2 + 1) r + m
    float2 a[N];
    #pragma unroll
    for (int j = 0; j < N; ++j) a[j] = x[bcm_brev(j, LOG)];
    if constexpr (N > 1) bcm_fft_stages<N, 1, false>(a);
    const float sg = cj ? -1.f : 1.f;
    float2* o = out + r0 + r;
    #pragma unroll
    for (int f = 0; f <= N; ++f) {
        const float2 zf = a[f % N], zn = a[(N - f) % N];             // Z[f], Z[N - f] (Z[N] = Z[0])
        const float ex = 0.5f * (zf.x + zn.x), ey = 0.5f * (zf.y - zn.y);   // E = (Z[f] + conj Z[N-f]) / 2
        const float ox = 0.5f * (zf.y + zn.y), oy = -0.5f * (zf.x - zn.x);  // O = (Z[f] - conj Z[N-f]) / 2i
        const float2 w = bcm_twiddle<K, false>(f % K);
        const float re = ex + (w.x * ox - w.y * oy);
        const float im = ey + (w.x * oy + w.y * ox);
        o[(size_t)f * rows] = make_float2(re, sg * im);               // a warp: 32 consecutive rows
    }
}

// grid (ceil(max rows / RFFT_ROWS), nseg), block RFFT_ROWS threads.
template <int K>
__device__ __forceinline__ void bcm_irfft_body(const float2* __restrict__ R0, float* __restrict__ out0, int rows0,
                                               const float* __restrict__ bias0, int bmod0, int rev0,
                                               const float2* __restrict__ R1, float* __restrict__ out1, int rows1,
                                               const float* __restrict__ bias1, int bmod1, int rev1,
                                               const float2* __restrict__ R2, float* __restrict__ out2, int rows2,
                                               const float* __restrict__ bias2, int bmod2, int rev2)
{
    constexpr int N = K / 2, LOG = bcm_ilog2(N), LD = K + 2;
    __shared__ __align__(16) float ys[RFFT_ROWS * LD];
    const float2* R; float* out; int rows; const float* bias; int bmod, rev;
    if (blockIdx.y == 0) { R = R0; out = out0; rows = rows0; bias = bias0; bmod = bmod0; rev = rev0; }
    else if (blockIdx.y == 1) { R = R1; out = out1; rows = rows1; bias = bias1; bmod = bmod1; rev = rev1; }
    else { R = R2; out = out2; rows = rows2; bias = bias2; bmod = bmod2; rev = rev2; }
    const int r0 = blockIdx.x * RFFT_ROWS;
    if (r0 >= rows) return;
    const int nr = min(RFFT_ROWS, rows - r0);
    const int r = threadIdx.x;
    if (r < nr) {
        const float2* src = R + r0 + r;
        float2 X[N + 1];
        #pragma unroll
        for (int f = 0; f <= N; ++f) X[f] = src[(size_t)f * rows];  // a warp: 32 consecutive rows
        X[0].y = 0.f;                                                 // a real signal's DC and Nyquist
        X[N].y = 0.f;
        float2 a[N];
        #pragma unroll
        for (int j = 0; j < N; ++j) {
            const int f = bcm_brev(j, LOG);
            const float2 xf = X[f], xn = X[N - f];
            const float ex = xf.x + xn.x, ey = xf.y - xn.y;           // X[f] + conj X[N-f]
            const float dx = xf.x - xn.x, dy = xf.y + xn.y;           // X[f] - conj X[N-f]
            const float2 w = bcm_twiddle<K, true>(f);                 // exp(+2 pi i f / K)
            const float ox = dx * w.x - dy * w.y, oy = dx * w.y + dy * w.x;
            a[j] = make_float2(ex - oy, ey + ox);                     // E + i O
        }
        if constexpr (N > 1) bcm_fft_stages<N, 1, true>(a);
        const float s = 1.0f / (float)K;
        float2* y = reinterpret_cast<float2*>(ys + r * LD);            // y[t], natural order
        #pragma unroll
        for (int m = 0; m < N; ++m) y[m] = make_float2(a[m].x * s, a[m].y * s);
    }
    __syncthreads();
    float* dst = out + (size_t)r0 * K;                                 // coalesced row-major store
    const size_t al = reinterpret_cast<size_t>(dst) | reinterpret_cast<size_t>(bias);
    if (nr == RFFT_ROWS && blockDim.x == RFFT_ROWS && (al & 15) == 0) {
        #pragma unroll 8
        for (int it = 0; it < K / 4; ++it) {
            const int e = 4 * (threadIdx.x + it * RFFT_ROWS), rr = e / K, t = e % K;
            const float* yy = ys + rr * LD;
            float4 v;                                  // (rows start at even, not 16-byte, offsets)
            if (rev) {
                v = make_float4(yy[(K - t) & (K - 1)], yy[K - t - 1], yy[K - t - 2], yy[K - t - 3]);
            } else {
                const float2 lo = *reinterpret_cast<const float2*>(yy + t), hi = *reinterpret_cast<const float2*>(yy + t + 2);
                v = make_float4(lo.x, lo.y, hi.x, hi.y);
            }
            if (bias) {
                const float4 b = *reinterpret_cast<const float4*>(bias + (size_t)((r0 + rr) % bmod) * K + t);
                v.x += b.x; v.y += b.y; v.z += b.z; v.w += b.w;
            }
            reinterpret_cast<float4*>(dst)[threadIdx.x + it * RFFT_ROWS] = v;
        }
    } else {
        for (int i = threadIdx.x; i < nr * K; i += blockDim.x) {
            const int rr = i / K, t = i % K;
            float v = ys[rr * LD + (rev ? ((K - t) & (K - 1)) : t)];
            if (bias) v += bias[(size_t)((r0 + rr) % bmod) * K + t];
            dst[i] = v;
        }
    }
}

#define BCM_RFFT_KERNELS(K)                                                                                          \
extern "C" __global__ void __launch_bounds__(RFFT_ROWS)                                                              \
bcm_rfft_rows_##K(const float* __restrict__ in0, float2* __restrict__ out0, int rows0, int conj0,                    \
                  const float* __restrict__ in1, float2* __restrict__ out1, int rows1, int conj1,                    \
                  const float* __restrict__ in2, float2* __restrict__ out2, int rows2, int conj2,                    \
                  float* z0, long long zn0, float* z1, long long zn1)                                                \
{                                                                                                                    \
    bcm_rfft_body<K>(in0, out0, rows0, conj0, in1, out1, rows1, conj1, in2, out2, rows2, conj2, z0, zn0, z1, zn1);  \
}                                                                                                                    \
extern "C" __global__ void __launch_bounds__(RFFT_ROWS)                                                              \
bcm_irfft_rows_##K(const float2* __restrict__ R0, float* __restrict__ out0, int rows0,                               \
                   const float* __restrict__ bias0, int bmod0, int rev0,                                             \
                   const float2* __restrict__ R1, float* __restrict__ out1, int rows1,                               \
                   const float* __restrict__ bias1, int bmod1, int rev1,                                             \
                   const float2* __restrict__ R2, float* __restrict__ out2, int rows2,                               \
                   const float* __restrict__ bias2, int bmod2, int rev2)                                             \
{                                                                                                                    \
    bcm_irfft_body<K>(R0, out0, rows0, bias0, bmod0, rev0, R1, out1, rows1, bias1, bmod1, rev1,                     \
                      R2, out2, rows2, bias2, bmod2, rev2);                                                          \
}

BCM_RFFT_KERNELS(8)
BCM_RFFT_KERNELS(16)
BCM_RFFT_KERNELS(32)
BCM_RFFT_KERNELS(64)

// ======================================================================================
// Conv layers without im2col. NHWC tensors; x (n, h, w, c), g (n, ho, wo, cout); c = CQ k,
// cout = P k; the weight's q = KH KW CQ blocks are ordered (kh, kw, channel block). Spectra, all
// frequency-major (see above): X[f][(pixel, cb)] of x, G[f][(output pixel, i)] = conj FFT(g),
// Wf[f][(i, s)] of w. The im2col matrix's block (output pixel, s = (a, b, cb)) is x's block
// (input pixel through tap (a, b), cb): so its spectrum is X gathered, and nothing is copied.
//   forward      A[f][o][i]     = sum_{a,b,cb} X[f][in(o, a, b)][cb] Wf[f][i][(a, b, cb)]
//   input grad   D[f][u][cb]    = sum_{a,b,i}  G[f][out(u, a, b)][i] Wf[f][i][(a, b, cb)]
//                (= conj of dx's spectrum: col2im done in the frequency domain, by linearity)
//   weight grad  E[f][i][s]     = sum_o        G[f][o][i] X[f][in(o, a, b)][cb]
// Taps that fall outside the image (zero padding) or between strides contribute nothing.
// ======================================================================================

struct BcmConvGeo {
    int n, h, w, ho, wo, kh, kw, pad, stride;
};

// Input pixel read by output pixel (nn, yo, xo) through tap (a, b), or -1 (padding).
__device__ __forceinline__ int bcm_in_pixel(const BcmConvGeo& g, int nn, int yo, int xo, int a, int b)
{
    const int y = yo * g.stride - g.pad + a, x = xo * g.stride - g.pad + b;
    return (y < 0 || y >= g.h || x < 0 || x >= g.w) ? -1 : (nn * g.h + y) * g.w + x;
}

// Output pixel that reads input pixel (nn, y, x) through tap (a, b), or -1.
__device__ __forceinline__ int bcm_out_pixel(const BcmConvGeo& g, int nn, int y, int x, int a, int b)
{
    const int ty = y + g.pad - a, tx = x + g.pad - b;
    if (ty < 0 || tx < 0 || ty % g.stride || tx % g.stride) return -1;
    const int yo = ty / g.stride, xo = tx / g.stride;
    return (yo >= g.ho || xo >= g.wo) ? -1 : (nn * g.ho + yo) * g.wo + xo;
}

#define CONV_THREADS 128
#define CONV_RU 2        // rows u a thread

// out[f][u][v] = sum_{tap} sum_{j < J} Pm[f][nb(u, tap)][j] * Q[f][v qv + tap CQ + j qj]   (complex)
//   mode 0 (forward):     u = output pixel, nb = in(u, tap),  Pm = X (J = CQ), qv = q, qj = 1
//   mode 1 (input grad):  u = input pixel,  nb = out(u, tap), Pm = G (J = P),  qv = 1, qj = q
// grid (ceil(U / (CONV_THREADS CONV_RU)), k', ceil(V / VB)), block CONV_THREADS; dynamic smem
// KH KW J VB float2 (this block's slice of Q, laid [tap][j][v]).
template <int VB>
__device__ __forceinline__ void bcm_conv_prod_body(const float2* __restrict__ Pm, const float2* __restrict__ Q,
                                                   float2* __restrict__ out, int U, int V, int J, int CQ, int q,
                                                   long long pf, long long qf, int qv, int qj, int mode, BcmConvGeo geo)
{
    extern __shared__ float4 cps4[];
    float2* qs = reinterpret_cast<float2*>(cps4);
    const int f = blockIdx.y, v0 = blockIdx.z * VB, taps = geo.kh * geo.kw;
    const float2* Qf = Q + (size_t)f * qf;
    for (int e = threadIdx.x; e < taps * J * VB; e += blockDim.x) {
        const int vv = e % VB, tj = e / VB, j = tj % J, tap = tj / J, v = v0 + vv;
        qs[e] = v < V ? Qf[(size_t)v * qv + tap * CQ + (size_t)j * qj] : make_float2(0.f, 0.f);
    }
    __syncthreads();
    const float2* Pf = Pm + (size_t)f * pf;
    int uu[CONV_RU], nn[CONV_RU], yy[CONV_RU], xx[CONV_RU];
    const int ph = mode == 0 ? geo.ho : geo.h, pw = mode == 0 ? geo.wo : geo.w;
    #pragma unroll
    for (int m = 0; m < CONV_RU; ++m) {
        uu[m] = blockIdx.x * (CONV_THREADS * CONV_RU) + m * CONV_THREADS + threadIdx.x;
        const int u = min(uu[m], U - 1);
        xx[m] = u % pw;
        yy[m] = (u / pw) % ph;
        nn[m] = u / (pw * ph);
    }
    float2 acc[CONV_RU][VB];
    #pragma unroll
    for (int m = 0; m < CONV_RU; ++m)
        #pragma unroll
        for (int v = 0; v < VB; ++v) acc[m][v] = make_float2(0.f, 0.f);
    const bool pairs = (J & 1) == 0;
    for (int a = 0; a < geo.kh; ++a) {
        for (int b = 0; b < geo.kw; ++b) {
            const int tap = a * geo.kw + b;
            const float2* pr[CONV_RU];
            bool any = false;
            #pragma unroll
            for (int m = 0; m < CONV_RU; ++m) {
                const int nb = mode == 0 ? bcm_in_pixel(geo, nn[m], yy[m], xx[m], a, b)
                                         : bcm_out_pixel(geo, nn[m], yy[m], xx[m], a, b);
                pr[m] = (nb >= 0 && uu[m] < U) ? Pf + (size_t)nb * J : nullptr;
                any |= pr[m] != nullptr;
            }
            if (!any) continue;
            const float4* qt = reinterpret_cast<const float4*>(qs + tap * J * VB);
            if (pairs) {
                for (int j = 0; j < J; j += 2) {
                    float4 p[CONV_RU];
                    #pragma unroll
                    for (int m = 0; m < CONV_RU; ++m)
                        p[m] = pr[m] ? *reinterpret_cast<const float4*>(pr[m] + j) : make_float4(0.f, 0.f, 0.f, 0.f);
                    #pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        #pragma unroll
                        for (int v = 0; v < VB; v += 2) {
                            const float4 w = qt[((j + h) * VB + v) / 2];
                            #pragma unroll
                            for (int m = 0; m < CONV_RU; ++m) {
                                const float2 pv = h ? make_float2(p[m].z, p[m].w) : make_float2(p[m].x, p[m].y);
                                cfma(acc[m][v], pv, make_float2(w.x, w.y), false);
                                cfma(acc[m][v + 1], pv, make_float2(w.z, w.w), false);
                            }
                        }
                    }
                }
            } else {
                for (int j = 0; j < J; ++j) {
                    float2 p[CONV_RU];
                    #pragma unroll
                    for (int m = 0; m < CONV_RU; ++m) p[m] = pr[m] ? pr[m][j] : make_float2(0.f, 0.f);
                    #pragma unroll
                    for (int v = 0; v < VB; v += 2) {
                        const float4 w = qt[(j * VB + v) / 2];
                        #pragma unroll
                        for (int m = 0; m < CONV_RU; ++m) {
                            cfma(acc[m][v], p[m], make_float2(w.x, w.y), false);
                            cfma(acc[m][v + 1], p[m], make_float2(w.z, w.w), false);
                        }
                    }
                }
            }
        }
    }
    float2* of = out + (size_t)f * U * V;
    #pragma unroll
    for (int m = 0; m < CONV_RU; ++m) {
        if (uu[m] >= U) continue;
        #pragma unroll
        for (int v = 0; v < VB; ++v)
            if (v0 + v < V) of[(size_t)uu[m] * V + v0 + v] = acc[m][v];
    }
}

#define BCM_CONV_PROD(VB)                                                                                            \
extern "C" __global__ void __launch_bounds__(CONV_THREADS)                                                           \
bcm_conv_prod_v##VB(const float2* __restrict__ Pm, const float2* __restrict__ Q, float2* __restrict__ out,           \
                    int U, int V, int J, int CQ, int q, long long pf, long long qf, int qv, int qj, int mode,        \
                    int n, int h, int w, int ho, int wo, int kh, int kw, int pad, int stride)                        \
{                                                                                                                    \
    bcm_conv_prod_body<VB>(Pm, Q, out, U, V, J, CQ, q, pf, qf, qv, qj, mode,                                        \
                           BcmConvGeo{n, h, w, ho, wo, kh, kw, pad, stride});                                        \
}

BCM_CONV_PROD(4)
BCM_CONV_PROD(8)

// Weight gradient: E[f][i][s] += sum over this block's output pixels o of G[f][o][i] X[f][in(o, s)].
// E must be zeroed first (partial sums are added atomically). A thread owns up to MTT micro-tiles
// of 2 (i) x 2 (s) outputs (micro-tiles lmt + j MTB, j < MTT, of this block's tile); when a tile has
// fewer micro-tiles than threads, NG thread groups split the staged pixels and are summed in shared
// memory at the end. grid (chunks, k', tiles), block 256; tile z covers micro-tiles
// [z MTB MTT, (z + 1) MTB MTT); dynamic smem: max(TR (P2 + Q2), (NG - 1) MTB 4) float2, P2 / Q2 =
// P / Q rounded up to even. The staged rows: G's rows of TR pixels (contiguous) and X gathered
// through each tap (CQ contiguous values a (pixel, tap)).
template <int MTT>
__device__ __forceinline__ void bcm_conv_wgrad_body(const float2* __restrict__ G, const float2* __restrict__ X,
                                                    float2* __restrict__ E, int P, int Q, int CQ, int U, long long gf,
                                                    long long xf, int chunk, int TR, int MTB, int NG, BcmConvGeo geo)
{
    extern __shared__ float4 wgs4[];
    float2* sm = reinterpret_cast<float2*>(wgs4);
    const int P2 = (P + 1) & ~1, Q2 = (Q + 1) & ~1, QH = Q2 / 2, NMT = (P2 / 2) * QH;
    float2* gs = sm;                   // [TR][P2]
    float2* xs = sm + TR * P2;         // [TR][Q2]
    const int f = blockIdx.y, taps = geo.kh * geo.kw;
    const float2* Gf = G + (size_t)f * gf;
    const float2* Xf = X + (size_t)f * xf;
    const int lmt = threadIdx.x % MTB, grp = threadIdx.x / MTB;
    int i0[MTT], s0[MTT];
    bool on[MTT];
    float2 acc[MTT][2][2];
    #pragma unroll
    for (int j = 0; j < MTT; ++j) {
        const int mt = (blockIdx.z * MTT + j) * MTB + lmt;
        on[j] = grp < NG && mt < NMT;
        i0[j] = on[j] ? 2 * (mt / QH) : 0;
        s0[j] = on[j] ? 2 * (mt % QH) : 0;
        acc[j][0][0] = acc[j][0][1] = acc[j][1][0] = acc[j][1][1] = make_float2(0.f, 0.f);
    }
    const int o_begin = blockIdx.x * chunk, o_end = min(U, o_begin + chunk);
    for (int o0 = o_begin; o0 < o_end; o0 += TR) {
        for (int e = threadIdx.x; e < TR * P2; e += blockDim.x) {
            const int r = e / P2, i = e % P2, o = o0 + r;
            gs[e] = (o < o_end && i < P) ? Gf[(size_t)o * P + i] : make_float2(0.f, 0.f);
        }
        for (int e = threadIdx.x; e < TR * taps; e += blockDim.x) {   // one (pixel, tap): CQ values
            const int r = e / taps, tap = e - r * taps, o = o0 + r;
            int nb = -1;
            if (o < o_end) {
                const int xo = o % geo.wo, yo = (o / geo.wo) % geo.ho, nn = o / (geo.wo * geo.ho);
                nb = bcm_in_pixel(geo, nn, yo, xo, tap / geo.kw, tap % geo.kw);
            }
            float2* d = xs + r * Q2 + tap * CQ;
            const float2* src = Xf + (size_t)max(nb, 0) * CQ;
            if ((CQ & 1) == 0) {
                for (int cb = 0; cb < CQ; cb += 2)
                    *reinterpret_cast<float4*>(d + cb) = nb >= 0 ? *reinterpret_cast<const float4*>(src + cb)
                                                                 : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                for (int cb = 0; cb < CQ; ++cb) d[cb] = nb >= 0 ? src[cb] : make_float2(0.f, 0.f);
            }
            if (tap == taps - 1 && Q2 > Q) d[CQ] = make_float2(0.f, 0.f);   // the even-padding column
        }
        __syncthreads();
        const int rows = min(TR, o_end - o0);
        for (int r = grp; r < rows; r += NG) {
            #pragma unroll
            for (int j = 0; j < MTT; ++j) {
                if (!on[j]) continue;
                const float4 ga = *reinterpret_cast<const float4*>(gs + r * P2 + i0[j]);
                const float4 xb = *reinterpret_cast<const float4*>(xs + r * Q2 + s0[j]);
                const float2 g0 = make_float2(ga.x, ga.y), g1 = make_float2(ga.z, ga.w);
                const float2 x0 = make_float2(xb.x, xb.y), x1 = make_float2(xb.z, xb.w);
                cfma(acc[j][0][0], g0, x0, false);
                cfma(acc[j][0][1], g0, x1, false);
                cfma(acc[j][1][0], g1, x0, false);
                cfma(acc[j][1][1], g1, x1, false);
            }
        }
        __syncthreads();
    }
    if (NG > 1) {                      // groups 1.. hand their partial sums to group 0 (MTT == 1 here)
        if (on[0] && grp > 0) {
            float2* red = sm + ((size_t)(grp - 1) * MTB + lmt) * 4;
            red[0] = acc[0][0][0]; red[1] = acc[0][0][1]; red[2] = acc[0][1][0]; red[3] = acc[0][1][1];
        }
        __syncthreads();
        if (on[0] && grp == 0) {
            for (int g2 = 1; g2 < NG; ++g2) {
                const float2* red = sm + ((size_t)(g2 - 1) * MTB + lmt) * 4;
                acc[0][0][0] = cadd(acc[0][0][0], red[0]); acc[0][0][1] = cadd(acc[0][0][1], red[1]);
                acc[0][1][0] = cadd(acc[0][1][0], red[2]); acc[0][1][1] = cadd(acc[0][1][1], red[3]);
            }
        }
    }
    if (grp != 0) return;
    float2* Ef = E + (size_t)f * P * Q;
    #pragma unroll
    for (int j = 0; j < MTT; ++j) {
        if (!on[j]) continue;
        #pragma unroll
        for (int di = 0; di < 2; ++di) {
            if (i0[j] + di >= P) continue;
            #pragma unroll
            for (int ds = 0; ds < 2; ++ds) {
                if (s0[j] + ds >= Q) continue;
                float2* e = Ef + (size_t)(i0[j] + di) * Q + s0[j] + ds;
                atomicAdd(&e->x, acc[j][di][ds].x);
                atomicAdd(&e->y, acc[j][di][ds].y);
            }
        }
    }
}

#define BCM_CONV_WGRAD(MTT, MINB)                                                                                    \
extern "C" __global__ void __launch_bounds__(256, MINB)                                                              \
bcm_conv_wgrad_##MTT(const float2* __restrict__ G, const float2* __restrict__ X, float2* __restrict__ E,             \
                     int P, int Q, int CQ, int U, long long gf, long long xf, int chunk, int TR, int MTB, int NG,    \
                     int n, int h, int w, int ho, int wo, int kh, int kw, int pad, int stride)                       \
{                                                                                                                    \
    bcm_conv_wgrad_body<MTT>(G, X, E, P, Q, CQ, U, gf, xf, chunk, TR, MTB, NG,                                      \
                             BcmConvGeo{n, h, w, ho, wo, kh, kw, pad, stride});                                      \
}

BCM_CONV_WGRAD(1, 4)
BCM_CONV_WGRAD(5, 2)
