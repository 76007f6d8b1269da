"""The contract between the runner and a model.

The runner calls, in order: ``prepare`` (load or generate data on the host, cached), ``transfer``
(move it to the device; skipped on the CPU backend), ``execute`` (run the chosen variant and its
baselines, timed), ``verify`` (compare with the independent reference) and ``report`` (the table,
metrics, series and figures). A model never opens an MLflow run and never parses the command line;
it reads ``self.cfg`` and talks to the world through ``self.ctx`` (:class:`pipeline.context.Context`).

Variant names a model accepts are listed in ``GPU_VARIANTS`` / ``CPU_VARIANTS``; on the CPU
backend the model maps the requested variant to the reference and says so.
"""
from __future__ import annotations

from typing import ClassVar, List

from omegaconf import DictConfig

from pipeline.context import Context
from pipeline.results import Report


class Model:
    GPU_VARIANTS: ClassVar[List[str]] = []
    CPU_VARIANTS: ClassVar[List[str]] = []

    def __init__(self, cfg: DictConfig, ctx: Context):
        self.cfg = cfg
        self.ctx = ctx

    def prepare(self) -> None:
        """Load or generate the inputs (host side)."""

    def transfer(self) -> None:
        """Copy the inputs to the device (GPU backend only)."""

    def execute(self) -> None:
        """Run and time the variants."""
        raise NotImplementedError

    def verify(self) -> None:
        """Check results against the reference; record failures for report()."""

    def report(self) -> Report:
        raise NotImplementedError
