"""GPU side: the reusable device functions :func:`fewhot_lookup` and :func:`softmax_topn`, and the
variant builders (ours and baselines) that ``model.py`` times. Kernels: ``cuda/argueta/*.cu``."""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np

from pipeline.bench import Case, Variant
from pipeline.models.argueta.costs import dense_cost, fewhot_cost, topn_cost
from pipeline.gpu import kernels

MODEL_DIR = "argueta"
_SMEM_RESERVE = 2048            # static shared memory of the top-N kernels, rounded up
ONLINE_FIXED_K = 400            # online_topk_fixed: one build for every N, as the paper's flat baseline times suggest
BUCKET_VECS = (1, 2, 4, 8)      # float4 loads per thread of the topn_bucket kernels (cuda/argueta/topn_bucket.cu)
BUCKET_CAP = 1024               # candidates topn_bucket holds in shared memory (= its largest N)
BUCKET_MAX_K = 4 * max(BUCKET_VECS) * 1024    # the longest row one block holds in registers


def _cp():
    import cupy
    return cupy


# ============================================================================ N-hot lookup


def fewhot_lookup(A, B, out=None, variant: str = "paper", stream=None):
    """C = A @ B for A an L x K CSR matrix (``cupyx.scipy.sparse.csr_matrix`` or a tuple
    ``(indptr, indices, data)``; any number of non-zeros per row) and B a dense K x M float32 CuPy
    array; returns the dense L x M float32 C (``out`` if given). ``variant``: "paper" (one thread per
    output, 32 x 32 blocks; measured as fast or faster on an H200 for L=100, M=512) or "vec" (a block
    per row slice, float4 over M when M % 4 == 0)."""
    cp = _cp()
    indptr, indices, data = A if isinstance(A, tuple) else (A.indptr, A.indices, A.data)
    indptr, indices = cp.ascontiguousarray(indptr, dtype=cp.int32), cp.ascontiguousarray(indices, dtype=cp.int32)
    data, B = cp.ascontiguousarray(data, dtype=cp.float32), cp.ascontiguousarray(B, dtype=cp.float32)
    L, M = int(indptr.size - 1), int(B.shape[1])
    if out is None:
        out = cp.empty((L, M), cp.float32)
    fewhot_launcher(indptr, indices, data, B, out, variant)(stream)
    return out


def _uniform_row_length(indptr) -> int:
    """n > 0 when every row of the CSR matrix has exactly n non-zeros (indptr[l] = l * n), else 0
    (checked once, when a launcher is built)."""
    cp = _cp()
    L = int(indptr.size - 1)
    if L <= 0:
        return 0
    n = int(indptr[1] - indptr[0])
    ok = n > 0 and int(indptr[0]) == 0 and bool((indptr == cp.arange(L + 1, dtype=indptr.dtype) * n).all())
    return n if ok else 0


def fewhot_launcher(indptr, indices, data, B, C, variant: str = "vec"):
    """A ``launch(stream=None)`` closure with every choice made up front (for timing)."""
    mod = kernels.load(MODEL_DIR, "fewhot.cu")
    L, M = int(indptr.size - 1), int(B.shape[1])
    args = (indptr, indices, data, B, C, np.int32(L), np.int32(M))
    if variant == "paper":
        k = mod.kernel("fewhot_paper", "PPPPPii")
        grid, block = (math.ceil(M / 32), math.ceil(L / 32)), (32, 32)
    elif variant == "vec":
        aligned = M % 4 == 0 and B.data.ptr % 16 == 0 and C.data.ptr % 16 == 0
        cols = M // 4 if aligned else M
        threads = 32 if L * cols < 64 * 1024 else 128
        threads = min(threads, max(32, 32 * math.ceil(cols / 32)))
        nhot = _uniform_row_length(indptr)      # N-hot rows: no row-pointer loads
        name = ("fewhot_vec4" if aligned else "fewhot_vec1") + ("_nhot" if nhot else "")
        k = mod.kernel(name, "PPPPPiii")
        args += (np.int32(nhot),)
        grid, block = (math.ceil(cols / threads), L), (threads,)
    else:
        raise ValueError(f"fewhot variant {variant!r}: expected 'vec' or 'paper'")

    def launch(stream=None):
        if L > 0 and M > 0:
            k(grid, block, *args, stream=stream)
    return launch


