"""HPEC Sparse DNN Challenge data: the official TSV files and the packaged npz (data/hpec-1024).

Official formats (all 1-based, tab separated): weights ``n{N}-l{k}.tsv`` (``row col value``, row =
input neuron, col = output neuron, so a layer computes ``Z = Y @ W``), inputs
``sparse-images-{N}.tsv`` (``image pixel value``) and golden ``neuron{N}-l{L}-categories.tsv`` (one
image index per line). Loaders return 0-based SciPy CSR float32 matrices; a malformed line, an index
out of range, a layer of another size or a golden file of the wrong length raises a one-line
:class:`DataError` naming the file and line. So does an incomplete file where the challenge says what
a whole one holds: a layer of N = 1024 ... 65536 without 32 edges into every neuron, an input file of
60000 images without Table 1's nonzeros, a golden file for all 60000 images beside an input file of
fewer. Parsed TSV is cached (``cached_arrays``) only after the whole file has been checked, so nothing
is cached from a broken file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import scipy.sparse as sp

from pipeline.data import F32_MAX
from pipeline.data.cache import cached_arrays, file_stamp
from pipeline.errors import DataError

# Paper Table 1: the bias of each network size.
BIAS = {1024: -0.30, 4096: -0.35, 16384: -0.40, 65536: -0.45}
# Known lengths of the official golden files (counted in the challenge's files).
GOLDEN_COUNT = {(1024, 120): 1812}
YMAX = 32.0
# The challenge's networks (RadiX-Net, N in BIAS): 32 edges into (and out of) every neuron of every layer.
FAN_IN = 32
# Its inputs: 60000 MNIST-derived images; Table 1 "Nonzeros" (entries of sparse-images-{N}.tsv) per N.
IMAGES = 60000
INPUT_NNZ = {1024: 6_374_505, 4096: 25_019_051, 16384: 98_858_913, 65536: 392_191_985}
CACHE_VERSION = 2      # 2: entries cached before the completeness checks are read again


@dataclass
class Network:
    """A sparse DNN and its inputs, host side (0-based, float32)."""
    name: str
    N: int
    bias: float
    ymax: float
    layers: List[sp.csr_matrix]                 # each N x N, W[i, j] = edge input i -> output j
    Y0: sp.csr_matrix                           # images x N
    golden: Optional[np.ndarray] = None         # 0-based categories, None: compute with the reference
    meta: Dict[str, object] = field(default_factory=dict)

    @property
    def L(self) -> int:
        return len(self.layers)

    @property
    def images(self) -> int:
        return self.Y0.shape[0]

    def edges(self) -> int:
        lazy = getattr(self.layers, "edges", None)     # a lazy radixnet.Layers counts without generating
        return int(lazy if lazy is not None else sum(w.nnz for w in self.layers))


# ------------------------------------------------------------------------------ TSV parsing

def _bad_line(path: Path, lines: Sequence[str], ncols: int, kinds: str) -> DataError:
    """Find the first malformed line (slow path, only after the fast parse failed)."""
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            return DataError(f"{path}:{i}: empty line; expected {ncols} tab-separated fields")
        parts = s.split()
        if len(parts) != ncols:
            return DataError(f"{path}:{i}: {len(parts)} field(s) in {s[:60]!r}; expected {ncols} "
                             f"({kinds})")
        for j, p in enumerate(parts):
            try:
                v = float(p)
            except ValueError:
                return DataError(f"{path}:{i}: field {j + 1} {p!r} is not a number ({kinds})")
            if j < 2 and v != int(v):
                return DataError(f"{path}:{i}: field {j + 1} {p!r} is not an integer index ({kinds})")
            if not np.isfinite(v):
                return DataError(f"{path}:{i}: field {j + 1} {p!r} is not finite ({kinds})")
            if j >= 2 and abs(v) > F32_MAX:
                return DataError(f"{path}:{i}: field {j + 1} {p!r} does not fit in float32 ({kinds})")
    return DataError(f"{path}: cannot be parsed as {ncols} columns ({kinds})")


def read_table(path, ncols: int, kinds: str) -> np.ndarray:
    """The numeric table of a TSV file, float64 (rows, ncols); DataError naming file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from e
    lines = text.rstrip().splitlines()
    if not lines:
        raise DataError(f"{path}:1: the file is empty; expected {ncols} fields per line ({kinds})")
    try:
        tab = np.array(text.split(), dtype=np.float64).reshape(len(lines), ncols)
    except ValueError:               # a field that is not a number, or too many or too few
        raise _bad_line(path, lines, ncols, kinds) from None
    # a line with too many fields plus one with too few keep the total right: checked per line
    # (below 2M lines), as are blank lines, indices and values
    if re.search(r"\n\s*\n", text.rstrip()) or not np.all(np.isfinite(tab)) \
            or not np.all(tab[:, :2] == np.floor(tab[:, :2])) or np.any(np.abs(tab[:, 2:]) > F32_MAX) \
            or (len(lines) < 2_000_000 and any(len(line.split()) != ncols for line in lines)):
        raise _bad_line(path, lines, ncols, kinds)
    return tab


