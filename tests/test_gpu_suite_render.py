"""scripts/gpu_suite.py and its modules (scripts/suite_*.py): rendering of docs/gpu-results.md (a newer
record supersedes an older one per test and per GPU model), the README's results table from the headline
measures of conf/suite/, the names of the records, the doc tables and the parts of a run."""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import suite_child  # noqa: E402
import suite_doc_tables  # noqa: E402
import suite_readme  # noqa: E402
import suite_records  # noqa: E402
import suite_render  # noqa: E402
import suite_run  # noqa: E402


def _bcm_headline():
    return [h for h in suite_readme.headlines() if h.model == "bcm"]


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
    recs = [_tests("NVIDIA H200, 1, 2 MiB", "2026-01-01 10:00 UTC", {"a": "failed", "b": "passed"}, "1 failed, 1 passed"),
            _tests("NVIDIA H200, 1, 2 MiB", "2026-01-01 11:00 UTC", {"a": "passed"}, "1 passed"),
            _bench("NVIDIA H200, 1, 2 MiB", "2026-01-01 10:00 UTC", 11.5),
            _bench("NVIDIA H100 80GB HBM3, 1, 2 MiB", "2026-01-01 11:00 UTC", 6.8)]
    files = []
    for i, r in enumerate(recs):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps(r))
        files.append(f)
    md = suite_render.render(files)
    # test a's failure is superseded by its later pass; b is still shown from the first run
    assert "1 failed, 1 passed; 1 of these shown from a later run" in md
    assert "Failures:" not in md
    # the same benchmark on two GPU models: both are shown, each with its GPU
    assert "| H200 | wide_lr |" in md and "x_vs_stage 11.5" in md
    assert "| H100 80GB HBM3 | wide_lr |" in md and "x_vs_stage 6.8" in md


def _bcm_bench(gpu, date, dft_ms, run="model=bcm experiment=bcm_layers progress=false backend=cuda"):
    rows = [{"case": "A k=64", "variant": "dft", "kind": "ours", "ok": "True", "median_ms": str(dft_ms)},
            {"case": "A k=64", "variant": "tiled", "kind": "ours", "ok": "False", "median_ms": "0.001"},  # failed check
            {"case": "A k=64", "variant": "dense_fp32", "kind": "baseline", "ok": "True", "median_ms": "0.6"},
            {"case": "A k=64", "variant": "dense_tf32", "kind": "baseline", "ok": "True", "median_ms": "0.2"},
            {"case": "A k=32", "variant": "dft", "kind": "ours", "ok": "True", "median_ms": "0.01"},        # other case
            {"case": "A k=64", "variant": "launch_floor", "kind": "floor", "ok": "", "median_ms": "0.003"}]
    return {"part": "bench", "gpu": gpu, "date": date, "commit": "abc1234", "models": ["bcm"], "seconds": 1,
            "data": {"jobs": [], "runs": [{"experiment": "bcm", "run": run, "status": "FINISHED", "rows": rows,
                                           "metrics": {}}]}}


def test_results_table_latest_record_per_gpu():
    recs = [_bcm_bench("NVIDIA H200, 1, 2 MiB", "2026-01-01 10:00 UTC", 0.1),
            _bcm_bench("NVIDIA H200, 1, 2 MiB", "2026-01-02 10:00 UTC", 0.05),
            _bcm_bench("NVIDIA H100 80GB HBM3, 1, 2 MiB", "2026-01-01 12:00 UTC", 0.08),
            _bcm_bench("NVIDIA H200, 1, 2 MiB", "2026-01-03 10:00 UTC", 0.01, run="model=bcm block_size=16")]
    rows = suite_readme.results_rows(recs, _bcm_headline())
    assert [(r["gpu"], r["date"]) for r in rows] == [("H200", "2026-01-02"), ("H100 80GB HBM3", "2026-01-01")]
    h200 = rows[0]
    assert h200["ours"] == {"value": 0.05, "name": "dft"}                # not the failed 'tiled', not k=32
    assert h200["baseline"] == {"value": 0.2, "name": "dense_tf32"}      # the best baseline, not the floor
    assert h200["ratio"] == pytest.approx(4.0)
    table = suite_readme.results_table(recs, _bcm_headline()).splitlines()
    assert table[0] == "| model | measure | ours | best baseline | ratio | GPU | date |"
    assert table[2].startswith("| `bcm` |") and "`dft` 0.05 ms | `dense_tf32` 0.2 ms | 4x | H200 | 2026-01-02 |" in table[2]
    assert len(table) == 4


