// SLIDE (G-SLIDE) hash tables on the GPU: a race-free build with FIFO bucket capacity, the
// per-sample query (gather, dedup with counts, threshold, labels, padding, deterministic
// truncation), and a device-wide exclusive scan used by the build and by the training step.
//
// Tables are one flat CSR over all (table, bucket) segments: the members of bucket c of table t
// are ids[G[t * nb + c] .. G[t * nb + c + 1]), in insertion order, at most `cap` of them.
#include <stdint.h>

#include "slide_common.cuh"

// ------------------------------------------------------------------ exclusive scan (three launches)
#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)

// Tile sums: tsum[tile] = sum of in[tile * SCAN_TILE ..]. Grid = tiles, block = SCAN_THREADS.
extern "C" __global__ void scan_tiles(const int* __restrict__ in, long long n, int* __restrict__ tsum)
{
    __shared__ int sh[33];
    const long long base = (long long)blockIdx.x * SCAN_TILE + (long long)threadIdx.x * SCAN_ITEMS;
    int s = 0;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k)
        if (base + k < n) s += in[base + k];
    int total;
    block_excl_scan(s, &total, sh);
    if (threadIdx.x == 0) tsum[blockIdx.x] = total;
}

// In place exclusive scan of tsum[0..ntiles); tsum[ntiles] = the total. One block.
extern "C" __global__ void scan_totals(int* __restrict__ tsum, int ntiles)
{
    __shared__ int sh[33];
    int carry = 0;
    for (int i0 = 0; i0 < ntiles; i0 += blockDim.x) {
        const int i = i0 + threadIdx.x;
        const int v = i < ntiles ? tsum[i] : 0;
        int total;
        const int ex = block_excl_scan(v, &total, sh);
        if (i < ntiles) tsum[i] = carry + ex;
        carry += total;
    }
    if (threadIdx.x == 0) tsum[ntiles] = carry;
}

// out[i] = sum of in[0..i) for i < n, out[n] = total. Grid = tiles, block = SCAN_THREADS.
extern "C" __global__ void scan_apply(const int* __restrict__ in, long long n, const int* __restrict__ tsum,
                                      int ntiles, int* __restrict__ out)
{
    __shared__ int sh[33];
    const long long base = (long long)blockIdx.x * SCAN_TILE + (long long)threadIdx.x * SCAN_ITEMS;
    int v[SCAN_ITEMS];
    int s = 0;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        v[k] = base + k < n ? in[base + k] : 0;
        s += v[k];
    }
    int total;
    int run = tsum[blockIdx.x] + block_excl_scan(s, &total, sh);
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        if (base + k < n) out[base + k] = run;
        run += v[k];
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) out[n] = tsum[ntiles];
}

// ------------------------------------------------------------------ table build
// keys: sorted ((t * nb + bucket) << rbits) | rank, M = L * N of them.
// seg_bounds: first and one-past-last position of every non-empty segment (zeroed beforehand).
extern "C" __global__ void seg_bounds(const u64* __restrict__ keys, long long M, int rbits,
                                      int* __restrict__ sstart, int* __restrict__ send)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= M) return;
    const u64 seg = keys[p] >> rbits;
    if (p == 0 || (keys[p - 1] >> rbits) != seg) sstart[seg] = (int)p;
    if (p == M - 1 || (keys[p + 1] >> rbits) != seg) send[seg] = (int)(p + 1);
}

// kept[s] = min(segment length, cap)
extern "C" __global__ void seg_kept(const int* __restrict__ sstart, const int* __restrict__ send, long long nseg,
                                    int cap, int* __restrict__ kept)
{
    const long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (s < nseg) kept[s] = min(send[s] - sstart[s], cap);
}

// The last kept[s] members of each segment (FIFO: the latest inserts survive), in insertion order:
// ids[G[s] + j] = order[rank] of the j-th survivor.
extern "C" __global__ void table_scatter(const u64* __restrict__ keys, long long M, int rbits,
                                         const int* __restrict__ send, const int* __restrict__ kept,
                                         const int* __restrict__ G, const int* __restrict__ order,
                                         int* __restrict__ ids)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= M) return;
    const u64 k = keys[p];
    const long long seg = (long long)(k >> rbits);
    const int first = send[seg] - kept[seg];
    if (p >= first) ids[G[seg] + (int)(p - first)] = order[(int)(k & ((1ull << rbits) - 1ull))];
}

