// SLIDE (G-SLIDE) training kernels: the dense input layer, the fused output layer (active dot
// products, softmax over the active set, cross-entropy, output delta and the hidden delta in one
// pass over the active weight rows), the row lists that group a step's gradient contributions by
// parameter row, and Adam (dense, and lazy over the rows a step touched) with the row gradients
// computed inside the update (each touched row is read and written once, no gradient buffer).
//
// Layouts: W1 (F, HID) row-major, W2 (N, HID) row-major, h / dh (B, HID). Active sets: sample b's
// ids at act[b * stride ..], act_cnt[b] of them, sorted ascending. Compile-time: SLIDE_HID (a
// multiple of 32 up to 256, model.hidden; every width compiles: tests/test_slide.py). Row work is done by groups of 8 lanes, lane j of a group holding the float4s
// j, j + 8, ... of a row (each load instruction covers 128 contiguous bytes of a row).
#include <math.h>
#include <stdint.h>

#include "slide_common.cuh"

#ifndef SLIDE_HID
#define SLIDE_HID 128
#endif
#define HID SLIDE_HID
#define QV (HID / 32)                    // float4s per lane of an 8-lane group
static_assert(HID % 32 == 0, "SLIDE_HID must be a multiple of 32");

__device__ __forceinline__ bool is_label(const int* labs, int nl, int n)
{
    const int j = lower_bound(labs, nl, n);
    return j < nl && labs[j] == n;
}

__device__ __forceinline__ float group_sum(float x)
{
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 4);
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 2);
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
    return x;
}

__device__ __forceinline__ void load_row(const float* __restrict__ row, int j, float4 (&w)[QV])
{
    const float4* r = reinterpret_cast<const float4*>(row);
#pragma unroll
    for (int q = 0; q < QV; ++q) w[q] = __ldg(r + j + 8 * q);
}

