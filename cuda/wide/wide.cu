// cuWide kernels (Miao et al., TKDE 2022): flow-based fused training of LR / FM, and the
// stage-based baseline (SpMV, gradient, apply as separate kernels). Kernels only; the host side is
// pipeline/models/wide/gpu.py.
//
// Compile-time defines: K (FM factors; 0 = LR), C (samples per chunk), R (accumulator replicas,
// power of two), H (hot features whose gradients are cached in shared memory).
// Model: z = b + x.w + 1/2 sum_q ((x.v_q)^2 - (x^2).(v_q^2)), loss = log(1+e^z) - y z, y in {0,1},
// delta = sigmoid(z) - y; updates target += scale * gradient-sum (scale = -lr / samples per step).
#include <cuda_runtime.h>

#ifndef K
#define K 0
#endif
#ifndef C
#define C 32
#endif
#ifndef R
#define R 4
#endif
#ifndef H
#define H 256
#endif
#define NQ (1 + 2 * K)       // accumulators per sample: x.w, x.v_q, (x^2).(v_q^2)
#define HW (1 + K)           // hot-cache floats per feature: w, v_0..v_{K-1}

__device__ __forceinline__ float sigm(float z) { return 1.f / (1.f + __expf(-z)); }
__device__ __forceinline__ float logloss(float z, float y) {
    return fmaxf(z, 0.f) + log1pf(__expf(-fabsf(z))) - y * z;
}

// ---------------------------------------------------------------------------------- flow

__device__ __forceinline__ void aggregate(float* acc, int r, const float* w, const float* v, int f, int s, float x) {
    if (x == 0.f) return;                                   // padding edge
    atomicAdd(&acc[s * R + r], w[f] * x);
#if K > 0
#pragma unroll 4
    for (int q = 0; q < K; q++) {
        float vf = v[(size_t)f * K + q];
        atomicAdd(&acc[((1 + q) * C + s) * R + r], vf * x);
        atomicAdd(&acc[((1 + K + q) * C + s) * R + r], vf * vf * x * x);
    }
#endif
}

__device__ __forceinline__ void apply_hot(float* gh, const float* dlt, const float* a2, const float* v,
                                          int f, int s, float x) {
    if (x == 0.f) return;
    float d = dlt[s];
    if (d == 0.f) return;
    atomicAdd(&gh[f * HW], d * x);
#if K > 0
#pragma unroll 4
    for (int q = 0; q < K; q++)
        atomicAdd(&gh[f * HW + 1 + q], d * (x * a2[s * K + q] - v[(size_t)f * K + q] * x * x));
#endif
}

__device__ __forceinline__ void apply_cold(float* tw, float* tv, const float* dlt, const float* a2, const float* v,
                                           int f, int s, float x, float scale) {
    if (x == 0.f) return;
    float d = dlt[s];
    if (d == 0.f) return;
    atomicAdd(&tw[f], scale * d * x);
#if K > 0
#pragma unroll 4
    for (int q = 0; q < K; q++)
        atomicAdd(&tv[(size_t)f * K + q], scale * d * (x * a2[s * K + q] - v[(size_t)f * K + q] * x * x));
#endif
}

