"""model=sparse_dnn: SNIG sparse DNN inference on the HPEC Sparse DNN Challenge networks
(docs/models/sparse_dnn.md). The dataset picks the network, kernel= the variant, model.baselines are
timed beside it; every variant's categories are checked against the golden set, our variants'
final activations must be bit-identical from pass to pass, and the rate is images x edges / time.
"""
from __future__ import annotations

import gc
import time
from types import SimpleNamespace
from typing import Any, Dict, List

import numpy as np
from omegaconf import OmegaConf

from pipeline.data import radixnet
from pipeline.errors import ConfigError
from pipeline.config import knob
from pipeline.models.base import SelectsVariants
from pipeline.data.fallback import fallback
from pipeline.models.sparse_dnn import multi
from pipeline.models.sparse_dnn import reference as ref
from pipeline.models.sparse_dnn.network import _csr_bytes, _gb, load_network   # noqa: F401 (load_network: re-exported)
from pipeline.results import Report
from pipeline.timing import Interval, Timing, time_cpu
from pipeline.timing import speedups

# What each variant promises about bit-identical outputs from pass to pass (the `deterministic`
# column adds what the run saw: the digests of the checked and the profiled pass compared).
DETERMINISM = {
    "snig": "by design (64-bit fixed-point sums: integer atomics in any order give the same sum)",
    "pull": "by design (each output one FMA chain in CSC order, no atomics)",
    "cluster": "by design (each output one FMA chain in CSC order, no atomics; the same bits as pull)",
    "bf": "by design (each output one thread's sum in CSC order, no atomics)",
    "cusparse": "not promised (cuSPARSE SpMM makes no run-to-run guarantee)",
    "cpu": "by design (exact semantics: the answer has no order)",
}


def _passes(repeats: int, warmup: int) -> SimpleNamespace:
    """The timing policy of :mod:`pipeline.timing` for exactly ``repeats`` timed passes after
    ``warmup`` untimed ones (model.repeats / model.warmup)."""
    return SimpleNamespace(warmup=int(warmup), min_repeats=int(repeats), max_repeats=int(repeats), min_time_ms=0.0)


def host_memory(net, variants: List[str], S: int = 1) -> Dict[str, float]:
    """Estimated host bytes: inputs, layers held, pinned weights of each GPU runner (one exists at a
    time), and the peak (inputs + layers + the largest runner's pinned copy)."""
    from pipeline.models.sparse_dnn.gpu import cluster_bytes, packed_bytes
    lay, cap = net.layers, radixnet.max_nnz(net.layers)
    if isinstance(lay, radixnet.Layers):
        held = lay.nbytes if lay.keep else 0          # a lazy RadiX-Net holds none
    else:
        held = sum(_csr_bytes(w) for w in lay)
    est = {"inputs": float(_csr_bytes(net.Y0)), "layers": float(held)}
    for v in variants:
        if v in ("snig", "pull", "bf", "cusparse"):
            est[v] = float(packed_bytes(net.N, net.L, cap, S if v == "snig" else 0))
        elif v == "cluster":              # RadiX-Net's shape (16 outputs a list); other networks up to 16x more
            est[v] = float(cluster_bytes(net.N, net.L))
    est["peak"] = est["inputs"] + est["layers"] + max([est.get(v, 0.0) for v in variants] + [0.0])
    return est


def live_work(net):
    """(edge updates on live rows, bytes floor) of one pass over ``net``, from the reference's
    nonzero rows per layer (None without them): a layer costs (its live input rows) x (its
    edges); the floor is what any layer-at-a-time method must move, the live rows' dense
    activations read and written once per layer plus every layer's weights (index + value) once."""
    rr = net.meta.get("ref_rows")
    if rr is None or len(rr) != net.L:
        return None
    live_in = np.r_[int(np.count_nonzero(np.diff(net.Y0.indptr))), np.asarray(rr[:-1], np.int64)]
    lay = net.layers
    nnz = np.array([lay.nnz(k) for k in range(net.L)] if isinstance(lay, radixnet.Layers)   # no generation
                   else [w.nnz for w in lay], np.float64)
    updates = float(live_in @ nnz)
    nbytes = float(live_in.sum()) * net.N * 4 * 2 + float(net.edges()) * 8
    return updates, nbytes


