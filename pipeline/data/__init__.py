"""Data readers and generators. What the readers share:

``READ_ERRORS``: what reading a damaged file raises besides ``OSError`` (a truncated gzip stream:
``EOFError``; corrupt deflate data: ``zlib.error``); ``F32_MAX``: the largest value a float32 holds
(a larger value read from text would become inf); :func:`not_a_file`: why a path that should be a
file is not one, as a message says it."""
import zlib

import numpy as np

READ_ERRORS = (OSError, EOFError, zlib.error)
F32_MAX = float(np.finfo(np.float32).max)


def not_a_file(path) -> str:
    """'is a directory, expected a file' or 'no such file', for a path that is not a regular file."""
    from pathlib import Path
    return "is a directory, expected a file" if Path(path).is_dir() else "no such file"