def _index(v: float) -> str:
    """An index as read (a float of the table), as a message shows it: digits, or 1e+300 when huge."""
    return f"{int(v)}" if abs(v) < 1e15 else f"{v:g}"


def _check_range(path: Path, tab: np.ndarray, col: int, lo: int, hi: int, what: str) -> None:
    bad = np.flatnonzero((tab[:, col] < lo) | (tab[:, col] > hi))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{path}:{i + 1}: {what} {_index(tab[i, col])} is out of range {lo}..{hi}")


def _check_unique(path: Path, r: np.ndarray, c: np.ndarray, width: int, where: str = "") -> None:
    """DataError at the first repeated (r, c) pair (0-based): at its line, reported 1-based as the
    TSV files are, or (``where``, an npz) at its entry, reported 0-based as the npz files are."""
    key = r * width + c
    if np.unique(key).size != key.size:
        _, first = np.unique(key, return_index=True)
        dup = int(np.setdiff1d(np.arange(key.size), first)[0])
        at, o = (f"{path}: {where} entry {dup}", 0) if where else (f"{path}:{dup + 1}", 1)
        raise DataError(f"{at}: duplicate entry ({r[dup] + o}, {c[dup] + o}); each pair may appear once")


def _check_fan_in(path: Path, c: np.ndarray, N: int) -> None:
    """A layer of the challenge's networks (N in BIAS) has FAN_IN edges into every neuron (``c``:
    0-based output neurons): a file cut short has fewer."""
    if N not in BIAS:
        return
    want = FAN_IN * N
    if c.size != want:
        why = "the file is truncated; fetch it again" if c.size < want else "not a layer of the challenge's networks"
        raise DataError(f"{path}: layer has {c.size} edges, expected {want} ({FAN_IN} per neuron x {N}): {why}")
    fan = np.bincount(c, minlength=N)
    if np.any(fan != FAN_IN):
        j = int(np.flatnonzero(fan != FAN_IN)[0])
        raise DataError(f"{path}: neuron {j + 1} has {fan[j]} in-edges, expected {FAN_IN} (as every neuron of the "
                        f"challenge's layers): the file is damaged; fetch it again")


def read_layer_tsv(path, N: int) -> sp.csr_matrix:
    """One weight layer ``n{N}-l{k}.tsv`` -> N x N CSR float32 (0-based)."""
    path = Path(path)
    tab = read_table(path, 3, "row<TAB>col<TAB>value, 1-based")
    top = float(tab[:, :2].max())
    if top > N:
        i = int(np.flatnonzero(tab[:, :2].max(axis=1) == top)[0])
        if top > 1 << 31:
            raise DataError(f"{path}:{i + 1}: neuron index {_index(top)} is out of range 1..{N} (row<TAB>col<TAB>value)")
        raise DataError(f"{path}:{i + 1}: neuron index {int(top)} > N={N}: this layer belongs to a larger "
                        f"network; set dataset.neurons to its size")
    top = int(top)
    _check_range(path, tab, 0, 1, N, "row (input neuron)")
    _check_range(path, tab, 1, 1, N, "col (output neuron)")
    if top < N:
        raise DataError(f"{path}:{len(tab)}: the layer only reaches neuron {top} < N={N}: its size differs "
                        f"from N; set dataset.neurons to the network's size")
    r = tab[:, 0].astype(np.int64) - 1
    c = tab[:, 1].astype(np.int64) - 1
    _check_unique(path, r, c, N)
    _check_fan_in(path, c, N)
    W = sp.csr_matrix((tab[:, 2].astype(np.float32), (r, c)), shape=(N, N), dtype=np.float32)
    W.sort_indices()
    return W


