"""model=fewhot (N-hot lookup C = A B) and model=softmax_topn (fused softmax + top-N), after
Argueta & Chiang: the paper's kernels (corrected), our faster variants and the baselines, timed side
by side on the same inputs, each checked against a float64 NumPy/SciPy reference first. The paper's
times (experiment=argueta_table1 / argueta_table2 store them in ``model.paper``) appear beside ours
in the table and the plot."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from pipeline.bench import BENCH_COLUMNS, Case, Variant, best_metrics, failures, launch_floor, measure
from pipeline.models.argueta import reference as ref
from pipeline.models.argueta.costs import dense_cost, fewhot_cost, topn_cost
from pipeline.models.argueta.variants import FEWHOT, TOPN
from pipeline.models.base import Model
from pipeline.results import Report

# Small presets for the CPU backend (seconds): K not a multiple of any block size, M not of 4.
FEWHOT_SMALL = dict(rows=8, vocab=300, width=36)
TOPN_SMALL = dict(max_rows=4, vocab=1000)

FEWHOT_GPU = FEWHOT.names("cuda", "ours")
FEWHOT_GPU_BASE = FEWHOT.names("cuda", "baseline")
TOPN_GPU = TOPN.names("cuda", "ours")
TOPN_GPU_BASE = TOPN.names("cuda", "baseline")


def _paper_col(gpu: str) -> str:
    return "paper_" + gpu.replace(" ", "_") + "_ms"


def _choose(model: Model, names: List[str], gpu_ours, gpu_base, cpu_ours, cpu_base, cpu_table, default):
    """(ours, baselines, table) for this backend, with a notice when a request is mapped."""
    cfg, ctx = model.cfg, model.ctx
    if ctx.cuda:
        from pipeline.gpu import device
        from pipeline.models.argueta import gpu
        table = gpu.fewhot_variants() if default == "fewhot" else gpu.topn_variants(
            lambda o, e: ref.check_topn(o, e, exact=True), lambda o, e: ref.check_topn(o, e, exact=False))
        ours = [n for n in names if n in gpu_ours + gpu_base]
        dropped = [n for n in names if n not in ours]
        if dropped or not ours:
            ctx.notice(f"variants {dropped} are CPU variants; on the GPU running {ours or [default]}")
            ours = ours or [default]
        base = [b for b in cfg.model.baselines if b in gpu_base and b not in ours]
        if "torch_topk" in ours + base:
            why = device.why_no_torch()
            if why:
                ctx.notice(f"torch_topk skipped: {why}")
                ours = [n for n in ours if n != "torch_topk"]
                base = [n for n in base if n != "torch_topk"]
        return ours, base, table
    asked = [n for n in names if n not in cpu_ours + cpu_base]
    ours = [n for n in names if n in cpu_ours] or cpu_ours[:1]
    base = [b for b in cpu_base if b not in ours]
    if asked:
        ctx.notice(f"CPU backend: variant(s) {', '.join(asked)} need a GPU; running the NumPy/SciPy "
                   f"references instead ({', '.join(ours + base)}) on the small preset")
    return ours, base, cpu_table


def requested(cfg, registry) -> List[str]:
    """The variants a run times: model.variants; else the kernel entry's ``variants`` (the default
    entry lists the paper's variant and the project's fastest, side by side); else [kernel.name]."""
    return registry.check(cfg)


def _paper(cfg):
    """(the paper's N values, {gpu: {variant: times}}) from model.paper."""
    paper = cfg.model.paper or {}
    ns = [int(n) for n in paper.get("N", [])]
    return ns, {g: v for g, v in paper.items() if g != "N"}


def _lookup(ns, vals, n):
    if vals is None or n not in ns or ns.index(n) >= len(vals):
        return None
    return float(vals[ns.index(n)])


def _measure_with_paper(model: Model, series) -> List[Dict[str, Any]]:
    """measure() the model's cases and variants, then add the paper's time of each row's variant
    (``series(the paper's entry for the variant, row)`` -> its times by N) as one column per GPU."""
    rows = measure(model.cases, model.variants, model.ctx, float(model.cfg.model.tolerance),
                   speedup_over=model.baselines)
    ns, gpus = _paper(model.cfg)
    for r in rows:
        for gpu, methods in gpus.items():
            r[_paper_col(gpu)] = _lookup(ns, series((methods or {}).get(r["variant"]), r), r["N"])
    return rows


def _best_metrics(rep: Report, rows, baselines) -> None:
    rep.metrics.update(best_metrics(rows, baselines))


# ============================================================================ N-hot lookup


def _cpu_gather(case: Case, ctx):
    A, B = case.inputs["A"], case.inputs["B"]
    return lambda: {"C": ref.fewhot_gather(A, B)}


def _cpu_sparse(case: Case, ctx):
    A, B = case.inputs["A"], case.inputs["B"]
    return lambda: {"C": np.asarray(A @ B)}


def _cpu_dense(case: Case, ctx):
    D, B = case.inputs["A"].toarray(), case.inputs["B"]
    return lambda: {"C": D @ B}


def fewhot_cpu_variants() -> Dict[str, Variant]:
    return {
        "cpu": Variant("cpu", "ours", _cpu_gather, fewhot_cost, note="NumPy gather + reduceat (the paper's algorithm)"),
        "cpu_sparse": Variant("cpu_sparse", "baseline", _cpu_sparse, fewhot_cost, note="SciPy CSR @ dense"),
        "cpu_dense": Variant("cpu_dense", "baseline", _cpu_dense, dense_cost, note="NumPy dense matmul"),
    }


class FewhotModel(Model):
    GPU_VARIANTS = FEWHOT.names("cuda")
    CPU_VARIANTS = FEWHOT.names("cpu")

    def prepare(self) -> None:
        m = self.cfg.model
        names = requested(self.cfg, FEWHOT)
        self.ours, self.baselines, table = _choose(self, names, FEWHOT_GPU, FEWHOT_GPU_BASE, FEWHOT.names("cpu", "ours"),
                                                   FEWHOT.names("cpu", "baseline"), fewhot_cpu_variants(), "fewhot")
        self.variants = [table[n] for n in self.ours + self.baselines]
        if self.ctx.cuda:          # an empty kernel timed the same way: how low a lookup can go
            self.variants.append(launch_floor())
        L, K, M = (int(m.rows), int(m.vocab), int(m.width)) if self.ctx.size == "full" else \
            (FEWHOT_SMALL["rows"], FEWHOT_SMALL["vocab"], FEWHOT_SMALL["width"])
        rng = np.random.default_rng(int(self.cfg.seed))
        self.cases: List[Case] = []
        for N in m.n_hot:
            n = min(int(N), K)
            A, B = ref.make_fewhot(L, K, M, n, rng)
            self.cases.append(Case(name=f"N={n}", params=dict(L=L, K=K, M=M, N=n), inputs=dict(A=A, B=B),
                                   reference=lambda A=A, B=B: {"C": ref.fewhot_reference(A, B)}))

    def execute(self) -> None:
        self.rows = _measure_with_paper(self, lambda times, r: times)       # the paper's times by N

    def verify(self) -> None:
        self.failures = failures(self.rows)

    def report(self) -> Report:
        ns, gpus = _paper(self.cfg)
        paper_cols = [_paper_col(g) for g in gpus]
        cols = BENCH_COLUMNS[:1] + ["L", "K", "M", "N"] + BENCH_COLUMNS[1:] + \
            [f"x_vs_{b}" for b in self.baselines] + paper_cols
        rep = Report(rows=self.rows, columns=cols, failures=self.failures)
        _best_metrics(rep, self.rows, self.baselines)
        rep.figures["fewhot_times.png"] = time_plot(self.rows, "N", gpus, ns,
                                                    f"N-hot lookup (L={self.cases[0].params['L']}, "
                                                    f"K={self.cases[0].params['K']}, M={self.cases[0].params['M']})")
        if not self.ctx.cuda:
            rep.notes.append("CPU backend: NumPy/SciPy references on the small preset; GPU kernels not run")
        return rep


# ============================================================================ softmax + top-N


def _cpu_topn(fn):
    def build(case: Case, ctx):
        x, n = case.inputs["x"], case.params["N"]
        return lambda: fn(x, n)
    return build


def topn_cpu_variants() -> Dict[str, Variant]:
    return {
        "cpu": Variant("cpu", "ours", _cpu_topn(ref.topn_cpu), topn_cost,
                       check=lambda o, e: ref.check_topn(o, e, exact=True), note="NumPy select on packed keys"),
        "cpu_sort": Variant("cpu_sort", "baseline", _cpu_topn(ref.topn_sort), topn_cost,
                            check=lambda o, e: ref.check_topn(o, e, exact=False), note="NumPy softmax + full sort"),
    }


class TopnModel(Model):
    GPU_VARIANTS = TOPN.names("cuda")
    CPU_VARIANTS = TOPN.names("cpu")

    def prepare(self) -> None:
        m = self.cfg.model
        names = requested(self.cfg, TOPN)
        self.ours, self.baselines, table = _choose(self, names, TOPN_GPU, TOPN_GPU_BASE, TOPN.names("cpu", "ours"),
                                                   TOPN.names("cpu", "baseline"), topn_cpu_variants(), "topn_bucket")
        self.variants = [table[n] for n in self.ours + self.baselines]
        full = self.ctx.size == "full"
        K = int(m.vocab) if full else TOPN_SMALL["vocab"]
        rows = [int(r) for r in m.rows] if full else \
            list(dict.fromkeys(min(int(r), TOPN_SMALL["max_rows"]) for r in m.rows))
        rng = np.random.default_rng(int(self.cfg.seed))
        self.cases: List[Case] = []
        for L in rows:
            for N in m.top_n:
                n = min(int(N), K)
                x = ref.make_logits(L, K, rng)
                self.cases.append(Case(name=f"L={L} N={n}", params=dict(L=L, K=K, N=n, split=int(m.split),
                                                                        block=int(m.block_size), vec=int(m.vec)),
                                       inputs=dict(x=x), reference=lambda x=x, n=n: ref.topn_reference(x, n)))

    def execute(self) -> None:
        self.rows = _measure_with_paper(self, lambda times, r: (times or {}).get(str(r["L"])))   # by L, then N

    def verify(self) -> None:
        self.failures = failures(self.rows)

    def report(self) -> Report:
        ns, gpus = _paper(self.cfg)
        paper_cols = [_paper_col(g) for g in gpus]
        cols = BENCH_COLUMNS[:1] + ["L", "K", "N"] + BENCH_COLUMNS[1:] + \
            [f"x_vs_{b}" for b in self.baselines] + paper_cols
        rep = Report(rows=self.rows, columns=cols, failures=self.failures)
        _best_metrics(rep, self.rows, self.baselines)
        for L in dict.fromkeys(r["L"] for r in self.rows):
            rows = [r for r in self.rows if r["L"] == L]
            sub = {g: {v: (per or {}).get(str(L)) for v, per in (meths or {}).items()} for g, meths in gpus.items()}
            rep.figures[f"topn_times_L{L}.png"] = time_plot(rows, "N", sub, ns,
                                                            f"softmax + top-N (L={L}, K={rows[0]['K']})")
        if not self.ctx.cuda:
            rep.notes.append("CPU backend: NumPy references on the small preset; GPU kernels not run")
        return rep


# ============================================================================ plot


def time_plot(rows, xkey: str, paper: Dict[str, Dict[str, Any]], paper_x: List[int], title: str):
    """Median time against ``xkey`` for every measured variant (solid) and the paper's times
    (dashed, one marker per GPU)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for v in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted((r[xkey], r["median_ms"]) for r in rows if r["variant"] == v)
        kind = next(r["kind"] for r in rows if r["variant"] == v)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o" if kind == "ours" else "-s", ms=4,
                label=f"{v} (measured)")
    for gi, (gpu, methods) in enumerate((paper or {}).items()):
        for v, vals in (methods or {}).items():
            if vals is None:
                continue
            vals = list(vals)[:len(paper_x)]
            ax.plot(paper_x[:len(vals)], vals, "--" + "x+"[gi % 2], alpha=0.6, label=f"{v} (paper, {gpu})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xkey)
    ax.set_ylabel("time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
