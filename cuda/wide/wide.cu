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

// The block's threads (tid = threadIdx.x) walk the edges [e_begin, e_end) (4-aligned) with 128-bit loads of the feature
// ids, sample ids and values, calling op(feature, sample, value) for each of the four.
template <typename Op>
__device__ __forceinline__ void for_edges4(int tid, long long e_begin, long long e_end, const int* __restrict__ fid,
                                           const int* __restrict__ sid, const float* __restrict__ val, Op op) {
    for (long long q = e_begin / 4 + tid; q < e_end / 4; q += blockDim.x) {
        const int4 f4 = __ldg(reinterpret_cast<const int4*>(fid) + q);
        const int4 s4 = __ldg(reinterpret_cast<const int4*>(sid) + q);
        const float4 x4 = __ldg(reinterpret_cast<const float4*>(val) + q);
        op(f4.x, s4.x, x4.x);
        op(f4.y, s4.y, x4.y);
        op(f4.z, s4.z, x4.z);
        op(f4.w, s4.w, x4.w);
    }
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
        for_edges4(tid, e0, e1, fid, sid, val, [&](int f, int s, float x) { aggregate(acc, r, w, v, f, s, x); });
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
        for_edges4(tid, e0, eh, fid, sid, val, [&](int f, int s, float x) { apply_hot(gh, dlt, a2, v, f, s, x); });
        for_edges4(tid, eh, e1, fid, sid, val,
                   [&](int f, int s, float x) { apply_cold(tw, tv, dlt, a2, v, f, s, x, scale); });
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

// kernel 3 (apply): w -= lr / (samples in the batch) * gw over the batch's features (each taken once),
// buffers reset. The batch size is counted here (a chunk past the end of the data has fewer rows) so
// that the host passes the same arguments for every step (an epoch is replayed as one CUDA graph).
extern "C" __global__ void stage_apply(const int* __restrict__ order, int n_chunks, int n,
                                       const long long* __restrict__ indptr, const int* __restrict__ indices,
                                       float* w, float* v, float* bias, float* gw, float* gv, float* gb,
                                       float neg_lr) {
    int nb = 0;
    for (int c = 0; c < n_chunks; c++) nb += min(C, n - order[c] * C);
    const float scale = neg_lr / (float)nb;
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

// ---------------------------------------------------------------------------------- flow, warp design
// model.design=warp: no block-wide phases and no shared memory. A persistent warp trains WS samples
// (rows of the CSR) per step, WG = 32 / WS lanes per sample; warp gw takes units gw, gw + nw, ...
// of the epoch (a unit: WS consecutive rows of a chunk of the order), so nw x WS samples are in
// flight (update=chunk: the host sets nw x WS = model.inflight chunks x C, one mini-batch by
// default). Per step: gather the parameter rows of the sample's edges (L2, __ldcg), group all-reduce
// by shuffles (x.w, and for FM x.v_q and sum (x v_q)^2), delta, and one vector RED per 4 floats of
// each edge's gradient row. The edges and labels of the next units are loaded WPF steps ahead, their
// row pointers and rows one and two steps before that (software pipeline), so only the parameter
// gather is on a step's critical path.
// Parameters are packed rows of KP floats: [w, v_0 .. v_{K-1}, 0 ...] (LR: KP = 1). Hot-line
// contention: the rows of the HSH most frequent features (and the bias) have NSH shards; a warp adds
// into shard gw % NSH, readers sum the shards (the host folds them between epochs), so the same-line
// atomics of the hottest features are spread over NSH lines without delaying any update.
//
// Compile-time defines, set by the host (gpu.warp_geometry) from model.warp and the data: WS
// (model.warp.samples: samples per warp step, power of two <= 32), WEPL (model.warp.edges_per_lane:
// edges per lane held in registers; longer rows go through a tail loop), NSH (model.warp.shards, 1 =
// none), HSH (model.warp.shard_hot: sharded features), WPF (model.warp.prefetch: prefetch distance of
// the edges in steps, a step can be shorter than a DRAM round trip), HC (model.warp.hot_cache), OPT
// (model.optimizer), and HQ, AHC, AQ (derived: see below).
#ifndef WS
#define WS 1
#endif
#ifndef WEPL
#define WEPL 2
#endif
#ifndef NSH
#define NSH 1
#endif
#ifndef HSH
#define HSH 0
#endif
#ifndef WPF
#define WPF 2                                         // steps ahead the edges are loaded (>= 1)
#endif
#ifndef HC
#define HC 0                                          // hot rows each block caches in shared memory
#endif
#ifndef OPT
#define OPT 0                                         // optimiser of w and V: 0 SGD, 1 AdaGrad (the bias: SGD)
#endif
#ifndef HQ
#define HQ 0                                          // LR, hot-row cache: the step gradient in fixed point (see GHQ)
#endif
#ifndef AHC
#define AHC 0                                         // AdaGrad, LR, hot-row cache: the cached rows' accumulators too (see AH)
#endif
#ifndef AQ
#define AQ 0                                          // AHC: the step's squares in fixed point, units of 2^-AQ (0: float)
#endif
#define WG (32 / WS)                                  // lanes per sample
#define KP ((K) > 0 ? (((K) + 4) & ~3) : 1)           // floats per packed parameter row
#define BST 32                                        // float stride of the bias shards (own lines)
#define SHARDED (NSH > 1 && HSH > 0)
#define CACHED (HC > 0)
#define BC CACHED                                     // the bias in the hot-row cache (see PB)

static_assert(WS >= 1 && WS <= 32 && (WS & (WS - 1)) == 0, "WS: a power of two <= 32");
static_assert(C % WS == 0, "C must be a multiple of WS");
static_assert(WPF >= 1 && WPF <= 4, "WPF: 1..4");
static_assert(OPT == 0 || OPT == 1, "OPT: 0 (SGD) or 1 (AdaGrad)");
static_assert(HQ >= 0 && HQ <= 60, "HQ: 0 (float) or the fixed-point exponent, <= 60");
static_assert(AHC == 0 || AHC == 1, "AHC: 0 or 1");
static_assert(AQ >= 0 && AQ <= 60, "AQ: 0 (float) or the fixed-point exponent, <= 60");
static_assert(AHC == 0 || (OPT == 1 && K == 0 && HC > 0),
              "AHC: AdaGrad, LR, the hot-row cache (variants.caches_hot_accumulators)");

// Hot-row cache (HC > 0; the paper's importance-based model caching): a block holds the packed rows
// of features 0..HC-1 in shared memory, PH (the model, shards summed) and GH (the block's gradient
// of the current step). The block's warps step together: at each step boundary (two barriers) the
// block adds GH into the model (its shard: block id % NSH) with coalesced REDs, zeroes it and
// reloads PH. A hot edge then costs a shared-memory read and a shared-memory atomic instead of a
// contended L2 gather and RED on one of the few lines every sample touches; hot rows are read as
// of the start of the step, as the cold ones are gathered.
// AdaGrad (OPT = 1) without AHC keeps no accumulators in shared memory: a hot coordinate's square
// goes to the global accumulator as any other's (ada_step), a returning atomic on the lines nearly
// every sample touches. With AHC (LR), the block caches the hot rows' accumulators as it caches the
// rows (AH: the model's at the step start, shards summed; GA: the block's squares of the step), and a
// cached coordinate's step is normalised by AH + the block's squares of the step up to its own
// atomic + an estimate of the other blocks' squares of the step: what they added in the last step
// (DA, measured at the boundary), or in the launch's first step (B - 1) x the block's own, B the
// blocks in flight. A block-local copy without the other blocks' share let B blocks step a hot
// coordinate up to sqrt(B) times too far in the first steps (docs/journal/wide.md); scaling the
// block's own squares by B in every step made a coordinate one sample of a block touches step too
// little (a final loss 0.0047 above the reference at 16 mini-batches in flight, H100). With one block
// (B = 1) the normalisation is the sequential one.
// The bias is cached the same way (BC): PB, the bias (shards summed) as of the step's start, and
// GBW, each warp's bias gradient of the step (a plain add by the warp's lane 0), which the boundary
// adds into the block's shard before reloading PB. A step then reads no bias from L2 (one dependent
// round trip fewer) and a block sends one bias RED a step, not one a warp.
extern __shared__ float4 wsm4[];
#define PH (reinterpret_cast<float*>(wsm4))
#define GH (PH + HC * KP)
#define PB (GH + HC * KP)
// LR (K = 0) with HQ > 0: GH holds int32 in units of 2^-HQ (step_add / step_take). Shared-memory
// float atomics compile to compare-and-swap loops (16 % of the LR step's stall samples, H200); an
// integer atomic is one native instruction, and the integer sum is exact in any order. The host picks
// HQ so that the largest step sum of a coordinate (samples a block step x the largest per-edge
// gradient) stays below 2^30, and only where that leaves a resolution of 2^-30 or finer
// (hot_fixed_exponent); GA's squares likewise in units of 2^-AQ (hot_square_exponent).
#define GHQ ((HQ > 0 && K == 0 && CACHED) ? HQ : 0)   // GH's fixed-point exponent (0: float)
#define GBW (PB + 1)                                  // 32 floats: a block has at most 32 warps
#define HOTACC AHC
#define AH (PB + 36)                                  // HOTACC: the cached rows' accumulators (HC floats)
#define GA (AH + HC)                                  // HOTACC: the block's squares of the step (HC)
#define DA (GA + HC)                                  // HOTACC: the other blocks' squares of the last step (HC)

// A block's step sum in shared memory, float (E = 0) or int32 in units of 2^-E: step_add adds v to
// entry i and returns the sum with v in it; step_take returns the sum and zeroes it (between barriers).
template <int E>
__device__ __forceinline__ float step_add(float* s, int i, float v) {
    if (E == 0) return atomicAdd(s + i, v) + v;
    const int q = __float2int_rn(v * (float)(1ull << E));
    return (float)(atomicAdd(reinterpret_cast<int*>(s) + i, q) + q) * (1.f / (float)(1ull << E));
}

template <int E>
__device__ __forceinline__ float step_take(float* s, int i) {
    const float v = E == 0 ? s[i] : (float)reinterpret_cast<const int*>(s)[i] * (1.f / (float)(1ull << E));
    if (v != 0.f) s[i] = 0.f;                         // (the int 0 alike)
    return v;
}

__device__ __forceinline__ bool cached(int f) { return CACHED && f < HC; }

__device__ __forceinline__ float grp_sum(float a) {             // all-reduce over a sample's WG lanes
#pragma unroll
    for (int o = WG / 2; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

__device__ __forceinline__ float cross_sum(float a) {           // sum over the warp's WS groups
#pragma unroll
    for (int o = WG; o < 32; o <<= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

// chunk of unit u (a load), or -1 past the epoch
__device__ __forceinline__ int unit_chunk(const int* __restrict__ order, int u, int n_units) {
    return u < n_units ? __ldg(order + u / (C / WS)) : -1;
}

// row of unit u (chunk c) for group grp, or -1 (past the epoch or past the last row)
__device__ __forceinline__ int unit_row_of(int c, int u, int n, int grp) {
    if (c < 0) return -1;
    const int r = c * C + (u % (C / WS)) * WS + grp;
    return r < n ? r : -1;
}

__device__ __forceinline__ int unit_row(const int* __restrict__ order, int u, int n_units, int n, int grp) {
    return unit_row_of(unit_chunk(order, u, n_units), u, n, grp);
}

__device__ __forceinline__ void load_edges(int* f, float* x, const int* __restrict__ indices,
                                           const float* __restrict__ data, long long e0, long long e1, int j) {
#pragma unroll
    for (int i = 0; i < WEPL; i++) {
        const long long e = e0 + j + (long long)WG * i;
        const bool ok = e < e1;
        f[i] = ok ? __ldcs(indices + e) : 0;              // streamed once: keep the parameters in L2
        x[i] = ok ? __ldcs(data + e) : 0.f;
    }
}

// destination row of a gradient: the warp's shard for a sharded hot feature, else the row itself
__device__ __forceinline__ float* dst_row(float* T, float* Tsh, int f, int rs) {
#if SHARDED
    if (rs > 0 && f < HSH) return Tsh + ((size_t)(rs - 1) * HSH + f) * KP;
#endif
    return T + (size_t)f * KP;
}

// AdaGrad (OPT = 1): the step of coordinate q of feature f's row for the per-sample gradient gg:
// the global accumulator takes gg^2 by an atomic that returns it (a sharded row: this warp's shard,
// plus the other shards as they are now), cached hot row or not, so the step sees every square any
// block issued to the coordinate before it; returns ascale * gg / sqrt(accumulator)
// (ascale = -adagrad_lr). ada_finish: the part after the atomic (seen: this shard's accumulator
// with gg^2 in it).
__device__ __forceinline__ float ada_finish(const float* A, const float* Ash, int f, int q, int rs, float seen,
                                            float gg, float ascale) {
#if HOTACC
    if (cached(f)) {                                  // + the block's squares so far + the others' estimated
        const float da = DA[f];
        const float a = AH[f] + seen + (da >= 0.f ? da : (float)(gridDim.x - 1) * seen);
        return a > 0.f ? ascale * gg / sqrtf(a) : 0.f;
    }
#endif
#if SHARDED
    if (f < HSH) {
#pragma unroll
        for (int r = 0; r < NSH; r++)
            if (r != rs) seen += __ldcg((r == 0 ? A + (size_t)f * KP : Ash + ((size_t)(r - 1) * HSH + f) * KP) + q);
    }
#endif
    return seen > 0.f ? ascale * gg / sqrtf(seen) : 0.f;
}

// the accumulator's returning atomic: this shard's accumulator of coordinate q with sq in it
__device__ __forceinline__ float ada_add(float* A, float* Ash, int f, int q, int rs, float sq) {
#if HOTACC
    if (cached(f)) return step_add<AQ>(GA, f, sq);    // the block's squares of the step, with sq in them
#endif
    return atomicAdd(dst_row(A, Ash, f, rs) + q, sq) + sq;
}

__device__ __forceinline__ float ada_step(float* A, float* Ash, int f, int q, int rs, float gg, float ascale) {
    return ada_finish(A, Ash, f, q, rs, ada_add(A, Ash, f, q, rs, gg * gg), gg, ascale);
}

// LR: the gradient of one edge (the block's cache for a hot feature, else the row or its shard)
__device__ __forceinline__ void red_w(float* T, float* Tsh, int f, int rs, float g) {
    if (cached(f)) step_add<GHQ>(GH, f, g);
    else atomicAdd(dst_row(T, Tsh, f, rs), g);
}

// Step boundary of the hot-row cache (between two barriers): GH -> the model (this block's shard
// rsb) by coalesced REDs, GH = 0, PH = the model's hot rows (shards summed). A thread's entries are
// loaded HSU at a time, all loads issued before the first is used: one L2 round trip, not one per entry.
#define HSU 4
__device__ __forceinline__ void hot_sync(float* T, float* Tsh, const float* P, const float* Psh, float* tb,
                                         const float* bb, int rsb, float* A, float* Ash) {
#if BC
    // the bias beside the rows: thread 0 adds the warps' step gradients into the block's shard and
    // issues the loads of the bias shards before the rows' loads, and sums them after: their round
    // trip overlaps the rows' (summed before the rows' loads were issued, the boundary took two round
    // trips: LR at the full criteo-s shape 6.43 ms an epoch, not 6.14; H200, 2026-11-26)
    float bs[NSH];
    if (threadIdx.x == 0) {
        float g = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
            g += GBW[w];
            GBW[w] = 0.f;
        }
        if (g != 0.f) atomicAdd(tb + rsb * BST, g);
#pragma unroll
        for (int s = 0; s < NSH; s++) bs[s] = __ldcg(bb + s * BST);
    }
#endif
    for (int i0 = threadIdx.x; i0 < HC * KP; i0 += HSU * blockDim.x) {
        float a[HSU];
#if HOTACC
        float aa[HSU], own[HSU];                      // the accumulators (K = 0: i = f), the block's squares flushed
#endif
#pragma unroll
        for (int u = 0; u < HSU; u++) {
            const int i = i0 + u * blockDim.x;
            if (i < HC * KP) {
                const int f = i / KP;
                const float g = step_take<GHQ>(GH, i);
                if (g != 0.f) atomicAdd(dst_row(T, Tsh, f, rsb) + i % KP, g);
#if HOTACC
                own[u] = step_take<AQ>(GA, i);
                if (own[u] != 0.f) atomicAdd(dst_row(A, Ash, f, rsb), own[u]);
                aa[u] = __ldcg(A + i);
#endif
                a[u] = __ldcg(P + i);
#if SHARDED
                if (f < HSH) {
#pragma unroll
                    for (int r = 0; r < NSH - 1; r++) {
                        a[u] += __ldcg(Psh + (size_t)r * HSH * KP + i);
#if HOTACC
                        aa[u] += __ldcg(Ash + (size_t)r * HSH * KP + i);
#endif
                    }
                }
#endif
            }
        }
#pragma unroll
        for (int u = 0; u < HSU; u++) {
            const int i = i0 + u * (int)blockDim.x;     // signed: no unsigned compare with HC = 0
            if (i < HC * KP) {
                PH[i] = a[u];
#if HOTACC
                // the squares the other blocks added since this block's last reload (one step's);
                // -1 at the launch's first boundary (none yet)
                const float old = AH[i];
                DA[i] = old >= 0.f ? fmaxf(aa[u] - old - own[u], 0.f) : -1.f;
                AH[i] = aa[u];
#endif
            }
        }
    }
#if BC
    if (threadIdx.x == 0) {
        float b = 0.f;
#pragma unroll
        for (int s = 0; s < NSH; s++) b += bs[s];
        PB[0] = b;
    }
#endif
}

#if K == 0
__device__ __forceinline__ float read_w(const float* P, const float* Psh, int f) {
    if (cached(f)) return PH[f];
    float a = __ldcg(P + f);
#if SHARDED
    if (f < HSH) {
#pragma unroll
        for (int r = 0; r < NSH - 1; r++) a += __ldcg(Psh + (size_t)r * HSH + f);
    }
#endif
    return a;
}
#else
__device__ __forceinline__ void read_row(float* p, const float* P, const float* Psh, int f) {
    if (cached(f)) {
        const float4* c = reinterpret_cast<const float4*>(PH + f * KP);
#pragma unroll
        for (int t = 0; t < KP / 4; t++) {
            const float4 q = c[t];
            p[4 * t] = q.x; p[4 * t + 1] = q.y; p[4 * t + 2] = q.z; p[4 * t + 3] = q.w;
        }
        return;
    }
    const float4* a = reinterpret_cast<const float4*>(P + (size_t)f * KP);
#pragma unroll
    for (int t = 0; t < KP / 4; t++) {
        const float4 q = __ldcg(a + t);
        p[4 * t] = q.x; p[4 * t + 1] = q.y; p[4 * t + 2] = q.z; p[4 * t + 3] = q.w;
    }
#if SHARDED
    if (f < HSH) {
#pragma unroll
        for (int r = 0; r < NSH - 1; r++) {
            const float4* b = reinterpret_cast<const float4*>(Psh + ((size_t)r * HSH + f) * KP);
#pragma unroll
            for (int t = 0; t < KP / 4; t++) {
                const float4 q = __ldcg(b + t);
                p[4 * t] += q.x; p[4 * t + 1] += q.y; p[4 * t + 2] += q.z; p[4 * t + 3] += q.w;
            }
        }
    }
#endif
}

__device__ __forceinline__ void accumulate(const float* p, float x, float& lin, float* a2, float& a3) {
    lin += p[0] * x;
#pragma unroll
    for (int q = 0; q < K; q++) {
        const float t = p[1 + q] * x;
        a2[q] += t;
        a3 += t * t;
    }
}

// FM: row of feature f (or its shard rs) += g * (x, x a2_q - v_q x^2): KP / 4 vector REDs (sm_90),
// scalar atomics before Hopper; f < HC: scalar shared-memory atomics into the block's GH row instead
// (AdaGrad: g is the sample's delta, and each component becomes its ada_step)
__device__ __forceinline__ void red_row(float* T, float* Tsh, int f, int rs, const float* p, float x, float g,
                                        const float* a2, float* A, float* Ash, float ascale) {
    float gr[KP];
    gr[0] = g * x;
#pragma unroll
    for (int q = 0; q < K; q++) gr[1 + q] = g * (x * a2[q] - p[1 + q] * x * x);
#pragma unroll
    for (int q = 1 + K; q < KP; q++) gr[q] = 0.f;
#if OPT
#pragma unroll
    for (int q = 0; q < 1 + K; q++) gr[q] = ada_step(A, Ash, f, q, rs, gr[q], ascale);
#endif
    if (cached(f)) {
#pragma unroll
        for (int q = 0; q < 1 + K; q++) atomicAdd(GH + f * KP + q, gr[q]);
        return;
    }
    float* dst = dst_row(T, Tsh, f, rs);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
    for (int t = 0; t < KP / 4; t++)
        atomicAdd(reinterpret_cast<float4*>(dst) + t, make_float4(gr[4 * t], gr[4 * t + 1], gr[4 * t + 2], gr[4 * t + 3]));
#else
#pragma unroll
    for (int q = 0; q < 1 + K; q++) atomicAdd(dst + q, gr[q]);
#endif
}
#endif

// The parameter row of an in-register edge: LR a float, FM KP floats.
#if K == 0
typedef float ROW;
#else
typedef float ROW[KP];
#endif

// Rows of the lane's in-register edges: hot = false: the uncached ones from L2 (issued before the
// block's step boundary, so their round trip overlaps the hot-row reload); hot = true: the cached
// ones from the refreshed shared-memory rows (after it). Rows of padding edges are zero.
__device__ __forceinline__ void gather_rows(ROW* p, const int* cf, const float* cx, const float* P, const float* Psh,
                                            bool hot) {
#pragma unroll
    for (int i = 0; i < WEPL; i++) {
        const bool take = cx[i] != 0.f && cached(cf[i]) == hot;
#if K == 0
        if (take) p[i] = read_w(P, Psh, cf[i]);
        else if (!hot) p[i] = 0.f;
#else
        if (take) read_row(p[i], P, Psh, cf[i]);
        else if (!hot) {
#pragma unroll
            for (int q = 0; q < KP; q++) p[i][q] = 0.f;
        }
#endif
    }
}

// Apply of one step: gradient g * (x, x a2_q - v_q x^2) of each edge of the lane's sample, as REDs.
// SGD: g = scale * delta; AdaGrad: g = delta (per-sample gradients, each coordinate's ada_step, one
// returning accumulator atomic per lane and edge). Only the lanes whose sample has a gradient call
// it, each looping over its own edges.
__device__ __forceinline__ void warp_apply(const int* cf, const float* cx, long long c1, long long tail, int rs,
                                           const int* __restrict__ indices, const float* __restrict__ data,
                                           const float* P, const float* Psh, float* T, float* Tsh, float g,
                                           float* A, float* Ash, float ascale
#if K > 0
                                           , const float (*p)[KP], const float* a2
#endif
                                           ) {
#if K == 0
#pragma unroll
    for (int i = 0; i < WEPL; i++)
        if (cx[i] != 0.f) red_w(T, Tsh, cf[i], rs, OPT ? ada_step(A, Ash, cf[i], 0, rs, g * cx[i], ascale) : g * cx[i]);
    for (long long e = tail; e < c1; e += WG) {
        const float x = __ldcs(data + e);
        if (x != 0.f) {
            const int f = __ldcs(indices + e);
            red_w(T, Tsh, f, rs, OPT ? ada_step(A, Ash, f, 0, rs, g * x, ascale) : g * x);
        }
    }
#else
#pragma unroll
    for (int i = 0; i < WEPL; i++)
        if (cx[i] != 0.f) red_row(T, Tsh, cf[i], rs, p[i], cx[i], g, a2, A, Ash, ascale);
    for (long long e = tail; e < c1; e += WG) {
        const int f = __ldcs(indices + e);
        const float x = __ldcs(data + e);
        if (x != 0.f) {
            float pt[KP];
            read_row(pt, P, Psh, f);
            red_row(T, Tsh, f, rs, pt, x, g, a2, A, Ash, ascale);
        }
    }
#endif
}

// One training step of the warp: unit with rows r (per group; -1: none), label yy, row edges
// [c0, c1) of which WEPL per lane are in registers (cf, cx).
__device__ __forceinline__ void warp_step(const int* cf, const float* cx, const ROW* p, long long c0, long long c1,
                                          int r, float yy, int j, int lane, int rs, const int* __restrict__ indices,
                                          const float* __restrict__ data, const float* P, const float* Psh,
                                          const float* bb, float* T, float* Tsh, float* tb, float scale,
                                          float* A, float* Ash, float ascale, double& lsum) {
    const long long tail = c0 + (long long)WG * WEPL + j;
#if K == 0
    const float* pv = p;
    float lin = 0.f;
    for (long long e = tail; e < c1; e += WG) lin += read_w(P, Psh, __ldcs(indices + e)) * __ldcs(data + e);
#if BC
    if (j == 0) lin += PB[0];                             // the block's cached bias
#else
    for (int s = j; s < NSH; s += WG) lin += __ldcg(bb + s * BST);
#endif
#pragma unroll
    for (int i = 0; i < WEPL; i++) lin += pv[i] * cx[i];
    const float z = grp_sum(lin);
#else
    float lin = 0.f, a3 = 0.f, a2[K];
#pragma unroll
    for (int q = 0; q < K; q++) a2[q] = 0.f;
    for (long long e = tail; e < c1; e += WG) {
        float pt[KP];
        read_row(pt, P, Psh, __ldcs(indices + e));
        accumulate(pt, __ldcs(data + e), lin, a2, a3);
    }
#if BC
    if (j == 0) lin += PB[0];                             // the block's cached bias
#else
    for (int s = j; s < NSH; s += WG) lin += __ldcg(bb + s * BST);
#endif
#pragma unroll
    for (int i = 0; i < WEPL; i++) accumulate(p[i], cx[i], lin, a2, a3);
    float z = grp_sum(lin);
    float sq = 0.f;
#pragma unroll
    for (int q = 0; q < K; q++) {
        a2[q] = grp_sum(a2[q]);
        sq += a2[q] * a2[q];
    }
    z += 0.5f * (sq - grp_sum(a3));
#endif
    const float d = r >= 0 ? __fdividef(1.f, 1.f + __expf(-z)) - yy : 0.f;
    const float g = scale * d;                             // the same in all lanes of the group
    const float gsum = cross_sum(g);
#if BC
    if (lane == 0 && gsum != 0.f) GBW[threadIdx.x >> 5] += gsum;   // the warp's own slot
#else
    if (lane == 0 && gsum != 0.f) atomicAdd(tb + rs * BST, gsum);
#endif
    if (g != 0.f)
        warp_apply(cf, cx, c1, tail, rs, indices, data, P, Psh, T, Tsh, OPT ? d : g, A, Ash, ascale
#if K > 0
                             , p, a2
#endif
                             );
    if (j == 0 && r >= 0) lsum += (double)logloss(z, yy);   // off the critical path, after the updates
}

// Trains the units of the chunks order[0..n_order) with nw warps (warps past nw return at once, or,
// with the hot-row cache, idle through the block's steps). Dynamic shared memory: 2 HC KP floats (+ 36 with BC, + 3 HC with HOTACC).
// update=chunk: T/Tsh/tb alias P/Psh/bb (asynchronous, shard_writes = 1); update=batch: T is a
// gradient buffer (shard_writes = 0: every gradient to T and tb[0]) committed by warp_commit.
extern "C" __global__ void flow_warp(const int* __restrict__ order, int n_order,
                                     const long long* __restrict__ indptr, const int* __restrict__ indices,
                                     const float* __restrict__ data, const float* __restrict__ y, int n, int nw,
                                     const float* P, const float* Psh, const float* bb,
                                     float* T, float* Tsh, float* tb, int shard_writes, float scale,
                                     double* loss_sum, float* A, float* Ash, float ascale) {
    const int gw = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    if (!CACHED && gw >= nw) return;                       // whole warps (cached: they take part in barriers)
    const int lane = threadIdx.x & 31;
    const int grp = lane / WG, j = lane % WG;
    const int n_units = n_order * (C / WS);
    const int rs = shard_writes ? gw % NSH : 0;
    // steps: every warp of a block the same number when the block shares a hot-row cache
    const int steps = CACHED ? (n_units + nw - 1) / nw : (n_units - gw + nw - 1) / nw;
#if CACHED
    for (int i = threadIdx.x; i < HC * KP; i += blockDim.x) GH[i] = 0.f;
#if HOTACC
    for (int i = threadIdx.x; i < HC; i += blockDim.x) {
        GA[i] = 0.f;
        AH[i] = -1.f;                                     // no reload yet (see hot_sync)
    }
#endif
    if (BC && threadIdx.x < 32) GBW[threadIdx.x] = 0.f;
    const int rsb = shard_writes ? (int)(blockIdx.x % NSH) : 0;
#endif
    // software pipeline over this warp's units u, u + nw, u + 2 nw, ...: at step t the edges and
    // labels of unit t + WPF are loaded (their row pointers arrived a step earlier), the row pointers
    // of unit t + WPF + 1 (its row arrived a step earlier) and the row of unit t + WPF + 2; slot 0
    // of each window is the current unit. All indices are compile-time after unrolling: registers.
    int rw[WPF + 3];                       // rows of units t .. t + WPF + 2 (slots 0 .. WPF + 1 valid)
    long long p0[WPF + 2], p1[WPF + 2];    // row pointers of units t .. t + WPF + 1 (0 .. WPF valid)
    int ef[WPF + 1][WEPL];                 // edges and labels of units t .. t + WPF (0 .. WPF - 1 valid)
    float ex[WPF + 1][WEPL], ey[WPF + 1];
    int u = gw < nw ? gw : n_units;                        // a warp past nw has no units
#pragma unroll
    for (int a = 0; a < WPF + 2; a++) rw[a] = unit_row(order, u + a * nw, n_units, n, grp);
#pragma unroll
    for (int a = 0; a < WPF + 1; a++) {
        p0[a] = rw[a] >= 0 ? __ldg(indptr + rw[a]) : 0;
        p1[a] = rw[a] >= 0 ? __ldg(indptr + rw[a] + 1) : 0;
    }
#pragma unroll
    for (int a = 0; a < WPF; a++) {
        load_edges(ef[a], ex[a], indices, data, p0[a], p1[a], j);
        ey[a] = rw[a] >= 0 ? __ldg(y + rw[a]) : 0.f;
    }
    double lsum = 0.0;
    for (int t = 0; t < steps; t++, u += nw) {
        // the data of the units ahead (edges and label of unit t + WPF, row pointers of t + WPF + 1,
        // row of t + WPF + 2), issued first: in flight during the step boundary. Issued after the
        // hot-row gather, the LR step at the full criteo-s shape took 3.01 us, not 2.82 (H100,
        // 2026-11-26): the gather's shared-memory loads stalled (long scoreboard) right behind them.
        load_edges(ef[WPF], ex[WPF], indices, data, p0[WPF], p1[WPF], j);
        ey[WPF] = rw[WPF] >= 0 ? __ldg(y + rw[WPF]) : 0.f;
        p0[WPF + 1] = rw[WPF + 1] >= 0 ? __ldg(indptr + rw[WPF + 1]) : 0;
        p1[WPF + 1] = rw[WPF + 1] >= 0 ? __ldg(indptr + rw[WPF + 1] + 1) : 0;
        // the chunk of unit t + WPF + 2; its row is computed after the step: computed here, the warp
        // waited for the load before the step boundary's barrier (16 % of the LR step's stall
        // samples, H100, full criteo-s shape at scale 0.2)
        const int c_ahead = unit_chunk(order, u + (WPF + 2) * nw, n_units);
        ROW p[WEPL];
        gather_rows(p, ef[0], ex[0], P, Psh, false);      // cold rows: in flight during the boundary
#if CACHED
        __syncthreads();                                   // the block's previous step is done
        hot_sync(T, Tsh, P, Psh, tb, bb, rsb, A, Ash);
        __syncthreads();
        gather_rows(p, ef[0], ex[0], P, Psh, true);       // hot rows as of this step's start
#endif
        warp_step(ef[0], ex[0], p, p0[0], p1[0], rw[0], ey[0], j, lane, rs, indices, data, P, Psh, bb, T, Tsh,
                  tb, scale, A, Ash, ascale, lsum);
        rw[WPF + 2] = unit_row_of(c_ahead, u + (WPF + 2) * nw, n, grp);
        __syncwarp();       // the next step's reads follow this step's updates of every lane of the warp
#pragma unroll
        for (int a = 0; a < WPF + 2; a++) rw[a] = rw[a + 1];
#pragma unroll
        for (int a = 0; a < WPF + 1; a++) { p0[a] = p0[a + 1]; p1[a] = p1[a + 1]; }
#pragma unroll
        for (int a = 0; a < WPF; a++) {
            ey[a] = ey[a + 1];
#pragma unroll
            for (int i = 0; i < WEPL; i++) { ef[a][i] = ef[a + 1][i]; ex[a][i] = ex[a + 1][i]; }
        }
    }
#if CACHED
    __syncthreads();
    hot_sync(T, Tsh, P, Psh, tb, bb, rsb, A, Ash);                         // the last step's hot gradients
#endif
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    if (lane == 0 && lsum != 0.0) atomicAdd(loss_sum, lsum);
}

// update=batch with the warp design: P += Gr over the packed rows of the features the batch's rows
// touch (each entry taken once by atomicExch), bias shard 0 += gb[0]; buffers reset.
extern "C" __global__ void warp_commit(const int* __restrict__ order, int n_order, int n,
                                       const long long* __restrict__ indptr, const int* __restrict__ indices,
                                       float* P, float* bb, float* Gr, float* gb) {
    for (int it = blockIdx.x; it < n_order; it += gridDim.x) {
        const int r0 = order[it] * C;
        const int r1 = min(r0 + C, n);
        for (long long e = indptr[r0] + threadIdx.x; e < indptr[r1]; e += blockDim.x) {
            const size_t f = (size_t)indices[e] * KP;
            for (int q = 0; q < (K > 0 ? 1 + K : 1); q++) {
                const float g = atomicExch(&Gr[f + q], 0.f);
                if (g != 0.f) P[f + q] += g;
            }
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        bb[0] += gb[0];
        gb[0] = 0.f;
    }
}
