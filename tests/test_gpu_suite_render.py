"""scripts/gpu_suite.py render: a newer record supersedes an older one per test and per GPU model."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "scripts" / "gpu_suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tests(gpu, date, outcomes, summary):
    return {"part": "tests", "gpu": gpu, "date": date, "commit": "abc", "models": ["wide"], "seconds": 1,
            "data": {"rc": 0, "seconds": 1, "summary": summary,
                     "tests": [{"id": f"tests.test_x::{name}", "outcome": o, "seconds": 1, "message": "boom"}
                               for name, o in outcomes.items()]}}


def _bench(gpu, date, value):
    run = {"experiment": "wide_lr", "run": "model=wide_lr", "status": "FINISHED", "rows": [],
           "metrics": {"summary/flow/x_vs_stage": value}}
    return {"part": "bench", "gpu": gpu, "date": date, "commit": "abc", "models": ["wide"], "seconds": 1,
            "data": {"jobs": [{"overrides": ["model=wide_lr"], "rc": 0, "seconds": 1}], "runs": [run]}}


def test_render_supersedes_per_test_and_per_gpu(tmp_path):
    suite = _suite()
    recs = [_tests("NVIDIA H200, 1, 2 MiB", "2026-01-01 10:00 UTC", {"a": "failed", "b": "passed"}, "1 failed, 1 passed"),
            _tests("NVIDIA H200, 1, 2 MiB", "2026-01-01 11:00 UTC", {"a": "passed"}, "1 passed"),
            _bench("NVIDIA H200, 1, 2 MiB", "2026-01-01 10:00 UTC", 11.5),
            _bench("NVIDIA H100 80GB HBM3, 1, 2 MiB", "2026-01-01 11:00 UTC", 6.8)]
    files = []
    for i, r in enumerate(recs):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps(r))
        files.append(f)
    md = suite.render(files)
    # test a's failure is superseded by its later pass; b is still shown from the first run
    assert "1 failed, 1 passed; 1 of these shown from a later run" in md
    assert "Failures:" not in md
    # the same benchmark on two GPU models: both are shown, each with its GPU
    assert "| H200 | wide_lr |" in md and "x_vs_stage 11.5" in md
    assert "| H100 80GB HBM3 | wide_lr |" in md and "x_vs_stage 6.8" in md
