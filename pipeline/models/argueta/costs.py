"""Cost models of model=fewhot and model=softmax_topn (bytes a variant must move, flops it must do),
used by both the CPU variants (``model.py``) and the GPU variants (``gpu.py``)."""
from __future__ import annotations

from pipeline.bench import Case, Cost


def fewhot_cost(case: Case) -> Cost:
    L, M, N = (case.params[k] for k in ("L", "M", "N"))
    return Cost(bytes=4.0 * (L * N * M + L * M) + 8.0 * L * N, flops=2.0 * L * N * M)


def dense_cost(case: Case) -> Cost:
    L, K, M = (case.params[k] for k in ("L", "K", "M"))
    return Cost(bytes=4.0 * (L * K + K * M + L * M), flops=2.0 * L * K * M)


def topn_cost(case: Case) -> Cost:
    L, K, N = (case.params[k] for k in ("L", "K", "N"))
    return Cost(bytes=4.0 * L * K + 8.0 * L * N, flops=0.0)
