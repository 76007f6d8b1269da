"""Loading a network for model=sparse_dnn, shared by the model (model.py) and the multi-GPU
workers (multi.py), which load it themselves: the official packaged subset, the official TSV
files or a RadiX-Net, with the golden set (official file, else the exact CPU reference's answer
and its rounding-ambiguous rows, cached under cache_dir). Also the batching rule every runner uses.
"""
from __future__ import annotations

import time
from typing import List, Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.data import hpec, radixnet
from pipeline.data.cache import cached_arrays
from pipeline.data.paths import find
from pipeline.errors import ConfigError, DataError
from pipeline.models.sparse_dnn import reference as ref


def batches(n: int, batch: int, start: int = 0) -> List[Tuple[int, int]]:
    """[b0, b1) ranges of ``batch`` images covering images start..n-1 (batch 0: one range)."""
    batch = batch or (n - start)
    return [(b, min(n, b + batch)) for b in range(start, n, batch)]


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB"


def _csr_bytes(Y: sp.csr_matrix) -> int:
    return int(Y.data.nbytes + Y.indices.nbytes + Y.indptr.nbytes)


def load_network(cfg, N: int, L: int, images: int, small: bool, progress=None, notice=print) -> hpec.Network:
    """The network of ``cfg.dataset`` with N, L, images overriding its sizes; the golden set filled
    in (official file, else the CPU reference, cached under cache_dir). Steps that take longer than
    a few seconds (inputs, layers, reference) are announced with their times through ``notice``."""
    d = cfg.dataset
    bias = float(d.bias) if float(d.bias) != 0 else None
    ymax = float(d.ymax)
    seed = int(cfg.seed)
    say = notice or (lambda msg: None)
    if d.format == "npz":
        folder = find(cfg, str(d.path or "hpec-1024"), "the packaged official subset, see data/hpec-1024/SOURCE.md")
        net = hpec.load_npz(folder, L=L, images=images, bias=bias, ymax=ymax)
        if net.N != N:
            raise ConfigError(f"dataset.neurons={N} is not allowed: {folder} holds a {net.N}-neuron network; "
                              f"set dataset.neurons={net.N} (or pick another dataset)")
    elif d.format == "tsv":
        if not d.path:
            raise ConfigError("dataset.path='' is not allowed: the folder holding the official TSV files")
        folder = find(cfg, str(d.path), "the official challenge TSV files")
        net = hpec.load_tsv(folder, N, L, images=images, bias=bias, ymax=ymax, golden=str(d.golden),
                            cache_dir=str(cfg.cache_dir), progress=progress, strict=not small)
    else:
        n = images or radixnet.IMAGES
        kind = str(d.inputs)
        built = []

        def build_inputs():
            t0 = time.perf_counter()
            if kind == "random":
                a = radixnet.random_inputs(N, n, seed)
            else:
                from pipeline.data import mnist
                try:
                    imgs, _ = mnist.load(cfg, "train")
                except DataError as e:
                    raise DataError(f"{e} (or use dataset.inputs=random)") from e
                a = radixnet.mnist_inputs(imgs, N, n, progress=progress)
            built.append(time.perf_counter() - t0)
            a.pop("data")                      # all ones: not stored
            return a
        t0 = time.perf_counter()
        a = cached_arrays(str(cfg.cache_dir), "radixnet-inputs", {"N": N, "n": n, "inputs": kind, "seed": seed,
                                                                  "v": 3}, build_inputs)
        Y0 = sp.csr_matrix((np.ones(a["indices"].size, np.float32), a["indices"], a["indptr"]),
                           shape=tuple(int(s) for s in a["shape"]))
        dt = time.perf_counter() - t0
        if dt > 2 or built and built[0] > 2:
            how = (f"built in {built[0]:.1f} s, cached in {dt - built[0]:.1f} s" if built
                   else f"read from the cache in {dt:.1f} s")
            say(f"RadiX-Net {N}: {n} {kind} inputs ({Y0.nnz / n:.0f} nonzeros each, {_gb(_csr_bytes(Y0))}) {how}")
        t0 = time.perf_counter()
        keep = int(float(d.get("keep_layers_gb", 2.0)) * 1e9)
        net = radixnet.make_network(N, L, Y0, seed=seed, bias=bias, ymax=ymax, progress=progress, keep_bytes=keep)
        dt = time.perf_counter() - t0
        if net.meta["lazy_layers"]:
            say(f"RadiX-Net {N} x {L}: {_gb(radixnet.layer_nbytes(N) * L)} as CSR > dataset.keep_layers_gb="
                f"{float(d.get('keep_layers_gb', 2.0)):g}: layers are regenerated on demand, in parallel, for "
                f"each pass over them (reference, packing), never held as a list")
        elif dt > 2:
            say(f"RadiX-Net {N} x {L}: {L} layers generated in {dt:.1f} s ({_gb(radixnet.layer_nbytes(N) * L)})")
        net.meta["threshold"] = int(a["threshold"])
        net.meta["inputs"] = kind
    if net.golden is None:
        key = {"net": net.name, "images": net.images, "seed": seed, "inputs": str(net.meta.get("inputs", "")),
               "bias": net.bias, "ymax": net.ymax, "nnz": int(net.Y0.nnz), "src": str(net.meta.get("source", "")),
               "v": 2}
        took = []

        def build_golden():
            t0 = time.perf_counter()
            g = ref.golden(net.Y0, net.layers, net.bias, net.ymax, True, progress=progress)
            took.append(time.perf_counter() - t0)
            have = g.ambiguous is not None
            return {"categories": g.categories, "rows": g.rows, "fallback": np.int64(g.fallback),
                    "has_ambiguous": np.int64(have),
                    "ambiguous": g.ambiguous if have else np.zeros(0, np.int64)}
        g = cached_arrays(str(cfg.cache_dir), "sparse-dnn-golden", key, build_golden)
        amb = g["ambiguous"] if int(g["has_ambiguous"]) else None
        if took and took[0] > 2:
            what = f", {amb.size} rounding-ambiguous" if amb is not None else ""
            say(f"{net.name}: golden set from the exact CPU reference in {took[0]:.1f} s ({len(g['categories'])} "
                f"categories of {net.images}{what}; cached)")
        net.golden = g["categories"]
        net.meta["ref_rows"] = g["rows"]
        net.meta["ambiguous"] = amb
        net.meta["exact_fallback"] = int(g["fallback"])
        net.meta["golden_from"] = "exact CPU reference (cached)"
    else:
        net.meta["ambiguous"] = None               # an official file is checked row for row
        net.meta["golden_from"] = "official file"
    return net