__device__ __forceinline__ float dot4(const float4 a, const float4 b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// ------------------------------------------------------------------ input layer
// h[b] = relu(sum_k x[k] W1[f_k] + b1) for rows r0 + b of the CSR (xptr, xidx, xval).
// Grid = B, block = 128 (4 warps share the row's non-zeros).
extern "C" __global__ void input_fwd(const int* __restrict__ xptr, const int* __restrict__ xidx,
                                     const float* __restrict__ xval, int r0, const float* __restrict__ W1,
                                     const float* __restrict__ b1, float* __restrict__ h)
{
    __shared__ float part[4][HID];
    const int b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int k0 = xptr[r0 + b], k1 = xptr[r0 + b + 1];
    float acc[HID / 32];
#pragma unroll
    for (int q = 0; q < HID / 32; ++q) acc[q] = 0.f;
    int k = k0 + warp;
    for (; k + 4 < k1; k += 8) {                 // two rows in flight
        const int fa = xidx[k], fb = xidx[k + 4];
        const float xa = xval[k], xb = xval[k + 4];
        const float* ra = W1 + (size_t)fa * HID;
        const float* rb = W1 + (size_t)fb * HID;
        float va[HID / 32], vb[HID / 32];
#pragma unroll
        for (int q = 0; q < HID / 32; ++q) { va[q] = __ldg(ra + lane + 32 * q); vb[q] = __ldg(rb + lane + 32 * q); }
#pragma unroll
        for (int q = 0; q < HID / 32; ++q) acc[q] += xa * va[q] + xb * vb[q];
    }
    for (; k < k1; k += 4) {
        const float x = xval[k];
        const float* r = W1 + (size_t)xidx[k] * HID;
#pragma unroll
        for (int q = 0; q < HID / 32; ++q) acc[q] += x * __ldg(r + lane + 32 * q);
    }
#pragma unroll
    for (int q = 0; q < HID / 32; ++q) part[warp][lane + 32 * q] = acc[q];
    __syncthreads();
    for (int j = threadIdx.x; j < HID; j += blockDim.x) {
        const float s = part[0][j] + part[1][j] + part[2][j] + part[3][j] + b1[j];
        h[(size_t)b * HID + j] = fmaxf(s, 0.f);
    }
}

// ------------------------------------------------------------------ fused output layer
#define OUT_THREADS 256
#define OUT_GROUPS (OUT_THREADS / 8)
#define OUT_WARPS (OUT_THREADS / 32)
static_assert(2 * OUT_WARPS * (HID + 4) * 4 + 16 * OUT_WARPS + 8 <= 48 * 1024,
              "slide_output's static shared memory must fit 48 KB");

// One block per sample. Pass 1 (a group of 8 lanes per active row): z = W2[n] . h + b2[n] (kept
// in vals), the online softmax statistics (m, d) and the online softmax-weighted sum of the rows
// sum_n exp(z_n - m) W2[n], the sum of the label rows and of the label logits. Merge, first within
// each warp (its 4 groups' lanes j hold the same slots of a row: two xor shuffles), then over the
// warps through shared memory (OUT_WARPS partial rows: 2 x 8 x (HID + 4) floats, 16.6 KB at
// HID = 256, so every width up to 256 fits the 48 KB of static shared memory): the hidden delta
// dh = (sum_n p_n W2[n] - sum_{labels} W2[n] / nl) / B * (h > 0) (W2 before the update) and the
// loss. Pass 2 (a thread per active entry): vals = dz = (p - y) / B (0 without labels), and the
// entry's place in its row's list: pos = atomicAdd(&cnt[n], 1).
extern "C" __global__ void __launch_bounds__(OUT_THREADS)
slide_output(const float* __restrict__ h, const float* __restrict__ W2, const float* __restrict__ b2,
             const int* __restrict__ act, const int* __restrict__ act_cnt, int stride,
             const int* __restrict__ yptr, const int* __restrict__ yidx, int r0, int B,
             float* __restrict__ vals, float* __restrict__ dh, double* __restrict__ loss,
             int* __restrict__ cnt, int* __restrict__ pos)
{
    __shared__ __align__(16) float wacc[OUT_WARPS][HID + 4];
    __shared__ __align__(16) float wyac[OUT_WARPS][HID + 4];
    __shared__ float wm[OUT_WARPS], wd[OUT_WARPS], wz[OUT_WARPS];
    __shared__ int wnl[OUT_WARPS];
    __shared__ float sM, sD;
    const int b = blockIdx.x, tid = threadIdx.x, j = tid & 7;
    const int na = act_cnt[b];
    const int* ids = act + (size_t)b * stride;
    float* v = vals + (size_t)b * stride;
    int nl = 0, l0 = 0;
    if (yptr) { l0 = yptr[r0 + b]; nl = yptr[r0 + b + 1] - l0; }
    const int* labs = yidx + l0;

    float4 hr[QV];
    load_row(h + (size_t)b * HID, j, hr);
    float4 acc[QV], yac[QV];
#pragma unroll
    for (int q = 0; q < QV; ++q) { acc[q] = make_float4(0.f, 0.f, 0.f, 0.f); yac[q] = acc[q]; }
    float m = -INFINITY, d = 0.f, zl = 0.f;
    int nla = 0;
    // acc = a * acc + c * w; the label sums; z kept in vals
    auto take = [&](const float z, const float4 (&w)[QV], const int n, const int k) {
        if (j == 0) v[k] = z;
        float a, c;
        if (z > m) { a = expf(m - z); c = 1.f; d = d * a + 1.f; m = z; }
        else { a = 1.f; c = expf(z - m); d += c; }
#pragma unroll
        for (int q = 0; q < QV; ++q) {
            acc[q].x = a * acc[q].x + c * w[q].x; acc[q].y = a * acc[q].y + c * w[q].y;
            acc[q].z = a * acc[q].z + c * w[q].z; acc[q].w = a * acc[q].w + c * w[q].w;
        }
        if (nl && is_label(labs, nl, n)) {
            zl += z;
            ++nla;
#pragma unroll
            for (int q = 0; q < QV; ++q) {
                yac[q].x += w[q].x; yac[q].y += w[q].y; yac[q].z += w[q].z; yac[q].w += w[q].w;
            }
        }
    };
    // A warp takes 8 consecutive entries an iteration (two rows per group, loaded together); the
    // loop bounds are warp-uniform so every lane joins the group shuffles.
    const int warp = tid >> 5, sub = (tid >> 3) & 3;
    for (int base = warp * 8; base < na; base += 2 * OUT_GROUPS) {
        const int ka = base + sub, kb = base + 4 + sub;
        const bool va = ka < na, vb = kb < na;
        const int n_a = va ? ids[ka] : 0, n_b = vb ? ids[kb] : 0;
        float4 wa[QV], wb[QV];
        load_row(W2 + (size_t)n_a * HID, j, wa);
        load_row(W2 + (size_t)n_b * HID, j, wb);
        float sa = 0.f, sb = 0.f;
#pragma unroll
        for (int q = 0; q < QV; ++q) { sa += dot4(wa[q], hr[q]); sb += dot4(wb[q], hr[q]); }
        sa = group_sum(sa);
        sb = group_sum(sb);
        if (va) take(sa + __ldg(b2 + n_a), wa, n_a, ka);
        if (vb) take(sb + __ldg(b2 + n_b), wb, n_b, kb);
    }
    // Merge the warp's 4 groups: rescale each to the warp's maximum (a group without entries has
    // m = -inf, d = 0 and acc = 0: weight 0), then sum over lanes j, j + 8, j + 16, j + 24.
    float mw = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
    mw = fmaxf(mw, __shfl_xor_sync(0xFFFFFFFFu, mw, 16));
    const float sc = (m == -INFINITY) ? 0.f : expf(m - mw);
    d *= sc;
#pragma unroll
    for (int q = 0; q < QV; ++q) { acc[q].x *= sc; acc[q].y *= sc; acc[q].z *= sc; acc[q].w *= sc; }
#pragma unroll
    for (int o = 8; o <= 16; o <<= 1) {
        d += __shfl_xor_sync(0xFFFFFFFFu, d, o);
        zl += __shfl_xor_sync(0xFFFFFFFFu, zl, o);
        nla += __shfl_xor_sync(0xFFFFFFFFu, nla, o);
#pragma unroll
        for (int q = 0; q < QV; ++q) {
            acc[q].x += __shfl_xor_sync(0xFFFFFFFFu, acc[q].x, o);
            acc[q].y += __shfl_xor_sync(0xFFFFFFFFu, acc[q].y, o);
            acc[q].z += __shfl_xor_sync(0xFFFFFFFFu, acc[q].z, o);
            acc[q].w += __shfl_xor_sync(0xFFFFFFFFu, acc[q].w, o);
            yac[q].x += __shfl_xor_sync(0xFFFFFFFFu, yac[q].x, o);
            yac[q].y += __shfl_xor_sync(0xFFFFFFFFu, yac[q].y, o);
            yac[q].z += __shfl_xor_sync(0xFFFFFFFFu, yac[q].z, o);
            yac[q].w += __shfl_xor_sync(0xFFFFFFFFu, yac[q].w, o);
        }
    }
    if (sub == 0) {                                  // lanes 0..7 of the warp hold its sums
#pragma unroll
        for (int q = 0; q < QV; ++q) {
            *reinterpret_cast<float4*>(&wacc[warp][4 * (j + 8 * q)]) = acc[q];
            *reinterpret_cast<float4*>(&wyac[warp][4 * (j + 8 * q)]) = yac[q];
        }
        if (j == 0) { wm[warp] = mw; wd[warp] = d; wz[warp] = zl; wnl[warp] = nla; }
    }
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < OUT_WARPS; ++i) M = fmaxf(M, wm[i]);
    float D = 0.f;
    for (int i = 0; i < OUT_WARPS; ++i)
        if (wm[i] != -INFINITY) D += wd[i] * expf(wm[i] - M);
    const float inv_b = 1.f / (float)B;
    for (int t = tid; t < HID; t += OUT_THREADS) {
        float A = 0.f, Y = 0.f;
        for (int i = 0; i < OUT_WARPS; ++i) {
            if (wm[i] != -INFINITY) A += wacc[i][t] * expf(wm[i] - M);
            Y += wyac[i][t];
        }
        const float hv = h[(size_t)b * HID + t];
        dh[(size_t)b * HID + t] = (nl && hv > 0.f) ? (A / D - Y / (float)nl) * inv_b : 0.f;
    }
    if (tid == 0) {
        sM = M;
        sD = D;
        if (nl) {
            float zs = 0.f;
            int cl = 0;
            for (int i = 0; i < OUT_WARPS; ++i) { zs += wz[i]; cl += wnl[i]; }
            const double lb = -((double)zs - (double)cl * ((double)M + log((double)D))) / (double)nl;
            atomicAdd(loss, lb / (double)B);
        }
    }
    __syncthreads();
    for (int k = tid; k < na; k += OUT_THREADS) {
        const int n = ids[k];
        float dz = 0.f;
        if (nl) {
            const float p = expf(v[k] - sM) / sD;
            dz = (p - (is_label(labs, nl, n) ? 1.f / (float)nl : 0.f)) * inv_b;
        }
        v[k] = dz;
        pos[(size_t)b * stride + k] = atomicAdd(&cnt[n], 1);
    }
}

