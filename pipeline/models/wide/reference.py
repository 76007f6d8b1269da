"""NumPy/SciPy reference of cuWide training (float64): LR and FM (bias, k factors) with log loss
and mini-batch SGD, the two update semantics, evaluation (log loss, AUC) and early stopping.

Model: z = b + x.w + 1/2 sum_f ((x.V_f)^2 - (x^2).(V_f^2))  (FM; LR has no V), p = sigmoid(z),
loss = log(1 + e^z) - y z  (stable form), y in {0,1}. With delta = p - y per sample, the gradients
of the mean loss over a batch of n samples are
  g_b = mean(delta),  g_w = X^T delta / n,  g_V = (X^T (delta * XV) - ((X^2)^T delta) * V) / n
and SGD does theta -= lr * g.  Semantics:
  * batch: a mini-batch is ``max(1, batch_size // chunk)`` consecutive chunks of the epoch's chunk
    order; all its samples see the same parameters (the paper's text, and the stage baseline);
  * chunk: every chunk is its own step, chunks in order, each applying its share of a mini-batch
    (lr * gradient sum / (chunks per batch x chunk)); the flow kernel with update=chunk runs the
    chunks asynchronously (as the authors' preview kernel, which is batch_size = chunk = 32).

Optimisers (``model.optimizer``): ``sgd`` as above; ``adagrad``: per-coordinate steps for w and V
scaled by an accumulator A of per-sample squared gradients (initialised to ``model.adagrad_init``),
the bias keeping SGD's step. A step of the samples S with gradient sum g_j of coordinate j does
  A_j += sum_{s in S} (d loss_s / d theta_j)^2,   then   theta_j -= adagrad_lr * g_j / sqrt(A_j)
(a per-sample step: no division by the batch). The flow kernel adds each sample's square with an
atomic that returns the accumulator, so a coordinate's step sees every square issued to it before,
however stale the forward's parameters are: a hot coordinate, which all samples in flight update
at once, gets ever smaller steps, a rare one keeps large ones (with one sample a step, the kernel's
order is the reference's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import scipy.sparse as sp


@dataclass
class Params:
    w: np.ndarray
    b: float
    V: Optional[np.ndarray]      # [d, k] or None (LR)

    def copy(self) -> "Params":
        return Params(self.w.copy(), float(self.b), None if self.V is None else self.V.copy())

    def astype(self, dt) -> "Params":
        return Params(self.w.astype(dt), float(self.b), None if self.V is None else self.V.astype(dt))


def init_params(d: int, k: int, init_std: float, seed: int, b: float = 0.0) -> Params:
    """w = 0, bias ``b`` (0: the loss starts at ln 2 for LR, as in the paper; model.bias_init=prior
    passes :func:`prior_logit`); V ~ N(0, init_std^2), seeded."""
    V = (np.random.default_rng(seed + 7919).standard_normal((d, k)) * init_std).astype(np.float32) if k else None
    return Params(np.zeros(d, np.float32), float(b), V)


def prior_logit(y: np.ndarray) -> float:
    """log(r / (1 - r)), r the share of positive labels in ``y`` (clipped to [1e-6, 1 - 1e-6]): the
    bias of the best model with w = 0, V = 0 (model.bias_init=prior)."""
    r = min(max(float(np.mean(y)) if len(y) else 0.5, 1e-6), 1 - 1e-6)
    return float(np.log(r / (1 - r)))


def adagrad_bias_lr(lr: float, y: np.ndarray) -> float:
    """The bias's SGD step under AdaGrad with model.adagrad_bias=prior: ``lr`` / (4 r (1 - r)), r the
    share of positive labels clipped to [0.01, 0.99]. The loss's curvature in the bias is the mean of
    p (1 - p), r (1 - r) at the prior and at most that on average, and 1/4 for balanced labels, so the
    step scaled by 1/4 over it moves the bias as fast on rare positives (3 %: 8.6 x lr) as lr moves it
    on balanced labels, and its delay bound is the balanced one's: lr x (samples in flight) / batch
    x 1/4 at most, whatever the labels' balance."""
    r = min(max(float(np.mean(y)) if len(y) else 0.5, 0.01), 0.99)
    return float(lr) * 0.25 / (r * (1 - r))


def logloss(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z) - y * z


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def forward(X: sp.csr_matrix, p: Params):
    z = X @ p.w + p.b
    if p.V is None:
        return np.asarray(z, np.float64), None, None
    X2 = X.multiply(X).tocsr()
    XV = np.asarray(X @ p.V, np.float64)
    z = z + 0.5 * ((XV ** 2).sum(1) - np.asarray(X2 @ (p.V.astype(np.float64) ** 2)).sum(1))
    return np.asarray(z, np.float64), XV, X2


