"""A small CNN whose conv (via im2col: a patch a row, so one matrix product) and FC layers are block-circulant (BCM) or
dense, trained with SGD + momentum. The glue (ReLU, 2x2 max-pooling, softmax cross-entropy,
the optimizer) is written once against an array module ``xp`` (NumPy on the CPU, CuPy on the GPU).
The linear products run the project's code: on the GPU :class:`pipeline.models.bcm.gpu.BcmLinear`
(our kernels, variant from ``kernel=``) and :class:`~pipeline.models.bcm.gpu.DenseLinear` (cuBLAS),
with our im2col/col2im kernels; on the CPU the NumPy FFT reference
(:func:`pipeline.models.bcm.reference.fc_forward_fft`) and NumPy matmuls.

Tensors are NHWC. A layer spec is a tuple: ``("conv", cout, bcm)`` (3x3, stride 1, pad 1),
``("fc", out, bcm)``, ``("relu",)``, ``("pool",)`` (2x2, stride 2), ``("flatten",)``. ``bcm`` marks
the layers that become block-circulant in the BCM network; the dense network uses the same spec
with every layer dense. Sizes that are not multiples of k are zero-padded.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from pipeline.models.bcm import reference as ref
from pipeline.timing import IntervalSum

Spec = Tuple

# The networks (the paper says "4 conv + 3 FC + softmax" for CIFAR-10 and gives no more detail).
ARCHS: Dict[str, List[Spec]] = {
    "cifar10": [("conv", 64, False), ("relu",), ("conv", 64, True), ("relu",), ("pool",),
                ("conv", 128, True), ("relu",), ("conv", 128, True), ("relu",), ("pool",), ("flatten",),
                ("fc", 1024, True), ("relu",), ("fc", 1024, True), ("relu",), ("fc", 10, False)],
    "mnist": [("conv", 32, False), ("relu",), ("pool",), ("conv", 64, True), ("relu",), ("pool",), ("flatten",),
              ("fc", 512, True), ("relu",), ("fc", 10, False)],
    "digits": [("conv", 16, False), ("relu",), ("conv", 32, True), ("relu",), ("pool",), ("flatten",),
               ("fc", 64, True), ("relu",), ("fc", 10, False)],
}


def _linear_sizes(spec: Sequence[Spec], input_shape: Tuple[int, int, int]) -> Dict[int, Tuple[int, int]]:
    """Spec index -> (in features, out features) of each conv (im2col: 9 c inputs) and fc layer."""
    h, w, c = input_shape
    feat = None
    out = {}
    for i, s in enumerate(spec):
        if s[0] == "conv":
            out[i] = (9 * c, s[1])
            c = s[1]
        elif s[0] == "fc":
            out[i] = (feat if feat is not None else c, s[1])
            feat = s[1]
        elif s[0] == "pool":
            if h % 2 or w % 2:
                raise ValueError(f"2x2 pooling needs even sizes, got {h}x{w} at layer {i}")
            h, w = h // 2, w // 2
        elif s[0] == "flatten":
            feat = h * w * c
        elif s[0] != "relu":
            raise ValueError(f"unknown layer {s[0]!r}")
    return out


def bcm_layer_sizes(spec: Sequence[Spec], input_shape: Tuple[int, int, int]) -> List[Tuple[str, int, int]]:
    """(name, in features, out features) of each layer the network makes block-circulant (names as
    :class:`Net` gives them), from the architecture alone."""
    return [(f"{spec[i][0]}{i}", fin, fout) for i, (fin, fout) in _linear_sizes(spec, input_shape).items()
            if spec[i][2]]


# ------------------------------------------------------------------------------ linear cores


class CpuBcmCore:
    def __init__(self, p: int, q: int, k: int):
        self.k = k

    def forward(self, x, w, b):
        a, self.xf, self.wf = ref.fc_forward_fft(x, w, b, xp=np)
        return a

    def backward(self, g, need_dx: bool):
        return ref.fc_backward_fft(g, self.xf, self.wf, self.k, xp=np)


class GpuBcmCore:
    def __init__(self, p: int, q: int, k: int, variant: str):
        from pipeline.models.bcm.gpu import BcmLinear
        self.layer = BcmLinear(p, q, k, variant)
        # these variants return the layer's persistent buffers: copy what outlives the next call
        self.persistent = variant in ("baseline", "dft", "dft3m", "rfft", "rfft_tf32")

    def forward(self, x, w, b):
        a = self.layer.forward(x, w, b)
        return a.copy() if self.persistent else a

    def backward(self, g, need_dx: bool):
        dw, dx, db = self.layer.backward(g)
        if self.persistent:
            dx = dx.copy()
        return dw.copy(), dx, db.copy()


class CpuDenseCore:
    def forward(self, x, W, b):
        self.x = x
        self.W = W
        return x @ W.T + b

    def backward(self, g, need_dx: bool):
        return g.T @ self.x, (g @ self.W if need_dx else None), g.sum(axis=0)


class GpuDenseCore:
    """cuBLAS through :class:`pipeline.models.bcm.gpu.DenseLinear` (always computes dx)."""

    def __init__(self, precision: str):
        self.precision = precision
        self.layer = None

    def forward(self, x, W, b):
        from pipeline.models.bcm.gpu import DenseLinear
        if self.layer is None or self.layer.W is not W:
            self.layer = DenseLinear(W, self.precision)
        return self.layer.forward(x, b)

    def backward(self, g, need_dx: bool):
        return self.layer.backward(g)


# ------------------------------------------------------------------------------------ layers


class Linear:
    """y = x W^T + b on (rows, in_f) -> (rows, out_f); W dense (out, in) or BCM (p, q, k)."""

    def __init__(self, name: str, in_f: int, out_f: int, bcm: bool, k: int, net: "Net"):
        self.name, self.in_f, self.out_f, self.bcm, self.net = name, in_f, out_f, bcm, net
        xp = net.xp
        if bcm:
            self.p, self.q, self.out_p, self.in_p = ref.blocks(out_f, in_f, k)
            self.k = k
            self.core = (GpuBcmCore(self.p, self.q, k, net.variant) if net.cuda else CpuBcmCore(self.p, self.q, k))
            wshape, bshape = (self.p, self.q, k), (self.out_p,)
        else:
            self.out_p, self.in_p = out_f, in_f
            self.core = GpuDenseCore(net.precision) if net.cuda else CpuDenseCore()
            wshape, bshape = (out_f, in_f), (out_f,)
        self.W = xp.zeros(wshape, net.dtype)
        self.b = xp.zeros(bshape, net.dtype)

    def init(self, rng: np.random.Generator, last: bool) -> None:
        """He-normal (std sqrt(2/fan_in); sqrt(1/fan_in) for the output layer), zero bias. A BCM
        block's defining vector gets the same std: each output still sums fan_in products."""
        std = np.sqrt((1.0 if last else 2.0) / self.in_f)
        w = (rng.standard_normal(self.W.shape) * std).astype(self.W.dtype)
        self.W[...] = self.net.xp.asarray(w)
        self.b[...] = 0

    def forward(self, x):
        xp = self.net.xp
        if self.in_p != self.in_f:
            x = xp.pad(x, ((0, 0), (0, self.in_p - self.in_f)))
        a = self.core.forward(xp.ascontiguousarray(x), self.W, self.b)
        return a[:, :self.out_f] if self.out_p != self.out_f else a

    def backward(self, g, need_dx: bool = True):
        xp = self.net.xp
        if self.out_p != self.out_f:
            g = xp.pad(g, ((0, 0), (0, self.out_p - self.out_f)))
        dW, dx, db = self.core.backward(xp.ascontiguousarray(g), need_dx)
        if dx is not None and self.in_p != self.in_f:
            dx = dx[:, :self.in_f]
        return dW, dx, db