def test_update_readme_replaces_only_the_block():
    text = "# T\n\nbefore\n<!-- results:start -->\nold table\n<!-- results:end -->\nafter\n"
    new = suite_readme.update_readme(text, "| a |\n|---|")
    assert new.startswith("# T\n\nbefore\n<!-- results:start -->\n") and new.endswith("\n| a |\n|---|\n<!-- results:end -->\nafter\n")
    assert "old table" not in new and suite_readme.update_readme(new, "| a |\n|---|") == new
    with pytest.raises(SystemExit, match="results:start"):
        suite_readme.update_readme("no markers", "x")


def test_record_names_date_gpu_commit_part():
    rec = {"part": "bench", "gpu": "NVIDIA H100 80GB HBM3, 580.1, 81559 MiB", "date": "2026-11-21 13:55 UTC",
           "commit": "35e8cea"}
    assert suite_records.record_name(rec) == "2026-11-21T1355Z_H100-80GB-HBM3_35e8cea_bench.json"
    assert suite_records.record_name(dict(rec, commit="?"), "fm") == "2026-11-21T1355Z_H100-80GB-HBM3_unknown_bench-fm.json"


def test_committed_records_and_readme_agree():
    """Every record in docs/gpu-runs is named after what it holds, and the README's table is the one
    generated from them (rerun `scripts/gpu_suite.py render docs/gpu-runs/*.json` after adding one)."""
    files = sorted((ROOT / "docs" / "gpu-runs").glob("*.json"))
    assert files
    recs = [json.loads(f.read_text()) for f in files]
    for f, r in zip(files, recs):
        stem = suite_records.record_name(r)[:-len(".json")]
        assert re.fullmatch(re.escape(stem) + r"(-\d+)?\.json", f.name), f.name
    readme = (ROOT / "README.md").read_text()
    assert suite_readme.update_readme(readme, suite_readme.results_table(suite_records.read_records(files))) == readme
    assert "| `bcm` |" in readme and "| `sparse_dnn` |" in readme


def test_a_second_record_of_the_same_minute_does_not_overwrite_the_first(tmp_path):
    name = "2026-11-26T0700Z_H200_6fd4ab8_bench.json"
    first = suite_records.unused_path(tmp_path, name)
    assert first == tmp_path / name
    first.write_text("{}")
    second = suite_records.unused_path(tmp_path, name)
    assert second.name == "2026-11-26T0700Z_H200_6fd4ab8_bench-2.json"
    second.write_text("{}")
    assert suite_records.unused_path(tmp_path, name).name == "2026-11-26T0700Z_H200_6fd4ab8_bench-3.json"


def test_rename_gives_records_their_names(tmp_path):
    import subprocess
    import sys
    rec = _bcm_bench("NVIDIA H200, 1, 2 MiB", "2026-01-02 10:00 UTC", 0.05)
    (tmp_path / "bench-old.json").write_text(json.dumps(rec))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_suite.py"), "rename", str(tmp_path / "bench-old.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [f.name for f in tmp_path.iterdir()] == ["2026-01-02T1000Z_H200_abc1234_bench.json"]


