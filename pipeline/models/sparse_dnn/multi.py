"""Multi-GPU inference for model=sparse_dnn (``model.gpus``; docs/models/sparse_dnn.md, "Multi-GPU"):
one worker process per GPU ('spawn': one GPU context a process), each loading the network itself
(``NetSpec``) and building its variant's runner (variant ``cpu``: the SciPy reference, so the
coordinator runs without a GPU); workers claim batches from a shared counter per pass and the
coordinator merges them in order, so the answer does not depend on the workers. A worker's exception
ends the run with a one-line ``GpuError``; every worker is joined, or terminated, before returning.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Union

import numpy as np
from omegaconf import OmegaConf

from pipeline.config import require
from pipeline.errors import GpuError
from pipeline.models.sparse_dnn import reference as ref
from pipeline.models.sparse_dnn.network import batches as _batches

CPU_WORKERS = 4            # model.gpus=0 on the CPU backend: this many worker processes (at most the cores)
POLL_S = 0.5               # how often a waiting side checks that the other one is still alive
JOIN_S = 30.0              # how long a finished worker may take to exit before it is terminated


@dataclass(frozen=True)
class NetSpec:
    """What a worker needs to load the network itself: ``load_network``'s arguments, with the
    config reduced to the plain keys it reads (packaged npz, cached TSV layers, RadiX-Net
    generated from its seed with cached inputs; the golden set comes from its cache). A RadiX-Net
    beyond ``dataset.keep_layers_gb`` stays lazy in the worker too: only the runner's pinned copy
    of the weights is held per GPU."""
    cfg: dict
    N: int
    L: int
    images: int
    small: bool

    @classmethod
    def of(cls, cfg, net, small: bool) -> "NetSpec":
        keep = OmegaConf.masked_copy(cfg, ["dataset", "seed", "cache_dir", "data_dir"])
        return cls(OmegaConf.to_container(keep, resolve=True), net.N, net.L, net.images, small)

    def load(self):
        from pipeline.models.sparse_dnn.network import load_network
        return load_network(OmegaConf.create(self.cfg), self.N, self.L, self.images, self.small,
                            notice=lambda msg: None)


class CpuRunner:
    """The SciPy reference on a range of images: the worker of variant ``cpu``."""

    def __init__(self, net, cfg_model):
        self.net, self.shortcut = net, bool(cfg_model["saturation_shortcut"])

    def run(self, lo: int, hi: int) -> np.ndarray:
        n = self.net
        cats, _ = ref.infer(n.Y0[lo:hi], n.layers, n.bias, n.ymax, self.shortcut)
        return cats + lo


def make_runner(index: int, net, cfg_model, variant: str, notice: Callable[[str], None]):
    """The runner of ``variant`` in worker ``index`` (GPU ``index``; the CPU reference for ``cpu``)."""
    if variant == "cpu":
        return CpuRunner(net, cfg_model)
    from pipeline.gpu import device
    from pipeline.models.sparse_dnn import gpu
    return gpu.RUNNERS[variant](net, cfg_model, device.init(index), notice)


def gpu_count() -> int:
    import pycuda.driver as drv
    drv.init()
    return drv.Device.count()


def worker_count(gpus: int, present: Optional[int]) -> int:
    """Workers for ``model.gpus`` (0 = all) with ``present`` GPUs (None: the CPU backend, where the
    workers are processes running the reference; 0 there means CPU_WORKERS)."""
    if present is None:
        return gpus or max(1, min(CPU_WORKERS, os.cpu_count() or 1))
    require(gpus <= present, "model.gpus", gpus,
            f"this machine has {present} GPU(s); use model.gpus={present} or model.gpus=0 (all)")
    return gpus or present


@dataclass
class MultiResult:
    categories: np.ndarray                 # merged in batch order (first timed pass)
    times: List[float]                     # wall time of each timed pass (gate to last result)
    batches: List[tuple]                   # the [b0, b1) ranges handed out
    owners: List[List[int]]                # per timed pass: the worker that ran each batch
    claimed: List[int]                     # per worker: batches run over the timed passes
    busy_s: List[float]                    # per worker: seconds spent in runner.run, timed passes
    disagree: str = ""                     # non-empty when a timed pass's answer differed

    def per_worker(self) -> str:
        """'0:5/1.2s 1:7/1.3s': worker index, batches run and busy seconds over the timed passes."""
        return " ".join(f"{i}:{c}/{b:.3g}s" for i, (c, b) in enumerate(zip(self.claimed, self.busy_s)))


def _label(i: int, variant: str) -> str:
    return f"worker {i} (CPU reference)" if variant == "cpu" else f"GPU {i}"


def _worker(i, source, variant, cfg_model, ranges, rounds, counters, gates, out, factory):
    """One worker process: load, build, warm up, report ready; per pass: wait at the gate, then
    claim batches until the pass's counter runs out."""
    parent = multiprocessing.parent_process()
    try:
        net = source.load() if isinstance(source, NetSpec) else source
        if net.images != ranges[-1][1]:
            raise GpuError(f"the worker's network has {net.images} images, the coordinator's {ranges[-1][1]}")
        runner = factory(i, net, OmegaConf.create(cfg_model), variant, lambda msg: out.put(("notice", i, msg)))
        if variant != "cpu":                   # compile, allocate, capture graphs outside the timing
            for b0, b1 in dict.fromkeys([ranges[0], ranges[-1]]):
                runner.run(b0, b1)
        out.put(("ready", i))
        for r in range(rounds):
            while not gates[r].wait(POLL_S):
                if parent is not None and not parent.is_alive():
                    return                     # coordinator gone: nothing to report to
            while True:
                with counters.get_lock():
                    k = counters[r]
                    counters[r] = k + 1
                if k >= len(ranges):
                    break
                t0 = time.perf_counter()
                cats = np.asarray(runner.run(*ranges[k]), np.int64)
                out.put(("batch", i, r, k, cats, time.perf_counter() - t0))
    except BaseException as e:                 # noqa: BLE001 - everything goes back as one line
        out.put(("error", i, f"{type(e).__name__}: {' '.join(str(e).split())}"))


