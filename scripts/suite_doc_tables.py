"""``gpu_suite.py table``: one Markdown table from bench records, for the model docs, and the check
(``--check-docs``) or rewrite (``--update-docs``) of every table of docs/models/*.md that carries its
command in the comment right above it (``<!-- generated: python3 scripts/gpu_suite.py table ... -->``)."""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from suite_records import ROOT, as_number, fmt_value, read_record, short_gpu

GENERATED = "<!-- generated: "
TABLE_CMD = "python3 scripts/gpu_suite.py table"
Run = Tuple[Dict[str, Any], List[Dict[str, Any]]]          # a recorded run and its rows that a table shows


def _record_path(f: Any) -> Path:
    p = Path(f)
    return p if p.is_absolute() or p.exists() else ROOT / p


def _sort_key(v: str) -> Tuple[int, Any]:
    n = as_number(v)
    return (0, n) if n is not None else (1, v)


def _cell(row: Dict[str, Any], col: str, scale: float = 1.0, decimals: Optional[Dict[str, int]] = None) -> str:
    v = row.get(col)
    n = as_number(v)
    d = (decimals or {}).get(col, (decimals or {}).get(""))
    if n is None:
        text = fmt_value(v)
    elif d is not None:
        text = f"{n * scale:.{d}f}"
    else:
        text = fmt_value(n * scale)
    return text + (" (failed check)" if str(row.get("ok", "")).lower() == "false" else "")


def _finished_runs(files: Sequence[Any], experiments: Sequence[str],
                   cond: Sequence[List[str]]) -> Tuple[List[Run], List[Tuple[Path, Dict[str, Any]]]]:
    """The finished runs of ``experiments`` in the bench records ``files`` with their rows where
    every ``cond`` (column, value) holds, and the records that gave any."""
    used: List[Tuple[Path, Dict[str, Any]]] = []
    runs: List[Run] = []
    for f in map(_record_path, files):
        d = read_record(f)
        took = False
        for r in d.get("data", {}).get("runs", []) if d.get("part") == "bench" else []:
            if r.get("status") != "FINISHED" or (experiments and r.get("experiment") not in experiments):
                continue
            rows = [x for x in r.get("rows", []) if all(str(x.get(c, "")) == v for c, v in cond)]
            if rows:
                runs.append((r, rows))
                took = True
        if took:
            used.append((f, d))
    return runs, used


def _rows_table(runs: List[Run], rows_cols: Sequence[str], dec: Dict[str, int]) -> Tuple[List[str], str]:
    """A line per row, led by the overrides that tell the runs apart when there are several; and the
    tail of the records' line naming the overrides every run has."""
    toks = [r.get("run", "").split() for r, _ in runs]
    common = [t for t in toks[0] if all(t in x for x in toks)]
    label = len(runs) > 1
    head = (["run"] if label else []) + list(rows_cols)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (r, rows), t in zip(runs, toks):
        own = " ".join(x for x in t if x not in common)
        lead = [f"`{own}`" if own else "(only those of every run)"] if label else []
        for row in rows:
            lines.append("| " + " | ".join(lead + [_cell(row, c, decimals=dec) for c in rows_cols]) + " |")
    return lines, (f"; every run: `{' '.join(common)}`" if label and common else "")


def _pivot_table(runs: List[Run], index: Sequence[str], variants: Sequence[str], value: str,
                 extras: Sequence[str], scale: float, unit: str, dec: Dict[str, int]) -> List[str]:
    """A line per index tuple (numeric order), a column per variant, then the ``extras`` columns."""
    if not (index and variants and value):
        raise SystemExit("error: table needs --index, --variants and --value (or --rows COLUMNS)")
    ex = []
    for e in extras:
        parts = e.split(":", 2)
        if len(parts) != 3:
            raise SystemExit(f"error: --extra takes VARIANT:COLUMN:HEADER, got {e!r}")
        ex.append(parts)
    cells: Dict[Tuple[str, ...], Dict[str, Dict[str, Any]]] = {}
    for _, rows in runs:
        for row in rows:
            if row.get("variant") in variants or any(row.get("variant") == v for v, _, _ in ex):
                cells.setdefault(tuple(str(row.get(c, "")) for c in index), {})[row["variant"]] = row
    head = list(index) + [f"`{v}` {unit or value}" for v in variants] + [h for _, _, h in ex]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(cells, key=lambda k: tuple(map(_sort_key, k))):
        by = cells[key]
        row = list(key) + [_cell(by[v], value, scale, dec) if v in by else "" for v in variants]
        row += [_cell(by[v], c, decimals=dec) if v in by else "" for v, c, _ in ex]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def doc_table(files: Sequence[Any], experiments: Sequence[str] = (), index: Sequence[str] = (),
              variants: Sequence[str] = (), value: str = "", extras: Sequence[str] = (),
              where: Sequence[str] = (), scale: float = 1.0, unit: str = "", rows_cols: Sequence[str] = (),
              decimals: Sequence[str] = ()) -> str:
    """A Markdown table from the finished runs of ``experiments`` in bench records ``files``, then a
    line naming the records, GPU and commits. Pivot (``index``/``variants``/``value``): one line per
    distinct index tuple (numeric order where numeric), one column per variant holding its ``value``
    (times ``scale``, headed `` `variant` unit``), then ``extras`` (``VARIANT:COLUMN:HEADER``); a later
    file (or run) wins on the same index and variant. Rows (``rows_cols``): one line per record row
    with those columns, led by the overrides that tell the runs apart when there are several.
    ``where``: ``COLUMN=VALUE`` filters on the rows. ``decimals``: ``N`` or ``COLUMN=N`` (the column's
    own wins), numbers printed with N decimals instead of 4 significant digits. Rows that failed their
    check are marked."""
    try:
        dec = {k: int(v) for k, _, v in (d.rpartition("=") for d in decimals)}
    except ValueError:
        raise SystemExit(f"error: --decimals takes N or COLUMN=N, got {list(decimals)}")
    cond = [w.split("=", 1) for w in where]
    if any(len(c) != 2 for c in cond):
        raise SystemExit(f"error: --where takes COLUMN=VALUE, got {list(where)}")
    runs, used = _finished_runs(files, experiments, cond)
    if not runs:
        raise SystemExit(f"error: no finished run of {list(experiments) or 'any experiment'} with such rows in {list(files)}")
    if rows_cols:
        lines, tail = _rows_table(runs, rows_cols, dec)
    else:
        lines, tail = _pivot_table(runs, index, variants, value, extras, scale, unit, dec), ""
    uniq = lambda xs: list(dict.fromkeys(xs))
    lines += ["", "Records: " + ", ".join(f"`{f.name}`" for f, _ in used)
              + "; GPU " + ", ".join(uniq(short_gpu(d) for _, d in used))
              + "; commits " + ", ".join(f"`{c}`" for c in uniq(str(d.get("commit")) for _, d in used)) + tail]
    return "\n".join(lines)


