"""The three datasets of model=bcm_cnn as float32 NHWC arrays, normalised per channel with the
training set's statistics: CIFAR-10 (JPEG pack), MNIST (IDX) and scikit-learn's bundled digits."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np

from pipeline.errors import DataError


@dataclass
class Split:
    x: np.ndarray      # (n, h, w, c) float32, normalised
    y: np.ndarray      # (n,) int32


def _raw(cfg, name: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """uint8/float (n, h, w, c) images and labels for train and test."""
    if name == "cifar10":
        from pipeline.data import cifar10
        return (*cifar10.load(cfg, "train"), *cifar10.load(cfg, "test"))
    if name == "mnist":
        from pipeline.data import mnist
        xtr, ytr = mnist.load(cfg, "train")
        xte, yte = mnist.load(cfg, "test")
        return xtr[..., None], ytr, xte[..., None], yte
    if name == "digits":
        from sklearn.datasets import load_digits
        d = load_digits()
        x = d.images.astype(np.float32)[..., None]            # (1797, 8, 8, 1), values 0..16
        y = d.target
        perm = np.random.default_rng(12345).permutation(len(y))   # a fixed split, independent of cfg.seed
        te, tr = perm[:360], perm[360:]
        return x[tr], y[tr], x[te], y[te]
    raise DataError(f"dataset '{name}' is not one model=bcm_cnn can train on (cifar10, mnist, digits)")


def load(cfg, name: str, seed: int) -> Tuple[Split, Split]:
    """(train, test) for ``name``; the training set is shuffled with ``seed`` before limiting, to
    ``model.train_limit`` / ``test_limit`` images, else ``dataset.train_images`` / ``test_images``
    (not on a stand-in: ``name`` other than ``dataset.name``); 0: all."""
    xtr, ytr, xte, yte = _raw(cfg, name)
    m, d = cfg.model, cfg.dataset
    own = name == str(d.name)
    ntr = int(m.train_limit) or (int(d.train_images) if own else 0)
    nte = int(m.test_limit) or (int(d.test_images) if own else 0)
    perm = np.random.default_rng([seed, 7]).permutation(len(ytr))[:ntr or None]
    xtr, ytr = xtr[perm], ytr[perm]
    if nte:
        # the test files are ordered by class (CIFAR-10): take a class-balanced, fixed subset
        pick = np.random.default_rng(54321).permutation(len(yte))[:nte]
        xte, yte = xte[pick], yte[pick]
    xtr, xte = xtr.astype(np.float32), xte.astype(np.float32)
    mean = xtr.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)
    std = xtr.std(axis=(0, 1, 2), dtype=np.float64).astype(np.float32) + 1e-6
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    return (Split(np.ascontiguousarray(xtr), ytr.astype(np.int32)),
            Split(np.ascontiguousarray(xte), yte.astype(np.int32)))
