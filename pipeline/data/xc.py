"""Extreme Classification Repository (XMLRepo) text format: the one reader.

Format (plain or gzip, detected by content)::

    N F L                       # rows, features, labels
    l1,l2,... f:v f:v ...       # one row per sample, 0-based ids
     f:v f:v ...                # a row without labels starts with a space (kept, all-zero Y row)

Labels and feature ids are non-negative integers below L and F; values are finite decimals (an
exponent is allowed). Rows are read in order; ids need not be sorted (rows come out canonical:
sorted, duplicates merged: a repeated label counts once, a repeated feature's values add up). Line
endings may be CRLF; blank lines past the N declared rows are ignored.

The parser reads the file in blocks of whole lines and tokenises each block with NumPy (no Python
loop over rows or tokens; numbers of up to 8 characters are decoded eight bytes at a time in one
64-bit word): a 0.6 GB Amazon-670K-sized file takes about 10 s of one core. Anything malformed
raises a one-line :class:`DataError` ``<file>:<line>: <what> (fix or remove that line)`` (the
header is line 1); the cache only stores what parsed cleanly, so nothing is cached from a broken
file.

The dataset entry (real files, or the seeded generator of :mod:`pipeline.data.xc_synth`) is
:func:`pipeline.data.xc_dataset.load`.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from numpy.lib.stride_tricks import sliding_window_view

from pipeline.data import READ_ERRORS
from pipeline.data.cache import cached_arrays, file_stamp
from pipeline.errors import DataError

BLOCK_BYTES = 16 << 20          # bytes parsed at a time (whole lines); bounds the parser's memory
CACHE_VERSION = 1


@dataclass
class XCSplit:
    X: sp.csr_matrix            # float32 (n, F), canonical (sorted indices, no duplicates)
    Y: sp.csr_matrix            # float32 (n, L), entries 1.0, canonical; rows may be empty

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    def stats(self) -> Dict[str, float]:
        n = max(self.n, 1)
        return {"rows": self.n, "nnz_per_row": self.X.nnz / n, "labels_per_row": self.Y.nnz / n,
                "rows_without_labels": int(np.count_nonzero(np.diff(self.Y.indptr) == 0)),
                "max_labels_per_row": int(np.diff(self.Y.indptr).max(initial=0))}


@dataclass
class XCData:
    name: str
    train: XCSplit
    test: XCSplit
    n_features: int
    n_labels: int
    source: str                 # "real: <path>" or "generated: <key params>"

    @property
    def max_labels_per_row(self) -> int:
        return int(np.diff(self.train.Y.indptr).max(initial=0))


# ------------------------------------------------------------------------------------ reading

# byte classes: 0 token character, 1 blank (space, tab, CR), 2 ',', 3 ':', 4 newline
_TOK, _WS, _COMMA, _COLON, _NL = 0, 1, 2, 3, 4
_CLASS = np.zeros(256, np.uint8)
_CLASS[[ord(" "), ord("\t"), ord("\r"), ord("\v"), ord("\f")]] = _WS
_CLASS[ord(",")] = _COMMA
_CLASS[ord(":")] = _COLON
_CLASS[ord("\n")] = _NL
_FAST_LEN = 24                  # longer tokens take the exact slow path (Python's float/int)
_POW10 = 10.0 ** np.arange(23)  # exactly representable powers of ten


def _blocks(f: BinaryIO, first: bytes, size: int) -> Iterator[bytes]:
    """Blocks of whole lines (each ending with a newline), starting with ``first``."""
    rest = first
    while True:
        chunk = f.read(size)
        if not chunk:
            break
        buf = rest + chunk
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            rest = buf          # a line longer than the block: keep reading
            continue
        yield buf[:cut]
        rest = buf[cut:]
    if rest:
        yield rest if rest.endswith(b"\n") else rest + b"\n"


class _Bad(Exception):
    """A problem at byte offset ``pos`` of the block (turned into file:line by the caller)."""

    def __init__(self, pos: int, why: str):
        super().__init__(why)
        self.pos, self.why = pos, why


def _shown(a: np.ndarray, s: int, e: int) -> str:
    t = bytes(a[s:min(e, s + 40)]).decode("utf-8", "replace")
    return repr(t + ("..." if e - s > 40 else ""))


_U = np.uint64
_ONES = {b: _U(int.from_bytes(bytes([b]) * 8, "little")) for b in (0x0F, 0x1E, 0x2E, 0x30, 0x06, 0x7F, 0xF0)}
# token of length l (1..8) moved to the high bytes of a word, the low bytes filled with '0'
_SHIFT = np.array([0] + [8 * (8 - l) for l in range(1, 9)], np.uint64)
_KEEP = np.array([0] + [(1 << (8 * l)) - 1 for l in range(1, 9)], np.uint64)
_FILL = np.array([0] + [int.from_bytes(b"0" * (8 - l), "little") for l in range(1, 9)], np.uint64)
# dropping a '.' at byte j (8: no '.'): (x & _BELOW[j]) << 8 | (x & _ABOVE[j]) | _ZERO[j]
_BELOW = np.array([(1 << (8 * j)) - 1 for j in range(8)] + [0], np.uint64)
_ABOVE = np.array([((1 << 64) - 1) ^ ((1 << (8 * (j + 1))) - 1) for j in range(8)] + [(1 << 64) - 1], np.uint64)
_ZERO = np.array([0x30] * 8 + [0], np.uint64)
_FRAC = np.array([7 - j for j in range(8)] + [0], np.int64)
_SWAR_CHUNK = 1 << 15     # tokens at a time: the temporaries stay in the CPU cache


def _scan_swar(words: np.ndarray, starts: np.ndarray, lens: np.ndarray, dots: bool = True):
    """``_scan_plain`` for tokens of at most 8 bytes, eight bytes at a time in one uint64 word
    (SWAR): the token right-aligned behind '0' padding, a '.' found and dropped, every byte
    checked to be a digit, the digits combined in three multiply-shift steps."""
    n = starts.size
    mant = np.empty(n, np.int64)
    frac = np.zeros(n, np.int64)
    has_dot = np.zeros(n, bool)
    ok = np.empty(n, bool)
    for c0 in range(0, n, _SWAR_CHUNK):
        sl = slice(c0, min(n, c0 + _SWAR_CHUNK))
        l8 = np.minimum(lens[sl], 8)
        x = words[starts[sl]]
        x &= _KEEP[l8]
        x <<= _SHIFT[l8]
        x |= _FILL[l8]
        good = l8 >= 1
        if dots:
            d = x ^ _ONES[0x2E]                           # zero bytes where x holds a '.'
            y = d & _ONES[0x7F]
            y += _ONES[0x7F]
            y |= d
            y |= _ONES[0x7F]
            np.invert(y, out=y)                           # 0x80 in each '.' byte, exactly
            ndot = np.bitwise_count(y)
            y -= _U(1)
            j = (np.bitwise_count(y) - np.uint8(7)) >> np.uint8(3)     # byte of the '.'
            j += ndot == 0                                # 8: none
            d = x & _BELOW[j]
            d <<= _U(8)
            x &= _ABOVE[j]
            x |= d
            x |= _ZERO[j]
            good &= (ndot <= 1) & (l8 > ndot)
            frac[sl] = _FRAC[j]
            has_dot[sl] = ndot == 1
        d = x & _ONES[0xF0]
        good &= d == _ONES[0x30]
        d = x + _ONES[0x06]
        d &= _ONES[0xF0]
        good &= d == _ONES[0x30]
        ok[sl] = good
        x &= _ONES[0x0F]
        d = x >> _U(8)
        x *= _U(10)
        x += d
        x &= _U(0x00FF00FF00FF00FF)
        d = x >> _U(16)
        x *= _U(100)
        x += d
        x &= _U(0x0000FFFF0000FFFF)
        d = x >> _U(32)
        x *= _U(10000)
        x += d
        x &= _U(0xFFFFFFFF)
        mant[sl] = x
    return mant, frac, has_dot, ok


def _scan_plain(a: np.ndarray, words: np.ndarray, starts: np.ndarray, lens: np.ndarray, dots: bool = True):
    """Fast path for tokens of digits with at most one '.' (``dots``; 15 digits at most):
    ``(mant, frac_digits, has_dot, simple)``. Tokens of up to 8 bytes go through
    :func:`_scan_swar`; longer ones are gathered, one length at a time, as rows of a byte matrix
    (a strided view, no index arrays) and their digits combined by one exact float64
    matrix-vector product per position of the dot."""
    n = starts.size
    mant = np.zeros(n, np.int64)
    frac = np.zeros(n, np.int64)
    has_dot = np.zeros(n, bool)
    simple = np.zeros(n, bool)
    if n == 0:
        return mant, frac, has_dot, simple
    short = lens <= 8
    if short.all():
        return _scan_swar(words, starts, lens, dots)
    if short.any():
        i = np.flatnonzero(short)
        mant[i], frac[i], has_dot[i], simple[i] = _scan_swar(words, starts[i], lens[i], dots)
    counts = np.bincount(np.minimum(lens, 17))
    counts[:9] = 0
    lengths = np.flatnonzero(counts[:17])
    for ell in lengths.tolist():
        sel = np.flatnonzero(lens == ell) if counts[ell] < n else np.arange(n)
        M = sliding_window_view(a, ell)[starts[sel]]
        D = M - np.uint8(48)                     # digits 0..9; others wrap around
        isdot = M == 46
        ndot = isdot.sum(1)
        good = ((D < 10) | isdot).all(1) & (ndot <= 1) & (ell - ndot >= 1) & (ell - ndot <= 15)
        k = np.where(ndot == 1, isdot.argmax(1), ell)     # column of the dot (ell: none)
        D = np.where(isdot, np.uint8(0), D)
        kcount = np.bincount(k[good], minlength=ell + 1)
        for kk in np.flatnonzero(kcount).tolist():
            rows = np.flatnonzero(good & (k == kk)) if kcount[kk] < sel.size else np.arange(sel.size)
            cols = np.arange(ell)
            right = ell - 1 - cols - ((cols < kk) & (kk < ell))         # digits to the right of each column
            w = np.where(cols == kk, 0.0, 10.0 ** np.maximum(right, 0))
            mant[sel[rows]] = (D[rows].astype(np.float64) @ w).astype(np.int64)
            frac[sel[rows]] = ell - 1 - kk if kk < ell else 0
            has_dot[sel[rows]] = kk < ell
            simple[sel[rows]] = True
    return mant, frac, has_dot, simple


def _scan_numbers(a: np.ndarray, starts: np.ndarray, lens: np.ndarray):
    """Vectorised decimal scan of tokens a[s:s+len]: ``(mant, frac_digits, exp10, sign, simple)``.
    ``simple`` marks tokens of the form [+-]digits[.digits][(e|E)[+-]digits] with at most 18
    mantissa digits; the others (nan, inf, garbage, very long) are for the exact slow path."""
    n = starts.size
    mant = np.zeros(n, np.int64)
    frac = np.zeros(n, np.int64)
    ex = np.zeros(n, np.int64)
    ndig = np.zeros(n, np.int64)
    nexd = np.zeros(n, np.int64)
    neg = np.zeros(n, bool)
    eneg = np.zeros(n, bool)
    dot = np.zeros(n, bool)
    inexp = np.zeros(n, bool)
    ok = lens <= _FAST_LEN
    last = a.size - 1
    for j in range(int(min(lens.max(initial=0), _FAST_LEN))):
        act = ok & (lens > j)
        c = a[np.minimum(starts + j, last)].astype(np.int64)
        dig = (c >= 48) & (c <= 57)
        d = c - 48
        m_dig = act & dig & ~inexp
        mant = np.where(m_dig, mant * 10 + d, mant)
        frac += m_dig & dot
        ndig += m_dig
        e_dig = act & dig & inexp
        ex = np.where(e_dig, np.minimum(ex * 10 + d, 10_000), ex)
        nexd += e_dig
        sign = (c == 43) | (c == 45)
        lead = act & sign & (j == 0)
        neg |= lead & (c == 45)
        after_e = act & sign & inexp & (nexd == 0) & ((a[np.clip(starts + j - 1, 0, last)] | 32) == 101)
        eneg |= after_e & (c == 45)
        is_dot = act & (c == 46) & ~inexp & ~dot
        dot |= is_dot
        is_e = act & ((c | 32) == 101) & ~inexp & (ndig > 0)
        inexp |= is_e
        ok &= ~act | dig | lead | after_e | is_dot | is_e
    ok &= (ndig > 0) & (ndig <= 18) & (~inexp | (nexd > 0))
    return mant, frac, np.where(eneg, -ex, ex), neg, ok


def _parse_ids(a, words, starts, lens, what: str, limit: int, limit_name: str) -> np.ndarray:
    """Non-negative integer ids (plain digits) < limit, int64; _Bad at the first offending token."""
    val, _, has_dot, simple = _scan_plain(a, words, starts, lens, dots=False)
    ok = simple & ~has_dot
    big = ok & (val >= limit)
    first = np.flatnonzero(~ok | big)
    if first.size:
        i = int(first[0])
        s, e = int(starts[i]), int(starts[i] + lens[i])
        tok = bytes(a[s:e]).decode("utf-8", "replace")
        if big[i] or (tok.isascii() and tok.isdigit()):
            raise _Bad(s, f"{what} id {tok[:40]} >= {limit_name}={limit} declared in the header; "
                          f"ids are 0-based and must be below {limit_name}")
        if tok.startswith("-") and tok[1:].isascii() and tok[1:].isdigit():
            raise _Bad(s, f"negative {what} id {tok!r}; ids are 0-based non-negative integers")
        raise _Bad(s, f"{what} id {_shown(a, s, e)} is not a non-negative integer")
    return val


def _parse_values(a, words, starts, lens) -> np.ndarray:
    """Finite float32 values, correctly rounded (as strtod) on the fast paths: m / 10^k and
    m * 10^k are single roundings of exact operands."""
    mant, frac, _, simple = _scan_plain(a, words, starts, lens)
    v = mant / _POW10[frac]
    rest = np.flatnonzero(~simple)
    if rest.size:       # signs, exponents, long or odd tokens
        rs, rl = starts[rest], lens[rest]
        m2, f2, ex, neg, ok = _scan_numbers(a, rs, rl)
        p = ex - f2
        fast = ok & (np.abs(p) <= 22) & (m2 < (1 << 53))
        pw = _POW10[np.minimum(np.abs(p), 22)]
        m = m2.astype(np.float64)
        r = np.where(p >= 0, m * pw, m / pw)
        r = np.where(neg, -r, r)
        for j in np.flatnonzero(~fast):
            s, e = int(rs[j]), int(rs[j] + rl[j])
            try:
                r[j] = float(bytes(a[s:e]).decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                raise _Bad(s, f"value {_shown(a, s, e)} is not a number") from None
        v[rest] = r
    with np.errstate(over="ignore", invalid="ignore"):
        v32 = v.astype(np.float32)
    nonfinite = np.flatnonzero(~np.isfinite(v32))
    if nonfinite.size:
        i = int(nonfinite[0])
        s, e = int(starts[i]), int(starts[i] + lens[i])
        raise _Bad(s, f"value {_shown(a, s, e)} is not finite in float32 (NaN, inf or too large)")
    return v32


def _parse_block(buf: bytes, F: int, L: int):
    """Rows of one block: (lines, labels a line, label ids, features a line, feature ids, values,
    the last line holding a token)."""
    a = np.frombuffer(buf, np.uint8)
    c = _CLASS[a]
    tok = c == _TOK
    starts = np.flatnonzero(tok[1:] & ~tok[:-1]) + 1
    if tok[0]:
        starts = np.concatenate([[0], starts])
    ends = np.flatnonzero(tok[:-1] & ~tok[1:]) + 1   # buf ends with a newline: every token ends inside
    lens = ends - starts
    nl = np.flatnonzero(c == _NL)
    # ',' joins two labels and ':' a feature and its value: a token on both sides
    sep = np.flatnonzero((c == _COMMA) | (c == _COLON))
    if sep.size:
        badsep = sep[(sep == 0) | (c[np.maximum(sep - 1, 0)] != _TOK) | (c[sep + 1] != _TOK)]
        if badsep.size:
            p = int(badsep[0])
            ch = chr(a[p])
            raise _Bad(p, f"stray {ch!r} (',' joins two label ids, ':' a feature id and its value; "
                          f"a row without labels starts with a space)")
    prevc = np.where(starts > 0, c[np.maximum(starts - 1, 0)], _NL)
    nextc = c[ends]
    is_lab = ((prevc == _NL) | (prevc == _COMMA)) & (nextc != _COLON)
    is_feat = ((prevc == _NL) | (prevc == _WS)) & (nextc == _COLON)
    is_val = (prevc == _COLON) & ((nextc == _WS) | (nextc == _NL))
    other = np.flatnonzero(~(is_lab | is_feat | is_val))
    if other.size:
        i = int(other[0])
        s, e = int(starts[i]), int(ends[i])
        raise _Bad(s, f"token {_shown(a, s, e)} is neither a label (comma-separated, before the first "
                      f"space) nor 'feature:value'")
    li, fi, vi = np.flatnonzero(is_lab), np.flatnonzero(is_feat), np.flatnonzero(is_val)
    padded = np.zeros(a.size + 8, np.uint8)
    padded[:a.size] = a
    words = np.ndarray((a.size + 1,), "<u8", buffer=padded, strides=(1,))   # 8 bytes from each offset
    lab = _parse_ids(a, words, starts[li], lens[li], "label", L, "L")
    feat = _parse_ids(a, words, starts[fi], lens[fi], "feature", F, "F")
    val = _parse_values(a, words, starts[vi], lens[vi])
    lcount = np.bincount(np.searchsorted(nl, starts[li]), minlength=nl.size)
    fcount = np.bincount(np.searchsorted(nl, starts[fi]), minlength=nl.size)
    last = int(np.searchsorted(nl, starts[-1])) if starts.size else -1
    return nl.size, lcount, lab.astype(np.int32), fcount, feat.astype(np.int32), val, last


def _header(path: Path, line: bytes) -> Tuple[int, int, int]:
    text = line.decode("utf-8", "replace").strip()
    parts = text.split()
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise DataError(f"{path}:1: header {text[:60]!r} is not 'N F L' (three non-negative integers: "
                        f"rows, features, labels); is this an Extreme Classification Repository file?")
    N, F, L = (int(p) for p in parts)
    if F < 1 or L < 1:
        raise DataError(f"{path}:1: header {text!r} declares {F} features and {L} labels; both must be >= 1")
    if max(F, L) >= 2 ** 31:
        raise DataError(f"{path}:1: header {text!r} declares more than 2^31 - 1 features or labels; "
                        f"ids are stored as int32")
    return N, F, L


def read_xc(path, block_bytes: int = BLOCK_BYTES) -> Tuple[XCSplit, int, int]:
    """(split, F, L) of an XMLRepo text file (plain or gzip); DataError ``file:line: ...``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file (Extreme Classification Repository text file expected)")
    parts: List[Tuple[np.ndarray, ...]] = []
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open if gz else open)(path, "rb") as f:
        try:
            head = f.read(max(block_bytes, 1 << 16))
        except READ_ERRORS as e:
            raise DataError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
        if head.startswith(b"\xef\xbb\xbf"):       # a UTF-8 byte-order mark
            head = head[3:]
        cut = head.find(b"\n")
        if cut < 0 and len(head) >= max(block_bytes, 1 << 16):
            raise DataError(f"{path}:1: no header line ('N F L') within the first {len(head)} bytes")
        N, F, L = _header(path, head if cut < 0 else head[:cut])
        rows = 0
        try:
            for buf in _blocks(f, head[cut + 1:] if cut >= 0 else b"", block_bytes):
                try:
                    n, *part, last = _parse_block(buf, F, L)
                except _Bad as b:
                    line = 2 + rows + buf.count(b"\n", 0, b.pos)
                    raise DataError(f"{path}:{line}: {b.why} (fix or remove that line)") from None
                if last >= 0 and rows + last >= N:
                    raise DataError(f"{path}:1: header declares {N} rows but the file has more (a row at "
                                    f"line {rows + last + 2}); fix the header's first number")
                parts.append(tuple(part))
                rows += n
        except READ_ERRORS as e:     # a truncated or corrupt gzip stream
            raise DataError(f"{path}: cannot be read past row {rows} ({type(e).__name__}: {e})") from None
    if rows < N:
        raise DataError(f"{path}:1: header declares {N} rows but the file has {rows}; fix the header's "
                        f"first number or restore the missing rows")
    return _to_split(parts, N, F, L), F, L


