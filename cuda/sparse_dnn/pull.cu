// Image-tiled pull kernels (variant `pull`), HPEC Sparse DNN Challenge semantics:
//   Y_out = min(ymax, max(0, Z + bias * [Z != 0])),  Z = Y_in W
// The batch is held transposed and compacted: Yt is (N, ld) float, column c of it is the c-th live
// image of the batch (ids[c] = its batch-relative id), state[0] = the live count B. A warp computes
// one output neuron j for 128 live images at once (32 lanes x float4): it pulls j's in-edges from
// the CSC layer [colptr (N+1) | rowidx (cap) | val (cap)] and, for each edge i, reads the 512 bytes
// Yt[i][c0 .. c0+127] (coalesced). Every weight entry is thus read once per 128 images, and the
// dense saturated survivors of deep layers cost plain coalesced loads and FMAs: no atomics.
// Deterministic: every output is one lane's float32 FMA chain over j's in-edges in CSC order,
// the same on every pass and every run whatever the grid or the live count.
// After each layer pull_compact drops the images whose output row is all zero (a one-block scan),
// and pull_gather moves the surviving columns left in place (only when some image died), so the
// next layer's work is proportional to the live images. Grids are persistent (grid-stride over
// work items) and read B from device memory, so the whole pass is graph-capturable.

#include "live.cuh"

#define PULL_TILE 128   // images per warp work item: 32 lanes x 4

// ld: row stride of Yt, a multiple of PULL_TILE. jpw: output neurons per warp per work item.
// alive[c] is set to 1 for every live column c < B with a nonzero output (it is 0 on entry).
extern "C" __global__ void __launch_bounds__(256) pull_infer(
    const float* __restrict__ Yin, float* __restrict__ Yout, const int* __restrict__ W,
    const int* __restrict__ state, int* __restrict__ alive, int N, int cap, int ld, int jpw,
    float bias, float ymax)
{
    const int B = state[0];
    const int* colptr = W;
    const int* rowidx = W + N + 1;
    const float* val = reinterpret_cast<const float*>(rowidx + cap);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    const int tiles = (B + PULL_TILE - 1) / PULL_TILE;
    const int span = wpb * jpw;                                   // output neurons of one block item
    const int groups = (N + span - 1) / span;
    const long long items = (long long)tiles * groups;
    // neuron groups vary fastest: the blocks running at once share one image tile (its Yt slice,
    // N x 512 bytes, is what L2 has to hold)
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        const int tile = (int)(it / groups), g = (int)(it % groups);
        const int c0 = tile * PULL_TILE + lane * 4;
        const float* ycol = Yin + c0;
        unsigned nz = 0;                                          // bit q: image c0 + q nonzero somewhere
        const int j0 = g * span + warp * jpw;
        for (int jj = 0; jj < jpw; ++jj) {
            const int j = j0 + jj;
            if (j >= N) break;                                    // uniform within the warp
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            const int b = colptr[j], e = colptr[j + 1];
            for (int k0 = b; k0 < e; k0 += 32) {
                const int n = min(32, e - k0);
                int mi = 0;
                float mw = 0.f;
                if (lane < n) { mi = rowidx[k0 + lane]; mw = val[k0 + lane]; }
                int t = 0;
                for (; t + 8 <= n; t += 8) {                      // 8 independent 512-byte loads in flight
                    float4 y[8];
                    float w[8];
#pragma unroll
                    for (int u = 0; u < 8; ++u) {
                        const int i = __shfl_sync(0xffffffffu, mi, t + u);
                        w[u] = __shfl_sync(0xffffffffu, mw, t + u);
                        y[u] = *reinterpret_cast<const float4*>(ycol + (size_t)i * ld);
                    }
#pragma unroll
                    for (int u = 0; u < 8; ++u) {
                        acc.x = fmaf(y[u].x, w[u], acc.x);
                        acc.y = fmaf(y[u].y, w[u], acc.y);
                        acc.z = fmaf(y[u].z, w[u], acc.z);
                        acc.w = fmaf(y[u].w, w[u], acc.w);
                    }
                }
                for (; t < n; ++t) {
                    const int i = __shfl_sync(0xffffffffu, mi, t);
                    const float w = __shfl_sync(0xffffffffu, mw, t);
                    const float4 y = *reinterpret_cast<const float4*>(ycol + (size_t)i * ld);
                    acc.x = fmaf(y.x, w, acc.x);
                    acc.y = fmaf(y.y, w, acc.y);
                    acc.z = fmaf(y.z, w, acc.z);
                    acc.w = fmaf(y.w, w, acc.w);
                }
            }
            nz |= live_store4(Yout + (size_t)j * ld + c0, acc, bias, ymax);
        }
        live_mark4(alive, c0, B, nz);                             // once for the warp's outputs
    }
}

