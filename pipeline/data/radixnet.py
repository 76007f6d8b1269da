"""RadiX-Net synthetic networks of the HPEC Sparse DNN Challenge, and MNIST-derived inputs.

Layer rule (the challenge's RadiX-Net construction, verified against all 120 official N=1024
layers): M = N/16, d = log2 M; layer l (1-based) uses p = 2^((l-1) mod d) and group g = (l-1) // d;
``R_p[i, i] = R_p[i, (i-p) mod M] = 1`` (M x M), ``B_l = kron(ones(16, 16), R_p)`` and
``W_l = P_g B_l`` with P_g a random row permutation shared by the d layers of group g (P_0 = I),
every value 1/16. Every neuron then has 32 in-edges and 32 out-edges. The official permutations
came from the challenge's own random generator and cannot be regenerated: layers 1..d (group 0)
match the official ones exactly; later groups have the same structure with seeded permutations.
For N > 1024 the same rule with d = 8, 10, 12 is an extrapolation (unverified).

Inputs: the real MNIST training images resized to sqrt(N) x sqrt(N) (PIL bilinear) and binarized at
an intensity threshold chosen so that the density matches Table 1's nonzeros (about 10 %); pixel
index = row * sqrt(N) + col.
"""
from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import Callable, Deque, Dict, Iterator, List, Optional

import numpy as np
import scipy.sparse as sp

from pipeline.data.hpec import BIAS, IMAGES, INPUT_NNZ, YMAX, Network

VALUE = 1.0 / 16
FAN = 16               # the dense factor: 16 x 2 = 32 (hpec.FAN_IN) edges per neuron


def depth(N: int) -> int:
    M = N // FAN
    d = int(round(math.log2(M)))
    if FAN * (1 << d) != N:
        raise ValueError(f"N={N} is not 16 * 2^d")
    return d


def base_pattern(N: int, l: int) -> sp.csr_matrix:
    """B_l (N x N, values 1/16) for 1-based layer ``l``."""
    M = N // FAN
    p = 1 << ((l - 1) % depth(N))
    i = np.arange(M)
    R = sp.csr_matrix((np.ones(2 * M, np.float32), (np.r_[i, i], np.r_[i, (i - p) % M])), shape=(M, M))
    B = sp.kron(sp.csr_matrix(np.ones((FAN, FAN), np.float32)), R, format="csr")
    B.data[:] = VALUE
    return B.astype(np.float32)


def group_permutation(N: int, g: int, seed: int) -> np.ndarray:
    """P_g as an index array: row ``perm[i]`` of W is row ``i`` of B (identity for g = 0)."""
    if g == 0:
        return np.arange(N)
    return np.random.default_rng([seed, N, g]).permutation(N)