def test_before_after_compares_the_same_rows_of_tagged_records(tmp_path):
    """Records tagged before/after on one GPU model: each row both report, its time in ms before and
    after and the ratio; rows of one side only, other GPU models and untagged records stay out."""
    gpu = "NVIDIA H100 80GB HBM3, 1, 2 MiB"
    before = _bcm_bench(gpu, "2026-01-02 10:00 UTC", 0.10)
    after = _bcm_bench(gpu, "2026-01-02 10:05 UTC", 0.08, run="model=bcm experiment=bcm_layers backend=cuda progress=false")
    before["tag"], after["tag"], before["commit"] = "before", "after", "old1234"
    sdnn = lambda t: {"experiment": "sparse_dnn", "run": "model=sparse_dnn", "status": "FINISHED", "metrics": {},
                      "rows": [{"network": "n1", "variant": "pull", "time_s": str(t)}]}
    before["data"]["runs"].append(sdnn(0.5))
    after["data"]["runs"].append(sdnn(0.6))
    other = _bcm_bench("NVIDIA H200, 1, 2 MiB", "2026-01-02 11:00 UTC", 0.05)
    other["tag"] = "after"
    lines = suite_render.before_after([before, after, other])
    md = "\n".join(lines)
    assert "commit `old1234` against `abc1234`" in md
    assert "| A k=64 dft | median_ms | 0.1 | 0.08 | 0.800 |" in md
    assert "| n1 pull | time_s | 500 | 600 | 1.200 |" in md
    assert "H200" not in md
    assert suite_render.before_after([after, other]) == []          # no before: nothing to compare
    f = [tmp_path / "a.json", tmp_path / "b.json"]
    f[0].write_text(json.dumps(before)), f[1].write_text(json.dumps(after))
    assert "## Before and after (NVIDIA H100 80GB HBM3" in suite_render.render(f)


@pytest.mark.slow
def test_a_stopped_suite_keeps_what_finished(tmp_path):
    """SIGTERM (e.g. the `timeout` around a device command) while a part's child runs: the child gets
    SIGINT and ends cleanly, the part's record is written with what finished and marked interrupted,
    later parts are not run, and the script exits non-zero."""
    import signal
    import subprocess
    import sys
    import time
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_slow.py").write_text(
        "import pathlib, time\nimport pytest\n\n@pytest.mark.gpu\ndef test_quick():\n    pass\n\n"
        f"@pytest.mark.gpu\ndef test_slow():\n    pathlib.Path({str(tmp_path / 'slow')!r}).touch()\n"
        "    time.sleep(120)\n")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "gpu_suite.py"), "run", "--parts", "tests,bench",
                          "--out", str(out), "--", str(tests)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "slow").exists() and time.time() < deadline:   # test_quick passed, test_slow sleeps
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    text, _ = p.communicate(timeout=90)
    assert p.returncode != 0, text
    recs = [json.loads(f.read_text()) for f in out.glob("*.json")]
    assert [r["part"] for r in recs] == ["tests"], text           # bench never started
    data = recs[0]["data"]
    assert "signal" in data["interrupted"]
    assert {t["id"].split("::")[-1]: t["outcome"] for t in data["tests"]}.get("test_quick") == "passed", text


def test_table_pivots_rows_of_records(tmp_path):
    """`gpu_suite.py table`: one line per index tuple in numeric order, one column per variant (scaled),
    extra columns, a later record winning on the same index and variant, and the records' line."""
    row = lambda L, v, ms, x="": {"case": f"L={L}", "L": str(L), "variant": v, "ok": "True", "median_ms": str(ms),
                                  "x_vs_torch_topk": x}
    run = lambda rows: {"experiment": "softmax_topn", "run": "model=softmax_topn", "status": "FINISHED",
                        "rows": rows, "metrics": {}}
    old = _bcm_bench("NVIDIA H200, 1, 2 MiB", "2026-01-01 10:00 UTC", 0.1)
    old["data"]["runs"] = [run([row(1024, "topn_bucket", 0.5, "9"), row(1024, "torch_topk", 0.2)])]
    new = dict(old, commit="def5678", data={"runs": [run([row(1024, "topn_bucket", 0.025, "8"), row(2, "topn_bucket", 0.007, "7"),
                                                          row(2, "torch_topk", 0.05)])]})
    files = [tmp_path / "old.json", tmp_path / "new.json"]
    for f, r in zip(files, (old, new)):
        f.write_text(json.dumps(r))
    md = suite_doc_tables.doc_table(files, ["softmax_topn"], ["L"], ["topn_bucket", "torch_topk"], "median_ms",
                         ["topn_bucket:x_vs_torch_topk:bucket x torch"], scale=1000, unit="µs", decimals=["1"])
    assert md.splitlines() == [
        "| L | `topn_bucket` µs | `torch_topk` µs | bucket x torch |", "|---|---|---|---|",
        "| 2 | 7.0 | 50.0 | 7.0 |", "| 1024 | 25.0 | 200.0 | 8.0 |", "",
        "Records: `old.json`, `new.json`; GPU H200; commits `abc1234`, `def5678`"]


