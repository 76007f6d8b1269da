"""RadiX-Net synthetic networks of the HPEC Sparse DNN Challenge, and MNIST-derived inputs.

Layer rule (notes §4.2, verified against all 120 official N=1024 layers): M = N/16, d = log2 M;
layer l (1-based) uses p = 2^((l-1) mod d) and group g = (l-1) // d;
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
from typing import Dict, Optional

import numpy as np
import scipy.sparse as sp

from pipeline.data.hpec import BIAS, YMAX, Network

VALUE = 1.0 / 16
FAN = 16               # the dense factor: 16 x 2 = 32 edges per neuron
# Table 1 "Nonzeros" (nnz of the 60000-image input matrix) per N.
INPUT_NNZ = {1024: 6_374_505, 4096: 25_019_051, 16384: 98_858_913, 65536: 392_191_985}
IMAGES = 60000


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
    """W_l = P_g B_l (CSR float32, sorted indices), built directly: row perm[i] of W is row i of B,
    and row a*M + i of B holds columns b*M + i and b*M + (i - p) mod M for b = 0..15."""
    M = N // FAN
    p = 1 << ((l - 1) % depth(N))
    perm = group_permutation(N, (l - 1) // depth(N), seed)
    src = np.empty(N, np.int64)
    src[perm] = np.arange(N)                  # W row r = B row src[r]
    i = src % M
    base = np.arange(FAN, dtype=np.int64) * M
    cols = np.concatenate([base[None, :] + i[:, None], base[None, :] + ((i - p) % M)[:, None]], axis=1)
    cols.sort(axis=1)
    W = sp.csr_matrix((np.full(2 * FAN * N, VALUE, np.float32), cols.ravel().astype(np.int32),
                       np.arange(N + 1, dtype=np.int64) * 2 * FAN), shape=(N, N))
    W.has_sorted_indices = True
    return W


def network_layers(N: int, L: int, seed: int = 0, progress=None):
    it = range(1, L + 1)
    it = progress(it, desc=f"RadiX-Net {N}") if progress else it
    return [layer(N, l, seed) for l in it]


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


def mnist_inputs(images: np.ndarray, N: int, n: int, chunk: int = 2000, progress=None) -> Dict[str, np.ndarray]:
    """CSR arrays (indptr, indices, data, shape, threshold) of ``n`` binarized resized images."""
    if n > images.shape[0]:
        reps = -(-n // images.shape[0])
        images = np.concatenate([images] * reps)
    images = images[:n]
    side = int(round(math.sqrt(N)))
    if side * side != N:
        raise ValueError(f"N={N} is not a square")
    t = threshold_for(images, N)
    parts = []
    starts = range(0, n, chunk)
    for s in (progress(starts, desc=f"MNIST->{side}x{side}") if progress else starts):
        B = _resize(images[s:s + chunk], side).reshape(-1, N) > t
        parts.append(sp.csr_matrix(B, dtype=np.float32))
    Y = sp.vstack(parts, format="csr", dtype=np.float32)
    return {"indptr": Y.indptr.astype(np.int64), "indices": Y.indices.astype(np.int32),
            "data": Y.data.astype(np.float32), "shape": np.array(Y.shape), "threshold": np.array(t)}


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


def make_network(N: int, L: int, Y0: sp.csr_matrix, seed: int = 0, bias: Optional[float] = None,
                 ymax: float = YMAX, progress=None, name: str = "") -> Network:
    return Network(name=name or f"radixnet-{N}-l{L}", N=N, bias=BIAS[N] if bias is None else bias, ymax=ymax,
                   layers=network_layers(N, L, seed, progress), Y0=Y0, golden=None,
                   meta={"generator": "radixnet", "seed": seed})
