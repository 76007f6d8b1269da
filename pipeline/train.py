"""The training harness: epochs of several trainers on the same data, timed the same way, evaluated
after every epoch, with one progress bar, per-epoch series and speedups from the same run.

A trainer is any object with

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
``perf_counter`` on the CPU) and returns one :class:`History` per trainer (with ``parts`` > 1 it
times and evaluates each part, and an epoch's record sums its parts; with ``keep`` it ends each
trainer with the parameters of the epoch that ``keep`` names, e.g. :meth:`Patience.best`, the best
epoch of early stopping with patience); :func:`speedups` (the
same function as :func:`pipeline.timing.speedups`, which bench.measure uses) turns rows of a
results table into ``x_vs_<baseline>`` columns.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence

import numpy as np

from pipeline.timing import Interval

OURS, BASELINE = "ours", "baseline"


class Trainer(Protocol):
    name: str
    kind: str

    def epoch(self, index: int, progress: Callable[[int], None]) -> None: ...

    def evaluate(self) -> Dict[str, float]: ...


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
        out: Dict[str, None] = {}
        for r in self.records:
            out.update(dict.fromkeys(r))
        return list(out)

    def last(self, key: str, default: float = math.nan) -> float:
        return float(self.records[-1].get(key, default)) if self.records else default

    def median(self, key: str) -> float:
        vals = [v for v in self.series(key) if not math.isnan(v)]
        return float(np.median(vals)) if vals else math.nan

    def as_series(self, prefix: Optional[str] = None) -> Dict[str, List[float]]:
        """``<prefix>/<key>`` -> per-epoch values (prefix defaults to the trainer's name)."""
        pre = self.name if prefix is None else prefix
        return {(f"{pre}/{k}" if pre else k): self.series(k) for k in self.keys()}


def _finite(rec: Dict[str, float], keys: Sequence[str]) -> bool:
    return all(math.isfinite(float(rec[k])) for k in keys if k in rec)


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

    def improved(self, history: History) -> int:
        """The last epoch that improved (by more than ``min_delta``); 0 when none had a finite value."""
        return self._scan(history, self.min_delta)

    def best(self, history: History) -> int:
        """The epoch with the best finite value (the first of equals); 0 when there is none."""
        return self._scan(history, 0.0)

    def __call__(self, history: History) -> str:
        last = self.improved(history)
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
    ``parts`` > 1: each epoch is trained as that many slices (see :class:`Trainer`), each timed
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
            hist = History(tr.name, tr.kind)
            out[tr.name] = hist
            if keep is not None and not (hasattr(tr, "params") and hasattr(tr, "set_params")):
                raise TypeError(f"fit(keep=...): trainer {tr.name!r} has no params()/set_params()")
            kept = (0, None)          # (epoch, a copy of its params) with keep
            per_sample = bool(getattr(tr, "work_per_epoch", 0))
            advance = bar.update if per_sample else (lambda n: None)
            total_s = 0.0
            for e in range(epochs):
                ms = wall = eval_ms = 0.0
                metrics: Dict[str, float] = {}
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
                        prec: Dict[str, float] = {"epoch": e + (j + 1) / parts, "epoch_ms": part_ms,
                                                  "wall_ms": part_wall}
                        if hasattr(tr, "part_stats"):
                            prec.update({k: float(v) for k, v in tr.part_stats().items()})
                        prec["time_s"] = total_s + ms / 1e3
                        t0 = time.perf_counter()
                        metrics = {k: float(v) for k, v in tr.evaluate().items()}
                        prec.update(metrics)
                        prec["eval_ms"] = (time.perf_counter() - t0) * 1e3
                        eval_ms += prec["eval_ms"]
                        hist.parts.append(prec)
                rec: Dict[str, float] = {"epoch": e + 1, "epoch_ms": ms, "wall_ms": wall}
                if hasattr(tr, "stats"):
                    rec.update({k: float(v) for k, v in tr.stats().items()})
                steps = getattr(tr, "steps_per_epoch", 0)
                if steps:
                    rec["step_ms"] = ms / steps
                total_s += ms / 1e3
                rec["time_s"] = total_s
                if parts == 1:
                    t0 = time.perf_counter()
                    rec.update({k: float(v) for k, v in tr.evaluate().items()})
                    rec["eval_ms"] = (time.perf_counter() - t0) * 1e3
                else:                       # the evaluation after the last part: the epoch's
                    rec.update(metrics)
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
                if not _finite(rec, watch):
                    hist.stopped = f"non-finite {'/'.join(watch)}"
                    break
                reason = stop(hist) if stop else ""
                if reason:
                    hist.stopped = reason
                    break
            if per_sample and hist.epochs < epochs:
                bar.update(int(tr.work_per_epoch) * (epochs - hist.epochs))
            if keep is not None:
                hist.best = kept[0]
                if 0 < hist.best < hist.epochs:
                    tr.set_params(kept[1])
                    hist.final = {k: float(v) for k, v in tr.evaluate().items()}
            del kept
            if after is not None:
                after(tr)
            del tr
    finally:
        if hasattr(bar, "close"):
            bar.close()
    return out


def best_of(histories: Dict[str, History], metric: str) -> Dict[str, float]:
    """The best (max) value of ``metric`` over epochs for each trainer."""
    return {n: max(h.series(metric), default=math.nan) for n, h in histories.items()}


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
