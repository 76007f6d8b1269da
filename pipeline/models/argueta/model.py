"""model=fewhot (N-hot lookup C = A B) and model=softmax_topn (fused softmax + top-N), after
Argueta & Chiang: the paper's kernels (corrected), our faster variants and the baselines, timed side
by side on the same inputs, each checked against a float64 NumPy/SciPy reference first. The paper's
times (experiment=argueta_table1 / argueta_table2 store them in ``model.paper``) appear beside ours
in the table and the plot."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from pipeline.bench import Case, Variant
from pipeline.models.argueta import reference as ref
from pipeline.models.argueta.costs import dense_cost, fewhot_cost, topn_cost
from pipeline.models.base import BenchmarkModel

def _paper_col(gpu: str) -> str:
    return "paper_" + gpu.replace(" ", "_") + "_ms"


def _paper(cfg):
    """(the paper's N values, {gpu: {variant: times}}) from model.paper."""
    paper = cfg.model.paper or {}
    ns = [int(n) for n in paper.get("N", [])]
    return ns, {g: v for g, v in paper.items() if g != "N"}


def _lookup(ns, vals, n):
    if vals is None or n not in ns or ns.index(n) >= len(vals):
        return None
    return float(vals[ns.index(n)])


class PaperTimesModel(BenchmarkModel):
    """A benchmark whose experiment stores the paper's times in ``model.paper``: one column per
    GPU of the paper beside each measured row (``paper_series(the paper's entry for the row's
    variant, row)`` -> its times by N)."""

    @staticmethod
    def paper_series(times, row):
        return times

    def add_columns(self, rows):
        ns, gpus = _paper(self.cfg)
        for r in rows:
            for gpu, methods in gpus.items():
                r[_paper_col(gpu)] = _lookup(ns, self.paper_series((methods or {}).get(r["variant"]), r), r["N"])
        return [_paper_col(g) for g in gpus]


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


class FewhotModel(PaperTimesModel):
    CASE_COLUMNS = ["L", "K", "M", "N"]
    FLOOR = True

    def variants_table(self) -> Dict[str, Variant]:
        if self.ctx.cuda:
            from pipeline.models.argueta import gpu
            return gpu.fewhot_variants()
        return fewhot_cpu_variants()

    def cases(self) -> List[Case]:
        m = self.cfg.model
        L, K, M = int(m.rows), int(m.vocab), int(m.width)
        rng = np.random.default_rng(int(self.cfg.seed))
        cases = []
        for N in m.n_hot:
            n = min(int(N), K)
            A, B = ref.make_fewhot(L, K, M, n, rng)
            cases.append(Case(name=f"N={n}", params=dict(L=L, K=K, M=M, N=n), inputs=dict(A=A, B=B),
                              reference=lambda A=A, B=B: {"C": ref.fewhot_reference(A, B)}))
        return cases

    def figures(self, rows):
        ns, gpus = _paper(self.cfg)
        p = self.case_list[0].params
        return {"fewhot_times.png": time_plot(rows, "N", gpus, ns, f"N-hot lookup (L={p['L']}, K={p['K']}, M={p['M']})")}


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


class TopnModel(PaperTimesModel):
    CASE_COLUMNS = ["L", "K", "N"]

    @staticmethod
    def paper_series(times, row):
        return (times or {}).get(str(row["L"]))       # the paper's times by L, then N

    def variants_table(self) -> Dict[str, Variant]:
        if self.ctx.cuda:
            from pipeline.models.argueta import gpu
            return gpu.topn_variants(lambda o, e: ref.check_topn(o, e, exact=True),
                                     lambda o, e: ref.check_topn(o, e, exact=False))
        return topn_cpu_variants()

    def cases(self) -> List[Case]:
        m = self.cfg.model
        K = int(m.vocab)
        rows = list(dict.fromkeys(int(r) for r in m.rows))
        rng = np.random.default_rng(int(self.cfg.seed))
        cases = []
        for L in rows:
            for N in m.top_n:
                n = min(int(N), K)
                x = ref.make_logits(L, K, rng)
                cases.append(Case(name=f"L={L} N={n}", params=dict(L=L, K=K, N=n, split=int(m.split),
                                                                   block=int(m.block_size), vec=int(m.vec)),
                                  inputs=dict(x=x), reference=lambda x=x, n=n: ref.topn_reference(x, n)))
        return cases

    def figures(self, rows):
        ns, gpus = _paper(self.cfg)
        out = {}
        for L in dict.fromkeys(r["L"] for r in rows):
            sub_rows = [r for r in rows if r["L"] == L]
            sub = {g: {v: (per or {}).get(str(L)) for v, per in (meths or {}).items()} for g, meths in gpus.items()}
            out[f"topn_times_L{L}.png"] = time_plot(sub_rows, "N", sub, ns, f"softmax + top-N (L={L}, K={sub_rows[0]['K']})")
        return out


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