def _fewhot_upload(case: Case):
    cp = _cp()
    import cupyx.scipy.sparse as csp
    A, B = case.inputs["A"], case.inputs["B"]
    Ad = csp.csr_matrix((cp.asarray(A.data), cp.asarray(A.indices), cp.asarray(A.indptr)), shape=A.shape)
    return Ad, cp.asarray(B)


def _fewhot_ours(variant: str):
    def build(case: Case, ctx):
        cp = _cp()
        Ad, Bd = _fewhot_upload(case)
        C = cp.full((Ad.shape[0], Bd.shape[1]), cp.nan, cp.float32)
        launch = fewhot_launcher(Ad.indptr, Ad.indices, Ad.data, Bd, C, variant)

        def run():
            launch()
            return {"C": C}
        return run
    return build


def _cusparse(case: Case, ctx):
    """cuSPARSE generic SpMM (CSR x row-major dense -> row-major dense), descriptors and work buffer
    made once, one cusparseSpMM per call on CuPy's current stream (capturable). Falls back to
    CuPy's ``A @ B`` (column-major copies inside) if the direct call is refused."""
    cp = _cp()
    Ad, Bd = _fewhot_upload(case)
    L, M = Ad.shape[0], Bd.shape[1]
    C = cp.full((L, M), cp.nan, cp.float32)
    try:
        import cupyx.cusparse as cxs
        from cupy._core import _dtype
        from cupy_backends.cuda.libs import cusparse as cs
        handle = cp.cuda.device.get_cusparse_handle()
        f32 = _dtype.to_cuda_dtype(np.dtype(np.float32))
        desc_a = cxs.SpMatDescriptor.create(Ad)
        db = cs.createDnMat(Bd.shape[0], M, M, Bd.data.ptr, f32, cs.CUSPARSE_ORDER_ROW)
        dc = cs.createDnMat(L, M, M, C.data.ptr, f32, cs.CUSPARSE_ORDER_ROW)
        alpha, beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        nt = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        alg = getattr(cs, "CUSPARSE_SPMM_ALG_DEFAULT", getattr(cs, "CUSPARSE_MM_ALG_DEFAULT", 0))
        size = cs.spMM_bufferSize(handle, nt, nt, alpha.ctypes.data, desc_a.desc, db, beta.ctypes.data, dc, f32, alg)
        buf = cp.empty(max(int(size), 1), cp.int8)

        def run():
            cs.spMM(handle, nt, nt, alpha.ctypes.data, desc_a.desc, db, beta.ctypes.data, dc, f32, alg, buf.data.ptr)
            return {"C": C}
        run()
        cp.cuda.Device().synchronize()
        run.keep = (desc_a, Ad, Bd, buf, alpha, beta)       # descriptors point at these
        return run
    except Exception as e:
        if ctx is not None:
            ctx.notice(f"cusparse: direct SpMM refused ({str(e).splitlines()[0][:120]}); timing CuPy's A @ B")
        return lambda: {"C": Ad @ Bd}


def _dense(case: Case, ctx):
    """Dense cuBLAS SGEMM (strict fp32) of the densified A with B, capturable."""
    cp = _cp()
    from pipeline.gpu.blas import sgemm
    Ad, Bd = _fewhot_upload(case)
    D = Ad.toarray()
    C = cp.full((D.shape[0], Bd.shape[1]), cp.nan, cp.float32)

    def run():
        sgemm(D, Bd, C, precision="fp32")
        return {"C": C}
    return run


