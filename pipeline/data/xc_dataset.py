"""An extreme-classification dataset entry (``conf/dataset/*.yaml`` with format: xc): the real
files in the Extreme Classification Repository format (:mod:`pipeline.data.xc`) when they are
there, else the seeded generator of the same shape (:mod:`pipeline.data.xc_synth`)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

from pipeline.data import xc_synth
from pipeline.data.paths import find
from pipeline.data.xc import XCData, read_xc_cached
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


def _check_declared(path: Path, dcfg, F: int, L: int) -> None:
    for key, want, got in (("features", int(dcfg.get("features", 0) or 0), F),
                           ("labels", int(dcfg.get("labels", 0) or 0), L)):
        if want and want != got:
            raise DataError(f"{path}:1: header declares {got} {key} but dataset.{key}={want}; "
                            f"set dataset.{key}={got} (or 0 to take the header's)")


def load(dcfg, *, data_dir: str, cache_dir: Optional[str], size: str, seed: int,
         notice: Callable[[str], None] = print, progress=None) -> XCData:
    """The dataset of ``dcfg`` (conf/dataset/*.yaml with format: xc).

    kind=real: ``<data_dir or data/>/<path>/{train,test}`` must exist; used whole at every size.
    kind=auto (the big sets): real files when ``dataset.path`` is set (then they must exist) or
    ``<data_dir>/<name>/`` holds them, else the seeded generator; on size=small always the
    generated small_* preset (real Amazon/Wiki files do not train in seconds on a CPU).
    kind=synthetic: always generated. Parsed files and generated sets are cached in ``cache_dir``."""
    kind = str(dcfg.kind)
    explicit = kind == "real" or (kind == "auto" and bool(dcfg.path))
    folder = _real_folder(dcfg, data_dir, explicit) if kind in ("real", "auto") else None
    if folder is not None and (kind == "real" or size != "small"):
        ftr, fte = folder / str(dcfg.train), folder / str(dcfg.test)
        train, F, L = read_xc_cached(ftr, cache_dir)
        test, F2, L2 = read_xc_cached(fte, cache_dir)
        if (F2, L2) != (F, L):
            raise DataError(f"{fte}:1: header declares {F2} features and {L2} labels but {ftr.name} "
                            f"declares {F} and {L}; both files of a dataset must agree")
        _check_declared(ftr, dcfg, F, L)
        if size == "small":
            notice(f"dataset {dcfg.name}: real files from {folder}, used whole on size=small "
                   f"({train.n} train / {test.n} test rows)")
        return XCData(str(dcfg.name), train, test, F, L, f"real: {folder}")
    if folder is not None:
        notice(f"dataset {dcfg.name}: size=small does not read the real files in {folder} (size=full does)")
    elif kind == "auto" and size != "small":
        notice(f"dataset {dcfg.name}: no real files ({dcfg.train}, {dcfg.test} under "
               f"{Path(data_dir) / str(dcfg.name)}); generating its shape (seeded; dataset.path=<folder> "
               f"uses real ones)")
    return xc_synth.load(dcfg, cache_dir=cache_dir, size=size, seed=seed, notice=notice, progress=progress)