// One persistent launch trains the chunks order[0..n_order): each block takes chunks blockIdx.x,
// blockIdx.x + gridDim.x, ...; for each chunk: Aggregate (per-sample accumulators in shared memory,
// R replicas), Loss (delta per sample), Apply (hot features into a shared-memory gradient cache
// flushed once per chunk, cold features straight to global memory). Edge ranges are 4-aligned, so
// loads are 128-bit (int4 / float4). update=chunk: tw/tv/tb alias w/v/bias (asynchronous, as the
// authors' kernel); update=batch: they are gradient buffers committed by flow_commit.
extern "C" __global__ void flow_train(const int* __restrict__ order, int n_order,
                                      const long long* __restrict__ cptr, const long long* __restrict__ chot,
                                      const int* __restrict__ fid, const int* __restrict__ sid,
                                      const float* __restrict__ val, const float* __restrict__ y, int n,
                                      const float* w, const float* v, const float* bias,
                                      float* tw, float* tv, float* tb, float scale, double* loss_sum) {
    extern __shared__ float smem[];
    float* acc = smem;                    // [NQ][C][R]
    float* dlt = acc + NQ * C * R;        // [C]
    float* a2 = dlt + C;                  // [C][K]
    float* gh = a2 + C * K;               // [H][HW]
    float* red = gh + H * HW;             // [2]
    const int tid = threadIdx.x;
    const int r = tid & (R - 1);
    for (int i = tid; i < H * HW; i += blockDim.x) gh[i] = 0.f;
    for (int it = blockIdx.x; it < n_order; it += gridDim.x) {
        const int c = order[it];
        const long long e0 = cptr[c], eh = chot[c], e1 = cptr[c + 1];
        const int s0 = c * C;
        const int ns = min(C, n - s0);
        for (int i = tid; i < NQ * C * R; i += blockDim.x) acc[i] = 0.f;
        if (tid < 2) red[tid] = 0.f;
        __syncthreads();
        // Aggregate
        for (long long q = e0 / 4 + tid; q < e1 / 4; q += blockDim.x) {
            const int4 f4 = __ldg(reinterpret_cast<const int4*>(fid) + q);
            const int4 s4 = __ldg(reinterpret_cast<const int4*>(sid) + q);
            const float4 x4 = __ldg(reinterpret_cast<const float4*>(val) + q);
            aggregate(acc, r, w, v, f4.x, s4.x, x4.x);
            aggregate(acc, r, w, v, f4.y, s4.y, x4.y);
            aggregate(acc, r, w, v, f4.z, s4.z, x4.z);
            aggregate(acc, r, w, v, f4.w, s4.w, x4.w);
        }
        __syncthreads();
        // Loss
        if (tid < C) {
            float d = 0.f, l = 0.f;
            if (tid < ns) {
                float z = bias[0];
#pragma unroll
                for (int j = 0; j < R; j++) z += acc[tid * R + j];
#if K > 0
                for (int q = 0; q < K; q++) {
                    float s2 = 0.f, s3 = 0.f;
#pragma unroll
                    for (int j = 0; j < R; j++) {
                        s2 += acc[((1 + q) * C + tid) * R + j];
                        s3 += acc[((1 + K + q) * C + tid) * R + j];
                    }
                    a2[tid * K + q] = s2;
                    z += 0.5f * (s2 * s2 - s3);
                }
#endif
                const float yy = y[s0 + tid];
                d = sigm(z) - yy;
                l = logloss(z, yy);
                atomicAdd(&red[0], d);
                atomicAdd(&red[1], l);
            }
            dlt[tid] = d;
        }
        __syncthreads();
        // Apply: hot part into the shared cache, cold part to global memory
        for (long long q = e0 / 4 + tid; q < eh / 4; q += blockDim.x) {
            const int4 f4 = __ldg(reinterpret_cast<const int4*>(fid) + q);
            const int4 s4 = __ldg(reinterpret_cast<const int4*>(sid) + q);
            const float4 x4 = __ldg(reinterpret_cast<const float4*>(val) + q);
            apply_hot(gh, dlt, a2, v, f4.x, s4.x, x4.x);
            apply_hot(gh, dlt, a2, v, f4.y, s4.y, x4.y);
            apply_hot(gh, dlt, a2, v, f4.z, s4.z, x4.z);
            apply_hot(gh, dlt, a2, v, f4.w, s4.w, x4.w);
        }
        for (long long q = eh / 4 + tid; q < e1 / 4; q += blockDim.x) {
            const int4 f4 = __ldg(reinterpret_cast<const int4*>(fid) + q);
            const int4 s4 = __ldg(reinterpret_cast<const int4*>(sid) + q);
            const float4 x4 = __ldg(reinterpret_cast<const float4*>(val) + q);
            apply_cold(tw, tv, dlt, a2, v, f4.x, s4.x, x4.x, scale);
            apply_cold(tw, tv, dlt, a2, v, f4.y, s4.y, x4.y, scale);
            apply_cold(tw, tv, dlt, a2, v, f4.z, s4.z, x4.z, scale);
            apply_cold(tw, tv, dlt, a2, v, f4.w, s4.w, x4.w, scale);
        }
        __syncthreads();
        // flush the hot cache (only touched entries) and the bias / loss
        for (int i = tid; i < H * HW; i += blockDim.x) {
            const float g = gh[i];
            if (g != 0.f) {
                const int f = i / HW, j = i - f * HW;
                if (j == 0) atomicAdd(&tw[f], scale * g);
                else atomicAdd(&tv[(size_t)f * K + (j - 1)], scale * g);
                gh[i] = 0.f;
            }
        }
        if (tid == 0) {
            atomicAdd(tb, scale * red[0]);
            atomicAdd(loss_sum, (double)red[1]);
        }
        __syncthreads();
    }
}

