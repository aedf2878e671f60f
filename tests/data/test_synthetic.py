"""write_demo_mimic: MIMIC-shaped, deterministic, labelled as synthetic, with the traps real data has."""

import gzip

import pandas as pd
import pytest

from clinicode.constants import CAML_TOP50
from clinicode.errors import ConfigError
from clinicode.synthetic.mimic3 import CODE_HEADER, NOTE_HEADER, TITLE_HEADER, write_demo_mimic


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo") / "mimic"
    return folder, write_demo_mimic(folder, n_admissions=300, n_other_notes=1234, seed=7)


def test_files_headers_and_readme(demo):
    folder, info = demo
    assert "SYNTHETIC" in (folder / "README.txt").read_text()
    assert info["synthetic"] is True
    assert list(pd.read_csv(folder / "NOTEEVENTS.csv", nrows=0).columns) == list(NOTE_HEADER)
    for t in ("DIAGNOSES_ICD", "PROCEDURES_ICD"):
        assert list(pd.read_csv(folder / f"{t}.csv", nrows=0).columns) == list(CODE_HEADER)
    for t in ("D_ICD_DIAGNOSES", "D_ICD_PROCEDURES"):
        assert list(pd.read_csv(folder / f"{t}.csv", nrows=0).columns) == list(TITLE_HEADER)


def test_row_counts_and_traps(demo):
    folder, info = demo
    notes = pd.read_csv(folder / "NOTEEVENTS.csv", dtype=str, keep_default_na=False)
    assert len(notes) == info["noteevents_rows"] == 1234 + info["discharge_summary_rows"]
    ds = notes[notes["CATEGORY"] == "Discharge summary"]
    assert set(ds["DESCRIPTION"]) == {"Report", "Addendum"}
    assert {"Radiology", "ECG", "Nursing/other"} <= set(notes["CATEGORY"])
    assert (notes["HADM_ID"] == "").any() and (ds["HADM_ID"] == "").any()
    assert ds["TEXT"].str.contains("\n").all() and ds["TEXT"].str.contains(",").any()
    assert ds["TEXT"].str.contains(r"\[\*\*Hospital1 18\*\*\]", regex=True).any()
    assert ds["TEXT"].str.contains('"').any()
    dx = pd.read_csv(folder / "DIAGNOSES_ICD.csv", dtype=str, keep_default_na=False)
    px = pd.read_csv(folder / "PROCEDURES_ICD.csv", dtype=str, keep_default_na=False)
    codes = set(dx["ICD9_CODE"])
    assert "" in codes  # empty codes present
    assert any(c.startswith("V") for c in codes) and any(c.startswith("E") for c in codes)
    assert not any("." in c for c in codes | set(px["ICD9_CODE"]))
    assert any(c.startswith("00") for c in px["ICD9_CODE"])
    assert dx.duplicated(["HADM_ID", "ICD9_CODE"]).any() or px.duplicated(["HADM_ID", "ICD9_CODE"]).any()
    # some admissions have codes but no discharge summary
    assert set(dx["HADM_ID"]) - set(ds["HADM_ID"])


def test_titles_cover_the_50(demo):
    folder, _ = demo
    d = pd.read_csv(folder / "D_ICD_DIAGNOSES.csv", dtype=str)
    p = pd.read_csv(folder / "D_ICD_PROCEDURES.csv", dtype=str)
    raw = set(d["ICD9_CODE"]) | set(p["ICD9_CODE"])
    assert {c.replace(".", "") for c in CAML_TOP50} <= raw
    assert "0389" in set(d["ICD9_CODE"]) and "0040" in set(p["ICD9_CODE"])


def test_notes_carry_signal(demo):
    folder, _ = demo
    notes = pd.read_csv(folder / "NOTEEVENTS.csv", dtype=str, keep_default_na=False)
    dx = pd.read_csv(folder / "DIAGNOSES_ICD.csv", dtype=str, keep_default_na=False)
    ds = notes[notes["CATEGORY"] == "Discharge summary"].groupby("HADM_ID")["TEXT"].agg(" ".join)
    htn = set(dx.loc[dx["ICD9_CODE"] == "4019", "HADM_ID"]) & set(ds.index)
    say = ds.str.contains("hypertension|htn|elevated blood pressure", regex=True)
    rate_with = say[list(htn)].mean()
    rate_without = say[[h for h in ds.index if h not in htn]].mean()
    assert rate_with > 0.8 and rate_without < 0.3


