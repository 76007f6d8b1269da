"""MLflow: the embedded store, one run per job, a parent run per Hydra sweep.

* Store: SQLite at ``<tracking.dir>/mlflow.db`` (absolute), artifacts in ``<tracking.dir>/mlartifacts``.
  ``mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db`` from the project root opens it.
* One experiment per model (``tracking.experiment`` overrides), one run per job: params = the
  flattened config, metrics = the report's medians, spreads, ratios, errors and per-epoch series,
  artifacts = resolved config, Hydra's files, results table (CSV + Markdown) and plots.
* A run that raises ends FAILED, an interrupted one KILLED; never left RUNNING.
* Multirun: :class:`SweepCallback` creates the store, the experiment and a parent run in the
  launching process *before* any job starts (concurrent first-time creation of a SQLite store
  fails), exports the parent's id to the jobs, and prints a summary table of the sweep at the end.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError, PipelineError
from pipeline.results import Report, case_columns, finite_number, format_table, to_csv, variant_metrics

PARENT_ENV = "PIPELINE_MLFLOW_PARENT_RUN"
EXPERIMENT_ENV = "PIPELINE_MLFLOW_EXPERIMENT"

_sweep: Optional["SweepCallback"] = None   # the sweep whose parent run is open in this process


def store_dir(tcfg) -> Path:
    return Path(str(tcfg.dir)).expanduser().resolve()


LOCK_TIMEOUT_S = 300.0


def setup(tcfg) -> str:
    """Check the server, or create the SQLite store (once: :func:`ready_store`); point MLflow at it
    and return its URI."""
    import mlflow
    uri = server_uri(tcfg)
    if uri:
        check_server(uri)
    else:
        d = store_dir(tcfg)
        try:
            (d / "mlartifacts").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"tracking.dir={tcfg.dir} is not allowed: cannot create {d} ({e.strerror or e}); set "
                              "it to a writable folder, or tracking=off") from None
        uri = ready_store(d)
    mlflow.set_tracking_uri(uri)
    return uri


def ready_store(d: Path) -> str:
    """The URI of the SQLite store in folder ``d``, created and migrated under the store's file lock.
    Anything that opens a store another process may be creating (two terminals, a sweep's jobs, a
    reader polling a running sweep) goes through here: MLflow migrates a store it opens, and two
    migrations at once fail ("table _alembic_tmp_... already exists") and can leave it half-migrated."""
    from filelock import FileLock, Timeout
    from mlflow.tracking import MlflowClient
    uri = f"sqlite:///{Path(d) / 'mlflow.db'}"
    lock = FileLock(str(Path(d) / "mlflow.db.lock"))
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT_S):
            MlflowClient(uri).search_experiments(max_results=1)   # creates and migrates the store
    except Timeout:
        raise PipelineError(f"tracking store {Path(d) / 'mlflow.db'} is locked by another process for more than "
                            f"{LOCK_TIMEOUT_S:.0f} s (lock file {lock.lock_file}); wait, or remove the lock "
                            "file if no run is active") from None
    return uri


def server_uri(tcfg) -> str:
    """The tracking server's URI (tracking=server), or "" for the embedded SQLite store."""
    return str(tcfg.get("uri", "") or "").rstrip("/")


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast, in one line naming the URI, when the tracking server does not answer."""
    import json
    import urllib.error
    import urllib.request
    if not uri.startswith(("http://", "https://")):
        raise PipelineError(f"tracking.uri={uri!r} is not allowed: an http(s) URL of an MLflow tracking server, "
                            "e.g. http://127.0.0.1:5000 (start one with scripts/mlflow_server.sh)")
    req = urllib.request.Request(f"{uri}/api/2.0/mlflow/experiments/search",
                                 data=json.dumps({"max_results": 1}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read()
    except (urllib.error.URLError, OSError) as e:
        raise PipelineError(f"tracking server {uri} does not answer ({getattr(e, 'reason', e)}); start it "
                            "(scripts/mlflow_server.sh) or fix tracking.uri") from None


def experiment_id(name: str, tcfg) -> str:
    """Get or create an experiment by name (safe when several processes race)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
    client = MlflowClient()
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:      # a server stores (and serves) the artifacts
        where = None if server_uri(tcfg) else (store_dir(tcfg) / "mlartifacts" / name).as_uri()
        return client.create_experiment(name, artifact_location=where)
    except MlflowException:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def experiment_name(cfg) -> str:
    return os.environ.get(EXPERIMENT_ENV) or str(cfg.tracking.experiment or cfg.model.name)


