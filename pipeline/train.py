"""The training harness: epochs of several trainers on the same data, timed the same way, evaluated
after every epoch, with one progress bar, per-epoch series and speedups from the same run.

A trainer (one a variant) is any object with

* ``name`` (the variant) and ``kind`` (``"ours"`` or ``"baseline"``);
* ``epoch(index, progress)``: one training epoch; it calls ``progress(n)`` after ``n`` samples and
  should not wait for the device at the end (the harness does, inside the timed interval); with
  ``fit(parts=p)``, p > 1, it is called as ``epoch(index, progress, part=j, parts=p)`` for j = 0 ..
  p - 1 and trains the j-th of p consecutive slices of the epoch (the p slices: the same updates
  as the whole epoch, in the same order);
* ``evaluate() -> dict``: metrics on the held-out split (not timed as training);
* optionally ``stats() -> dict``: numbers about the epoch just trained (loss, ``phase/<name>`` ms,
  anything else), read after the epoch's timer stopped (with parts: after its last part, about the
  whole epoch);
* optionally ``part_stats() -> dict``: with parts, numbers about the part just trained (e.g. its
  device time, a clock for :func:`time_to_target`), read after every part;
* optionally ``work_per_epoch`` (samples, for the progress bar) and ``steps_per_epoch``;
* with ``fit(keep=)``: ``params()`` (the parameters; ``fit`` keeps a deep copy) and
  ``set_params(params)`` (puts them back).

An entry of ``trainers`` may also be a zero-argument callable that builds the trainer: it is called
when its turn comes and dropped after, so only one trainer's (device) memory is held at a time.

:func:`fit` times each epoch with :class:`pipeline.timing.Interval` (CUDA events on the GPU,
``perf_counter`` on the CPU) and returns one :class:`History` per trainer; :class:`Patience` is
early stopping with patience. Speedups from the histories: :func:`pipeline.timing.speedups`.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from pipeline.timing import Interval

OURS, BASELINE = "ours", "baseline"


@dataclass
class History:
    """Per-epoch records of one trainer: ``epoch_ms`` (timed training), ``wall_ms``, ``time_s``
    (cumulative training time, evaluation excluded), ``eval_ms``, then whatever ``stats()`` and
    ``evaluate()`` returned. ``stopped`` says why training ended before ``epochs`` (or "").
    ``parts``: with ``fit(parts=p)``, p > 1, one record per evaluation, p an epoch, with the part's
    durations under the same keys (``epoch_ms``, ``wall_ms``, ``part_stats()``'s), ``epoch`` its
    position in epochs (1.25: a quarter into the second), ``time_s``, ``eval_ms`` and ``evaluate()``'s
    metrics; empty otherwise. An epoch's record then sums its parts' times and holds the evaluation
    after its last part. ``best``: with ``fit(keep=)``, the epoch (1-based) whose parameters the
    trainer ended with (0: no rule, the last); ``final``: ``evaluate()`` after those parameters were
    put back (empty when the last epoch was kept)."""
    name: str
    kind: str
    records: List[Dict[str, float]] = field(default_factory=list)
    stopped: str = ""
    parts: List[Dict[str, float]] = field(default_factory=list)
    best: int = 0
    final: Dict[str, float] = field(default_factory=dict)

    @property
    def epochs(self) -> int:
        return len(self.records)

    @property
    def kept_epoch(self) -> int:
        """The epoch whose parameters the trainer ended with: ``best``, else the last."""
        return self.best or self.epochs

    def kept(self, key: str, default: float = math.nan) -> float:
        """``key`` of the parameters the trainer ended with: the evaluation after they were put back
        (``final``), else the kept epoch's record (the last epoch's without a keep rule)."""
        if key in self.final:
            return float(self.final[key])
        if self.best and self.records:
            return float(self.records[self.best - 1].get(key, default))
        return self.last(key, default)

    @property
    def evals(self) -> List[Dict[str, float]]:
        """The record of every evaluation: the parts when evaluated several times an epoch, else the epochs."""
        return self.parts or self.records

    def series(self, key: str) -> List[float]:
        return [float(r.get(key, math.nan)) for r in self.records]

    def keys(self) -> List[str]:
        return list(dict.fromkeys(k for r in self.records for k in r))

    def last(self, key: str, default: float = math.nan) -> float:
        return float(self.records[-1].get(key, default)) if self.records else default

    def median(self, key: str) -> float:
        vals = [v for v in self.series(key) if not math.isnan(v)]
        return float(np.median(vals)) if vals else math.nan


def _floats(d: Dict[str, Any]) -> Dict[str, float]:
    return {k: float(v) for k, v in d.items()}


def _evaluated(tr) -> Dict[str, float]:
    """``tr.evaluate()``'s metrics, then ``eval_ms``: the time it took (not training time)."""
    t0 = time.perf_counter()
    out = _floats(tr.evaluate())
    out["eval_ms"] = (time.perf_counter() - t0) * 1e3
    return out