def read_images_tsv(path, N: int, images: int = 0) -> sp.csr_matrix:
    """``sparse-images-{N}.tsv`` -> (images x N) CSR float32; ``images`` = 0: as many as the file has."""
    path = Path(path)
    tab = read_table(path, 3, "image<TAB>pixel<TAB>value, 1-based")
    n_img = int(tab[:, 0].max())
    _check_range(path, tab, 0, 1, 1 << 31, "image index")
    _check_range(path, tab, 1, 1, N, "pixel (neuron) index")
    r, c = tab[:, 0].astype(np.int64) - 1, tab[:, 1].astype(np.int64) - 1
    Y0 = sp.csr_matrix((tab[:, 2].astype(np.float32), (r, c)), shape=(n_img, N), dtype=np.float32)
    if Y0.nnz != len(tab):                       # the conversion merged a repeated (image, pixel)
        _check_unique(path, r, c, N)
    if n_img == IMAGES and N in INPUT_NNZ and len(tab) != INPUT_NNZ[N]:
        why = "the file is truncated; fetch it again" if len(tab) < INPUT_NNZ[N] else "not the challenge's input file"
        raise DataError(f"{path}: {len(tab)} entries for {IMAGES} images, expected {INPUT_NNZ[N]} (Table 1's "
                        f"nonzeros of sparse-images-{N}.tsv): {why}")
    if images:
        Y0.resize((images, N))                   # the first ``images`` rows (empty rows past the file's)
    Y0.sort_indices()
    return Y0


def read_categories_tsv(path, images: int, expected: Optional[int] = None) -> np.ndarray:
    """Golden ``neuron{N}-l{L}-categories.tsv`` -> sorted 0-based int64 image indices."""
    path = Path(path)
    tab = read_table(path, 1, "one 1-based image index per line")
    _check_range(path, tab, 0, 1, 1 << 31, "image index")
    cats = tab[:, 0].astype(np.int64)
    if np.any(np.diff(cats) <= 0):
        i = int(np.flatnonzero(np.diff(cats) <= 0)[0]) + 1
        raise DataError(f"{path}:{i + 1}: image index {cats[i]} is not ascending (after {cats[i - 1]})")
    if expected is not None and cats.size != expected:
        raise DataError(f"{path}:{cats.size}: the golden file has {cats.size} lines but this network's "
                        f"golden set has {expected}: wrong or truncated file")
    return cats - 1