def fewhot_variants() -> Dict[str, Variant]:
    return {
        "fewhot": Variant("fewhot", "ours", _fewhot_ours("paper"), fewhot_cost,
                          note="paper: one thread per output, 32x32 blocks", graph=True),
        "fewhot_vec": Variant("fewhot_vec", "ours", _fewhot_ours("vec"), fewhot_cost,
                              note="block per row slice, float4 over M", graph=True),
        # cuSPARSE refuses stream capture ("calling cuSPARSE API during stream capture is currently
        # unsupported"), so SpMM is timed as eager calls (the timer's hold kernel keeps the host-side
        # call out of the device time, as for every variant).
        "cusparse": Variant("cusparse", "baseline", _cusparse, fewhot_cost, note="cuSPARSE SpMM, eager"),
        "dense_fp32": Variant("dense_fp32", "baseline", _dense, dense_cost, note="dense cuBLAS SGEMM (CuPy)",
                              graph=True),
    }


# ============================================================================ softmax + top-N


def bucket_shape(L: int, K: int, N: int, sms: int, vec: int = 0) -> Optional[Tuple[int, int]]:
    """(float4 loads per thread V, threads per block) of ``topn_bucket`` for L rows of K logits,
    or None when a row does not fit the registers of one block (K > BUCKET_MAX_K) or N > BUCKET_CAP.
    ``vec`` > 0 forces V. Otherwise: with at least one row per SM, the largest V (fewest threads per
    row, so more rows in flight per SM), with fewer rows the smallest V (most threads on the one
    row); in both cases only shapes with at least 2 N threads (the bound on the N-th key comes from
    one key per thread) unless none has that many, then the most threads."""
    if N > BUCKET_CAP:
        return None
    shapes = [(v, 32 * math.ceil(K / (128 * v))) for v in BUCKET_VECS]
    shapes = [(v, t) for v, t in shapes if t <= 1024]
    if not shapes:
        return None
    if vec:
        for v, t in shapes:
            if v == vec:
                return v, t
        raise ValueError(f"topn_bucket: {vec} float4 per thread cannot hold K={K} in one block of at most "
                         f"1024 threads; use one of {[v for v, _ in shapes]} (or 0: automatic)")
    order = sorted(shapes, reverse=L >= sms)
    for v, t in order:
        if t >= 2 * N:
            return v, t
    return max(shapes, key=lambda s: s[1])