// list[start[n] + pos[e]] = e for every active entry e = b * stride + k. Grid = B.
extern "C" __global__ void act_scatter(const int* __restrict__ act, const int* __restrict__ act_cnt, int stride,
                                       const int* __restrict__ pos, const int* __restrict__ start,
                                       int* __restrict__ list)
{
    const int b = blockIdx.x, na = act_cnt[b];
    for (int k = threadIdx.x; k < na; k += blockDim.x) {
        const int e = b * stride + k;
        list[start[act[e]] + pos[e]] = e;
    }
}

// The input side: every non-zero e (local index, 0 .. nnz of the batch) of rows r0 .. r0 + B:
// eb[e] = its row in the batch, pos[e] = atomicAdd(&cnt[f], 1). Grid = B.
extern "C" __global__ void x_count(const int* __restrict__ xptr, const int* __restrict__ xidx, int r0,
                                   int* __restrict__ cnt, int* __restrict__ pos, int* __restrict__ eb)
{
    const int b = blockIdx.x, base = xptr[r0];
    const int k0 = xptr[r0 + b], k1 = xptr[r0 + b + 1];
    for (int k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
        pos[k - base] = atomicAdd(&cnt[xidx[k]], 1);
        eb[k - base] = b;
    }
}

extern "C" __global__ void x_scatter(const int* __restrict__ xptr, const int* __restrict__ xidx, int r0, int B,
                                     const int* __restrict__ pos, const int* __restrict__ start,
                                     int* __restrict__ list)
{
    const int base = xptr[r0], nnz = xptr[r0 + B] - base;
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < nnz) list[start[xidx[base + e]] + pos[e]] = e;
}