def load_tsv(folder, N: int, L: int, images: int = 0, bias: Optional[float] = None, ymax: float = YMAX,
             golden: str = "", cache_dir: Optional[str] = None, progress=None, strict: bool = True) -> Network:
    """The official files from ``folder``: weights in ``folder`` or ``folder/neuron{N}/``, inputs
    ``sparse-images-{N}.tsv`` and golden ``neuron{N}-l{L}-categories.tsv`` (optional). Each
    parsed layer is cached under ``cache_dir`` keyed by the file's path, size and mtime."""
    folder = Path(folder)
    wdir = folder / f"neuron{N}" if (folder / f"neuron{N}").is_dir() else folder
    files = [wdir / f"n{N}-l{k}.tsv" for k in range(1, L + 1)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise DataError(f"{missing[0]}: missing weight layer ({len(missing)} of {L} missing); "
                        f"dataset.layers={L} needs n{N}-l1..{L}.tsv")

    def cached(name: str, path: Path, read, square: bool) -> sp.csr_matrix:
        """``read(path, N)`` through the cache (the shape is stored unless N x N)."""
        def build():
            M = read(path, N)
            return {"indptr": M.indptr, "indices": M.indices, "data": M.data,
                    **({} if square else {"shape": np.array(M.shape)})}
        a = cached_arrays(cache_dir, f"hpec-{name}", {"v": CACHE_VERSION, "file": file_stamp(path)},
                          build) if cache_dir else build()
        return sp.csr_matrix((a["data"], a["indices"], a["indptr"]), shape=(N, N) if square else tuple(a["shape"]))

    layers = [cached(f"n{N}-layer", f, read_layer_tsv, True)
              for f in (progress(files, desc="weights") if progress else files)]
    img = folder / f"sparse-images-{N}.tsv"
    if not img.is_file():
        raise DataError(f"{img}: missing input file (sparse-images-{N}.tsv)")
    Y0 = cached(f"images{N}", img, read_images_tsv, False)
    n_all = Y0.shape[0]
    if images:
        if images > n_all and strict:
            raise DataError(f"{img}: has {n_all} images, dataset.images={images} asks for more")
        Y0 = Y0[:min(images, n_all)]
    gold = folder / (golden or f"neuron{N}-l{L}-categories.tsv")
    cats = None
    if gold.is_file():
        full = GOLDEN_COUNT.get((N, L))
        cats = read_categories_tsv(gold, n_all, full if n_all == IMAGES else None)
        if cats.size == full and n_all != IMAGES:
            raise DataError(f"{img}: has {n_all} images, but {gold} holds the {full} categories of the challenge's "
                            f"{IMAGES}: the input file is truncated; fetch it again (or give the golden file of "
                            f"its images: dataset.golden)")
        if cats.size and cats[-1] >= n_all:
            raise DataError(f"{gold}:{cats.size}: image index {cats[-1] + 1} > {n_all} images in {img.name}")
        cats = cats[cats < Y0.shape[0]]
    elif golden:
        raise DataError(f"{gold}: golden categories file not found (dataset.golden)")
    return Network(name=f"hpec-tsv-{N}-l{L}", N=N, bias=BIAS.get(N, -0.3) if bias is None else bias,
                   ymax=ymax, layers=layers, Y0=Y0, golden=cats,
                   meta={"source": str(folder), "golden_file": str(gold) if cats is not None else ""})


# ------------------------------------------------------------------------------ packaged npz

SOURCE = "see data/hpec-1024/SOURCE.md"
# the arrays of each packaged file: key -> (dimensions, dtype kinds)
NPZ_KEYS = {"weights.npz": {"row": (2, "iu"), "col": (2, "iu"), "val": (2, "f"), "N": (0, "iu"), "L": (0, "iu"),
                            "bias": (0, "fiu")},
            "inputs.npz": {"image": (1, "iu"), "pixel": (1, "iu"), "val": (1, "f"), "shape": (1, "iu")},
            "categories.npz": {"subset": (1, "iu"), "full": (1, "iu"), "n_images_subset": (0, "iu")}}
_KINDS = {"iu": "integer", "f": "float", "fiu": "number"}


def _npz(path: Path) -> Dict[str, np.ndarray]:
    """The arrays of one packaged file, each key of :data:`NPZ_KEYS` present with its dimensions and type."""
    if not path.is_file():
        raise DataError(f"{path}: {'is a directory, expected a file' if path.is_dir() else 'missing'} ({SOURCE})")
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except Exception as e:   # zipfile / format errors
        raise DataError(f"{path}: not a readable npz ({type(e).__name__}: {e}) ({SOURCE})") from e
    for key, (ndim, kinds) in NPZ_KEYS.get(path.name, {}).items():
        if key not in a:
            raise DataError(f"{path}: key '{key}' is missing ({SOURCE})")
        if a[key].ndim != ndim or a[key].dtype.kind not in kinds:
            raise DataError(f"{path}: '{key}' is {a[key].dtype} of shape {a[key].shape}, expected a {ndim}-d "
                            f"{_KINDS[kinds]} array ({SOURCE})")
    return a


def _check_finite(path: Path, key: str, a: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(np.ravel(a)))
    if bad.size:
        raise DataError(f"{path}: '{key}' holds {np.ravel(a)[bad[0]]} at flat index {int(bad[0])}; values must be "
                        f"finite ({SOURCE})")


def load_npz(folder, L: int = 0, images: int = 0, bias: Optional[float] = None,
             ymax: Optional[float] = None) -> Network:
    """The packaged official subset (data/hpec-1024): 120 layers, 1200 images, golden subset."""
    folder = Path(folder)
    fw, fx, fg = (folder / f for f in ("weights.npz", "inputs.npz", "categories.npz"))
    w, x, g = (_npz(f) for f in (fw, fx, fg))
    N, L_all = int(w["N"]), int(w["L"])
    if N < 1 or L_all < 1:
        raise DataError(f"{fw}: declares N={N} neurons and L={L_all} layers; both must be >= 1 ({SOURCE})")
    L = L or L_all
    if L > L_all:
        raise DataError(f"{fw}: holds {L_all} layers, dataset.layers={L} asks for more")
    if w["row"].shape[0] != L_all or w["row"].shape != w["col"].shape or w["row"].shape != w["val"].shape:
        raise DataError(f"{fw}: row/col/val shapes {w['row'].shape}/{w['col'].shape}/"
                        f"{w['val'].shape} disagree with L={L_all}")
    for key in ("val", "bias", "ymax"):
        if key in w:
            _check_finite(fw, key, w[key])
    layers = []
    for l in range(L):
        r, c = w["row"][l], w["col"][l]
        if r.min() < 0 or c.min() < 0 or r.max() >= N or c.max() >= N:
            raise DataError(f"{fw}: layer {l + 1} has an index outside 0..{N - 1}")
        W = sp.csr_matrix((w["val"][l].astype(np.float32), (r, c)), shape=(N, N), dtype=np.float32)
        if W.nnz != r.size:                      # the conversion merged a repeated (row, col)
            _check_unique(fw, r.astype(np.int64), c.astype(np.int64), N, f"layer {l + 1}")
        W.sort_indices()
        layers.append(W)
    if x["shape"].size != 2 or x["shape"].min() < 1:
        raise DataError(f"{fx}: 'shape' is {x['shape'].tolist()}, expected [images, pixels] ({SOURCE})")
    shape = tuple(int(s) for s in x["shape"])
    if shape[1] != N:
        raise DataError(f"{fx}: images have {shape[1]} pixels, the network has N={N}")
    if not x["image"].shape == x["pixel"].shape == x["val"].shape:
        raise DataError(f"{fx}: image/pixel/val lengths {x['image'].size}/{x['pixel'].size}/{x['val'].size} "
                        f"differ ({SOURCE})")
    for key, top in (("image", shape[0]), ("pixel", N)):
        bad = np.flatnonzero((x[key] < 0) | (x[key] >= top))
        if bad.size:
            raise DataError(f"{fx}: entry {int(bad[0])} has {key} {int(x[key][bad[0]])} outside 0..{top - 1} ({SOURCE})")
    _check_finite(fx, "val", x["val"])
    Y0 = sp.csr_matrix((x["val"].astype(np.float32), (x["image"], x["pixel"])), shape=shape, dtype=np.float32)
    if Y0.nnz != x["val"].size:
        _check_unique(fx, x["image"].astype(np.int64), x["pixel"].astype(np.int64), N, "image/pixel")
    subset = np.asarray(g["subset"], np.int64)
    if int(g["n_images_subset"]) != shape[0]:
        raise DataError(f"{fg}: golden subset is for {int(g['n_images_subset'])} images, "
                        f"inputs.npz has {shape[0]}")
    bad = np.flatnonzero((subset < 0) | (subset >= shape[0]) | np.r_[False, np.diff(subset) <= 0])
    if bad.size:
        raise DataError(f"{fg}: 'subset' entry {int(bad[0])} is image {int(subset[bad[0]])}: the golden subset must "
                        f"be ascending image indices in 0..{shape[0] - 1} ({SOURCE})")
    golden = subset if L == L_all else None       # the golden set is for the full 120 layers
    if images:
        if images > shape[0]:
            raise DataError(f"{fx}: has {shape[0]} images, dataset.images={images} asks for more")
        Y0 = Y0[:images]
        golden = None if golden is None else golden[golden < images]
    b = float(w["bias"]) if bias is None else bias
    return Network(name=f"hpec-{N}-l{L}", N=N, bias=b, ymax=float(w.get("ymax", YMAX)) if ymax is None else ymax,
                   layers=layers, Y0=Y0, golden=golden,
                   meta={"source": str(folder), "golden_full": np.asarray(g["full"], np.int64)})


def write_tsv_layer(path, W: sp.spmatrix) -> None:
    """Write a layer in the official format (1-based, sorted by (col, row)); used by tests/tools."""
    C = sp.csc_matrix(W)
    C.sort_indices()
    coo = C.tocoo()
    with open(path, "w") as f:
        for r, c, v in zip(coo.row, coo.col, coo.data):
            f.write(f"{r + 1}\t{c + 1}\t{v:.6e}\n")
