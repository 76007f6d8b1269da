"""The child processes of ``gpu_suite.py run`` (pytest, ``python -m pipeline``, compute-sanitizer):
each with a timeout, and stoppable. SIGTERM or SIGINT to the suite (a `timeout` around the command,
say) gives the running child SIGINT and ``GRACE_S`` seconds to end cleanly (pytest still writes its
report; a run is marked killed); the suite then runs no further child (``STOP['why']`` says why)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from suite_records import ROOT

GRACE_S = 20      # seconds a child gets after SIGINT to end cleanly (pytest writes its report, a run is marked)
STOP = {"why": "", "in_child": False}


class Interrupted(Exception):
    """SIGTERM or SIGINT while a child runs (e.g. the `timeout` a device command is wrapped in)."""


def log(msg: str) -> None:
    print(f"[gpu_suite {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def on_signal(signum, frame):
    """Stop after the current child: record what was measured so far instead of losing the part."""
    STOP["why"] = f"stopped by signal {signum}"
    if STOP["in_child"]:
        raise Interrupted(STOP["why"])


def run_child(cmd: List[str], timeout: int, tree: Optional[Path] = None,
              env: Optional[Dict[str, str]] = None) -> Tuple[int, str]:
    """(exit code, stdout + stderr) of ``cmd`` run from the project root (or from ``tree``, another
    checkout, with its own ``pipeline`` package first on the import path); 124 on timeout, 130 when
    the suite is stopped meanwhile. Either way the child first gets SIGINT and ``GRACE_S`` seconds
    to end cleanly (pytest then still writes its JUnit report), then SIGKILL. ``env``: variables added
    to this process's environment for the child."""
    env = dict(os.environ, **(env or {}))
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(tree)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ROOT])
    if STOP["why"]:
        return 130, STOP["why"]
    p = subprocess.Popen(cmd, cwd=tree or ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    STOP["in_child"] = True
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except (subprocess.TimeoutExpired, Interrupted) as e:
        STOP["in_child"] = False
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        if isinstance(e, Interrupted):
            return 130, f"{e}\n" + (out or "")
        return 124, f"timed out after {timeout} s\n" + (out or "")[-2000:]
    finally:
        STOP["in_child"] = False
