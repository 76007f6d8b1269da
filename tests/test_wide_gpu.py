"""GPU tests of the wide models: flow and stage against the float64 reference (run on a lent GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.models.wide import prep
from pipeline.models.wide import reference as ref

pytestmark = pytest.mark.gpu


def make(compose, tmp_path, overrides):
    from pipeline.context import make_context
    cfg = compose(["backend=cuda", "progress=false", f"cache_dir={tmp_path}", *overrides])
    ctx = make_context(cfg, tmp_path)
    m = cfg.model
    data = prep.prepare(cfg, ctx.size, int(m.chunk), int(m.hot))
    return cfg, ctx, data


def random_params(data, k, seed):
    rng = np.random.default_rng(seed)
    p = ref.init_params(data.d, k, 0.05, seed)
    p.w = (rng.standard_normal(data.d) * 0.1).astype(np.float32)
    p.b = 0.1
    return p


def one_epoch_ref(data, p, order, per, lr, denom=0):
    q = p.astype(np.float64)
    loss = ref.train_epoch(data.Xtr, data.ytr, q, order, data.chunk, per, lr, denom)
    return q, loss


def maxdiff(a, b):
    d = float(np.max(np.abs(np.asarray(a.w, np.float64) - b.w)))
    d = max(d, abs(a.b - b.b))
    if a.V is not None:
        d = max(d, float(np.max(np.abs(np.asarray(a.V, np.float64) - b.V))))
    return d


@pytest.mark.parametrize("model,k,ds", [("wide_lr", 0, "a9a"), ("wide_fm", 3, "a9a"), ("wide_lr", 0, "ctr_synth"),
                                        ("wide_fm", 10, "ctr_synth")])
@pytest.mark.parametrize("variant", ["stage", "flow_batch"])
def test_one_epoch_fixed_order_equals_reference(compose, tmp_path, model, k, ds, variant):
    from pipeline.models.wide import gpu
    ov = [f"model={model}", f"dataset={ds}", "size=small", "batch_size=256", "model.update=batch", "model.shuffle=false"]
    if k:
        ov.append(f"model.k={k}")
    cfg, ctx, data = make(compose, tmp_path, ov)
    m = cfg.model
    tr = gpu.StageTrainer(data, m, ctx) if variant == "stage" else gpu.FlowTrainer(data, m, ctx, 1 << 40)
    p0 = random_params(data, k, 5)
    tr.set_params(p0)
    order = np.arange(data.n_chunks, dtype=np.int32)
    loss, _ = tr.epoch(order)
    want, want_loss = one_epoch_ref(data, p0, order, 256 // data.chunk, float(m.lr))
    got = tr.params()
    err = maxdiff(got, want)
    print(f"{variant} {model} k={k} {ds}: max |param - reference| = {err:.2e}, loss {loss:.6f} vs {want_loss:.6f}")
    assert err <= 1e-5
    assert abs(loss - want_loss) <= 1e-5


@pytest.mark.parametrize("model,ds,extra", [
    ("wide_lr", "a9a", []),
    ("wide_fm", "a9a", ["model.k=3"]),
    ("wide_lr", "ctr_synth", ["dataset.scale=0.02"]),
    ("wide_fm", "ctr_synth", ["dataset.scale=0.02", "model.k=10"]),
    ("wide_lr", "a9a", ["model.update=batch"]),
    ("wide_lr", "ctr_synth", ["dataset.scale=0.02", "model.device_budget_mb=8"]),     # out of core
])
def test_final_val_loss_within_0003_of_cpu(cli, model, ds, extra):
    r = cli(f"model={model}", f"dataset={ds}", "backend=cuda", "epochs=20", "batch_size=1024",
            "model.baselines=[stage,cpu]", *extra, timeout=600)
    print(r.stdout[-3000:], r.stderr[-2000:])
    assert r.returncode == 0