@dataclass
class Patience:
    """Early stopping with patience on a validation metric, and the epoch to keep. An epoch improves
    when its ``key`` beats the best before it by more than ``min_delta`` (lower for ``mode="min"``,
    higher for ``"max"``; a non-finite value never does); the rule (``stop=`` of :func:`fit`) ends
    training once ``patience`` epochs in a row did not, with a reason that starts with
    ``"converged"`` (``"no finite"`` when no epoch had a finite value). :meth:`best` (``keep=`` of
    :func:`fit`) is the epoch with the best value (the first of equals), whether or not it beat the
    one before by ``min_delta``."""
    key: str = "val_loss"
    mode: str = "min"
    patience: int = 5
    min_delta: float = 0.0

    def __post_init__(self):
        if self.mode not in ("min", "max"):
            raise ValueError(f"Patience.mode must be 'min' or 'max', not {self.mode!r}")
        if int(self.patience) < 1:
            raise ValueError(f"Patience.patience must be at least 1, not {self.patience!r}")

    def _scan(self, history: History, delta: float) -> int:
        """The last epoch (1-based) whose value beat the best before it by more than ``delta``; 0: none finite."""
        best, at = math.nan, 0
        sign = 1.0 if self.mode == "min" else -1.0
        for i, v in enumerate(history.series(self.key)):
            if math.isfinite(v) and (not at or sign * (best - v) > delta):
                best, at = v, i + 1
        return at

    def best(self, history: History) -> int:
        """The epoch with the best finite value (the first of equals); 0 when there is none."""
        return self._scan(history, 0.0)

    def __call__(self, history: History) -> str:
        last = self._scan(history, self.min_delta)       # the last epoch that improved
        since = history.epochs - last
        if since < self.patience:
            return ""
        if not last:
            return f"no finite {self.key} in {since} epoch(s) (patience {self.patience})"
        return (f"converged: no {'lower' if self.mode == 'min' else 'higher'} {self.key} by more than "
                f"{self.min_delta:g} in the {since} epoch(s) after epoch {last} (patience {self.patience})")


