"""A pool of GPUs for sweep jobs that run in parallel on one machine (``hydra/launcher=joblib``).

Each job holds its own GPU(s) for as long as it runs, through one lock file per GPU under
``pool.dir``. The locks are OS file locks (``filelock``): the kernel releases them when the process
that holds them ends, however it ends, so a crashed or killed job never leaks its GPU.

The GPU is chosen *before* CUDA is initialised in the job's process: the pool sets
``CUDA_VISIBLE_DEVICES`` to the claimed GPU(s), and the job then uses device 0 of what it sees.
The project's joblib launcher runs every job in a fresh child process (:mod:`pipeline.isolated_jobs`),
so each job may take any free GPU. A launcher that reuses a process for several jobs is handled too:
CUDA reads ``CUDA_VISIBLE_DEVICES`` once, so a reused process stays bound to the GPU(s) of its first job and
claims exactly those again (waiting for them if another job holds them).

``pool.share=true`` lets jobs share GPUs (round robin over the job number, no exclusive lock); the
report then says so next to every time. Jobs on the CPU backend need no pool.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from pipeline.errors import ConfigError, GpuError

_bound: Optional[List[str]] = None   # the GPUs (as CUDA_VISIBLE_DEVICES entries) this process uses


@dataclass
class Claim:
    gpus: List[str] = field(default_factory=list)   # physical ids (entries of CUDA_VISIBLE_DEVICES)
    shared: bool = False
    active: bool = False                            # False: no pool (CPU backend, basic launcher)

    def tags(self) -> dict:
        if not self.active:
            return {}
        return {"pool.gpus": ",".join(self.gpus), "pool.shared": str(self.shared).lower()}


def visible_gpus() -> List[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries, found without initialising
    CUDA here (nvidia-smi), restricted by an inherited CUDA_VISIBLE_DEVICES."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip() != "":
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip().isdigit()]


def wanted(cfg) -> bool:
    """The pool applies to GPU jobs of a parallel launcher (joblib, submitit's local executor) or
    when ``pool.enabled=true``; never to the CPU backend."""
    backend = cfg.backend.value if hasattr(cfg.backend, "value") else str(cfg.backend)
    if backend == "cpu":
        return False
    mode = str(cfg.pool.enabled).lower()
    if mode in ("true", "false"):
        return mode == "true"
    try:   # auto: a parallel launcher
        from hydra.core.hydra_config import HydraConfig
        target = str(HydraConfig.get().launcher.get("_target_", ""))
    except Exception:
        return False
    return "joblib" in target or "LocalLauncher" in target


def _job_number() -> int:
    try:
        from hydra.core.hydra_config import HydraConfig
        return int(HydraConfig.get().job.get("num", 0) or 0)
    except Exception:
        return 0


@contextlib.contextmanager
def claim(cfg, poll_s: float = 0.5) -> Iterator[Claim]:
    """Hold ``launcher.gpus_per_job`` GPUs of the pool for the duration of the block and point this
    process's CUDA at them (device 0 .. n-1 of the job). A no-op Claim when the pool does not apply."""
    if not wanted(cfg):
        yield Claim()
        return
    from filelock import FileLock, Timeout

    per_job = int(cfg.launcher.gpus_per_job)
    pool = [str(g) for g in cfg.pool.gpus] if cfg.pool.gpus else visible_gpus()
    if per_job < 1:
        raise ConfigError(f"launcher.gpus_per_job={per_job} is not allowed: a positive integer")
    if not pool:
        backend = cfg.backend.value if hasattr(cfg.backend, "value") else str(cfg.backend)
        if backend == "auto":   # no GPU here: the job runs the CPU backend, no pool needed
            yield Claim()
            return
        raise GpuError("the GPU pool is empty: no GPU is visible (nvidia-smi) and pool.gpus is not set")
    if per_job > len(pool):
        raise ConfigError(f"launcher.gpus_per_job={per_job} is not allowed: the pool has {len(pool)} GPU(s) "
                          f"({','.join(pool)}); lower it or list more in pool.gpus")
    if cfg.pool.share:
        start = (_job_number() * per_job) % len(pool)
        gpus = _bound or [pool[(start + i) % len(pool)] for i in range(per_job)]
        _bind(gpus)
        yield Claim(gpus=gpus, shared=True, active=True)
        return

    lock_dir = Path(str(cfg.pool.dir)).expanduser().resolve()
    lock_dir.mkdir(parents=True, exist_ok=True)
    candidates = list(_bound) if _bound else pool
    need = len(_bound) if _bound else per_job
    said = False
    deadline = time.monotonic() + float(cfg.pool.wait_s) if float(cfg.pool.wait_s) > 0 else None
    while True:
        held: Dict[str, FileLock] = {}          # GPU -> its lock, held
        for g in candidates:
            lock = FileLock(str(lock_dir / f"gpu-{g}.lock"), thread_local=False)
            with contextlib.suppress(Timeout):
                lock.acquire(timeout=0)
                held[g] = lock
            if len(held) == need:
                break
        if len(held) == need:
            break
        for lock in held.values():
            lock.release()
        if deadline is not None and time.monotonic() > deadline:
            raise GpuError(f"no free GPU in the pool ({','.join(candidates)}) after pool.wait_s={cfg.pool.wait_s}; "
                           "lower hydra.launcher.n_jobs or set pool.share=true")
        if not said:
            print(f"[pipeline] waiting for a free GPU of the pool ({','.join(candidates)})", file=sys.stderr, flush=True)
            said = True
        time.sleep(poll_s)
    try:
        _bind(list(held))
        yield Claim(gpus=list(held), shared=False, active=True)
    finally:
        for lock in held.values():
            lock.release()


def _bind(gpus: List[str]) -> None:
    """Point this process's CUDA at ``gpus`` (before CUDA is initialised here)."""
    global _bound
    if _bound is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        _bound = list(gpus)
    elif list(gpus) != _bound:
        raise GpuError(f"this worker process already uses GPU(s) {','.join(_bound)}; cannot switch to "
                       f"{','.join(gpus)} (CUDA reads CUDA_VISIBLE_DEVICES once)")