def test_deterministic_and_gzip(tmp_path):
    a = write_demo_mimic(tmp_path / "a", n_admissions=50, seed=2)
    b = write_demo_mimic(tmp_path / "b", n_admissions=50, seed=2, gzip=True)
    write_demo_mimic(tmp_path / "c", n_admissions=50, seed=3)
    assert a["noteevents_rows"] == b["noteevents_rows"]
    raw = (tmp_path / "a" / "NOTEEVENTS.csv").read_bytes()
    assert gzip.decompress((tmp_path / "b" / "NOTEEVENTS.csv.gz").read_bytes()) == raw
    assert (tmp_path / "c" / "NOTEEVENTS.csv").read_bytes() != raw
    write_demo_mimic(tmp_path / "a2", n_admissions=50, seed=2)
    assert (tmp_path / "a2" / "DIAGNOSES_ICD.csv").read_bytes() == (tmp_path / "a" / "DIAGNOSES_ICD.csv").read_bytes()


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match=r"n_admissions must be a positive integer, got 0"):
        write_demo_mimic(tmp_path, n_admissions=0)
    with pytest.raises(ConfigError, match=r"n_other_notes must be a non-negative integer, got -1"):
        write_demo_mimic(tmp_path, n_other_notes=-1)


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    """The same tiny folder without and with real-size padding (discharge ~4,000, other notes ~800 characters)."""
    root = tmp_path_factory.mktemp("padded")
    kw = dict(n_admissions=50, n_other_notes=300, seed=5)
    plain = write_demo_mimic(root / "plain", **kw)
    info = write_demo_mimic(root / "padded", discharge_chars=4000, other_chars=800, **kw)
    return root, plain, info


def test_padding_makes_notes_longer_and_keeps_everything_else(padded):
    root, plain, info = padded
    read = lambda name: pd.read_csv(root / name / "NOTEEVENTS.csv", dtype=str, keep_default_na=False)  # noqa: E731
    a, b = read("plain"), read("padded")
    assert info["noteevents_rows"] == plain["noteevents_rows"] == len(b)
    assert (a.drop(columns="TEXT") == b.drop(columns="TEXT")).all().all()
    for table in ("DIAGNOSES_ICD", "PROCEDURES_ICD"):
        assert (root / "plain" / f"{table}.csv").read_bytes() == (root / "padded" / f"{table}.csv").read_bytes()
    ds = b["CATEGORY"] == "Discharge summary"
    la, lb = a["TEXT"].str.len(), b["TEXT"].str.len()
    assert (lb >= la).all()
    assert 3000 < lb[ds].mean() < 5000 and la[ds].mean() < 1500
    assert 600 < lb[~ds].mean() < 1000 and la[~ds].mean() < 100
    # Padding goes inside the report; the template's evidence and its tail stay as they were.
    reports = ds & (b["DESCRIPTION"] == "Report")
    for old, new in zip(a.loc[reports, "TEXT"], b.loc[reports, "TEXT"]):
        assert new.startswith(old[:old.index("\n\nBrief Hospital Course:")])
        assert new.endswith(old[old.index("\n\nDischarge Medications:"):])
    assert b.loc[ds, "TEXT"].str.contains(r"\[\*\*", regex=True).all()


def test_padding_is_deterministic_and_valid_csv(padded, tmp_path):
    import csv
    import io

    root, _, _ = padded
    write_demo_mimic(tmp_path / "again", n_admissions=50, n_other_notes=300, seed=5, discharge_chars=4000,
                     other_chars=800)
    raw = (root / "padded" / "NOTEEVENTS.csv").read_bytes()
    assert (tmp_path / "again" / "NOTEEVENTS.csv").read_bytes() == raw
    # The fast writer for padded notes writes exactly what csv.writer would.
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    assert buf.getvalue().encode("utf-8") == raw


def test_padding_carries_no_code_phrases():
    import re

    from clinicode.synthetic import mimic3 as syn

    phrases = [p for *_, ps in syn.CODE_INFO + syn.EXTRA_CODE_INFO for p in ps]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, phrases)) + r")\b")
    for unit in syn._PAD_SENTENCES + syn._PAD_TEMPLATES + syn._PAD_SECTIONS:
        assert not pattern.search(unit.lower()), unit


def test_prepare_on_padded_folder(padded, tmp_path):
    from clinicode.data.prepare import prepare_mimic

    root, _, _ = padded
    small = prepare_mimic(root / "plain", tmp_path / "plain")
    big = prepare_mimic(root / "padded", tmp_path / "padded")
    assert big["splits"] == small["splits"] and sum(big["splits"].values()) > 0

    def text(d):
        return pd.concat(pd.read_parquet(tmp_path / d / f"{s}.parquet") for s in ("train", "dev", "test"))

    a, b = text("plain"), text("padded")
    assert list(a["id"]) == list(b["id"]) and list(map(list, a["labels"])) == list(map(list, b["labels"]))
    assert b["text"].str.len().mean() > 3 * a["text"].str.len().mean()


def test_bad_padding_arguments(tmp_path):
    with pytest.raises(ConfigError, match=r"discharge_chars must be a positive integer or None, got 0"):
        write_demo_mimic(tmp_path, n_admissions=5, discharge_chars=0)
    with pytest.raises(ConfigError, match=r"other_chars must be a positive integer or None, got 1.5"):
        write_demo_mimic(tmp_path, n_admissions=5, other_chars=1.5)


def test_code_tables_are_package_data_that_setuptools_ships():
    """The generators read their code tables from synthetic/tables/*.json: every one must match pyproject's package-data
    (or an installed, non-editable clinicode could not write demo data), and each must parse."""
    import json
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = Path(__file__).resolve().parents[2]
    package = root / "clinicode" / "synthetic"
    package_data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = package_data["clinicode.synthetic"]
    shipped = {p for g in globs for p in package.glob(g)}
    tables = set((package / "tables").glob("*"))
    assert tables and tables <= shipped, sorted(p.name for p in tables - shipped)
    for p in tables:
        assert isinstance(json.loads(p.read_text(encoding="utf-8")), dict), p.name
