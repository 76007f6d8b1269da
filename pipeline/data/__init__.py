"""Data readers and generators. What the readers share:

``READ_ERRORS``: what reading a damaged file raises besides ``OSError`` (a truncated gzip stream:
``EOFError``; corrupt deflate data: ``zlib.error``); ``F32_MAX``: the largest value a float32 holds
(a larger value read from text would become inf)."""
import zlib

import numpy as np

READ_ERRORS = (OSError, EOFError, zlib.error)
F32_MAX = float(np.finfo(np.float32).max)