def _to_split(parts, N: int, F: int, L: int) -> XCSplit:
    """One CSR pair from the blocks' (labels a line, label ids, features a line, feature ids,
    values); lines past N (blank, checked by the caller) are dropped; rows made canonical."""
    def cat(i, dtype):
        return np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype)

    def csr(counts, ids, vals, width):
        ptr = np.zeros(N + 1, np.int64)
        np.cumsum(counts[:N], out=ptr[1:])
        M = sp.csr_matrix((vals, ids, ptr), shape=(N, width), copy=False)
        M.sum_duplicates()       # sorts and merges repeats; only checks when already canonical
        return M
    X = csr(cat(2, np.int64), cat(3, np.int32), cat(4, np.float32), F)
    lid = cat(1, np.int32)
    Y = csr(cat(0, np.int64), lid, np.ones(lid.size, np.float32), L)
    Y.data[:] = 1.0              # a repeated label counts once
    return XCSplit(X, Y)


def write_xc(path, split: XCSplit, fmt: str = "%.6f") -> None:
    """Write a split in the XMLRepo text format (gzip when the name ends in .gz)."""
    path = Path(path)
    X, Y = split.X.tocsr(), split.Y.tocsr()
    lines = [f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}"]
    for i in range(X.shape[0]):
        labs = ",".join(map(str, Y.indices[Y.indptr[i]:Y.indptr[i + 1]]))
        s, e = X.indptr[i], X.indptr[i + 1]
        fv = " ".join(f"{j}:{fmt % v}" for j, v in zip(X.indices[s:e], X.data[s:e]))
        lines.append(f"{labs} {fv}".rstrip(" ") if labs else f" {fv}")
    data = ("\n".join(lines) + "\n").encode()
    tmp = path.with_name(f".{path.name}.tmp")
    with (gzip.open(tmp, "wb", compresslevel=3) if path.suffix == ".gz" else open(tmp, "wb")) as f:
        f.write(data)
    tmp.replace(path)