// ------------------------------------------------------------------ Adam
__device__ __forceinline__ float adam1(float& w, float& m, float& v, float g, float lr_t, float b1, float b2,
                                       float eps)
{
    m = b1 * m + (1.f - b1) * g;
    v = b2 * v + (1.f - b2) * g * g;
    w -= lr_t * m / (sqrtf(v) + eps);
    return w;
}

__device__ __forceinline__ void adam4(float4& w, float4& m, float4& v, const float4 g, float lr_t, float b1,
                                      float b2, float eps)
{
    adam1(w.x, m.x, v.x, g.x, lr_t, b1, b2, eps);
    adam1(w.y, m.y, v.y, g.y, lr_t, b1, b2, eps);
    adam1(w.z, m.z, v.z, g.z, lr_t, b1, b2, eps);
    adam1(w.w, m.w, v.w, g.w, lr_t, b1, b2, eps);
}

#define ROW_THREADS 256
#define ROW_GROUPS (ROW_THREADS / 8)
#ifndef ROW_MIN_BLOCKS
#define ROW_MIN_BLOCKS 2               // 3 spills registers (ptxas -v); at HID >= 192 so does 2 (36-144 B a
                                       // thread, through L1): 1 would not, at half the resident warps
#endif

// The rows with at least one entry (start[r + 1] > start[r]), in no particular order:
// rows[0 .. *nrows) (*nrows zeroed beforehand). One thread per row.
extern "C" __global__ void touched_rows(const int* __restrict__ start, int R, int* __restrict__ rows,
                                        int* __restrict__ nrows)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    const bool t = r < R && start[r + 1] > start[r];
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, t);
    int base = 0;
    if (lane == 0 && ballot) base = atomicAdd(nrows, __popc(ballot));
    base = __shfl_sync(0xFFFFFFFFu, base, 0);
    if (t) rows[base + __popc(ballot & ((1u << lane) - 1u))] = r;
}