def loss_and_grad(X: sp.csr_matrix, y: np.ndarray, p: Params):
    """(mean loss, Params of gradients of the mean loss)."""
    n = X.shape[0]
    z, XV, X2 = forward(X, p)
    delta = sigmoid(z) - y
    gw = np.asarray(X.T @ delta) / n
    gV = None
    if p.V is not None:
        gV = (np.asarray(X.T @ (delta[:, None] * XV)) - np.asarray(X2.T @ delta)[:, None] * p.V) / n
    return float(logloss(z, y).mean()), Params(gw, float(delta.mean()), gV), z


def step_terms(X: sp.csr_matrix, y: np.ndarray, p: Params):
    """(mean loss, gradient sum, per-sample squared gradient sum) of a step's samples, the last two as
    Params: gsum_j = sum_s d loss_s / d theta_j, sq_j = sum_s (d loss_s / d theta_j)^2. Per sample
    (delta = p - y): d/dw_j = delta x_j, d/db = delta, d/dV_jq = delta (x_j XV_q - V_jq x_j^2)."""
    n = X.shape[0]
    z, XV, X2 = forward(X, p)
    delta = sigmoid(z) - y
    d2 = delta * delta
    Xsq = X.multiply(X).tocsr() if X2 is None else X2
    gw = np.asarray(X.T @ delta)
    sw = np.asarray(Xsq.T @ d2)
    gV = sV = None
    if p.V is not None:
        V = p.V.astype(np.float64)
        gV = np.asarray(X.T @ (delta[:, None] * XV)) - np.asarray(X2.T @ delta)[:, None] * V
        X3 = X2.multiply(X).tocsr()
        X4 = X2.multiply(X2).tocsr()
        sV = (np.asarray(X2.T @ (d2[:, None] * XV * XV)) - 2 * V * np.asarray(X3.T @ (d2[:, None] * XV))
              + V * V * np.asarray(X4.T @ d2)[:, None])
    loss = float(logloss(z, y).mean()) if n else 0.0
    return loss, Params(gw, float(delta.sum()), gV), Params(sw, float(d2.sum()), sV)


def init_accumulator(d: int, k: int, init: float) -> Params:
    """AdaGrad's accumulators (one per coordinate: w, b, V), all ``init``."""
    return Params(np.full(d, init, np.float64), float(init), np.full((d, k), init, np.float64) if k else None)


def adagrad_step(p: Params, A: Params, gsum: Params, sq: Params, lr: float, lr_bias: float,
                 cols: Optional[np.ndarray] = None) -> None:
    """A += sq, then theta -= lr * gsum / sqrt(A) for w and V; b -= lr_bias * gsum.b (in place)."""
    at = slice(None) if cols is None else cols
    A.w[at] += sq.w
    p.w[at] -= lr * gsum.w / np.sqrt(np.maximum(A.w[at], 1e-300))
    if p.V is not None:
        A.V[at] += sq.V
        p.V[at] -= lr * gsum.V / np.sqrt(np.maximum(A.V[at], 1e-300))
    A.b += sq.b
    p.b -= lr_bias * gsum.b


def row_terms(rows: np.ndarray, xs: np.ndarray, b: float, y: float) -> Tuple[float, float, np.ndarray]:
    """One sample's terms from its features' packed parameter rows ``rows`` (column 0 the weight,
    columns 1.. the factors; float64), its values ``xs`` and the bias ``b``: (log loss, delta =
    sigmoid(z) - y, G), G[i] the gradient of edge i's row over the sample's loss: delta x (x a2 - v x^2
    for the factors, a2 the sample's factor sums). What the emulations of the kernels' orders share."""
    z = float(rows[:, 0] @ xs) + b
    g = np.empty_like(rows)
    if rows.shape[1] > 1:
        xv = rows[:, 1:] * xs[:, None]
        a2 = xv.sum(0)
        z += 0.5 * (float(a2 @ a2) - float((xv * xv).sum()))
    dl = float(sigmoid(z)) - float(y)
    g[:, 0] = dl * xs
    if rows.shape[1] > 1:
        g[:, 1:] = dl * (xs[:, None] * a2 - rows[:, 1:] * xs[:, None] * xs[:, None])
    return float(logloss(np.float64(z), np.float64(y))), dl, g


