// Throughput probes for the wide models' edge work (scripts/wide_probe.py): what one pass over the
// training edges costs when it only streams them, gathers a parameter per edge, adds one atomic per
// edge, or first sums the gradients of equal consecutive features inside a warp (feature-major tiles)
// and adds one atomic per run. No training: each kernel is the ceiling of one part of an epoch.
// Grid-stride over edges; E is a multiple of 4 where int4/float4 loads are used.

extern "C" __global__ void p_stream(const int* __restrict__ f, const float* __restrict__ x, long long E,
                                    float* out) {
    float a = 0.f;
    const long long n4 = E / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const int4 q = __ldcs(reinterpret_cast<const int4*>(f) + i);
        const float4 v = __ldcs(reinterpret_cast<const float4*>(x) + i);
        a += (float)(q.x ^ q.y ^ q.z ^ q.w) * (v.x + v.y + v.z + v.w);
    }
    if (a == 12345.f) out[0] = a;                  // keeps the loads alive, never true in practice
}

extern "C" __global__ void p_gather(const int* __restrict__ f, const float* __restrict__ x, long long E,
                                    const float* w, float* out) {
    float a = 0.f;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < E; e += (long long)gridDim.x * blockDim.x)
        a += __ldcg(w + __ldcs(f + e)) * __ldcs(x + e);
    if (a == 12345.f) out[0] = a;
}

// one RED per edge; HOT > 0: features < HOT add into shard (warp id % NSH) of HOT x NSH copies
extern "C" __global__ void p_red(const int* __restrict__ f, const float* __restrict__ x, long long E,
                                 float* w, float* wsh, int hot, int nsh) {
    const int shard = (int)(((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5) % nsh);
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < E; e += (long long)gridDim.x * blockDim.x) {
        const int c = __ldcs(f + e);
        float* dst = c < hot ? wsh + (size_t)shard * hot + c : w + c;
        atomicAdd(dst, __ldcs(x + e));
    }
}

extern "C" __global__ void p_gather_red(const int* __restrict__ f, const float* __restrict__ x, long long E,
                                        float* w, float* wsh, int hot, int nsh) {
    const int shard = (int)(((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5) % nsh);
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < E; e += (long long)gridDim.x * blockDim.x) {
        const int c = __ldcs(f + e);
        const float g = __ldcg(w + c) * __ldcs(x + e) + 1e-30f;
        float* dst = c < hot ? wsh + (size_t)shard * hot + c : w + c;
        atomicAdd(dst, g);
    }
}

// feature-major tiles: a warp's 32 consecutive edges are summed per run of equal feature ids
// (segmented shuffle scan), the last lane of each run adds the run's sum; GATHER: also a parameter
// gather per run (broadcast to the run's lanes), as a fused forward + backward would.
template <bool GATHER>
__device__ __forceinline__ void seg_red(const int* __restrict__ f, const float* __restrict__ x, long long E, float* w) {
    const int lane = threadIdx.x & 31;
    const long long nw = (long long)gridDim.x * blockDim.x / 32;
    for (long long b = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32 * 32; b < E; b += nw * 32) {
        const long long e = b + lane;
        const int c = e < E ? __ldcs(f + e) : -1;
        float g = e < E ? __ldcs(x + e) : 0.f;
        const int prev = __shfl_up_sync(0xffffffffu, c, 1);
        const unsigned heads = __ballot_sync(0xffffffffu, lane == 0 || prev != c);
        const int head = 31 - __clz(heads & (0xffffffffu >> (31 - lane)));   // first lane of my run
        if (GATHER) {
            float p = 0.f;
            if (lane == head && c >= 0) p = __ldcg(w + c);
            p = __shfl_sync(0xffffffffu, p, head);
            g = g * p + 1e-30f;
        }
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float t = __shfl_up_sync(0xffffffffu, g, o);
            if (lane - o >= head) g += t;
        }
        const int next = __shfl_down_sync(0xffffffffu, c, 1);
        if (c >= 0 && (lane == 31 || next != c)) atomicAdd(w + c, g);
    }
}

extern "C" __global__ void p_seg_red(const int* __restrict__ f, const float* __restrict__ x, long long E, float* w) {
    seg_red<false>(f, x, E, w);
}

extern "C" __global__ void p_seg_gather_red(const int* __restrict__ f, const float* __restrict__ x, long long E,
                                            float* w) {
    seg_red<true>(f, x, E, w);
}

// latency of dependent L2 loads: one thread follows nxt[] (a random cycle) for `steps` hops
extern "C" __global__ void p_chase(const int* nxt, int steps, int* out) {
    int i = 0;
    for (int s = 0; s < steps; s++) i = __ldcg(nxt + i);
    out[0] = i;
}

// Dependency chain of bounded-staleness SGD: one block per SM (all co-resident) runs `steps` steps;
// a step reads the H cached hot parameters (the sum of their nsh shards) from L2, adds its gradient
// into its shard (block id % nsh; coalesced REDs), publishes (a barrier, then one release-add to an
// arrival counter by thread 0, cumulative over the block's writes) and waits (acquire loads) until
// every block has published step s - lag (lag 0: a grid barrier per step; lag 1: a step may overlap
// the previous exchange). No edges: this is the least a step costs when the next window of samples
// must see this window's updates. H = 0: the grid barrier alone. `counter` (2 words) must be zero at
// launch; a block that waits more than GIVE_UP cycles for the others (they are not all resident, as
// under compute-sanitizer's racecheck) sets counter[1], and from then on no block waits: the launch
// ends, and the host reads counter[1] as "not measured".
#define GIVE_UP (1ll << 28)                            // cycles, about 0.15 s (a step takes about 1 us)
extern "C" __global__ void p_chain(int steps, int lag, float* hot, int H, int nsh, unsigned int* counter) {
    float a = 0.f;
    float* mine = hot + (size_t)(blockIdx.x % nsh) * H;
    for (int s = 0; s < steps; s++) {
        for (int i = threadIdx.x; i < H; i += blockDim.x)
            for (int r = 0; r < nsh; r++) a += __ldcg(hot + (size_t)r * H + i);
        __syncthreads();
        for (int i = threadIdx.x; i < H; i += blockDim.x) atomicAdd(mine + i, 1e-30f * a);
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
            if (s + 1 - lag > 0) {
                const unsigned int need = (unsigned int)(s + 1 - lag) * gridDim.x;
                const long long t0 = clock64();
                while (true) {
                    unsigned int seen;
                    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
                    if (seen >= need || *(volatile unsigned int*)(counter + 1)) break;
                    if (clock64() - t0 > GIVE_UP) {
                        atomicExch(counter + 1, 1u);
                        break;
                    }
                }
            }
        }
        __syncthreads();
    }
    if (a == 12345.f) hot[0] = a;
}
