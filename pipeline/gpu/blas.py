"""Direct cuBLAS GEMMs on CuPy arrays, on the current stream, capturable in a CUDA graph.

CuPy's ``matmul`` refuses to run while a stream is being captured, so the dense baselines call
cuBLAS here instead (same handle, same library). Row-major ``out = op(a) @ op(b)`` is computed as
the column-major ``out^T = op(b)^T op(a)^T``. ``precision``: ``fp32`` (strict) or ``tf32``
(tensor cores, 10-bit mantissa operands).
"""
from __future__ import annotations

import numpy as np

_TF32_MATH = 3   # CUBLAS_TF32_TENSOR_OP_MATH (cublas_api.h); not exported by every CuPy
_ONE32 = np.ones(1, np.float32)
_ZERO32 = np.zeros(1, np.float32)
_ONE64C = np.ones(1, np.complex64)
_ZERO64C = np.zeros(1, np.complex64)


def _handle(precision: str):
    import cupy
    from cupy_backends.cuda.libs import cublas
    h = cupy.cuda.device.get_cublas_handle()
    cublas.setStream(h, cupy.cuda.get_current_stream().ptr)
    cublas.setMathMode(h, _TF32_MATH if precision == "tf32" else cublas.CUBLAS_DEFAULT_MATH)
    return h, cublas


def _dims(a, b, trans_a: bool, trans_b: bool):
    ra, ca = a.shape[-2:]
    rb, cb = b.shape[-2:]
    m, k = (ca, ra) if trans_a else (ra, ca)
    k2, n = (cb, rb) if trans_b else (rb, cb)
    if k != k2:
        raise ValueError(f"matmul shapes do not agree: {a.shape}{'^T' if trans_a else ''} @ {b.shape}{'^T' if trans_b else ''}")
    return m, n, k


def sgemm(a, b, out, trans_a: bool = False, trans_b: bool = False, precision: str = "fp32"):
    """out (m, n) float32 = op(a) @ op(b); all C-contiguous CuPy arrays."""
    m, n, k = _dims(a, b, trans_a, trans_b)
    if out.shape != (m, n):
        raise ValueError(f"out has shape {out.shape}, expected {(m, n)}")
    h, cublas = _handle(precision)
    opa = cublas.CUBLAS_OP_T if trans_a else cublas.CUBLAS_OP_N
    opb = cublas.CUBLAS_OP_T if trans_b else cublas.CUBLAS_OP_N
    try:
        cublas.sgemm(h, opb, opa, n, m, k, _ONE32.ctypes.data, b.data.ptr, b.shape[1], a.data.ptr, a.shape[1],
                     _ZERO32.ctypes.data, out.data.ptr, n)
    finally:
        cublas.setMathMode(h, cublas.CUBLAS_DEFAULT_MATH)
    return out


def cgemm_batched(a, b, out, trans_a: bool = False, trans_b: bool = False):
    """out[i] (m, n) complex64 = op(a[i]) @ op(b[i]) for C-contiguous 3-D CuPy arrays (strict fp32)."""
    m, n, k = _dims(a, b, trans_a, trans_b)
    batch = a.shape[0]
    h, cublas = _handle("fp32")
    opa = cublas.CUBLAS_OP_T if trans_a else cublas.CUBLAS_OP_N
    opb = cublas.CUBLAS_OP_T if trans_b else cublas.CUBLAS_OP_N
    cublas.cgemmStridedBatched(h, opb, opa, n, m, k, _ONE64C.ctypes.data,
                               b.data.ptr, b.shape[2], b.shape[1] * b.shape[2],
                               a.data.ptr, a.shape[2], a.shape[1] * a.shape[2],
                               _ZERO64C.ctypes.data, out.data.ptr, n, m * n, batch)
    return out
