"""Parallel sweep jobs that survive the death of one of them (``hydra/launcher=joblib``).

joblib's process pool (loky) treats a worker that dies (SIGKILL, the out-of-memory killer, a CUDA
driver abort) as a broken pool: it stops every other worker and the whole sweep ends with
``TerminatedWorkerError``. Here joblib still schedules the jobs, ``n_jobs`` at a time, but each
worker runs its job in a child process of its own (``fork``, so nothing is imported twice) and
waits for it. A job that dies takes only its child with it: the worker returns a failed job
result, the other jobs run to the end, and the sweep then reports the dead job in one line and
marks its run FAILED (:func:`pipeline.tracking.end_sweep`). A job's GPU lock is held by its child
and released by the kernel when the child ends, however it ends; every job starts with CUDA not yet
initialised, so the GPU pool can give it any free GPU. A child also dies when its worker does
(Linux's parent-death signal), so a stopped sweep leaves no job running behind it.
"""
from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import signal
import threading
from pathlib import Path
from typing import Any, Dict, List, Sequence

log = logging.getLogger(__name__)


def quiet_schema_warning() -> None:
    """conf/hydra/launcher/joblib.yaml, submitit_local.yaml and submitit_slurm.yaml replace the
    plugins' configs of the same names; Hydra 1.3 still checks each against the plugin's schema
    (which is what we want) and warns, in every process that composes a job's config, that this
    matching is deprecated."""
    import warnings
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/(joblib|submitit_local|submitit_slurm)' "
                            r"is validated against ConfigStore schema")


class JobDiedError(RuntimeError):
    """A sweep job's process ended without a result (killed by a signal or exited abruptly)."""


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child(conn, args) -> None:
    _die_with_parent()
    quiet_schema_warning()
    from hydra_plugins.hydra_joblib_launcher._core import execute_job
    try:
        ret = execute_job(*args)
    except BaseException as e:            # run_job itself failed (it records a task's own errors)
        ret = e
    import cloudpickle   # as joblib itself sends results (configs built from classes)
    try:
        data = cloudpickle.dumps(ret)
    except Exception as e:                # a result that does not pickle: say what it was
        data = cloudpickle.dumps(JobDiedError(f"the job's result could not be sent back: {type(e).__name__}: {e}"))
    try:
        conn.send_bytes(data)
    finally:
        conn.close()


def run_in_child(idx: int, overrides: Sequence[str], hydra_context, config, task_function,
                 singleton_state: Dict[Any, Any]):
    """Run one job (Hydra's ``run_job`` through the joblib launcher's ``execute_job``) in a child of
    this worker and return its ``JobReturn``, or a failed one when the child died."""
    from hydra.core.utils import JobReturn, JobStatus

    method = "fork" if threading.active_count() == 1 else "forkserver"
    ctx = mp.get_context(method)
    recv, send = ctx.Pipe(duplex=False)
    args = (idx, overrides, hydra_context, config, task_function, singleton_state)
    proc = ctx.Process(target=_child, args=(send, args), daemon=False)
    proc.start()
    send.close()
    import pickle
    try:
        ret = pickle.loads(recv.recv_bytes())
    except EOFError:
        ret = None
    proc.join()
    if isinstance(ret, JobReturn):
        return ret
    if isinstance(ret, BaseException):
        error = ret
    else:
        code = proc.exitcode
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}")
        error = JobDiedError(f"job #{idx} ({' '.join(overrides)}) {how} before it returned")
    return JobReturn(overrides=list(overrides), cfg=None, hydra_cfg=None, working_dir=None,
                     task_name=None, status=JobStatus.FAILED, _return_value=error)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[Any]:
    """The joblib launcher's ``launch``, with :func:`run_in_child` as the unit of work."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides, setup_globals
    from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg
    from joblib import Parallel, delayed

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    options = dict(launcher.joblib)
    options["backend"] = "loky"            # threads cannot run Hydra jobs side by side
    process_joblib_cfg(options)
    log.info("joblib (%s) launching %d jobs, each in its own process",
             ",".join(f"{k}={v}" for k, v in options.items()), len(job_overrides))
    for i, ov in enumerate(job_overrides):
        log.info("\t#%d : %s", initial_job_idx + i, " ".join(filter_overrides(ov)))
    state = Singleton.get_state()
    return list(Parallel(**options)(
        delayed(run_in_child)(initial_job_idx + i, ov, launcher.hydra_context, launcher.config,
                              launcher.task_function, state)
        for i, ov in enumerate(job_overrides)))