// One block (blockDim.x a multiple of 32, <= 1024): keep the columns c < B with alive[c], in order.
// ids is compacted in place, src[c'] = the old column of new column c', alive is cleared for the
// next layer; state[0] = new B, state[1] = whether any column was dropped; hist[layer] += new B
// (nonzero images after the layer, summed over the batches of a pass) when hist is not null.
extern "C" __global__ void pull_compact(int* __restrict__ state, int* __restrict__ alive, int* __restrict__ ids,
                                        int* __restrict__ src, int* __restrict__ hist, int layer)
{
    __shared__ int wsum[32];
    __shared__ int base;
    const int B = state[0];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    if (tid == 0) base = 0;
    __syncthreads();
    for (int c0 = 0; c0 < B; c0 += blockDim.x) {
        const int c = c0 + tid;
        const int keep = (c < B) ? (alive[c] != 0) : 0;
        const int id = (c < B) ? ids[c] : 0;
        if (c < B) alive[c] = 0;
        int x = keep;                                             // inclusive warp scan
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        if (lane == 31) wsum[warp] = x;
        __syncthreads();
        if (warp == 0) {
            int s = (lane < nw) ? wsum[lane] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s += y;
            }
            if (lane < nw) wsum[lane] = s;                        // inclusive over warps
        }
        __syncthreads();                                          // every read of this chunk is done
        const int pos = base + (warp ? wsum[warp - 1] : 0) + x - keep;
        if (keep) { ids[pos] = id; src[pos] = c; }                // pos <= c: never a slot still to read
        const int total = wsum[nw - 1];
        __syncthreads();
        if (tid == 0) base += total;
        __syncthreads();
    }
    if (tid == 0) {
        state[1] = (base != B);
        state[0] = base;
        if (hist) hist[layer] += base;
    }
}

// In-place column compaction of Yt (N rows of stride ld) after pull_compact: row[c] = row[src[c]]
// for c < B. src[c] >= c, and a block reads a whole chunk before writing it, so no value is
// overwritten before it is read. Does nothing when no column was dropped (state[1] == 0).
extern "C" __global__ void pull_gather(float* __restrict__ Y, const int* __restrict__ state,
                                       const int* __restrict__ src, int N, int ld)
{
    if (!state[1]) return;
    const int B = state[0];
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        float* row = Y + (size_t)i * ld;
        for (int c0 = 0; c0 < B; c0 += blockDim.x) {
            const int c = c0 + threadIdx.x;
            const float v = (c < B) ? row[src[c]] : 0.f;
            __syncthreads();
            if (c < B) row[c] = v;
            __syncthreads();
        }
    }
}

// Staging: scatter CSR image rows [r0, r0 + rows) into the zeroed Yt (column r = image r0 + r),
// ids[r] = r, alive[r] = 1 for images with a nonzero input, state[0] = rows. One block per image.
extern "C" __global__ void pull_stage(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                      const float* __restrict__ data, long long r0, int rows, int ld,
                                      float* __restrict__ Y, int* __restrict__ alive, int* __restrict__ ids,
                                      int* __restrict__ state)
{
    const int r = blockIdx.x;
    const long long b = indptr[r0 + r], e = indptr[r0 + r + 1];
    for (long long k = b + threadIdx.x; k < e; k += blockDim.x) {
        const float v = data[k];
        Y[(size_t)indices[k] * ld + r] = v;
        if (v != 0.0f) alive[r] = 1;
    }
    if (threadIdx.x == 0) {
        ids[r] = r;
        if (r == 0) state[0] = rows;
    }
}

// out[r0 + ids[c]] = 1 for the live columns c < state[0] (the batch's categories).
extern "C" __global__ void pull_collect(const int* __restrict__ state, const int* __restrict__ ids,
                                        unsigned char* __restrict__ out, long long r0)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < state[0]) out[r0 + ids[c]] = 1;
}
