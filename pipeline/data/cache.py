"""On-disk cache for heavy preprocessing, keyed by its parameters. Writes are atomic (temporary
file, then rename), so a crash or a malformed input never leaves a half-written entry."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict

import numpy as np


def file_stamp(path: Path) -> Dict[str, Any]:
    """What identifies an input file in a cache key: its resolved path, size and modification time in
    nanoseconds (whole seconds would serve a stale entry for a file rewritten at the same size
    within the second)."""
    st = Path(path).stat()
    return {"file": str(Path(path).resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def key(params: Dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_arrays(cache_dir: str, name: str, params: Dict[str, Any],
                  build: Callable[[], Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """Load ``<cache_dir>/<name>-<key>.npz`` or build, save atomically and return it."""
    d = Path(cache_dir)
    path = d / f"{name}-{key(params)}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    arrays = build()   # may raise: nothing is written then
    d.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)   # a failed save leaves nothing behind
        raise
    return arrays