def flatten(d: Any, prefix: str = "") -> Dict[str, Any]:
    """A nested mapping as ``{"a.b.c": value}``."""
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    return {key: v2 for k, v in d.items() for key, v2 in flatten(v, f"{prefix}{k}.").items()}


_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")


def metric_key(*parts: Any) -> str:
    return "/".join(_BAD.sub("_", str(p)) for p in parts if p not in (None, ""))


def _run_name(cfg) -> str:
    if cfg.tracking.run_name:
        return str(cfg.tracking.run_name)
    from pipeline.config import task_overrides
    task = task_overrides()
    if task is None:
        return str(cfg.model.name)
    ov = [o for o in task if not o.startswith(("tracking.", "hydra."))]
    return " ".join(ov) if ov else f"{cfg.model.name} (defaults)"


ROW_COLUMNS = ("median_ms", "iqr_ms", "rel_err", "gbps", "gflops", "pct_peak")


def report_metrics(report: Report) -> Dict[str, float]:
    """What a report logs as MLflow metrics: its own metrics, and its rows' measurements.

    A one-case report (each variant in one row) logs ``<variant>/<column>`` for every numeric
    column, the same names in every run of a sweep whatever knob it turns (the case goes to params,
    :func:`case_params`); a multi-case report logs ``<case>/<variant>/<column>`` for the timing
    columns and the ratios."""
    metrics = {metric_key(k): float(v) for k, v in report.metrics.items() if finite_number(v) is not None}
    uniform = variant_metrics(report.rows)
    if uniform is not None:
        metrics.update({metric_key(k): v for k, v in uniform["metrics"].items()})
        return metrics
    for r in report.rows:
        case = r.get("case") or " ".join(f"{c}={r.get(c)}" for c in case_columns(r))
        name = metric_key(case, r.get("variant"))
        for col, v in r.items():
            if (col in ROW_COLUMNS or col.startswith("x_vs_")) and finite_number(v) is not None:
                metrics[f"{name}/{col}"] = float(v)
    return metrics


def case_params(report: Report) -> Dict[str, str]:
    """The case of a one-case report as params (``case`` = its name, ``case.<column>``: layer, k,
    N, L, ...), so that a sweep's runs can be charted against any of them."""
    uniform = variant_metrics(report.rows)
    if uniform is None:
        return {}
    return {("case" if c == "case" else f"case.{c}"): str(v)[:500] for c, v in uniform["case"].items()}


class JobRun:
    """The MLflow side of one job (a no-op when tracking is disabled)."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.enabled = bool(cfg.tracking.enabled)
        self.run_id: Optional[str] = None
        self.logged_series: set = set()

    @contextlib.contextmanager
    def active(self) -> Iterator["JobRun"]:
        if not self.enabled:
            yield self
            return
        import mlflow
        setup(self.cfg.tracking)
        exp = experiment_id(experiment_name(self.cfg), self.cfg.tracking)
        parent = os.environ.get(PARENT_ENV)
        tags = {"model": str(self.cfg.model.name)}
        if parent:
            tags["mlflow.parentRunId"] = parent
        run = mlflow.start_run(experiment_id=exp, run_name=_run_name(self.cfg), tags=tags)
        self.run_id = run.info.run_id
        try:
            flat = flatten(OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True))
            mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})     # MLflow sends them in batches
            yield self
        except KeyboardInterrupt:
            mlflow.end_run(status="KILLED")
            raise
        except BaseException as e:
            with contextlib.suppress(Exception):
                mlflow.set_tag("error", f"{type(e).__name__}: {e}"[:4000])
            mlflow.end_run(status="FAILED")
            raise
        else:
            mlflow.end_run(status="FINISHED")

    def set_tags(self, tags: Dict[str, Any]) -> None:
        if self.enabled:
            import mlflow
            mlflow.set_tags({k: str(v) for k, v in tags.items()})

    def log_epoch(self, metrics: Dict[str, float], step: int) -> None:
        """One epoch's values, logged at once (Context.log_epoch)."""
        if not self.enabled:
            return
        import mlflow
        mlflow.log_metrics({metric_key(k): v for k, v in metrics.items()}, step=step)
        self.logged_series |= set(metrics)

    def log_interrupted(self, stage: str, report: Report, out_dir: Path) -> None:
        """Tag the run as interrupted (in ``stage``) and log what the partial report has; never
        raises, so that the interrupt itself goes on (the run then ends KILLED)."""
        if not self.enabled:
            return
        import mlflow
        with contextlib.suppress(Exception):
            mlflow.set_tags({"interrupted": "true", "interrupted_stage": stage})
        with contextlib.suppress(Exception):
            self.log_report(report, out_dir)

    def log_report(self, report: Report, out_dir: Path) -> None:
        if not self.enabled:
            return
        import mlflow
        mlflow.log_metrics(report_metrics(report))
        case = case_params(report)
        if case:
            mlflow.log_params(case)
        unstable = sorted({f"{r.get('case', '')}/{r['variant']}".lstrip("/") for r in report.rows
                           if r.get("ratio_unstable") == "yes"})
        if unstable:   # a ratio that moved from round to round: the machine's load changed
            mlflow.set_tags({"ratio_unstable": "true", "ratio_unstable.rows": ", ".join(unstable)[:4000]})
        for k, vals in report.series.items():
            if k in self.logged_series:   # logged live, epoch by epoch (Context.log_epoch)
                continue
            for step, v in enumerate(vals):
                if v == v:
                    mlflow.log_metric(metric_key(k), float(v), step=step)
        mlflow.log_dict(OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True), "config.yaml")
        if report.rows:
            mlflow.log_text(to_csv(report.rows, None), "results.csv")
            mlflow.log_text(format_table(report.rows, report.columns or None, markdown=True), "results.md")
        for name, fig in report.figures.items():
            mlflow.log_figure(fig, name if name.endswith(".png") else f"{name}.png")
        hydra_dir = out_dir / ".hydra"
        if hydra_dir.is_dir():
            mlflow.log_artifacts(str(hydra_dir), "hydra")
        if report.notes:   # what the run told the user (backend fallback, size preset, ...)
            mlflow.log_text("\n".join(report.notes) + "\n", "notes.txt")
        if report.failures:
            mlflow.set_tag("failures", "; ".join(report.failures)[:4000])


