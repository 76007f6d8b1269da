"""Raw click logs -> hashed sparse rows: one reader for delimited text with one sample a line
(Criteo's TSV, Avazu's CSV, or any layout written in a dataset config), gzip-compressed or not.

A *layout* (:class:`Layout`; its keys: docs/click-logs.md) says how a line splits into columns and
what each column is: the label, integer columns made categories by a ``transform``, categorical,
ignored and derived (hour of day, weekday) columns. Each (name, category) pair becomes the string
``name=category``, hashed by scikit-learn's FeatureHasher (MurmurHash3, no sign flip) into
``n_features`` dimensions with value 1. Formats ``criteo`` and ``avazu`` are layouts of this reader
(:data:`PRESETS`); ``csv`` is one a user writes in ``dataset.layout``, whose keys also override a
preset's. Rows are read in chunks (a column's distinct values in a chunk hashed once each); a
malformed line stops the read with ``file:line: what was expected``.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pipeline.data import READ_ERRORS, not_a_file
from pipeline.data.cache import cached_arrays, file_stamp
from pipeline.errors import ConfigError, DataError

N_FEATURES = 1_000_000
CHUNK_ROWS = 1 << 16                 # rows hashed together
PROGRESS_BYTES = 32 << 20            # a progress bar for files larger than this
PARSE_CACHE_BYTES = 64 << 20         # files larger than this keep their parsed rows in cache_dir

SEPARATORS = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "space": " ", "pipe": "|"}
SEP_WORDS = {"\t": "tab", ",": "comma", ";": "semicolon", " ": "space", "|": "pipe"}
TRANSFORMS = ("log_squared", "identity")
DERIVED_KINDS = ("hour_of_day", "weekday")


@dataclass(frozen=True)
class Derived:
    name: str                        # feature name (the hashed string is name=value)
    source: str                      # column it is computed from
    kind: str                        # hour_of_day | weekday
    time_format: str = "%y%m%d%H"


@dataclass(frozen=True)
class Layout:
    format: str
    sep: str
    header: bool
    columns: Tuple[str, ...]         # empty: the header's names
    label: str
    numeric: Tuple[str, ...]
    transform: str
    categorical: Tuple[str, ...]     # "*": every column no other role names
    ignore: Tuple[str, ...]
    derived: Tuple[Derived, ...]
    quote: str                       # empty: no quoting
    source: str = ""                 # where the files come from (for the missing-file message)

    def ident(self) -> Dict[str, Any]:
        """What the parsed rows depend on (a cache key part)."""
        d = dataclasses.asdict(self)
        d.pop("source")
        return d


CRITEO_COLUMNS = ("label",) + tuple(f"I{j}" for j in range(1, 14)) + tuple(f"C{j}" for j in range(1, 27))
AVAZU_COLUMNS = ("id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category", "app_id",
                 "app_domain", "app_category", "device_id", "device_ip", "device_model", "device_type",
                 "device_conn_type") + tuple(f"C{j}" for j in range(14, 22))

PRESETS: Dict[str, Dict[str, Any]] = {
    # Kaggle Display Advertising Challenge train.txt: label, 13 integer counts, 26 hashed categories
    "criteo": dict(sep="\t", header=False, columns=CRITEO_COLUMNS, label="label", numeric=CRITEO_COLUMNS[1:14],
                   transform="log_squared", categorical=CRITEO_COLUMNS[14:], ignore=(), derived=(), quote="",
                   source="Criteo's Kaggle Display Advertising Challenge train.txt"),
    # Kaggle Avazu CTR competition train.csv: the raw hour is replaced by hour of day and weekday
    "avazu": dict(sep=",", header=True, columns=AVAZU_COLUMNS, label="click", numeric=(), transform="log_squared",
                  categorical=("*",), ignore=("id", "hour"),
                  derived=(Derived("hour_of_day", "hour", "hour_of_day"), Derived("weekday", "hour", "weekday")),
                  quote='"', source="from Kaggle's Avazu CTR competition"),
    # a layout written in dataset.layout (these are its defaults)
    "csv": dict(sep=",", header=True, columns=(), label="", numeric=(), transform="log_squared",
                categorical=("*",), ignore=(), derived=(), quote='"', source=""),
}
FORMATS = tuple(PRESETS)


# ------------------------------------------------------------------------------------- layouts

def _get(node: Any, key: str, default: Any = None) -> Any:
    if node is None:
        return default
    return node.get(key, default) if hasattr(node, "get") else getattr(node, key, default)


def layout_of(dataset: Any) -> Layout:
    """The layout of a dataset config (``format`` a preset, ``layout`` keys overriding it; a null
    key keeps the preset's value). Raises a one-line ConfigError naming the key."""
    fmt = str(_get(dataset, "format", ""))
    if fmt not in PRESETS:
        raise ConfigError(f"dataset.format={fmt!r} is not allowed: one of {', '.join(FORMATS)} for the raw "
                          f"click-log reader")
    v = dict(PRESETS[fmt])
    over = _get(dataset, "layout")
    for key in v.keys() - {"source"}:
        x = _get(over, key)
        if x is not None:
            v[key] = x
    sep = str(v["sep"])
    sep = SEPARATORS.get(sep.lower(), sep)
    if len(sep) != 1 or sep in "\r\n":
        raise ConfigError(f"dataset.layout.sep={v['sep']!r} is not allowed: one character "
                          f"(or {', '.join(k for k in SEPARATORS if k != chr(92) + 't')})")
    quote = str(v["quote"] or "")
    if len(quote) > 1 or (quote and quote == sep):
        raise ConfigError(f"dataset.layout.quote={quote!r} is not allowed: one character other than the "
                          f"separator, or '' (no quoting)")
    derived = []
    for i, x in enumerate(v["derived"] or ()):
        if not isinstance(x, Derived):
            try:
                x = Derived(str(_get(x, "name")), str(_get(x, "source")), str(_get(x, "kind")),
                            str(_get(x, "time_format", "%y%m%d%H")))
            except Exception:
                raise ConfigError(f"dataset.layout.derived[{i}]={x!r} is not allowed: "
                                  f"{{name, source, kind, time_format}}") from None
        if x.kind not in DERIVED_KINDS:
            raise ConfigError(f"dataset.layout.derived[{i}].kind={x.kind!r} is not allowed: "
                              f"one of {', '.join(DERIVED_KINDS)}")
        derived.append(x)
    lay = Layout(format=fmt, sep=sep, header=bool(v["header"]), columns=tuple(map(str, v["columns"] or ())),
                 label=str(v["label"] or ""), numeric=tuple(map(str, v["numeric"] or ())),
                 transform=str(v["transform"]), categorical=tuple(map(str, v["categorical"] or ())),
                 ignore=tuple(map(str, v["ignore"] or ())), derived=tuple(derived), quote=quote,
                 source=str(v["source"]))
    if lay.transform not in TRANSFORMS:
        raise ConfigError(f"dataset.layout.transform={lay.transform!r} is not allowed: one of {', '.join(TRANSFORMS)}")
    if not lay.label:
        raise ConfigError(f"dataset.layout.label={lay.label!r} is not allowed: the name of the 0/1 label column "
                          f"(format {fmt})")
    if not lay.header and not lay.columns:
        raise ConfigError("dataset.layout.columns=[] is not allowed: the column names (the file has no header: "
                          "dataset.layout.header=false)")
    if lay.columns:
        try:
            Plan(lay, lay.columns)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return lay


def describe(names: Sequence[str], limit: int = 240) -> str:
    """Column names with runs like I1, I2, .., I13 written I1..I13 (cut after ``limit`` characters)."""
    def split(name: str) -> Tuple[str, Optional[int]]:      # ("I", 13) for I13
        m = re.fullmatch(r"(.*\D)(\d+)", name)
        return (m[1], int(m[2])) if m else (name, None)

    out: List[str] = []
    i = 0
    while i < len(names):
        pre, num = split(names[i])
        j = i
        while num is not None and j + 1 < len(names) and split(names[j + 1]) == (pre, num + (j + 1 - i)):
            j += 1
        out.append(f"{names[i]}..{names[j]}" if j > i + 1 else ", ".join(names[i:j + 1]))
        i = j + 1
    text = ", ".join(out)
    return text if len(text) <= limit else repr(text[:limit]) + "..."


class Plan:
    """Where each role's columns sit among ``names``; ValueError (one line naming the layout key)
    when the layout does not fit the names."""

    def __init__(self, lay: Layout, names: Sequence[str]):
        names = list(names)
        self.names = names
        pos: Dict[str, int] = {}
        for i, n in enumerate(names):
            if n in pos:
                raise ValueError(f"dataset.layout.columns: column {n!r} appears twice (names must be unique)")
            pos[n] = i
        known = f"the columns are {describe(names)}"

        def where(key: str, n: str) -> int:
            if n not in pos:
                raise ValueError(f"dataset.layout.{key}={n!r} is not allowed: no such column ({known})")
            return pos[n]

        self.label = where("label", lay.label)
        role: Dict[int, str] = {self.label: "label"}
        star = "*" in lay.categorical
        explicit = [("numeric", n) for n in lay.numeric] + \
                   [("categorical", n) for n in lay.categorical if n != "*"] + [("ignore", n) for n in lay.ignore]
        for key, n in explicit:
            i = where(key, n)
            if i in role:
                raise ValueError(f"dataset.layout.{key}={n!r} is not allowed: that column is already {role[i]}")
            role[i] = key
        for d in lay.derived:
            where("derived", d.source)
            if d.name in pos or sum(e.name == d.name for e in lay.derived) > 1:
                raise ValueError(f"dataset.layout.derived={d.name!r} is not allowed: that name is already a "
                                 f"column's or another derived feature's")
        rest = [n for i, n in enumerate(names) if i not in role]
        if rest and not star:
            raise ValueError(f"dataset.layout: column(s) {describe(rest)} have no role: list them under categorical, "
                             f"numeric or ignore (or categorical: ['*'] for every other column)")
        for i in range(len(names)):
            role.setdefault(i, "categorical")
        self.numeric = [i for i in range(len(names)) if role[i] == "numeric"]
        self.categorical = [i for i in range(len(names)) if role[i] == "categorical"]
        self.derived = [(d, pos[d.source]) for d in lay.derived]
        if not (self.numeric or self.categorical or self.derived):
            raise ValueError("dataset.layout: no feature columns (numeric, categorical or derived)")
        self.width = len(self.numeric) + len(self.categorical) + len(self.derived)


# ------------------------------------------------------------------------------------- reading

def _splitter(lay: Layout) -> Callable[[str], List[str]]:
    sep, quote = lay.sep, lay.quote
    if not quote:
        return lambda line: line.split(sep)

    def split(line: str) -> List[str]:
        if quote in line:
            return next(csv.reader([line], delimiter=sep, quotechar=quote, strict=False))
        return line.split(sep)
    return split


def log_squared(v: int) -> int:
    return int(math.floor(math.log(v) ** 2)) if v > 2 else v


def _factorize(values: Sequence[str]) -> Tuple[np.ndarray, List[str]]:
    """(code of each value, the distinct values in first-seen order)."""
    seen = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return np.fromiter(map(seen.__getitem__, values), np.int64, len(values)), list(seen)


class _Chunks:
    """Hashes chunks of split rows into sorted, deduplicated feature ids."""

    def __init__(self, lay: Layout, plan: Plan, n_features: int, path: Path):
        from sklearn.feature_extraction import FeatureHasher
        self.plan, self.path = plan, path
        self.hasher = FeatureHasher(n_features=n_features, input_type="string", alternate_sign=False,
                                    dtype=np.float32)
        self.indices: List[np.ndarray] = []
        self.counts: List[np.ndarray] = []
        self.labels: List[np.ndarray] = []
        self.transform = log_squared if lay.transform == "log_squared" else (lambda v: v)

    def add(self, rows: List[List[str]], lines: List[int]) -> None:
        if not rows:
            return
        n, plan, names = len(rows), self.plan, self.plan.names
        cols = list(zip(*rows))
        errors: List[Tuple[int, int, str]] = []     # (row, order, message): the first line's is raised
        factor: Dict[int, Tuple[np.ndarray, List[str]]] = {}

        def fac(j: int):
            if j not in factor:
                factor[j] = _factorize(cols[j])
            return factor[j]

        def first_row(codes: np.ndarray, bad: List[int]) -> int:
            return int(np.flatnonzero(np.isin(codes, bad))[0])

        codes, uniq = fac(plan.label)
        lab = np.array([u == "1" for u in uniq], np.float32)
        bad = [k for k, u in enumerate(uniq) if u not in ("0", "1")]
        if bad:
            r = first_row(codes, bad)
            errors.append((r, -1, f"label {cols[plan.label][r]!r} is not 0 or 1"))
        y = lab[codes]

        tokens: List[str] = []
        parts: List[Tuple[int, np.ndarray]] = []       # (offset into tokens, codes) per feature column

        def feature(j: int, token: Callable[[str], str], why: Callable[[str], str] = str) -> None:
            """The token of each distinct value of column ``j``; ``token`` raises ValueError for a bad one."""
            codes, uniq = fac(j)
            parts.append((len(tokens), codes))
            bad = []
            for k, u in enumerate(uniq):
                try:
                    tokens.append(token(u))
                except ValueError:
                    tokens.append("")
                    bad.append(k)
            if bad:
                r = first_row(codes, bad)
                errors.append((r, j, why(cols[j][r])))

        for j in plan.numeric:                         # missing is a value of its own
            name = names[j]
            feature(j, lambda u: f"{name}={self.transform(int(u)) if u else ''}",
                    lambda v: f"integer field {name} is {v!r}, not an integer")
        for j in plan.categorical:
            name = names[j]
            feature(j, lambda u: f"{name}={u}")
        for d, j in plan.derived:
            def when(u: str) -> str:
                t = datetime.strptime(u, d.time_format)
                return f"{d.name}={t.hour if d.kind == 'hour_of_day' else t.weekday()}"
            feature(j, when, lambda v: f"column {names[j]} is {v!r}, not a time in the format "
                                       f"{d.time_format} (dataset.layout.derived: {d.name})")
        if errors:
            r, _, msg = min(errors, key=lambda e: (e[0], e[1]))
            raise DataError(f"{self.path}:{lines[r]}: {msg}")

        ids = self.hasher.transform([t] for t in tokens).indices
        M = np.empty((n, len(parts)), np.int32)
        for c, (off, codes) in enumerate(parts):
            M[:, c] = ids[off + codes]
        M.sort(axis=1)
        keep = np.ones(M.shape, bool)
        keep[:, 1:] = M[:, 1:] != M[:, :-1]           # ids that hash alike stay one 1
        self.indices.append(M[keep])
        self.counts.append(keep.sum(axis=1))
        self.labels.append(y)

    def result(self, n_features: int):
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        indptr = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        indices = np.concatenate(self.indices) if self.indices else np.zeros(0, np.int32)
        y = np.concatenate(self.labels) if self.labels else np.zeros(0, np.float32)
        return _ones(indices, indptr, n_features), y.astype(np.float32, copy=False)


def _ones(indices: np.ndarray, indptr: np.ndarray, n_features: int):
    """CSR float32 of ones at sorted ``indices``."""
    import scipy.sparse as sp
    X = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(len(indptr) - 1, n_features))
    X.has_sorted_indices = True
    return X


