"""Block-circulant layers on the CPU: the independent float64 reference (dense circulant matrices)
and the NumPy FFT implementation used as the CPU backend.

Conventions (the paper's equations, with the product order and conjugates fixed so that they
match a dense circulant matrix): a weight is a p x q grid of k x k circulant blocks, block (i, j) defined
by its FIRST COLUMN ``w[i, j]``: ``block[m, l] = w[i, j, (m - l) mod k]``. Shapes:
``w (p, q, k)``, input ``x (n, q*k)``, output ``a (n, p*k)``, bias ``(p*k,)``.

    forward       a[b, i]  = irfft( sum_j rfft(w[i, j]) * rfft(x[b, j]) ) + bias[i]
    weight grad   dw[i, j] = irfft( sum_b rfft(g[b, i]) * conj(rfft(x[b, j])) )
    input grad    dx[b, j] = irfft( sum_i rfft(g[b, i]) * conj(rfft(w[i, j])) )

Conv layers go through im2col with (kh, kw, c) column order, c innermost, NHWC tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np

# ------------------------------------------------------------------------------- dense reference


def dense_weight(w: np.ndarray) -> np.ndarray:
    """(p, q, k) defining vectors -> the dense (p*k, q*k) float64 matrix."""
    p, q, k = w.shape
    m = np.arange(k)[:, None]
    l = np.arange(k)[None, :]
    idx = (m - l) % k                                      # (k, k)
    blocks = np.asarray(w, np.float64)[:, :, idx]          # (p, q, k, k): [i, j, m, l]
    return blocks.transpose(0, 2, 1, 3).reshape(p * k, q * k)


def project_blocks(dW: np.ndarray, p: int, q: int, k: int) -> np.ndarray:
    """Gradient of a dense (p*k, q*k) matrix -> gradient of the defining vectors (p, q, k):
    dw[i, j, s] = sum over (m, l) with (m - l) mod k == s of dW block (i, j)[m, l]."""
    blocks = dW.reshape(p, k, q, k).transpose(0, 2, 1, 3)  # [i, j, m, l]
    m = np.arange(k)[None, :]
    t = np.arange(k)[:, None]
    return blocks[:, :, m, (m - t) % k].sum(axis=-1)        # [i, j, t, m] summed over m


def fc_reference(x, w, bias, g) -> Dict[str, np.ndarray]:
    """float64 forward + both gradients from the dense matrix."""
    p, q, k = w.shape
    W = dense_weight(w)
    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    return {
        "a": x64 @ W.T + np.asarray(bias, np.float64),
        "dw": project_blocks(g64.T @ x64, p, q, k),
        "dx": g64 @ W,
        "db": g64.sum(axis=0),
    }


# --------------------------------------------------------------------------------- FFT (NumPy)


def fc_forward_fft(x, w, bias, xp=np):
    n = x.shape[0]
    p, q, k = w.shape
    xf = xp.fft.rfft(x.reshape(n, q, k), axis=-1)
    wf = xp.fft.rfft(w, axis=-1)
    af = xp.einsum("bjf,ijf->bif", xf, wf)
    a = xp.fft.irfft(af, n=k, axis=-1).reshape(n, p * k) + bias
    return a.astype(x.dtype, copy=False), xf, wf


def fc_backward_fft(g, xf, wf, k, xp=np):
    n = g.shape[0]
    p, q = wf.shape[:2]
    gf = xp.fft.rfft(g.reshape(n, p, k), axis=-1)
    dw = xp.fft.irfft(xp.einsum("bif,bjf->ijf", gf, xp.conj(xf)), n=k, axis=-1)
    dx = xp.fft.irfft(xp.einsum("bif,ijf->bjf", gf, xp.conj(wf)), n=k, axis=-1).reshape(n, q * k)
    return dw.astype(g.dtype, copy=False), dx.astype(g.dtype, copy=False), g.sum(axis=0)


def fc_fft(x, w, bias, g, xp=np) -> Dict[str, np.ndarray]:
    a, xf, wf = fc_forward_fft(x, w, bias, xp)
    dw, dx, db = fc_backward_fft(g, xf, wf, w.shape[2], xp)
    return {"a": a, "dw": dw, "dx": dx, "db": db}


# ---------------------------------------------------------------------------------- conv, im2col


@dataclass(frozen=True)
class ConvShape:
    n: int
    h: int
    w: int
    c: int
    cout: int
    kh: int = 3
    kw: int = 3
    pad: int = 1
    stride: int = 1

    @property
    def ho(self) -> int:
        return (self.h + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def wo(self) -> int:
        return (self.w + 2 * self.pad - self.kw) // self.stride + 1

    @property
    def rows(self) -> int:          # the "batch" of the im2col GEMM
        return self.n * self.ho * self.wo

    @property
    def cols(self) -> int:          # q * k
        return self.kh * self.kw * self.c


def im2col(x: np.ndarray, s: ConvShape) -> np.ndarray:
    """(n, h, w, c) -> (n*ho*wo, kh*kw*c), column order (kh, kw, c)."""
    xp_ = np.pad(x, ((0, 0), (s.pad, s.pad), (s.pad, s.pad), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(xp_, (s.kh, s.kw), axis=(1, 2))   # (n, ., ., c, kh, kw)
    win = win[:, :s.stride * s.ho:s.stride, :s.stride * s.wo:s.stride]
    return win.transpose(0, 1, 2, 4, 5, 3).reshape(s.rows, s.cols)


def col2im(cols: np.ndarray, s: ConvShape) -> np.ndarray:
    """Adjoint of im2col: (n*ho*wo, kh*kw*c) -> (n, h, w, c), overlapping taps summed."""
    c6 = cols.reshape(s.n, s.ho, s.wo, s.kh, s.kw, s.c)
    out = np.zeros((s.n, s.h + 2 * s.pad, s.w + 2 * s.pad, s.c), cols.dtype)
    for i in range(s.kh):
        for j in range(s.kw):
            out[:, i:i + s.stride * s.ho:s.stride, j:j + s.stride * s.wo:s.stride, :] += c6[:, :, :, i, j, :]
    return out[:, s.pad:s.pad + s.h, s.pad:s.pad + s.w, :]


def conv_reference(x, w, bias, g, s: ConvShape) -> Dict[str, np.ndarray]:
    cols = im2col(np.asarray(x, np.float64), s)
    r = fc_reference(cols, w, bias, np.asarray(g, np.float64).reshape(s.rows, s.cout))
    return {"a": r["a"].reshape(s.n, s.ho, s.wo, s.cout), "dw": r["dw"],
            "dx": col2im(r["dx"], s), "db": r["db"]}


def conv_fft(x, w, bias, g, s: ConvShape) -> Dict[str, np.ndarray]:
    cols = im2col(x, s)
    r = fc_fft(cols, w, bias, g.reshape(s.rows, s.cout))
    return {"a": r["a"].reshape(s.n, s.ho, s.wo, s.cout), "dw": r["dw"], "dx": col2im(r["dx"], s), "db": r["db"]}


# ------------------------------------------------------------------------------------- shapes


def blocks(out_features: int, in_features: int, k: int) -> Tuple[int, int, int, int]:
    """(p, q, padded_out, padded_in): pad each side up to a multiple of k with zeros."""
    p = -(-out_features // k)
    q = -(-in_features // k)
    return p, q, p * k, q * k
