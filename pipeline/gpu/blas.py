"""Direct cuBLAS GEMMs on CuPy arrays, on the current stream, capturable in a CUDA graph.

CuPy's ``matmul`` (and its cuBLAS wrappers) refuse to run while a stream is being captured, so the
dense baselines call the cuBLAS library CuPy has loaded through ctypes, with CuPy's handle. Row-major ``out = op(a) @ op(b)`` is computed as
the column-major ``out^T = op(b)^T op(a)^T``. ``precision``: ``fp32`` (strict) or ``tf32``
(tensor cores, 10-bit mantissa operands).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

_TF32_MATH = 3   # CUBLAS_TF32_TENSOR_OP_MATH (cublas_api.h); not exported by every CuPy
_ONE32 = np.ones(1, np.float32)
_ZERO32 = np.zeros(1, np.float32)
_ONE64C = np.ones(1, np.complex64)
_ZERO64C = np.zeros(1, np.complex64)


_handles: dict = {}      # side-stream pointer -> its own cuBLAS handle (see _handle)
OP_N, OP_T = 0, 1
DEFAULT_MATH = 0


@functools.cache
def _cublas():
    """The libcublas CuPy loaded (found in this process's memory map), as a ctypes library."""
    import cupy
    cupy.cuda.device.get_cublas_handle()       # makes CuPy load and initialise cuBLAS
    path = None
    with open("/proc/self/maps") as f:
        for line in f:
            name = line.split()[-1]
            if "/libcublas.so" in name:
                path = name
                break
    lib = ctypes.CDLL(path or "libcublas.so")
    vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasSgemm_v2.argtypes = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
    lib.cublasCgemmStridedBatched.argtypes = [vp, i, i, i, i, i, vp, vp, i, ll, vp, i, ll, vp, vp, i, ll, i]
    lib.cublasCgemm3mStridedBatched.argtypes = lib.cublasCgemmStridedBatched.argtypes
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSetMathMode.argtypes = [vp, i]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        from pipeline.errors import GpuError
        raise GpuError(f"{what} failed with cuBLAS status {rc}")


def _handle(precision: str):
    """A handle bound to CuPy's current stream: CuPy's own, except on the side streams of
    :func:`pipeline.gpu.graphs.parallel`, which get one each (GEMMs running concurrently must not
    share a handle's workspace; the eager warm-up creates them, outside any capture)."""
    import cupy
    from pipeline.gpu.graphs import side_stream_ptrs
    lib = _cublas()
    sp = cupy.cuda.get_current_stream().ptr
    if sp not in side_stream_ptrs():
        h = ctypes.c_void_p(cupy.cuda.device.get_cublas_handle())
    else:
        h = _handles.get(sp)
        if h is None:
            h = ctypes.c_void_p()
            _check(lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
            _handles[sp] = h
    _check(lib.cublasSetStream_v2(h, ctypes.c_void_p(sp)), "cublasSetStream")
    _check(lib.cublasSetMathMode(h, _TF32_MATH if precision == "tf32" else DEFAULT_MATH), "cublasSetMathMode")
    return h, lib


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
    h, lib = _handle(precision)
    try:
        _check(lib.cublasSgemm_v2(h, OP_T if trans_b else OP_N, OP_T if trans_a else OP_N, n, m, k,
                                  _ONE32.ctypes.data, b.data.ptr, b.shape[1], a.data.ptr, a.shape[1],
                                  _ZERO32.ctypes.data, out.data.ptr, n), "cublasSgemm")
    finally:
        lib.cublasSetMathMode(h, DEFAULT_MATH)
    return out


_CUDA_C_32F = 4                      # cudaDataType (library_types.h)
_COMPUTE_32F_FAST_TF32 = 77          # cublasComputeType_t (cublas_api.h)
_GEMM_DEFAULT = -1                   # cublasGemmAlgo_t


def _cgemm_tf32(h, lib, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, out, ldc, sc, batch) -> None:
    """cublasGemmStridedBatchedEx over complex64 with TF32 tensor-core compute (column-major args)."""
    fn = lib.cublasGemmStridedBatchedEx
    if fn.argtypes is None:
        vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        fn.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i]
    _check(fn(h, ta, tb, m, n, k, _ONE64C.ctypes.data, a, _CUDA_C_32F, lda, sa, b, _CUDA_C_32F, ldb, sb,
              _ZERO64C.ctypes.data, out, _CUDA_C_32F, ldc, sc, batch, _COMPUTE_32F_FAST_TF32, _GEMM_DEFAULT),
           "cublasGemmStridedBatchedEx (complex, TF32)")


def cgemm_batched(a, b, out, trans_a: bool = False, trans_b: bool = False, gauss: bool = False,
                  precision: str = "fp32"):
    """out[i] (m, n) complex64 = op(a[i]) @ op(b[i]) for C-contiguous 3-D CuPy arrays (fp32;
    ``gauss``: cuBLAS's 3M algorithm, three real products per complex one instead of four;
    ``precision="tf32"``: tensor cores, operands rounded to TF32, fp32 accumulation)."""
    m, n, k = _dims(a, b, trans_a, trans_b)
    batch = a.shape[0]
    h, lib = _handle("fp32")
    if precision == "tf32":
        _cgemm_tf32(h, lib, OP_T if trans_b else OP_N, OP_T if trans_a else OP_N, n, m, k,
                    b.data.ptr, b.shape[2], b.shape[1] * b.shape[2], a.data.ptr, a.shape[2], a.shape[1] * a.shape[2],
                    out.data.ptr, n, m * n, batch)
        return out
    fn = lib.cublasCgemm3mStridedBatched if gauss else lib.cublasCgemmStridedBatched
    _check(fn(h, OP_T if trans_b else OP_N, OP_T if trans_a else OP_N, n, m, k,
              _ONE64C.ctypes.data, b.data.ptr, b.shape[2], b.shape[1] * b.shape[2],
              a.data.ptr, a.shape[2], a.shape[1] * a.shape[2],
              _ZERO64C.ctypes.data, out.data.ptr, n, m * n, batch), "cublasCgemmStridedBatched")
    return out