// Adam over rows of W (R, HID) (and its bias, when given) with the row gradient computed here:
//   g[r] = sum_{e in list[start[r] .. start[r+1])} ew[e] * H[sample(e)],  gb[r] = sum ew[e]
// where sample(e) = e / ediv (ediv > 0) or eb[e]. rows == nullptr: every row r < R (adam: zero
// gradients decay the moments); else the rows rows[0 .. *nrows) only (lazy_adam). An 8-lane group
// per row, grid-stride; the row's w, m, v loads are issued before the gradient's. acc (optional):
// += the rows updated (a run's work counter).
extern "C" __global__ void __launch_bounds__(ROW_THREADS, ROW_MIN_BLOCKS)
adam_rows(float* __restrict__ W, float* __restrict__ Mw, float* __restrict__ Vw, float* __restrict__ bias,
          float* __restrict__ Mb, float* __restrict__ Vb, int R, const int* __restrict__ rows,
          const int* __restrict__ nrows, const int* __restrict__ start, const int* __restrict__ list,
          const float* __restrict__ ew, int ediv, const int* __restrict__ eb, const float* __restrict__ H,
          float lr_t, float b1, float b2, float eps, u64* __restrict__ acc)
{
    const int n = rows ? *nrows : R, j = threadIdx.x & 7;
    if (acc && blockIdx.x == 0 && threadIdx.x == 0) *acc += (u64)n;
    const int stride = gridDim.x * ROW_GROUPS;
    for (int i = blockIdx.x * ROW_GROUPS + (threadIdx.x >> 3); i < n; i += stride) {
        const int r = rows ? rows[i] : i;
        float4* w4 = reinterpret_cast<float4*>(W + (size_t)r * HID);
        float4* m4 = reinterpret_cast<float4*>(Mw + (size_t)r * HID);
        float4* v4 = reinterpret_cast<float4*>(Vw + (size_t)r * HID);
        float4 w[QV], m[QV], v[QV];
#pragma unroll
        for (int q = 0; q < QV; ++q) { w[q] = w4[j + 8 * q]; m[q] = m4[j + 8 * q]; v[q] = v4[j + 8 * q]; }
        const int e0 = start[r], e1 = start[r + 1];
        float4 g[QV];
#pragma unroll
        for (int q = 0; q < QV; ++q) g[q] = make_float4(0.f, 0.f, 0.f, 0.f);
        float gb = 0.f;
        for (int k = e0; k < e1; ++k) {
            const int e = list[k];
            const float c = ew[e];
            const int s = ediv > 0 ? e / ediv : eb[e];
            float4 hv[QV];
            load_row(H + (size_t)s * HID, j, hv);
            gb += c;
#pragma unroll
            for (int q = 0; q < QV; ++q) {
                g[q].x += c * hv[q].x; g[q].y += c * hv[q].y; g[q].z += c * hv[q].z; g[q].w += c * hv[q].w;
            }
        }
#pragma unroll
        for (int q = 0; q < QV; ++q) {
            adam4(w[q], m[q], v[q], g[q], lr_t, b1, b2, eps);
            w4[j + 8 * q] = w[q]; m4[j + 8 * q] = m[q]; v4[j + 8 * q] = v[q];
        }
        if (bias && j == 0) {
            float bw = bias[r], bm = Mb[r], bv = Vb[r];
            adam1(bw, bm, bv, gb, lr_t, b1, b2, eps);
            bias[r] = bw; Mb[r] = bm; Vb[r] = bv;
        }
    }
}

// Adam of b1 with gb1 = sum_b dh[b] (every step, both optimizers). One block of >= HID threads.
extern "C" __global__ void adam_hidden_bias(float* __restrict__ b1v, float* __restrict__ Mb, float* __restrict__ Vb,
                                            const float* __restrict__ dh, int B, float lr_t, float beta1, float beta2,
                                            float eps)
{
    for (int t = threadIdx.x; t < HID; t += blockDim.x) {
        float g = 0.f;
        for (int b = 0; b < B; ++b) g += dh[(size_t)b * HID + t];
        float w = b1v[t], m = Mb[t], v = Vb[t];
        adam1(w, m, v, g, lr_t, beta1, beta2, eps);
        b1v[t] = w; Mb[t] = m; Vb[t] = v;
    }
}

