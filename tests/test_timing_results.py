"""Timing statistics, table formatting, and bench.measure: check before timing, failures flagged,
speedup columns from the same run."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pipeline import bench, timing
from pipeline.bench import Case, Cost, Variant, measure, rel_error
from pipeline.context import Context
from pipeline.results import Report, format_table, to_csv


def policy(warmup=1, min_repeats=3, max_repeats=10, min_time_ms=0.0):
    return SimpleNamespace(warmup=warmup, min_repeats=min_repeats, max_repeats=max_repeats, min_time_ms=min_time_ms)


# ----------------------------------------------------------------------------------- timing

def test_timing_statistics():
    t = timing.Timing.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert t.median_ms == 3.0 and t.min_ms == 1.0 and t.n == 5
    assert t.iqr_ms == pytest.approx(2.0)        # q3 4 - q1 2
    assert "3.0000 ms" in str(t) and "n=5" in str(t)
    one = timing.Timing.of([2.5])
    assert (one.median_ms, one.iqr_ms, one.min_ms, one.n) == (2.5, 0.0, 2.5, 1)


def test_time_cpu_warmup_and_min_repeats():
    calls = []
    t = timing.time_cpu(lambda: calls.append(1), policy(warmup=2, min_repeats=4, max_repeats=10))
    assert t.n == 4 and len(calls) == 6
    assert t.median_ms >= 0 and t.min_ms <= t.median_ms


def test_time_cpu_min_time_and_cap():
    import time
    t = timing.time_cpu(lambda: time.sleep(0.002), policy(warmup=0, min_repeats=1, max_repeats=100, min_time_ms=10))
    assert 2 <= t.n < 100 and t.median_ms >= 1.5
    calls = []
    t = timing.time_cpu(lambda: calls.append(1), policy(warmup=0, min_repeats=2, max_repeats=5, min_time_ms=1e9))
    assert t.n == 5 and len(calls) == 5                 # max_repeats caps a long min_time


class FakeClock:
    """perf_counter for pipeline.timing that advances only when a timed function 'runs': a call
    of ``cost_ms`` takes ``cost_ms * load`` where ``load(call number)`` models a busy machine."""

    def __init__(self, load):
        self.now = 0.0
        self.calls = 0
        self.load = load
        self.order = []

    def fn(self, name, cost_ms):
        def run():
            self.order.append(name)
            self.now += cost_ms * self.load(self.calls) * 1e-3
            self.calls += 1
        return run


@pytest.fixture
def fake_clock(monkeypatch):
    def make(load):
        clock = FakeClock(load)
        monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock.now))
        return clock
    return make


def test_time_interleaved_rounds_alternate_and_balance(fake_clock):
    """Rounds time every function in turn, reversed every other round; a fast function is called
    more often a round so each gets about the samples it would get alone."""
    clock = fake_clock(lambda i: 1.0)
    fast, slow = clock.fn("f", 0.1), clock.fn("s", 10.0)
    res = timing.time_interleaved([fast, slow], policy(warmup=1, min_repeats=4, max_repeats=100, min_time_ms=40))
    timed = clock.order[2:]                       # after one warm-up call each
    assert res.timings[1].n == 4 and len(res.rounds[0]) == len(res.rounds[1]) == 4
    assert res.timings[0].n == 100                # 40 ms of 0.1 ms calls, capped at max_repeats: 25 a round
    assert timed[:26] == ["f"] * 25 + ["s"] and timed[26:52] == ["s"] + ["f"] * 25     # f s | s f | ...
    assert res.timings[0].median_ms == pytest.approx(0.1) and res.timings[1].median_ms == pytest.approx(10.0)
    assert res.ratio(1, 0).median == pytest.approx(100.0) and res.ratio(1, 0).spread == pytest.approx(0.0)


def test_ratio_holds_when_load_comes_and_goes(fake_clock):
    """A machine that turns 20x slower half-way: timed one after the other, variant b would be timed
    loaded and a quiet (ratio 40 instead of 2); interleaved, the ratio stays 2 and is stable."""
    n = policy(warmup=1, min_repeats=10, max_repeats=10, min_time_ms=0)
    clock = fake_clock(lambda i: 1.0 if i < 12 else 20.0)
    a, b = clock.fn("a", 1.0), clock.fn("b", 2.0)
    seq = [timing.time_cpu(a, n), timing.time_cpu(b, n)]
    assert seq[1].median_ms / seq[0].median_ms > 10                      # the flipped ratio of the issue
    clock = fake_clock(lambda i: 1.0 if i < 12 else 20.0)
    a, b = clock.fn("a", 1.0), clock.fn("b", 2.0)
    r = timing.time_interleaved([a, b], n).ratio(1, 0)
    assert r.median == pytest.approx(2.0) and r.spread < 0.1 and r.n == 10


def test_measure_flags_an_unstable_ratio(ctx, fake_clock, capsys):
    """Load that changes from call to call moves the per-round ratio: the row says so, and a notice."""
    rng = np.random.default_rng(3)
    case = _case(rng, "c1")

    def timed_variant(name, kind, clock, cost):
        tick = clock.fn(name, cost)

        def build(case, ctx):
            def run():
                tick()
                return {"y": 2.0 * case.inputs["x"]}
            return run
        return Variant(name, kind, build)
    steady = fake_clock(lambda i: 1.0)
    rows = measure([case], [timed_variant("v", "ours", steady, 1.0), timed_variant("b", "baseline", steady, 3.0)],
                   ctx, tolerance=1e-4, speedup_over=["b"])
    assert rows[0]["x_vs_b"] == pytest.approx(3.0) and rows[0]["ratio_unstable"] == "no"
    assert "vary by more" not in capsys.readouterr().err
    jumpy = fake_clock(lambda i: float(np.random.default_rng(i).choice([1.0, 8.0])))
    rows = measure([case], [timed_variant("v", "ours", jumpy, 1.0), timed_variant("b", "baseline", jumpy, 3.0)],
                   ctx, tolerance=1e-4, speedup_over=["b"])
    assert rows[0]["ratio_unstable"] == "yes" and rows[0]["ratio_spread"] > 0.1
    assert "c1: ratios of v vary by more than 10 %" in capsys.readouterr().err


def test_timer_for_backend():
    assert timing.timer_for("cpu") is timing.time_cpu
    from pipeline.gpu import timer
    assert timing.timer_for("cuda") is timer.time_cuda


# ----------------------------------------------------------------------------------- results

ROWS = [{"case": "A", "variant": "fused", "median_ms": 0.123456, "ok": True, "rel_err": 1.5e-7, "n": 128},
        {"case": "A", "variant": "dense", "median_ms": 1234.5, "ok": False, "rel_err": float("nan"),
         "extra": None, "gbps": np.float32(12.5)}]


def test_format_table_plain():
    text = format_table(ROWS, ["case", "variant", "median_ms", "rel_err", "ok", "gbps", "missing"])
    lines = text.splitlines()
    assert lines[0].split() == ["case", "variant", "median_ms", "rel_err", "ok", "gbps"]   # absent column dropped
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 4
    assert "0.1235" in lines[2] and "1.50e-07" in lines[2] and lines[2].split()[-2:] == ["ok", "-"]
    assert "1234.5" in lines[3] and "nan" in lines[3] and "FAIL" in lines[3] and "12.5" in lines[3]
    # aligned: every column starts at the same offset on every line
    col = lines[0].index("variant")
    assert lines[2].index("fused") == col and lines[3].index("dense") == col


def test_format_table_default_columns_markdown_and_empty():
    md = format_table(ROWS, markdown=True).splitlines()
    assert md[0] == "| case | variant | median_ms | ok | rel_err | n |"
    assert md[1].startswith("|---|") and md[2].startswith("| A | fused | 0.1235 | ok |")
    assert md[3].endswith("| - |")               # missing value
    assert format_table([]) == "(no rows)"


def test_number_formats():
    from pipeline.results import _fmt
    assert _fmt(0.0) == "0" and _fmt(2.0e6) == "2.00e+06" and _fmt(3.14159) == "3.142"
    assert _fmt(np.float32(0.5)) == "0.5" and _fmt(np.int64(7)) == "7" and _fmt("x") == "x"


def test_to_csv_has_every_column():
    lines = to_csv(ROWS).splitlines()
    assert lines[0] == "case,variant,median_ms,ok,rel_err,n,extra,gbps"
    assert lines[2].startswith("A,dense,1234.5,False,nan,,")
    assert to_csv(ROWS, ["case"]).splitlines() == ["case", "A", "A"]


def test_report_extend():
    a = Report(rows=[{"x": 1}], columns=["x"], metrics={"m": 1.0}, failures=["f1"])
    b = Report(rows=[{"y": 2}], columns=["x", "y"], metrics={"n": 2.0}, series={"s": [1.0]}, failures=["f2"])
    a.extend(b)
    assert a.rows == [{"x": 1}, {"y": 2}] and a.columns == ["x", "y"]
    assert a.metrics == {"m": 1.0, "n": 2.0} and a.series == {"s": [1.0]} and a.failures == ["f1", "f2"]


# ----------------------------------------------------------------------------------- bench

def test_rel_error():
    ref = np.array([3.0, 4.0])
    assert rel_error(ref.astype(np.float32), ref) == 0.0
    assert rel_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert np.isnan(rel_error(np.array([np.nan, 4.0]), ref))
    assert np.isnan(rel_error(np.array([np.inf, 4.0]), ref))
    assert rel_error(np.array([0.5, 0.0]), np.zeros(2)) == pytest.approx(0.5)   # zero reference: absolute
    with pytest.raises(ValueError, match="shape"):
        rel_error(np.zeros(3), ref)


@pytest.fixture
def ctx(compose, tmp_path):
    cfg = compose(["backend=cpu", "progress=false", "bench.warmup=1", "bench.min_repeats=3",
                   "bench.max_repeats=5", "bench.min_time_ms=0"])
    return Context(cfg=cfg, backend="cpu", size="small", out_dir=tmp_path)


def _case(rng, name="c1", n=64):
    x = rng.standard_normal(n).astype(np.float32)
    return Case(name=name, params={"n": n}, inputs={"x": x}, reference=lambda: {"y": 2.0 * x.astype(np.float64)})


def _variant(name, kind, fn, **kw):
    def build(case, ctx):
        x = case.inputs["x"]
        out = np.full_like(x, np.nan)          # poisoned: a variant that does not write stays NaN
        return lambda: {"y": fn(x, out)}
    return Variant(name, kind, build, **kw)


def _good(x, out):
    np.multiply(x, 2, out=out)
    return out


def _lazy(x, out):                               # writes half the output
    out[: x.size // 2] = 2 * x[: x.size // 2]
    return out


def _wrong(x, out):
    np.multiply(x, 2.01, out=out)
    return out


def test_measure_flags_wrong_variants_and_computes_speedups(ctx):
    rng = np.random.default_rng(0)
    cases = [_case(rng, "c1"), _case(rng, "c2", n=100)]
    cost = lambda case: Cost(bytes=8.0 * case.params["n"], flops=case.params["n"])  # noqa: E731
    variants = [_variant("good", "ours", _good, cost=cost), _variant("lazy", "ours", _lazy),
                _variant("wrong", "ours", _wrong), _variant("loose", "ours", _wrong, tolerance=0.1),
                _variant("base", "baseline", _good)]
    rows = measure(cases, variants, ctx, tolerance=1e-4, speedup_over=["base"])
    assert len(rows) == 10
    by = {(r["case"], r["variant"]): r for r in rows}
    r = by[("c1", "good")]
    assert r["ok"] is True and r["rel_err"] < 1e-6 and r["tol"] == 1e-4 and r["n"] == 64 and r["kind"] == "ours"
    assert r["reps"] >= 3 and r["median_ms"] > 0 and r["iqr_ms"] >= 0
    assert r["gbps"] == pytest.approx(8 * 64 / (r["median_ms"] * 1e-3) / 1e9)
    assert "pct_peak" not in r                                   # no GPU peaks on the CPU backend
    assert by[("c1", "lazy")]["ok"] is False and np.isnan(by[("c1", "lazy")]["rel_err"])
    assert by[("c1", "wrong")]["ok"] is False and by[("c1", "wrong")]["rel_err"] == pytest.approx(0.005, rel=1e-3)
    assert by[("c1", "loose")]["ok"] is True and by[("c1", "loose")]["tol"] == 0.1
    for c in ("c1", "c2"):
        for v in ("good", "lazy", "wrong", "loose"):
            row = by[(c, v)]
            assert row["x_vs_base"] > 0 and row["ratio_spread"] >= 0 and row["ratio_unstable"] in ("yes", "no")
        assert "x_vs_base" not in by[(c, "base")] and "ratio_spread" not in by[(c, "base")]
    fails = bench.failures(rows)
    assert len(fails) == 4
    assert any(f.startswith("c1/lazy: relative error nan") for f in fails)
    assert any(f.startswith("c2/wrong: relative error 0.005") for f in fails)


def test_measure_checks_before_timing_with_fresh_outputs(ctx):
    """run() is called once for the check, then warm-up + repeats; build() once per case."""
    rng = np.random.default_rng(1)
    calls = {"build": 0, "run": 0}

    def build(case, ctx):
        calls["build"] += 1

        def run():
            calls["run"] += 1
            return {"y": 2 * case.inputs["x"]}
        return run
    rows = measure([_case(rng)], [Variant("v", "ours", build)], ctx, tolerance=1e-4)
    assert calls["build"] == 1 and calls["run"] == 1 + 1 + rows[0]["reps"]
    assert rows[0]["ok"]


def test_measure_custom_check(ctx):
    rng = np.random.default_rng(2)
    v = _variant("v", "ours", _wrong, check=lambda out, exp: {"y": 0.0})
    [row] = measure([_case(rng)], [v], ctx, tolerance=1e-4)
    assert row["ok"] and row["rel_err"] == 0.0


def test_case_reference_is_computed_once():
    n = {"calls": 0}

    def ref():
        n["calls"] += 1
        return {"y": np.zeros(2)}
    c = Case("c", {}, {}, ref)
    c.expected()
    c.expected()
    assert n["calls"] == 1


def test_context_cpu(ctx, capsys):
    assert ctx.xp is np and not ctx.cuda
    ctx.notice("hello")
    assert ctx.notices == ["hello"] and "[pipeline] hello" in capsys.readouterr().err
    t = ctx.time(lambda: None)
    assert t.n >= 3
    assert list(ctx.progress(range(3))) == [0, 1, 2]
    ctx.sync()


def test_make_context_cpu_backend(compose, tmp_path, capsys):
    from pipeline.context import make_context
    c = make_context(compose(["backend=cpu", "progress=false"]), tmp_path)
    assert c.backend == "cpu" and c.size == "small" and c.device is None and c.peaks is None
    assert any("size=small" in n for n in c.notices)
    c = make_context(compose(["backend=cpu", "size=full"]), tmp_path)
    assert c.size == "full" and c.notices == []


def test_floor_rows_are_neither_checked_nor_ranked(ctx):
    """A kind="floor" row (e.g. bench.launch_floor) is timed but never fails or wins."""
    rng = np.random.default_rng(2)
    floor = Variant("floor", "floor", lambda case, ctx: (lambda: {}), None)
    rows = measure([_case(rng, "c1")], [_variant("good", "ours", _good), floor,
                                        _variant("base", "baseline", _good)], ctx, tolerance=1e-4,
                   speedup_over=["base"])
    by = {r["variant"]: r for r in rows}
    assert by["floor"]["ok"] is None and np.isnan(by["floor"]["rel_err"]) and by["floor"]["median_ms"] > 0
    assert "x_vs_base" in by["floor"]
    assert bench.failures(rows) == []
    assert bench.best_metrics(rows, ["base"])["best_ms"] == by["good"]["median_ms"]


def test_best_metrics_one_case_and_several():
    """One case: the same names in every run (best_ms, x_vs_<baseline>); several: named per case."""
    def row(case, v, kind, ms, ok=True):
        return {"case": case, "variant": v, "kind": kind, "ok": ok, "median_ms": ms, "x_vs_b": 4.0 / ms}
    one = [row("A k=16", "x", "ours", 2.0), row("A k=16", "y", "ours", 1.0), row("A k=16", "z", "ours", 0.5, ok=False),
           row("A k=16", "b", "baseline", 4.0)]
    assert bench.best_metrics(one, ["b"]) == {"best_ms": 1.0, "x_vs_b": 4.0, "summary/objective": 1.0}
    two = one + [row("A k=32", "x", "ours", 3.0), row("A k=32", "b", "baseline", 4.0)]
    m = bench.best_metrics(two, ["b"])
    assert m["summary/A k=16/best_ms"] == 1.0 and m["summary/A k=32/best_ms"] == 3.0
    assert m["summary/A k=32/best_x_vs_b"] == pytest.approx(4 / 3) and "best_ms" not in m
    assert m["summary/objective"] == 2.0


def test_outputs_outlive_the_interleaved_timing(ctx):
    """A GPU variant's run() writes into buffers its first outputs own (the run closure may hold
    only a raw pointer); measure must keep them alive until every variant of the case is timed,
    else the timed calls write into freed device memory."""
    import weakref
    rng = np.random.default_rng(3)
    freed = []

    class Buf(np.ndarray):
        pass

    def build(case, ctx):
        x = case.inputs["x"]
        box = {}

        def run():
            if "ref" in box and box["ref"]() is None:
                freed.append(True)              # a call after its buffer was released
            out = (2 * x).view(Buf)
            if "ref" not in box:
                box["ref"] = weakref.ref(out)
            return {"y": out}
        return run
    measure([_case(rng)], [Variant("a", "ours", build), Variant("b", "baseline", build)], ctx, tolerance=1e-4,
            speedup_over=["b"])
    assert not freed


def test_one_speedups_function_for_measure_and_training():
    """bench.measure and the training harness share pipeline.timing.speedups: per-round ratios of
    interleaved rounds (median, spread, unstable flag) or one value per row."""
    from pipeline import bench as bench_mod, train
    assert bench_mod.speedups is timing.speedups and not hasattr(train, "speedups")
    rounds = timing.Interleaved([timing.Timing.of([1.0])] * 3,
                                [[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 4.0, 2.0], [3.0, 3.0, 3.0, 3.0]])
    rows = [{"variant": "v"}, {"variant": "b1"}, {"variant": "b2"}]
    timing.speedups(rows, ["v"], ["b1", "b2", "absent"], rounds=rounds, spread_limit=0.1)
    v, b1, b2 = rows
    assert v["x_vs_b1"] == pytest.approx(2.0) and v["x_vs_b2"] == pytest.approx(3.0)
    assert v["ratio_spread"] == pytest.approx(np.subtract(*np.percentile([2, 2, 4, 2], [75, 25])) / 2.0)
    assert v["ratio_unstable"] == "yes" and "x_vs_absent" not in v
    assert b1["x_vs_b2"] == pytest.approx(1.5, rel=0.2) and "x_vs_b1" not in b1
    assert "x_vs_b2" not in b2 and b2["x_vs_b1"] == pytest.approx(2.0 / 3.0)   # median of 2/3, 2/3, 4/3, 2/3
    # no spread limit: the spread, no flag; one value per row: the plain ratio, no spread
    rows = [{"variant": "v"}, {"variant": "b1"}, {"variant": "b2"}]
    timing.speedups(rows, ["v"], ["b2"], rounds=rounds)
    assert rows[0]["ratio_spread"] == pytest.approx(0.0) and "ratio_unstable" not in rows[0]
    rows = [{"variant": "v", "ms": 2.0}, {"variant": "b", "ms": 5.0}]
    timing.speedups(rows, ["v"], ["b"], "ms")
    assert rows[0] == {"variant": "v", "ms": 2.0, "x_vs_b": 2.5}


def test_interval_sum_on_the_cpu():
    import time
    s = timing.IntervalSum("cpu")
    for _ in range(3):
        t = s.start()
        time.sleep(0.004)
        s.stop(t)
    time.sleep(0.02)                  # not inside an interval: not counted
    total = s.total_ms()
    assert 12.0 <= total < 20.0 + 8.0, total
    s.reset()
    assert s.total_ms() == 0.0
    one = timing.Interval("cpu")
    one.start()
    time.sleep(0.003)
    assert one.stop() >= 3.0


def test_cuda_side_lives_in_gpu_timer():
    """The hold kernel and the CUDA timers are pipeline/gpu/timer.py (not pipeline.timing, which
    imports no GPU module when it is imported)."""
    import subprocess
    import sys
    from pipeline.gpu import timer
    assert callable(timer.time_cuda) and callable(timer.hold_kernel) and not hasattr(timing, "time_cuda")
    code = "import sys, pipeline.timing; print(any(m.startswith('pipeline.gpu') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
    with pytest.raises(AttributeError):
        timing.no_such_name


def test_floor_is_the_larger_of_bytes_and_flops_at_the_ceilings():
    from pipeline.gpu.peaks import Peaks
    from pipeline.models.sparse_dnn.model import pass_floors
    p = Peaks("x", copy_gbps=1000.0, fp32_tflops=50.0, tf32_tflops=400.0)
    assert p.floor_s(nbytes=2e9) == pytest.approx(2e-3)                       # 2 GB at 1 TB/s
    assert p.floor_s(nbytes=1e6, flops=1e12) == pytest.approx(0.02)           # flops-bound at 50 TFLOP/s
    assert p.floor_s(flops=1e12, precision="tf32") == pytest.approx(2.5e-3)
    f = pass_floors((1e9, 4e9), 1e12, p)       # 1e9 live updates (2 flops each), 4 GB moved
    assert f["memory_s"] == pytest.approx(4e-3) and f["fma_s"] == pytest.approx(4e-5)
    assert f["floor_s"] == pytest.approx(4e-3) and f["edges_fma_s"] == pytest.approx(0.04)


def test_a_cpu_report_has_no_gpu_columns():
    """On the CPU backend a ``gpu_`` column would name a CPU time wrongly: the runner drops them."""
    rep = Report(rows=[{"variant": "cpu", "kind": "ours", "epoch_ms": 5.0, "gpu_ms": 4.0, "to_target_gpu_s": 1.0,
                        "gpus": 1, "per_gpu": 2}],
                 columns=["variant", "kind", "epoch_ms", "gpu_ms", "to_target_gpu_s", "gpus", "per_gpu"])
    rep.drop_device_columns()
    assert rep.columns == ["variant", "kind", "epoch_ms", "gpus", "per_gpu"]
    assert rep.rows == [{"variant": "cpu", "kind": "ours", "epoch_ms": 5.0, "gpus": 1, "per_gpu": 2}]
