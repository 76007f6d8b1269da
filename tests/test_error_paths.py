"""Error paths of the command line: a bad override, an impossible size or an unusable folder ends in
one line on stderr (``error: <the key>=<value> ...``), a non-zero exit, no traceback, and a FAILED
MLflow run where one was started. Range and consistency checks run in-process (validate()); what
only the run can find (a network's real size, host memory) goes through the CLI."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from pipeline.config import validate
from pipeline.errors import ConfigError


# (overrides, the start of the one-line message): each was accepted (silently ignored, taken as
# another value, or failing later with a misleading verification error) or raised a Python error
BAD = [
    (["model=bcm", "bench.min_time_ms=-1"], "bench.min_time_ms=-1.0 is not allowed"),
    (["model=bcm", "gpu=-1"], "gpu=-1 is not allowed"),
    (["model=bcm", "model.tolerance=-1"], "model.tolerance=-1.0 is not allowed"),
    (["model=bcm", "pool.enabled=nosuch"], "pool.enabled='nosuch' is not allowed: auto, true or false"),
    (["model=bcm", "pool.wait_s=-1"], "pool.wait_s=-1.0 is not allowed"),
    (["model=bcm", "launcher.gpus_per_job=0"], "launcher.gpus_per_job=0 is not allowed"),
    (["model=bcm", "model.layers=[]"], "model.layers=[] is not allowed"),
    (["model=bcm", "dataset=mnist"], "dataset='mnist' is not allowed: leave it out: model=bcm"),
    (["model=fewhot", "dataset=a9a"], "dataset='a9a' is not allowed: leave it out: model=fewhot"),
    (["model=softmax_topn", "dataset=bibtex"], "dataset='bibtex' is not allowed: leave it out: model=softmax_topn"),
    (["model=sparse_dnn", "model.grid=[5]"], "model.grid=5 is not allowed: [N, L]"),
    (["model=sparse_dnn", "model.grid=[[abc,120]]"], "model.grid=['abc', 120] is not allowed: [N, L]"),
    (["model=sparse_dnn", "dataset=radixnet_1024", "dataset.small.layers=0"], "dataset.small.layers=0 is not allowed"),
    (["model=sparse_dnn", "dataset=radixnet_1024", "dataset.small.images=-1"], "dataset.small.images=-1 is not allowed"),
    (["model=sparse_dnn", "model.warmup=-1"], "model.warmup=-1 is not allowed"),
    (["model=wide_lr", "dataset=ctr_synth", "dataset.small.features=-1"], "dataset.small.features=-1 is not allowed"),
    (["model=wide_lr", "dataset.rows=-1"], "dataset.rows=-1 is not allowed"),
    (["model=wide_lr", "dataset.features=-5"], "dataset.features=-5 is not allowed"),
    (["model=wide_fm", "model.device_budget_mb=-1"], "model.device_budget_mb=-1.0 is not allowed"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_override_is_refused_before_any_work(compose, overrides, message):
    cfg = compose(["backend=cpu", *overrides])
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    text = str(e.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_tracking_dir_that_cannot_be_created(tmp_path):
    from pipeline.tracking import setup
    (tmp_path / "a-file").write_text("")
    tcfg = OmegaConf.create({"enabled": True, "uri": "", "dir": str(tmp_path / "a-file" / "store")})
    with pytest.raises(ConfigError, match=r"^tracking\.dir=.*a-file/store is not allowed: cannot create .*"
                                          r"set it to a writable folder, or tracking=off$"):
        setup(tcfg)


def _runs(store):
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def _one_error_line(r) -> str:
    assert r.returncode not in (0, 1), (r.returncode, r.stderr)    # 1: an unexpected exception
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error: "), r.stderr
    assert [ln for ln in lines if ln.startswith("error:")] == [lines[-1]], r.stderr
    return lines[-1]


@pytest.mark.slow
def test_host_memory_too_small_for_the_sizes(cli, tmp_path):
    # ~1 EB for the layer's input: no machine allocates it (numpy raises MemoryError at once)
    r = cli("model=bcm", "backend=cpu", "batch_size=500000000000000")
    line = _one_error_line(r)
    assert line.startswith("error: out of host memory (") and "batch_size" in line, line
    assert [x.info.status for x in _runs(tmp_path)] == ["FAILED"]


@pytest.mark.slow
def test_sparse_dnn_neurons_that_differ_from_the_packaged_network(cli, tmp_path):
    r = cli("model=sparse_dnn", "backend=cpu", "dataset.neurons=1000")
    line = _one_error_line(r)
    assert line.startswith("error: dataset.neurons=1000 is not allowed:") and "dataset.neurons=1024" in line, line
    assert [x.info.status for x in _runs(tmp_path)] == ["FAILED"]


@pytest.mark.slow
def test_slide_topk_over_more_labels_than_the_dataset_has(cli, tmp_path):
    # bibtex has 159 labels: P@160 was computed anyway and the run ended in a verification error
    r = cli("model=slide", "backend=cpu", "dataset=bibtex", "model.topk=[1,160]")
    line = _one_error_line(r)
    assert line.startswith("error: model.topk=160 is not allowed: at most the 159 labels"), line
    assert [x.info.status for x in _runs(tmp_path)] == ["FAILED"]


@pytest.mark.slow
def test_a_size_the_small_preset_replaces_is_named_as_not_used(cli):
    """On the CPU backend's small preset a size the user typed (model.rows of fewhot) is replaced:
    the run says which of the given overrides it does not use; size=full uses them, silently."""
    r = cli("model=fewhot", "backend=cpu", "model.rows=1000", "model.vocab=20000", "model.n_hot=[3]")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "size=small: model.rows=1000 model.vocab=20000 not used" in r.stderr
    r = cli("model=fewhot", "backend=cpu", "model.n_hot=[3]")
    assert r.returncode == 0 and "not used" not in r.stderr


@pytest.mark.parametrize("script,args", [("bcm_profile.py", []), ("wide_probe.py", []),
                                         ("profile_sparse_dnn.py", ["cluster", "1024", "3", "64"])])
def test_gpu_scripts_without_a_gpu_end_in_one_line(script, args):
    """The GPU-only profiling scripts, run without a usable GPU, exit non-zero with one line naming
    the script and the reason (pipeline.gpu.device.exit_without_gpu), not a traceback."""
    import subprocess
    import sys
    from pathlib import Path
    from pipeline.gpu.device import why_unavailable
    if why_unavailable() is None:
        pytest.skip("a GPU is usable here: the script would profile")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "scripts" / script), *args], capture_output=True, text=True,
                       timeout=120, cwd=root)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"error: {script} needs a GPU: ") and "Traceback" not in r.stderr
