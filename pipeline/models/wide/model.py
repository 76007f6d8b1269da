"""model=wide_lr / model=wide_fm: cuWide training of LR and FM, the chosen variant and its baselines
trained from the same initialisation on the same data and chunk orders through the training
harness (:func:`pipeline.train.fit`); what the report holds: docs/models/wide.md."""
from __future__ import annotations

import math
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

from pipeline.errors import require
from pipeline.models.base import TrainingModel
from pipeline.models.wide import prep
from pipeline.models.wide import reference as ref
from pipeline.models.wide.variants import resolved_optimizer
from pipeline.results import Report
from pipeline.timing import speedups
from pipeline.train import BASELINE, OURS, History, Patience, fit, time_to_target

STRICT = ("stage", "torch")       # strict mini-batch SGD, whatever model.update and model.optimizer say


class CpuTrainer:
    """The float64 NumPy/SciPy reference as a trainer (SGD, or AdaGrad with ``optimizer="adagrad"``,
    the bias stepping by SGD with ``bias_lr``, default ``model.lr``)."""

    def __init__(self, data: prep.WideData, mc, update: str, optimizer: str = "sgd", bias_lr: Optional[float] = None):
        self.data, self.lr = data, float(mc.lr)
        self.bias_lr = self.lr if bias_lr is None else float(bias_lr)
        self.per = ref.chunks_per_step(update, int(mc.batch_size), data.chunk)
        self.denom = max(1, int(mc.batch_size) // data.chunk) * data.chunk if update == "chunk" else 0
        self.adagrad = optimizer == "adagrad"
        self.ada_lr = float(mc.get("adagrad_lr", 0.0))
        self.ada_init = float(mc.get("adagrad_init", 0.0))
        self.k = int(mc.k)

    def set_params(self, p: ref.Params) -> None:
        self.p = p.astype(np.float64)
        self.acc = ref.init_accumulator(self.data.d, self.k, self.ada_init) if self.adagrad else None

    def params(self) -> ref.Params:
        return self.p

    def epoch(self, order):
        t0 = time.perf_counter()
        lr = self.bias_lr if self.adagrad else self.lr      # with AdaGrad, lr steps only the bias
        loss = ref.train_epoch(self.data.Xtr, self.data.ytr, self.p, order, self.data.chunk, self.per, lr,
                               self.denom, self.acc, self.ada_lr, over=self.data.n)
        return loss, (time.perf_counter() - t0) * 1e3


def semantics(variant: str, update: str) -> str:
    """flow and cpu follow model.update; stage and torch always train strict mini-batches."""
    return update if variant in ("flow", "cpu") else "batch"


def optimizer_of(variant: str, optimizer: str) -> str:
    """flow and cpu follow model.optimizer (as resolved: :func:`variants.resolved_optimizer`); stage and
    torch always train with SGD."""
    return optimizer if variant in ("flow", "cpu") else "sgd"


def converged(h: History) -> bool:
    """Stopped by the early-stopping rule (patience, or the paper's) before the cap of epochs; not
    when it ran all of them or stopped on a non-finite value."""
    return h.stopped.startswith(("converged", "early stop"))


class WideTrainer:
    """One variant as a trainer of :func:`pipeline.train.fit`: an epoch trains the chunks
    in the epoch's seeded order (the same for every variant), ``stats`` gives the training loss and
    the device time of the epoch's kernels (``gpu_ms``), ``evaluate`` the validation loss and AUC.
    With ``parts`` > 1 (``fit(parts=)``, model.evals_per_epoch) the epoch's order is trained as
    that many consecutive slices cut between mini-batches of ``step`` chunks
    (:func:`reference.epoch_slice`): the same steps in the same order as one pass; ``part_stats``
    gives each slice's loss and device time, ``stats`` the epoch's (their sums)."""

    def __init__(self, name: str, kind: str, inner, data: prep.WideData, seed: int, shuffle: bool, step: int = 1):
        self.name, self.kind, self.inner, self.data = name, kind, inner, data
        self.seed, self.shuffle, self.step = seed, shuffle, max(1, int(step))
        self.work_per_epoch = data.n
        self.last: Tuple[float, float] = (math.nan, math.nan)
        self.part: Tuple[float, float] = (math.nan, math.nan)
        self._order: Tuple[int, Optional[np.ndarray]] = (-1, None)

    def order(self, index: int) -> np.ndarray:
        """The epoch's chunk order (drawn once an epoch, whatever the parts)."""
        if self._order[0] != index:
            self._order = (index, ref.epoch_order(self.data.n_chunks, self.seed, index, self.shuffle))
        return self._order[1]

    def epoch(self, index: int, progress, part: int = 0, parts: int = 1) -> None:
        order = self.order(index)
        if parts == 1:
            self.last = self.inner.epoch(order)
            progress(self.data.n)
            return
        piece = ref.epoch_slice(order, part, parts, self.step)
        loss, ms = self.inner.epoch(piece)        # loss: the slice's summed loss / the epoch's n samples
        data = self.data
        rows = data.rows_of(piece)
        self.part = (loss * data.n / max(rows, 1), ms)
        before = (0.0, 0.0) if part == 0 else self.last
        self.last = (before[0] + loss, before[1] + ms)
        progress(rows)

    def part_stats(self) -> Dict[str, float]:
        return {"train_loss": self.part[0], "gpu_ms": self.part[1]}

    def stats(self) -> Dict[str, float]:
        out = {"train_loss": self.last[0], "gpu_ms": self.last[1]}
        ov = getattr(self.inner, "overlap", None)
        if getattr(self.inner, "out_of_core", False) and ov:
            out["overlap"] = ov[-1]
        return out

    def evaluate(self) -> Dict[str, float]:
        vl, auc = ref.evaluate(self.data.Xva, self.data.yva, self.inner.params())
        return {"val_loss": vl, "val_auc": auc}

    def params(self) -> ref.Params:
        """The inner trainer's parameters (``fit(keep=)`` keeps a copy of the best epoch's)."""
        return self.inner.params()

    def set_params(self, p: ref.Params) -> None:
        self.inner.set_params(p)


def step_bound_ms(n: int, in_flight: int, publish_us: Tuple[float, float]) -> float:
    """The least an epoch of n samples costs with ``in_flight`` samples in flight: ceil(n / W)
    dependent steps, each at least one grid-wide publication of updates (``publish_us[0]``, a grid
    barrier), or twice as many half-window steps that may overlap the previous publication
    (``publish_us[1]``); the smaller of the two. NaN without a measurement."""
    steps = -(-int(n) // max(1, int(in_flight)))
    t0, t1 = (float(x) for x in publish_us)
    cands = [v for v in (steps * t0, 2 * steps * t1) if math.isfinite(v) and v > 0]
    return min(cands) / 1e3 if cands else math.nan


def strict_target(hist: Dict[str, History], update: str, margin: float, given=None) -> Tuple[float, str]:
    """(target validation loss, where it comes from): ``given`` (model.target_loss) when set, else
    the final validation loss (of the kept epoch) of strict mini-batch SGD in this run (stage, else
    torch, else cpu when it trains strict mini-batches, else cpu's own updates, said so) + ``margin``."""
    if given is not None:
        return float(given), "model.target_loss"
    for v in STRICT:
        if v in hist and hist[v].epochs:
            return hist[v].kept("val_loss") + margin, f"{v} (strict mini-batch SGD) + {margin:g}"
    if "cpu" in hist and hist["cpu"].epochs:
        how = "strict mini-batch SGD" if update == "batch" else f"update={update}: no strict run here"
        return hist["cpu"].kept("val_loss") + margin, f"cpu ({how}) + {margin:g}"
    return math.nan, "no strict mini-batch run"


class WideModel(TrainingModel):
    def prepare(self) -> None:
        cfg, m, ctx = self.cfg, self.cfg.model, self.ctx
        self.select()
        self.data = prep.prepare(cfg, int(m.chunk), int(m.hot))
        d = cfg.dataset
        if d.get("format") != "synth" and int(d.get("rows", 0) or 0) > 0:
            ctx.notice(f"dataset {d.name} ({d.get('path') or d.name}) trains on its first {self.data.n} training "
                       f"rows (dataset.rows={int(d.rows)}; 0 reads them all)")
        classes = np.unique(np.asarray(self.data.yva))
        if classes.size < 2:
            ctx.notice(f"val_auc is undefined (nan): every one of the {len(self.data.yva)} validation rows has "
                       f"label {classes[0]:g} and AUC needs both classes; the validation loss is unaffected")
        self.update = str(m["update"])
        self.optimizer = resolved_optimizer(m)       # auto: adagrad where flow supports it (transfer may fall back)
        # AdaGrad steps w and V per coordinate; the bias keeps an SGD step (the kernel's scale), scaled
        # for the labels' balance with model.adagrad_bias=prior
        self.bias_lr = (ref.adagrad_bias_lr(float(m.lr), self.data.ytr) if str(m.adagrad_bias) == "prior"
                        else float(m.lr))
        self.bias0 = ref.prior_logit(self.data.ytr) if str(m.bias_init) == "prior" else 0.0
        self.epochs = int(m.epochs)
        self.stop_metric = str(m.stop_metric)
        if self.stop_metric == "val_auc" and classes.size < 2:
            ctx.notice("model.stop_metric=val_auc is undefined here (one class in the validation split): "
                       "early stopping and the kept epoch watch val_loss instead")
            self.stop_metric = "val_loss"
        self.patience = Patience(self.stop_metric, "max" if self.stop_metric == "val_auc" else "min",
                                 int(m.patience), float(m.min_delta))
        # evaluations an epoch: slices of the chunk order cut between mini-batches, the same for every variant
        self.step = max(1, int(m.batch_size) // self.data.chunk)
        self.parts = int(m.evals_per_epoch)
        steps = -(-self.data.n_chunks // self.step)
        require(self.parts <= steps, "model.evals_per_epoch", self.parts,
                f"at most the {steps} mini-batches of {self.step * self.data.chunk} samples an epoch has here")
        self.trainers: Dict[str, object] = {}
        self.publish_us: Tuple[float, float] = (math.nan, math.nan)

    def budget_bytes(self) -> int:
        mb = float(self.cfg.model.device_budget_mb)
        if mb > 0:
            return int(mb * 2 ** 20)
        import cupy
        return int(0.6 * cupy.cuda.runtime.memGetInfo()[0])         # 60 % of the free device memory

    def transfer(self) -> None:
        from pipeline.errors import ConfigError
        from pipeline.models.wide import gpu
        m = self.cfg.model
        for v in self.ours + self.baselines:
            if v == "flow":
                budget = self.budget_bytes()
                if str(m.design) == "warp":
                    if gpu.csr_bytes(self.data) <= budget:
                        self.trainers[v] = gpu.FlowWarpTrainer(self.data, m, self.ctx, self.optimizer, self.bias_lr)
                        self.ctx.notice(self.trainers[v].describe())
                        continue
                    if self.optimizer != "sgd" and str(m.optimizer) != "auto":
                        raise ConfigError(f"model.optimizer={self.optimizer} needs the training data on the device "
                                          f"(design=warp), which exceeds the device budget: raise "
                                          f"model.device_budget_mb or use model.optimizer=sgd")
                    note = ("flow: design=warp keeps the training data on the device, which exceeds the device "
                            "budget; using design=chunk (out of core)")
                    if self.optimizer != "sgd":
                        self.optimizer = "sgd"
                        note += ", which trains SGD: model.optimizer=auto is sgd in this run (flow and cpu)"
                    self.ctx.notice(note)
                require(self.parts == 1 or self.data.edge_bytes <= budget, "model.evals_per_epoch", self.parts,
                        f"1 with out-of-core flow (training data {self.data.edge_bytes / 2**20:.0f} MiB over the "
                        f"device budget of {budget / 2**20:.0f} MiB: it streams pieces, not slices of the chunk "
                        f"order); raise model.device_budget_mb")
                self.trainers[v] = gpu.FlowTrainer(self.data, m, self.ctx, budget)
                if self.trainers[v].out_of_core:
                    self.ctx.notice(f"flow: training data ({self.data.edge_bytes / 2**20:.0f} MiB) exceeds the "
                                    f"device budget: out-of-core mode, {len(self.trainers[v].pieces)} pieces on "
                                    f"{m.streams} buffers")
            elif v == "stage":
                self.trainers[v] = gpu.StageTrainer(self.data, m, self.ctx)
            elif v == "torch":
                self.trainers[v] = gpu.TorchTrainer(self.data, m, self.ctx)
        if "flow" in self.trainers:
            self.publish_us = gpu.publication_us(self.ctx)
            if math.isfinite(self.publish_us[0]):
                self.ctx.notice(f"grid-wide publication of updates on this GPU: {self.publish_us[0]:.2f} us a step "
                                f"({self.publish_us[1]:.2f} us overlapping the previous one); the dependent-step "
                                f"bound of flow's epoch is x_of_step_bound's denominator")

    def _trainer(self, v: str, update: str, optimizer: str = "sgd"):
        if v == "cpu":
            return CpuTrainer(self.data, self.cfg.model, update, optimizer, self.bias_lr)
        return self.trainers[v]

    def train(self, v: str, update: str, live: bool = False, optimizer: Optional[str] = None,
              parts: Optional[int] = None) -> History:
        """``parts``: evaluations an epoch (None: model.evals_per_epoch)."""
        cfg, m, data = self.cfg, self.cfg.model, self.data
        opt = optimizer if optimizer is not None else optimizer_of(v, self.optimizer)
        inner = self._trainer(v, update, opt)
        inner.set_params(ref.init_params(data.d, int(m.k), float(m.init_std), int(cfg.seed), self.bias0))
        kind = OURS if v in self.ours else BASELINE
        tr = WideTrainer(v, kind, inner, data, int(cfg.seed), bool(m.shuffle), self.step)
        window, early, paper = int(m.window), bool(m.early_stop), str(m.stop_rule) == "paper"
        pre = "" if v == self.ours[0] else f"{v}/"

        def stop(h: History) -> str:
            if live:      # under the names report() gives the series
                rec = h.records[-1]
                self.ctx.log_epoch({pre + k: rec[k] for k in ("train_loss", "val_loss", "val_auc", "epoch_ms",
                                                              "gpu_ms") if k in rec}, h.epochs - 1)
            if not early:
                return ""
            if not paper:
                return self.patience(h)
            stopped = ref.should_stop(h.series("val_loss"), window)
            return f"early stop: validation loss above the mean of the previous {window} epochs" if stopped else ""
        h = fit(self.ctx, [tr], self.epochs, stop=stop, watch=("val_loss",), desc=f"{m.name}/{v}",
                parts=self.parts if parts is None else parts,
                keep=self.patience.best if bool(m.keep_best) else None)[v]
        if live:
            self.ctx.notice(self.outcome(v, h))
        return h

    def stopping_note(self) -> str:
        """The report's note on the stop rule, the kept epoch and the columns built on them."""
        m = self.cfg.model
        if not bool(m.early_stop):
            rule = "early stopping off (model.early_stop=false)"
        elif str(m.stop_rule) == "paper":
            rule = f"the paper's rule (validation loss above the mean of the previous {m.window} epochs)"
        else:
            p = self.patience
            rule = (f"patience {p.patience} on {p.key} (an improvement: by more than {p.min_delta:g}); converged "
                    f"= stopped by it before the cap")
        kept = (f"best_epoch: the epoch whose parameters each variant ended with (the best by {self.patience.key}); "
                f"train_loss, val_loss, val_auc and the check against cpu are that epoch's" if bool(m.keep_best)
                else "best_epoch: the last epoch (model.keep_best=false)")
        return f"stopping: at most {self.epochs} epochs (model.epochs), {rule}; {kept}"

    def outcome(self, v: str, h: History) -> str:
        """One line: whether ``v`` converged (stopped by the rule before the cap) and which epoch it kept."""
        m = self.cfg.model
        key = self.patience.key
        if converged(h):
            why = h.stopped.split(": ", 1)[1] if h.stopped.startswith("converged: ") else h.stopped
            how = f"converged at epoch {h.epochs} of at most {self.epochs} ({why})"
        elif h.stopped:
            how = f"stopped at epoch {h.epochs} of at most {self.epochs}: {h.stopped}"
        elif bool(m.early_stop):
            how = (f"not converged: ran the cap of {self.epochs} epochs (model.epochs) still improving"
                   if str(m.stop_rule) == "patience" else f"not converged: ran the cap of {self.epochs} epochs "
                   f"(model.epochs) without the paper's stop")
        else:
            how = f"trained the {h.epochs} epochs (model.early_stop=false)"
        if bool(m.keep_best):
            kept = (f"kept epoch {h.kept_epoch}, the best by {key}" if h.best else
                    f"kept the last epoch ({h.epochs}; no finite {key})")
        else:
            kept = f"kept the last epoch ({h.epochs}; model.keep_best=false)"
        return (f"{v}: {how}; {kept}: val_loss {h.kept('val_loss'):.5f}, val_auc {h.kept('val_auc'):.4f}")

    def execute(self) -> None:
        self.hist: Dict[str, History] = {}
        for v in self.ours + self.baselines:
            self.hist[v] = self.train(v, semantics(v, self.update), live=True)

    def verify(self) -> None:
        self.failures: List[str] = []
        self.refs: Dict[str, float] = {}
        self.dloss: Dict[str, float] = {}
        tol = float(self.cfg.model.tolerance)
        if "cpu" not in self.hist:
            return

        def key(v):
            return (semantics(v, self.update), optimizer_of(v, self.optimizer))
        self.refs[key("cpu")] = self.hist["cpu"].kept("val_loss")
        for v, h in self.hist.items():
            if v == "cpu":
                continue
            sem, opt = key(v)
            if (sem, opt) not in self.refs:
                self.refs[sem, opt] = self.train("cpu", sem, optimizer=opt, parts=1).kept("val_loss")
            d = abs(h.kept("val_loss") - self.refs[sem, opt])
            self.dloss[v] = d
            if not np.isfinite(d) or d > tol:
                how = sem if opt == "sgd" else f"{sem}, {opt}"
                self.failures.append(f"{v}: final validation log loss {h.kept('val_loss'):.5f} differs from the "
                                     f"cpu reference ({how} updates) {self.refs[sem, opt]:.5f} by {d:.4f} > {tol}")

    def report(self) -> Report:
        m, data = self.cfg.model, self.data
        rows = []
        floor_ms = self.ctx.peaks.floor_s(nbytes=data.edge_bytes) * 1e3 if self.ctx.peaks is not None else None
        target, target_src = strict_target(self.hist, self.update, float(m.target_margin), m.target_loss)
        for v, h in self.hist.items():
            gpu_ms = h.median("gpu_ms")
            r = {"variant": v, "kind": h.kind, "updates": semantics(v, self.update),
                 "optimizer": optimizer_of(v, self.optimizer), "epochs": h.epochs,
                 "early_stop": "yes" if h.epochs < self.epochs else "no",
                 "converged": "yes" if converged(h) else "no", "best_epoch": h.kept_epoch,
                 "train_loss": h.kept("train_loss"), "val_loss": h.kept("val_loss"), "val_auc": h.kept("val_auc"),
                 "epoch_ms": h.median("epoch_ms"), "gpu_ms": gpu_ms, "to_stop_s": h.last("time_s")}
            if v in self.dloss:
                r["dloss_vs_cpu"] = self.dloss[v]
                r["ok"] = self.dloss[v] <= float(m.tolerance)
            tt = time_to_target(h, target, "val_loss", ("epoch_ms", "gpu_ms"))
            r.update(to_target_epochs=tt["epochs"], to_target_s=tt["epoch_ms"] / 1e3,
                     to_target_gpu_s=tt["gpu_ms"] / 1e3)
            if floor_ms and v == "flow":
                r["x_of_floor"] = gpu_ms / floor_ms
            if v in self.trainers:
                # the epoch as a chain of dependent steps: a forward must see the updates of every sample
                # more than in_flight before it, so an epoch is at least n / in_flight steps
                w = self.trainers[v].in_flight
                r["in_flight"] = w
                r["us_per_step"] = gpu_ms * 1e3 / -(-data.n // w)
                if v == "flow":
                    bound = step_bound_ms(data.n, w, self.publish_us)
                    r["step_bound_ms"] = bound
                    r["x_of_step_bound"] = gpu_ms / bound if bound > 0 else math.nan
            ov = [x for x in h.series("overlap") if math.isfinite(x)]
            if ov:
                r["overlap"] = float(np.median(ov))
            rows.append(r)
        # x_vs_<b>: device time between GPU variants, wall time where the cpu reference is one of the two
        speedups(rows, self.ours, self.baselines, "epoch_ms")
        speedups([r for r in rows if r["variant"] != "cpu"], self.ours, [b for b in self.baselines if b != "cpu"],
                 "gpu_ms")
        cols = ["variant", "kind", "updates", "optimizer", "epochs", "early_stop", "converged", "best_epoch",
                "train_loss", "val_loss", "val_auc",
                "dloss_vs_cpu", "ok", "epoch_ms", "gpu_ms", "to_stop_s", "to_target_epochs", "to_target_s",
                "to_target_gpu_s", "x_of_floor", "x_of_step_bound", "step_bound_ms", "in_flight", "us_per_step",
                "overlap"] + [f"x_vs_{b}" for b in self.baselines]
        # epoch_ms: an epoch's wall time; gpu_ms: its kernels' device time (what the GPU ratios compare)
        rep = Report(rows=rows, columns=cols, failures=self.failures, measures={"epoch_ms": "wall time an epoch"},
                     title=f"{m.name} (k={m.k}) on {self.cfg.dataset.name}: {data.n} train / {data.Xva.shape[0]} val "
                           f"rows, {data.d} features, {data.Xtr.nnz / max(data.n, 1):.1f} nnz/row")
        main = self.ours[0]
        for v, h in self.hist.items():
            pre = "" if v == main else f"{v}/"
            for k in ("train_loss", "val_loss", "val_auc", "epoch_ms", "gpu_ms"):
                rep.series[pre + k] = h.series(k)
            rep.metrics[f"summary/{v}/converged"] = 1.0 if converged(h) else 0.0
        self.summarize(rep, rows, ["epoch_ms", "gpu_ms", "val_loss", "val_auc", "dloss_vs_cpu", "to_stop_s", "epochs", "best_epoch",
                                   "x_of_floor", "overlap", "in_flight", "us_per_step", "x_of_step_bound",
                                   "step_bound_ms", "to_target_epochs", "to_target_s", "to_target_gpu_s"])
        if floor_ms:
            rep.metrics["summary/floor_ms"] = floor_ms
        if math.isfinite(self.publish_us[0]):
            rep.metrics["summary/publish_us"] = self.publish_us[0]
            rep.metrics["summary/publish_overlap_us"] = self.publish_us[1]
        rep.metrics["summary/target_loss"] = target
        rep.metrics["summary/objective"] = self.hist[main].kept("val_loss")
        rep.notes.append(f"flow updates: {self.update}, optimizer {self.optimizer} (model.optimizer={m.optimizer}; "
                         f"stage/torch: strict mini-batches of {self.step * data.chunk} samples, SGD)")
        rep.notes.append(self.stopping_note())
        if self.parts == 1:
            rep.notes.append(f"time to quality: target validation loss {target:.5f} from {target_src}; to_target_s "
                             f"sums the epochs' training time (wall), to_target_gpu_s their device time, evaluation "
                             f"excluded")
        else:
            rep.notes.append(f"time to quality: target validation loss {target:.5f} from {target_src}; evaluated "
                             f"{self.parts} times an epoch (model.evals_per_epoch: slices of the chunk order cut "
                             f"between mini-batches), so to_target_epochs is in steps of 1/{self.parts}; to_target_s "
                             f"sums the slices' training time (wall), to_target_gpu_s their device time, evaluation "
                             f"excluded; epoch_ms, gpu_ms and the columns built on them stay per epoch, each the "
                             f"sum of its {self.parts} slices (on the GPU, each slice its own launches, drained at "
                             f"its end)")
        if not self.ctx.cuda:
            rep.notes.append("x_of_floor, x_of_step_bound: not on the CPU backend (they need the GPU's copy bandwidth "
                             "and grid-wide publication latency)")
        elif math.isfinite(self.publish_us[0]):
            rep.notes.append(f"x_of_floor = flow GPU time / one pass over the edge bytes at the copy bandwidth; "
                             f"x_of_step_bound = flow GPU time / (n / in_flight dependent steps x "
                             f"{self.publish_us[0]:.2f} us a grid-wide publication, measured at run start)")
        rep.figures["loss_vs_time.png"] = loss_plot(self.hist, f"{m.name} on {self.cfg.dataset.name}", target)
        return rep


def loss_plot(hist: Dict[str, History], title: str, target: float = math.nan):
    """Validation loss against cumulative training time of every variant at every evaluation (each
    epoch, or each part of one with model.evals_per_epoch): wall time (left) and device time (right;
    the CPU reference's is its wall time), with the target loss."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, clock, label in ((axes[0], "epoch_ms", "training time (s, wall, evaluation excluded)"),
                             (axes[1], "gpu_ms", "training time (s, device)")):
        for v, h in hist.items():
            pts = h.evals
            dt = [float(r.get(clock, math.nan)) for r in pts]
            t = np.cumsum([x if math.isfinite(x) else 0.0 for x in dt]) / 1e3
            ax.plot(t, [float(r.get("val_loss", math.nan)) for r in pts], marker="o", ms=3, label=f"{v} (val)")
        if math.isfinite(target):
            ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:.4f}")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation log loss")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
