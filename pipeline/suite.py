"""The GPU suite's run lists: ``conf/suite/<name>.yaml``, one file a model package, each with a
``bench:`` list (benchmark runs) and a ``sanitize:`` list (tiny runs of every kernel for
compute-sanitizer). An entry is one ``python -m pipeline`` run: its overrides as typed on the
command line. ``scripts/gpu_suite.py`` runs them; a CPU test composes every one."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence

from pipeline.errors import ConfigError
from pipeline.root import CONF_DIR

SUITE_DIR = CONF_DIR / "suite"
PARTS = ("bench", "sanitize")


@dataclass
class Suite:
    name: str
    path: Path
    bench: List[List[str]] = field(default_factory=list)
    sanitize: List[List[str]] = field(default_factory=list)


def load(path: Path) -> Suite:
    """One suite file; a one-line ConfigError for a key other than bench/sanitize or an entry that
    is not a string of overrides."""
    from omegaconf import OmegaConf
    path = Path(path)
    raw = OmegaConf.to_container(OmegaConf.load(path)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected the keys {' and '.join(PARTS)}, each a list of runs")
    suite = Suite(path.stem, path)
    for key, runs in raw.items():
        if key not in PARTS:
            raise ConfigError(f"{path}: unknown key {key!r}; a suite file has {' and '.join(PARTS)}")
        for i, run in enumerate(runs or []):
            if not isinstance(run, str) or not run.strip():
                raise ConfigError(f"{path}: {key}[{i}] must be one run's overrides on one line "
                                  f"(e.g. 'model=bcm block_size=16'), not {run!r}")
            getattr(suite, key).append(shlex.split(run))
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
