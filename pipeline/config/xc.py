"""Schema and checks of the extreme-classification datasets (format: xc): conf/dataset/bibtex.yaml,
amazon670k.yaml, wiki325k.yaml. Models that train on them call :func:`check_xc_dataset` from their
validator."""
from dataclasses import dataclass

from pipeline.config import DatasetConf, require, store

KINDS = ("real", "auto", "synthetic")


@dataclass
class XCDatasetConf(DatasetConf):
    # kind: real (files required) | auto (real files when found, else generated) | synthetic
    format: str = "xc"
    train: str = "train.txt"          # file names inside the dataset folder (plain or .gz)
    test: str = "test.txt"
    features: int = 0                 # F (real files: 0 = the header's; a mismatch is an error)
    labels: int = 0                   # L (same)
    # generator (kind auto without files, or synthetic)
    train_rows: int = 0
    test_rows: int = 0
    nnz_per_row: float = 76.0         # average nonzero features a row
    labels_per_row: float = 5.45      # average labels a row
    zipf: float = 0.6                 # label-frequency power-law exponent
    feature_zipf: float = 1.0         # background feature-frequency exponent
    prototypes: int = 12              # planted feature ids of each label
    signal: float = 0.5               # fraction of a row's features drawn from its labels' prototypes
    empty_rows: float = 0.002         # fraction of rows without labels
    scale: float = 1.0                # fraction of the generated rows used on size=full


store("dataset", "schema_xc_dataset", XCDatasetConf)


def check_xc_dataset(cfg, model: str = "") -> None:
    """One-line ConfigError for a dataset that is not an xc dataset or has bad generator keys."""
    d = cfg.dataset
    who = f" for model={model}" if model else ""
    require(d.get("format", None) == "xc", "dataset", d.get("name", "?"),
            f"an extreme-classification dataset (bibtex, amazon670k, wiki325k){who}")
    require(d.kind in KINDS, "dataset.kind", d.kind, " | ".join(KINDS))
    require(bool(str(d.train)) and bool(str(d.test)), "dataset.train", d.train,
            "file names of both splits (dataset.train and dataset.test)")
    require(d.features >= 0, "dataset.features", d.features, "0 (from the header) or a positive count")
    require(d.labels >= 0, "dataset.labels", d.labels, "0 (from the header) or a positive count")
    require(d.kind != "synthetic" or not str(d.path or ""), "dataset.path", d.path,
            "'' with dataset.kind=synthetic (the generator reads no files); dataset.kind=auto reads the "
            "folder's files")
    if d.kind == "real" or str(d.path or ""):     # files only (kind=auto with a folder named): no generator
        return
    require(d.features > 0, "dataset.features", d.features, "a positive count (the generator needs the shape)")
    require(d.labels > 0, "dataset.labels", d.labels, "a positive count (the generator needs the shape)")
    for key in ("train_rows", "test_rows"):
        require(d[key] > 0, f"dataset.{key}", d[key], "a positive integer")
    require(d.nnz_per_row >= 1, "dataset.nnz_per_row", d.nnz_per_row, "an average of at least 1")
    require(d.nnz_per_row <= d.features, "dataset.nnz_per_row", d.nnz_per_row,
            f"at most dataset.features ({d.features})")
    require(d.labels_per_row >= 1, "dataset.labels_per_row", d.labels_per_row, "an average of at least 1")
    require(d.labels_per_row <= d.labels, "dataset.labels_per_row", d.labels_per_row,
            f"at most dataset.labels ({d.labels})")
    require(d.zipf >= 0, "dataset.zipf", d.zipf, "a non-negative exponent (0: uniform)")
    require(d.feature_zipf >= 0, "dataset.feature_zipf", d.feature_zipf, "a non-negative exponent (0: uniform)")
    require(d.prototypes >= 1, "dataset.prototypes", d.prototypes, "a positive number of features a label")
    require(0 <= d.signal <= 1, "dataset.signal", d.signal, "a fraction in [0, 1]")
    require(0 <= d.empty_rows < 1, "dataset.empty_rows", d.empty_rows, "a fraction in [0, 1)")
    require(0 < d.scale <= 1, "dataset.scale", d.scale, "a fraction in (0, 1]")
