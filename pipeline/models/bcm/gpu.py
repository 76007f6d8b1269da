"""BCM on the GPU: our kernels (cuda/bcm/bcm.cu) for every variant of the paper and beyond, the
dense cuBLAS baselines, and the im2col path for conv layers. Device arrays are CuPy arrays; FFTs
are cuFFT through CuPy (as in the paper); plans are created in the untimed warm-up.

:class:`BcmLinear` is the reusable layer (forward caches FFT(X) and FFT(W) for the backward pass,
which reuses them): ``a = layer.forward(x, w, bias)``; ``dw, dx, db = layer.backward(g)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

from pipeline.bench import Case, Variant
from pipeline.gpu import blas, graphs, kernels
from pipeline.gpu.transfer import upload_all
from pipeline.models.bcm import reference as ref
from pipeline.models.bcm.costs import TF32_TOL, bcm_cost, dense_check, dense_cost
from pipeline.models.bcm.variants import BCM_KERNEL_NAMES

OURS = BCM_KERNEL_NAMES
DFT_FAMILY = ("dft", "dft3m", "rfft", "rfft_tf32")     # frequency-major spectra around batched CGEMMs
THREADS = 256
# bcm.cu's DFT_ROWS (rows a block), DFT_DR x DFT_DF and IDFT_DR (work a thread)
DFT_ROWS, DFT_DR, DFT_DF, IDFT_DR = 32, 2, 2, 4
# rfft.cu: the variants built on it, the block sizes its register FFTs are compiled for (others use
# bcm.cu's DFT kernels), RFFT_ROWS (rows = threads a block), the conv products' block and rows a thread
RFFT_VARIANTS = ("rfft", "rfft_tf32")
RFFT_KS = (8, 16, 32, 64)
RFFT_ROWS, CONV_THREADS, CONV_RU, WGRAD_THREADS = 64, 128, 2, 256


def _mod():
    return kernels.load("bcm", "bcm.cu")


def _k(name: str):
    sig = {
        "bcm_mul_full": "PPPiiiiiiiii",
        "bcm_sum_real": "PPPiiii",
        "bcm_reverse": "PPqi",
        "bcm_mul_o1": "PPPiiiiiiiii",
        "bcm_mul_o2": "PPPiiiiiiiii",
        "bcm_reduce": "PPiiiiii",
        "bcm_fused": "PPPiiiiiiiiiii",
        "bcm_tiled": "PPPiiiiiiiiiiii",
        "bcm_add_bias": "PPqi",
        "bcm_bias_grad": "PPii",
        "bcm_im2col": "PPiiiiiiiiii",
        "bcm_col2im": "PPiiiiiiiiii",
        "bcm_dft_rows": "PPii" * 3 + "PqPqii",
        "bcm_idft_rows": "PPiPii" * 3 + "ii",
    }[name]
    return _mod().kernel(name, sig)


def _rk(name: str):
    """A kernel of rfft.cu (its register FFTs, the gathered conv products)."""
    if name.startswith("bcm_rfft_rows_"):
        sig = "PPii" * 3 + "PqPq"
    elif name.startswith("bcm_irfft_rows_"):
        sig = "PPiPii" * 3
    elif name.startswith("bcm_conv_prod_v"):
        sig = "PPP" + "iiiii" + "qq" + "iii" + "i" * 9
    elif name.startswith("bcm_conv_wgrad_"):
        sig = "PPP" + "iiii" + "qq" + "iiii" + "i" * 9
    else:
        raise KeyError(name)
    return kernels.load("bcm", "rfft.cu").kernel(name, sig)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _dft_args(segs, zero, k):
    """Kernel arguments of a forward row-transform launch (``bcm_dft_rows`` / ``bcm_rfft_rows_<k>``):
    up to three (x, out, conj) row sets, then up to two arrays the same launch zeroes; and the most
    rows of a set."""
    args, rows_max = [], 0
    for i in range(3):
        if i < len(segs):
            x, out, conj = segs[i]
            rows = x.size // k
            args += [x, out, np.int32(rows), np.int32(conj)]
            rows_max = max(rows_max, rows)
        else:
            args += [0, 0, np.int32(0), np.int32(0)]
    for i in range(2):
        z = zero[i] if i < len(zero) else None
        args += [z if z is not None else 0, np.int64(z.size if z is not None else 0)]
    return args, rows_max


def _idft_args(segs, kf):
    """Kernel arguments of an inverse row-transform launch (``bcm_idft_rows`` / ``bcm_irfft_rows_<k>``):
    up to three (R, out, bias, bias row modulus, time-reversed) sets; and the most rows of a set."""
    args, rows_max = [], 0
    for i in range(3):
        if i < len(segs):
            R, out, bias, bmod, rev = segs[i]
            rows = R.size // kf
            args += [R, out, np.int32(rows), bias if bias is not None else 0, np.int32(bmod), np.int32(rev)]
            rows_max = max(rows_max, rows)
        else:
            args += [0, 0, np.int32(0), 0, np.int32(1), np.int32(0)]
    return args, rows_max


def _threads(units: int) -> int:
    """A block of at most THREADS threads, whole warps, for ``units`` work items."""
    return min(THREADS, 32 * _cdiv(units, 32))


@dataclass
class Pass:
    """Roles of one product R[u,v,f] = sum_s A[u,s,f] opB(B[v,s,f]) (see bcm.cu)."""
    U: int
    V: int
    S: int
    au: int
    as_: int
    bv: int
    bs: int
    conj: int


def passes(n: int, p: int, q: int, kf: int) -> Dict[str, Pass]:
    return {
        "fwd": Pass(U=n, V=p, S=q, au=q * kf, as_=kf, bv=q * kf, bs=kf, conj=0),   # A=Xf, B=Wf
        "dw": Pass(U=p, V=q, S=n, au=kf, as_=p * kf, bv=kf, bs=q * kf, conj=1),    # A=Gf, B=Xf
        "dx": Pass(U=n, V=q, S=p, au=p * kf, as_=kf, bv=kf, bs=q * kf, conj=1),    # A=Gf, B=Wf
    }


def add_bias(a, bias) -> None:
    R, C = a.shape
    _k("bcm_add_bias")((_cdiv(R * C, THREADS),), (THREADS,), a, bias, np.int64(R), np.int32(C))


def bias_grad(g, db) -> None:
    """db[c] = sum_r g[r, c] (db is overwritten)."""
    R, C = g.shape
    db.fill(0)
    rb = max(1, min(_cdiv(R, 8 * 16), 1024))
    _k("bcm_bias_grad")((_cdiv(C, 32), rb), (32, 8), g, db, np.int32(R), np.int32(C))


class BcmLinear:
    """A block-circulant FC layer on the GPU, computed by one of the paper's variants."""

    def __init__(self, p: int, q: int, k: int, variant: str = "tiled"):
        if variant not in OURS:
            raise ValueError(f"unknown BCM variant {variant!r}; one of {OURS}")
        if variant == "tiled" and k > 64:
            raise ValueError(f"the {variant} variant supports block_size <= 64 (k' * 16 threads per block)")
        self.p, self.q, self.k, self.variant = p, q, k, variant
        self.kf = k // 2 + 1
        self.gauss = variant == "dft3m"          # cuBLAS 3M complex GEMMs (3 real products, not 4)
        self.precision = "tf32" if variant == "rfft_tf32" else "fp32"    # of the CGEMMs
        self.reg_fft = variant in RFFT_VARIANTS and k in RFFT_KS         # rfft.cu's register FFTs
        self._bufs: Dict[Tuple, object] = {}
        from pipeline.gpu import device
        self.sms = device.info().sm_count

    # ------------------------------------------------------------------ buffers (NaN-poisoned)
    def _buf(self, name: str, shape, dtype):
        import cupy
        key = (name, tuple(shape), np.dtype(dtype).str)
        b = self._bufs.get(key)
        if b is None:
            b = cupy.full(shape, np.nan, dtype=dtype) if np.dtype(dtype).kind in "fc" else cupy.zeros(shape, dtype)
            self._bufs[key] = b
        return b

    def poison(self) -> None:
        """NaN-fill every persistent buffer (a kernel that skips an element then fails the check)."""
        for b in self._bufs.values():
            if b.dtype.kind in "fc":
                b.fill(np.nan)

    # ------------------------------------------------------------------------------- products
    def _product(self, tag: str, P: Pass, A, B):
        """R (U, V, k') complex64 for the frequency-domain variants."""
        kf = self.kf
        R = self._buf(f"R_{tag}", (P.U, P.V, kf), np.complex64)
        i32 = np.int32
        common = (i32(P.U), i32(P.V), i32(P.S), i32(kf), i32(P.au), i32(P.as_), i32(P.bv), i32(P.bs))
        v = self.variant
        if v == "fused":
            dr = max(1, 1024 // self.k)
            _k("bcm_fused")((_cdiv(P.V, dr), P.U), (kf, dr), A, B, R, *common, i32(P.V * kf), i32(kf), i32(P.conj))
        elif v == "tiled":
            tiles = _cdiv(P.V, 16) * _cdiv(P.U, 16)
            split = max(1, min(_cdiv(2 * self.sms, tiles), P.S // 16))
            sc = _cdiv(_cdiv(P.S, split), 4) * 4
            split = _cdiv(P.S, sc)
            if split > 1:
                R.fill(0)
            _k("bcm_tiled")((_cdiv(P.V, 16), _cdiv(P.U, 16), split), (kf * 16,), A, B, R, *common,
                            i32(P.V * kf), i32(kf), i32(P.conj), i32(sc), shared=2 * 16 * 4 * kf * 8)
        elif v in ("o1", "o2"):
            T = self._buf(f"T_{tag}", (P.U, P.V, P.S, kf), np.complex64)
            if v == "o1":
                nx = max(32, self.k)
                dr = max(1, 1024 // nx)
                _k("bcm_mul_o1")((_cdiv(P.S * kf, nx), _cdiv(P.V, dr), P.U), (nx, dr), A, B, T, *common,
                                 i32(P.conj), shared=nx * 8)
            else:
                dr = max(1, 1024 // self.k)
                _k("bcm_mul_o2")((P.S, _cdiv(P.V, dr), P.U), (kf, dr), A, B, T, *common, i32(P.conj), shared=kf * 8)
            _k("bcm_reduce")((P.V, P.U), (kf,), T, R, i32(P.U), i32(P.V), i32(P.S), i32(kf), i32(P.V * kf), i32(kf))
        else:
            raise AssertionError(v)
        return R

    def _baseline_pass(self, tag: str, P: Pass, A, B, bias=None):
        """Paper's baseline: full multiply, IFFT of every product, real-domain sum over s."""
        import cupy
        kf, k = self.kf, self.k
        T = self._buf(f"T_{tag}", (P.U, P.V, P.S, kf), np.complex64)
        i32 = np.int32
        _k("bcm_mul_full")((P.S, P.V, P.U), (kf,), A, B, T, i32(P.U), i32(P.V), i32(P.S), i32(kf),
                           i32(P.au), i32(P.as_), i32(P.bv), i32(P.bs), i32(0))
        Tr = cupy.fft.irfft(T, n=k, axis=-1)
        out = self._buf(f"out_{tag}", (P.U, P.V, k), np.float32)
        _k("bcm_sum_real")((P.V, P.U), (k,), Tr, bias if bias is not None else 0, out, i32(P.U), i32(P.V),
                           i32(P.S), i32(k))
        return out

    # ------------------------------------------- "dft": our DFTs around frequency-batched CGEMMs
    def _dft_rows(self, segs, zero=()):
        """Real DFT of up to three (input (rows, k) float32, output (k', rows) complex64, conj)
        row sets into frequency-major outputs; the same launch zeroes the arrays in ``zero``."""
        k, kf = self.k, self.kf
        if self.reg_fft:
            return self._rfft_rows(segs, zero)
        args, rows_max = _dft_args(segs, zero, k)
        threads = _threads(DFT_ROWS // DFT_DR * _cdiv(k // 4 + 1, DFT_DF))
        _k("bcm_dft_rows")((_cdiv(rows_max, DFT_ROWS), len(segs)), (threads,), *args, np.int32(k), np.int32(kf),
                           shared=(DFT_ROWS * (k + 1) + 2 * DFT_ROWS * (k // 2 + 1) + 2 * k) * 4)

    def _idft_rows(self, segs):
        """segs: (R (k', rows) complex64, out (rows, k) float32, bias or None, bias row modulus,
        time-reversed?)."""
        k, kf = self.k, self.kf
        if self.reg_fft:
            return self._irfft_rows(segs)
        args, rows_max = _idft_args(segs, kf)
        threads = _threads(DFT_ROWS // IDFT_DR * (k // 2))
        _k("bcm_idft_rows")((_cdiv(rows_max, DFT_ROWS), len(segs)), (threads,), *args, np.int32(k), np.int32(kf),
                            shared=(DFT_ROWS * (kf + 1) + k) * 8)

    def _rfft_rows(self, segs, zero=()):
        """rfft.cu's register FFT (one thread a row) with the arguments of :meth:`_dft_rows`."""
        args, rows_max = _dft_args(segs, zero, self.k)
        _rk(f"bcm_rfft_rows_{self.k}")((_cdiv(rows_max, RFFT_ROWS), len(segs)), (RFFT_ROWS,), *args)

    def _irfft_rows(self, segs):
        args, rows_max = _idft_args(segs, self.kf)
        _rk(f"bcm_irfft_rows_{self.k}")((_cdiv(rows_max, RFFT_ROWS), len(segs)), (RFFT_ROWS,), *args)

    def _forward_dft(self, x, w, bias):
        n, p, q, k, kf = self.n, self.p, self.q, self.k, self.kf
        self.xt = self._buf("xt", (kf, n, q), np.complex64)
        self.wt = self._buf("wt", (kf, p, q), np.complex64)
        self._dft_rows([(x, self.xt, 0), (w, self.wt, 0)])
        at = blas.cgemm_batched(self.xt, self.wt, self._buf("at", (kf, n, p), np.complex64), trans_b=True,
                                gauss=self.gauss, precision=self.precision)
        a = self._buf("a", (n, p * k), np.float32)
        self._idft_rows([(at, a, bias, p, 0)])
        return a

    def _backward_dft(self, g):
        n, p, q, k, kf = self.n, self.p, self.q, self.k, self.kf
        gc = self._buf("gc", (kf, n, p), np.complex64)          # conj(FFT(G)), frequency-major
        db = self._buf("db", (p * k,), np.float32)
        self._dft_rows([(g, gc, 1)], zero=[db])
        R, C = g.shape
        dwt, dxt, _ = graphs.parallel(       # the two products and the bias gradient run concurrently
            lambda: blas.cgemm_batched(gc, self.xt, self._buf("dwt", (kf, p, q), np.complex64), trans_a=True,
                                       gauss=self.gauss, precision=self.precision),
            lambda: blas.cgemm_batched(gc, self.wt, self._buf("dxt", (kf, n, q), np.complex64), gauss=self.gauss,
                                       precision=self.precision),
            lambda: _k("bcm_bias_grad")((_cdiv(C, 32), max(1, min(_cdiv(R, 8 * 16), 1024))), (32, 8), g, db,
                                        np.int32(R), np.int32(C)))
        dw = self._buf("dw", (p, q, k), np.float32)
        dx = self._buf("dx", (n, q * k), np.float32)
        self._idft_rows([(dwt, dw, None, 1, 1), (dxt, dx, None, 1, 1)])
        return dw, dx, db

    def _reverse(self, x, rows: int):
        y = self._buf(f"rev_{rows}", (rows, self.k), np.float32)
        _k("bcm_reverse")((_cdiv(rows * self.k, THREADS),), (THREADS,), x, y, np.int64(rows), np.int32(self.k))
        return y

    # -------------------------------------------------------------------------- forward/backward
    def forward(self, x, w, bias):
        """x (n, q*k), w (p, q, k), bias (p*k,) float32 CuPy arrays -> a (n, p*k)."""
        import cupy
        n = x.shape[0]
        p, q, k, kf = self.p, self.q, self.k, self.kf
        self.n, self.x, self.w = n, x, w
        if self.variant in DFT_FAMILY:
            return self._forward_dft(x, w, bias)
        self.xf = cupy.fft.rfft(x.reshape(n, q, k), axis=-1)
        self.wf = cupy.fft.rfft(w, axis=-1)
        P = passes(n, p, q, kf)["fwd"]
        if self.variant == "baseline":
            return self._baseline_pass("fwd", P, self.xf, self.wf, bias).reshape(n, p * k)
        if self.variant == "cgemm":
            xt = cupy.ascontiguousarray(self.xf.transpose(2, 0, 1))      # (k', n, q)
            wt = cupy.ascontiguousarray(self.wf.transpose(2, 0, 1))      # (k', p, q)
            self.xt, self.wt = xt, wt
            af = blas.cgemm_batched(xt, wt, cupy.empty((kf, n, p), cupy.complex64), trans_b=True)  # (k', n, p)
            a = cupy.fft.irfft(af.transpose(1, 2, 0), n=k, axis=-1).reshape(n, p * k)
        else:
            R = self._product("fwd", P, self.xf, self.wf)
            a = cupy.fft.irfft(R, n=k, axis=-1).reshape(n, p * k)
        add_bias(a, bias)
        return a

    def backward(self, g):
        """g = dL/da (n, p*k) -> (dw (p, q, k), dx (n, q*k), db (p*k,))."""
        import cupy
        n, p, q, k, kf = self.n, self.p, self.q, self.k, self.kf
        if self.variant in DFT_FAMILY:
            return self._backward_dft(g)
        db = self._buf("db", (p * k,), np.float32)
        bias_grad(g, db)
        gf = cupy.fft.rfft(g.reshape(n, p, k), axis=-1)
        ps = passes(n, p, q, kf)
        if self.variant == "baseline":
            xr = cupy.fft.rfft(self._reverse(self.x.reshape(n * q, k), n * q).reshape(n, q, k), axis=-1)
            wr = cupy.fft.rfft(self._reverse(self.w.reshape(p * q, k), p * q).reshape(p, q, k), axis=-1)
            dw = self._baseline_pass("dw", ps["dw"], gf, xr)
            dx = self._baseline_pass("dx", ps["dx"], gf, wr).reshape(n, q * k)
            return dw, dx, db
        if self.variant == "cgemm":
            gt = cupy.ascontiguousarray(gf.transpose(2, 0, 1))           # (k', n, p)
            dw, dx = graphs.parallel(
                lambda: cupy.fft.irfft(blas.cgemm_batched(gt, cupy.conj(self.xt), cupy.empty((kf, p, q), cupy.complex64),
                                                          trans_a=True).transpose(1, 2, 0), n=k, axis=-1),
                lambda: cupy.fft.irfft(blas.cgemm_batched(gt, cupy.conj(self.wt), cupy.empty((kf, n, q), cupy.complex64))
                                       .transpose(1, 2, 0), n=k, axis=-1).reshape(n, q * k))
            return dw, dx, db
        dwR = self._product("dw", ps["dw"], gf, self.xf)
        dxR = self._product("dx", ps["dx"], gf, self.wf)
        dw = cupy.fft.irfft(dwR, n=k, axis=-1)
        dx = cupy.fft.irfft(dxR, n=k, axis=-1).reshape(n, q * k)
        return dw, dx, db


class BcmConv:
    """A block-circulant conv layer (NHWC, rfft variants) with no im2col: the spectra of x and g
    are taken once per pixel, and the products gather the kh x kw window from them inside the
    kernel (rfft.cu). Needs c and cout to be multiples of k. ``forward(x, w, bias)`` -> a (n, ho,
    wo, cout); ``backward(g)`` -> dw (p, q, k), dx (n, h, w, c), db (cout,)."""

    def __init__(self, s: ref.ConvShape, k: int, variant: str = "rfft"):
        if variant not in RFFT_VARIANTS:
            raise ValueError(f"BcmConv runs the {RFFT_VARIANTS} variants, not {variant!r}")
        if s.c % k or s.cout % k:
            raise ValueError(f"BcmConv needs c={s.c} and cout={s.cout} to be multiples of k={k}")
        self.s, self.k, self.kf = s, k, k // 2 + 1
        self.cq, self.p = s.c // k, s.cout // k
        self.q = s.kh * s.kw * self.cq
        self.lin = BcmLinear(self.p, self.q, k, variant)     # buffers and transforms
        self.poison = self.lin.poison
        self.geo = [np.int32(v) for v in (s.n, s.h, s.w, s.ho, s.wo, s.kh, s.kw, s.pad, s.stride)]

    def _prod(self, mode: int, P, Q, out, U: int, V: int, J: int, pf: int):
        s, i32 = self.s, np.int32
        vb = 4 if V <= 4 else 8
        taps = s.kh * s.kw
        qv, qj = (self.q, 1) if mode == 0 else (1, self.q)
        _rk(f"bcm_conv_prod_v{vb}")((_cdiv(U, CONV_THREADS * CONV_RU), self.kf, _cdiv(V, vb)), (CONV_THREADS,),
                                    P, Q, out, i32(U), i32(V), i32(J), i32(self.cq), i32(self.q),
                                    np.int64(pf), np.int64(self.p * self.q), i32(qv), i32(qj), i32(mode), *self.geo,
                                    shared=taps * J * vb * 8)
        return out

    def _wgrad(self, G, X, E):
        s, p, q, kf = self.s, self.p, self.q, self.kf
        U = s.rows
        p2, q2 = p + (p & 1), q + (q & 1)
        nmt = (p2 // 2) * (q2 // 2)                 # 2 x 2 micro-tiles of the (p, q) output
        if nmt >= WGRAD_THREADS:                    # up to 5 micro-tiles a thread, then more tiles
            mtt = 5 if nmt > WGRAD_THREADS else 1
            mtb, ng, tiles = WGRAD_THREADS, 1, _cdiv(nmt, WGRAD_THREADS * mtt)
        else:                                       # fewer: thread groups split the pixels
            mtt, mtb, ng, tiles = 1, nmt, WGRAD_THREADS // nmt, 1
        tr = next((t for t in (64, 32, 16, 8, 4, 2) if t * (p2 + q2) * 8 <= 48 * 1024), 1)
        chunks = max(1, min(_cdiv(U, tr), _cdiv(8 * self.lin.sms, kf * tiles)))
        chunk = _cdiv(_cdiv(U, chunks), tr) * tr
        shared = max(tr * (p2 + q2), (ng - 1) * mtb * 4) * 8
        i32 = np.int32
        _rk(f"bcm_conv_wgrad_{mtt}")((_cdiv(U, chunk), kf, tiles), (WGRAD_THREADS,), G, X, E, i32(p), i32(q), i32(self.cq),
                              i32(U), np.int64(U * p), np.int64(s.n * s.h * s.w * self.cq), i32(chunk), i32(tr),
                              i32(mtb), i32(ng), *self.geo, shared=shared)
        return E

    def forward(self, x, w, bias):
        L, s, kf, p = self.lin, self.s, self.kf, self.p
        rx, ro = s.n * s.h * s.w * self.cq, s.rows
        self.xf = L._buf("cxf", (kf, rx), np.complex64)
        self.wf = L._buf("wt", (kf, p * self.q), np.complex64)
        L._dft_rows([(x, self.xf, 0), (w, self.wf, 0)])
        af = self._prod(0, self.xf, self.wf, L._buf("caf", (kf, ro * p), np.complex64), ro, p, self.cq, rx)
        a = L._buf("a", (ro, p * self.k), np.float32)
        L._idft_rows([(af, a, bias, p, 0)])
        return a.reshape(s.n, s.ho, s.wo, s.cout)

    def backward(self, g):
        L, s, kf, p, q = self.lin, self.s, self.kf, self.p, self.q
        rx, ro = s.n * s.h * s.w * self.cq, s.rows
        gc = L._buf("cgc", (kf, ro * p), np.complex64)                 # conj(FFT(g)), frequency-major
        db = L._buf("db", (s.cout,), np.float32)
        dwf = L._buf("cdwf", (kf, p * q), np.complex64)
        L._dft_rows([(g, gc, 1)], zero=[db, dwf.view(np.float32)])
        g2 = g.reshape(ro, s.cout)
        R, C = g2.shape
        dwf, dxf, _ = graphs.parallel(
            lambda: self._wgrad(gc, self.xf, dwf),
            lambda: self._prod(1, gc, self.wf, L._buf("cdxf", (kf, rx), np.complex64), s.n * s.h * s.w, self.cq, p,
                               ro * p),
            lambda: _k("bcm_bias_grad")((_cdiv(C, 32), max(1, min(_cdiv(R, 8 * 16), 1024))), (32, 8), g2, db,
                                        np.int32(R), np.int32(C)))
        dw = L._buf("dw", (p, q, self.k), np.float32)
        dx = L._buf("cdx", (s.n, s.h, s.w, s.c), np.float32)
        L._idft_rows([(dwf, dw, None, 1, 1), (dxf, dx, None, 1, 1)])
        return dw, dx, db


class DenseLinear:
    """The dense baseline: the same layer as a (p*k, q*k) matrix, cuBLAS GEMMs in fp32 or tf32."""

    def __init__(self, W, precision: str = "fp32"):
        self.W = W
        self.precision = precision

    def forward(self, x, bias):
        import cupy
        self.x = x
        a = blas.sgemm(x, self.W, cupy.empty((x.shape[0], self.W.shape[0]), cupy.float32), trans_b=True,
                       precision=self.precision)
        add_bias(a, bias)
        return a

    def backward(self, g):
        import cupy
        dW = blas.sgemm(g, self.x, cupy.empty(self.W.shape, cupy.float32), trans_a=True, precision=self.precision)
        dx = blas.sgemm(g, self.W, cupy.empty(self.x.shape, cupy.float32), precision=self.precision)
        db = cupy.empty(g.shape[1], cupy.float32)
        bias_grad(g, db)
        return dW, dx, db


# ----------------------------------------------------------------------------------- im2col


def im2col(x, s: ref.ConvShape, out=None):
    import cupy
    cols = out if out is not None else cupy.empty((s.rows, s.cols), cupy.float32)
    total = s.rows * s.cols
    i32 = np.int32
    _k("bcm_im2col")((_cdiv(total, THREADS),), (THREADS,), x, cols, i32(s.n), i32(s.h), i32(s.w), i32(s.c),
                     i32(s.kh), i32(s.kw), i32(s.pad), i32(s.stride), i32(s.ho), i32(s.wo))
    return cols


def col2im(cols, s: ref.ConvShape, out=None):
    import cupy
    x = out if out is not None else cupy.empty((s.n, s.h, s.w, s.c), cupy.float32)
    total = s.n * s.h * s.w * s.c
    i32 = np.int32
    _k("bcm_col2im")((_cdiv(total, THREADS),), (THREADS,), cols, x, i32(s.n), i32(s.h), i32(s.w), i32(s.c),
                     i32(s.kh), i32(s.kw), i32(s.pad), i32(s.stride), i32(s.ho), i32(s.wo))
    return x


# ----------------------------------------------------------------------------- bench variants


def _build_bcm(variant: str):
    def build(case: Case, ctx):
        d = upload_all({k: v for k, v in case.inputs.items() if isinstance(v, np.ndarray)})
        p, q, k = case.inputs["w"].shape
        s: Optional[ref.ConvShape] = case.inputs.get("conv")
        if s and variant in RFFT_VARIANTS and s.c % k == 0 and s.cout % k == 0:
            conv = BcmConv(s, k, variant)              # the window gathered in the kernel: no im2col

            def run_conv():
                a = conv.forward(d["x"], d["w"], d["bias"])
                dw, dx, db = conv.backward(d["g"])
                return {"a": a, "dw": dw, "dx": dx, "db": db}
            run_conv.poison = conv.poison
            return run_conv
        layer = BcmLinear(p, q, k, variant)

        def run():
            x = im2col(d["x"], s) if s else d["x"]
            g = d["g"].reshape(s.rows, s.cout) if s else d["g"]
            a = layer.forward(x, d["w"], d["bias"])
            dw, dx, db = layer.backward(g)
            if s:
                return {"a": a.reshape(s.n, s.ho, s.wo, s.cout), "dw": dw, "dx": col2im(dx, s), "db": db}
            return {"a": a, "dw": dw, "dx": dx, "db": db}
        run.poison = layer.poison
        return run
    return build


def _build_dense(precision: str):
    def build(case: Case, ctx):
        import cupy
        d = upload_all({k: v for k, v in case.inputs.items() if isinstance(v, np.ndarray)})
        W = cupy.asarray(ref.dense_weight(case.inputs["w"]).astype(np.float32))
        layer = DenseLinear(W, precision)
        s: Optional[ref.ConvShape] = case.inputs.get("conv")

        def run():
            x = im2col(d["x"], s) if s else d["x"]
            g = d["g"].reshape(s.rows, s.cout) if s else d["g"]
            a = layer.forward(x, d["bias"])
            dW, dx, db = layer.backward(g)
            if s:
                return {"a": a.reshape(s.n, s.ho, s.wo, s.cout), "dW_dense": dW, "dx": col2im(dx, s), "db": db}
            return {"a": a, "dW_dense": dW, "dx": dx, "db": db}
        return run
    return build


def variants() -> Dict[str, Variant]:
    out = {v: Variant(v, "ours", _build_bcm(v), bcm_cost, graph=True,
                      tolerance=TF32_TOL if v == "rfft_tf32" else None) for v in OURS}
    out["dense_fp32"] = Variant("dense_fp32", "baseline", _build_dense("fp32"), dense_cost("fp32"),
                                check=dense_check, graph=True)
    out["dense_tf32"] = Variant("dense_tf32", "baseline", _build_dense("tf32"), dense_cost("tf32"),
                                tolerance=TF32_TOL, check=dense_check, graph=True)
    return out
