"""The contract between the runner and a model, and the two shapes every model takes.

The runner calls, in order: ``prepare`` (load or generate data on the host, cached), ``transfer``
(move it to the device; skipped on the CPU backend), ``execute`` (run the chosen variants and their
baselines, timed), ``verify`` (compare with the independent reference) and ``report`` (the table,
metrics, series and figures). A model never opens an MLflow run and never parses the command line;
it reads ``self.cfg`` and talks to the world through ``self.ctx`` (:class:`pipeline.context.Context`).

Two shapes own everything but a model's hooks, :class:`BenchmarkModel` (kernels timed on cases)
and :class:`TrainingModel` (variants trained for epochs); both choose what runs through
:func:`pipeline.registry.select_variants`, the one selection every model uses.
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, List

from omegaconf import DictConfig

from pipeline.bench import BENCH_COLUMNS, Case, Variant, best_metrics, failures, launch_floor, measure
from pipeline.context import Context
from pipeline.errors import ConfigError
from pipeline.registry import Registry, of_model, select_variants
from pipeline.results import Report


class Model:
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


class SelectsVariants(Model):
    """A model whose variants come from its registry (``pipeline/models/<m>/variants.py``, found by
    ``model.name``): :meth:`select` fills ``self.ours`` and ``self.baselines`` for this backend and
    says what changed."""

    @property
    def registry(self) -> Registry:
        reg = of_model(str(self.cfg.model.name))
        if reg is None:       # the runner registers every model first (pipeline.models.register_all)
            raise ConfigError(f"model={self.cfg.model.name} has no variant registry: run it through "
                              f"pipeline.runner.run, which registers every model")
        return reg

    def select(self) -> None:
        sel = select_variants(self.cfg, self.ctx.backend, self.registry)
        for note in sel.notes:
            self.ctx.notice(note)
        self.ours, self.baselines = sel.ours, sel.baselines


class BenchmarkModel(SelectsVariants):
    """Kernels timed side by side on the same cases, each checked against a float64 reference
    first. Hooks: ``CASE_COLUMNS`` (the parameters that describe a case, shown after
    ``case``), :meth:`variants_table` (name -> :class:`Variant` for this backend), :meth:`cases`;
    optionally ``FLOOR`` (time an empty kernel beside them on the GPU), :meth:`add_columns` (more
    columns a row), :meth:`figures` and ``CPU_NOTE``."""
    CASE_COLUMNS: ClassVar[List[str]] = []
    FLOOR: ClassVar[bool] = False
    CPU_NOTE: ClassVar[str] = "CPU backend: the NumPy references on the small preset; GPU kernels not run"

    def variants_table(self) -> Dict[str, Variant]:
        raise NotImplementedError

    def cases(self) -> List[Case]:
        raise NotImplementedError

    def add_columns(self, rows: List[Dict[str, Any]]) -> List[str]:
        """Add columns to the measured rows; returns their names (shown last)."""
        return []

    def figures(self, rows: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {}

    def prepare(self) -> None:
        self.select()
        table = self.variants_table()
        self.variants = [table[n] for n in self.ours + self.baselines]
        if self.FLOOR and self.ctx.cuda:          # an empty kernel timed the same way: how low it can go
            self.variants.append(launch_floor())
        self.case_list = self.cases()

    def execute(self) -> None:
        self.rows = measure(self.case_list, self.variants, self.ctx, float(self.cfg.model.tolerance),
                            speedup_over=self.baselines)
        self.extra_columns = self.add_columns(self.rows)

    def verify(self) -> None:
        self.failures = failures(self.rows)

    def report(self) -> Report:
        cols = BENCH_COLUMNS[:1] + list(self.CASE_COLUMNS) + BENCH_COLUMNS[1:] + \
            [f"x_vs_{b}" for b in self.baselines] + self.extra_columns
        rep = Report(rows=self.rows, columns=cols, failures=self.failures)
        rep.metrics.update(best_metrics(self.rows, self.baselines))
        rep.figures.update(self.figures(self.rows))
        if not self.ctx.cuda:
            rep.notes.append(self.CPU_NOTE)
        return rep


class TrainingModel(SelectsVariants):
    """Variants trained for epochs on the same data (:func:`pipeline.train.fit`), evaluated after
    every epoch. Hooks: the model's own prepare / execute / report, which builds one
    row a variant; :meth:`summarize` logs the rows' end-of-training numbers under the names every
    training model uses (``summary/<variant>/<column>``: ``epoch_ms``, ``train_s``, ``x_vs_<b>``, ...)."""

    @staticmethod
    def summarize(rep: Report, rows: List[Dict[str, Any]], keys: List[str], by: str = "variant",
                  prefixes: tuple = ("x_vs_",)) -> None:
        for r in rows:
            for k, v in r.items():
                if (k in keys or k.startswith(prefixes)) and isinstance(v, (int, float)) \
                        and not isinstance(v, bool) and v == v:
                    rep.metrics[f"summary/{r[by]}/{k}"] = float(v)