def layer(N: int, l: int, seed: int = 0) -> sp.csr_matrix:
    """W_l = P_g B_l (CSR float32, int32 indices, sorted), built directly: row perm[i] of W is row i
    of B, and row a*M + i of B holds columns b*M + i and b*M + (i - p) mod M for b = 0..15, i.e.
    b*M + min(i, i') then b*M + max(i, i') with i' = (i - p) mod M (already sorted, no sort needed).
    About 7 ms for N = 65536 on one core; numpy releases the GIL, so threads generate in parallel."""
    M = N // FAN
    p = 1 << ((l - 1) % depth(N))
    perm = group_permutation(N, (l - 1) // depth(N), seed)
    src = np.empty(N, np.int32)
    src[perm] = np.arange(N, dtype=np.int32)  # W row r = B row src[r]
    i = src % M
    ip = (i - p) % M
    base = np.arange(FAN, dtype=np.int32) * M
    cols = np.empty((N, FAN, 2), np.int32)
    np.add(base[None, :], np.minimum(i, ip)[:, None], out=cols[:, :, 0])
    np.add(base[None, :], np.maximum(i, ip)[:, None], out=cols[:, :, 1])
    W = sp.csr_matrix((np.full(2 * FAN * N, VALUE, np.float32), cols.reshape(-1),
                       np.arange(0, 2 * FAN * N + 1, 2 * FAN, dtype=np.int32)), shape=(N, N), copy=False)
    W.has_sorted_indices = True
    return W


def layer_nbytes(N: int) -> int:
    """Host bytes of one layer as SciPy CSR (float32 values, int32 indices and row pointers)."""
    return 2 * FAN * N * 8 + (N + 1) * 4


def parallel_map(fn: Callable[[int], object], n: int, workers: int = 0, progress=None, desc: str = "",
                 window: int = 0) -> Iterator[object]:
    """``fn(0), fn(1), ...`` in order, computed ``workers`` at a time on threads (numpy and SciPy
    release the GIL in their large operations), at most ``window`` (default 2 x workers) results
    ahead of the consumer, so memory stays bounded. ``progress`` (tqdm-like) shows the count."""
    from concurrent.futures import ThreadPoolExecutor
    workers = workers or max(1, min(16, os.cpu_count() or 1))
    window = window or 2 * workers
    bar = progress(range(n), desc=desc, total=n) if progress else None
    ex = ThreadPoolExecutor(workers) if workers > 1 and n > 1 else None
    futs: Deque = deque()
    try:
        for k in range(n):
            if ex is None:
                yield fn(k)
            else:
                while k + len(futs) < min(n, k + window):
                    futs.append(ex.submit(fn, k + len(futs)))
                yield futs.popleft().result()
            if bar is not None:
                bar.update(1)
    finally:
        for f in futs:
            f.cancel()
        if ex is not None:
            ex.shutdown(wait=True)
        if bar is not None:
            bar.close()


class Layers(Sequence):
    """The L layers of a RadiX-Net as a read-only sequence of CSR matrices, generated on access
    (``keep=True``: each layer is kept once generated, like a list). A 65536 x 1920 network is
    ~32 GB as CSR but regenerates in ~7 ms a layer per core, so big networks are not held at all:
    each consumer (the reference, a GPU runner's packing) makes one pass over them, in parallel
    (:meth:`imap`). ``nnz``/``max_nnz``/``edges`` need no generation. Pickles as its recipe."""

    def __init__(self, N: int, L: int, seed: int = 0, keep: bool = False):
        depth(N)
        self.N, self.L, self.seed, self.keep = int(N), int(L), int(seed), bool(keep)
        self._kept: Dict[int, sp.csr_matrix] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.L

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self.L))]
        k = int(k)
        if k < 0:
            k += self.L
        if not 0 <= k < self.L:
            raise IndexError(f"layer {k} of {self.L}")
        W = self._kept.get(k)
        if W is None:
            W = layer(self.N, k + 1, self.seed)
            if self.keep:
                with self._lock:
                    W = self._kept.setdefault(k, W)
        return W

    def __iter__(self):
        return iter(self.imap())

    def imap(self, fn: Optional[Callable[[int, sp.csr_matrix], object]] = None, workers: int = 0, progress=None,
             desc: str = ""):
        """``fn(l, W_l)`` (default: ``W_l``) for l = 0..L-1 in order, generated and mapped on
        ``workers`` threads a bounded window ahead."""
        if fn is None and len(self._kept) == self.L:
            return iter([self._kept[k] for k in range(self.L)])
        f = (lambda k: self[k]) if fn is None else (lambda k: fn(k, self[k]))
        return parallel_map(f, self.L, workers, progress, desc or f"RadiX-Net {self.N} layers")

    def nnz(self, k: int) -> int:
        return 2 * FAN * self.N

    @property
    def max_nnz(self) -> int:
        return 2 * FAN * self.N

    @property
    def edges(self) -> int:
        return 2 * FAN * self.N * self.L

    @property
    def nbytes(self) -> int:
        """Bytes the whole network takes as CSR (what ``keep=True`` ends up holding)."""
        return layer_nbytes(self.N) * self.L

    def __getstate__(self):
        return {"N": self.N, "L": self.L, "seed": self.seed, "keep": self.keep}   # regenerated where unpickled

    def __setstate__(self, st):
        self.__init__(st["N"], st["L"], st["seed"], st["keep"])


def network_layers(N: int, L: int, seed: int = 0, progress=None, workers: int = 0) -> List[sp.csr_matrix]:
    """All L layers as a list (generated on ``workers`` threads)."""
    return list(Layers(N, L, seed).imap(workers=workers, progress=progress, desc=f"RadiX-Net {N}"))


def layer_imap(layers, fn: Optional[Callable[[int, sp.csr_matrix], object]] = None, workers: int = 0,
               progress=None, desc: str = "layers"):
    """``fn(l, W_l)`` (default ``W_l``) in order over any sequence of layers: a lazy :class:`Layers`
    generates on ``workers`` threads; a list is mapped on threads when ``fn`` is given."""
    if isinstance(layers, Layers):
        return layers.imap(fn, workers, progress, desc)
    if fn is None:
        return iter(progress(layers, desc=desc) if progress else layers)
    return parallel_map(lambda k: fn(k, layers[k]), len(layers), workers, progress, desc)


def max_nnz(layers) -> int:
    return layers.max_nnz if isinstance(layers, Layers) else max(w.nnz for w in layers)


# ------------------------------------------------------------------------------ inputs