// update=batch: w += gw, v += gv, bias += gb over the features the batch touched (each entry is
// taken once by atomicExch, so duplicates across the batch's edges commit it once), buffers reset.
extern "C" __global__ void flow_commit(const int* __restrict__ order, int n_order,
                                       const long long* __restrict__ cptr, const int* __restrict__ fid,
                                       float* w, float* v, float* bias, float* gw, float* gv, float* gb) {
    for (int it = blockIdx.x; it < n_order; it += gridDim.x) {
        const int c = order[it];
        for (long long e = cptr[c] + threadIdx.x; e < cptr[c + 1]; e += blockDim.x) {
            const int f = fid[e];
            const float g = atomicExch(&gw[f], 0.f);
            if (g != 0.f) w[f] += g;
#if K > 0
            for (int q = 0; q < K; q++) {
                const float gq = atomicExch(&gv[(size_t)f * K + q], 0.f);
                if (gq != 0.f) v[(size_t)f * K + q] += gq;
            }
#endif
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        bias[0] += gb[0];
        gb[0] = 0.f;
    }
}

// ---------------------------------------------------------------------------------- stage
// A batch is the chunks order[0..n_chunks); sample j of the batch (one warp each) is row
// order[j / C] * C + j % C of the CSR (rows past n are skipped).

__device__ __forceinline__ int stage_row(const int* order, int n_chunks, int n, int& j) {
    j = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (j >= n_chunks * C) return -1;
    const int s = order[j / C] * C + j % C;
    return s < n ? s : -1;
}

__device__ __forceinline__ float warp_sum(float a) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_down_sync(0xffffffffu, a, o);
    return a;
}

// kernel 1 (SpMV): z[j] = logit of sample j; FM also a2[j][q] = x.v_q, all to global memory
extern "C" __global__ void stage_spmv(const int* __restrict__ order, int n_chunks, int n,
                                      const long long* __restrict__ indptr, const int* __restrict__ indices,
                                      const float* __restrict__ data, const float* __restrict__ w,
                                      const float* __restrict__ v, const float* __restrict__ bias,
                                      float* z, float* a2) {
    int j;
    const int s = stage_row(order, n_chunks, n, j);
    if (s < 0) return;
    const int lane = threadIdx.x & 31;
    float lin = 0.f;
#if K > 0
    float s2[K], s3[K];
    for (int q = 0; q < K; q++) { s2[q] = 0.f; s3[q] = 0.f; }
#endif
    for (long long e = indptr[s] + lane; e < indptr[s + 1]; e += 32) {
        const int f = indices[e];
        const float x = data[e];
        lin += w[f] * x;
#if K > 0
        for (int q = 0; q < K; q++) {
            const float vf = v[(size_t)f * K + q];
            s2[q] += vf * x;
            s3[q] += vf * vf * x * x;
        }
#endif
    }
    float zz = warp_sum(lin);
#if K > 0
    for (int q = 0; q < K; q++) {
        const float a = __shfl_sync(0xffffffffu, warp_sum(s2[q]), 0);
        const float b = warp_sum(s3[q]);
        if (lane == 0) { a2[(size_t)j * K + q] = a; zz += 0.5f * (a * a - b); }
    }
#endif
    if (lane == 0) z[j] = zz + bias[0];
}

// kernel 2 (gradient): delta per sample, loss, gradient sums scattered into gw / gv / gb
extern "C" __global__ void stage_grad(const int* __restrict__ order, int n_chunks, int n,
                                      const long long* __restrict__ indptr, const int* __restrict__ indices,
                                      const float* __restrict__ data, const float* __restrict__ y,
                                      const float* __restrict__ z, const float* __restrict__ a2,
                                      const float* __restrict__ v, float* gw, float* gv, float* gb,
                                      double* loss_sum) {
    int j;
    const int s = stage_row(order, n_chunks, n, j);
    if (s < 0) return;
    const int lane = threadIdx.x & 31;
    const float zz = z[j], yy = y[s];
    const float d = sigm(zz) - yy;
    if (lane == 0) {
        atomicAdd(gb, d);
        atomicAdd(loss_sum, (double)logloss(zz, yy));
    }
    for (long long e = indptr[s] + lane; e < indptr[s + 1]; e += 32) {
        const int f = indices[e];
        const float x = data[e];
        atomicAdd(&gw[f], d * x);
#if K > 0
        for (int q = 0; q < K; q++)
            atomicAdd(&gv[(size_t)f * K + q], d * (x * a2[(size_t)j * K + q] - v[(size_t)f * K + q] * x * x));
#endif
    }
}

// kernel 3 (apply): w += scale * gw over the batch's features (each taken once), buffers reset
extern "C" __global__ void stage_apply(const int* __restrict__ order, int n_chunks, int n,
                                       const long long* __restrict__ indptr, const int* __restrict__ indices,
                                       float* w, float* v, float* bias, float* gw, float* gv, float* gb,
                                       float scale) {
    int j;
    const int s = stage_row(order, n_chunks, n, j);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        bias[0] += scale * gb[0];
        gb[0] = 0.f;
    }
    if (s < 0) return;
    const int lane = threadIdx.x & 31;
    for (long long e = indptr[s] + lane; e < indptr[s + 1]; e += 32) {
        const int f = indices[e];
        const float g = atomicExch(&gw[f], 0.f);
        if (g != 0.f) w[f] += scale * g;
#if K > 0
        for (int q = 0; q < K; q++) {
            const float gq = atomicExch(&gv[(size_t)f * K + q], 0.f);
            if (gq != 0.f) v[(size_t)f * K + q] += scale * gq;
        }
#endif
    }
}
