"""submitit's launchers (local processes, SLURM) where every job ends before the sweep reads a result.

Hydra's submitit launcher reads the jobs' results in order and raises at the first job that did
not return: a job that died early (SIGKILL, the out-of-memory killer, a lost node) ends the sweep
while later jobs still run, and the sweep's end marks their runs FAILED although they go on to
finish. These launchers wait until every job has ended (finished, failed or died), then read the
results as Hydra does: the jobs that finished are FINISHED, the dead one FAILED, and the sweep
reports it in one line (:mod:`pipeline.app`). Without the ``sweep`` extra this module defines
nothing.
"""
from typing import Any, Sequence
from unittest import mock

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
except ImportError:      # the sweep extra is not installed
    LocalLauncher = SlurmLauncher = None


def _launch_and_wait(launch, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
    import submitit

    class EveryJobEndsFirst(submitit.AutoExecutor):
        def map_array(self, fn, *iterables):
            jobs = super().map_array(fn, *iterables)
            for job in jobs:
                job.wait()
            return jobs

    with mock.patch.object(submitit, "AutoExecutor", EveryJobEndsFirst):
        return launch(job_overrides, initial_job_idx)


if LocalLauncher is not None:
    class WaitingLocalLauncher(LocalLauncher):
        """``hydra/launcher=submitit_local``: each job its own local process; all end before results are read."""

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
            return _launch_and_wait(super().launch, job_overrides, initial_job_idx)

    class WaitingSlurmLauncher(SlurmLauncher):
        """``hydra/launcher=submitit_slurm`` (and ``slurm``): all jobs end before results are read."""

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
            return _launch_and_wait(super().launch, job_overrides, initial_job_idx)