// ------------------------------------------------------------------ query
// Entry keys of the active-set builder (ascending = truncation priority):
//   label:     id                                   (class 0)
//   candidate: 1 << 62 | (0x3FFFFFFF - count) << 32 | id   (count desc, then id asc)
//   pad:       2 << 62 | walk index << 32 | id      (walk order)
#define CLS_CAND (1ull << 62)
#define CLS_PAD (2ull << 62)

__device__ __forceinline__ bool in_sorted(const int* a, int n, int key)
{
    const int j = lower_bound(a, n, key);
    return j < n && a[j] == key;
}

// One block per sample (grid B). sbkt (B, L): the sample's bucket in each table. Labels: rows
// r0 + b of the CSR (yptr, yidx), sorted; yptr == nullptr: no labels (no insertion). Scratch: C
// (a power of two >= max(L * cap + max labels, min(min_active, N))) u64 entry keys and C u32 ids,
// in dynamic shared memory (gscratch == nullptr) or at gscratch + b * 12 * C bytes; dynamic shared
// memory also holds L + 1 ints. Output: the sample's active ids sorted ascending at
// out_ids[b * stride ..] (stride >= max_active), their number in out_cnt[b]. overflow[0] +=
// truncated samples, overflow[1] += neurons dropped by the truncation; *gathered (optional) += the
// ids read from the sample's L buckets (a run's work counter).
extern "C" __global__ void slide_query(const int* __restrict__ sbkt, const int* __restrict__ G,
                                       const int* __restrict__ tids, int L, int nb, int N,
                                       const int* __restrict__ yptr, const int* __restrict__ yidx, int r0,
                                       const int* __restrict__ order, const long long* __restrict__ pad_off,
                                       int threshold, int min_active, int max_active, int C,
                                       unsigned char* __restrict__ gscratch,
                                       int* __restrict__ out_ids, int* __restrict__ out_cnt, int stride,
                                       u64* __restrict__ overflow, u64* __restrict__ gathered)
{
    extern __shared__ __align__(16) unsigned char dsm[];
    __shared__ int sh[33];
    const int b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    unsigned char* base = gscratch ? gscratch + (size_t)b * 12 * C : dsm;
    u64* keys = reinterpret_cast<u64*>(base);
    unsigned* sids = reinterpret_cast<unsigned*>(base + 8 * (size_t)C);
    int* tpos = reinterpret_cast<int*>(gscratch ? dsm : dsm + 12 * (size_t)C);
    const int* mybkt = sbkt + (size_t)b * L;

    // 1. where each table's bucket goes in the gathered list
    int T = 0;
    for (int t0 = 0; t0 < L; t0 += nt) {
        const int t = t0 + tid;
        int sz = 0;
        if (t < L) {
            const long long seg = (long long)t * nb + mybkt[t];
            sz = G[seg + 1] - G[seg];
        }
        int tot;
        const int ex = block_excl_scan(sz, &tot, sh);
        if (t < L) tpos[t] = T + ex;
        T += tot;
    }
    if (tid == 0) {
        tpos[L] = T;
        if (gathered) atomicAdd(gathered, (u64)T);
    }
    __syncthreads();
    // 2. gather (a warp per table)
    for (int t = warp; t < L; t += nw) {
        const long long seg = (long long)t * nb + mybkt[t];
        const int s = G[seg], p0 = tpos[t], len = tpos[t + 1] - p0;
        for (int k = lane; k < len; k += 32) sids[p0 + k] = (unsigned)tids[s + k];
    }
    const int P = pow2_ceil(max(T, 1));
    for (int i = T + tid; i < P; i += nt) sids[i] = 0xFFFFFFFFu;
    __syncthreads();
    bitonic_sort(sids, P);
    // 3. runs of equal ids: count, threshold, compact in id order
    int Nc = 0;
    for (int i0 = 0; i0 < T; i0 += nt) {
        const int i = i0 + tid;
        int flag = 0, cnt = 0;
        unsigned id = 0u;
        if (i < T) {
            id = sids[i];
            if (i == 0 || sids[i - 1] != id) {
                cnt = 1;
                while (i + cnt < T && sids[i + cnt] == id) ++cnt;
                flag = cnt >= threshold;
            }
        }
        int tot;
        const int ex = block_excl_scan(flag, &tot, sh);
        if (flag) keys[Nc + ex] = CLS_CAND | ((u64)(0x3FFFFFFF - cnt) << 32) | id;
        Nc += tot;
    }
    __syncthreads();                         // the candidates are read by every thread below
    // 4. labels: a candidate that is a label becomes class 0; the others are appended (sorted)
    int nl = 0, l0 = 0;
    if (yptr) { l0 = yptr[r0 + b]; nl = yptr[r0 + b + 1] - l0; }
    const int* labs = yidx + l0;
    int E = 0;
    for (int k0 = 0; k0 < nl; k0 += nt) {
        const int k = k0 + tid;
        int flag = 0, lab = 0;
        if (k < nl) {
            lab = labs[k];
            const int j = lower_bound_low(keys, Nc, (unsigned)lab);
            if (j < Nc && reinterpret_cast<const unsigned*>(keys)[2 * j] == (unsigned)lab)
                reinterpret_cast<unsigned*>(keys)[2 * j + 1] = 0u;      // high word only: class 0
            else
                flag = 1;
        }
        int tot;
        const int ex = block_excl_scan(flag, &tot, sh);
        if (flag && Nc + E + ex < C) keys[Nc + E + ex] = (u64)(unsigned)lab;
        E += tot;
    }
    E = min(E, C - Nc);
    // 5. padding from the node order, starting at pad_off[b]
    int S = Nc + E;
    const int target = min(min_active, N);
    const long long off = pad_off[b];
    for (int walk = 0; S < target && walk < N; walk += nt) {
        const int i = walk + tid;
        int isnew = 0, n = 0;
        if (i < N) {
            n = order[(int)((off + i) % N)];
            const int j = lower_bound_low(keys, Nc, (unsigned)n);
            const bool cand = j < Nc && reinterpret_cast<const unsigned*>(keys)[2 * j] == (unsigned)n;
            isnew = !cand && !in_sorted(labs, nl, n);
        }
        int tot;
        const int ex = block_excl_scan(isnew, &tot, sh);
        if (isnew && S + ex < target) keys[S + ex] = CLS_PAD | ((u64)i << 32) | (unsigned)n;
        S += min(tot, target - S);
    }
    const int npad = S - Nc - E;
    __syncthreads();
    // 6. deterministic truncation: labels, then candidates by (count desc, id asc), then pads
    const bool trunc = S > max_active;
    if (trunc) {
        const int P2 = pow2_ceil(S);
        for (int i = S + tid; i < P2; i += nt) keys[i] = ~0ull;
        __syncthreads();
        bitonic_sort(keys, P2);
        if (tid == 0) {
            atomicAdd(&overflow[0], 1ull);
            atomicAdd(&overflow[1], (u64)(S - max_active));
        }
        S = max_active;
    }
    // 7. output sorted by id
    int* out = out_ids + (size_t)b * stride;
    if (!trunc && E == 0 && npad == 0) {
        for (int i = tid; i < S; i += nt) out[i] = (int)(unsigned)keys[i];
    } else {
        const int P3 = pow2_ceil(max(S, 1));
        for (int i = tid; i < P3; i += nt) sids[i] = i < S ? (unsigned)keys[i] : 0xFFFFFFFFu;
        __syncthreads();
        bitonic_sort(sids, P3);
        for (int i = tid; i < S; i += nt) out[i] = (int)sids[i];
    }
    if (tid == 0) out_cnt[b] = S;
}

// acc[0] += sum of cnt[0..B), acc[1] = max(acc[1], max cnt). One block.
extern "C" __global__ void act_stats(const int* __restrict__ cnt, int B, u64* __restrict__ acc)
{
    __shared__ int sh[33];
    int s = 0, m = 0;
    for (int i = threadIdx.x; i < B; i += blockDim.x) { s += cnt[i]; m = max(m, cnt[i]); }
    int total;
    block_excl_scan(s, &total, sh);
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(&acc[1], (u64)m);
    if (threadIdx.x == 0) atomicAdd(&acc[0], (u64)total);
}

// acc[0] += M - G[nseg] (inserts dropped by the FIFO of one build).
extern "C" __global__ void add_dropped(const int* __restrict__ G, long long nseg, long long M, u64* __restrict__ acc)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(acc, (u64)(M - (long long)G[nseg]));
}