def fit(ctx, trainers: Sequence[Any], epochs: int, *, stop: Optional[Callable[[History], str]] = None,
        watch: Sequence[str] = ("loss",), desc: str = "", work_per_epoch: int = 0,
        after: Optional[Callable[[Any], None]] = None,
        on_epoch: Optional[Callable[[Any, Dict[str, float]], None]] = None, parts: int = 1,
        keep: Optional[Callable[[History], int]] = None) -> Dict[str, History]:
    """Train every trainer for ``epochs`` epochs, one after the other, and evaluate after each.

    ``stop(history) -> reason`` (empty: go on) ends a trainer early; a non-finite value of any
    ``watch`` key (default: the loss) ends it too (``stopped = "non-finite loss"``).
    ``work_per_epoch``: samples an epoch of each trainer for the bar when trainers are built
    lazily (else read from the trainers). ``after(trainer)`` runs when a trainer is done;
    ``on_epoch(trainer, record)`` after each epoch's record is complete (e.g. to log it live).
    ``parts`` > 1: each epoch is trained as that many slices (see the module's docstring), each timed
    and evaluated (:attr:`History.parts`); the epoch's record, the stop rules and the watch keys
    stay per epoch. ``keep(history) -> epoch`` (1-based; 0: none), asked after every epoch: when it
    names the epoch just trained, a deep copy of the trainer's ``params()`` is kept; when the trainer
    is done and it names an earlier epoch, ``set_params()`` puts that copy back and ``evaluate()``
    runs again (:attr:`History.best`, :attr:`History.final`)."""
    parts = max(1, int(parts))
    built = [t for t in trainers if not callable(t) or hasattr(t, "epoch")]
    work = (work_per_epoch * len(trainers) if work_per_epoch else
            sum(int(getattr(t, "work_per_epoch", 0) or 0) for t in built)) * epochs
    bar = ctx.progress(iter(()), desc=desc or "train", total=work or len(trainers) * epochs)
    out: Dict[str, History] = {}
    try:
        for entry in trainers:
            tr = entry if hasattr(entry, "epoch") else entry()
            hist = out[tr.name] = History(tr.name, tr.kind)
            if keep is not None and not (hasattr(tr, "params") and hasattr(tr, "set_params")):
                raise TypeError(f"fit(keep=...): trainer {tr.name!r} has no params()/set_params()")
            kept = (0, None)          # (epoch, a copy of its params) with keep
            per_sample = bool(getattr(tr, "work_per_epoch", 0))
            advance = bar.update if per_sample else (lambda n: None)
            total_s = 0.0
            for e in range(epochs):
                ms = wall = eval_ms = 0.0
                for j in range(parts):
                    clock = Interval(ctx.backend)
                    w0 = time.perf_counter()
                    clock.start()
                    if parts == 1:
                        tr.epoch(e, advance)
                    else:
                        tr.epoch(e, advance, part=j, parts=parts)
                    part_ms = clock.stop()
                    part_wall = (time.perf_counter() - w0) * 1e3
                    ms += part_ms
                    wall += part_wall
                    if parts > 1:       # the part's record: its times, then its evaluation (untimed)
                        prec = {"epoch": e + (j + 1) / parts, "epoch_ms": part_ms, "wall_ms": part_wall}
                        if hasattr(tr, "part_stats"):
                            prec.update(_floats(tr.part_stats()))
                        prec["time_s"] = total_s + ms / 1e3
                        evaluation = _evaluated(tr)
                        prec.update(evaluation)
                        eval_ms += evaluation["eval_ms"]
                        hist.parts.append(prec)
                rec: Dict[str, float] = {"epoch": e + 1, "epoch_ms": ms, "wall_ms": wall}
                if hasattr(tr, "stats"):
                    rec.update(_floats(tr.stats()))
                steps = getattr(tr, "steps_per_epoch", 0)
                if steps:
                    rec["step_ms"] = ms / steps
                total_s += ms / 1e3
                rec["time_s"] = total_s
                if parts == 1:
                    rec.update(_evaluated(tr))
                else:                       # the evaluation after the last part: the epoch's
                    rec.update(evaluation)
                    rec["eval_ms"] = eval_ms
                hist.records.append(rec)
                if on_epoch is not None:
                    on_epoch(tr, rec)
                if keep is not None and keep(hist) == hist.epochs:
                    kept = (hist.epochs, copy.deepcopy(tr.params()))
                if not per_sample:
                    bar.update(1)
                shown = {k: f"{rec[k]:.4g}" for k in list(watch) + ["p@1"] if k in rec}
                if hasattr(bar, "set_postfix"):
                    bar.set_postfix(variant=tr.name, epoch=e + 1, **shown)
                if not all(math.isfinite(float(rec[k])) for k in watch if k in rec):
                    hist.stopped = f"non-finite {'/'.join(watch)}"
                elif stop:
                    hist.stopped = stop(hist) or ""
                if hist.stopped:
                    break
            if per_sample and hist.epochs < epochs:
                bar.update(int(tr.work_per_epoch) * (epochs - hist.epochs))
            if keep is not None:
                hist.best = kept[0]
                if 0 < hist.best < hist.epochs:
                    tr.set_params(kept[1])
                    hist.final = _floats(tr.evaluate())
            del kept
            if after is not None:
                after(tr)
            del tr
    finally:
        if hasattr(bar, "close"):
            bar.close()
    return out


def time_to_target(history: History, target: float, key: str = "val_loss",
                   clocks: Sequence[str] = ("epoch_ms",), higher_is_better: bool = False) -> Dict[str, float]:
    """Time to quality: the first evaluation (:attr:`History.evals`: after every epoch, or after every
    part with ``fit(parts=p)``) at which ``key`` is at most ``target`` (at least, with
    ``higher_is_better``: an accuracy), and the time the trainer had
    spent by then on each clock (a duration key of the records, summed over the epochs or parts up
    to and including that one). Returns ``{"epochs": e, <clock>: total, ...}``, e the evaluation's
    position in epochs (its ``epoch``: a whole number, or a multiple of 1/p with parts); all NaN when
    the target was never reached (or is NaN)."""
    out = {"epochs": math.nan, **{c: math.nan for c in clocks}}
    if not math.isfinite(float(target)):
        return out
    totals = dict.fromkeys(clocks, 0.0)
    for i, rec in enumerate(history.evals):
        for c in clocks:
            totals[c] += float(rec.get(c, math.nan))
        v = float(rec.get(key, math.nan))
        if math.isfinite(v) and (v >= target if higher_is_better else v <= target):
            out["epochs"] = float(rec.get("epoch", i + 1))
            out.update(totals)
            return out
    return out