def pass_floors(work, edges: float, peaks) -> Dict[str, float]:
    """The least time of one pass by each bound, from :func:`live_work` and the measured ceilings:
    ``memory_s`` (its bytes at the copy bandwidth), ``fma_s`` (the live-row edge updates, 2 flops
    each, at the fp32 GEMM rate) and ``edges_fma_s`` (the challenge's count, every image times every
    edge, dead rows included: what a method without row skipping would compute). ``pct_peak`` is
    the larger of the first two over the time (``floor_s``), as for every model (:meth:`Peaks.floor_s`)."""
    return {"memory_s": work[1] / peaks.bandwidth(), "fma_s": 2.0 * work[0] / peaks.flops("fp32"),
            "edges_fma_s": 2.0 * edges / peaks.flops("fp32"), "floor_s": peaks.floor_s(work[1], 2.0 * work[0])}


def _once(fn):
    """(fn(), seconds) of one pass that must also give its answer (the checked, the profiled pass),
    on the project's interval timer (:class:`pipeline.timing.Interval`, host clock: a pass is
    host-synchronous, see :meth:`SparseDnnModel._time`)."""
    clock = Interval("cpu")
    clock.start()
    out = fn()
    return out, clock.stop() * 1e-3


class SparseDnnModel(SelectsVariants):

    # ------------------------------------------------------------------ prepare
    def prepare(self) -> None:
        cfg, m, d = self.cfg, self.cfg.model, self.cfg.dataset
        # On the CPU backend in this process (model.gpus=1) the reference classifies every image in one
        # pass (its threads split the rows themselves), so a batch size would be ignored: refuse it, as
        # a model refuses a knob it does not use. model.gpus=n uses it (the workers claim batches).
        if not self.ctx.cuda and int(m.gpus) == 1 and int(m.batch_size) != 0:
            raise ConfigError(f"{knob(cfg, 'batch_size')}={int(m.batch_size)} is not used by model=sparse_dnn on "
                              f"the CPU backend: the SciPy reference classifies all images in one pass; leave it out "
                              f"(or add model.gpus=2: worker processes claim batches of it)")
        # RadiX-Net inputs from MNIST, or dataset.fallback's stand-in when MNIST is not in data_dir (one
        # line, as for model=bcm_cnn); the choice goes into cfg, which model.gpus' workers load from
        if d.format == "radixnet" and str(d.inputs) == "mnist":
            d.inputs = fallback(cfg, "mnist", self.ctx.notice, f"{d.name} takes {{}} inputs")
        self.select()
        self.workers = None                     # None: in-process (model.gpus=1)
        if int(m.gpus) != 1:
            self.workers = multi.worker_count(int(m.gpus), multi.gpu_count() if self.ctx.cuda else None)
            what = f"GPUs 0..{self.workers - 1}" if self.ctx.cuda else "the SciPy reference"
            self.ctx.notice(f"model.gpus={m.gpus}: {self.workers} worker processes ({what}) claiming batches")
        cells = [(int(c[0]), int(c[1])) for c in m.grid] or [(int(d.neurons), int(d.layers))]
        if m.grid and d.format != "radixnet":
            raise ConfigError(f"model.grid needs a generated network (dataset.format=radixnet), got {d.format}")
        self.nets = []
        for N, L in cells:
            t0 = time.perf_counter()
            net = load_network(cfg, N, L, int(d.images), self.ctx.size == "small", self.ctx.progress,
                               self.ctx.notice)
            net.meta["prepare_s"] = time.perf_counter() - t0
            self.nets.append(net)
            self._memory_notice(net)

    def _memory_notice(self, net) -> None:
        """Say where host memory goes when the network is large (> 1 GB pinned a runner)."""
        from pipeline.models.sparse_dnn.gpu import sections
        S = 1
        if self.ctx.cuda and self.ctx.device is not None:
            info, m = self.ctx.device, self.cfg.model
            limit = info.smem_per_block_optin - 1024 if m.smem_optin else 48 * 1024
            try:
                S = sections(net.N, limit // int(m.get("rows_per_block", 1)), int(m.num_secs), elem=8)
            except Exception:          # noqa: BLE001 - the runner reports it properly
                S = 1
        variants = self.ours + self.baselines if self.ctx.cuda else []
        est = host_memory(net, variants, S)
        net.meta["host_memory"] = est
        if est["peak"] > 4e9 or est["inputs"] > 1e9:
            parts = [f"inputs {_gb(est['inputs'])}", f"layers held {_gb(est['layers'])}"] + \
                    [f"{v} pinned {_gb(est[v])}" for v in variants if v in est]
            per = f" per worker process ({self.workers} workers)" if self.workers else ""
            self.ctx.notice(f"{net.name}: host memory estimate{per}: {', '.join(parts)} (one runner at a time) "
                            f"-> peak ~{_gb(est['peak'])}")

    # ------------------------------------------------------------------ time budget
    def _left(self, net) -> float:
        """Seconds left of model.budget_s for ``net`` (its preparation counts; inf when 0)."""
        budget = float(self.cfg.model.get("budget_s", 0) or 0)
        if budget <= 0:
            return float("inf")
        return budget - net.meta.get("prepare_s", 0.0) - (time.perf_counter() - self._net_t0)

    # ------------------------------------------------------------------ execute
    def _time(self, fn, repeats: int, warmup: int):
        """(median, IQR) in seconds of ``repeats`` passes of ``fn`` after ``warmup`` untimed ones,
        through the project's timer (:func:`pipeline.timing.time_cpu`, a fixed count: a pass is
        seconds long, so no minimum time applies). A pass is host-synchronous (it ends with its
        categories on the host), so its wall time is its time on every backend; the CUDA-event
        timer would add a warm-up pass of its own, which ``model.warmup=0`` must not get."""
        def one_pass():
            fn()
            self.ctx.sync()                  # nothing of the pass left on the device when the clock stops
        t = time_cpu(one_pass, _passes(repeats, warmup))
        return t.median_ms * 1e-3, t.iqr_ms * 1e-3

    def _run_variant(self, net, name: str) -> Dict[str, Any]:
        m = self.cfg.model
        row: Dict[str, Any] = {"network": net.name, "N": net.N, "L": net.L, "images": net.images,
                               "variant": name, "kind": "ours" if name in self.ours else "baseline"}
        repeats, warmup = int(m.repeats), int(m.warmup)
        rows = None                                      # nonzero rows per layer (not from the workers)
        if self.workers:
            cats, med, iqr, info = self._run_multi(net, name)
            tr_ms = cp_ms = float("nan")
        elif name == "cpu":
            def infer():
                return ref.infer_parallel(net.Y0, net.layers, net.bias, net.ymax, bool(m.saturation_shortcut))
            (cats, rows), first = _once(infer)
            med, iqr = (first, 0.0) if repeats <= 1 else self._time(infer, repeats - 1, 0)
            info, tr_ms, cp_ms = {"deterministic": "yes (exact)"}, float("nan"), med * 1e3
        else:
            from pipeline.models.sparse_dnn import gpu
            runner = gpu.RUNNERS[name](net, m, self.ctx.device, self.ctx.notice)
            try:
                runner.track = True                          # digest of the final activations (untimed passes)
                prof, t_prof = _once(runner.profile)         # checked + instrumented pass
                digests = [runner.digest]
                cats, rows, info = prof.categories, prof.rows, dict(prof.info)
                tr_ms, cp_ms = prof.transfer_ms, prof.compute_ms
                self._pass_s[(net.name, name)] = t_prof
                if self._left(net) < t_prof:                 # model.budget_s: no room for another pass
                    self.ctx.notice(f"{net.name}/{name}: model.budget_s={m.budget_s:g} leaves no room for another "
                                    f"{t_prof:.0f} s pass; median_ms is the profiled pass (no graph)")
                    med, iqr, info["passes"] = t_prof, 0.0, "profile"
                    if "graph" in info:
                        info["graph"] = False                # the profiled pass runs without the graph
                else:
                    got, t_run = _once(runner.run)           # the timed path (graph) must agree too
                    digests.append(runner.digest)
                    runner.track = False
                    if not np.array_equal(got, cats):
                        self.failures.append(f"{net.name}/{name}: timed path disagrees with the profiled pass "
                                             f"({ref.categories_equal(got, cats)[1]})")
                    left = self._left(net)
                    fit = repeats + warmup if left == float("inf") else int(max(left, 0.0) // max(t_run, 1e-9))
                    if fit >= repeats + warmup:
                        med, iqr = self._time(runner.run, repeats, warmup)
                    elif fit >= 1:
                        self.ctx.notice(f"{net.name}/{name}: model.budget_s={m.budget_s:g} leaves room for {fit} "
                                        f"more {t_run:.0f} s pass(es): {fit} timed, no warm-up")
                        med, iqr = self._time(runner.run, fit, 0)
                        info["passes"] = f"{fit} timed"
                    else:
                        self.ctx.notice(f"{net.name}/{name}: model.budget_s={m.budget_s:g} leaves no room for "
                                        f"another {t_run:.0f} s pass; median_ms is the checked pass (graph capture, "
                                        f"if any, included)")
                        med, iqr = t_run, 0.0
                        info["passes"] = "first run"
                runner.track = False
                same = len(set(digests)) == 1
                info["deterministic"] = ("not compared (one pass)" if len(digests) < 2 else
                                         "yes (2 passes bit-identical)" if same else
                                         "NO: the final activations differ between passes")
                if DETERMINISM[name].startswith("not promised"):
                    info["deterministic"] = f"not promised; {info['deterministic']}"
                if not same and name in self.ours:
                    self.failures.append(f"{net.name}/{name}: the final activations of the profiled and the "
                                         f"checked pass differ bit for bit ({DETERMINISM[name]})")
            finally:
                del runner
                gc.collect()                                 # give the pinned weights back before the next one
        if self.workers:
            info["deterministic"] = "categories only (model.gpus)"
        self._check(net, name, cats, row)
        edges = float(net.edges()) * net.images
        work = live_work(net)
        if work is not None:
            row["live_gups"] = work[0] / med / 1e9             # live-row edge updates per second
            if self.ctx.cuda and getattr(self.ctx, "peaks", None) is not None and name != "cpu":
                floors = pass_floors(work, edges, self.ctx.peaks)
                self.floors[net.name] = floors
                row["pct_peak"] = 100.0 * floors["floor_s"] / med
        row.update(categories=int(len(cats)), golden=int(len(net.golden)), median_ms=med * 1e3, iqr_ms=iqr * 1e3,
                   rate_geps=edges / med / 1e9, transfer_ms=tr_ms, compute_ms=cp_ms, gpus=self.workers or 1)
        for k in ("num_secs", "rows_per_block", "batch", "graph", "per_gpu", "passes", "deterministic"):
            if k in info:
                row[k] = info[k]
        if rows is not None:
            self.traces[(net.name, name)] = np.asarray(rows)
        return row

    def _check(self, net, name: str, cats: np.ndarray, row: Dict[str, Any]) -> None:
        """The challenge check: the categories equal the golden set on every row outside the
        network's rounding-ambiguous rows (none for an official golden file); differing ambiguous
        rows are listed, not failed. The row says what holds: ``exact_outside_ambiguous`` (yes/no:
        the check, which ``ok`` is) and ``ambiguous_rows_differing`` (how many of the ambiguous rows
        this variant classifies otherwise). Rows that differ from an official file are arbitrated
        by the exact reference."""
        amb = net.meta.get("ambiguous")
        ok, why, inside = ref.check_categories(cats, net.golden, amb)
        row["ok"] = ok
        row["exact_outside_ambiguous"] = "yes" if ok else "no"
        row["ambiguous"] = int(amb.size) if amb is not None else "-"
        row["ambiguous_rows_differing"] = int(inside.size)
        if inside.size:
            self.notes.append(f"{net.name}/{name}: {inside.size} rounding-ambiguous row(s) classified otherwise than "
                              f"the exact semantics (allowed): {inside[:20].tolist()}")
        if ok:
            return
        if net.meta.get("golden_from") == "official file":
            diff = np.setxor1d(np.asarray(cats, np.int64), np.asarray(net.golden, np.int64))[:20]
            arb = ref.arbitrate(net.Y0, net.layers, net.bias, net.ymax, diff)
            says = ", ".join(f"{r}: {'category' if c else 'not'}" for r, c in arb.items())
            why += f"; the exact semantics says {says}"
        gold = net.meta.get("golden_file") or net.meta.get("golden_from", "")
        src = net.meta.get("source", "")
        self.failures.append(f"{net.name}/{name}: categories differ from the golden set ({gold}"
                             f"{'; network ' + src if src else ''}): {why}")

    def _run_multi(self, net, name: str):
        """``name`` on self.workers worker processes: categories, median and IQR of the passes'
        wall times (start gate to last result), row info. Batch 0 (= all) becomes a quarter of
        each worker's share, so that claiming balances the load."""
        m = self.cfg.model
        batch = min(int(m.batch_size) or -(-net.images // (4 * self.workers)), net.images)
        res = multi.run(multi.NetSpec.of(self.cfg, net, self.ctx.size == "small"), name,
                        OmegaConf.to_container(m, resolve=True), self.workers, batch, net.images,
                        int(m.warmup), int(m.repeats), self.ctx.notice)
        if res.disagree:
            self.failures.append(f"{net.name}/{name}: the timed passes disagree ({res.disagree})")
        self.claims[(net.name, f"{net.N}x{net.L}", name)] = res
        t = Timing.of([1e3 * s for s in res.times])          # the workers' pass wall times, summarised alike
        return (res.categories, t.median_ms * 1e-3, t.iqr_ms * 1e-3,
                {"batch": batch, "per_gpu": res.per_worker()})

    def execute(self) -> None:
        self.failures: List[str] = []
        self.notes: List[str] = []
        self.skipped: List[str] = []          # variants model.budget_s left out (not failures)
        self.rows: List[Dict[str, Any]] = []
        self.traces: Dict[tuple, np.ndarray] = {}
        self.claims: Dict[tuple, multi.MultiResult] = {}
        self._pass_s: Dict[tuple, float] = {}
        self.floors: Dict[str, Dict[str, float]] = {}
        for net in self.nets:
            cell = []
            self._net_t0 = time.perf_counter()
            for name in self.ours + self.baselines:
                done = [self._pass_s[(net.name, v)] for v in self.ours + self.baselines if (net.name, v) in self._pass_s]
                need = 2 * max(done) if done else 0.0        # a baseline's profiled + checked passes, guessed
                if name in self.baselines and cell and need > self._left(net):
                    self.ctx.notice(f"{net.name}/{name}: skipped: model.budget_s={self.cfg.model.budget_s:g} has "
                                    f"{max(self._left(net), 0):.0f} s left, two passes need ~{need:.0f} s")
                    self.skipped.append(f"{net.name}/{name}")
                    continue
                cell.append(self._run_variant(net, name))
            speedups(cell, self.ours, self.baselines, "median_ms")   # x_vs_<b> = b's time / the variant's
            self.rows += cell

    def verify(self) -> None:
        # categories were compared in execute; here each variant's last per-layer count must agree
        # with its own categories (the counts of earlier layers may differ from the reference's on
        # rounding-ambiguous rows)
        for net in self.nets:
            refrows = net.meta.get("ref_rows")
            if refrows is None:
                continue
            for (name, var), tr in self.traces.items():
                if name != net.name or tr.size != refrows.size:
                    continue
                row = next((r for r in self.rows if r["network"] == name and r["variant"] == var), None)
                if row is not None and tr[-1] != row["categories"]:
                    self.failures.append(f"{name}/{var}: {tr[-1]} nonzero rows after the last layer, but "
                                         f"{row['categories']} categories")

    # ------------------------------------------------------------------ report
    def report(self) -> Report:
        cols = ["network", "images", "variant", "kind", "gpus", "ok", "exact_outside_ambiguous", "categories",
                "golden", "ambiguous", "ambiguous_rows_differing", "deterministic", "median_ms", "iqr_ms",
                "rate_geps", "live_gups", "pct_peak", "transfer_ms", "compute_ms"] + \
               [f"x_vs_{b}" for b in self.baselines] + \
               ["num_secs", "rows_per_block", "batch", "graph", "per_gpu", "passes"]
        # columns only some runs have (budget cuts, the reference's row trace, measured peaks)
        cols = [c for c in cols if c not in ("passes", "live_gups", "pct_peak") or any(c in r for r in self.rows)]
        paper = self.cfg.model.paper
        if paper:
            for r in self.rows:
                cellp = paper.get(f"{r['N']}x{r['L']}") if hasattr(paper, "get") else None
                if cellp is not None and cellp.get(r["variant"]) is not None:   # the paper has no bf at 65536 x 480+
                    r["paper_geps"] = float(cellp[r["variant"]])
            cols.append("paper_geps")
        where = self.ctx.device.name if self.ctx.device else "CPU (SciPy)"
        rep = Report(rows=self.rows, columns=cols, failures=self.failures,
                     title=f"sparse_dnn on {where}" + (f" x {self.workers} workers" if self.workers else ""),
                     measures={"median_ms": "a pass"})
        main = self.ours[0]
        for r in self.rows:
            tag = f"{r['N']}x{r['L']}"
            for k in ("rate_geps", "median_ms", "live_gups", "pct_peak"):
                if k in r:
                    rep.metrics[f"summary/{tag}/{r['variant']}/{k}"] = r[k]
            rep.metrics[f"summary/{tag}/{r['variant']}/exact_outside_ambiguous"] = float(r["ok"])
            rep.metrics[f"summary/{tag}/{r['variant']}/ambiguous_rows_differing"] = float(r["ambiguous_rows_differing"])
            if isinstance(r["ambiguous"], int):
                rep.metrics[f"summary/{tag}/rounding_ambiguous"] = float(r["ambiguous"])
            for b in self.baselines:
                if f"x_vs_{b}" in r:
                    rep.metrics[f"summary/{tag}/{r['variant']}/x_vs_{b}"] = r[f"x_vs_{b}"]
        for (netname, tag, var), res in self.claims.items():
            for i, (c, b) in enumerate(zip(res.claimed, res.busy_s)):
                rep.metrics[f"summary/{tag}/{var}/gpu{i}/batches"] = float(c)
                rep.metrics[f"summary/{tag}/{var}/gpu{i}/busy_s"] = b
            rep.notes.append(f"{netname}/{var}: {len(res.batches)} batches of {res.batches[0][1]} images a pass; "
                             f"per worker over {len(res.times)} timed passes (batches/busy): {res.per_worker()}")
        mine = [r for r in self.rows if r["variant"] == main]
        if mine:
            rep.metrics["summary/objective"] = float(np.sum([r["median_ms"] for r in mine]))
            rep.metrics["summary/rate_geps"] = float(np.mean([r["rate_geps"] for r in mine]))
            rep.metrics["summary/all_ok"] = float(all(r["ok"] for r in self.rows))
        rep.notes += self.notes
        for v in dict.fromkeys(r["variant"] for r in self.rows):
            rep.notes.append(f"{v}: deterministic {DETERMINISM[v]}")
        if self.skipped:
            rep.notes.append(f"skipped by model.budget_s={self.cfg.model.budget_s:g}: {', '.join(self.skipped)}")
        for net in self.nets:
            est = net.meta.get("host_memory")
            if est and est["peak"] > 4e9:
                rep.notes.append(f"{net.name}: host memory estimate " +
                                 ", ".join(f"{k} {_gb(v)}" for k, v in est.items()))
            tr = self.traces.get((net.name, main))
            if tr is not None:
                rep.series[f"nonzero_rows/{net.name}"] = [float(v) for v in tr]
            if net.meta.get("inputs") == "mnist":
                rep.notes.append(f"{net.name}: MNIST binarised at > {net.meta['threshold']} "
                                 f"({net.Y0.nnz / net.images:.1f} nonzeros per image)")
            elif net.meta.get("inputs") == "random":
                rep.notes.append(f"{net.name}: random stroke-like inputs, not MNIST ({net.Y0.nnz / net.images:.1f} "
                                 f"nonzeros per image)")
            amb = net.meta.get("ambiguous")
            extra = (f"; {amb.size} rounding-ambiguous row(s) (float32 bounds): {amb[:20].tolist()}"
                     if amb is not None else "; every row checked")
            if net.meta.get("exact_fallback"):
                extra += f"; {net.meta['exact_fallback']} output(s) settled in rational arithmetic"
            fl = getattr(self, "floors", {}).get(net.name)
            if fl:
                bound = "memory" if fl["memory_s"] >= fl["fma_s"] else "live FMAs"
                rep.notes.append(f"{net.name}: floors of one pass: memory {fl['memory_s'] * 1e3:.4g} ms (live rows' "
                                 f"activations read and written once a layer + weights once, at the copy bandwidth), "
                                 f"live FMAs {fl['fma_s'] * 1e3:.4g} ms (at the fp32 GEMM rate): {bound}-bound "
                                 f"(pct_peak); the challenge's images x edges would take "
                                 f"{fl['edges_fma_s']:.4g} s of FMAs (dead rows are skipped, so no bound)")
            rep.notes.append(f"{net.name}: golden set ({len(net.golden)} categories) from "
                             f"{net.meta.get('golden_from')}{extra}")
        rep.figures["nonzero_rows.png"] = rows_plot(self.nets, self.traces)
        if len(self.nets) > 1 or paper:
            rep.figures["table3.png"] = table3_plot(self.rows, paper)
        return rep


def rows_plot(nets, traces):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for net in nets:
        for (name, var), tr in traces.items():
            if name == net.name:
                ax.plot(np.arange(1, tr.size + 1), tr, label=f"{name} ({var})", lw=1.2)
        rr = net.meta.get("ref_rows")
        if rr is not None:
            ax.plot(np.arange(1, len(rr) + 1), rr, "k:", lw=1, label=f"{net.name} (reference)")
    ax.set_xlabel("layer")
    ax.set_ylabel("nonzero rows after the layer")
    ax.set_yscale("log")
    if ax.get_legend_handles_labels()[0]:          # none: a multi-GPU run of a network with a golden file
        ax.legend(fontsize=7)
    ax.set_title("Surviving (nonzero) rows per layer")
    fig.tight_layout()
    return fig


def table3_plot(rows, paper):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cells = list(dict.fromkeys(f"{r['N']}x{r['L']}" for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, ax = plt.subplots(figsize=(min(16, max(7, 1.2 * len(cells))), 5))
    width = 0.8 / (len(variants) + 2)
    xs = np.arange(len(cells))
    for vi, v in enumerate(variants):
        vals = [next((r["rate_geps"] for r in rows if f"{r['N']}x{r['L']}" == c and r["variant"] == v), np.nan)
                for c in cells]
        ax.bar(xs + vi * width, vals, width, label=f"{v} (measured)")
    if paper:
        for pi, pv in enumerate(("snig", "bf")):
            vals = [float(paper[c][pv]) if c in paper and pv in paper[c] and paper[c][pv] is not None else np.nan
                    for c in cells]
            ax.bar(xs + (len(variants) + pi) * width, vals, width, alpha=0.5, label=f"paper {pv} (1x RTX 2080 Ti)")
    ax.set_xticks(xs + width * (len(variants) + 1) / 2)
    ax.set_xticklabels(cells, rotation=30)
    ax.set_ylabel("GigaEdges/s")
    ax.set_yscale("log")
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(3, len(variants) + 2), loc="upper left")
    ax.set_ylim(top=ax.get_ylim()[1] * 6)                  # room for the legend above the bars
    ax.set_title("Table 3 grid: rate (images x edges / time)")
    fig.tight_layout()
    return fig
