"""`train --terminology`: codes of a code<TAB>title file that no note of the label set carries join the fused model's
ranking, scored from their titles on a band fitted on dev's codes without a training note, and marked as from the
terminology when predicted; its bad input is one line before anything is written."""

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from clinicode.config import TrainConfig
from clinicode.train import train

from conftest import TINY_MODEL
from helpers import fails

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
PHRASES = {"C1": "glorp fever", "C2": "vantic syndrome", "C3": "zelmic palsy", "C4": "hurdic anaemia"}
DEV_CODE, DEV_TITLE = "C5", "quorbic nephritis"     # dev carries it, no training note does (it calibrates the band)
TEST_CODE, TEST_TITLE = "C6", "dorvic myalgia"      # only test carries it: the terminology alone knows it
SILENT = {"C7": "plenric ataxia", "C8": "wembly gout"}   # never said in a note
FILLER = "patient presented with history of review notes stable plan follow up discussed daily routine".split()


def _write(folder):
    rng = random.Random(1)
    folder.mkdir()
    for split, n in (("train", 100), ("dev", 60), ("test", 40)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                codes = sorted(rng.sample(sorted(PHRASES), rng.choice((1, 2, 3))))
                if split == "dev" and i % 4 == 0:
                    codes.append(DEV_CODE)
                if split == "test" and i % 4 == 0:
                    codes.append(TEST_CODE)
                text = " ".join(rng.choice(FILLER) for _ in range(20))
                for code in codes:
                    title = {DEV_CODE: DEV_TITLE, TEST_CODE: TEST_TITLE}.get(code) or PHRASES[code]
                    text += " , " + title + " " + " ".join(rng.choice(FILLER) for _ in range(10))
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": codes}) + "\n")
    terms = {**PHRASES, DEV_CODE: DEV_TITLE, TEST_CODE: TEST_TITLE, **SILENT}
    (folder / "terms.tsv").write_text("".join(f"{c}\t{t.title()}\n" for c, t in terms.items()), encoding="utf-8")
    return folder


# the paths `open` is given (Python's audit event) while a list is on the stack; one hook for the module's process
_OPENS: list[list[str]] = []


def _audit(event, args):
    if event == "open" and _OPENS and isinstance(args[0], (str, Path)):
        _OPENS[-1].append(str(args[0]))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("terminology")
    data = _write(base / "data")
    cfg = TrainConfig(model="fused", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                      device="cpu", min_doc_freq=1)
    lines: list[str] = []
    sys.addaudithook(_audit)
    _OPENS.append([])
    try:
        result = train(out_dir=base / "run", config=cfg, data_dir=data,
                       model_options={**SIZES, "terminology": str(data / "terms.tsv")}, progress=False,
                       report=lines.append)
    finally:
        opened = _OPENS.pop()
    return base / "run" / "checkpoint", {**result, "terms_opened": opened.count(str(data / "terms.tsv"))}, data


def test_the_terminology_file_is_read_once_a_train(run):
    assert run[1]["terms_opened"] == 1, run[1]["terms_opened"]


def test_a_code_no_note_carries_is_ranked_and_predicted_from_its_title(run):
    from clinicode.predict import Predictor

    ck, _, data = run
    from clinicode.data.labels import LabelSet

    codes = list(LabelSet.load(ck / "labels.json").codes)
    # the terminology's codes that neither train nor dev carries join after the label set's (C5: dev's, learnt)
    assert codes[-3:] == [TEST_CODE, *SILENT], codes
    band = json.loads((ck / "fusion.json").read_text())["terminology"]
    assert band["codes"] == 3 and band["dev_positives"] >= 5, band   # fitted on dev's C5, which no training note has
    pred = Predictor.from_checkpoint(ck, device="cpu", suggest=False)
    note = f"patient presented with {PHRASES['C2']} , then {TEST_TITLE} , review notes stable"
    rec = pred.predict([note], top_k=None)[0]
    got = {c.code: c for c in rec.predicted}
    assert TEST_CODE in got and "C2" in got, rec.predicted
    assert rec.scores[TEST_CODE] > max(rec.scores[c] for c in SILENT)
    out = rec.to_dict()
    marks = {p["code"]: p.get("source") for p in out["predicted"]}
    assert marks[TEST_CODE] == "terminology" and marks["C2"] is None, marks
    # the codes it scores from their titles alone, which a threshold moved later (the app's) marks too
    assert pred.terminology_codes == (TEST_CODE, *SILENT), pred.terminology_codes
    unmarked = pred.predict([note], top_k=None, threshold=1.0)[0]
    lower = {c.code: c.source for c in unmarked.at(0.0, terminology=pred.terminology_codes).predicted}
    assert lower[TEST_CODE] == lower["C7"] == "terminology" and lower["C2"] is None, lower
    from clinicode.fhir import TERMINOLOGY_TAG, bundle

    tags = {e["resource"]["code"]["coding"][0]["code"]: e["resource"]["meta"]["tag"]
            for e in bundle([out])["entry"] if "code" in e["resource"]}
    assert TERMINOLOGY_TAG in tags[TEST_CODE] and TERMINOLOGY_TAG not in tags["C2"], tags
    # evaluate counts test's gold C6 as a code of the checkpoint, found, not as one outside it
    from clinicode.evaluate import evaluate

    with_terms = evaluate(checkpoint=ck, data_dir=data, split="test", device="cpu")
    row = {r["code"]: r for r in with_terms["per_code"]}[TEST_CODE]
    assert row["support"] == 10 and row["f1"] > 0.9, row
    assert TEST_CODE not in (with_terms.get("codes_outside_labels") or {})


def test_the_code_system_without_titles_or_a_missing_file_is_one_line(demo_data, tmp_path):
    base = ["train", "--data", demo_data, "--epochs", "1"]
    fails([*base, "--out", tmp_path / "a", "--terminology", tmp_path / "none.tsv"], "no such file")
    icd10 = tmp_path / "icd10.tsv"
    icd10.write_text("I21.4\tNon-ST elevation myocardial infarction\nJ18.9\tPneumonia, unspecified organism\n",
                     encoding="utf-8")
    fails([*base, "--out", tmp_path / "b", "--terminology", icd10], "not of the checkpoint's code system")
    fails([*base, "--out", tmp_path / "c", "--terminology", "auto"], "ships no titles")
    fails([*base, "--out", tmp_path / "d", "--model", "leam", "--terminology", "auto"], "--terminology")
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_the_band_without_enough_dev_evidence_ranks_but_never_predicts():
    from clinicode.models.fused.fusion import MIN_TERMINOLOGY_POSITIVES, fit_terminology, logit

    rng = np.random.default_rng(0)
    cosine, said = rng.uniform(0, 1, 5000), rng.uniform(0, 1, 5000) < 0.05
    y = np.zeros(5000, bool)
    y[np.flatnonzero(said)[:MIN_TERMINOLOGY_POSITIVES - 1]] = True
    band = fit_terminology(cosine, said, y, 0.4, tp=50, fp=10, fn=20)
    best = band["scale"] * (1.0 + band["phrase"]) + band["bias"]      # cosine 1 and the title said
    assert best <= logit(np.float64(0.4)) + 1e-9 and band["dev_predicted"] == 0, band
    # with dev evidence: a said title is worth more than a cosine-only match, and the band predicts where dev gains
    y = said & (rng.uniform(0, 1, 5000) < 0.8)
    band = fit_terminology(cosine, said, y, 0.4, tp=50, fp=10, fn=20)
    assert band["phrase"] > 0 and band["dev_predicted"] > 0, band


def test_codes_a_labels_json_fixes_but_no_note_carries_are_left_to_the_terminology(tmp_path):
    """A labels.json that holds the terminology's codes (`review retrain`'s data keeps a checkpoint's codes): those no
    train or dev note carries get no LEAM or tfidf-lr row; they rejoin after the loop, scored from their titles."""
    from clinicode.data.labels import LabelSet
    from clinicode.predict import Predictor

    data = _write(tmp_path / "data")
    codes = (*PHRASES, DEV_CODE, TEST_CODE, *SILENT)
    LabelSet(codes, tuple("" for _ in codes)).save(data / "labels.json")
    cfg = TrainConfig(model="fused", epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, patience=1, seed=3,
                      device="cpu", min_doc_freq=1)
    train(out_dir=tmp_path / "run", config=cfg, data_dir=data,
          model_options={**SIZES, "terminology": str(data / "terms.tsv")}, progress=False)
    pred = Predictor.from_checkpoint(tmp_path / "run", device="cpu", suggest=False)
    assert pred.scorer.model.leam.config.n_labels == 5 and len(pred.codes) == 8, pred.codes
    assert set(pred.codes[5:]) == {TEST_CODE, *SILENT}


def test_a_warm_retrain_of_a_terminology_checkpoint_keeps_its_codes_rowless(run, tmp_path):
    from clinicode.checkpoint import load_checkpoint
    from clinicode.data.labels import LabelSet
    from clinicode.predict import Predictor
    from clinicode.train import retrain

    ck, _, data = run
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("train.jsonl", "dev.jsonl", "test.jsonl", "terms.tsv"):
        (folder / name).write_bytes((data / name).read_bytes())
    old = load_checkpoint(ck)
    LabelSet(old.labels.codes, old.labels.descriptions).save(folder / "labels.json")   # as review retrain writes it
    retrain(checkpoint=old, out_dir=tmp_path / "again", data_dir=folder, epochs=1, start="warm")
    pred = Predictor.from_checkpoint(tmp_path / "again", device="cpu", suggest=False)
    assert pred.scorer.model.leam.config.n_labels == old.model.n_parts
    assert set(pred.codes) == set(old.labels.codes) and len(pred.scorer.model.terminology) == 3