def test_doc_tables_are_generated_from_their_records(tmp_path):
    """Every table of docs/models under a `<!-- generated: python3 scripts/gpu_suite.py table ... -->` line
    is what that command prints now (`gpu_suite.py table --update-docs` rewrites them); a number edited
    by hand is caught."""
    docs = sorted((ROOT / "docs" / "models").glob("*.md"))
    found = {d.name for d in docs if suite_doc_tables.generated_tables(d.read_text())}
    assert {"argueta.md", "bcm.md", "sparse_dnn.md", "wide.md"} <= found
    assert suite_doc_tables.doc_tables(docs) == []
    text = (ROOT / "docs" / "models" / "argueta.md").read_text()
    start, _, _ = suite_doc_tables.generated_tables(text)[0]
    edited = tmp_path / "argueta.md"
    edited.write_text(text.replace("| 1024 | 10 | 25.3 |", "| 1024 | 10 | 24.3 |"))
    assert edited.read_text() != text
    assert suite_doc_tables.doc_tables([edited]) == [f"{edited}:{start + 1}"]
    assert suite_doc_tables.doc_tables([edited], update=True) and edited.read_text() == text


def test_pick_takes_runs_by_their_listed_numbers():
    runs = [f"run{i}" for i in range(1, 18)]
    assert suite_run.pick(runs, "") == runs
    assert suite_run.pick(runs, "1,14-17") == ["run1", "run14", "run15", "run16", "run17"]
    assert suite_run.pick(runs, "3, 2") == ["run2", "run3"]              # the file's order
    assert suite_run.pick(runs, "18") == []
    for bad in ("0", "5-3", "a", "1,,2"):
        with pytest.raises(SystemExit, match="run numbers"):
            suite_run.pick(runs, bad)


def test_shortfalls_name_what_did_not_hold():
    """`run` exits non-zero, after writing its records, when a test failed, a benchmark run did not
    finish or a sanitizer run found errors: each part's shortfall in the one-line message."""
    ok_tests = {"part": "tests", "data": {"rc": 0, "summary": "3 passed"}}
    bad_tests = {"part": "tests", "data": {"rc": 1, "summary": "1 failed, 2 passed"}}
    bench = {"part": "bench", "data": {"jobs": [{"rc": 0}, {"rc": 124}, {"rc": 0}], "runs": []}}
    san = {"part": "sanitize", "data": {"results": [{"errors": 0, "hazards": 0, "rc": 0},
                                                    {"errors": 0, "hazards": 2, "rc": 0}]}}
    clean_san = {"part": "sanitize", "data": {"results": [{"errors": 0, "hazards": None, "rc": 0}]}}
    assert suite_run.shortfalls([ok_tests, clean_san]) == []
    assert suite_run.shortfalls([bad_tests, bench, san]) == [
        "tests: 1 failed, 2 passed", "1 of 3 benchmark runs failed",
        "1 of 2 sanitizer runs found errors or did not finish"]