def _receive(out, procs, variant: str, notice, timeout_s: float):
    """The next message that is not a notice; a worker's error or death raises a one-line GpuError."""
    quiet = 0.0
    while True:
        try:
            msg = out.get(timeout=POLL_S)
        except queue.Empty:
            dead = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead:
                try:                                     # its last words may just have arrived
                    msg = out.get(timeout=POLL_S)
                except queue.Empty:
                    i, code = dead[0]
                    raise GpuError(f"model.gpus: {_label(i, variant)} failed: its worker process exited "
                                   f"with code {code}") from None
            else:
                quiet += POLL_S
                if quiet > timeout_s:
                    raise GpuError(f"model.gpus: no word from any worker for {timeout_s:.0f} s; stopped them")
                continue
        if msg[0] == "notice":
            notice(f"{_label(msg[1], variant)}: {msg[2]}")
            continue
        if msg[0] == "error":
            raise GpuError(f"model.gpus: {_label(msg[1], variant)} failed: {msg[2]}")
        return msg


def run(source: Union[NetSpec, object], variant: str, cfg_model: Dict, workers: int, batch: int, images: int,
        warmup: int = 0, repeats: int = 1, notice: Callable[[str], None] = print,
        factory: Callable = make_runner, timeout_s: float = 3600.0) -> MultiResult:
    """Run ``variant`` on ``workers`` worker processes (GPUs 0..workers-1), ``warmup`` + ``repeats``
    passes over ``images`` images in batches of ``batch``. ``cfg_model`` is a plain dict of the
    model config (its batch_size is set to ``batch``); ``factory`` builds a worker's runner."""
    ranges = _batches(images, batch)
    rounds = warmup + repeats
    cfg_model = dict(cfg_model, batch_size=batch)
    mp = multiprocessing.get_context("spawn")
    counters = mp.Array("q", rounds)
    gates = [mp.Event() for _ in range(rounds)]
    out = mp.Queue()
    procs = [mp.Process(target=_worker, name=f"sparse_dnn-{variant}-{i}", daemon=True,
                        args=(i, source, variant, cfg_model, ranges, rounds, counters, gates, out, factory))
             for i in range(workers)]
    for p in procs:
        p.start()
    res = MultiResult(np.zeros(0, np.int64), [], ranges, [], [0] * workers, [0.0] * workers)
    try:
        ready = 0
        while ready < workers:
            if _receive(out, procs, variant, notice, timeout_s)[0] == "ready":
                ready += 1
        for r in range(rounds):
            got: Dict[int, tuple] = {}
            t0 = time.perf_counter()
            gates[r].set()
            while len(got) < len(ranges):
                _, i, rr, k, cats, busy = _receive(out, procs, variant, notice, timeout_s)
                if rr != r or k in got:
                    raise GpuError(f"model.gpus: batch {k} of pass {rr} was handed out twice (pass {r})")
                got[k] = (i, cats, busy)
            wall = time.perf_counter() - t0
            cats = np.concatenate([got[k][1] for k in range(len(ranges))])
            if r < warmup:
                continue
            res.times.append(wall)
            res.owners.append([got[k][0] for k in range(len(ranges))])
            for i, _, busy in got.values():
                res.claimed[i] += 1
                res.busy_s[i] += busy
            if r == warmup:
                res.categories = cats
            elif not res.disagree and not np.array_equal(cats, res.categories):
                res.disagree = f"pass {r - warmup + 1}: {ref.categories_equal(cats, res.categories)[1]}"
        for p in procs:
            p.join(JOIN_S)
    finally:
        for p in procs:                        # on error (or a worker that would not exit)
            if p.is_alive():
                p.terminate()
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join()
        out.close()
    return res
