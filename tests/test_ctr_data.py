"""CPU tests of the raw click-log reader (pipeline/data/ctr.py): Criteo pinned to the arrays of the
reader it replaced, Avazu-format CSV, a layout written in a dataset config, headers, errors, the
dataset entry (files, held-out split, parse cache) and the CLI."""
from __future__ import annotations

import gzip
import hashlib
import random
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.feature_extraction import FeatureHasher

from pipeline.data import criteo, ctr
from pipeline.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
CRITEO = ROOT / "data" / "criteo-10k"

# sha256 of (shape, indptr int64, indices int32, data float32, labels float32) as the previous
# Criteo reader (per-row tokens through FeatureHasher) produced them
PINNED = {
    ("criteo_train_8000.tsv.gz", 10 ** 6): "822b951e468e55ed00f44666a82443ff7fc0d8edecf6157f54861029aa6747ad",
    ("criteo_test_2000.tsv.gz", 10 ** 6): "5ef2e986f84f511599edad21e66f37bbb55f2ca065cd60560f5c57e95995b13e",
    ("criteo_test_2000.tsv.gz", 1000): "5a1c6f9b2c1fe96a403f26da58f013a2d0e9fb3e49b04d4b809fe6aa5aebd22a",  # collisions
}


def digest(X, y) -> str:
    h = hashlib.sha256()
    h.update(np.asarray(X.shape, np.int64).tobytes())
    for a, t in ((X.indptr, np.int64), (X.indices, np.int32), (X.data, np.float32), (y, np.float32)):
        h.update(np.ascontiguousarray(a, t).tobytes())
    return h.hexdigest()


def hashed(rows, n=ctr.N_FEATURES):
    """The expected CSR of token lists, hashed independently of the reader."""
    X = FeatureHasher(n_features=n, input_type="string", alternate_sign=False).transform(rows).tocsr()
    X.data[:] = 1.0
    X.sort_indices()
    return X


def same(X, E) -> bool:
    return X.shape == E.shape and np.array_equal(X.indptr, E.indptr) and np.array_equal(X.indices, E.indices) \
        and np.all(X.data == 1.0)


AVAZU_HEADER = ",".join(ctr.AVAZU_COLUMNS)


def avazu_row(i, click, hour, site="1fbe01fe", ip="ddd2926e"):
    return [str(10 ** 19 + i), str(click), hour, "1005", "0", site, "f3845767", "28905ebd", "ecad2386",
            "7801e8d9", "07d7df22", "a99f214a", ip, "44956a24", "1", "2", "15706", "320", "50", "1722", "0",
            "35", "-1", str(79 + i)]


def avazu_tokens(r):
    names = ctr.AVAZU_COLUMNS
    from datetime import datetime
    t = datetime.strptime(r[2], "%y%m%d%H")
    return [f"{n}={v}" for n, v in zip(names, r) if n not in ("id", "click", "hour")] + \
           [f"hour_of_day={t.hour}", f"weekday={t.weekday()}"]


