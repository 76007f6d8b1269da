"""One selection for every model (registry.select_variants) and the two model shapes."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline import registry as R
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _reg(name, paper="a_gpu", gpu_default=None):
    return R.Registry(name, [
        R.VariantInfo("a_gpu", R.OURS, "cuda"),
        R.VariantInfo("b_gpu", R.OURS, "cuda"),
        R.VariantInfo("base_gpu", R.BASELINE, "cuda"),
        R.VariantInfo("tbase", R.BASELINE, "cuda", needs=("torch",)),
        R.VariantInfo("ref", R.OURS, "any"),
        R.VariantInfo("cpu", R.OURS, "cpu"),
        R.VariantInfo("cpu_base", R.BASELINE, "cpu"),
    ], cpu_default="cpu", paper=paper, gpu_default=gpu_default)


def _cfg(variants, baselines):
    return OmegaConf.create({"model": {"variants": variants, "baselines": baselines},
                             "kernel": {"name": variants[0] if variants else "a_gpu", "variants": []}})


@pytest.fixture
def reg():
    name = "test_registry_model"
    yield _reg(name)
    R._BY_MODEL.pop(name, None)


def test_gpu_runs_what_was_asked(reg):
    sel = R.select_variants(_cfg(["b_gpu"], ["base_gpu", "cpu_base", "ref"]), "cuda", reg)
    assert sel.ours == ["b_gpu"] and sel.baselines == ["base_gpu", "ref"]     # ref runs on either backend
    assert sel.notes == ["CUDA backend: baseline(s) cpu_base not run here"]


def test_gpu_falls_back_to_the_paper_variant(reg):
    sel = R.select_variants(_cfg(["cpu"], []), "cuda", reg)
    assert sel.ours == ["a_gpu"] and "on the GPU running 'a_gpu' (the paper's variant)" in sel.notes[0]
    other = _reg("test_registry_model_2", paper="a_gpu", gpu_default="b_gpu")
    try:
        assert R.select_variants(_cfg(["cpu"], []), "cuda", other).ours == ["b_gpu"]
    finally:
        R._BY_MODEL.pop("test_registry_model_2", None)


def test_cpu_runs_the_reference_against_the_cpu_baselines(reg):
    sel = R.select_variants(_cfg(["a_gpu", "b_gpu"], ["base_gpu"]), "cpu", reg)
    assert sel.ours == ["cpu"] and sel.baselines == ["cpu_base"]
    assert any("a_gpu, b_gpu need a GPU; running 'cpu'" in n for n in sel.notes)
    assert any("comparing with cpu_base instead of base_gpu" in n for n in sel.notes)
    assert R.select_variants(_cfg(["a_gpu"], []), "cpu", reg).baselines == []   # none asked, none run


def test_an_unusable_optional_dependency_is_skipped_with_a_notice(reg, monkeypatch):
    monkeypatch.setitem(R.PROBES, "torch", lambda: "PyTorch sees no CUDA device")
    monkeypatch.setattr(R.importlib.util, "find_spec", lambda m: object())
    sel = R.select_variants(_cfg(["a_gpu"], ["tbase", "base_gpu"]), "cuda", reg)
    assert sel.baselines == ["base_gpu"] and sel.notes == ["baseline 'tbase' skipped: PyTorch sees no CUDA device"]
    monkeypatch.setattr(R.importlib.util, "find_spec", lambda m: None)
    sel = R.select_variants(_cfg(["a_gpu"], ["tbase"]), "cuda", reg)
    assert sel.notes == ["baseline 'tbase' skipped: torch is not installed"]


def test_a_name_the_model_lacks_is_refused(reg):
    with pytest.raises(ConfigError, match=r"model.variants='nope' is not allowed: one of a_gpu, .* for "
                                          r"model=test_registry_model"):
        R.select_variants(_cfg(["nope"], []), "cuda", reg)


def test_every_model_is_one_of_the_shapes_and_selects_through_the_registry():
    """Each conf/model/*.yaml names a class built on models/base.py's shapes, and no model keeps a
    selection of its own (GPU_VARIANTS / CPU_VARIANTS lists, a hand-written fallback)."""
    from pipeline.models.base import BenchmarkModel, SelectsVariants, TrainingModel
    for f in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        mod, cls = OmegaConf.load(f).impl.split(":")
        klass = getattr(importlib.import_module(mod), cls)
        assert issubclass(klass, SelectsVariants), f"{f.name}: {klass.__name__} does not select through the registry"
        assert issubclass(klass, (BenchmarkModel, TrainingModel)) or f.stem == "sparse_dnn", f.name
        assert not hasattr(klass, "GPU_VARIANTS") and not hasattr(klass, "CPU_VARIANTS"), f.name
    for f in (ROOT / "pipeline" / "models").glob("*/model.py"):
        assert "select_variants(" not in f.read_text() and ".names(\"cuda\"" not in f.read_text(), f
