"""MIMIC-IV preparation on synthetic MIMIC-IV: exactly the documents, labels, texts and descriptions the rules define.

`_reference` rebuilds each dataset the plain way (whole tables in pandas, `drop_duplicates`, dots placed by hand), so
a missing dedupe, a trailing dot, a lost leading zero, a leaked radiology note or a recount of a pinned list makes
the two disagree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from clinicode.constants import SPLITS
from clinicode.data.prepare import prepare_mimic
from clinicode.errors import ConfigError, DataFormatError
from clinicode.synthetic.mimic4 import write_demo_mimic4


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("m4") / "raw"
    write_demo_mimic4(out, n_admissions=700, n_tail_codes=150, seed=5)
    return out


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _dot(code: str, version: int, is_dx: bool) -> str:
    if version == 10:
        return code[:3] + "." + code[3:] if is_dx and len(code) > 3 else code
    if not is_dx:
        return code[:2] + "." + code[2:]
    cut = 4 if code.startswith("E") else 3
    return code[:cut] + "." + code[cut:] if len(code) > cut else code


def _reference(raw: Path, version: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """(documents: hadm_id, subject_id, text; codes: hadm_id, code; titles) by the rules, the plain way."""
    notes = _csv(raw / "note" / "discharge.csv")
    # Edin et al.'s rule (docs/domain.md): a text repeated within an admission is kept once, first in file order.
    notes = notes[(notes["hadm_id"] != "") & (notes["text"].str.strip() != "")].drop_duplicates(["hadm_id", "text"])
    notes = notes.assign(h=notes["hadm_id"].astype(int), seq=notes["note_seq"].astype(int), row=range(len(notes)))
    notes = notes.sort_values(["h", "seq", "row"])
    docs = notes.groupby("h").agg(text=("text", " ".join), subject_id=("subject_id", "first")).reset_index()
    parts, titles = [], {}
    for table, is_dx in (("diagnoses_icd", True), ("procedures_icd", False)):
        c = _csv(raw / "hosp" / f"{table}.csv")
        c = c[c["icd_version"] == str(version)]
        parts.append(pd.DataFrame({"h": c["hadm_id"].astype(int), "code": [_dot(x, version,
                                                                                is_dx) for x in c["icd_code"]]}))
        t = _csv(raw / "hosp" / f"d_icd_{'diagnoses' if is_dx else 'procedures'}.csv")
        t = t[t["icd_version"] == str(version)]
        titles.update({_dot(x, version, is_dx): title for x, title in zip(t["icd_code"], t["long_title"])})
    codes = pd.concat(parts).drop_duplicates()
    return docs, codes[codes["h"].isin(set(docs["h"]))], titles


def _prepared(out: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(out / f"{s}.parquet").assign(split=s) for s in SPLITS], ignore_index=True)


@pytest.mark.parametrize("version", [9, 10])
def test_full_label_set_and_an_edin_split_file_give_exactly_the_rules_documents(raw, tmp_path, version):
    docs, codes, titles = _reference(raw, version)
    counts = codes.groupby("code")["h"].nunique()
    kept = set(counts[counts >= 3].index)
    labelled = codes[codes["code"].isin(kept)].groupby("h")["code"].agg(lambda s: sorted(set(s)))
    ids = sorted(labelled.index)
    # Edin et al.'s format: val is dev; one labelled admission left out of every split
    split_csv = tmp_path / "split.csv"
    names = ["train", "val", "test"]
    split_csv.write_text("hadm_id,split\n" + "".join(f"{h},{names[i % 3]}\n"
                                                     for i, h in enumerate(ids[1:])) + "99999999,test\n")

    out = tmp_path / "out"
    summary = prepare_mimic(raw, out, icd_version=version, label_set="full", min_code_count=3, splits_file=split_csv)
    got = _prepared(out)
    assert sorted(got["id"].astype(int)) == ids[1:]
    assert summary["dropped"]["admissions_not_in_split_lists"] == 1 and summary["missing_from_data"]["test"] == 1
    by_id = docs.set_index("h")
    for row in got.itertuples():
        h = int(row.id)
        assert row.text == by_id.loc[h, "text"], h                              # dedupe, order, no radiology text
        assert sorted(row.labels) == labelled.loc[h], h
        assert row.split == {"train": "train", "val": "dev", "test": "test"}[names[ids[1:].index(h) % 3]]
    labels = json.loads((out / "labels.json").read_text())
    assert [x["code"] for x in labels] == sorted(kept)
    assert all(x["description"] == titles[x["code"]] for x in labels)
    assert not any(c.endswith(".") for c in kept)                               # never a trailing dot
    if version == 10:
        assert "I10" in kept and any(c.startswith("0") and len(c) == 7 for c in kept)  # 3-char CM, PCS with its 0
    else:
        assert any(c.startswith("0") for c in kept)                             # ICD-9 leading zeros (038.9, 00.40 ...)


def test_no_radiology_text_and_no_duplicate_row_reaches_a_document(raw, tmp_path):
    prepare_mimic(raw, tmp_path / "out", icd_version=10, label_set="full")
    texts = _prepared(tmp_path / "out")["text"].tolist()
    radiology = [t for t in _csv(raw / "note" / "radiology.csv")["text"] if len(t) > 40]
    assert radiology and not any(r in t for r in radiology[:300] for t in texts)
    notes = _csv(raw / "note" / "discharge.csv")
    by_id = dict(zip(_prepared(tmp_path / "out")["id"], texts))
    dup = notes[notes.duplicated(keep=False) & (notes["text"].str.strip() != "") & notes["hadm_id"].isin(by_id)]
    assert dup["hadm_id"].nunique() >= 3
    for h, text in dup.drop_duplicates()[["hadm_id", "text"]].itertuples(index=False):
        assert by_id[h].count(text) == 1, h


def test_a_text_repeated_under_a_new_note_id_is_kept_once_as_edins_rule_says(raw, tmp_path):
    """Every MIMIC-IV-Note row has its own note_id: a repeated text (new note_id, note_seq, charttime, storetime) is
    a duplicate of its admission by (hadm_id, text); the same text in another admission is not."""
    copy = tmp_path / "raw"
    shutil.copytree(raw, copy)
    notes = _csv(copy / "note" / "discharge.csv")
    ds = notes[(notes["note_type"] == "DS") & (notes["text"].str.strip() != "") & (notes["hadm_id"] != "")]
    ds = ds.drop_duplicates("hadm_id").head(6)
    repeats = ds.assign(note_id=ds["note_id"] + "-R", note_seq=(ds["note_seq"].astype(int) + 97).astype(str),
                        charttime="2190-01-01 00:00:00", storetime="2190-01-02 09:30:00")
    # Two repeats go before their original in the file with a smaller note_seq: still the first-in-file row is kept.
    early = repeats.head(2).assign(note_seq="0")
    other = ds.iloc[[0]].assign(hadm_id=ds["hadm_id"].iloc[1], note_id="X-OTHER", note_seq="999")  # another admission
    edited = pd.concat([early, notes, repeats.iloc[2:], other], ignore_index=True)
    edited.to_csv(copy / "note" / "discharge.csv", index=False)

    summary = prepare_mimic(copy, tmp_path / "out", icd_version=10, label_set="full")
    docs, _, _ = _reference(copy, 10)
    want = dict(zip(docs["h"].astype(str), docs["text"]))
    got = _prepared(tmp_path / "out")
    got_by_id = dict(zip(got["id"].astype(str), got["text"]))
    assert got_by_id and all(got_by_id[h] == want[h] for h in got_by_id)
    for h, text in ds[["hadm_id", "text"]].itertuples(index=False):
        if h in got_by_id:
            assert got_by_id[h].count(text) == 1, h
    assert ds["hadm_id"].iloc[1] in got_by_id and got_by_id[ds["hadm_id"].iloc[1]].count(ds["text"].iloc[0]) == 1
    assert summary["dropped"]["discharge.duplicate_text_of_admission"] >= 6


def test_a_pinned_top50_list_is_used_as_given_not_recounted(raw, tmp_path):
    docs, codes, titles = _reference(raw, 10)
    ranked = codes.groupby("code")["h"].nunique().sort_values(ascending=False).index.tolist()
    pinned = ranked[10:60]  # not the 50 most frequent; written undotted, as MIMIC-IV-ICD's file is
    splits = tmp_path / "splits"
    splits.mkdir()
    ids = sorted(docs["h"])
    for i, s in enumerate(SPLITS):
        (splits / f"{s}_50_hadm_ids.csv").write_text("hadm_id\n" + "".join(f"{h}\n" for h in ids[i::3]))
    (splits / "top50_codes.txt").write_text("".join(c.replace(".", "") + "\n" for c in pinned))
    summary = prepare_mimic(raw, tmp_path / "out", icd_version=10, splits_dir=splits)
    labels = [x["code"] for x in json.loads((tmp_path / "out" / "labels.json").read_text())]
    assert labels == sorted(pinned) and summary["label_set"] == "top50" and summary["n_labels"] == 50
    got = _prepared(tmp_path / "out")
    assert all(set(ls) <= set(pinned) and len(ls) for ls in got["labels"])


def test_label_titles_missing_from_the_tables_come_from_the_cms_icd10_cm_list(raw, tmp_path):
    copy = tmp_path / "raw"
    import shutil

    shutil.copytree(raw, copy)
    (copy / "hosp" / "d_icd_diagnoses.csv").write_text("icd_code,icd_version,long_title\n")
    prepare_mimic(copy, tmp_path / "out", icd_version=10)
    labels = json.loads((tmp_path / "out" / "labels.json").read_text())
    cm = [x for x in labels if not (len(x["code"]) == 7 and "." not in x["code"])]
    assert cm and all(x["description"] for x in cm)
    assert {x["code"]: x["description"] for x in labels}.get("I10") in (None, "Essential (primary) hypertension")


def test_note_dir_may_be_a_separate_folder_and_options_are_checked(raw, tmp_path):
    import shutil

    hosp, note = tmp_path / "mimic-iv", tmp_path / "mimic-iv-note"
    shutil.copytree(raw / "hosp", hosp / "hosp")
    shutil.copytree(raw / "note", note / "note")
    a = prepare_mimic(hosp, tmp_path / "a", note_dir=note, icd_version=9)
    b = prepare_mimic(raw, tmp_path / "b", icd_version=9)
    assert a["splits"] == b["splits"]
    with pytest.raises(DataFormatError, match=r"note/discharge.csv\(.gz\) not found in .*mimic-iv; .* Pass --note-dir"):
        prepare_mimic(hosp, tmp_path / "c", icd_version=9)
    with pytest.raises(ConfigError, match=r"is MIMIC-IV, which codes in ICD-9 and ICD-10: pass --icd-version 9 or 10"):
        prepare_mimic(raw, tmp_path / "d")
    with pytest.raises(ConfigError, match=r"--label-set caml50 is CAML's MIMIC-III list"):
        prepare_mimic(raw, tmp_path / "d", icd_version=9, label_set="caml50")
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_a_published_protocols_counts_are_enforced(raw, tmp_path, monkeypatch):
    """With a protocol's own files and options the counts must equal its published ones; else one line names both."""
    from clinicode.data import prepare as prepare_module, protocols

    docs, codes, _ = _reference(raw, 10)
    ids = sorted(codes["h"].unique())
    split = tmp_path / "proto_split.csv"
    split.write_text("hadm_id,split\n" + "".join(f"{h},{['train', 'val', 'test'][i % 3]}\n" for i, h in enumerate(ids)))
    n = {s: len(ids[i::3]) for i, s in enumerate(SPLITS)}
    fake = protocols.Protocol("fake-mimic4-icd10", "a test", "mimic4", 10, "full", 1, n,
                              frozenset({protocols._sha256(split)}))
    monkeypatch.setattr(prepare_module, "find_protocol", lambda files: fake if split in files else None)
    summary = prepare_mimic(raw, tmp_path / "ok", icd_version=10, label_set="full", splits_file=split)
    assert summary["protocol"] == "fake-mimic4-icd10" and summary["comparable"] is True and "note" not in summary
    wrong = protocols.Protocol("fake-mimic4-icd10", "a test", "mimic4", 10, "full", 1, {**n, "train": n["train"] + 7},
                               fake.files)
    monkeypatch.setattr(prepare_module, "find_protocol", lambda files: wrong if split in files else None)
    with pytest.raises(DataFormatError, match=rf"fake-mimic4-icd10 split counts not reproduced: train {n['train']:,} "
                                              rf"\(expected {n['train'] + 7:,}\)"):
        prepare_mimic(raw, tmp_path / "bad", icd_version=10, label_set="full", splits_file=split)
    # other options than the protocol's: not enforced, and said to be not comparable
    other = prepare_mimic(raw, tmp_path / "other", icd_version=10, label_set="full", min_code_count=5,
                          splits_file=split)
    assert other["protocol"] is None and other["comparable"] is False