def write_avazu(path, rows, gz=False):
    text = AVAZU_HEADER + "\n" + "".join(",".join(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


# ------------------------------------------------------------------------------------ criteo

@pytest.mark.parametrize("name,n", list(PINNED))
def test_criteo_pinned_to_previous_reader(name, n):
    X, y = criteo.load(CRITEO / name, n)
    assert digest(X, y) == PINNED[(name, n)]


def test_criteo_chunk_boundaries_change_nothing(monkeypatch):
    monkeypatch.setattr(ctr, "CHUNK_ROWS", 333)
    X, y = ctr.read(CRITEO / "criteo_test_2000.tsv.gz", ctr.layout_of({"format": "criteo"}), 1000)
    assert digest(X, y) == PINNED[("criteo_test_2000.tsv.gz", 1000)]


def test_criteo_rows_limit_and_errors(tmp_path):
    X, y = criteo.load(CRITEO / "criteo_test_2000.tsv.gz", rows=100)
    full, yf = criteo.load(CRITEO / "criteo_test_2000.tsv.gz")
    assert X.shape[0] == 100 and (X != full[:100]).nnz == 0 and np.array_equal(y, yf[:100])
    good = "\t".join(["1"] + ["5"] * 13 + ["ab12cd34"] * 26)
    bad_int = "\t".join(["0"] + ["5"] * 3 + ["1.5"] + ["5"] * 9 + ["ab"] * 26)
    p = tmp_path / "c.tsv"
    p.write_text("\n".join([good, good, bad_int, good.replace("1", "7", 1), "1\t2"]) + "\n")
    with pytest.raises(DataError, match=r"^\S*c.tsv:3: integer field I4 is '1.5', not an integer$"):
        criteo.load(p)
    p.write_text("\n".join([good, "\t".join(["1"] * 10), good.replace("1", "7", 1)]) + "\n")
    with pytest.raises(DataError, match=r"c.tsv:2: 10 tab-separated fields, expected 40 \(label, I1..I13, C1..C26\)$"):
        criteo.load(p)


# ------------------------------------------------------------------------------------- avazu

def test_avazu_features(tmp_path):
    rows = [avazu_row(0, 1, "14102100"), avazu_row(1, 0, "14102113", site="85f751fd"),
            avazu_row(2, 0, "14102623", ip="")]                                     # 21 Oct 2014: a Tuesday
    p = write_avazu(tmp_path / "train.csv", rows)
    X, y = ctr.read(p, ctr.layout_of({"format": "avazu"}))
    assert y.tolist() == [1.0, 0.0, 0.0] and X.shape == (3, 10 ** 6)
    assert np.diff(X.indptr).tolist() == [23, 23, 23]
    assert same(X, hashed([avazu_tokens(r) for r in rows]))
    one = lambda t: int(hashed([[t]]).indices[0])                                  # noqa: E731
    assert one("hour_of_day=13") in X[1].indices and one("weekday=1") in X[1].indices
    assert one("weekday=6") in X[2].indices and one("device_ip=") in X[2].indices  # 26 Oct: Sunday; empty ip
    assert one("hour=14102100") not in X[0].indices and one("id=10000000000000000000") not in X[0].indices
    # gzip by its first bytes whatever the name; small chunks; the same rows
    g = write_avazu(tmp_path / "train.gz", rows, gz=True)
    X2, y2 = ctr.read(g, ctr.layout_of({"format": "avazu"}))
    assert same(X2, hashed([avazu_tokens(r) for r in rows])) and np.array_equal(y, y2)


def test_avazu_without_derived_keeps_nothing_of_hour(tmp_path):
    rows = [avazu_row(i, i % 2, f"141021{i:02d}") for i in range(5)]
    p = write_avazu(tmp_path / "train.csv", rows)
    lay = ctr.layout_of({"format": "avazu", "layout": {"derived": []}})
    X, _ = ctr.read(p, lay)
    assert same(X, hashed([avazu_tokens(r)[:-2] for r in rows]))


def test_avazu_malformed_rows(tmp_path):
    rows = [avazu_row(i, 0, "14102100") for i in range(4)]
    rows[2] = rows[2][:-1]
    p = write_avazu(tmp_path / "train.csv", rows)
    lay = ctr.layout_of({"format": "avazu"})
    with pytest.raises(DataError) as e:
        ctr.read(p, lay)
    msg = str(e.value)
    assert re.search(r"train.csv:4: 23 comma-separated fields, expected 24 \(id, click, hour, C1, banner_pos, "
                     r".*device_conn_type, C14..C21\)$", msg) and "\n" not in msg
    rows = [avazu_row(i, 0, "14102100") for i in range(4)]
    rows[1][1], rows[3][2] = "2", "2014-10-21"
    with pytest.raises(DataError, match=r"train.csv:3: label '2' is not 0 or 1$"):
        ctr.read(write_avazu(p, rows), lay)
    rows[1][1] = "1"
    with pytest.raises(DataError, match=r"train.csv:5: column hour is '2014-10-21', not a time in the format "
                                        r"%y%m%d%H \(dataset.layout.derived: hour_of_day\)$"):
        ctr.read(write_avazu(p, rows), lay)
    # the file of the issue: Avazu's CSV read as Criteo names the columns Criteo expects
    with pytest.raises(DataError, match=r"train.csv:1: 1 tab-separated fields, expected 40 \(label, I1..I13, C1..C26\)"):
        ctr.read(p, ctr.layout_of({"format": "criteo"}))


# ---------------------------------------------------------------------------------- headers

def test_header_handling(tmp_path):
    lay = ctr.layout_of({"format": "csv", "layout": {"label": "y"}})
    p = tmp_path / "h.csv"
    p.write_text("\ufeffy,a,b\n\n1,x,7\n0,\"q,r\",7\n")      # a byte-order mark, a blank line, a quoted comma
    X, y = ctr.read(p, lay)
    assert y.tolist() == [1.0, 0.0] and same(X, hashed([["a=x", "b=7"], ["a=q,r", "b=7"]]))
    # header: true with columns given: they must match
    lay2 = ctr.layout_of({"format": "csv", "layout": {"label": "y", "columns": ["y", "b", "a"]}})
    with pytest.raises(DataError, match=r"h.csv:1: header column 2 is 'a', expected 'b' \(dataset.layout.columns"):
        ctr.read(p, lay2)
    # the header's names must fit the layout (checked against the header when the config has no names)
    lay3 = ctr.layout_of({"format": "csv", "layout": {"label": "click"}})
    with pytest.raises(DataError, match=r"h.csv:1: the header does not fit the layout: dataset.layout.label='click' "
                                        r"is not allowed: no such column \(the columns are y, a, b\)"):
        ctr.read(p, lay3)
    # header: false: the first line is a row
    q = tmp_path / "n.csv"
    q.write_text("1,x,7\n0,z,8\n")
    lay4 = ctr.layout_of({"format": "csv", "layout": {"label": "y", "header": False, "columns": ["y", "a", "b"]}})
    X, y = ctr.read(q, lay4)
    assert y.tolist() == [1.0, 0.0] and same(X, hashed([["a=x", "b=7"], ["a=z", "b=8"]]))
    e = tmp_path / "e.csv"
    e.write_text("\n")
    with pytest.raises(DataError, match=r"e.csv: empty file, expected a header line"):
        ctr.read(e, lay)
    assert ctr.read(e, lay4)[0].shape == (0, ctr.N_FEATURES)                     # no header: no rows


def test_layout_errors_name_the_key():
    cases = [
        ({"format": "parquet"}, r"dataset.format='parquet' is not allowed: one of criteo, avazu, csv"),
        ({"format": "csv"}, r"dataset.layout.label='' is not allowed"),
        ({"format": "csv", "layout": {"label": "y", "header": False}}, r"dataset.layout.columns=\[\] is not allowed"),
        ({"format": "csv", "layout": {"label": "y", "sep": "::"}}, r"dataset.layout.sep='::' is not allowed"),
        ({"format": "csv", "layout": {"label": "y", "transform": "log"}}, r"dataset.layout.transform='log'"),
        ({"format": "avazu", "layout": {"numeric": ["click"]}}, r"dataset.layout.numeric='click' is not allowed: "
                                                                r"that column is already label"),
        ({"format": "avazu", "layout": {"ignore": ["id", "nope"]}}, r"dataset.layout.ignore='nope' is not allowed: "
                                                                   r"no such column"),
        ({"format": "avazu", "layout": {"categorical": ["C1"]}}, r"dataset.layout: column\(s\) banner_pos, .* have no "
                                                                r"role"),
        ({"format": "avazu", "layout": {"derived": [{"name": "wd", "source": "hour", "kind": "month"}]}},
         r"dataset.layout.derived\[0\].kind='month' is not allowed: one of hour_of_day, weekday"),
        ({"format": "avazu", "layout": {"derived": [{"name": "C1", "source": "hour", "kind": "weekday"}]}},
         r"dataset.layout.derived='C1' is not allowed"),
    ]
    for d, pat in cases:
        with pytest.raises(ConfigError) as e:
            ctr.layout_of(d)
        assert re.search(pat, str(e.value)) and "\n" not in str(e.value), (d, str(e.value))


# ----------------------------------------------------------------------- configs and the CLI

def _doc_example() -> str:
    text = (ROOT / "docs" / "click-logs.md").read_text()
    return re.search(r"## Your own format.*?```yaml\n(.*?)```", text, re.S).group(1)


def test_user_format_from_the_docs(compose, tmp_path):
    """The documented example of a user-written format, composed by Hydra and read end to end."""
    conf = tmp_path / "conf" / "dataset"
    conf.mkdir(parents=True)
    (conf / "adlogs.yaml").write_text(_doc_example())
    data = tmp_path / "data" / "adlogs"
    data.mkdir(parents=True)
    rng = random.Random(0)
    rows = []
    for split, n in (("10", 40), ("11", 10)):
        lines = []
        for i in range(n):
            r = [f"2026-{split}-{1 + i % 28:02d} {i % 24:02d}:15:00", f"u{i}", str(i % 3 == 0), f"ad{rng.randrange(5)}",
                 f"camp{i % 2}", str(i % 4), str(rng.choice([0, 1, 2, 3, 50])), str(rng.randrange(400)),
                 rng.choice(["FR", "US", ""])]
            r[2] = "1" if i % 3 == 0 else "0"
            lines.append(r)
        rows.append(lines)
        with gzip.open(data / f"impressions-2026-{split}.tsv.gz", "wt") as f:
            f.write("".join("\t".join(r) + "\n" for r in lines))
    cfg = compose(["model=wide_lr", "dataset=adlogs", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                   f"data_dir={tmp_path / 'data'}", f"cache_dir={tmp_path / 'cache'}"])
    from pipeline.config import validate
    validate(cfg)
    ident, load = ctr.source(cfg)
    Xtr, ytr, Xva, yva = load()
    from datetime import datetime

    def tokens(r):
        t = datetime.strptime(r[0], "%Y-%m-%d %H:%M:%S")
        return [f"ad_id={r[3]}", f"campaign={r[4]}", f"position={r[5]}", f"country={r[8]}",
                f"prev_clicks={ctr.log_squared(int(r[6]))}", f"ad_age_days={ctr.log_squared(int(r[7]))}",
                f"hour={t.hour}", f"weekday={t.weekday()}"]
    assert same(Xtr, hashed([tokens(r) for r in rows[0]], 1048576))
    assert same(Xva, hashed([tokens(r) for r in rows[1]], 1048576))
    assert ytr.tolist() == [float(r[2]) for r in rows[0]] and yva.shape == (10,)
    assert ident["layout"]["sep"] == "\t" and ident["features"] == 1048576


def test_unknown_format_names_the_format(compose):
    from pipeline.config import validate
    cfg = compose(["model=wide_lr", "dataset=criteo10k", "dataset.format=parquet"])
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert str(e.value) == ("dataset.format='parquet' is not allowed: one of svmlight, synth, criteo, avazu, csv "
                            "(dataset 'criteo10k')")
    cfg = compose(["model=wide_lr", "dataset=avazu", "dataset.layout.label=clicked"])
    with pytest.raises(ConfigError, match=r"dataset.layout.label='clicked' is not allowed: no such column"):
        validate(cfg)
    cfg = compose(["model=wide_lr", "dataset=mnist"])
    with pytest.raises(ConfigError, match=r"dataset='mnist' is not allowed: a wide dataset"):
        validate(cfg)


@pytest.mark.slow
def test_avazu_source_files_split_and_cache(compose, tmp_path, monkeypatch):
    rows = [avazu_row(i, int(i % 4 == 0), f"1410{21 + i // 20}{i % 24:02d}") for i in range(100)]
    base = ["model=wide_lr", "dataset=avazu", f"data_dir={tmp_path / 'data'}", f"cache_dir={tmp_path / 'cache'}"]
    with pytest.raises(DataError) as e:
        ctr.source(compose(base))
    assert str(e.value) == (f"file not found: put train.csv at {tmp_path / 'data' / 'avazu' / 'train.csv'} "
                            f"(from Kaggle's Avazu CTR competition), or set dataset.path=<that file or its folder> "
                            f"(dataset 'avazu')")
    (tmp_path / "data" / "avazu").mkdir(parents=True)
    f = write_avazu(tmp_path / "data" / "avazu" / "train.csv", rows)
    ident, load = ctr.source(compose(base))
    Xtr, ytr, Xva, yva = load()
    assert Xtr.shape[0] == 90 and Xva.shape[0] == 10                                # the last 10 % held out
    assert same(Xva, hashed([avazu_tokens(r) for r in rows[90:]]))
    # dataset.path naming the file itself; dataset.rows training rows, the next ones held out
    other = tmp_path / "elsewhere.csv"
    other.write_bytes(f.read_bytes())
    ident2, load2 = ctr.source(compose(base + [f"dataset.path={other}", "dataset.rows=45"]))
    Xtr2, ytr2, Xva2, yva2 = load2()
    assert Xtr2.shape[0] == 45 and Xva2.shape[0] == 5 and ident2["train"]["file"] == str(other.resolve())
    assert same(Xtr2, hashed([avazu_tokens(r) for r in rows[:45]])) and ident2 != ident
    # a big file keeps its parsed rows in cache_dir; a layout change is another entry
    monkeypatch.setattr(ctr, "PARSE_CACHE_BYTES", 0)
    for _ in range(2):
        a = ctr.source(compose(base))[1]()
        assert same(a[0], Xtr) and np.array_equal(a[3], yva)
    assert len(list((tmp_path / "cache").glob("ctr-avazu-*.npz"))) == 1
    ctr.source(compose(base + ["dataset.layout.derived=[]"]))[1]()
    assert len(list((tmp_path / "cache").glob("ctr-avazu-*.npz"))) == 2


@pytest.mark.slow
def test_cli_wide_lr_avazu(cli, tmp_path):
    rows = [avazu_row(i, int(random.Random(i).random() < (0.4 if i % 3 == 0 else 0.1)), f"1410{21 + i // 300}{i % 24:02d}",
                      site=("1fbe01fe", "85f751fd", "d6137915")[i % 3]) for i in range(1500)]
    f = write_avazu(tmp_path / "train.csv", rows)
    r = cli("model=wide_lr", "dataset=avazu", f"dataset.path={f}", "epochs=1", "backend=cpu",
            f"cache_dir={tmp_path / 'cache'}", check=True, timeout=120)
    assert "wide_lr (k=0) on avazu: 1350 train / 150 val rows, 1000000 features, 23.0 nnz/row" in r.stdout
