"""An undefined metric says why in one line: a wide run whose validation split has one class."""
from __future__ import annotations

import numpy as np


def test_one_class_validation_split_explains_nan_auc(compose, tmp_path, capsys):
    from pipeline import runner
    # one validation row: a single class, so AUC is undefined
    cfg = compose(["model=wide_lr", "dataset=ctr_synth", "backend=cpu", "progress=false", "tracking=off",
                   "epochs=1", "dataset.val_fraction=0.00001", f"cache_dir={tmp_path}"])
    rep = runner.run(cfg, tmp_path, echo=False)
    [row] = [r for r in rep.rows if r["variant"] == "cpu"]
    assert np.isnan(row["val_auc"]) and np.isfinite(row["val_loss"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "val_auc is undefined" in ln]
    assert len(lines) == 1 and "validation rows has label" in lines[0] and "both classes" in lines[0]
    assert any("val_auc is undefined" in n for n in rep.notes)
