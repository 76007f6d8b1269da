"""An extreme-classification dataset entry (``conf/dataset/*.yaml`` with format: xc): the real
files in the Extreme Classification Repository format (:mod:`pipeline.data.xc`) when they are
there, else the seeded generator of the same shape (:mod:`pipeline.data.xc_synth`)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

from pipeline.data import xc_synth
from pipeline.data.paths import find
from pipeline.data.xc import XCData, XCSplit, read_xc_cached
from pipeline.errors import DataError


def _real_folder(dcfg, data_dir: str, explicit: bool) -> Optional[Path]:
    """The folder holding dataset.train and dataset.test, or None (only when not explicit)."""
    name = str(dcfg.path or dcfg.name)
    if Path(name).is_absolute() and not Path(name).is_dir():
        raise DataError(f"dataset.path={name}: no such folder; point it at the folder holding "
                        f"{dcfg.train} and {dcfg.test} (Extreme Classification Repository text files)")
    try:
        folder = find(SimpleNamespace(data_dir=data_dir), name,
                      f"with {dcfg.train} and {dcfg.test} in Extreme Classification Repository text format")
    except DataError:
        if explicit:
            raise
        return None
    files = [folder / str(dcfg.train), folder / str(dcfg.test)]
    missing = [f for f in files if not f.is_file()]
    if missing:
        if explicit:
            raise DataError(f"{missing[0]}: missing file of dataset '{dcfg.name}'; put it there or set "
                            f"dataset.train=/dataset.test= to the file names in {folder}")
        return None
    return folder


def _read(folder: Path, dcfg, cache_dir: Optional[str], declared: bool = True) -> XCData:
    """Both files of ``folder``; ``declared``: check dataset.features / labels against the header
    (not on size=small, whose preset replaced them with its generated shape)."""
    ftr, fte = folder / str(dcfg.train), folder / str(dcfg.test)
    train, F, L = read_xc_cached(ftr, cache_dir)
    test, F2, L2 = read_xc_cached(fte, cache_dir)
    if (F2, L2) != (F, L):
        raise DataError(f"{fte}:1: header declares {F2} features and {L2} labels but {ftr.name} "
                        f"declares {F} and {L}; both files of a dataset must agree")
    for key, got in (("features", F), ("labels", L)):
        want = int(dcfg.get(key, 0) or 0) if declared else 0
        if want and want != got:
            raise DataError(f"{ftr}:1: header declares {got} {key} but dataset.{key}={want}; "
                            f"set dataset.{key}={got} (or 0 to take the header's)")
    return XCData(str(dcfg.name), train, test, F, L, f"real: {folder}")


def _head(split: XCSplit, rows: int) -> XCSplit:
    return split if rows <= 0 or rows >= split.n else XCSplit(X=split.X[:rows], Y=split.Y[:rows])


def _first_rows(data: XCData, dcfg, notice) -> XCData:
    """A dataset.path folder on size=small: the first ``dataset.train_rows`` / ``test_rows`` rows of
    its files (the small preset's), said in one line."""
    train, test = _head(data.train, int(dcfg.train_rows)), _head(data.test, int(dcfg.test_rows))
    if (train.n, test.n) == (data.train.n, data.test.n):
        notice(f"dataset.path={dcfg.path}: {dcfg.train} and {dcfg.test} used whole on size=small "
               f"({train.n} train / {test.n} test rows)")
        return data
    notice(f"dataset.path={dcfg.path}: the CPU preset (size=small) trains on the first {train.n} of the "
           f"{data.train.n} rows of {dcfg.train} and evaluates on the first {test.n} of the {data.test.n} rows "
           f"of {dcfg.test} (dataset.small.train_rows / test_rows; size=full uses all)")
    return XCData(data.name, train, test, data.n_features, data.n_labels,
                  f"{data.source}, first {train.n} / {test.n} rows")


def load(dcfg, *, data_dir: str, cache_dir: Optional[str], size: str, seed: int,
         notice: Callable[[str], None] = print, progress=None) -> XCData:
    """The dataset of ``dcfg`` (conf/dataset/*.yaml with format: xc; on size=small with its
    ``dataset.small`` preset applied).

    kind=real: ``<data_dir or data/>/<path>/{train,test}`` must exist; used whole at every size.
    kind=auto (the big sets): a folder named by ``dataset.path`` is read at every size (on size=small
    its first ``train_rows`` / ``test_rows`` rows); else ``<data_dir>/<name>/`` on size=full when it
    holds the files, otherwise the seeded generator. kind=synthetic: always generated. Parsed files
    and generated sets are cached in ``cache_dir``."""
    kind = str(dcfg.kind)
    named = kind == "auto" and bool(dcfg.path)
    folder = _real_folder(dcfg, data_dir, kind == "real" or named) if kind in ("real", "auto") else None
    if folder is not None and (kind == "real" or named or size != "small"):
        data = _read(folder, dcfg, cache_dir, declared=size != "small")
        if named and size == "small":
            return _first_rows(data, dcfg, notice)
        if size == "small":
            notice(f"dataset {dcfg.name}: real files from {folder}, used whole on size=small "
                   f"({data.train.n} train / {data.test.n} test rows)")
        return data
    if folder is not None:
        notice(f"dataset {dcfg.name}: size=small does not read the real files in {folder} (size=full does)")
    elif kind == "auto" and size != "small":
        notice(f"dataset {dcfg.name}: no real files ({dcfg.train}, {dcfg.test} under "
               f"{Path(data_dir) / str(dcfg.name)}); generating its shape (seeded; dataset.path=<folder> "
               f"uses real ones)")
    return xc_synth.load(dcfg, cache_dir=cache_dir, seed=seed, progress=progress)
