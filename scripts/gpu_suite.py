#!/usr/bin/env python3
"""The GPU side in one command: GPU tests, every model's benchmarks, compute-sanitizer, and the
regenerated docs/gpu-results.md. Run on a machine with an NVIDIA GPU, from the project root:

    python3 scripts/gpu_suite.py run --out outputs/gpu-suite

Parts (``--parts tests,bench,sanitize``) and models (``--models bcm,sparse_dnn``) can be chosen, so
the work can be split over several calls. The runs of the bench and sanitize parts are listed in
``conf/suite/<model package>.yaml`` (``bench:`` and ``sanitize:``, one ``python -m pipeline`` run an
entry, its overrides as typed); ``--suite FILE`` runs another file of that shape, and ``list`` prints
the commands:

    python3 scripts/gpu_suite.py list --models bcm_cnn
    python3 scripts/gpu_suite.py run --parts bench --suite my-runs.yaml

``--bench-pick`` / ``--sanitize-pick`` take some of a list by the numbers ``list`` prints ('1,14-17'),
``--sanitize-tools memcheck`` one compute-sanitizer tool (default: memcheck and racecheck).
Each part writes one JSON record named by date, GPU, commit and part
(``2026-11-21T1347Z_H200_25f6c38_bench.json``); records worth keeping go to ``docs/gpu-runs/``.
``render`` rebuilds docs/gpu-results.md from any number of records, and the README's results table
(between ``<!-- results:start -->`` and ``<!-- results:end -->``) from the headline measures of each
model (the ``headline:`` list of its ``conf/suite/<name>.yaml``):

    python3 scripts/gpu_suite.py render docs/gpu-runs/*.json
    python3 scripts/gpu_suite.py rename docs/gpu-runs/*.json      # records of other names

``table`` prints one Markdown table from records, for the model docs: a pivot (a line per index
tuple, a column per variant) or ``--rows`` (a line per record row), then the records' names, GPU and
commits. A doc's table carries its command in the comment right above it; ``--check-docs`` re-runs
every such command in docs/models/*.md and fails where the table differs (``--update-docs`` rewrites):

    <!-- generated: python3 scripts/gpu_suite.py table docs/gpu-runs/A.json docs/gpu-runs/B.json --experiment softmax_topn --index L,N --variants topn_bucket,torch_topk --value median_ms --scale 1000 --unit µs --extra 'topn_bucket:x_vs_torch_topk:bucket x torch' -->
    python3 scripts/gpu_suite.py table --check-docs

Before and after a change, on one machine in one command: unpack the older commit beside the project
(``git archive <commit> | tar -x -C /tmp/before; echo <commit> > /tmp/before/COMMIT``), run the same
runs there with ``--tree /tmp/before --tag before`` and here with ``--tag after``; ``render`` then
compares the two records row by row (``conf/suite/extra/harness_before_after.yaml`` is such a list).

Stopped by SIGTERM or SIGINT (a `timeout` around the command, say), the script gives the running
child SIGINT (pytest still writes its report; a run is marked killed), writes the record of the part
in progress with what finished, marked ``interrupted``, runs no further part and exits non-zero.
It also exits non-zero, after writing every record, when a test failed, a benchmark run did not
finish or a sanitizer run found errors (one line says which).

Benchmarks run through the CLI (``python -m pipeline <overrides>``) with a private MLflow store, and
their results are read back from it, so what is recorded is exactly what a user's run logs.

The code, by job: suite_run.py (run, list; its child processes: suite_child.py), suite_records.py
(the records: names, GPU, commit), suite_render.py (docs/gpu-results.md), suite_readme.py (the
README's table), suite_doc_tables.py (table).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import suite_doc_tables  # noqa: E402
import suite_readme  # noqa: E402
import suite_records  # noqa: E402
import suite_render  # noqa: E402
import suite_run  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "outputs" / "gpu-suite")))
    r.add_argument("--parts", default="tests,bench,sanitize")
    r.add_argument("--models", default="", help="comma-separated suites of conf/suite/ (default: all)")
    r.add_argument("--suite", action="append", default=[],
                   help="a suite file (bench:/sanitize: lists) to run instead of conf/suite/ (repeatable)")
    r.add_argument("--bench-timeout", type=int, default=240)
    r.add_argument("--sanitize-timeout", type=int, default=240)
    r.add_argument("--sanitize-max", type=int, default=0, help="at most this many sanitize runs a suite (0: all)")
    r.add_argument("--bench-pick", default="",
                   help="run only these of each suite's bench list, numbered from 1 as `list` prints them: '1,14-17'")
    r.add_argument("--sanitize-pick", default="",
                   help="run only these of each suite's sanitize list, numbered from 1 as `list` prints them")
    r.add_argument("--sanitize-tools", default="",
                   help="compute-sanitizer tools, comma-separated: memcheck, racecheck (default: both)")
    r.add_argument("--extra", action="append", default=[],
                   help="benchmark these overrides (a quoted string, repeatable) instead of the suites' bench lists")
    r.add_argument("--tag", default="", help="suffix for the JSON file names (after the part); records tagged "
                   "'before' and 'after' on one GPU are compared run by run in docs/gpu-results.md")
    r.add_argument("--tree", default="", help="run the benchmarks in this other checkout of the project (e.g. "
                   "`git archive <commit>` unpacked): its `python -m pipeline`, its configs; the record names "
                   "the commit in its COMMIT file (or PIPELINE_COMMIT)")
    r.add_argument("pytest_args", nargs="*")
    ls = sub.add_parser("list", help="print the suites' runs as commands")
    ls.add_argument("--models", default="", help="comma-separated suites of conf/suite/ (default: all)")
    ls.add_argument("--suite", action="append", default=[], help="a suite file instead of conf/suite/")
    g = sub.add_parser("render")
    g.add_argument("files", nargs="+")
    g.add_argument("--to", default=str(ROOT / "docs" / "gpu-results.md"))
    g.add_argument("--readme", default=str(ROOT / "README.md"),
                   help="README whose results block is regenerated ('' to leave it alone)")
    t = sub.add_parser("table", help="print a Markdown table built from bench records, for the model docs")
    suite_doc_tables.add_table_args(t)
    n = sub.add_parser("rename", help="rename records to <date>_<GPU>_<commit>_<part>.json (git mv when tracked)")
    n.add_argument("files", nargs="+")
    return ap


def render(files: List[Path], to: Path, readme: Optional[Path] = None) -> None:
    """``render``: docs/gpu-results.md (``to``) and the results table of ``readme`` from the records ``files``."""
    to.write_text(suite_render.render(files))
    print(f"wrote {to}")
    if readme:
        table = suite_readme.results_table(suite_records.read_records(files))
        readme.write_text(suite_readme.update_readme(readme.read_text(), table))
        print(f"wrote the results table of {readme}")


def main() -> None:
    a = parser().parse_args()
    if a.cmd in ("run", "list"):
        a.models = [m for m in a.models.split(",") if m]
    if a.cmd == "run":
        suite_run.run_parts(a)
    elif a.cmd == "list":
        suite_run.list_runs(a)
    elif a.cmd == "render":
        render([Path(f) for f in a.files], Path(a.to), Path(a.readme) if a.readme else None)
    elif a.cmd == "table":
        suite_doc_tables.table_command(a)
    elif a.cmd == "rename":
        suite_records.rename_records(a.files)


if __name__ == "__main__":
    main()
