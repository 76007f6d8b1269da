"""Hydra's plugin entry for the project's joblib launcher (Hydra finds launchers only in the
``hydra_plugins`` namespace); the work is done in :mod:`pipeline.isolated_jobs`. Without the
``sweep`` extra (no hydra-joblib-launcher) this module defines nothing."""
from typing import Any, Sequence

try:
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
except ImportError:      # the sweep extra is not installed
    JoblibLauncher = None

if JoblibLauncher is not None:
    class IsolatedJoblibLauncher(JoblibLauncher):
        """joblib's launcher, each job in a child process of its worker: a job that dies fails alone."""

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
            from pipeline.isolated_jobs import launch
            return launch(self, job_overrides, initial_job_idx)
