"""What a checkpoint tells its readers beyond scores: each code's training count (rare/frequent slices in
`evaluate` and the app, for any run) and a title for every ICD-10-PCS code (never a blank)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clinicode.checkpoint import TRAIN_COUNTS_FILE, load_checkpoint
from clinicode.codes.icd10 import PCS_NO_TITLE
from clinicode.codes.systems import ICD10, MESH_OMIM, MIXED
from clinicode.data.prepared import read_split
from clinicode.errors import CheckpointError
from clinicode.evaluate import NO_TRAIN_COUNTS, evaluate, format_table
from clinicode.files import sha256_file
from clinicode.metrics import RARE_BELOW

from helpers import succeeds


@pytest.fixture
def ck(tiny_run, tmp_path) -> Path:
    dst = tmp_path / "run" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", dst)
    return dst


def _edit_manifest(ck: Path, change) -> None:
    m = json.loads((ck / "manifest.json").read_text())
    change(m)
    (ck / "manifest.json").write_text(json.dumps(m))


def test_the_checkpoint_keeps_each_codes_training_count_under_the_manifests_hash(tiny_run, demo_data):
    ck = tiny_run / "checkpoint"
    manifest = json.loads((ck / "manifest.json").read_text())
    assert manifest["files"][TRAIN_COUNTS_FILE] == sha256_file(ck / TRAIN_COUNTS_FILE)
    loaded = load_checkpoint(ck)
    train = read_split(demo_data, "train")
    want = {c: sum(c in set(row) for row in train["labels"]) for c in loaded.labels.codes}
    assert loaded.train_counts == want and sum(want.values()) > 0
    # train's own per-code rows and the checkpoint agree
    assert {r["code"]: r["train_count"] for r in loaded.metrics_test["per_code"]} == want


def test_evaluate_slices_rare_and_frequent_from_the_checkpoints_counts(tiny_run, demo_data):
    m = evaluate(checkpoint=tiny_run, data_dir=demo_data, split="test", device="cpu")
    counts = load_checkpoint(tiny_run).train_counts
    rare = [r for r in m["per_code"] if r["train_count"] < RARE_BELOW]
    assert all(r["train_count"] == counts[r["code"]] for r in m["per_code"])
    assert m["slices"]["rare"]["n_codes"] == len(rare)
    assert m["slices"]["frequent"]["n_codes"] == len(m["per_code"]) - len(rare)
    # the slices equal what train recorded for the same split and weights
    recorded = load_checkpoint(tiny_run).metrics_test["slices"]
    for name in ("rare", "frequent"):
        assert m["slices"][name] == pytest.approx(recorded[name], abs=1e-6)
    assert "frequent codes (>= 20 train)" in format_table(m)


def test_an_older_checkpoint_without_counts_loads_and_says_so(ck, demo_data, tmp_path):
    (ck / TRAIN_COUNTS_FILE).unlink()
    _edit_manifest(ck, lambda m: m["files"].pop(TRAIN_COUNTS_FILE))
    assert load_checkpoint(ck).train_counts is None
    m = evaluate(checkpoint=ck, data_dir=demo_data, split="test", device="cpu")
    assert m["slices"] is None and m["slices_note"] == NO_TRAIN_COUNTS and "train_count" not in m["per_code"][0]
    res = succeeds(["evaluate", "--checkpoint", ck.parent, "--data", demo_data, "--device", "cpu"])
    assert "no training counts" in res.stdout


def test_damaged_training_counts_are_refused(ck):
    data = json.loads((ck / TRAIN_COUNTS_FILE).read_text())
    data["counts"].popitem()
    (ck / TRAIN_COUNTS_FILE).write_text(json.dumps(data))
    _edit_manifest(ck, lambda m: m["files"].update({TRAIN_COUNTS_FILE: sha256_file(ck / TRAIN_COUNTS_FILE)}))
    with pytest.raises(CheckpointError, match=r"train_counts\.json: expected one non-negative training count per code"):
        load_checkpoint(ck)


def test_icd10_pcs_codes_without_a_title_say_so():
    codes = ("BW40ZZZ", "0TJB8ZZ", "02HV33Z", "J18.9", "401.9", "S72.001A", "custom")
    titles = ("", " ", "Insertion of Infusion Device into Superior Vena Cava, Percutaneous Approach", "", "", "", "")
    for system in (ICD10, MIXED):
        got = system.display_titles(codes, titles)
        assert got[:2] == (PCS_NO_TITLE, PCS_NO_TITLE)
        assert got[2].startswith("Insertion") and got[3:] == ("", "", "", "")


def test_a_mesh_id_shaped_like_a_pcs_code_is_no_pcs_code():
    # D012345 has a PCS code's shape (7 characters, section D); in a MeSH label set it is a MeSH descriptor
    got = MESH_OMIM.display_titles(("D012345", "D003920", "OMIM:312080"), ("", "Diabetes Mellitus", ""))
    assert got == ("", "Diabetes Mellitus", "")


def test_predict_output_gives_pcs_codes_a_title_not_a_blank(ck, tmp_path):
    labels = json.loads((ck / "labels.json").read_text())
    labels[0], labels[1] = {"code": "BW40ZZZ", "description": ""}, {"code": "0TJB8ZZ", "description": ""}
    (ck / "labels.json").write_text(json.dumps(labels))
    _edit_manifest(ck, lambda m: m["files"].update({"labels.json": sha256_file(ck / "labels.json")}))
    counts = json.loads((ck / TRAIN_COUNTS_FILE).read_text())["counts"]
    old = list(counts)
    counts = {"BW40ZZZ" if c == old[0] else "0TJB8ZZ" if c == old[1] else c: n for c, n in counts.items()}
    (ck / TRAIN_COUNTS_FILE).write_text(json.dumps({"counts": counts}))
    _edit_manifest(ck, lambda m: m["files"].update({TRAIN_COUNTS_FILE: sha256_file(ck / TRAIN_COUNTS_FILE)}))
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"id": "n1", "text": "abdominal ultrasound and cystoscopy were done"}) + "\n")
    out = tmp_path / "pred.jsonl"
    succeeds(["predict", "--checkpoint", ck.parent, "--input", notes, "--output", out, "--threshold", "0.0", "--device",
              "cpu"])
    rec = json.loads(out.read_text().splitlines()[0])
    titles = {p["code"]: p["description"] for p in rec["predicted"]}
    assert titles["BW40ZZZ"] == PCS_NO_TITLE and titles["0TJB8ZZ"] == PCS_NO_TITLE
