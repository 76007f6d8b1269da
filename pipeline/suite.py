"""The GPU suite's run lists: ``conf/suite/<name>.yaml``, one file a model package, each with a
``bench:`` list (benchmark runs) and a ``sanitize:`` list (tiny runs of every kernel for
compute-sanitizer). An entry is one ``python -m pipeline`` run: its overrides as typed on the
command line. ``scripts/gpu_suite.py`` runs them; a CPU test composes every one.

A file may also have a ``headline:`` list: the measures the model is summed up by in the README's
results table (``scripts/gpu_suite.py render``), each a mapping (:class:`Headline`) whose ``run``
is a ``bench:`` entry of the file by its number (1 = the first, as ``gpu_suite.py list`` numbers
them) or, for a run not in the list, that run's own overrides."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from pipeline.errors import ConfigError
from pipeline.root import CONF_DIR

SUITE_DIR = CONF_DIR / "suite"
PARTS = ("bench", "sanitize")
KEYS = PARTS + ("headline",)


@dataclass
class Headline:
    """The measure a model is summed up by: which benchmark run (its overrides; ``progress=``,
    ``backend=``, ``cache_dir=`` and budgets are ignored when records are matched), which ``case``
    of it, which ``column`` (in ``unit``), and whether more is better. Rows of kind ``ours`` compete
    with rows of kind ``baseline``; with ``baseline_when`` (column: value) the rows matching it are
    the baselines and every other row is ours. A row is named by its ``name_column``. ``also``:
    other runs measuring the same (e.g. with fewer baselines). Also the schema of a ``headline:`` entry."""
    model: str = MISSING
    measure: str = MISSING
    run: Any = MISSING                 # a bench entry's number or a run's overrides; loaded: List[str]
    column: str = MISSING
    unit: str = ""
    case: Optional[str] = None
    higher_is_better: bool = False
    name_column: str = "variant"
    baseline_when: Dict[str, str] = field(default_factory=dict)
    also: List[Any] = field(default_factory=list)            # as ``run``
    suite: str = ""                    # the file's name (set by load)

    def side(self, row: Dict[str, Any]) -> Optional[str]:
        """'ours' or 'baseline' for a row that competes, None for one that does not (a floor)."""
        if self.baseline_when:
            base = all(str(row.get(k)) == v for k, v in self.baseline_when.items())
            return "baseline" if base else "ours"
        kind = row.get("kind")
        return kind if kind in ("ours", "baseline") else None


@dataclass
class Suite:
    name: str
    path: Path
    bench: List[List[str]] = field(default_factory=list)
    sanitize: List[List[str]] = field(default_factory=list)
    headline: List[Headline] = field(default_factory=list)


def _overrides(path: Path, where: str, run: Any) -> List[str]:
    if not isinstance(run, str) or not run.strip():
        raise ConfigError(f"{path}: {where} must be one run's overrides on one line "
                          f"(e.g. 'model=bcm block_size=16'), not {run!r}")
    return shlex.split(run)


def _headline_run(path: Path, where: str, run: Any, bench: Sequence[List[str]]) -> List[str]:
    """A headline's run: the bench entry numbered ``run`` (from 1), or a run's own overrides."""
    if isinstance(run, bool) or not isinstance(run, int):
        return _overrides(path, where, run)
    if not 1 <= run <= len(bench):
        raise ConfigError(f"{path}: {where} = {run}: the file's bench list has entries 1 to {len(bench)}")
    return list(bench[run - 1])


def _headline(path: Path, i: int, raw: Any, bench: Sequence[List[str]]) -> Headline:
    """A ``headline:`` entry merged into the :class:`Headline` schema, which checks its keys and types."""
    where = f"headline[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {where} must be a mapping with model, measure, run and column, not {raw!r}")
    keys = [f.name for f in fields(Headline) if f.name != "suite"]
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Headline), raw)
    except ConfigKeyError as e:
        raise ConfigError(f"{path}: {where}: unknown key {e.key!r}; one of {', '.join(keys)}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path}: {where}.{e.full_key} = {e.value!r}: {str(e.msg).splitlines()[0]}") from None
    missing = OmegaConf.missing_keys(merged)
    if missing:
        raise ConfigError(f"{path}: {where} lacks {', '.join(k for k in keys if k in missing)}")
    h = OmegaConf.to_object(merged)
    h.suite = path.stem
    h.run = _headline_run(path, f"{where}.run", h.run, bench)
    h.also = [_headline_run(path, f"{where}.also[{j}]", a, bench) for j, a in enumerate(h.also)]
    return h


def load(path: Path) -> Suite:
    """One suite file; a one-line ConfigError for a key other than bench/sanitize/headline, an entry
    that is not a string of overrides or a headline that is not well formed."""
    path = Path(path)
    raw = OmegaConf.to_container(OmegaConf.load(path)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected the keys {' and '.join(PARTS)}, each a list of runs")
    suite = Suite(path.stem, path)
    for key, runs in raw.items():
        if key not in KEYS:
            raise ConfigError(f"{path}: unknown key {key!r}; a suite file has {', '.join(KEYS)}")
        if key in PARTS:
            getattr(suite, key).extend(_overrides(path, f"{key}[{i}]", run) for i, run in enumerate(runs or []))
    suite.headline = [_headline(path, i, h, suite.bench) for i, h in enumerate(raw.get("headline") or [])]
    return suite


def names() -> List[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def load_all(only: Sequence[str] = ()) -> Dict[str, Suite]:
    """The suites of ``conf/suite/`` (those named in ``only``, when given; an unknown name is a
    ConfigError listing the known ones)."""
    known = names()
    bad = [n for n in only if n not in known]
    if bad:
        raise ConfigError(f"no suite {', '.join(bad)} in {SUITE_DIR}: one of {', '.join(known)}")
    return {n: load(SUITE_DIR / f"{n}.yaml") for n in known if not only or n in only}


def headlines() -> List[Headline]:
    """The headline measures of every suite of ``conf/suite/``, file by file (by name)."""
    return [h for s in load_all().values() for h in s.headline]
