"""`train --fit-on train+dev` (the default model's default): once dev has chosen the fusion and the threshold,
tfidf-lr, the titles and the mentions refit on train and dev; every code keeps the fusion numbers dev chose, dev's
metrics stay those of the model fitted on train, and test scores the refitted model."""

import json
import random

import numpy as np
import pytest

from clinicode.config import TrainConfig
from clinicode.errors import ConfigError
from clinicode.models.fused.mentions import MENTIONS_FILE
from clinicode.train import train

from conftest import TINY_MODEL

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
PHRASES = {"C1": "glorp fever", "C2": "vantic syndrome", "C3": "zelmic palsy", "C4": "hurdic anaemia"}
DEV_ONLY = "blarvic tremens"   # C1's mention that only dev's coders marked
NEW_CODE, NEW_PHRASE = "C5", "quorbic nephritis"   # a code no training note carries
FILLER = "patient presented with history of review notes stable plan follow up discussed daily routine".split()


def _write(folder, *, new_code=False):
    rng = random.Random(1)
    folder.mkdir()
    for split, n in (("train", 100), ("dev", 60), ("test", 40)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                codes = sorted(rng.sample(sorted(PHRASES), rng.choice((1, 2, 3))))
                if new_code and split != "train" and i % 4 == 0:
                    codes.append(NEW_CODE)
                text, evidence = " ".join(rng.choice(FILLER) for _ in range(20)), []
                for code in codes:
                    phrase = (NEW_PHRASE if code == NEW_CODE else
                              DEV_ONLY if code == "C1" and split != "train" else PHRASES[code])
                    text += " , "
                    evidence.append({"code": code, "start": len(text), "end": len(text) + len(phrase)})
                    text += phrase + " " + " ".join(rng.choice(FILLER) for _ in range(10))
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": codes, "evidence": evidence}) + "\n")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("fit_on")
    data = {False: _write(base / "data"), True: _write(base / "data-new-code", new_code=True)}
    out = {}
    for new_code in (False, True):
        for fit_on in ("train", "train+dev"):
            cfg = TrainConfig(model="fused", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                              device="cpu", min_doc_freq=1)
            lines: list[str] = []
            name = fit_on + ("-new-code" if new_code else "")
            result = train(out_dir=base / name, config=cfg, data_dir=data[new_code],
                           model_options={**SIZES, "fit_on": fit_on},
                           progress=False, report=lines.append)
            out[name] = (base / name / "checkpoint", result, lines)
    return out


def test_the_refit_learns_from_dev_and_keeps_what_dev_chose(runs):
    (only, r_only, _), (both, r_both, lines) = runs["train"], runs["train+dev"]
    phrases = {fit_on: json.loads((runs[fit_on][0] / MENTIONS_FILE).read_text())["phrases"]
               for fit_on in ("train", "train+dev")}
    assert DEV_ONLY not in phrases["train"]["C1"]
    assert DEV_ONLY in phrases["train+dev"]["C1"] and PHRASES["C1"] in phrases["train+dev"]["C1"]
    assert json.loads((both / "fusion.json").read_text())["fit_on"] == "train+dev"
    assert "fit_on" not in json.loads((only / "fusion.json").read_text())
    # the fusion dev chose and the threshold are the same; dev's metrics are the train-only model's
    from safetensors.numpy import load_file

    a, b = load_file(str(only / "fusion.safetensors")), load_file(str(both / "fusion.safetensors"))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert r_only["threshold"] == r_both["threshold"]
    assert r_only["dev"] == r_both["dev"]
    # a note that writes C1 as dev does: only the refitted model has learnt that phrase, and shows it as evidence
    from clinicode.predict import Predictor

    note = f"patient presented with {PHRASES['C2']} , then {DEV_ONLY} , review notes stable"
    score = {}
    for fit_on in ("train", "train+dev"):
        ck = runs[fit_on][0]
        [res] = Predictor.from_checkpoint(ck.parent, device="cpu").predict([note], top_k=4)
        score[fit_on] = dict(res.scores).get("C1", 0.0)
    assert score["train+dev"] > 2 * score["train"], score
    counts = json.loads((both / "train_counts.json").read_text())
    assert sum(counts["counts"].values()) == sum(
        len(json.loads(line)["labels"]) for split in ("train", "dev")
        for line in (both.parents[1] / "data" / f"{split}.jsonl").read_text().splitlines())
    assert "codes_outside_train" in json.loads((both / "fusion.json").read_text())
    assert any("--fit-on train+dev" in line for line in lines)


def test_a_code_only_dev_carries_joins_the_label_set_and_is_found(runs):
    from clinicode.predict import Predictor

    both, _, lines = runs["train+dev-new-code"]
    codes = {name: [c["code"] for c in json.loads((ck / "labels.json").read_text())] for name, (ck, _, _) in
             (("train", runs["train-new-code"]), ("train+dev", runs["train+dev-new-code"]))}
    assert NEW_CODE not in codes["train"] and NEW_CODE in codes["train+dev"]
    assert json.loads((both / "fusion.json").read_text())["codes_outside_train"] == 1
    assert any("1 codes only dev carries joined the label set" in line for line in lines)
    [res] = Predictor.from_checkpoint(both.parent, device="cpu").predict(
        [f"patient presented with {NEW_PHRASE} , review notes stable"], top_k=5)
    assert NEW_CODE in [p.code for p in res.predicted]
    # the test notes coded C5: the model fitted on train cannot know the code, the refitted one finds most of them
    rows = [json.loads(line) for line in (both.parents[1] / "data-new-code" / "test.jsonl").read_text().splitlines()]
    coded = [r["text"] for r in rows if NEW_CODE in r["labels"]]
    found = [NEW_CODE in [p.code for p in x.predicted]
             for x in Predictor.from_checkpoint(both.parent, device="cpu").predict(coded, top_k=5)]
    assert len(coded) >= 5 and sum(found) >= 0.8 * len(coded)


def test_fit_on_takes_only_its_two_values():
    from clinicode.models.fused.options import FusedOptions

    with pytest.raises(ConfigError, match="--fit-on must be train or train\\+dev, got 'dev'"):
        FusedOptions(fit_on="dev")


def test_evaluate_says_dev_is_in_sample_for_a_refitted_checkpoint(runs):
    from helpers import succeeds

    both = runs["train+dev"][0]
    data = both.parents[1] / "data"
    res = succeeds(["evaluate", "--checkpoint", both.parent, "--data", data, "--split", "dev", "--device", "cpu"])
    assert "its dev figures are in-sample; judge it on test" in res.stderr
    res = succeeds(["evaluate", "--checkpoint", runs["train"][0].parent, "--data", data, "--split", "dev",
                    "--device", "cpu"])
    assert "in-sample" not in res.stderr
    res = succeeds(["evaluate", "--checkpoint", both.parent, "--data", data, "--split", "test", "--device", "cpu"])
    assert "in-sample" not in res.stderr


def test_single_label_data_refits_on_the_dev_notes_of_one_code(tmp_path):
    """A softmax part learns from notes of exactly one code: a dev note with none is left out of the refit, not a
    crash at the end of training."""
    rng = random.Random(2)
    data = tmp_path / "data"
    data.mkdir()
    for split, n in (("train", 60), ("dev", 30), ("test", 20)):
        with open(data / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                code = rng.choice(sorted(PHRASES))
                labels = [] if split == "dev" and i == 0 else [code]
                text = " ".join(rng.choice(FILLER) for _ in range(12)) + " " + PHRASES[code]
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": labels}) + "\n")
    cfg = TrainConfig(model="fused", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                      device="cpu", min_doc_freq=1)
    result = train(out_dir=tmp_path / "run", config=cfg, data_dir=data, model_options=SIZES, progress=False)
    fusion = json.loads((tmp_path / "run" / "checkpoint" / "fusion.json").read_text())
    assert fusion["fit_on"] == "train+dev" and result["test"]["accuracy"] > 0.5


def test_compare_scores_a_grown_label_set_against_one_without_the_new_code(runs):
    """The default model learns the codes only dev carries and tfidf-lr does not: `compare` scores both over the
    union of their codes, a code a run lacks never predicted by it, and says so."""
    from clinicode.evaluate import compare, format_comparison

    grown, plain = runs["train+dev-new-code"][0].parent, runs["train-new-code"][0].parent
    data = grown.parent / "data-new-code"
    c = compare(runs_a=[grown], runs_b=[plain], data_dir=data, n_boot=50, device="cpu")
    assert NEW_CODE in c["codes"] and c["codes_lacking"] == {str(plain): 1}
    assert "a code a run lacks never predicted by it" in format_comparison(c)
    # the test notes' C5 codes count: missed by the run that lacks the code, so it scores below its own evaluation
    from clinicode.evaluate import evaluate

    own = evaluate(checkpoint=plain, data_dir=data, split="test", device="cpu")
    assert own["n_gold_outside_labels"] > 0 and c["metrics_b"]["f1_micro"] < own["f1_micro"]
