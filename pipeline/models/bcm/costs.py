"""Cost models and the dense baseline's check of model=bcm, used by both the CPU variants
(``model.py``) and the GPU variants (``gpu.py``)."""
from __future__ import annotations

from typing import Dict

import numpy as np

from pipeline.bench import Case, Cost
from pipeline.models.bcm import reference as ref

TF32_TOL = 5e-3     # TF32 keeps 10 mantissa bits: ~1e-3 relative error is expected


def bcm_cost(case: Case) -> Cost:
    """Fewest bytes (inputs read once, outputs written once, float32) and the frequency-domain
    multiply-accumulate flops (8 per complex MAC, three passes) plus the FFTs (~2.5 k log2 k per
    real transform of length k)."""
    n, p, q, k = (case.params[s] for s in ("n", "p", "q", "k"))
    kf = k // 2 + 1
    elems = 2 * n * q * k + 2 * n * p * k + 2 * p * q * k + 2 * p * k   # x, dx, g, a, w, dw, bias, db
    macs = 3 * n * p * q * kf
    ffts = (2 * n * q + 2 * n * p + 2 * p * q) * 2.5 * k * np.log2(k)
    return Cost(bytes=4.0 * elems, flops=8.0 * macs + ffts)


def dense_cost(precision: str):
    def cost(case: Case) -> Cost:
        n, p, q, k = (case.params[s] for s in ("n", "p", "q", "k"))
        M, N = p * k, q * k
        return Cost(bytes=4.0 * (2 * n * N + 2 * n * M + 2 * M * N), flops=3 * 2.0 * n * M * N, precision=precision)
    return cost


def dense_check(outputs, expected) -> Dict[str, float]:
    """The dense layer returns the dense weight gradient: project it onto the circulant blocks
    (what the BCM layer's gradient is) and compare everything with the reference."""
    from pipeline.bench import compare, rel_error
    from pipeline.gpu.transfer import to_host
    errs = compare({k: outputs[k] for k in ("a", "dx", "db")}, {k: expected[k] for k in ("a", "dx", "db")})
    p, q, k = expected["dw"].shape
    dW = np.asarray(to_host(outputs["dW_dense"]), np.float64)
    errs["dw"] = rel_error(ref.project_blocks(dW, p, q, k), expected["dw"])
    return errs