class SweepAbort(BaseException):
    """Stops a sweep before any job starts. Hydra turns an ``Exception`` raised by a callback into a
    warning and goes on launching jobs; this is not an ``Exception``, so it reaches the CLI, which
    prints the wrapped one-line error."""

    def __init__(self, error: PipelineError):
        super().__init__(str(error))
        self.error = error


def sweep_jobs(config: DictConfig) -> Optional[List[List[str]]]:
    """The override lists of a basic sweep's jobs, in launch order (None for a sweeper that picks
    its jobs as it goes, such as optuna's)."""
    if not str(OmegaConf.select(config, "hydra.sweeper._target_", default="")).endswith("BasicSweeper"):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    return BasicSweeper.split_arguments(parsed, None)[0]


def check_sweep_jobs(config: DictConfig) -> None:
    """Compose and validate every job of the sweep before the first one starts, so that an invalid
    job stops the sweep before any job has run (raises :class:`SweepAbort` naming the job)."""
    jobs = sweep_jobs(config)
    if not jobs:
        return
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from pipeline.config import validate
    name = str(config.hydra.job.config_name or "config")
    for i, job in enumerate(jobs):
        try:
            validate(compose(config_name=name, overrides=list(job)))
        except PipelineError as e:
            raise SweepAbort(type(e)(f"job {i} of the sweep ({' '.join(job)}): {e}; no job was run")) from None
        except (HydraException, OmegaConfBaseException) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SweepAbort(ConfigError(f"job {i} of the sweep ({' '.join(job)}): {first}; no job was run")) from None