class TopnPlan:
    """Every launch choice of one (L, K, N, method), fixed up front; ``run(X, P, I)`` only launches."""

    def __init__(self, L: int, K: int, N: int, method: str = "auto", split: int = 0, block: int = 256,
                 vec: int = 0):
        cp = _cp()
        from pipeline.gpu import device
        if not 0 < N <= K:
            raise ValueError(f"top-N: n={N} must be between 1 and K={K}")
        if N > 1024:
            raise ValueError(f"top-N: n={N} is above the supported 1024")
        self.L, self.K, self.N = int(L), int(K), int(N)
        self.NP = NP = 1 << max(0, (self.N - 1).bit_length())          # N rounded up to a power of two
        info = device.info()
        cap = int(info.smem_per_block_optin) - _SMEM_RESERVE
        sms = int(info.sm_count)
        fits = 4 * K + 8 * NP <= cap
        bucket = bucket_shape(L, K, N, sms, vec)
        if method == "auto" and bucket is None and N <= 16 and L >= sms:
            method = "early_exit"          # few atomics per element at small N (measured faster)
        elif method in ("auto", "bucket"):
            method = "bucket" if bucket is not None else ("radix" if fits and L >= sms // 2 else "split")
        if method == "radix" and not fits:
            method = "split"
        self.method = method
        mod = kernels.load(MODEL_DIR, "topn.cu") if method != "bucket" else None
        i32 = np.int32

        def radix(S, chunk, threads, workspace=(0, 0, 0)):
            """topn_radix with S blocks a row, each on ``chunk`` logits (S > 1: into the merge's workspace)."""
            k, smem = mod.kernel("topn_radix", "PiiiiPPPPP"), 8 * NP + 4 * chunk
            return lambda X, P, I, s: k((S, L), (threads,), X, i32(K), i32(N), i32(NP), i32(chunk), P, I,
                                        *workspace, shared=smem, stream=s)
        if method == "bucket":
            V, threads = bucket
            self.vec, self.threads = V, threads
            kb = kernels.load(MODEL_DIR, "topn_bucket.cu").kernel(f"topn_bucket_v{V}", "PiiiPP")
            kernels.require_block(kb, threads, "model.vec", vec, "a larger model.vec (or 0: automatic)")

            def bucket_launch(X, P, I, s):
                aligned = K % 4 == 0 and kernels.ptr(X) % 16 == 0
                kb((L,), (threads,), X, i32(K), i32(N), i32(1 if aligned else 0), P, I, stream=s)
            self._launches = [bucket_launch]
        elif method in ("atomic", "early_exit"):
            k = mod.kernel("topn_atomic", "PiiiPP")
            early = i32(1 if method == "early_exit" else 0)
            self._launches = [lambda X, P, I, s: k((L,), (block,), X, i32(K), i32(N), early, P, I,
                                                   shared=8 * N, stream=s)]
        elif method == "radix":
            self._launches = [radix(1, K, 1024 if L < sms else 512)]
        elif method == "split":
            S = int(split) if split else max(1, min(math.ceil(2 * sms / L), math.ceil(K / max(2 * N, 1024))))
            while S > 1 and 8 * S * N + 8 * NP > cap:      # the merge holds S * N candidates
                S -= 1
            chunk = math.ceil(K / S)
            if 4 * chunk + 8 * NP > cap:
                raise ValueError(f"top-N: K={K} with n={N} does not fit the split kernel's shared memory "
                                 f"(chunk {chunk} with {S} blocks per row)")
            self.S = S = math.ceil(K / chunk)
            threads = 256 if chunk <= 4096 else 512
            if S == 1:
                self._launches = [radix(1, chunk, threads)]
            else:
                ws = cp.empty(L * S * N, cp.uint64)
                wm, wd = cp.empty(L * S, cp.float32), cp.empty(L * S, cp.float32)
                km = mod.kernel("topn_merge", "PPPiiiPP")
                msmem = 8 * S * N + 8 * NP
                self._ws = (ws, wm, wd)
                self._launches = [
                    radix(S, chunk, threads, self._ws),
                    lambda X, P, I, s: km((L,), (256,), ws, wm, wd, i32(S), i32(N), i32(NP), P, I,
                                          shared=msmem, stream=s),
                ]
        elif method in ("online", "online_fixed"):
            topk = N if method == "online" else max(N, ONLINE_FIXED_K)
            mo = kernels.load(MODEL_DIR, "online_topk.cu", defines={"TOPK": topk})
            k = mo.kernel("online_topk", "PiiPP")
            threads = 128
            while threads > 32 and (threads // 2) * topk * 8 > cap - 8192:
                threads //= 2
            smem = (threads // 2) * topk * 8
            self._launches = [lambda X, P, I, s: k((L,), (threads,), X, i32(K), i32(N), P, I, shared=smem, stream=s)]
        else:
            raise ValueError(f"top-N method {method!r}: expected auto, bucket, radix, split, atomic, early_exit, "
                             f"online or online_fixed")

    def run(self, X, P, I, stream=None) -> None:
        if self.L == 0:
            return
        for launch in self._launches:
            launch(X, P, I, stream)


def softmax_topn(logits, n: int, method: str = "auto", out: Optional[Tuple] = None, split: int = 0,
                 block: int = 256, stream=None, vec: int = 0):
    """Fused softmax + top-n of each row of an L x K float32 CuPy array: returns ``(probs, idx)``,
    L x n float32 probabilities (descending) and int32 column indices. Ties: smaller index first;
    NaN ranks above +inf and makes the row's probabilities NaN (see ``reference.py``). ``method``: auto,
    bucket, radix, split, atomic (the paper's), early_exit or online (the Milakov baseline); what each
    does and which "auto" picks: docs/models/argueta.md. ``vec``: float4 loads per thread of "bucket"
    (1, 2, 4, 8; 0: automatic)."""
    cp = _cp()
    X = cp.ascontiguousarray(logits, dtype=cp.float32)
    if X.ndim != 2:
        raise ValueError(f"softmax_topn: logits must be L x K, got shape {X.shape}")
    L, K = (int(s) for s in X.shape)
    plan = TopnPlan(L, K, int(n), method, split, block, vec)
    P, I = out if out is not None else (cp.empty((L, n), cp.float32), cp.empty((L, n), cp.int32))
    plan.run(X, P, I, stream)
    return P, I


def _topn_ours(method: str):
    def build(case: Case, ctx):
        cp = _cp()
        L, K, N = (case.params[k] for k in ("L", "K", "N"))
        X = cp.asarray(case.inputs["x"])
        plan = TopnPlan(L, K, N, method, int(case.params.get("split", 0)), int(case.params.get("block", 256)),
                        int(case.params.get("vec", 0)))
        P = cp.full((L, N), cp.nan, cp.float32)
        I = cp.full((L, N), -1, cp.int32)

        def run():
            plan.run(X, P, I)
            return {"probs": P, "idx": I}
        return run
    return build


def _softmax_topk_cupy(case: Case, ctx):
    cp = _cp()
    X = cp.asarray(case.inputs["x"])
    N = case.params["N"]

    def run():
        m = X.max(axis=1, keepdims=True)
        e = cp.exp(X - m)
        p = e / e.sum(axis=1, keepdims=True)
        idx = cp.argsort(-p, axis=1)[:, :N]
        return {"probs": cp.take_along_axis(p, idx, axis=1), "idx": idx}
    return run


def _torch_topk(case: Case, ctx):
    import torch
    cp = _cp()
    X = torch.as_tensor(cp.asarray(case.inputs["x"]), device="cuda")
    N = case.params["N"]

    def eager():
        v, i = torch.topk(torch.softmax(X, dim=1), N, dim=1, sorted=True)
        return {"probs": v, "idx": i}

    # Give PyTorch its best case too: capture the two ops in a CUDA graph (as our kernels are).
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                eager()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = eager()
        torch.cuda.synchronize()

        def run():
            g.replay()
            return out
        run.graph = g
        return run
    except Exception as e:                                  # pragma: no cover - depends on the build
        if ctx is not None:
            ctx.notice(f"torch_topk: CUDA graph capture failed ({str(e).splitlines()[0][:120]}); timing eager calls")
        torch.cuda.synchronize()
        return eager


def topn_variants(check_exact, check_ties) -> Dict[str, Variant]:
    def kernel(name: str, kind: str, method: str, note: str) -> Variant:
        return Variant(name, kind, _topn_ours(method), topn_cost, check=check_exact, note=note, graph=True)
    variants = [
        kernel("topn_atomic", "ours", "atomic", "paper Alg. 4, corrected: 64-bit atomicMax insertion"),
        kernel("topn_early_exit", "ours", "early_exit", "Alg. 4 + skip keys below the N-th slot"),
        kernel("topn_split", "ours", "split", "several blocks per row (radix select) + merge"),
        kernel("topn_radix", "ours", "radix", "row in shared memory, radix select + bitonic sort of N"),
        kernel("topn_bucket", "ours", "bucket",
               "row in registers, one pass: normaliser + bound from thread maxima, rank the few candidates"),
        kernel("online_topk", "baseline", "online",
               "Milakov & Gimelshein online softmax + per-thread top-k (k = N), ours"),
        kernel("online_topk_fixed", "baseline", "online_fixed",
               f"the same, built once for k = {ONLINE_FIXED_K} (flat in N, as in the paper)"),
        Variant("softmax_topk", "baseline", _softmax_topk_cupy, topn_cost, check=check_ties,
                note="CuPy softmax, then argsort"),
        Variant("torch_topk", "baseline", _torch_topk, topn_cost, check=check_ties,
                note="torch.softmax, then torch.topk"),
    ]
    return {v.name: v for v in variants}
