"""A default's stand-in for an image dataset that is not in ``data_dir`` (``dataset.fallback``): the
files of CIFAR-10 and MNIST are fetched on request only, so a default command runs as typed on a
fresh machine and says in one line what it uses instead."""
from __future__ import annotations


def available(cfg, name: str) -> bool:
    """Whether the files of dataset ``name`` are there (digits always are: scikit-learn ships them)."""
    if name == "cifar10":
        from pipeline.data import cifar10
        return cifar10.folder(cfg) is not None
    if name == "mnist":
        from pipeline.data import mnist
        return mnist.folder(cfg) is not None
    return name == "digits"


def fallback(cfg, name: str, notice, doing: str = "training on {}") -> str:
    """The data to use for ``name``: ``name`` itself, or the stand-in ``cfg.dataset.fallback`` names
    when ``name``'s files are not in data_dir (a default's or an experiment's choice, so that it runs
    as typed on a fresh machine), said in one line through ``notice``; ``doing`` describes the
    stand-in's use (``{}``: its name). A dataset config without ``fallback`` fails on missing data
    where it is read, with the fetch command."""
    alt = str(cfg.dataset.get("fallback", "") or "")
    if not alt or available(cfg, name):
        return name
    notice(f"dataset {name} is not in data_dir={cfg.data_dir}: {doing.format(alt)} instead "
           f"(get it with: python -m pipeline.data.fetch {name})")
    return alt