def read(path, lay: Layout, n_features: int = N_FEATURES, rows: int = 0, progress: bool = False):
    """(X csr [rows, n_features] float32 of ones, y float32 0/1) of a click-log file; ``rows`` > 0:
    the first that many samples only."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {not_a_file(path)} ({lay.format} click log)")
    split = _splitter(lay)
    plan = Plan(lay, lay.columns) if lay.columns and not lay.header else None
    chunks = _Chunks(lay, plan, n_features, path) if plan else None
    sepword = SEP_WORDS.get(lay.sep, repr(lay.sep))
    size = path.stat().st_size
    bar = None
    if progress and size > PROGRESS_BYTES:
        import sys
        from tqdm.auto import tqdm
        bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"read {path.name}", leave=False, file=sys.stderr)
    raw = open(path, "rb")              # its position drives the progress bar
    gz = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    f = io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw, encoding="utf-8", errors="replace")
    buf: List[List[str]] = []
    lines: List[int] = []
    n = 0
    try:
        with raw, f:
            for no, line in enumerate(f, 1):
                line = line.rstrip("\n").rstrip("\r")
                if not line:
                    continue
                fields = split(line)
                if chunks is None:                    # the header line
                    chunks = _Chunks(lay, _header_plan(lay, fields, path, no), n_features, path)
                    continue
                if len(fields) != len(chunks.plan.names):
                    chunks.add(buf, lines)            # an earlier line's error comes first
                    raise DataError(f"{path}:{no}: {len(fields)} {sepword}-separated fields, expected "
                                    f"{len(chunks.plan.names)} ({describe(chunks.plan.names)})")
                buf.append(fields)
                lines.append(no)
                n += 1
                if len(buf) == CHUNK_ROWS or n == rows:
                    chunks.add(buf, lines)
                    buf, lines = [], []
                    if bar is not None:
                        bar.update(raw.tell() - bar.n)
                    if n == rows:
                        break
            if chunks is None:
                raise DataError(f"{path}: empty file, expected a header line (dataset.layout.header=true)")
            chunks.add(buf, lines)
    except READ_ERRORS as e:
        raise DataError(f"{path}: unreadable ({e})") from None
    finally:
        if bar is not None:
            bar.close()
    return chunks.result(n_features)


def _header_plan(lay: Layout, fields: List[str], path: Path, no: int) -> Plan:
    names = [h.strip() for h in fields]
    if names:
        names[0] = names[0].lstrip("\ufeff")         # a byte-order mark
    if lay.columns:
        want = list(lay.columns)
        if len(names) != len(want):
            raise DataError(f"{path}:{no}: the header has {len(names)} columns ({describe(names)}), expected "
                            f"{len(want)} ({describe(want)}) (dataset.layout.columns)")
        for i, (h, w) in enumerate(zip(names, want), 1):
            if h != w:
                raise DataError(f"{path}:{no}: header column {i} is {h!r}, expected {w!r} (dataset.layout.columns; "
                                f"[] takes the header's names)")
    try:
        return Plan(lay, names)
    except ValueError as e:
        raise DataError(f"{path}:{no}: the header does not fit the layout: {e}") from None


# ------------------------------------------------------------------------- the dataset entry

def locate(cfg, lay: Layout) -> Tuple[Path, Optional[Path]]:
    """(training file, validation file or None = split off the training rows). ``dataset.path``
    names a folder (under ``data_dir``, the shipped ``data/``, or absolute) holding
    ``dataset.train``, or the training file itself."""
    from pipeline.data.paths import SHIPPED
    d = cfg.dataset
    name = str(d.path or d.name)
    train, val = str(d.train or ""), str(d.val or "")
    roots = [Path(str(cfg.data_dir)), SHIPPED]
    folder = next((r / name for r in roots if (r / name).is_file() or (r / name).is_dir()), roots[0] / name)
    if folder.is_file():
        folder, train = folder.parent, folder.name
    ftr = folder / train
    if not train or not ftr.is_file():
        what = train or "the training file"
        src = f" ({lay.source})" if lay.source else ""
        raise DataError(f"file not found: put {what} at {ftr}{src}, or set dataset.path=<that file or its folder> "
                        f"(dataset '{d.name}')")
    if not val:
        return ftr, None
    fva = folder / val
    if not fva.is_file():
        raise DataError(f"file not found: {fva} (dataset.val of '{d.name}'; dataset.val='' holds out the last "
                        f"dataset.val_fraction of the training rows)")
    return ftr, fva


def held_out(n: int, fraction: float) -> int:
    """Rows of ``n`` held out for validation (the last ones: click logs are in time order)."""
    return min(n - 1, max(1, int(round(n * fraction)))) if n > 1 else 0


def source(cfg):
    """(identity dict for the cache key, loader returning (Xtr, ytr, Xva, yva)) of a click-log
    dataset (``dataset.format`` one of :data:`FORMATS`); the contract of the wide models'
    ``prep.source``. ``dataset.rows`` > 0 reads that many training rows (the small preset sets it)."""
    d = cfg.dataset
    lay = layout_of(d)
    ftr, fva = locate(cfg, lay)
    feats = int(d.features) or N_FEATURES
    frac = float(d.get("val_fraction", 0.1))
    small = int(d.rows)
    limit = small
    if small and fva is None:                        # the held-out rows come after `small` training rows
        limit = small + max(1, int(round(small * frac / (1 - frac))))
    ident = {"format": lay.format, "layout": lay.ident(), "train": file_stamp(ftr), "features": feats,
             "val": file_stamp(fva) if fva is not None else {"held_out": frac}, "rows": limit}
    progress = bool(cfg.get("progress", False))
    cache_dir = str(cfg.cache_dir)

    def rows_of(f: Path, rows: int):
        X, y = read(f, lay, feats, rows, progress)
        if X.shape[0] == 0:                      # a split of a dataset needs rows
            raise DataError(f"{f}: no rows{' after the header' if lay.header else ' (the file is empty)'}: the "
                            f"{lay.format} click log of dataset '{d.name}' needs at least one sample line")
        return X, y

    def parsed(f: Path, rows: int):
        def build():
            X, y = rows_of(f, rows)
            return {"indptr": X.indptr.astype(np.int64), "indices": X.indices.astype(np.int32), "y": y}
        if f.stat().st_size <= PARSE_CACHE_BYTES:
            return rows_of(f, rows)
        a = cached_arrays(cache_dir, f"ctr-{d.name}", {"v": 1, "file": file_stamp(f), "layout": lay.ident(),
                                                       "features": feats, "rows": rows}, build)
        return _ones(a["indices"], a["indptr"], feats), a["y"]

    def load():
        Xtr, ytr = parsed(ftr, limit)
        if fva is not None:
            Xva, yva = parsed(fva, 0)
            return Xtr, ytr, Xva, yva
        nva = held_out(Xtr.shape[0], frac)
        k = Xtr.shape[0] - nva
        return Xtr[:k], ytr[:k], Xtr[k:], ytr[k:]
    return ident, load