def _resize(images: np.ndarray, side: int) -> np.ndarray:
    from PIL import Image
    out = np.empty((images.shape[0], side, side), np.uint8)
    for k, im in enumerate(images):
        out[k] = np.asarray(Image.fromarray(im).resize((side, side), Image.BILINEAR))
    return out


def threshold_for(images: np.ndarray, N: int, sample: int = 2000) -> int:
    """The intensity threshold (> t is 1) whose density on a sample best matches Table 1."""
    side = int(round(math.sqrt(N)))
    target = INPUT_NNZ[N] / (IMAGES * N)
    R = _resize(images[:sample], side)
    hist = np.bincount(R.ravel(), minlength=256)
    above = 1.0 - np.cumsum(hist) / R.size          # fraction > t, t = 0..255
    return int(np.argmin(np.abs(above - target)))


def mnist_inputs(images: np.ndarray, N: int, n: int, chunk: int = 1000, progress=None,
                 workers: int = 0) -> Dict[str, np.ndarray]:
    """CSR arrays (indptr, indices, data, shape, threshold) of ``n`` binarized resized images,
    built in chunks of ``chunk`` images on ``workers`` threads (PIL and numpy release the GIL;
    N = 65536: ~0.45 s per 1000 images on one core)."""
    images = np.resize(images, (n,) + images.shape[1:])      # repeated when n is more than there are
    side = int(round(math.sqrt(N)))
    if side * side != N:
        raise ValueError(f"N={N} is not a square")
    t = threshold_for(images, N)
    starts = list(range(0, n, chunk))

    def part(k: int):
        B = _resize(images[starts[k]:starts[k] + chunk], side).reshape(-1, N) > t
        flat = np.flatnonzero(B)                       # row-major: sorted columns in each row
        return np.count_nonzero(B, axis=1), (flat % N).astype(np.int32)
    parts = list(parallel_map(part, len(starts), workers, progress, f"MNIST->{side}x{side}"))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.concatenate([c for c, _ in parts]), out=indptr[1:])
    indices = np.concatenate([ix for _, ix in parts]) if parts else np.zeros(0, np.int32)
    return {"indptr": indptr, "indices": indices, "data": np.ones(indices.size, np.float32),
            "shape": np.array([n, N]), "threshold": np.array(t)}


def random_inputs(N: int, n: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """Stroke-like random blobs (where MNIST is absent): a 3 x 3 random field per image, resized
    bicubic to sqrt(N) x sqrt(N) and binarised at Table 1's density. Uniformly scattered pixels
    would not do: on RadiX-Net they all die within a few layers."""
    from PIL import Image
    rng = np.random.default_rng([seed, N, 7])
    side = int(round(math.sqrt(N)))
    q = 1.0 - INPUT_NNZ[N] / (IMAGES * N)
    parts = []
    for s in range(0, n, 2000):
        fields = (rng.random((min(2000, n - s), 3, 3)) * 255).astype(np.uint8)
        ims = np.stack([np.asarray(Image.fromarray(f).resize((side, side), Image.BICUBIC)) for f in fields])
        ims = ims.reshape(len(fields), N)
        t = np.quantile(ims, q, axis=1, keepdims=True)
        parts.append(sp.csr_matrix(ims > t, dtype=np.float32))
    Y = sp.vstack(parts, format="csr", dtype=np.float32)
    return {"indptr": Y.indptr.astype(np.int64), "indices": Y.indices.astype(np.int32),
            "data": Y.data.astype(np.float32), "shape": np.array(Y.shape), "threshold": np.array(-1)}


KEEP_BYTES = 2 << 30     # make_network: networks up to this size (as CSR) are kept as lists


def make_network(N: int, L: int, Y0: sp.csr_matrix, seed: int = 0, bias: Optional[float] = None,
                 ymax: float = YMAX, progress=None, name: str = "", keep_bytes: Optional[int] = None,
                 workers: int = 0) -> Network:
    """The network with inputs ``Y0``. Up to ``keep_bytes`` of CSR (default KEEP_BYTES) the layers
    are generated now (in parallel) into a list; above, ``layers`` is a lazy :class:`Layers` that
    regenerates them for each pass (the 65536 x 1920 network would hold ~32 GB)."""
    keep_bytes = KEEP_BYTES if keep_bytes is None else keep_bytes
    lazy = layer_nbytes(N) * L > keep_bytes
    layers = Layers(N, L, seed) if lazy else network_layers(N, L, seed, progress, workers)
    return Network(name=name or f"radixnet-{N}-l{L}", N=N, bias=BIAS[N] if bias is None else bias, ymax=ymax,
                   layers=layers, Y0=Y0, golden=None,
                   meta={"generator": "radixnet", "seed": seed, "lazy_layers": lazy})
