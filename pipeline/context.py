"""What a model sees of the world during a run: the resolved config, the backend actually used,
the size preset, the GPU (with its measured ceilings), timing, progress and the output folder."""
from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from omegaconf import DictConfig

from pipeline.errors import ConfigError
from pipeline.timing import Timing, timer_for


@dataclass
class Context:
    cfg: DictConfig
    backend: str                      # "cuda" | "cpu"
    size: str                         # "full" | "small"
    out_dir: Path
    device: Optional[object] = None   # pipeline.gpu.device.DeviceInfo
    peaks: Optional[object] = None    # pipeline.gpu.peaks.Peaks
    notices: List[str] = field(default_factory=list)
    # per-epoch values as they came: name -> [(step, value)]; epoch_sink (the runner's MLflow run)
    # receives each epoch at once, so that an interrupted run keeps the epochs it finished
    epochs: Dict[str, List[Tuple[int, float]]] = field(default_factory=dict)
    epoch_sink: Optional[Callable[[Dict[str, float], int], None]] = None

    @property
    def cuda(self) -> bool:
        return self.backend == "cuda"

    @property
    def xp(self):
        """numpy on the CPU backend, cupy on the GPU."""
        if self.cuda:
            import cupy
            return cupy
        import numpy
        return numpy

    def time(self, fn: Callable[[], object], stream=None) -> Timing:
        """Time ``fn``; on the GPU with events on ``stream`` (default: the legacy default stream),
        which must be the stream ``fn`` enqueues its work on."""
        if self.cuda:
            return timer_for("cuda")(fn, self.cfg.bench, stream=stream)
        return timer_for(self.backend)(fn, self.cfg.bench)

    def log_epoch(self, metrics: Dict[str, float], step: int) -> None:
        """Record one epoch's values (``{"train_loss": ..., "val_auc": ...}``, step = epoch index)
        as soon as they are known. Use the names the report's ``series`` will have: the runner
        logs them live and does not log those series again."""
        clean = {k: float(v) for k, v in metrics.items()
                 if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))}
        for k, v in clean.items():
            self.epochs.setdefault(k, []).append((int(step), v))
        if self.epoch_sink is not None and clean:
            self.epoch_sink(clean, int(step))

    def notice(self, msg: str) -> None:
        self.notices.append(msg)
        print(f"[pipeline] {msg}", file=sys.stderr, flush=True)

    def progress(self, it: Iterable, desc: str = "", total: Optional[int] = None, leave: bool = False):
        from tqdm.auto import tqdm
        return tqdm(it, desc=desc, total=total, leave=leave, disable=not self.cfg.progress,
                    file=sys.stderr, dynamic_ncols=True)

    def sync(self) -> None:
        if self.cuda:
            from pipeline.gpu import device
            device.synchronize()


def make_context(cfg: DictConfig, out_dir: Path) -> Context:
    from pipeline.gpu import device

    backend = cfg.backend.value if hasattr(cfg.backend, "value") else str(cfg.backend)
    size = cfg.size.value if hasattr(cfg.size, "value") else str(cfg.size)
    notices = []
    if backend == "auto":
        reason = device.why_unavailable()
        if reason is None:
            backend = "cuda"
        else:
            backend = "cpu"
            notices.append(f"no GPU ({reason}): running the NumPy reference backend")
    if size == "auto":
        size = "full" if backend == "cuda" else "small"
        if backend == "cpu":
            notices.append("CPU backend: using the small preset (size=small) so the run finishes in "
                           "seconds; pass size=full for the paper's sizes")
    if size == "small":
        from pipeline.config import apply_small_preset, replaced_by_small_preset
        given = replaced_by_small_preset(cfg)
        it = "it" if len(given) == 1 else "them"
        if given:
            notices.append(f"size=small: {' '.join(given)} not used (the small preset replaces {it}); "
                           f"pass size=full to use {it}")
        notices += [line for line in (apply_small_preset(cfg, g) for g in ("model", "dataset")) if line]
    ctx = Context(cfg=cfg, backend=backend, size=size, out_dir=out_dir)
    for n in notices:
        ctx.notice(n)
    if backend == "cuda":
        ctx.device = device.init(int(cfg.gpu))
        from pipeline.gpu import peaks
        ctx.peaks = peaks.get(cfg.cache_dir)
        ctx.notice(f"GPU {ctx.device.index}: {ctx.device.name} ({ctx.device.arch}, {ctx.device.sm_count} SMs); "
                   f"measured peaks: copy {ctx.peaks.copy_gbps:.0f} GB/s, fp32 {ctx.peaks.fp32_tflops:.1f} "
                   f"TFLOP/s, tf32 {ctx.peaks.tf32_tflops:.1f} TFLOP/s")
    elif size not in ("small", "full"):
        raise ConfigError(f"size={size!r} is not allowed: auto, full or small")
    return ctx
