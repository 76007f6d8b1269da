"""The stage runner, the same for every model: prepare -> transfer -> execute -> verify -> report.

It knows nothing of any particular model: the model class is named by ``model.impl``
(``"package.module:Class"``) and follows :class:`pipeline.models.base.Model`.
"""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, open_dict

from pipeline.config import validate
from pipeline.context import make_context
from pipeline.errors import ConfigError, VerificationError
from pipeline import registry
from pipeline.gpu import pool
from pipeline.headline import fastest_lines
from pipeline.models import register_all
from pipeline.results import Report, format_table
from pipeline.tracking import JobRun

STAGES = ("prepare", "transfer", "execute", "verify", "report")


def model_class(impl: str):
    mod_name, _, cls_name = impl.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), cls_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"model.impl={impl!r} cannot be loaded ({e}); expected 'package.module:Class'") from e


def run(cfg: DictConfig, out_dir: Optional[Path] = None, echo: bool = True) -> Report:
    """Run one job; returns its report. Raises a PipelineError on bad config, data, GPU or a
    failed check (after the MLflow run has been marked FAILED)."""
    register_all()          # every model's registry and checks, also in a sweep's worker process
    validate(cfg)
    out_dir = Path(out_dir) if out_dir else Path.cwd()
    cls = model_class(str(cfg.model.impl))
    with pool.claim(cfg) as gpus:      # before CUDA is initialised in this process
        if gpus.active:
            with open_dict(cfg):
                cfg.gpu = 0            # the job's first GPU, as CUDA_VISIBLE_DEVICES now shows it
                cfg.pool.assigned = ",".join(gpus.gpus)
        return _run(cfg, cls, out_dir, echo, gpus)


def device_tags(dev) -> dict:
    """The GPU's name and size, as tags: runs on GPUs of one name but other SM counts or L2 sizes (a
    MIG slice; whether a model's table stays in L2) can be told apart in the MLflow UI. None: no GPU."""
    if dev is None:
        return {"gpu": "none"}
    return {"gpu": dev.name, "gpu_sms": dev.sm_count, "gpu_l2_mib": round(dev.l2_bytes / 2 ** 20, 1)}


def _run(cfg: DictConfig, cls, out_dir: Path, echo: bool, gpus: "pool.Claim") -> Report:
    job = JobRun(cfg)
    with job.active():
        ctx = make_context(cfg, out_dir)
        ctx.epoch_sink = job.log_epoch
        job.set_tags({"backend": ctx.backend, "size": ctx.size, **device_tags(ctx.device), **gpus.tags()})
        if gpus.shared and ctx.cuda:
            ctx.notice(f"pool.share=true: GPU {','.join(gpus.gpus)} may be shared with other jobs of this "
                       "sweep; its times are not those of a GPU of its own")
        model = cls(cfg, ctx)
        stage_s = {}
        report = None
        stage = "init"
        try:
            for stage in STAGES:
                if stage == "transfer" and not ctx.cuda:
                    continue
                t0 = time.perf_counter()
                result = getattr(model, stage)()
                stage_s[stage] = time.perf_counter() - t0
                if stage == "report":
                    report = result
        except KeyboardInterrupt:
            _keep_what_was_measured(job, model, ctx, stage, stage_s, out_dir)
            raise
        assert isinstance(report, Report), f"{cls.__name__}.report() must return a Report"
        report.notes = ctx.notices + report.notes
        if not ctx.cuda:
            report.drop_device_columns()
        if gpus.shared and ctx.cuda:
            for r in report.rows:
                if "median_ms" in r:
                    r["gpu"] = "shared " + ",".join(gpus.gpus)
            if report.columns and "gpu" not in report.columns:
                report.columns.append("gpu")
        _add_run_metrics(report, ctx, stage_s)
        reg = registry.of_model(str(cfg.model.name))
        fastest = fastest_lines(report.rows, reg.paper if reg else None, report.measures)
        if fastest:
            job.set_tags({"fastest": " | ".join(fastest)[:4000]})
        job.log_report(report, out_dir)
        if echo:
            title = report.title or f"{cfg.model.name} on {ctx.device.name if ctx.device else 'CPU (NumPy)'}"
            print(f"\n{title}\n" + format_table(report.rows, report.columns or None), flush=True)
            for line in fastest:
                print(line, flush=True)
            if report.failures:
                print("FAILED checks:\n  " + "\n  ".join(report.failures), file=sys.stderr, flush=True)
        if report.failures:
            raise VerificationError(f"{len(report.failures)} check(s) failed, first: {report.failures[0]}")
    return report


def _add_run_metrics(report: Report, ctx, stage_s) -> None:
    report.metrics.update({f"stage_seconds/{k}": v for k, v in stage_s.items()})
    if ctx.peaks is not None:
        report.metrics.update({"device/copy_gbps": ctx.peaks.copy_gbps,
                               "device/fp32_tflops": ctx.peaks.fp32_tflops,
                               "device/tf32_tflops": ctx.peaks.tf32_tflops})


def _keep_what_was_measured(job: JobRun, model, ctx, stage: str, stage_s, out_dir: Path) -> None:
    """An interrupt (Ctrl-C, SIGTERM) during ``stage``: the epochs already went to MLflow as they
    came (Context.log_epoch); log what else there is (the model's report if it can make one from
    what it finished, else the notices) and tag the run ``interrupted``. The run then ends KILLED."""
    report = None
    if stage in ("execute", "verify", "report"):
        try:
            report = model.report()
        except Exception:        # half-finished state: keep the epochs and the notices only
            report = None
    partial = report if isinstance(report, Report) else Report()
    done = sum(len(v) for v in ctx.epochs.values())
    msg = (f"interrupted in {stage}" + (f" after {max(len(v) for v in ctx.epochs.values())} epoch(s)"
                                        if done else "") + ": what was measured so far is logged")
    partial.notes = ctx.notices + partial.notes + [msg]
    partial.failures = []
    _add_run_metrics(partial, ctx, stage_s)
    print(f"[pipeline] {msg}", file=sys.stderr, flush=True)
    job.log_interrupted(stage, partial, out_dir)
