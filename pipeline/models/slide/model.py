"""model=slide: SLIDE extreme classification (LSH-sampled softmax) against dense full-softmax
training of the same network, from the same initial parameters, on the same data in the same
order; P@1 / P@5 on the test file (or a seeded random subset of it) after every epoch or every
``model.eval_every`` steps, time per epoch and per phase, active-set sizes and overflow counts,
speedups from the same run, the training time to a target P@1 (``time_to_p1``, the paper's
time-wise accuracy, Fig. 11) and a P@1-against-time plot."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from pipeline.errors import ConfigError
from pipeline.models.base import TrainingModel
from pipeline.models.slide import floors, reference as ref
from pipeline.models.slide.variants import REGISTRY, gb, table_bytes
from pipeline.results import Report
from pipeline.timing import speedups
from pipeline.train import History, fit, time_to_target

DENSE = ("dense_tf32", "dense_fp32", "torch", "cpu_dense")   # P@1 is compared with the first that ran


class VariantTrainer:
    """One variant as a harness trainer: a :class:`reference.SlideTrainer` (RNG and schedule) over
    the variant's engine, stepping through the training split, evaluated on the test split. With
    ``eval_every`` > 0 steps, ``fit(parts=parts_of(...))`` trains an epoch as consecutive slices of
    that many steps (the last one shorter), evaluated after each; ``part_stats`` gives the slice's
    exact position in epochs and the steps done so far."""

    def __init__(self, name: str, kind: str, trainer: ref.SlideTrainer, train, test, batch_size: int,
                 max_steps: int, ks, eval_batch: int, split_handle=None, eval_every: int = 0):
        self.name, self.kind, self.trainer = name, kind, trainer
        self.engine = trainer.engine
        self.train, self.test, self.bs, self.ks, self.eval_batch = train, test, batch_size, list(ks), eval_batch
        n = train.X.shape[0]
        self.rows = min(n, max_steps * batch_size) if max_steps > 0 else n
        self.work_per_epoch = self.rows
        self.steps_per_epoch = -(-self.rows // batch_size)
        self.eval_every = int(eval_every)
        self.handle = split_handle if split_handle is not None else train
        self._at = (0, 0)                 # (epoch index, steps of it done)
        self.steps_done = 0

    @staticmethod
    def parts_of(steps_per_epoch: int, eval_every: int) -> int:
        """Evaluations an epoch: one every ``eval_every`` steps and one at the epoch's end (0: once)."""
        if eval_every <= 0 or eval_every >= steps_per_epoch:
            return 1
        return -(-int(steps_per_epoch) // int(eval_every))

    def slice_of(self, part: int, parts: int):
        """Steps [s0, s1) of the epoch that slice ``part`` of ``parts`` trains."""
        if parts <= 1:
            return 0, self.steps_per_epoch
        e = self.eval_every if self.eval_every > 0 else -(-self.steps_per_epoch // parts)
        return min(part * e, self.steps_per_epoch), (self.steps_per_epoch if part == parts - 1
                                                     else min((part + 1) * e, self.steps_per_epoch))

    def epoch(self, index: int, progress, part: int = 0, parts: int = 1) -> None:
        s0, s1 = self.slice_of(part, parts)
        self.trainer.epoch(self.handle, self.train.X.shape[0], self.bs, progress, rows=self.rows, steps=(s0, s1))
        self.steps_done += s1 - s0
        self._at = (index, s1)

    def part_stats(self) -> Dict[str, float]:
        index, s1 = self._at
        return {"epoch": index + s1 / max(self.steps_per_epoch, 1), "steps": self.steps_done}

    def stats(self) -> Dict[str, float]:
        out = dict(self.engine.epoch_stats()) if hasattr(self.engine, "epoch_stats") else {}
        for p, ms in self.engine.phase_times().items():
            out[f"{p}_ms"] = ms
        out["mem_mb"] = self.engine.mem_used_bytes() / 2 ** 20
        out["rebuilds_total"] = self.trainer.rebuilds
        out["reshuffles_total"] = self.trainer.reshuffles
        return out

    def evaluate(self) -> Dict[str, float]:
        top = self.engine.predict_topk(self.test.X, max(self.ks), self.eval_batch)
        return ref.precision_at_k(np.asarray(top), self.test.Y, self.ks)


EVAL_STREAM = 0x5E1EC7                 # the subset's seed stream, apart from the training RNG's


def eval_rows_of(n: int, rows: int, seed: int) -> Optional[np.ndarray]:
    """The test rows evaluated (``model.eval_rows``): ``rows`` of the ``n`` drawn without replacement
    from a generator seeded by ``seed`` (the run's), in file order; None for all (rows 0 or >= n).
    XC test files are often sorted by label, so the first rows would bias P@k."""
    if rows <= 0 or rows >= n:
        return None
    rng = np.random.Generator(np.random.PCG64([int(seed), EVAL_STREAM]))
    return np.sort(rng.choice(n, size=int(rows), replace=False))


def time_to_p1(h: History, target: float) -> Dict[str, float]:
    """The first evaluation (every part with model.eval_every, else every epoch) whose P@1 reaches
    ``target``: ``{"s": training seconds until then (the timed epochs or parts, first table build
    included, evaluation excluded), "epochs": its position in epochs, "p1": its P@1}``; NaN when
    never reached (:func:`pipeline.train.time_to_target`)."""
    tt = time_to_target(h, float(target), "p@1", ("epoch_ms",), higher_is_better=True)
    p1 = next((float(r["p@1"]) for r in h.evals if float(r.get("p@1", math.nan)) >= target), math.nan)
    return {"s": tt["epoch_ms"] / 1e3, "epochs": tt["epochs"], "p1": p1 if math.isfinite(tt["epochs"]) else math.nan}


def p1_target_of(hist: Dict[str, History], explicit: float):
    """(target P@1, where it came from): ``explicit`` when > 0, else the P@1 of the dense TF32
    baseline after its first epoch (else the first dense baseline that ran); (NaN, why) without one."""
    if explicit > 0:
        return float(explicit), "model.p1_target"
    for name in DENSE:
        h = hist.get(name)
        if h is not None and h.records:
            return float(h.records[0].get("p@1", math.nan)), f"{name}'s P@1 after its first epoch"
    return math.nan, "no dense baseline ran (model.baselines) and model.p1_target is 0"


def popularity_baseline(train_Y, test_Y, ks) -> Dict[str, float]:
    """P@k of predicting the most frequent training labels (ties: lower id) for every test row (what
    a model that learned only the label frequencies, e.g. its output biases, scores)."""
    freq = np.bincount(train_Y.indices, minlength=train_Y.shape[1])
    top = np.argsort(-freq, kind="stable")[:min(max(ks), train_Y.shape[1])]
    return ref.precision_at_k(np.broadcast_to(top, (test_Y.shape[0], top.size)), test_Y, ks)


class SlideModel(TrainingModel):

    def prepare(self) -> None:
        cfg, m, ctx = self.cfg, self.cfg.model, self.ctx
        self.select()
        from pipeline.data import xc_dataset      # a folder the user named is always read (size=small: its first rows)
        self.data = d = xc_dataset.load(cfg.dataset, size=ctx.size, data_dir=cfg.data_dir, cache_dir=cfg.cache_dir,
                                        seed=int(cfg.seed), notice=ctx.notice)
        too_big = [int(k) for k in m.topk if int(k) > d.n_labels]
        if too_big:
            raise ConfigError(f"model.topk={too_big[0]} is not allowed: at most the {d.n_labels} labels of dataset "
                              f"{d.name} (P@k over more labels than there are)")
        idx = eval_rows_of(d.test.X.shape[0], int(m.eval_rows), int(cfg.seed))
        self.test = d.test if idx is None else type(d.test)(X=d.test.X[idx], Y=d.test.Y[idx])
        self.popular = popularity_baseline(d.train.Y, self.test.Y, [int(k) for k in m.topk])
        max_labels = int(np.diff(d.train.Y.indptr).max(initial=0))
        self.hp = hp = ref.Hyper.from_cfg(m, d.n_labels, max_labels)
        self.check_memory()
        auto = m.get("min_active", None) is None
        if hp.min_active >= d.n_labels:
            ctx.notice(f"model.min_active={hp.min_active} >= the {d.n_labels} labels of {d.name}: every label is "
                       f"active in every step, so slide is the dense softmax with the hashing's extra work (the "
                       f"same P@1, slower); leave model.min_active unset (5 % of the labels, at least 32, at most "
                       f"half) or set it below {d.n_labels}")
        ctx.notice(f"slide on {d.name} ({d.source}): {d.train.X.shape[0]} train / {self.test.X.shape[0]} test rows"
                   + (f" (a seeded random subset of the {d.test.X.shape[0]}: model.eval_rows)"
                      if self.test is not d.test else "")
                   + f", {d.n_features} features, {d.n_labels} labels; K={hp.K} L={hp.L} "
                   f"({hp.nbuckets} buckets a table), min_active={hp.min_active}"
                   + (" (model.min_active unset: 5 % of the labels, at least 32, at most half of them and 1500)"
                      if auto else "")
                   + f", max_active={hp.max_active}")
        self.device_split = None

    def check_memory(self) -> None:
        """Before any kernel is compiled or parameter drawn: a one-line ConfigError when the tables
        cannot exist for this label count (int32 offsets), or, on the GPU, when tables and parameters
        need more than the device has."""
        from pipeline.models.slide.config import check_tables
        hp, d = self.hp, self.data
        check_tables(hp.K, hp.L, hp.bin_size, d.n_labels)
        dev = getattr(self.ctx, "device", None) if self.ctx.cuda else None
        if dev is None or not getattr(dev, "total_mem", 0):
            return
        params = 12 * (d.n_features + d.n_labels) * hp.hidden             # weights and both Adam moments
        need = table_bytes(hp.K, hp.L, hp.bin_size, d.n_labels) + params
        if need > dev.total_mem:
            raise ConfigError(f"model.K={hp.K} is not allowed: the hash tables ({gb(need - params)}) and the "
                              f"parameters with their Adam moments ({gb(params)}) need {gb(need)}, more than the "
                              f"{gb(dev.total_mem)} of {dev.name}; lower model.K or model.L")

    def transfer(self) -> None:
        from pipeline.models.slide import gpu
        self.gpu = gpu
        self.device_split = gpu.DeviceSplit(self.data.train)

    # ------------------------------------------------------------------ trainers

    def make_trainer(self, name: str) -> VariantTrainer:
        cfg, d, hp = self.cfg, self.data, self.hp
        m = cfg.model
        F, N = d.n_features, d.n_labels
        if name == "cpu":
            make = None
        elif name == "cpu_dense":
            def make(p):
                return ref.DenseEngine(hp, p, F, N)
        else:
            def make(p):
                return self.gpu.make_engine(name, self.ctx, hp, p, F, N)
        tr = ref.SlideTrainer(hp, F, N, int(cfg.seed), make, bool(m.shuffle))
        kind = REGISTRY[name].kind
        handle = self.device_split if REGISTRY[name].backend == "cuda" else None
        return VariantTrainer(name, kind, tr, d.train, self.test, int(m.batch_size), int(m.max_steps),
                              [int(k) for k in m.topk], int(m.eval_batch), handle, int(m.eval_every))

    def execute(self) -> None:
        m = self.cfg.model
        names = self.ours + self.baselines
        n = self.data.train.X.shape[0]
        rows = min(n, int(m.max_steps) * int(m.batch_size)) if int(m.max_steps) > 0 else n
        self.parts = VariantTrainer.parts_of(-(-rows // int(m.batch_size)), int(m.eval_every))

        def release(_tr) -> None:                    # one variant's device memory at a time
            if self.ctx.cuda:
                import cupy
                cupy.get_default_memory_pool().free_all_blocks()
        self.hist: Dict[str, History] = fit(self.ctx, [lambda v=v: self.make_trainer(v) for v in names],
                                            int(m.epochs), desc="slide", work_per_epoch=rows, after=release,
                                            parts=self.parts)

    # ------------------------------------------------------------------ checks

    def verify(self) -> None:
        self.failures: List[str] = []
        d = self.data
        nlab = np.diff(self.test.Y.indptr)
        chance = float(nlab.mean()) / d.n_labels if nlab.size else 0.0
        self.chance = chance
        for name, h in self.hist.items():
            if h.stopped:
                self.failures.append(f"{name}: training stopped after {h.epochs} epoch(s): {h.stopped}")
            for key in ("loss", "p@1"):
                v = h.last(key)
                if not math.isfinite(v):
                    self.failures.append(f"{name}: {key} = {v} after {h.epochs} epoch(s)")
        steps = int(self.cfg.model.max_steps)
        whole = steps == 0 or steps * int(self.cfg.model.batch_size) >= d.train.X.shape[0]
        if "cpu" in self.hist and not whole:
            self.ctx.notice("verify: the P@1-above-chance check of cpu needs whole epochs (model.max_steps=0); skipped")
        elif "cpu" in self.hist:
            p1 = self.hist["cpu"].last("p@1")
            if not p1 > chance:
                self.failures.append(f"cpu: P@1 {p1:.4f} is not above chance ({chance:.4g} = labels a row / labels)")
        pop = self.popular.get("p@1", math.nan)
        p1s = {name: h.last("p@1") for name, h in self.hist.items()}
        self.ctx.notice("P@1 " + ", ".join(f"{v:.3f} ({name})" for name, v in p1s.items()) +
                        f" against {pop:.3f} for predicting the most frequent training label for every test row "
                        f"(p1_popular)")
        flat = [name for name, v in p1s.items() if math.isfinite(v) and not v > pop]
        if flat:
            self.ctx.notice(f"{', '.join(flat)}: P@1 not above the popularity baseline ({pop:.3f}): "
                            f"{'it' if len(flat) == 1 else 'they'} learned little beyond the label frequencies; "
                            f"train longer (epochs=, model.max_steps=0) or with a larger model.lr")
        self.step_err: Optional[float] = None
        if self.ctx.cuda and "slide" in self.hist:
            self.step_err = self.check_gpu_step()

    def check_gpu_step(self) -> float:
        """One GPU step against the NumPy step on the GPU's own active sets (same parameters, hash
        functions, tables, pad offsets). The error is the larger of the first moments' relative
        error (m = (1 - beta1) g after one step: the gradients) and the updated weights' (the step)."""
        gpu, hp, d, m = self.gpu, self.hp, self.data, self.cfg.model
        F, N = d.n_features, d.n_labels
        rng = np.random.Generator(np.random.PCG64(int(self.cfg.seed)))
        p0 = ref.init_params(F, N, hp, rng)
        bins, order = ref.draw_hash(hp, rng), rng.permutation(N)
        B = min(int(m.batch_size), d.train.X.shape[0])
        pad = rng.integers(0, N, size=B)
        g = gpu.SlideGPU(self.ctx, hp, p0.copy(), F, N)
        g.set_hash(bins, order)
        g.rebuild()
        act = g.active_for(self.device_split, 0, B, pad)
        g.step(g.batch(self.device_split, 0, B), pad)
        got = g.params()
        want = p0.copy()
        _, grads, _ = ref.forward_backward(d.train.X[:B], d.train.Y[:B], want, act, hp)
        ref.adam_update(want, grads, hp)
        err = 0.0
        for k in ref.Params.WEIGHTS:
            for name in (k, "m" + k):
                a, b = getattr(got, name).astype(np.float64), getattr(want, name).astype(np.float64)
                err = max(err, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
        del g
        tol = float(m.tolerance)
        if not err <= tol:
            self.failures.append(f"slide: one GPU step differs from the NumPy step by {err:.3g} (relative) > {tol:g}")
        return err

    # ------------------------------------------------------------------ report

    def report(self) -> Report:
        m, d, hp = self.cfg.model, self.data, self.hp
        ks = [int(k) for k in m.topk]
        dense = next((b for b in DENSE if b in self.hist), None)
        self.p1_target, target_from = p1_target_of(self.hist, float(m.get("p1_target", 0.0) or 0.0))
        self.reached = {name: time_to_p1(h, self.p1_target) for name, h in self.hist.items()}
        self.phase_tables = self.phase_floors()
        rows = []
        for name, h in self.hist.items():
            r = {"variant": name, "kind": h.kind, "epochs": h.epochs, "epoch_ms": h.median("epoch_ms"),
                 "step_ms": h.median("step_ms"), "train_s": h.last("time_s")}
            for k in ks:
                r[f"p@{k}"] = h.last(f"p@{k}")
            r["time_to_p1"] = self.reached[name]["s"]
            r["p1_target"] = self.p1_target
            r["loss"] = h.last("loss")
            r["active_mean"] = _agg(np.mean, h, "active_mean")
            r["active_max"] = _agg(np.max, h, "active_max", int)
            if name in self.phase_tables:
                r["rows_touched"] = self.rows_touched[name]
                r["x_floor"] = self.phase_tables[name]["step"].get("x_floor")
            r["overflow"] = _agg(np.sum, h, "overflow_samples", int)
            r["table_dropped"] = _agg(np.sum, h, "table_dropped", int)
            r["mem_mb"] = h.last("mem_mb")
            r["p1_popular"] = self.popular.get("p@1")
            if dense and name != dense:
                dp = self.hist[dense].last("p@1")
                r[f"p1_vs_{dense}"] = r["p@1"] / dp if dp > 0 else math.nan
            if name == "slide" and self.step_err is not None:
                r["step_err"] = self.step_err
            rows.append(r)
        speedups(rows, self.ours, self.baselines, "epoch_ms")
        cols = (["variant", "kind", "epochs", "epoch_ms", "step_ms", "train_s"] + [f"p@{k}" for k in ks] +
                ["time_to_p1", "p1_target", "p1_popular", "loss", "active_mean", "active_max", "rows_touched",
                 "overflow", "table_dropped", "mem_mb", "x_floor"] +
                [f"x_vs_{b}" for b in self.baselines] + ([f"p1_vs_{dense}"] if dense else []) + ["step_err"])
        rep = Report(rows=rows, columns=cols, failures=self.failures,
                     title=f"slide on {d.name}: {d.train.X.shape[0]} train / {self.test.X.shape[0]} test rows, "
                           f"{d.n_features} features, {d.n_labels} labels, batch {m.batch_size}, K={hp.K} L={hp.L} "
                           f"{'dwta' if hp.dwta else 'wta'} bin {hp.bin_size}, {hp.optimizer}")
        for name, h in self.hist.items():
            for key in h.keys():
                if key != "epoch":
                    rep.series[f"{name}/{key}"] = h.series(key)
            if h.parts:                                  # model.eval_every: every evaluation, in order
                for key in ("epoch", "steps", "time_s", "epoch_ms", *[f"p@{k}" for k in ks]):
                    rep.series[f"{name}/eval/{key}"] = [float(r.get(key, math.nan)) for r in h.parts]
        self.summarize(rep, rows, ["epoch_ms", "step_ms", "train_s", "loss", "active_mean", "overflow", "step_err",
                                   "time_to_p1", "rows_touched", "x_floor"] + [f"p@{k}" for k in ks],
                       prefixes=("x_vs_", "p1_vs_"))
        for name, table in self.phase_tables.items():
            for p, vals in table.items():
                for key, v in vals.items():
                    rep.metrics[f"summary/{name}/{p}_{key}"] = float(v)
            rep.notes.append(floors.note(name, table, self.rows_touched[name]))
        rep.metrics["summary/p1_target"] = self.p1_target
        main = self.ours[0]
        rep.metrics["summary/objective"] = float(rows[0]["epoch_ms"]) if rows else math.nan
        for key, x in rows[0].items():                 # the headline numbers of our first variant
            if key.startswith(("x_vs_", "p1_vs_")) and x is not None:
                rep.metrics[f"summary/best_{key}"] = float(x)
        rep.metrics["summary/chance_p@1"] = self.chance
        for key, v in self.popular.items():             # the popularity baseline (most frequent training labels)
            rep.metrics[f"summary/popular_{key}"] = float(v)
        rep.notes.append(f"p1_popular: P@1 of predicting the most frequent training label for every test row "
                         f"({self.popular.get('p@1', math.nan):.4f}); a model that learned only the label "
                         f"frequencies scores this")
        rep.notes.append(f"{main}: max_active {hp.max_active}, min_active {min(hp.min_active, d.n_labels)}, "
                         f"threshold {hp.threshold}, rebuild every {hp.rebuild_every} samples "
                         f"(decay {hp.rebuild_decay}), reshuffle every {hp.reshuffle_every}; "
                         f"x_vs_<b> = b's median epoch time / this row's")
        every = (f"every {int(m.eval_every)} steps and at each epoch's end" if self.parts > 1 else "after every epoch")
        rep.notes.append(f"time_to_p1: training seconds (timed epochs or slices, first table build included, "
                         f"evaluation excluded) until test P@1 first reached p1_target = {self.p1_target:.4f} "
                         f"({target_from}); evaluated {every} on {self.test.X.shape[0]} test rows; empty: never "
                         f"reached")
        rep.figures["p1_vs_time.png"] = p1_plot(self.hist, f"slide on {d.name}", self.p1_target, self.reached)
        return rep

    def phase_floors(self) -> Dict[str, Dict[str, Dict[str, float]]]:
        """Per variant of ours that counted its work (reference.WORK): :func:`floors.phase_table` over
        the whole run (floors with the device's copy bandwidth on the GPU); sets ``rows_touched``."""
        hp, N = self.hp, self.data.n_labels
        peaks = getattr(self.ctx, "peaks", None)
        bw = peaks.bandwidth() if peaks is not None else 0.0
        out, self.rows_touched = {}, {}
        for name in self.ours:
            h = self.hist.get(name)
            if h is None or "rows_w2" not in h.keys():
                continue
            work = {k: sum(v for v in h.series(k) if math.isfinite(v)) for k in ref.WORK + ("rebuilds",)}
            ms = {p: sum(v for v in h.series(f"{p}_ms") if math.isfinite(v)) for p in ref.PHASES}
            out[name] = floors.phase_table(work, ms, hp.hidden, N, hp.L, hp.nbuckets, bw)
            self.rows_touched[name] = work["rows_w2"] / max(work["steps"], 1)
        return out


def _agg(fn, h: History, key: str, cast=float):
    """fn over the epochs' finite values of ``key`` (None when the trainer does not report it)."""
    vals = [v for v in h.series(key) if math.isfinite(v)]
    return cast(fn(vals)) if vals else None


def p1_plot(hist: Dict[str, History], title: str, target: float = math.nan,
            reached: Optional[Dict[str, Dict[str, float]]] = None):
    """Test P@1 against training time at every evaluation of every variant (every part with
    model.eval_every), the target P@1 as a dashed line and where each variant first reached it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, h in hist.items():
        ev = h.evals
        line, = ax.plot([float(r.get("time_s", math.nan)) for r in ev], [float(r.get("p@1", math.nan)) for r in ev],
                        marker="o", ms=3, label=name)
        at = (reached or {}).get(name, {})
        if math.isfinite(at.get("s", math.nan)):
            ax.plot([at["s"]], [at["p1"]], marker="*", ms=12, color=line.get_color(), ls="none")
    if math.isfinite(target):
        ax.axhline(target, color="0.4", ls="--", lw=0.8, label=f"target {target:.3f}")
    ax.set_xlabel("training time (s; evaluation excluded)")
    ax.set_ylabel("P@1 (test)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