class SweepCallback(Callback):
    """Hydra callback (conf/config.yaml: hydra.callbacks.mlflow_sweep)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from pipeline.models import register_all
        register_all()
        check_sweep_jobs(config)
        if not config.tracking.enabled:
            return
        from mlflow.tracking import MlflowClient
        try:
            setup(config.tracking)    # an unreachable server or a locked store: before any job starts
        except PipelineError as e:
            raise SweepAbort(e) from None
        name = str(config.tracking.experiment or config.model.name)
        exp = experiment_id(name, config.tracking)
        overrides = " ".join(config.hydra.overrides.task) if "hydra" in config else ""
        run = MlflowClient().create_run(exp, run_name=f"sweep: {overrides}"[:250], tags={"sweep": "true"})
        self.parent = run.info.run_id
        os.environ[PARENT_ENV] = self.parent
        os.environ[EXPERIMENT_ENV] = name
        global _sweep
        _sweep = self

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.finish()

    def finish(self, status: Optional[str] = None) -> None:
        """Print and log the sweep summary and end the parent run: FAILED if any job did not
        finish, or ``status`` when the sweep itself was cut short (a job raised: Hydra then skips
        on_multirun_end; Ctrl-C: KILLED)."""
        global _sweep
        parent = getattr(self, "parent", None)
        if not parent:
            return
        self.parent = None
        if _sweep is self:
            _sweep = None
        from mlflow.tracking import MlflowClient
        client = MlflowClient()
        failed = True
        try:
            runs = client.search_runs([client.get_run(parent).info.experiment_id],
                                      filter_string=f"tags.mlflow.parentRunId = '{parent}'",
                                      order_by=["attributes.start_time ASC"])
            ended = {}
            for r in runs:   # a job whose process died (SIGKILL, a node lost) left its run RUNNING
                if r.info.status == "RUNNING":
                    client.set_tag(r.info.run_id, "error", "the job's process ended before its run did "
                                   "(killed, or the sweep was interrupted)")
                    ended[r.info.run_id] = status or "FAILED"
                    client.set_terminated(r.info.run_id, status=ended[r.info.run_id])
            failed = any(ended.get(r.info.run_id, r.info.status) != "FINISHED" for r in runs)
            rows: List[Dict[str, Any]] = []
            for r in runs:
                row: Dict[str, Any] = {"run": r.info.run_name, "status": ended.get(r.info.run_id, r.info.status)}
                for k, v in sorted(r.data.metrics.items()):
                    if k.startswith("summary/") or "/" not in k:    # and the run's headline: best_ms, x_vs_<b>, ...
                        row[k.removeprefix("summary/")] = v
                rows.append(row)
            cols = list(dict.fromkeys(k for r in rows for k in r))
            print("\nsweep summary (MLflow parent run " + parent + ")\n" + format_table(rows, cols), file=sys.stderr)
            client.log_text(parent, to_csv(rows, cols), "sweep_summary.csv")
            client.log_text(parent, format_table(rows, cols, markdown=True), "sweep_summary.md")
            fig = sweep_plot(rows)
            if fig is not None:
                client.log_figure(parent, fig, "sweep_objective.png")
                import matplotlib.pyplot as plt
                plt.close(fig)
        finally:
            client.set_terminated(parent, status=status or ("FAILED" if failed else "FINISHED"))
            os.environ.pop(PARENT_ENV, None)
            os.environ.pop(EXPERIMENT_ENV, None)


def swept_knobs(names: List[str]) -> Dict[str, List[str]]:
    """The overrides that differ between a sweep's jobs: {key: value of each job}, from the jobs'
    run names (their overrides, ``key=value`` separated by spaces)."""
    jobs = [dict(t.split("=", 1) for t in n.split() if "=" in t) for n in names]
    keys = list(dict.fromkeys(k for j in jobs for k in j))
    return {k: [j.get(k, "") for j in jobs] for k in keys if len({j.get(k, "") for j in jobs}) > 1}


def sweep_plot(rows: List[Dict[str, Any]]):
    """The sweep's objective (``summary/objective``: what ``hydra/sweeper=optuna`` minimises or
    maximises; its meaning is the model's, e.g. the best time in ms or the final validation loss)
    against the knob the sweep varies: a line over a numeric knob, else one bar per job. None when
    no job has an objective."""
    done = [r for r in rows if finite_number(r.get("objective")) is not None]
    if not done:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    knobs = swept_knobs([str(r["run"]) for r in done])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    y = [float(r["objective"]) for r in done]
    xs = next(iter(knobs.values())) if len(knobs) == 1 else None
    try:
        xv = [float(v) for v in xs] if xs is not None else None
    except ValueError:
        xv = None
    if xv is not None:
        order = sorted(range(len(xv)), key=xv.__getitem__)
        ax.plot([xv[i] for i in order], [y[i] for i in order], "o-")
        ax.set_xlabel(next(iter(knobs)))
    else:
        labels = [" ".join(f"{k}={v[i]}" for k, v in knobs.items()) or str(r["run"]) for i, r in enumerate(done)]
        ax.bar(range(len(y)), y)
        ax.set_xticks(range(len(y)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("objective (summary/objective)")
    ax.set_title(f"sweep: {len(done)} of {len(rows)} jobs with an objective")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def end_sweep(status: str) -> None:
    """End the open sweep's parent run (if any) with ``status``; called by the CLI when a job's
    exception or an interrupt ends the multirun before Hydra's on_multirun_end."""
    if _sweep is not None:
        _sweep.finish(status)