# ------------------------------------------------------------------------------------ caching

def split_arrays(s: XCSplit, prefix: str = "") -> Dict[str, np.ndarray]:
    return {f"{prefix}x_indptr": s.X.indptr, f"{prefix}x_indices": s.X.indices, f"{prefix}x_data": s.X.data,
            f"{prefix}y_indptr": s.Y.indptr, f"{prefix}y_indices": s.Y.indices}


def split_from_arrays(a: Dict[str, np.ndarray], F: int, L: int, prefix: str = "") -> XCSplit:
    n = a[f"{prefix}x_indptr"].size - 1
    X = sp.csr_matrix((a[f"{prefix}x_data"], a[f"{prefix}x_indices"], a[f"{prefix}x_indptr"]), shape=(n, F))
    yi = a[f"{prefix}y_indices"]
    Y = sp.csr_matrix((np.ones(yi.size, np.float32), yi, a[f"{prefix}y_indptr"]), shape=(n, L))
    X.has_canonical_format = True
    Y.has_canonical_format = True
    return XCSplit(X, Y)


def read_xc_cached(path, cache_dir: Optional[str]) -> Tuple[XCSplit, int, int]:
    """:func:`read_xc` through the cache, keyed by the file's path, size and mtime."""
    path = Path(path)
    if not cache_dir or not path.is_file():
        return read_xc(path)         # which says what is wrong with a missing file

    def build():
        s, F, L = read_xc(path)
        return {**split_arrays(s), "shape": np.array([F, L], np.int64)}
    a = cached_arrays(str(cache_dir), f"xc-{path.name.split('.')[0]}",
                      {"v": CACHE_VERSION, "xc": file_stamp(path)}, build)
    F, L = (int(v) for v in a["shape"])
    return split_from_arrays(a, F, L), F, L
