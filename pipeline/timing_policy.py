"""What a timing is (median, interquartile range, minimum and count of samples in ms) and how many
samples the policy takes (``bench``: warm-up calls, at least ``min_repeats`` and ``min_time_ms``,
at most ``max_repeats``). Shared by the backend-neutral timers (:mod:`pipeline.timing`) and the
CUDA ones (:mod:`pipeline.gpu.timer`), below both."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np


@dataclass
class Timing:
    median_ms: float
    iqr_ms: float
    min_ms: float
    n: int

    @classmethod
    def of(cls, samples_ms: List[float]) -> "Timing":
        a = np.asarray(samples_ms, dtype=np.float64)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q3 - q1), float(a.min()), int(a.size))

    def __str__(self) -> str:
        return f"{self.median_ms:.4f} ms (IQR {self.iqr_ms:.4f}, n={self.n})"


def policy(bench):
    """(warmup, min_repeats, max_repeats, min_time_ms) of a ``bench`` config node."""
    return (int(bench.warmup), int(bench.min_repeats), int(bench.max_repeats), float(bench.min_time_ms))