class Net:
    """The network: forward, backward (gradients into ``self.grads``), SGD with momentum."""

    def __init__(self, spec: Sequence[Spec], input_shape: Tuple[int, int, int], bcm: bool, k: int,
                 cuda: bool = False, variant: str = "tiled", precision: str = "fp32", dtype=np.float32):
        self.spec, self.input_shape, self.use_bcm, self.k = list(spec), input_shape, bcm, k
        self.cuda, self.variant, self.precision, self.dtype = cuda, variant, precision, np.dtype(dtype)
        if cuda:
            import cupy
            self.xp = cupy
        else:
            self.xp = np
        # time spent in the linear products (BCM or dense, incl. im2col/col2im), summed per epoch
        self.timer = IntervalSum("cuda" if cuda else "cpu")
        sizes = _linear_sizes(self.spec, input_shape)
        self.layers: List[Tuple[Spec, Optional[Linear]]] = [
            (s, Linear(f"{s[0]}{i}", *sizes[i], bcm and s[2], k, self) if i in sizes else None)
            for i, s in enumerate(self.spec)]
        self.linears = [lin for _, lin in self.layers if lin is not None]
        self.velocity: Dict[int, object] = {}

    # ---------------------------------------------------------------------------- parameters
    def init(self, seed: int) -> None:
        """Seeded init; layer i draws from its own stream, so the dense and BCM networks share
        the initial weights of the layers that are dense in both."""
        last = self.linears[-1]
        for i, lin in enumerate(self.linears):
            lin.init(np.random.default_rng([seed, i]), lin is last)
        self.velocity = {}

    def params(self) -> List[Tuple[str, object]]:
        return [(f"{lin.name}.{a}", getattr(lin, a)) for lin in self.linears for a in "Wb"]

    @property
    def n_weights(self) -> int:
        return sum(int(lin.W.size) for lin in self.linears)

    @property
    def n_dense_weights(self) -> int:
        return sum(lin.in_f * lin.out_f for lin in self.linears)

    def release(self) -> None:
        """Drop what the passes cached (activations, FFTs, the kernels' per-shape buffers) so that
        a finished network keeps only its parameters on the device."""
        self.cache = []
        self.grads = []
        self.velocity = {}
        for lin in self.linears:
            core = lin.core
            if isinstance(core, GpuBcmCore):
                core.layer._bufs.clear()
                for attr in ("x", "w", "xf", "wf", "xt", "wt"):
                    if hasattr(core.layer, attr):
                        setattr(core.layer, attr, None)
            elif isinstance(core, GpuDenseCore):
                core.layer = None
            else:
                core.__dict__.pop("xf", None), core.__dict__.pop("wf", None), core.__dict__.pop("x", None)

    def describe(self) -> str:
        """e.g. 'conv27-64 relu conv576-64[BCM] ... fc1024-10' (im2col sizes for conv layers)."""
        return " ".join(s[0] if lin is None else f"{s[0]}{lin.in_f}-{lin.out_f}" + ("[BCM]" if lin.bcm else "")
                        for s, lin in self.layers if s[0] != "flatten")

    def bcm_layers(self) -> List[str]:
        return [lin.name for lin in self.linears if lin.bcm]

    # ------------------------------------------------------------------------------- passes
    def _im2col(self, x, s):
        if self.cuda:
            from pipeline.models.bcm import gpu
            return gpu.im2col(self.xp.ascontiguousarray(x), s)
        return ref.im2col(x, s)

    def _col2im(self, cols, s):
        if self.cuda:
            from pipeline.models.bcm import gpu
            return gpu.col2im(self.xp.ascontiguousarray(cols), s)
        return ref.col2im(cols, s)

    def forward(self, x, train: bool = True):
        """x (n, h, w, c) -> logits (n, classes); caches what backward needs."""
        xp = self.xp
        self.cache: List = []
        for s, lin in self.layers:
            kind = s[0]
            if kind == "conv":
                n, h, w, c = x.shape
                cs = ref.ConvShape(n=n, h=h, w=w, c=c, cout=s[1])
                t0 = self.timer.start()
                y = lin.forward(self._im2col(x, cs)).reshape(cs.n, cs.ho, cs.wo, cs.cout)
                self.timer.stop(t0)
                self.cache.append(cs)
                x = y
            elif kind == "fc":
                t0 = self.timer.start()
                x = lin.forward(x)
                self.timer.stop(t0)
                self.cache.append(None)
            elif kind == "relu":
                x = xp.maximum(x, 0)
                self.cache.append(x)
            elif kind == "pool":
                n, h, w, c = x.shape
                xr = x.reshape(n, h // 2, 2, w // 2, 2, c)
                y = xr.max(axis=(2, 4))
                self.cache.append((xr, y) if train else None)
                x = y
            elif kind == "flatten":
                self.cache.append(x.shape)
                x = x.reshape(x.shape[0], -1)
        return x

    def backward(self, g) -> None:
        """g = dL/dlogits -> ``self.grads`` (list aligned with params())."""
        grads: Dict[str, Tuple] = {}
        first = self.linears[0]
        for (s, lin), c in zip(reversed(self.layers), reversed(self.cache)):
            kind = s[0]
            if kind == "conv":
                cs = c
                t0 = self.timer.start()
                dW, dcols, db = lin.backward(g.reshape(cs.rows, cs.cout), need_dx=lin is not first)
                g = self._col2im(dcols, cs) if dcols is not None and lin is not first else None
                self.timer.stop(t0)
                grads[lin.name] = (dW, db)
            elif kind == "fc":
                t0 = self.timer.start()
                dW, g, db = lin.backward(g, need_dx=lin is not first)
                self.timer.stop(t0)
                grads[lin.name] = (dW, db)
            elif kind == "relu":
                g = g * (c > 0)
            elif kind == "pool":
                xr, y = c
                mask = xr == y[:, :, None, :, None, :]
                g = (mask * g[:, :, None, :, None, :]).reshape(xr.shape[0], xr.shape[1] * 2, xr.shape[3] * 2,
                                                               xr.shape[5])
            elif kind == "flatten":
                g = g.reshape(c)
        self.grads = [g for lin in self.linears for g in grads[lin.name]]

    def loss(self, logits, y):
        """Mean softmax cross-entropy and its gradient w.r.t. the logits."""
        xp = self.xp
        z = logits - logits.max(axis=1, keepdims=True)
        ez = xp.exp(z)
        s = ez.sum(axis=1, keepdims=True)
        n = logits.shape[0]
        rows = xp.arange(n)
        loss = (xp.log(s[:, 0]) - z[rows, y]).mean()
        g = ez / s
        g[rows, y] -= 1
        return loss, g / n

    def step(self, lr: float, momentum: float, weight_decay: float, clip_norm: float = 0.0) -> None:
        """SGD with momentum; weight decay on the weights (not the biases); the gradients are first
        scaled so that their global L2 norm is at most ``clip_norm`` (0: no clipping), on the
        device without a host synchronisation."""
        xp = self.xp
        scale = None
        if clip_norm > 0:
            sq = sum((g.astype(xp.float32, copy=False) ** 2).sum() for g in self.grads)
            scale = xp.minimum(1.0, clip_norm / (xp.sqrt(sq) + 1e-12)).astype(self.dtype)
        for i, ((name, p), g) in enumerate(zip(self.params(), self.grads)):
            if scale is not None:
                g = g * scale
            if name.endswith(".W") and weight_decay:
                g = g + weight_decay * p
            v = self.velocity.get(i)
            if v is None:
                v = self.velocity[i] = g.copy()
            else:
                v *= momentum
                v += g
            p -= lr * v

    def train_step(self, x, y, lr: float, momentum: float, weight_decay: float, clip_norm: float = 0.0):
        logits = self.forward(x, train=True)
        loss, g = self.loss(logits, y)
        self.backward(g)
        self.step(lr, momentum, weight_decay, clip_norm)
        return loss

    def predict(self, x):
        return self.forward(x, train=False).argmax(axis=1)
