"""model=bcm_cnn: train a CNN whose conv and FC layers are block-circulant (paper §4.5, Fig. 13)
beside the same network with dense layers, on CIFAR-10, MNIST or scikit-learn's digits; report
per-epoch loss, test accuracy and epoch time, and the accuracy gap and epoch-time ratio BCM vs dense.

On the GPU the BCM layers run our kernels (variant from ``kernel=``, default ``tiled``) and the dense
layers cuBLAS (``model.precision``); on the CPU backend the NumPy FFT reference and NumPy matmuls.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List

import numpy as np

from pipeline.bench import rel_error
from pipeline.models.base import TrainingModel
from pipeline.models.bcm import reference as ref
from pipeline.data.fallback import fallback
from pipeline.models.bcm_cnn import data as datasets
from pipeline.models.bcm_cnn.net import ARCHS, Net, bcm_layer_sizes
from pipeline.registry import BASELINE, OURS
from pipeline.results import Report
from pipeline.timing import speedups
from pipeline.train import fit

# Paper §4.5 / Fig. 13: CIFAR-10 accuracy drop of the BCM network vs GEMM, percentage points.
PAPER_GAP = {16: 1.4, 32: 2.3, 64: 5.2}
WARMUP_STEPS = 100     # linear learning-rate warm-up (plain CNN without normalisation layers)
HISTORY = ("train_loss", "test_acc", "epoch_ms", "layer_ms")    # the per-epoch series of each network


def _cpu_blas_single_thread(on: bool):
    """One BLAS thread on the CPU backend: these matrices are small, and a multi-threaded
    OpenBLAS on a shared machine spends ~100x longer waiting than computing."""
    import contextlib
    if on:
        try:
            from threadpoolctl import threadpool_limits
            return threadpool_limits(limits=1, user_api="blas")
        except ImportError:
            pass
    return contextlib.nullcontext()


class NetTrainer:
    """One network (BCM with one variant and block size, or dense) as a trainer of the training
    harness: an epoch is one pass of SGD over the training split in a seeded random order, with a
    cosine learning rate after a linear warm-up; ``stats`` gives the mean training loss and the
    time spent in the linear layers (:class:`pipeline.timing.IntervalSum`, inside the net);
    ``evaluate`` the test accuracy."""

    def __init__(self, model: "BcmCnnModel", entry: Dict[str, Any], net: Net):
        cfg, m, ctx = model.cfg, model.cfg.model, model.ctx
        self.model, self.net, self.xp = model, net, net.xp
        self.name = entry["tag"]
        self.kind = OURS if entry["bcm"] else BASELINE
        self.X, self.Y = model.dtrain if ctx.cuda else (model.train.x, model.train.y)
        self.Xt, self.Yt = model.dtest if ctx.cuda else (model.test.x, model.test.y)
        self.n = len(model.train.y)
        self.bs = min(int(m.batch_size), self.n)
        self.steps_per_epoch = self.n // self.bs          # the last incomplete batch is dropped
        self.work_per_epoch = self.steps_per_epoch * self.bs
        self.total = self.steps_per_epoch * int(m.epochs)
        self.warm = min(WARMUP_STEPS, max(1, self.total // 5))
        self.augment = bool(m.augment) and model.dataset == "cifar10"
        self.seed = int(cfg.seed)
        self.lr, self.momentum = float(m.lr), float(m.momentum)
        self.weight_decay, self.clip_norm = float(m.weight_decay), float(m.clip_norm)
        self.t = 0                                     # steps so far (the learning-rate schedule)
        self.loss_sum = None

    def epoch(self, index: int, progress) -> None:
        xp, net, bs = self.xp, self.net, self.bs
        rng = np.random.default_rng([self.seed, 11, index])
        perm = rng.permutation(self.n)
        net.timer.reset()
        loss_sum = xp.zeros((), xp.float64)
        for s in range(self.steps_per_epoch):
            t = self.t
            lr = self.lr * min(1.0, (t + 1) / self.warm) * 0.5 * (1 + math.cos(math.pi * t / self.total))
            xb, yb = self.model._batch(xp, self.X, self.Y, perm[s * bs:(s + 1) * bs], self.augment, rng)
            loss_sum += net.train_step(xb, yb, lr, self.momentum, self.weight_decay, self.clip_norm)
            self.t += 1
            progress(bs)
        self.loss_sum = loss_sum

    def stats(self) -> Dict[str, float]:
        return {"train_loss": float(self.loss_sum) / max(1, self.steps_per_epoch),
                "layer_ms": self.net.timer.total_ms()}

    def evaluate(self) -> Dict[str, float]:
        return {"test_acc": self.model._evaluate(self.net, self.Xt, self.Yt)}


class BcmCnnModel(TrainingModel):

    # ---------------------------------------------------------------------------------- prepare
    def prepare(self) -> None:
        cfg, m, ctx = self.cfg, self.cfg.model, self.ctx
        self.dataset = fallback(cfg, str(cfg.dataset.name), ctx.notice)
        self.select()
        self.variants = list(dict.fromkeys("cpu_fft" if v == "cpu" else v for v in self.ours))
        self.train, self.test = datasets.load(cfg, self.dataset, int(cfg.seed))
        n, bs = len(self.train.y), min(int(m.batch_size), len(self.train.y))
        self.samples_per_epoch = n // bs * bs           # for the progress bar (full batches only)
        self.spec = ARCHS[self.dataset]
        self.input_shape = tuple(self.train.x.shape[1:])
        ks = [int(k) for k in (list(m.block_sizes) or [m.block_size])]
        if m.bcm:
            self._warn_large_blocks(ks)
        self.nets: List[Dict[str, Any]] = []
        if m.dense_baseline:
            self.nets.append({"tag": "dense", "k": None, "bcm": False})
        if m.bcm:
            many = len(self.variants) > 1
            self.nets += [{"tag": f"bcm_k{k}" + (f"_{v}" if many else ""), "k": k, "bcm": True, "variant": v}
                          for v in self.variants for k in ks]
        ctx.notice(f"bcm_cnn on {self.dataset}: {len(self.train.y)} training / {len(self.test.y)} test images, "
                   f"{int(m.epochs)} epoch(s), batch {int(m.batch_size)}; networks: "
                   f"{', '.join(n['tag'] for n in self.nets)}")

    def _warn_large_blocks(self, ks: List[int]) -> None:
        """One line when a block is larger than a BCM layer it compresses: the layer is padded to a
        single circulant block row or column, and such a network may not learn (digits, k=64)."""
        sizes = bcm_layer_sizes(self.spec, self.input_shape)
        if not sizes:
            return
        name, fin, fout = min(sizes, key=lambda t: min(t[1], t[2]))
        smallest = min(fin, fout)
        big = [k for k in ks if k > smallest]
        if big:
            key = "model.block_sizes" if list(self.cfg.model.block_sizes) else "block_size"
            self.ctx.notice(f"warning: {key}={big[0] if len(big) == 1 else big} is larger than layer {name} of the "
                            f"{self.dataset} network ({fin} -> {fout} features), so the layer is one padded block "
                            f"and may not learn; use block sizes up to {1 << (smallest.bit_length() - 1)}")

    def transfer(self) -> None:
        import cupy
        self.dtrain = (cupy.asarray(self.train.x), cupy.asarray(self.train.y))
        self.dtest = (cupy.asarray(self.test.x), cupy.asarray(self.test.y))

    # ---------------------------------------------------------------------------------- execute
    def _batch(self, xp, X, Y, idx, augment: bool, rng: np.random.Generator):
        """The batch ``idx``; with ``augment``: random crops of the 4-pixel zero-padded image and
        random horizontal flips (drawn on the host from the seeded ``rng``)."""
        i = xp.asarray(idx)
        xb, yb = X[i], Y[i]
        if not augment:
            return xb, yb
        n, h, w, _ = xb.shape
        pad = 4
        xpd = xp.pad(xb, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        oy = rng.integers(0, 2 * pad + 1, n)
        ox = rng.integers(0, 2 * pad + 1, n)
        flip = rng.random(n) < 0.5
        rows = oy[:, None] + np.arange(h)[None, :]
        cols = ox[:, None] + np.arange(w)[None, :]
        cols = np.where(flip[:, None], cols[:, ::-1], cols)
        b = xp.asarray(np.arange(n)[:, None, None])
        return xpd[b, xp.asarray(rows[:, :, None]), xp.asarray(cols[:, None, :])], yb

    def _evaluate(self, net: Net, X, Y) -> float:
        xp = net.xp
        bs = int(self.cfg.model.eval_batch)
        correct = xp.zeros((), xp.int64)
        for s in range(0, len(Y), bs):
            correct += (net.predict(X[s:s + bs]) == Y[s:s + bs]).sum()
        return float(correct) / max(1, len(Y))

    def _trainer(self, entry) -> "NetTrainer":
        """Build ``entry``'s network (when its turn comes: one network's device memory at a time)
        and keep it in ``self.results`` for the checks and the report."""
        net = Net(self.spec, self.input_shape, entry["bcm"], entry["k"] or 1, cuda=self.ctx.cuda,
                  variant=entry.get("variant") or "tiled", precision=str(self.cfg.model.precision))
        net.init(int(self.cfg.seed))
        tr = NetTrainer(self, entry, net)
        self.results[entry["tag"]] = {**entry, "net": tr.net, "hist": {}, "failure": None}
        return tr

    def _epoch_done(self, tr: "NetTrainer", rec: Dict[str, float]) -> None:
        """Log an epoch's values as soon as they are known, and print its line."""
        e, epochs = int(rec["epoch"]), int(self.cfg.model.epochs)
        self.ctx.log_epoch({f"{tr.name}/{key}": rec[key] for key in HISTORY}, e - 1)
        print(f"[bcm_cnn] {tr.name} epoch {e}/{epochs}: train loss {rec['train_loss']:.4f}, "
              f"test acc {100 * rec['test_acc']:.2f}%, epoch {rec['epoch_ms'] / 1e3:.2f} s "
              f"(linear layers {rec['layer_ms'] / 1e3:.2f} s)", flush=True)

    def _trained(self, tr: "NetTrainer") -> None:
        tr.net.release()
        if self.ctx.cuda:
            import cupy
            cupy.get_default_memory_pool().free_all_blocks()

    def execute(self) -> None:
        """Every network trained through the training harness (:func:`pipeline.train.fit`): each
        epoch timed by :class:`pipeline.timing.Interval`, evaluated on the test split after it,
        stopped on a non-finite training loss."""
        self.results: Dict[str, Dict[str, Any]] = {}
        with _cpu_blas_single_thread(not self.ctx.cuda):
            self.histories = fit(self.ctx, [lambda e=e: self._trainer(e) for e in self.nets], int(self.cfg.model.epochs),
                                 watch=("train_loss",), desc="bcm_cnn", work_per_epoch=self.samples_per_epoch,
                                 after=self._trained, on_epoch=self._epoch_done)
        for tag, h in self.histories.items():
            r = self.results[tag]
            r["hist"] = {key: h.series(key) for key in HISTORY}
            if h.stopped:
                r["failure"] = (f"{tag}: training loss became {h.last('train_loss')} in epoch {h.epochs} "
                                f"(lower model.lr)")

    # ----------------------------------------------------------------------------------- verify
    def _check_layers(self, net: Net) -> Dict[str, float]:
        """Each BCM layer of the trained network (its own weights, the backend's code: our kernels
        on the GPU) on fresh random inputs against the float64 dense-matrix reference."""
        from pipeline.models.bcm_cnn.net import CpuBcmCore, GpuBcmCore
        rng = np.random.default_rng([int(self.cfg.seed), 99])
        errs = {}
        for lin in net.linears:
            if not lin.bcm:
                continue
            rows = 37                                  # not a multiple of 32
            x = rng.standard_normal((rows, lin.in_p), dtype=np.float32)
            g = rng.standard_normal((rows, lin.out_p), dtype=np.float32)
            w = np.asarray(lin.W.get() if net.cuda else lin.W, np.float32)
            b = np.asarray(lin.b.get() if net.cuda else lin.b, np.float32)
            exp = ref.fc_reference(x, w, b, g)
            if net.cuda:
                import cupy
                core = GpuBcmCore(lin.p, lin.q, lin.k, net.variant)
                a = core.forward(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b))
                dw, dx, db = core.backward(cupy.asarray(g), True)
                got = {"a": a.get(), "dw": dw.get(), "dx": dx.get(), "db": db.get()}
            else:
                core = CpuBcmCore(lin.p, lin.q, lin.k)
                a = core.forward(x, w, b)
                dw, dx, db = core.backward(g, True)
                got = {"a": a, "dw": dw, "dx": dx, "db": db}
            errs[lin.name] = max(rel_error(got[key], exp[key]) for key in ("a", "dw", "dx", "db"))
        return errs

    def verify(self) -> None:
        tol = float(self.cfg.model.tolerance)
        self.failures: List[str] = []
        self.layer_errors: Dict[str, Dict[str, float]] = {}
        self.checked: Dict[str, bool] = {}            # network -> passed every check (the row's ok)
        for tag, r in self.results.items():
            before = len(self.failures)
            if r["failure"]:
                self.failures.append(r["failure"])
            if r["bcm"]:
                errs = self._check_layers(r["net"])
                self.layer_errors[tag] = errs
                for name, e in errs.items():
                    if not e <= tol:
                        self.failures.append(f"{tag}: BCM layer {name} ({r['variant']}) differs from the float64 "
                                             f"reference by {e:.2e} > tolerance {tol:g}")
            acc = r["hist"]["test_acc"][-1] if r["hist"]["test_acc"] else float("nan")
            if not acc >= float(self.cfg.model.min_accuracy):
                self.failures.append(f"{tag}: final test accuracy {acc:.4f} < model.min_accuracy "
                                     f"{float(self.cfg.model.min_accuracy):g}")
            self.checked[tag] = len(self.failures) == before

    # ----------------------------------------------------------------------------------- report
    @staticmethod
    def _steady(vals: List[float]) -> float:
        """Epoch time without the first epoch (kernel compilation, FFT plans) when there are more."""
        v = vals[1:] if len(vals) > 1 else vals
        return float(np.median(v)) if v else float("nan")

    @staticmethod
    def _vs_dense(rows: List[Dict[str, Any]]) -> None:
        """The BCM networks against the dense one, through the speedup function every model uses
        (:func:`pipeline.timing.speedups`): ``x_vs_dense`` (dense epoch time / BCM epoch time),
        ``time_vs_dense`` and ``layer_time_vs_dense`` (BCM time / dense time: the epoch, the linear
        layers)."""
        bcm = [r["network"] for r in rows if r["network"] != "dense"]
        for col, name in (("epoch_ms", "time_vs_dense"), ("layer_ms", "layer_time_vs_dense")):
            ratios = speedups([{"network": r["network"], col: r[col]} for r in rows], bcm, ["dense"], col,
                              key="network")
            for row, x in zip(rows, ratios):
                if row["network"] == "dense":
                    continue
                v = x.get("x_vs_dense")
                row[name] = 1.0 / v if v else None
                if col == "epoch_ms" and v:
                    row["x_vs_dense"] = v

    def report(self) -> Report:
        rep = Report(failures=self.failures)
        checked = getattr(self, "checked", {})
        dense = self.results.get("dense")
        dense_acc = dense["hist"]["test_acc"][-1] if dense and dense["hist"]["test_acc"] else None
        rows = []
        for tag, r in self.results.items():
            h, net = r["hist"], r["net"]
            acc = h["test_acc"][-1] if h["test_acc"] else float("nan")
            if self.ctx.cuda:
                impl = r["variant"] if r["bcm"] else f"cublas_{self.cfg.model.precision}"
            else:
                impl = "numpy_fft" if r["bcm"] else "numpy"
            # variant: the network (what the fastest line names; the BCM networks are ours, dense the
            # baseline), impl: what computes its linear layers; network stays for the suite's records
            row = {"variant": tag, "kind": OURS if r["bcm"] else BASELINE, "ok": checked.get(tag, True),
                   "network": tag, "k": r["k"] or "-", "impl": impl,
                   "weights": net.n_weights, "compression": net.n_dense_weights / net.n_weights,
                   "epochs": len(h["test_acc"]), "train_loss": h["train_loss"][-1] if h["train_loss"] else None,
                   "test_acc_pct": 100 * acc, "best_acc_pct": 100 * max(h["test_acc"], default=float("nan")),
                   "epoch_ms": self._steady(h["epoch_ms"]), "layer_ms": self._steady(h["layer_ms"])}
            if r["bcm"]:
                row["max_layer_err"] = max(self.layer_errors.get(tag, {}).values(), default=None)
            if r["bcm"] and dense_acc is not None:
                row["acc_gap_pct"] = 100 * (dense_acc - acc)
                if self.dataset == "cifar10" and r["k"] in PAPER_GAP:
                    row["paper_gap_pct"] = PAPER_GAP[r["k"]]
            rows.append(row)
            for key, vals in h.items():
                rep.series[f"{tag}/{key}"] = list(vals)
        if dense_acc is not None:
            self._vs_dense(rows)
        self.summarize(rep, rows, ["test_acc_pct", "best_acc_pct", "train_loss", "epoch_ms", "layer_ms", "compression",
                                   "acc_gap_pct", "paper_gap_pct", "time_vs_dense", "layer_time_vs_dense"], by="network")
        rep.rows = rows
        rep.columns = ["variant", "kind", "k", "impl", "ok", "weights", "compression", "epochs", "train_loss",
                       "test_acc_pct", "best_acc_pct", "acc_gap_pct", "paper_gap_pct", "epoch_ms", "x_vs_dense",
                       "time_vs_dense", "layer_ms", "layer_time_vs_dense", "max_layer_err"]
        first_bcm = next((r for r in self.results.values() if r["bcm"]), None)
        obj = first_bcm or dense
        if obj and obj["hist"]["test_acc"]:
            rep.metrics["summary/objective"] = float(obj["hist"]["test_acc"][-1])
        bcm_net = (first_bcm or next(iter(self.results.values())))["net"]
        rep.title = (f"bcm_cnn on {self.dataset} ({'GPU ' + self.ctx.device.name if self.ctx.cuda else 'CPU, NumPy'}): "
                     f"{bcm_net.describe()}")
        rep.notes.append(f"network: {bcm_net.describe()}; BCM layers: {', '.join(bcm_net.bcm_layers()) or 'none'}")
        rep.figures["training.png"] = self._plot()
        return rep

    def _plot(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for tag, r in self.results.items():
            h = r["hist"]
            ep = np.arange(1, len(h["test_acc"]) + 1)
            ax1.plot(ep, h["train_loss"], marker="o", label=tag)
            ax2.plot(ep, 100 * np.asarray(h["test_acc"]), marker="o", label=tag)
        for ax, what in ((ax1, "training loss"), (ax2, "test accuracy (%)")):
            ax.set_xlabel("epoch")
            ax.set_ylabel(what)
            ax.legend(fontsize=8)
        fig.suptitle(f"BCM CNN vs dense on {self.dataset}")
        fig.tight_layout()
        return fig
