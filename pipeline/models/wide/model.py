"""model=wide_lr / model=wide_fm: cuWide training of LR and FM, the chosen variant and its baselines
trained from the same initialisation on the same data and chunk orders, per-epoch losses, AUC and
times, early stopping, speedups from the same run, and loss-against-time plots."""
from __future__ import annotations

import time
from typing import Dict, List

import numpy as np

from pipeline.models.base import Model
from pipeline.models.wide import prep
from pipeline.models.wide import reference as ref
from pipeline.models.wide.variants import BY_MODEL, LR
from pipeline.results import Report

GPU_NAMES = LR.names("cuda")      # wide_lr and wide_fm have the same variants


class CpuTrainer:
    """The float64 NumPy/SciPy reference as a trainer."""

    def __init__(self, data: prep.WideData, mc, update: str):
        self.data, self.lr = data, float(mc.lr)
        self.per = ref.chunks_per_step(update, int(mc.batch_size), data.chunk)
        self.denom = max(1, int(mc.batch_size) // data.chunk) * data.chunk if update == "chunk" else 0

    def set_params(self, p: ref.Params) -> None:
        self.p = p.astype(np.float64)

    def params(self) -> ref.Params:
        return self.p

    def epoch(self, order):
        t0 = time.perf_counter()
        loss = ref.train_epoch(self.data.Xtr, self.data.ytr, self.p, order, self.data.chunk, self.per, self.lr,
                               self.denom)
        return loss, (time.perf_counter() - t0) * 1e3


def semantics(variant: str, update: str) -> str:
    """flow and cpu follow model.update; stage and torch always train strict mini-batches."""
    return update if variant in ("flow", "cpu") else "batch"


class WideModel(Model):
    GPU_VARIANTS = GPU_NAMES
    CPU_VARIANTS = LR.names("cpu")

    def prepare(self) -> None:
        cfg, m, ctx = self.cfg, self.cfg.model, self.ctx
        names = BY_MODEL.get(str(m.name), LR).check(cfg)
        if not ctx.cuda:
            asked = [n for n in names if n != "cpu"]
            if asked:
                ctx.notice(f"CPU backend: variant(s) {', '.join(asked)} need a GPU; training the NumPy reference (cpu)")
            self.ours, self.baselines = ["cpu"], []
        else:
            self.ours = list(dict.fromkeys(names))
            self.baselines = [b for b in m.baselines if b not in self.ours]
            if "torch" in self.ours + self.baselines:
                from pipeline.gpu.device import why_no_torch
                why = why_no_torch()
                if why:
                    ctx.notice(f"torch baseline skipped: {why}")
                    self.ours = [v for v in self.ours if v != "torch"] or ["flow"]
                    self.baselines = [v for v in self.baselines if v != "torch"]
        self.data = prep.prepare(cfg, ctx.size, int(m.chunk), int(m.hot))
        classes = np.unique(np.asarray(self.data.yva))
        if classes.size < 2:
            ctx.notice(f"val_auc is undefined (nan): every one of the {len(self.data.yva)} validation rows has "
                       f"label {classes[0]:g} and AUC needs both classes; the validation loss is unaffected")
        self.update = str(m["update"])
        self.epochs = int(m.epochs)
        self.trainers: Dict[str, object] = {}

    def budget_bytes(self) -> int:
        mb = float(self.cfg.model.device_budget_mb)
        if mb > 0:
            return int(mb * 2 ** 20)
        import cupy
        free, _ = cupy.cuda.runtime.memGetInfo()
        return int(0.6 * free)

    def transfer(self) -> None:
        from pipeline.models.wide import gpu
        m = self.cfg.model
        for v in self.ours + self.baselines:
            if v == "flow" and str(m.design) == "warp":
                budget = self.budget_bytes()
                if gpu.csr_bytes(self.data) <= budget:
                    self.trainers[v] = gpu.FlowWarpTrainer(self.data, m, self.ctx)
                    self.ctx.notice(self.trainers[v].describe())
                    continue
                self.ctx.notice("flow: design=warp keeps the training data on the device, which exceeds the device "
                                "budget; using design=chunk (out of core)")
            if v == "flow":
                self.trainers[v] = gpu.FlowTrainer(self.data, m, self.ctx, self.budget_bytes())
                if self.trainers[v].out_of_core:
                    self.ctx.notice(f"flow: training data ({self.data.edge_bytes / 2**20:.0f} MiB) exceeds the "
                                    f"device budget: out-of-core mode, {len(self.trainers[v].pieces)} pieces on "
                                    f"{m.streams} buffers")
            elif v == "stage":
                self.trainers[v] = gpu.StageTrainer(self.data, m, self.ctx)
            elif v == "torch":
                self.trainers[v] = gpu.TorchTrainer(self.data, m, self.ctx)

    def _trainer(self, v: str, update: str):
        if v == "cpu":
            return CpuTrainer(self.data, self.cfg.model, update)
        return self.trainers[v]

    def train(self, v: str, update: str, live: bool = False) -> Dict[str, List[float]]:
        cfg, m, data = self.cfg, self.cfg.model, self.data
        tr = self._trainer(v, update)
        tr.set_params(ref.init_params(data.d, int(m.k), float(m.init_std), int(cfg.seed)))
        h = {k: [] for k in ("train_loss", "val_loss", "val_auc", "epoch_ms", "gpu_ms", "time_s")}
        elapsed = 0.0
        bar = self.ctx.progress(range(self.epochs), desc=f"{m.name}/{v}", total=self.epochs)
        for e in bar:
            order = ref.epoch_order(data.n_chunks, int(cfg.seed), e, bool(m.shuffle))
            t0 = time.perf_counter()
            tl, gms = tr.epoch(order)
            ems = (time.perf_counter() - t0) * 1e3
            elapsed += ems / 1e3
            vl, auc = ref.evaluate(data.Xva, data.yva, tr.params())
            for k, x in zip(h, (tl, vl, auc, ems, gms, elapsed)):
                h[k].append(float(x))
            if live:      # under the names report() gives the series
                pre = "" if v == self.ours[0] else f"{v}/"
                self.ctx.log_epoch({pre + k: h[k][-1] for k in ("train_loss", "val_loss", "val_auc", "epoch_ms",
                                                                "gpu_ms")}, e)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(train=f"{tl:.4f}", val=f"{vl:.4f}", auc=f"{auc:.4f}")
            if not np.isfinite(vl):
                break
            if m.early_stop and ref.should_stop(h["val_loss"], int(m.window)):
                break
        h["stopped_early"] = [float(len(h["val_loss"]) < self.epochs)]
        if v == "flow" and getattr(tr, "out_of_core", False):
            h["overlap"] = list(tr.overlap)
        return h

    def execute(self) -> None:
        self.hist: Dict[str, Dict[str, List[float]]] = {}
        for v in self.ours + self.baselines:
            self.hist[v] = self.train(v, semantics(v, self.update), live=True)

    def verify(self) -> None:
        self.failures: List[str] = []
        self.refs: Dict[str, float] = {}
        tol = float(self.cfg.model.tolerance)
        if "cpu" not in self.hist:
            return
        self.refs[semantics("cpu", self.update)] = self.hist["cpu"]["val_loss"][-1]
        for v, h in self.hist.items():
            if v == "cpu":
                continue
            sem = semantics(v, self.update)
            if sem not in self.refs:
                self.refs[sem] = self.train("cpu", sem)["val_loss"][-1]
            d = abs(h["val_loss"][-1] - self.refs[sem])
            h["dloss"] = [d]
            if not np.isfinite(d) or d > tol:
                self.failures.append(f"{v}: final validation log loss {h['val_loss'][-1]:.5f} differs from the "
                                     f"cpu reference ({sem} updates) {self.refs[sem]:.5f} by {d:.4f} > {tol}")

    def report(self) -> Report:
        m, data = self.cfg.model, self.data
        rows = []
        med = {v: float(np.median(h["epoch_ms"])) for v, h in self.hist.items()}
        gmed = {v: float(np.median(h["gpu_ms"])) for v, h in self.hist.items()}
        floor_ms = None
        if self.ctx.peaks is not None:
            floor_ms = data.edge_bytes / self.ctx.peaks.bandwidth() * 1e3
        for v, h in self.hist.items():
            r = {"variant": v, "kind": "ours" if v in self.ours else "baseline", "updates": semantics(v, self.update),
                 "epochs": len(h["val_loss"]), "early_stop": "yes" if h["stopped_early"][0] else "no",
                 "train_loss": h["train_loss"][-1], "val_loss": h["val_loss"][-1], "val_auc": h["val_auc"][-1],
                 "epoch_ms": med[v], "gpu_ms": gmed[v], "to_stop_s": h["time_s"][-1]}
            if "dloss" in h:
                r["dloss_vs_cpu"] = h["dloss"][0]
                r["ok"] = h["dloss"][0] <= float(m.tolerance)
            if floor_ms and v == "flow":
                r["x_of_floor"] = gmed[v] / floor_ms
            if v in self.trainers:
                # the epoch as a chain of dependent steps: a forward must see the updates of every sample
                # more than in_flight before it, so an epoch is at least n / in_flight steps
                w = self.trainers[v].in_flight
                r["in_flight"] = w
                r["us_per_step"] = gmed[v] * 1e3 / -(-data.n // w)
            if "overlap" in h:
                r["overlap"] = float(np.median(h["overlap"]))
            for b in self.baselines:
                if b != v and b in med:
                    r[f"x_vs_{b}"] = gmed[b] / gmed[v] if v != "cpu" and b != "cpu" else med[b] / med[v]
            rows.append(r)
        cols = ["variant", "kind", "updates", "epochs", "early_stop", "train_loss", "val_loss", "val_auc",
                "dloss_vs_cpu", "ok", "epoch_ms", "gpu_ms", "to_stop_s", "x_of_floor", "in_flight", "us_per_step",
                "overlap"] + \
            [f"x_vs_{b}" for b in self.baselines]
        rep = Report(rows=rows, columns=cols, failures=self.failures,
                     title=f"{m.name} (k={m.k}) on {self.cfg.dataset.name}: {data.n} train / {data.Xva.shape[0]} val "
                           f"rows, {data.d} features, {data.Xtr.nnz / max(data.n, 1):.1f} nnz/row")
        main = self.ours[0]
        for v, h in self.hist.items():
            pre = "" if v == main else f"{v}/"
            for k in ("train_loss", "val_loss", "val_auc", "epoch_ms", "gpu_ms"):
                rep.series[pre + k] = h[k]
            rep.metrics[f"summary/{v}/epoch_ms"] = med[v]
            rep.metrics[f"summary/{v}/gpu_ms"] = gmed[v]
            rep.metrics[f"summary/{v}/val_loss"] = h["val_loss"][-1]
            rep.metrics[f"summary/{v}/val_auc"] = h["val_auc"][-1]
            rep.metrics[f"summary/{v}/time_to_stop_s"] = h["time_s"][-1]
        for r in rows:
            for k, x in r.items():
                if k.startswith("x_vs_") or k in ("x_of_floor", "overlap", "in_flight", "us_per_step"):
                    rep.metrics[f"summary/{r['variant']}/{k}"] = float(x)
        if floor_ms:
            rep.metrics["summary/floor_ms"] = floor_ms
        rep.metrics["summary/objective"] = self.hist[main]["val_loss"][-1]
        rep.notes.append(f"flow updates: {self.update} (stage/torch: strict mini-batches of "
                         f"{max(1, int(m.batch_size) // data.chunk) * data.chunk} samples)")
        rep.figures["loss_vs_time.png"] = loss_plot(self.hist, f"{m.name} on {self.cfg.dataset.name}")
        return rep


def loss_plot(hist, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for v, h in hist.items():
        ax.plot(h["time_s"], h["val_loss"], marker="o", ms=3, label=f"{v} (val)")
    ax.set_xscale("log")
    ax.set_xlabel("training time (s, wall, evaluation excluded)")
    ax.set_ylabel("validation log loss")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
