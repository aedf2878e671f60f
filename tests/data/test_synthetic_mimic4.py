"""write_demo_mimic4: MIMIC-IV-shaped, deterministic, labelled as synthetic, with the traps real data has."""

from __future__ import annotations

import gzip
import re

import pandas as pd
import pytest

from clinicode.errors import ConfigError, DataFormatError
from clinicode.synthetic.code_tables import TOP50_ICD9, TOP50_ICD10
from clinicode.synthetic.mimic4 import (
    DIAGNOSES_HEADER,
    NOTE_HEADER,
    PROCEDURES_HEADER,
    TITLES_HEADER,
    write_demo_mimic4,
)
from clinicode.synthetic.mimic4_codes import code_catalogue

HEADERS = {
    "hosp/diagnoses_icd": DIAGNOSES_HEADER, "hosp/procedures_icd": PROCEDURES_HEADER,
    "hosp/d_icd_diagnoses": TITLES_HEADER, "hosp/d_icd_procedures": TITLES_HEADER,
    "note/discharge": NOTE_HEADER, "note/radiology": NOTE_HEADER,
}
TOP = {(9, c.replace(".", "")) for c in TOP50_ICD9} | {(10, c) for c in TOP50_ICD10}


def _read(folder, table, ext=".csv"):
    return pd.read_csv(folder / f"{table}{ext}", dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("m4") / "mimic4"
    info = write_demo_mimic4(folder, n_admissions=300, seed=7)
    tables = {t: _read(folder, t) for t in HEADERS}
    codes = pd.concat([tables["hosp/diagnoses_icd"], tables["hosp/procedures_icd"]], ignore_index=True)
    return folder, info, tables, codes


def test_headers_readme_and_summary(demo):
    folder, info, tables, _ = demo
    for table, header in HEADERS.items():
        with open(folder / f"{table}.csv", encoding="utf-8") as f:
            assert f.readline() == ",".join(header) + "\n"
    readme = (folder / "README.txt").read_text()
    assert "SYNTHETIC" in readme and "INVENTED" in readme and "SEED 7" in readme
    assert info["synthetic"] is True and info["seed"] == 7 and info["n_admissions"] == 300
    for table in HEADERS:
        assert info["rows"][table.split("/")[1]] == len(tables[table])
    assert info["n_tail_codes"] == {9: 200, 10: 200} and not info["tail_capped"]
    assert info["bytes"] == sum((folder / f"{t}.csv").stat().st_size for t in HEADERS)


def test_ids_and_times_look_like_mimic4(demo):
    _, _, tables, codes = demo
    assert codes["hadm_id"].str.fullmatch(r"2\d{7}").all() and codes["subject_id"].str.fullmatch(r"1\d{7}").all()
    ds = tables["note/discharge"]
    assert set(ds["note_type"]) == {"DS", "AD"}
    assert (ds["note_id"] == ds["subject_id"] + "-" + ds["note_type"] + "-" + ds["note_seq"]).all()
    assert ds["charttime"].str.fullmatch(r"2[12]\d\d-\d\d-\d\d 00:00:00").all()
    assert ds["storetime"].str.fullmatch(r"2[12]\d\d-\d\d-\d\d \d\d:\d\d:\d\d").all()
    rad = tables["note/radiology"]
    assert set(rad["note_type"]) == {"RR"}
    assert (rad["note_id"] == rad["subject_id"] + "-RR-" + rad["note_seq"]).all()
    assert tables["hosp/procedures_icd"]["chartdate"].str.fullmatch(r"2[12]\d\d-\d\d-\d\d").all()


def test_codes_undotted_strings_with_leading_zeros(demo):
    _, _, tables, codes = demo
    dx, px = tables["hosp/diagnoses_icd"], tables["hosp/procedures_icd"]
    assert not codes["icd_code"].str.contains(".", regex=False).any()
    assert set(codes["icd_version"]) == {"9", "10"}
    dx9, dx10 = set(dx.loc[dx.icd_version == "9", "icd_code"]), set(dx.loc[dx.icd_version == "10", "icd_code"])
    px9, px10 = set(px.loc[px.icd_version == "9", "icd_code"]), set(px.loc[px.icd_version == "10", "icd_code"])
    assert {"0389", "042"} & dx9 and "0040" in px9  # 038.9, 042 and 00.40 keep their zeros
    assert any(c.startswith("V") for c in dx9) and any(c.startswith("E") for c in dx9)
    assert {"486", "311", "412"} & dx9 and {"I10", "D62", "Z23", "Z66"} & dx10  # 3-character codes
    assert all(len(c) == 7 for c in px10) and any(c.startswith("0") for c in px10)  # ICD-10-PCS
    for t in ("hosp/d_icd_diagnoses", "hosp/d_icd_procedures"):
        assert not tables[t].duplicated(["icd_code", "icd_version"]).any() and (tables[t]["long_title"] != "").all()
    titles = pd.concat([tables["hosp/d_icd_diagnoses"], tables["hosp/d_icd_procedures"]])
    # the same string can be a diagnosis and a procedure (311 depression, 31.1 tracheostomy): tell them by table
    assert ("9", "311") in set(zip(dx.icd_version, dx.icd_code)) | set(zip(px.icd_version, px.icd_code))
    assert {"0389", "I10", "J189"} <= set(titles["icd_code"]) and "02HV33Z" in set(titles["icd_code"])
    assert set(zip(codes.icd_version, codes.icd_code)) <= set(zip(titles.icd_version, titles.icd_code))


def test_versions_mixed_in_each_table_but_one_per_admission(demo):
    _, info, tables, codes = demo
    for t in ("hosp/diagnoses_icd", "hosp/procedures_icd"):
        assert set(tables[t]["icd_version"]) == {"9", "10"}
    per_adm = codes.groupby("hadm_id")["icd_version"].nunique()
    assert (per_adm == 1).all()
    share9 = (codes.drop_duplicates("hadm_id")["icd_version"] == "9").mean()
    assert 0.45 < share9 < 0.75
    assert info["admissions_by_version"][9] + info["admissions_by_version"][10] == 300


def test_top_and_zipf_tail_frequencies(demo):
    _, _, _, codes = demo
    per_code = codes.drop_duplicates(["hadm_id", "icd_code", "icd_version"]).groupby(["icd_version", "icd_code"]).size()
    tail = per_code[[(int(v), c) not in TOP for v, c in per_code.index]]
    top = per_code[[(int(v), c) in TOP for v, c in per_code.index]]
    assert len(top) > 60 and len(tail) > 100
    assert (tail < 10).sum() > 20 and (tail >= 10).sum() >= 3  # what a --min-code-count 10 cut must handle
    assert top.max() > tail.median()


def test_duplicate_code_rows(demo):
    _, info, _, codes = demo
    dup = codes.duplicated(["hadm_id", "icd_code", "icd_version"])
    assert 0.01 < dup.mean() < 0.05
    assert dup.sum() == info["traps"]["duplicate_code_rows"]


def test_admissions_without_note_and_notes_without_codes(demo):
    _, info, tables, codes = demo
    ds_hadm = set(tables["note/discharge"]["hadm_id"])
    code_hadm = set(codes["hadm_id"])
    assert len(code_hadm - ds_hadm) == info["traps"]["admissions_codes_without_note"] > 20
    assert len(ds_hadm - code_hadm) == info["traps"]["admissions_note_without_codes"] > 5


def test_addenda_after_report_some_stored_first(demo):
    _, info, tables, _ = demo
    ds = tables["note/discharge"].assign(pos=lambda d: range(len(d)), seq=lambda d: d["note_seq"].astype(int))
    text = ds[ds["text"] != ""]
    ad, rep = text[text.note_type == "AD"], text[text.note_type == "DS"]
    assert len(ad.drop_duplicates(list(NOTE_HEADER))) == info["traps"]["addenda"] >= 3
    pair = ad.merge(rep, on="hadm_id", suffixes=("_ad", "_ds"))
    assert (pair["seq_ad"] > pair["seq_ds"]).all()  # an addendum follows its report...
    assert (pair["pos_ad"] < pair["pos_ds"]).sum() >= 1  # ...but some are stored before it in the file
    assert (pair["pos_ad"] > pair["pos_ds"]).sum() >= 1


def test_duplicate_rows_and_empty_texts(demo):
    _, info, tables, _ = demo
    ds = tables["note/discharge"]
    assert ds.duplicated().sum() == info["traps"]["duplicate_note_rows"] >= 1
    empty = ds[ds["text"] == ""]
    assert len(empty) == info["traps"]["empty_text_rows"] >= 1
    with_text = set(ds.loc[(ds["text"] != "") & (ds.note_type == "DS"), "hadm_id"])
    assert set(empty["hadm_id"]) <= with_text  # otherwise normal admissions
    raw = (demo[0] / "note/discharge.csv").read_text(encoding="utf-8")
    assert re.search(r",\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\n", raw)  # the empty field, as written


def test_radiology_has_code_words_and_rows_without_hadm(demo):
    _, info, tables, codes = demo
    rad = tables["note/radiology"]
    assert len(rad) == 600  # default: 2 per admission
    assert (rad["hadm_id"] == "").sum() == info["traps"]["radiology_without_hadm"] > 30
    assert rad["text"].str.contains("pneumonia").sum() > 20 and rad["text"].str.contains("pleural effusion").sum() > 20
    assert set(rad["hadm_id"]) - {""} <= set(codes["hadm_id"]) | set(tables["note/discharge"]["hadm_id"])


def test_discharge_layout_deid_and_csv_quoting(demo):
    folder, _, tables, _ = demo
    ds = tables["note/discharge"]
    reports = ds.loc[(ds.note_type == "DS") & (ds["text"] != ""), "text"]
    sections = ("Name:  ___", "Unit No:   ___", "Admission Date:  ___", "Sex:   ", "Service: ", "Allergies:",
                "Chief Complaint:", "History of Present Illness:", "Brief Hospital Course:", "Discharge Medications:",
                "Discharge Diagnosis:", "Discharge Instructions:")
    for text in reports:
        where = [text.find(s) for s in sections]
        assert min(where) >= 0 and where == sorted(where)
    assert reports.str.count("___").min() >= 5
    assert reports.str.contains("\n").all() and reports.str.contains(",").all()
    assert reports.str.contains('"').sum() > 10
    raw = (folder / "note/discharge.csv").read_text(encoding="utf-8")
    assert '""' in raw and ',"' in raw  # quoted fields with doubled quotes


def test_every_code_has_its_phrase_in_its_discharge_rows(demo):
    _, info, tables, codes = demo
    phrases = {(c.version, c.code, c.is_diagnosis): c.phrases for c in code_catalogue(info["n_tail_codes_requested"])}
    ds = tables["note/discharge"]
    text = ds.groupby("hadm_id")["text"].agg("\n".join)
    checked = ad_only = 0
    ad_text = ds[ds.note_type == "AD"].groupby("hadm_id")["text"].agg("\n".join)
    is_dx = [True] * len(tables["hosp/diagnoses_icd"]) + [False] * len(tables["hosp/procedures_icd"])
    for hadm, v, code, dx in zip(codes["hadm_id"], codes["icd_version"], codes["icd_code"], is_dx):
        if hadm not in text.index:
            continue
        ph = phrases[int(v), code, dx]
        assert any(p in text[hadm] for p in ph), (hadm, code, ph)
        checked += 1
        rep = text[hadm].replace(ad_text.get(hadm, ""), "")
        ad_only += not any(p in rep for p in ph)
    assert checked > 1000 and ad_only > 0  # some evidence is only in an addendum


def test_deterministic_bytes_and_gzip(tmp_path):
    a = write_demo_mimic4(tmp_path / "a", n_admissions=60, seed=3)
    b = write_demo_mimic4(tmp_path / "b", n_admissions=60, seed=3)
    write_demo_mimic4(tmp_path / "c", n_admissions=60, seed=4)
    g1 = write_demo_mimic4(tmp_path / "g1", n_admissions=60, seed=3, gzip=True)
    write_demo_mimic4(tmp_path / "g2", n_admissions=60, seed=3, gzip=True)
    assert a["rows"] == b["rows"] == g1["rows"]
    for t in HEADERS:
        raw = (tmp_path / "a" / f"{t}.csv").read_bytes()
        assert raw == (tmp_path / "b" / f"{t}.csv").read_bytes()
        gz = (tmp_path / "g1" / f"{t}.csv.gz").read_bytes()
        assert gz == (tmp_path / "g2" / f"{t}.csv.gz").read_bytes()  # gzip headers carry no timestamp
        assert gzip.decompress(gz) == raw
    assert (tmp_path / "a/note/discharge.csv").read_bytes() != (tmp_path / "c/note/discharge.csv").read_bytes()
    for name in ("p1", "p2"):
        write_demo_mimic4(tmp_path / name, n_admissions=30, seed=3, discharge_chars=3000)
    assert (tmp_path / "p1/note/discharge.csv").read_bytes() == (tmp_path / "p2/note/discharge.csv").read_bytes()
    assert len(_read(tmp_path / "g1", "note/discharge", ".csv.gz")) == a["rows"]["discharge"]
    assert g1["files"]["diagnoses_icd"].endswith("hosp/diagnoses_icd.csv.gz")


def test_padding_to_real_length_keeps_codes_and_ids(tmp_path):
    short = write_demo_mimic4(tmp_path / "s", n_admissions=150, seed=5, n_radiology=50)
    long = write_demo_mimic4(tmp_path / "l", n_admissions=150, seed=5, n_radiology=50, discharge_chars=6000)
    assert 1000 < short["mean_discharge_chars"] < 2500
    assert abs(long["mean_discharge_chars"] - 6000) < 900
    for t in ("hosp/diagnoses_icd", "hosp/procedures_icd", "note/radiology"):
        assert (tmp_path / "s" / f"{t}.csv").read_bytes() == (tmp_path / "l" / f"{t}.csv").read_bytes()
    s, lg = _read(tmp_path / "s", "note/discharge"), _read(tmp_path / "l", "note/discharge")
    assert list(s["note_id"]) == list(lg["note_id"]) and len(_read(tmp_path / "l", "note/radiology")) == 50
    assert lg["text"].str.count("___").mean() > s["text"].str.count("___").mean()


def test_hadm_ids_from_split_files(tmp_path):
    nguyen = tmp_path / "nguyen" / "icd9"
    nguyen.mkdir(parents=True)
    (nguyen / "train_full_hadm_ids.csv").write_text("21000001\n21000002\n21000003\n")
    (nguyen / "dev_full_hadm_ids.csv").write_text("hadm_id\n21000004\n")  # a variant with a header line
    edin = tmp_path / "mimiciv_icd10_split.csv"
    edin.write_text("hadm_id,split\n22000001,train\n22000002,val\n22000003,test\n21000003,test\n")
    info = write_demo_mimic4(tmp_path / "out", n_admissions=40, seed=1, hadm_ids_from=[nguyen, edin])
    assert info["n_listed"] == 7 and info["n_admissions"] == 47
    assert info["admissions_by_version"]["both"] == 1 and sum(info["admissions_by_version"].values()) == 47
    ds, codes = _read(tmp_path / "out", "note/discharge"), pd.concat(
        [_read(tmp_path / "out", "hosp/diagnoses_icd"), _read(tmp_path / "out", "hosp/procedures_icd")])
    want = {"21000001": {9}, "21000002": {9}, "21000003": {9, 10}, "21000004": {9},
            "22000001": {10}, "22000002": {10}, "22000003": {10}}
    for hadm, versions in want.items():
        assert ((ds.hadm_id == hadm) & (ds.note_type == "DS") & (ds.text != "")).any()
        mine = codes[codes.hadm_id == hadm]
        assert set(mine["icd_version"].astype(int)) == versions  # 21000003 is in an ICD-9 and an ICD-10 list
        for version in versions:
            assert any((version, c) in TOP for c in mine.loc[mine.icd_version == str(version), "icd_code"])
    # a single path is accepted too, and overlapping lists of one version are merged
    one = write_demo_mimic4(tmp_path / "one", n_admissions=0, seed=1, hadm_ids_from=nguyen / "train_full_hadm_ids.csv")
    assert one["n_admissions"] == 3


@pytest.mark.parametrize("kwargs, needle", [
    (dict(n_admissions=-1), "n_admissions"), (dict(n_admissions=2.5), "n_admissions"), (dict(seed="x"), "seed"),
    (dict(discharge_chars=0), "discharge_chars"), (dict(n_tail_codes=-3), "n_tail_codes"),
    (dict(n_radiology=-2), "n_radiology"), (dict(gzip="yes"), "gzip"), (dict(n_admissions=0), "n_admissions"),
])
def test_bad_arguments_raise_config_error(tmp_path, kwargs, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        write_demo_mimic4(tmp_path / "x", **kwargs)
    assert "got" in str(err.value) and "\n" not in str(err.value)


def test_bad_split_files(tmp_path):
    vague = tmp_path / "train_hadm_ids.csv"
    vague.write_text("21000001\n")
    with pytest.raises(ConfigError, match="icd9"):
        write_demo_mimic4(tmp_path / "x", n_admissions=5, hadm_ids_from=[vague])
    for name, content, needle in (("icd9_a.csv", "21000001\nabc\n", "line 2"), ("icd9_b.csv", "123456\n", "MIMIC-IV"),
                                  ("icd9_c.csv", "id,split\n21000001,train\n", "hadm_id")):
        (tmp_path / name).write_text(content)
        with pytest.raises(DataFormatError, match=needle):
            write_demo_mimic4(tmp_path / "x", n_admissions=5, hadm_ids_from=[tmp_path / name])
    (tmp_path / "icd9_empty").mkdir()
    with pytest.raises(DataFormatError, match="no .csv"):
        write_demo_mimic4(tmp_path / "x", n_admissions=5, hadm_ids_from=[tmp_path / "icd9_empty"])
    with pytest.raises(DataFormatError, match="not found"):
        write_demo_mimic4(tmp_path / "x", n_admissions=5, hadm_ids_from=[tmp_path / "icd9_missing.csv"])


def test_catalogue_titles_phrases_and_cap(tmp_path):
    cat = code_catalogue(200)
    assert [c.code for c in cat if c.version == 9 and c.top] == [c.replace(".", "") for c in TOP50_ICD9]
    assert [c.code for c in cat if c.version == 10 and c.top] == list(TOP50_ICD10)
    by = {(c.version, c.code): c for c in cat}
    assert by[9, "4019"].title == "Unspecified essential hypertension"
    assert by[10, "J189"].title == "Pneumonia, unspecified organism"
    assert by[10, "02HV33Z"].title.startswith("Insertion of Infusion Device into Superior Vena Cava")
    assert all(c.phrases and all(c.phrases) for c in cat)
    derived = [c for c in cat if c.version == 10 and not c.top]  # phrases made from the title: related, not equal
    for c in derived:
        words = set(re.findall(r"[a-z0-9'-]+", c.title.lower()))
        assert all(p != c.title.lower() and len(set(p.split()) & words) >= 1 for p in c.phrases), c
    info = write_demo_mimic4(tmp_path / "cap", n_admissions=20, n_tail_codes=5000, n_radiology=0)
    assert info["tail_capped"] and info["n_tail_codes"][9] < 5000 == info["n_tail_codes"][10]
    assert info["rows"]["radiology"] == 0