def test_the_shipped_protocol_files_are_recognised():
    from clinicode.data.protocols import PROTOCOLS, find_protocol

    from conftest import SHARED_DATA

    root = SHARED_DATA / "mimic-splits"
    if not root.is_dir():
        pytest.skip("../shared/data/mimic-splits is not here")
    edin = find_protocol([root / "edin2023" / "mimiciv_icd10_split.csv"])
    assert edin is not None and edin.name == "edin-mimic4-icd10" and sum(edin.counts.values()) == 122_279
    top = find_protocol([root / "nguyen2023" / "icd9" / f"{s}_50_hadm_ids.csv" for s in SPLITS]
                        + [root / "nguyen2023" / "icd9" / "top50_codes.txt"])
    assert top is not None and top.counts == {"train": 170_664, "dev": 6_406, "test": 12_405}
    caml = find_protocol([SHARED_DATA / "caml-mimic-ids" / f"{s}_full_hadm_ids.csv" for s in SPLITS])
    assert caml is not None and caml.name == "caml-mimic3-full"
    assert find_protocol([root / "edin2023" / "mimiciv_icd10_split.csv",
                          root / "edin2023" / "mimiciv_icd9_split.csv"]) is None
    assert len({p.name for p in PROTOCOLS}) == len(PROTOCOLS)
