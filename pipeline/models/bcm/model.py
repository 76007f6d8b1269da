"""model=bcm: block-circulant FC and conv layers (Table 3 layers A, B, C), forward + both gradients,
every variant of the paper against dense cuBLAS in the same run."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from pipeline.bench import Case, Variant
from pipeline.models.base import BenchmarkModel
from pipeline.models.bcm import reference as ref
from pipeline.models.bcm.costs import bcm_cost, dense_check, dense_cost

# Paper Fig. 5 (Kernel Fusion over cuBLAS MM on a V100), for the plot.
PAPER_SPEEDUP = {("A", 16): 1.12, ("A", 32): 2.1, ("A", 64): 3.5,
                 ("B", 16): 1.06, ("B", 32): 1.39, ("B", 64): 1.64}


def make_case(layer: str, spec, k: int, batch: int, rng: np.random.Generator) -> Case:
    """Layer ``layer`` of shape ``spec`` (a ``model.shapes`` entry) at block size ``k``."""
    if spec["type"] == "fc":
        n = batch
        p, q, out_p, in_p = ref.blocks(spec["out"], spec["inp"], k)
        params = dict(layer=layer, k=k, n=n, p=p, q=q)
        x = rng.standard_normal((n, in_p), dtype=np.float32)
        g = rng.standard_normal((n, out_p), dtype=np.float32)
        shape = None
    else:
        n = max(1, batch // 2)
        shape = ref.ConvShape(n=n, h=spec["h"], w=spec["w"], c=spec["c"], cout=spec["cout"])
        p, q, out_p, in_p = ref.blocks(shape.cout, shape.cols, k)
        if out_p != shape.cout or in_p != shape.cols:
            raise ValueError(f"conv layer {layer}: channels must be multiples of k={k}")
        params = dict(layer=layer, k=k, n=shape.rows, p=p, q=q)
        x = rng.standard_normal((n, shape.h, shape.w, shape.c), dtype=np.float32)
        g = rng.standard_normal((n, shape.ho, shape.wo, shape.cout), dtype=np.float32)
    w = (rng.standard_normal((p, q, k), dtype=np.float32) / np.sqrt(q * k)).astype(np.float32)
    bias = rng.standard_normal(p * k, dtype=np.float32)
    inputs = dict(x=x, w=w, bias=bias, g=g)
    if shape is None:
        reference = lambda: ref.fc_reference(x, w, bias, g)  # noqa: E731
    else:
        reference = lambda: ref.conv_reference(x, w, bias, g, shape)  # noqa: E731
        inputs["conv"] = shape
    return Case(name=f"{layer} k={k}", params=params, inputs=inputs, reference=reference)


# ----------------------------------------------------------------------------- CPU variants


def _cpu_fft(case: Case, ctx):
    i = case.inputs
    if "conv" in i:
        return lambda: ref.conv_fft(i["x"], i["w"], i["bias"], i["g"], i["conv"])
    return lambda: ref.fc_fft(i["x"], i["w"], i["bias"], i["g"])


def _cpu_dense(case: Case, ctx):
    i = case.inputs
    W = ref.dense_weight(i["w"]).astype(np.float32)
    s = i.get("conv")

    def run():
        x = ref.im2col(i["x"], s) if s else i["x"]
        g = i["g"].reshape(s.rows, s.cout) if s else i["g"]
        a = x @ W.T + i["bias"]
        dx = g @ W
        return {"a": a.reshape(s.n, s.ho, s.wo, s.cout) if s else a, "dW_dense": g.T @ x,
                "dx": ref.col2im(dx, s) if s else dx, "db": g.sum(0)}
    return run


def cpu_variants() -> Dict[str, Variant]:
    return {
        "cpu_fft": Variant("cpu_fft", "ours", _cpu_fft, bcm_cost),
        "cpu_dense": Variant("cpu_dense", "baseline", _cpu_dense, dense_cost("fp32"), check=dense_check),
    }


class BcmModel(BenchmarkModel):
    CASE_COLUMNS = ["k", "n", "p", "q"]
    CPU_NOTE = "CPU backend: the NumPy FFT implementation (cpu_fft) against NumPy dense on the small preset"

    def variants_table(self) -> Dict[str, Variant]:
        if self.ctx.cuda:
            from pipeline.models.bcm import gpu
            return gpu.variants()
        return cpu_variants()

    def cases(self) -> List[Case]:
        m = self.cfg.model
        rng = np.random.default_rng(int(self.cfg.seed))
        ks = list(m.block_sizes) or [int(m.block_size)]
        return [make_case(layer, m.shapes[layer], int(k), int(m.batch_size), rng) for layer in m.layers for k in ks]

    def figures(self, rows):
        return {"speedup.png": speedup_plot(rows, self.baselines)}


def speedup_plot(rows, baselines):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = baselines[0] if baselines else None
    cases = list(dict.fromkeys(r["case"] for r in rows))
    ours = list(dict.fromkeys(r["variant"] for r in rows if r["kind"] == "ours"))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cases) * max(1, len(ours)) / 2), 4))
    width = 0.8 / max(1, len(ours) + 1)
    xs = np.arange(len(cases))
    for vi, v in enumerate(ours):
        vals = [next((r.get(f"x_vs_{base}", np.nan) for r in rows if r["case"] == c and r["variant"] == v), np.nan)
                for c in cases]
        ax.bar(xs + vi * width, vals, width, label=v)
    paper = [PAPER_SPEEDUP.get((c.split()[0], int(c.split("=")[1])), np.nan) for c in cases]
    ax.bar(xs + len(ours) * width, paper, width, label="paper (V100, fused)", color="grey", alpha=0.6)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(xs + width * len(ours) / 2)
    ax.set_xticklabels(cases)
    ax.set_ylabel(f"speedup over {base}" if base else "speedup")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("BCM layers, forward + backward")
    fig.tight_layout()
    return fig