def warp_adagrad_epoch(X: sp.csr_matrix, y: np.ndarray, p: Params, A: Params, steps: List[List[int]], wg: int,
                       scale: float, ada_lr: float) -> Tuple[float, int, int]:
    """AdaGrad as the warp kernel (design=warp) trains ``steps`` with one warp at a time, several
    samples a step: ``steps`` holds the rows of each step's samples, sample s on lanes s wg .. s wg +
    wg - 1, so edge i of its row is in the apply's call i // wg, on lane s wg + i % wg. A step's
    forward reads the model and the bias as of the step's start (FM: the rows of all edges, as the
    kernel's in-register edges; a tail edge's row, which the kernel reads when it applies it, is not
    modelled); then the squares go into the accumulators and the steps into the model lane after
    lane, each lane's edges in the order of its calls: the order of the kernel's per-lane returning
    atomics when a warp's lanes run one at a time in lane order between its barriers (the host shim
    of ``tests/test_wide.py``); the bias takes ``scale`` x the sum of the deltas (SGD).
    p, A: float64 Params (shards summed), updated in place. Returns (summed loss, the number of
    (step, call, feature) groups of two or more lanes, the largest group)."""
    kp1 = 1 if p.V is None else 1 + p.V.shape[1]
    model = np.concatenate([p.w[:, None], p.V], 1) if kp1 > 1 else p.w[:, None].copy()
    acc = np.concatenate([A.w[:, None], A.V], 1) if kp1 > 1 else A.w[:, None].copy()
    lsum, shared, largest = 0.0, 0, 1
    for rows in steps:
        ops, dsum = [], 0.0
        for s, r in enumerate(rows):
            cols, xs = X.indices[X.indptr[r]:X.indptr[r + 1]], X.data[X.indptr[r]:X.indptr[r + 1]].astype(np.float64)
            loss, dl, g = row_terms(model[cols], xs, p.b, y[r])
            dsum += dl
            lsum += loss
            ops += [(i // wg, s * wg + i % wg, int(f), g[i]) for i, f in enumerate(cols)]
        p.b += scale * dsum
        if not ops:
            continue
        ops.sort(key=lambda o: (o[1], o[0]))                      # lane, then call
        _, size = np.unique([(c, f) for c, _, f, _ in ops], axis=0, return_counts=True)
        shared += int((size > 1).sum())
        largest = max(largest, int(size.max()))
        for _, _, f, g in ops:
            acc[f] += g * g
            model[f] += -ada_lr * g / np.sqrt(acc[f])
    p.w[:] = model[:, 0]
    A.w[:] = acc[:, 0]
    if kp1 > 1:
        p.V[:] = model[:, 1:]
        A.V[:] = acc[:, 1:]
    return lsum, shared, largest


def sgd_step(p: Params, g: Params, lr: float, cols: Optional[np.ndarray] = None) -> None:
    at = slice(None) if cols is None else cols
    p.w[at] -= lr * g.w
    if p.V is not None:
        p.V[at] -= lr * g.V
    p.b -= lr * g.b


def compact(X: sp.csr_matrix, p: Params):
    """(X restricted to the columns it uses, those columns, p restricted to them): a step then costs
    O(nnz + touched features), not O(d)."""
    cols, inv = np.unique(X.indices, return_inverse=True)
    Xc = sp.csr_matrix((X.data, inv.astype(np.int32), X.indptr), shape=(X.shape[0], len(cols)))
    return Xc, cols, Params(p.w[cols], p.b, None if p.V is None else p.V[cols])


def chunks_per_step(update: str, batch_size: int, chunk: int) -> int:
    return 1 if update == "chunk" else max(1, batch_size // chunk)


def train_epoch(X: sp.csr_matrix, y: np.ndarray, p: Params, order: np.ndarray, chunk: int, per_step: int,
                lr: float, chunk_denom: int = 0, acc: Optional[Params] = None, ada_lr: float = 0.0,
                over: int = 0, general: bool = False) -> float:
    """One epoch in place; returns the mean training loss (each sample's loss before its step).
    ``chunk_denom`` > 0 (update=chunk): each chunk's step is lr * sum(grad) / chunk_denom, i.e. its
    share of a mini-batch of ``chunk_denom`` samples applied at once. ``acc`` (AdaGrad's
    accumulators, :func:`init_accumulator`, updated in place): AdaGrad steps of ``ada_lr`` for w and
    V instead of SGD (the bias keeps SGD's step, ``lr``). ``over`` > 0: the loss sum is divided by this
    instead of the samples trained (a slice of an epoch: its share of the epoch's mean). LR (no V)
    takes :func:`_train_epoch_lr`, the same steps on the CSR arrays (a few times faster at chunk
    steps: no sparse matrix built a step); ``general=True`` forces the path below (tests compare them)."""
    if p.V is None and not general:
        return _train_epoch_lr(X, y, p, order, chunk, per_step, lr, chunk_denom, acc, ada_lr, over)
    total, cnt = 0.0, 0
    n = X.shape[0]
    for i in range(0, len(order), per_step):
        cs = order[i:i + per_step]
        if per_step == 1:
            a, b = cs[0] * chunk, min((cs[0] + 1) * chunk, n)
            Xb, yb = X[a:b], y[a:b]
        else:
            rows = np.concatenate([np.arange(c * chunk, min((c + 1) * chunk, n)) for c in cs])
            Xb, yb = X[rows], y[rows]
        Xc, cols, pc = compact(Xb, p)
        if acc is not None:
            loss, gsum, sq = step_terms(Xc, yb, pc)
            adagrad_step(p, acc, gsum, sq, ada_lr, lr / (chunk_denom or Xb.shape[0]), cols)
        else:
            loss, g, _ = loss_and_grad(Xc, yb, pc)
            sgd_step(p, g, lr * Xb.shape[0] / chunk_denom if chunk_denom else lr, cols)
        total += loss * Xb.shape[0]
        cnt += Xb.shape[0]
    return total / (over or max(cnt, 1))


def _train_epoch_lr(X: sp.csr_matrix, y: np.ndarray, p: Params, order: np.ndarray, chunk: int, per_step: int,
                    lr: float, chunk_denom: int, acc: Optional[Params], ada_lr: float, over: int) -> float:
    """:func:`train_epoch` for LR on the CSR arrays: a step's edges e (row r_e, feature f_e, value x_e)
    give z_r = b + sum x_e w_f, delta_r = sigmoid(z_r) - y_r and the per-edge gradient g_e = delta_r x_e,
    summed per feature (and squared per edge, then summed, for AdaGrad) in the edges' order; the
    steps are :func:`loss_and_grad` + :func:`sgd_step` and :func:`step_terms` + :func:`adagrad_step`'s."""
    indptr, indices, vals = X.indptr, X.indices, X.data
    n = X.shape[0]
    total, cnt = 0.0, 0
    for i in range(0, len(order), per_step):
        spans = [(int(c) * chunk, min((int(c) + 1) * chunk, n)) for c in order[i:i + per_step]]
        idx = np.concatenate([indices[indptr[a]:indptr[b]] for a, b in spans])
        xv = np.concatenate([vals[indptr[a]:indptr[b]] for a, b in spans])
        lens = np.concatenate([np.diff(indptr[a:b + 1]) for a, b in spans])
        yb = np.concatenate([y[a:b] for a, b in spans])
        x = xv.astype(np.float64)
        rows = len(yb)
        r = np.repeat(np.arange(rows), lens)
        cols, inv = np.unique(idx, return_inverse=True)
        w = p.w[cols].astype(np.float64)
        z = np.bincount(r, weights=x * w[inv], minlength=rows) + p.b
        delta = sigmoid(z) - yb
        g = delta[r] * x
        gsum = np.bincount(inv, weights=g, minlength=len(cols))
        if acc is not None:
            # x^2 in the data's precision, as X.multiply(X) in step_terms squares it
            sq = (xv * xv).astype(np.float64) * (delta * delta)[r]
            acc.w[cols] += np.bincount(inv, weights=sq, minlength=len(cols))
            p.w[cols] -= ada_lr * gsum / np.sqrt(np.maximum(acc.w[cols], 1e-300))
            acc.b += float((delta * delta).sum())
            p.b -= lr / (chunk_denom or rows) * float(delta.sum())
        else:
            step = lr / chunk_denom if chunk_denom else lr / max(rows, 1)
            p.w[cols] -= step * gsum
            p.b -= step * float(delta.sum())
        total += float(logloss(z, yb).sum())
        cnt += rows
    return total / (over or max(cnt, 1))


def evaluate(X: sp.csr_matrix, y: np.ndarray, p: Params) -> Tuple[float, float]:
    """(mean log loss, AUC) on (X, y)."""
    from sklearn.metrics import roc_auc_score
    z, _, _ = forward(X, p.astype(np.float64))
    loss = float(logloss(z, y).mean())
    auc = float(roc_auc_score(y, z)) if 0 < y.sum() < len(y) else float("nan")
    return loss, auc


def should_stop(val_hist: List[float], window: int) -> bool:
    """Paper: stop when the current validation loss exceeds the mean of the previous ``window``."""
    if len(val_hist) <= window:
        return False
    return val_hist[-1] > float(np.mean(val_hist[-window - 1:-1]))


def epoch_order(n_chunks: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n_chunks, dtype=np.int32)
    return np.random.default_rng([seed, epoch]).permutation(n_chunks).astype(np.int32)


def epoch_slice(order: np.ndarray, part: int, parts: int, step: int = 1) -> np.ndarray:
    """The ``part``-th of ``parts`` consecutive slices of an epoch's chunk order (model.evals_per_epoch),
    cut only between steps of ``step`` chunks (a mini-batch), the steps shared out as evenly as
    possible (the first slices take one more): training the slices in turn trains the whole order's
    steps, in order. A slice is empty when ``parts`` exceeds the steps."""
    steps = -(-len(order) // max(1, step))
    q, r = divmod(steps, parts)
    a = part * q + min(part, r)
    b = a + q + (part < r)
    return order[a * step:b * step]
