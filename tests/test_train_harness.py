"""pipeline/train.py: the training harness with a fake trainer (timing, series, evaluation, early
stop on a non-finite loss or a stop rule, the progress bar, speedups)."""
from __future__ import annotations

import math
import time

import pytest
from omegaconf import OmegaConf

from pipeline.context import Context
from pipeline.timing import speedups
from pipeline.train import History, fit


class Bar:
    def __init__(self, total):
        self.total, self.n, self.closed, self.postfix = total, 0, False, {}

    def update(self, n):
        self.n += n

    def set_postfix(self, **kw):
        self.postfix = kw

    def close(self):
        self.closed = True


class FakeCtx(Context):
    def progress(self, it, desc="", total=None, leave=False):
        self.bar = Bar(total)
        return self.bar


def ctx(tmp_path):
    return FakeCtx(cfg=OmegaConf.create({"progress": False}), backend="cpu", size="small", out_dir=tmp_path)


class Fake:
    """Sleeps ``ms`` an epoch; its loss halves each epoch (or becomes NaN at ``nan_at``)."""

    def __init__(self, name, kind="ours", ms=20.0, nan_at=None, work=100, steps=4):
        self.name, self.kind, self.ms, self.nan_at = name, kind, ms, nan_at
        self.work_per_epoch, self.steps_per_epoch = work, steps
        self.e = -1
        self.evals = 0

    def epoch(self, index, progress):
        self.e = index
        for _ in range(4):
            time.sleep(self.ms / 4e3)
            progress(self.work_per_epoch // 4)

    def stats(self):
        loss = math.nan if self.e == self.nan_at else 2.0 ** -self.e
        return {"loss": loss, "lsh_query_ms": 1.5}

    def evaluate(self):
        self.evals += 1
        time.sleep(0.03)                                 # evaluation is not training time
        return {"p@1": 0.1 * (self.e + 1)}


def test_fit_series_and_timing(tmp_path):
    c = ctx(tmp_path)
    a, b = Fake("a", ms=20), Fake("b", kind="baseline", ms=60)
    hist = fit(c, [a, b], 3)
    assert list(hist) == ["a", "b"] and a.evals == 3 and b.evals == 3
    ha = hist["a"]
    assert ha.epochs == 3 and ha.kind == "ours" and not ha.stopped
    assert ha.series("epoch") == [1, 2, 3]
    assert ha.series("loss") == [1.0, 0.5, 0.25]
    assert ha.series("p@1") == pytest.approx([0.1, 0.2, 0.3])
    ms = ha.series("epoch_ms")
    assert all(18 <= m < 200 for m in ms)                       # the sleep, not the evaluation
    assert ha.series("time_s") == pytest.approx([sum(ms[:i + 1]) / 1e3 for i in range(3)])
    assert ha.series("step_ms") == pytest.approx([m / 4 for m in ms])
    assert all(e >= 25 for e in ha.series("eval_ms"))
    assert hist["b"].median("epoch_ms") > ha.median("epoch_ms")
    assert ha.series("lsh_query_ms") == [1.5] * 3
    assert c.bar.total == 600 and c.bar.n == 600 and c.bar.closed


def test_fit_stops_on_nan_and_on_rule(tmp_path):
    c = ctx(tmp_path)
    hist = fit(c, [Fake("x", nan_at=1, ms=4)], 5)
    assert hist["x"].epochs == 2 and hist["x"].stopped == "non-finite loss"
    assert c.bar.n == 500                                        # the bar still completes

    def rule(h: History) -> str:
        return "p@1 reached 0.2" if h.last("p@1") >= 0.2 - 1e-9 else ""
    hist = fit(ctx(tmp_path), [Fake("y", ms=4)], 5, stop=rule)
    assert hist["y"].epochs == 2 and hist["y"].stopped == "p@1 reached 0.2"


def test_trainer_without_stats_or_work(tmp_path):
    class Bare:
        name, kind = "bare", "ours"

        def epoch(self, index, progress):
            pass

        def evaluate(self):
            return {"acc": 1.0}
    c = ctx(tmp_path)
    h = fit(c, [Bare()], 2)["bare"]
    assert h.epochs == 2 and h.series("acc") == [1.0, 1.0] and math.isnan(h.last("loss"))
    assert c.bar.total == 2 and c.bar.n == 2


def test_speedups():
    rows = [{"variant": "ours", "ms": 10.0}, {"variant": "d32", "ms": 80.0}, {"variant": "tf32", "ms": 40.0},
            {"variant": "broken", "ms": 0.0}, {"variant": "none"}]
    speedups(rows, ["ours"], ["d32", "tf32", "missing"], "ms")
    by = {r["variant"]: r for r in rows}
    assert by["ours"]["x_vs_d32"] == 8.0 and by["ours"]["x_vs_tf32"] == 4.0
    assert by["tf32"]["x_vs_d32"] == 2.0 and "x_vs_tf32" not in by["tf32"]
    assert by["d32"]["x_vs_tf32"] == 0.5 and "x_vs_d32" not in by["d32"]
    assert not any(k.startswith("x_vs") for k in by["broken"]) and not any(k.startswith("x_vs") for k in by["none"])
    assert "x_vs_missing" not in by["ours"]


def test_lazy_trainers_one_bar(tmp_path):
    c = ctx(tmp_path)
    built, done = [], []

    def make(name):
        def build():
            built.append(name)
            assert len(built) - len(done) == 1          # one trainer alive at a time
            return Fake(name, ms=4)
        return build
    hist = fit(c, [make("a"), make("b")], 2, work_per_epoch=100, after=lambda tr: done.append(tr.name))
    assert list(hist) == ["a", "b"] and built == ["a", "b"] and done == ["a", "b"]
    assert c.bar.total == 400 and c.bar.n == 400


class Sliced(Fake):
    """Fake with parts: ``ms`` an epoch spread over its parts; p@1 grows with every part trained."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trained = 0.0
        self.calls = []

    def epoch(self, index, progress, part=0, parts=1):
        self.e = index
        self.calls.append((index, part, parts))
        time.sleep(self.ms / parts / 1e3)
        self.trained += 1 / parts
        progress(self.work_per_epoch // parts)

    def part_stats(self):
        return {"gpu_ms": 1.0}

    def stats(self):
        return {"loss": 2.0 ** -self.e, "gpu_ms": 4.0}

    def evaluate(self):
        self.evals += 1
        time.sleep(0.01)
        return {"p@1": round(self.trained, 6)}


def test_fit_parts_evaluate_each_part_and_keep_epochs(tmp_path):
    c = ctx(tmp_path)
    t = Sliced("s", ms=20)
    h = fit(c, [t], 3, parts=4)["s"]
    assert t.calls == [(e, j, 4) for e in range(3) for j in range(4)] and t.evals == 12
    assert h.epochs == 3 and h.series("epoch") == [1, 2, 3] and len(h.parts) == 12 and h.evals is h.parts
    assert [r["epoch"] for r in h.parts] == [(i + 1) / 4 for i in range(12)]
    assert h.series("p@1") == [1.0, 2.0, 3.0] and [r["p@1"] for r in h.parts][:4] == [0.25, 0.5, 0.75, 1.0]
    assert h.series("gpu_ms") == [4.0] * 3 and all(r["gpu_ms"] == 1.0 for r in h.parts)
    for e in range(3):
        part = h.parts[4 * e:4 * e + 4]
        assert h.records[e]["epoch_ms"] == pytest.approx(sum(r["epoch_ms"] for r in part))
        assert h.records[e]["eval_ms"] == pytest.approx(sum(r["eval_ms"] for r in part))
        assert part[-1]["time_s"] == pytest.approx(h.records[e]["time_s"])
    assert all(r["epoch_ms"] < 100 for r in h.parts)                 # the evaluation is not training time
    assert h.series("step_ms") == pytest.approx([m / 4 for m in h.series("epoch_ms")])
    assert c.bar.n == c.bar.total == 300
    stopped = fit(ctx(tmp_path), [Sliced("x", ms=4)], 5, parts=2, stop=lambda hh: "enough" if hh.epochs == 2 else "")
    assert stopped["x"].epochs == 2 and len(stopped["x"].parts) == 4 and stopped["x"].stopped == "enough"