def test_sanitize_tools_and_summary_without_pytests_line():
    """--sanitize-tools picks compute-sanitizer tools (always in memcheck, racecheck order; an unknown
    one is refused by name); a tests record gets its outcome counts from the JUnit report when
    pytest printed no summary line (-qq)."""
    assert suite_run.sanitize_tools("") == ["memcheck", "racecheck"]
    assert suite_run.sanitize_tools("racecheck, memcheck") == ["memcheck", "racecheck"]
    assert suite_run.sanitize_tools("memcheck") == ["memcheck"]
    with pytest.raises(SystemExit, match="synccheck: not one of memcheck, racecheck"):
        suite_run.sanitize_tools("memcheck,synccheck")
    tests = [{"outcome": "passed"}] * 7 + [{"outcome": "failed"}, {"outcome": "skipped"}]
    assert suite_run._count_summary(tests) == "1 failed, 7 passed, 1 skipped"
    assert suite_run._count_summary([]) == ""
    assert suite_run._pytest_summary("....\n") == ""


def test_sanitize_runs_tell_the_child_a_cuda_tool_is_attached():
    """The sanitize part's children get PIPELINE_CUDA_TOOL (the wide model then skips its spinning
    grid-barrier probe, whose blocks racecheck does not keep resident), the rest of the environment kept."""
    import sys
    code = "import os; print(os.environ.get('PIPELINE_CUDA_TOOL'), bool(os.environ.get('PATH')))"
    rc, out = suite_child.run_child([sys.executable, "-c", code], 60, env={"PIPELINE_CUDA_TOOL": "compute-sanitizer racecheck"})
    assert rc == 0 and out.strip() == "compute-sanitizer racecheck True"
    rc, out = suite_child.run_child([sys.executable, "-c", code], 60)
    assert rc == 0 and out.strip().startswith("None")


def test_headlines_are_declared_in_conf_suite(tmp_path):
    """The README's headline measures come from the `headline:` lists of conf/suite/: a run given by
    the number of a bench entry is that entry's overrides; `baseline_when` tells the baseline rows
    apart (bcm_cnn: the dense network); a malformed headline is a one-line error naming the file."""
    from pipeline import suite
    from pipeline.errors import ConfigError
    heads = suite_readme.headlines()
    assert [h.suite for h in heads][:2] == ["bcm", "bcm_cnn"] and {"fewhot", "wide_lr", "sparse_dnn"} <= {h.model for h in heads}
    bcm = suite.load_all(["bcm"])["bcm"]
    assert _bcm_headline()[0].run == bcm.bench[0] and _bcm_headline()[0].also == [bcm.bench[1]]
    cnn = [h for h in heads if h.model == "bcm_cnn"]
    assert cnn[0].baseline_when == {"network": "dense"}
    rows = [{"network": "dense", "test_acc_pct": "83.0"}, {"network": "bcm_k16", "test_acc_pct": "78.0"},
            {"network": "bcm_k32", "test_acc_pct": "77.0"}]
    rec = {"part": "bench", "gpu": "NVIDIA H200, 1, 2 MiB", "date": "2026-01-01 10:00 UTC", "commit": "abc",
           "data": {"jobs": [], "runs": [{"experiment": "bcm_cnn", "run": " ".join(cnn[0].run) + " backend=cuda",
                                          "status": "FINISHED", "rows": rows, "metrics": {}}]}}
    got = suite_readme.results_rows([rec], cnn)
    assert got[0]["ours"] == {"value": 78.0, "name": "bcm_k16"} and got[0]["baseline"] == {"value": 83.0, "name": "dense"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("bench:\n  - model=bcm\nheadline:\n  - {model: bcm, measure: m, run: 2, column: median_ms}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: headline\[0\].run = 2: the file's bench list has entries 1 to 1"):
        suite.load(bad)
    bad.write_text("bench:\n  - model=bcm\nheadline:\n  - {model: bcm, measure: m, run: 1, column: median_ms, colour: red}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: headline\[0\]: unknown key 'colour'"):
        suite.load(bad)
    bad.write_text("bench:\n  - model=bcm\nheadline:\n  - {model: bcm, run: 1, column: median_ms}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: headline\[0\] lacks measure"):
        suite.load(bad)