def add_table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", help="bench records (later files win on the same index and variant)")
    p.add_argument("--experiment", default="", help="comma-separated experiments whose runs are read (default: all)")
    p.add_argument("--index", default="", help="comma-separated columns naming a line, e.g. L,N")
    p.add_argument("--variants", default="", help="comma-separated variants, one column each")
    p.add_argument("--value", default="", help="the column each variant's cell shows, e.g. median_ms")
    p.add_argument("--scale", type=float, default=1.0, help="multiply --value by this (1000: ms -> µs)")
    p.add_argument("--unit", default="", help="the unit in the variants' headers (default: the --value column)")
    p.add_argument("--extra", action="append", default=[], help="VARIANT:COLUMN:HEADER, one more column (repeatable)")
    p.add_argument("--where", action="append", default=[], help="COLUMN=VALUE: only such rows (repeatable)")
    p.add_argument("--decimals", action="append", default=[], help="N or COLUMN=N: print numbers (that "
                   "column's) with N decimals instead of 4 significant digits (repeatable)")
    p.add_argument("--rows", default="", help="comma-separated columns: one line per record row instead of the pivot")
    p.add_argument("--check-docs", nargs="*", metavar="DOC", help="re-run every generated table of these docs "
                   "(default: docs/models/*.md) and fail where one differs")
    p.add_argument("--update-docs", nargs="*", metavar="DOC", help="rewrite every generated table of these docs "
                   "(default: docs/models/*.md)")


def table_from_args(a: argparse.Namespace) -> str:
    split = lambda s: [x for x in s.split(",") if x]
    return doc_table(a.files, split(a.experiment), split(a.index), split(a.variants), a.value, a.extra, a.where,
                     a.scale, a.unit, split(a.rows), a.decimals)


def _table_of_command(cmd: str) -> str:
    if not cmd.startswith(TABLE_CMD + " "):
        raise SystemExit(f"error: a generated table's command must start with {TABLE_CMD!r}: {cmd!r}")
    p = argparse.ArgumentParser(prog=TABLE_CMD)
    add_table_args(p)
    return table_from_args(p.parse_args(shlex.split(cmd[len(TABLE_CMD):])))


def generated_tables(text: str) -> List[Tuple[int, int, str]]:
    """(first line, line after the end, command) of every generated table of a doc: the lines under a
    ``<!-- generated: python3 scripts/gpu_suite.py table ... -->`` line, through its ``Records:`` line."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith(GENERATED) and s.endswith("-->"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("Records: ")), None)
            if end is None:
                raise SystemExit(f"error: line {i + 1}: a generated table without its 'Records:' line")
            out.append((i + 1, end + 1, s[len(GENERATED):-3].strip()))
    return out


def doc_tables(docs: Sequence[Path], update: bool = False) -> List[str]:
    """Re-run the command of every generated table of ``docs``; the tables that differ from their
    command's output (``doc:line``), rewritten in place with ``update``."""
    stale = []
    for doc in docs:
        text = Path(doc).read_text()
        lines = text.split("\n")
        here = []
        for start, end, cmd in reversed(generated_tables(text)):      # from the end: line numbers stay put
            new = _table_of_command(cmd).split("\n")
            if lines[start:end] != new:
                here.append(f"{doc}:{start + 1}")
                lines[start:end] = new
        stale += here[::-1]
        if update and here:
            Path(doc).write_text("\n".join(lines))
    return stale


def table_command(a: argparse.Namespace) -> None:
    """``table``: print one table, or check (``--check-docs``) / rewrite (``--update-docs``) the docs'."""
    if a.check_docs is not None or a.update_docs is not None:
        docs = [Path(x) for x in (a.check_docs or a.update_docs or [])] or sorted((ROOT / "docs" / "models").glob("*.md"))
        stale = doc_tables(docs, update=a.update_docs is not None)
        for s in stale:
            print(f"{s}: the table differs from its command's output" + (" (rewritten)" if a.update_docs is not None else ""))
        if stale and a.update_docs is None:
            raise SystemExit(f"error: {len(stale)} generated table(s) differ; `table --update-docs` rewrites them")
        return
    if not a.files:
        raise SystemExit("error: table needs bench records (or --check-docs / --update-docs)")
    print(table_from_args(a))
