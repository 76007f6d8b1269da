// Cluster kernel (variant `cluster`), HPEC Sparse DNN Challenge semantics:
//   Y_out = min(ymax, max(0, Z + bias * [Z != 0])),  Z = Y_in W
// Same batch layout as `pull` (pull.cu): Yt is (N, ld) float, column c = the c-th live image,
// state[0] = the live count B; staging, compaction, gather and collection are pull.cu's kernels.
//
// What differs is how a layer is read. The host groups the output neurons that have the SAME
// in-neighbour list (a RadiX-Net layer has N/16 such sets, each shared by 16 outputs) into
// clusters of at most CL_G outputs; a cluster stores its shared input list U (sorted, as in CSC)
// and a dense |U| x CL_G block of weights (zero for padding columns). A warp computes a whole
// cluster for 128 images: for each u of U it loads the 512 bytes Yt[u][c0 .. c0+127] once (32 lanes
// x float4) and applies them to all the cluster's outputs (4 x CL_G FMAs a lane), so the L2 -> SM
// traffic is 1/CL_G of pull's (which reads Yt[u] once per output). Each output is still one lane's
// float32 FMA chain over its in-edges in CSC order, so the results are bit-identical to pull's:
// deterministic, no atomics.
//
// Layer layout (int32 words; 16-byte aligned): wval (utot x CL_G floats, row k = the weights of
// entry k of the input lists) | uidx (utot) | uptr (ncl + 1) | gidx (ncl x CL_G, -1 = no output).

#include "live.cuh"

#define CL_G 16
#define CL_TILE 128     // images per warp work item: 32 lanes x 4
#define CL_UNROLL 4     // independent 512-byte loads in flight per warp (8 would spill at 128 registers)

__device__ __forceinline__ void cl_fma4(float4& a, const float4& y, float w)
{
    a.x = fmaf(y.x, w, a.x);
    a.y = fmaf(y.y, w, a.y);
    a.z = fmaf(y.z, w, a.z);
    a.w = fmaf(y.w, w, a.w);
}

// acc[j] += y * wrow[j] for the CL_G outputs (wrow: the CL_G weights of one input entry).
__device__ __forceinline__ void cl_apply(float4 (&acc)[CL_G], const float4& y, const float4* __restrict__ wrow)
{
#pragma unroll
    for (int q = 0; q < CL_G / 4; ++q) {
        const float4 w = __ldg(wrow + q);               // the same address in every lane: one transaction
        cl_fma4(acc[4 * q + 0], y, w.x);
        cl_fma4(acc[4 * q + 1], y, w.y);
        cl_fma4(acc[4 * q + 2], y, w.z);
        cl_fma4(acc[4 * q + 3], y, w.w);
    }
}

// Persistent grid of warps over work items (image tile, cluster), clusters varying fastest (the
// warps running at once share one image tile, N x 512 bytes, which the L2 holds).
// alive[c] is set to 1 for every live column c < B with a nonzero output (it is 0 on entry).
extern "C" __global__ void __launch_bounds__(256, 2) cluster_infer(
    const float* __restrict__ Yin, float* __restrict__ Yout, const int* __restrict__ W,
    const int* __restrict__ state, int* __restrict__ alive, int ncl, int utot, int ld,
    float bias, float ymax)
{
    const int B = state[0];
    const float4* wval = reinterpret_cast<const float4*>(W);            // CL_G / 4 float4 per entry
    const int* uidx = W + (size_t)CL_G * utot;
    const int* uptr = uidx + utot;
    const int* gidx = uptr + ncl + 1;
    const int lane = threadIdx.x & 31;
    const int wpb = blockDim.x >> 5;
    const long long nwarps = (long long)gridDim.x * wpb;
    const int tiles = (B + CL_TILE - 1) / CL_TILE;
    const long long items = (long long)tiles * ncl;
    for (long long it = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); it < items; it += nwarps) {
        const int tile = (int)(it / ncl), c = (int)(it % ncl);
        const int c0 = tile * CL_TILE + lane * 4;
        const float* ycol = Yin + c0;
        float4 acc[CL_G];
#pragma unroll
        for (int j = 0; j < CL_G; ++j) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        const int b = uptr[c], e = uptr[c + 1];
#pragma unroll 1
        for (int k0 = b; k0 < e; k0 += 32) {
            const int n = min(32, e - k0);
            const int mi = (lane < n) ? uidx[k0 + lane] : 0;
            const float4* wrow = wval + (size_t)k0 * (CL_G / 4);
            int t = 0;
            for (; t + CL_UNROLL <= n; t += CL_UNROLL) {
                float4 y[CL_UNROLL];
#pragma unroll
                for (int u = 0; u < CL_UNROLL; ++u) {
                    const int i = __shfl_sync(0xffffffffu, mi, t + u);
                    y[u] = *reinterpret_cast<const float4*>(ycol + (size_t)i * ld);
                }
#pragma unroll
                for (int u = 0; u < CL_UNROLL; ++u)
                    cl_apply(acc, y[u], wrow + (size_t)(t + u) * (CL_G / 4));
            }
#pragma unroll 1
            for (; t < n; ++t) {
                const int i = __shfl_sync(0xffffffffu, mi, t);
                const float4 y = *reinterpret_cast<const float4*>(ycol + (size_t)i * ld);
                cl_apply(acc, y, wrow + (size_t)t * (CL_G / 4));
            }
        }
        unsigned nz = 0;                                  // bit q: image c0 + q nonzero somewhere
        const int* g = gidx + (size_t)c * CL_G;
#pragma unroll
        for (int j = 0; j < CL_G; ++j) {
            const int o = g[j];                           // uniform within the warp
            if (o < 0) continue;
            nz |= live_store4(Yout + (size_t)o * ld + c0, acc[j], bias, ymax);
        }
        live_mark4(alive, c0, B, nz);                     // once for the cluster's outputs
    }
}