// Dense Adam with a dense gradient g (n floats; n % 4 == 0 for the vector part, the tail scalar).
extern "C" __global__ void adam_dense(float* __restrict__ w, float* __restrict__ m, float* __restrict__ v,
                                      const float* __restrict__ g, long long n, float lr_t, float b1, float b2,
                                      float eps)
{
    const long long n4 = n / 4;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 wv = reinterpret_cast<float4*>(w)[i], mv = reinterpret_cast<float4*>(m)[i];
        float4 vv = reinterpret_cast<float4*>(v)[i];
        const float4 gv = reinterpret_cast<const float4*>(g)[i];
        adam4(wv, mv, vv, gv, lr_t, b1, b2, eps);
        reinterpret_cast<float4*>(w)[i] = wv; reinterpret_cast<float4*>(m)[i] = mv;
        reinterpret_cast<float4*>(v)[i] = vv;
    }
    if (blockIdx.x == 0 && threadIdx.x < (int)(n - 4 * n4)) {
        const long long i = 4 * n4 + threadIdx.x;
        float wv = w[i], mv = m[i], vv = v[i];
        adam1(wv, mv, vv, g[i], lr_t, b1, b2, eps);
        w[i] = wv; m[i] = mv; v[i] = vv;
    }
}

// ------------------------------------------------------------------ dense baseline and evaluation
// Full softmax of one row of Z = h W2^T (B, N) per block, in place: Z[b] <- dz = (p - y) / B
// (0 without labels), with z = Z + b2 (added on the fly: two reads and one write of Z); loss +=
// batch-mean cross-entropy.
extern "C" __global__ void dense_softmax_xent(float* __restrict__ Z, const float* __restrict__ b2, int N,
                                              const int* __restrict__ yptr, const int* __restrict__ yidx, int r0,
                                              int B, double* __restrict__ loss)
{
    __shared__ float sm_m[32], sm_d[32];
    __shared__ float sM, sD;
    const int b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    float* z = Z + (size_t)b * N;
    const int l0 = yptr[r0 + b], nl = yptr[r0 + b + 1] - l0;
    const int* labs = yidx + l0;
    float m = -INFINITY, d = 0.f;
    for (int n = tid; n < N; n += blockDim.x) {
        const float x = z[n] + __ldg(b2 + n);
        if (x > m) { d = (m == -INFINITY ? 0.f : d * expf(m - x)) + 1.f; m = x; }
        else d += expf(x - m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), d2 = __shfl_xor_sync(0xFFFFFFFFu, d, o);
        const float mm = fmaxf(m, m2);
        d = (m == -INFINITY ? 0.f : d * expf(m - mm)) + (m2 == -INFINITY ? 0.f : d2 * expf(m2 - mm));
        m = mm;
    }
    if (lane == 0) { sm_m[warp] = m; sm_d[warp] = d; }
    __syncthreads();
    if (tid == 0) {
        float M = -INFINITY, D = 0.f;
        for (int i = 0; i < nw; ++i) M = fmaxf(M, sm_m[i]);
        for (int i = 0; i < nw; ++i) if (sm_m[i] != -INFINITY) D += sm_d[i] * expf(sm_m[i] - M);
        float zs = 0.f;
        for (int i = 0; i < nl; ++i) zs += z[labs[i]] + b2[labs[i]];
        sM = M; sD = D;
        if (nl) atomicAdd(loss, -((double)zs - (double)nl * ((double)M + log((double)D))) / (double)nl / (double)B);
    }
    __syncthreads();
    const float M = sM, D = sD, inv_b = 1.f / (float)B;
    for (int n = tid; n < N; n += blockDim.x) z[n] = nl ? expf(z[n] + __ldg(b2 + n) - M) / D * inv_b : 0.f;
    __syncthreads();
    for (int i = tid; i < nl; i += blockDim.x) z[labs[i]] -= inv_b / (float)nl;
}

// gb[n] = sum_b dz[b, n] (column sums of the (B, N) delta).
extern "C" __global__ void col_sums(const float* __restrict__ Z, int B, int N, float* __restrict__ gb)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float s = 0.f;
    for (int b = 0; b < B; ++b) s += Z[(size_t)b * N + n];
    gb[n] = s;
}

// dh[b, j] *= (h[b, j] > 0)
extern "C" __global__ void relu_mask(float* __restrict__ dh, const float* __restrict__ h, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(h[i] > 0.f)) dh[i] = 0.f;
}

// Z[b, n] += bias[n] for a (rows, N) matrix.
extern "C" __global__ void add_bias_rows(float* __restrict__ Z, const float* __restrict__ bias, int rows, int N)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)rows * N) Z[i] += __ldg(bias + (int)(i % N));
}
