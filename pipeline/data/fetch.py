"""Download the real image datasets the way the field gets them: the official archives, checked
against their published md5 and unpacked into ``data_dir`` where the loaders read them.

    python -m pipeline.data.fetch cifar10 mnist            # into $PIPELINE_DATA_DIR or ./data
    python -m pipeline.data.fetch mnist --data-dir /big/data
    python -m pipeline.data.fetch cifar10 --mirror file:///srv/archives   # a local or institutional copy

* ``cifar10``: the binary version from the authors' site (``cifar-10-binary.tar.gz``, 162 MB, md5
  c32a1d4a...), unpacked to ``<data_dir>/cifar-10-batches-bin/`` (read by ``pipeline/data/cifar10.py``;
  only the six batch files and the class names are extracted, nothing else in the archive is).
* ``mnist``: the four IDX files (``train-images-idx3-ubyte.gz`` ...) with the md5s published with
  them, kept gzip-compressed in ``<data_dir>/mnist/`` (read by ``pipeline/data/mnist.py``).

``--mirror URL`` (or env ``PIPELINE_DATA_MIRROR``) fetches every file as ``URL/<file name>`` instead,
e.g. a ``file://`` folder holding copies of the archives; the checksums are checked all the same.
A file that fails its checksum is removed and nothing is unpacked. Data already in place is kept
unless ``--force``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from pipeline.errors import DataError
from pipeline.root import DATA_DIR


@dataclass(frozen=True)
class Remote:
    name: str                    # file name (also its name under a mirror)
    urls: Tuple[str, ...]        # official locations, tried in order
    md5: str                     # published checksum


@dataclass(frozen=True)
class Source:
    files: Tuple[Remote, ...]
    target: str                  # folder under data_dir that the loader reads
    doc: str


MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
CIFAR_MEMBERS = tuple(f"data_batch_{i}.bin" for i in range(1, 6)) + ("test_batch.bin", "batches.meta.txt")

SOURCES: Dict[str, Source] = {
    "cifar10": Source(
        files=(Remote("cifar-10-binary.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",),
                      "c32a1d4ab5d03f1284b67883e8d87530"),),
        target="cifar-10-batches-bin",
        doc="CIFAR-10, binary version (Krizhevsky 2009), 50000 + 10000 32x32 RGB images"),
    "mnist": Source(
        files=tuple(Remote(n, tuple(u + n for u in MNIST_URLS), md5) for n, md5 in (
            ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
            ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
            ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
            ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"))),
        target="mnist",
        doc="MNIST (LeCun et al. 1998), 60000 + 10000 28x28 images, IDX files"),
}


def md5sum(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(remote: Remote, dest: Path, mirror: Optional[str] = None, echo=print) -> Path:
    """``remote`` into ``dest`` (a file path), checked against its md5; a DataError naming the file,
    the checksums and the URL when it does not match (the file is removed then)."""
    errors = []
    for url in [mirror.rstrip("/") + "/" + remote.name] if mirror else remote.urls:
        echo(f"  {url}")
        tmp = dest.with_name(dest.name + ".part")
        try:
            with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
        except (urllib.error.URLError, OSError, ValueError) as e:
            tmp.unlink(missing_ok=True)
            errors.append(f"{url}: {getattr(e, 'reason', None) or e}")
            continue
        got = md5sum(tmp)
        if got != remote.md5:
            tmp.unlink(missing_ok=True)
            raise DataError(f"{remote.name}: md5 {got} does not match the published {remote.md5} "
                            f"(from {url}); the download is damaged or not the official file, nothing was kept")
        os.replace(tmp, dest)
        return dest
    raise DataError(f"{remote.name}: cannot download ({'; '.join(errors)}); "
                    f"put a copy in a folder and pass --mirror file:///that/folder")


def _unpack_cifar(archive: Path, out: Path) -> None:
    """Extract the known members of the CIFAR-10 binary archive into ``out`` (written as a whole:
    a temporary folder renamed at the end)."""
    tmp = out.with_name(out.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers()
                       if m.isfile() and Path(m.name).parent.name == "cifar-10-batches-bin"}
            missing = [n for n in CIFAR_MEMBERS if n not in members]
            if missing:
                raise DataError(f"{archive.name}: no cifar-10-batches-bin/{missing[0]} in the archive")
            for n in CIFAR_MEMBERS:
                src = tar.extractfile(members[n])
                with open(tmp / n, "wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (tarfile.TarError, EOFError, OSError)):
            raise DataError(f"{archive.name}: not a readable .tar.gz ({e})") from e
        raise
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def present(name: str, data_dir: Path) -> bool:
    src = SOURCES[name]
    folder = data_dir / src.target
    if name == "cifar10":
        return all((folder / n).is_file() for n in CIFAR_MEMBERS)
    return all((folder / r.name).is_file() and md5sum(folder / r.name) == r.md5 for r in src.files)


def fetch(name: str, data_dir: Path, mirror: Optional[str] = None, force: bool = False, echo=print) -> Path:
    """Download, check and unpack dataset ``name`` into ``data_dir``; returns its folder."""
    if name not in SOURCES:
        raise DataError(f"unknown dataset {name!r}: one of {', '.join(SOURCES)}")
    src = SOURCES[name]
    out = data_dir / src.target
    if not force and present(name, data_dir):
        echo(f"{name}: already in {out} (--force fetches it again)")
        return out
    echo(f"{name}: {src.doc}")
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: cannot be a data folder (a file is there); pass --data-dir <a folder> or "
                        "remove the file")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:                     # a file in the way, no permission
        raise DataError(f"{e.filename or data_dir}: cannot be a data folder ({e.strerror or e}); pass --data-dir "
                        f"<a folder> or remove what is there") from None
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".fetch-") as tmp:
        got = [download(r, Path(tmp) / r.name, mirror, echo) for r in src.files]   # all checked first
        if name == "cifar10":
            _unpack_cifar(got[0], out)
        else:
            out.mkdir(parents=True, exist_ok=True)
            for f in got:
                os.replace(f, out / f.name)
    echo(f"{name}: checked and unpacked into {out}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.data.fetch",
                                 description="Download the official CIFAR-10 / MNIST archives, check their md5, "
                                             "unpack them into data_dir.")
    ap.add_argument("datasets", nargs="+", choices=sorted(SOURCES), help="what to fetch")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="where to put them (default: $PIPELINE_DATA_DIR, else the project's data/)")
    ap.add_argument("--mirror", default=os.environ.get("PIPELINE_DATA_MIRROR") or None,
                    help="fetch every file as MIRROR/<file name> (e.g. file:///path/to/copies); "
                         "default: $PIPELINE_DATA_MIRROR, else the official sites")
    ap.add_argument("--force", action="store_true", help="fetch again even when the data is there")
    args = ap.parse_args(argv)
    data_dir = (args.data_dir or Path(os.environ.get("PIPELINE_DATA_DIR") or DATA_DIR)).expanduser().resolve()
    try:
        for name in dict.fromkeys(args.datasets):
            fetch(name, data_dir, args.mirror, args.force)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
