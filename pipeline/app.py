"""Command line: Hydra composes conf/, the runner does the rest.

Errors a user can fix are printed as one line (``error: ...``) with a non-zero exit: our own
(:class:`pipeline.errors.PipelineError`) and Hydra's composition errors (unknown key, wrong type,
unknown group option), which are condensed to one line, and running out of host memory (a size too large
for this machine). Set ``HYDRA_FULL_ERROR=1`` for tracebacks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import List, NoReturn, Optional

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from pipeline.config import schema_class, unknown_key_message
from pipeline.models import register_all
from pipeline.root import CONF_DIR
from pipeline.errors import PipelineError
from pipeline.isolated_jobs import quiet_schema_warning
from pipeline.tracking import SweepAbort

register_all()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _job(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from pipeline import runner

    try:
        report = runner.run(cfg, Path(HydraConfig.get().runtime.output_dir))
    except PipelineError as e:
        if HydraConfig.get().mode.name == "MULTIRUN" or os.environ.get("PIPELINE_RAISE") == "1":
            raise
        _fail(str(e), e.exit_code)
    return float(report.metrics.get("summary/objective", 0.0))


def _fail(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


_OVERRIDE = re.compile(r"Could not override '([^']+)'")
_NOT_IN = re.compile(r"Key '([^']+)' not in '([^']+)'")


def _unknown_key(text: str) -> Optional[str]:
    """Hydra's error for ``model.foo=1`` (a key the schema lacks) in our words: the key and its
    closest match, without Hydra's hint to add it with ``+`` (which is refused as well)."""
    over, not_in = _OVERRIDE.search(text), _NOT_IN.search(text)
    if not (over and not_in):
        return None
    cls = schema_class(not_in.group(2))
    if cls is None:
        return None
    return unknown_key_message(over.group(1), [f.name for f in dataclasses.fields(cls)])


def one_line(e: BaseException) -> str:
    """Hydra/OmegaConf's multi-line message as one line; option lists without internal entries."""
    chain, x = [], e
    while x is not None and len(chain) < 4:
        chain.append(str(x))
        x = x.__cause__
    unknown = _unknown_key("\n".join(chain))
    if unknown:
        return unknown
    parts, options = [], []
    while e is not None and len(parts) < 4:
        in_options = False
        for line in str(e).strip().splitlines():
            line = line.strip()
            if not line or line.startswith(("object_type", "Set the environment")):
                continue
            if line.startswith("Config search path"):
                break
            if line.startswith("Available options"):
                in_options = True
                parts.append(line.rstrip(":") + ":")
                continue
            if in_options:
                if not line.startswith("schema_") and not line.endswith("_default"):
                    options.append(line)
                continue
            if line not in parts:
                parts.append(line)
        e = e.__cause__
    text = " | ".join(parts)
    return text.replace(" | Available options", "; available options").rstrip(":") + \
        (" " + ", ".join(options) if options else "")


def _terminated(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _resolve_printed_config(argv: List[str]) -> None:
    """``--cfg job`` and ``--help`` print the values in effect (a model's default for a common knob
    is an interpolation, ``${first:${batch_size},1024}``): add Hydra's ``--resolve`` to them."""
    shows = any(a in ("--cfg", "-c", "--help", "-h") or a.startswith("--cfg=") for a in argv[1:])
    if shows and "--resolve" not in argv and "hydra" not in argv and "--cfg=hydra" not in argv:
        argv.insert(1, "--resolve")


def main() -> None:
    # SIGTERM (timeout, a batch system, kill) ends the run like Ctrl-C: MLflow marks it KILLED
    signal.signal(signal.SIGTERM, _terminated)
    _resolve_printed_config(sys.argv)
    quiet_schema_warning()
    full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"   # let exceptions reach us; we print them
    try:
        try:
            _job()
        except BaseException as e:
            # A multirun whose job raised (or Ctrl-C) skips Hydra's on_multirun_end: end the
            # sweep's parent run here, so it is not left RUNNING.
            if not (isinstance(e, SystemExit) and e.code in (None, 0)):
                from pipeline.tracking import end_sweep
                with contextlib.suppress(Exception):
                    end_sweep("KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
            raise
    except SweepAbort as e:
        _fail(str(e.error), e.error.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as e:
        if full:
            raise
        if isinstance(e, PipelineError):
            _fail(str(e), e.exit_code)
        if isinstance(e, (HydraException, OmegaConfBaseException)):
            _fail(one_line(e), 2)
        if isinstance(e, MemoryError):
            _fail(f"out of host memory ({str(e).strip() or type(e).__name__}): the sizes asked for do not fit; "
                  "lower them (batch_size, the model.* and dataset.* sizes) or use size=small", 2)
        if type(e).__name__ in LAUNCHER_JOB_DIED:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            _fail(f"a job of the sweep died ({type(e).__name__}: {first}); its run is marked FAILED, the runs of "
                  "the jobs that finished are in MLflow", 1)
        traceback.print_exc()
        sys.exit(1)


# what the parallel launchers raise when a job's process died (SIGKILL, out of memory, a lost node)
LAUNCHER_JOB_DIED = ("TerminatedWorkerError", "UncompletedJobError", "FailedJobError", "JobDiedError")
