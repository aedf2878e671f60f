"""No command loses or alters a user's files, and none prints a plausible wrong number (issue #19).

The path matrix runs every writing command against every bad output path: each case must exit with status 1,
print one line (what was given, what to pass instead), show no traceback, and leave the whole folder tree (inputs,
the would-be output and everything around them) byte-identical. The cases after it pin each finding of the fault
round: evaluation judged by the checkpoint's codes, readable file modes, `--resume` refusing other options or data,
degenerate training, OS errors as one line, and the silent oddities.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from clinicode.synthetic.mimic3 import write_demo_mimic

from conftest import TINY_CLI
from helpers import fails, snapshot, succeeds

ROOT = Path(__file__).resolve().parents[2]


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_run) -> dict[str, Path]:
    """One folder holding every kind of input a command reads, a user's own files, and a finished run."""
    root = tmp_path_factory.mktemp("world")
    write_demo_mimic(root / "mimic", n_admissions=60, seed=3)
    from clinicode.data.prepare import prepare_mimic

    prepare_mimic(root / "mimic", root / "prepared")
    shutil.copytree(ROOT.parent / "shared" / "data" / "caml-mimic-ids", root / "splits")
    shutil.copytree(tiny_run, root / "runs" / "tiny")
    (root / "work").mkdir()
    (root / "work" / "thesis.txt").write_text("a user's own file, not clinicode's")
    (root / "file.txt").write_text("a user's file")
    _jsonl(root / "notes.jsonl", [{"id": f"n{i}", "text": f"hypertension and heart failure {i}"} for i in range(3)])
    (root / "txt").mkdir()
    (root / "txt" / "a.txt").write_text("atrial fibrillation on coumadin")
    return {"root": root, "M": root / "mimic", "D": root / "prepared", "S": root / "splits",
            "RUN": root / "runs" / "tiny",
            "W": root / "work", "F": root / "file.txt", "N": root / "notes.jsonl", "T": root / "txt"}


# (case id, command line with {NAME} placeholders, the message's pinned part)
BAD_PATHS = [
    # prepare --out: the fault round found it emptying whatever it was pointed at
    ("prepare-out-is-user-folder", "prepare --mimic-dir {M} --out {W}",
     "already holds files that `clinicode prepare` did not write"),
    ("prepare-out-is-mimic-dir", "prepare --mimic-dir {M} --out {M}", "is the input --mimic-dir"),
    ("prepare-out-is-parent-of-input", "prepare --mimic-dir {M} --out {root}", "contains the input --mimic-dir"),
    ("prepare-out-inside-input", "prepare --mimic-dir {M} --out {M}/prepared",
     "lies inside the input folder --mimic-dir"),
    ("prepare-out-is-splits-dir", "prepare --mimic-dir {M} --splits-dir {S} --out {S}", "is the input --splits-dir"),
    ("prepare-out-is-a-file", "prepare --mimic-dir {M} --out {F}", "is an existing file; pass a new folder name"),
    ("prepare-out-below-a-file", "prepare --mimic-dir {M} --out {F}/data", "is a file, not a folder"),
    ("prepare-out-unwritable", "prepare --mimic-dir {M} --out /proc/clinicode-out", "cannot write in /proc"),
    ("prepare-out-is-a-run", "prepare --mimic-dir {M} --out {RUN}",
     "already holds files that `clinicode prepare` did not write"),
    # demo-data --out
    ("demo-out-is-user-folder", "demo-data --out {W} --n-admissions 20",
     "already holds files that `clinicode demo-data` did not write"),
    ("demo-out-is-prepared-data", "demo-data --out {D} --n-admissions 20",
     "already holds files that `clinicode demo-data` did not write"),
    ("demo-out-is-a-file", "demo-data --out {F} --n-admissions 20", "is an existing file"),
    ("demo-out-below-a-file", "demo-data --out {F}/x --n-admissions 20", "is a file, not a folder"),
    ("demo-out-unwritable", "demo-data --out /proc/clinicode-demo --n-admissions 20", "cannot write in /proc"),
    ("demo-out-is-hadm-ids-folder", "demo-data --out {S} --hadm-ids-from {S} --n-admissions 20",
     "is the input --hadm-ids-from"),
    # train --out
    ("train-out-is-data", "train --data {D} --out {D}", "is the input --data"),
    ("train-out-is-parent-of-data", "train --data {D} --out {root}", "contains the input --data"),
    ("train-out-inside-data", "train --data {D} --out {D}/run", "lies inside the input folder --data"),
    ("train-out-is-user-folder", "train --data {D} --out {W}",
     "already holds files that `clinicode train` did not write"),
    ("train-resume-into-user-folder", "train --data {D} --out {W} --resume",
     "already holds files that `clinicode train` did not write"),
    ("train-out-is-a-file", "train --data {D} --out {F}", "is an existing file"),
    ("train-out-below-a-file", "train --data {D} --out {F}/run", "is a file, not a folder"),
    ("train-out-unwritable", "train --data {D} --out /proc/clinicode-run", "cannot write in /proc"),
    ("train-out-is-mimic-dir", "train --mimic-dir {M} --out {M}", "is the input --mimic-dir"),
    ("train-out-holds-a-run", "train --data {D} --out {RUN}", "already holds a run; pass --resume"),
    # predict --output: the fault round found it overwriting the notes
    ("predict-output-is-input", "predict --checkpoint {RUN} --input {N} --output {N}", "is the input --input"),
    ("predict-output-inside-input-folder", "predict --checkpoint {RUN} --input {T} --output {T}/codes.jsonl",
     "lies inside the input folder --input"),
    ("predict-output-inside-checkpoint", "predict --checkpoint {RUN} --input {N} --output {RUN}/checkpoint/codes.jsonl",
     "lies inside the input folder --checkpoint"),
    ("predict-output-is-a-folder", "predict --checkpoint {RUN} --input {N} --output {W}",
     "is a folder; pass a file name"),
    ("predict-output-is-user-file", "predict --checkpoint {RUN} --input {N} --output {F}",
     "is a file that `clinicode predict` did not write"),
    ("predict-output-below-a-file", "predict --checkpoint {RUN} --input {N} --output {F}/codes.jsonl",
     "is a file, not a folder"),
    ("predict-output-unwritable", "predict --checkpoint {RUN} --input {N} --output /proc/codes.jsonl",
     "cannot write in /proc"),
    # evaluate --output: no guard at all before
    ("evaluate-output-is-a-split", "evaluate --checkpoint {RUN} --data {D} --output {D}/test.parquet",
     "lies inside the input folder --data"),
    ("evaluate-output-inside-checkpoint",
     "evaluate --checkpoint {RUN} --data {D} --output {RUN}/checkpoint/metrics_test.json",
     "lies inside the input folder --checkpoint"),
    ("evaluate-output-is-user-file", "evaluate --checkpoint {RUN} --data {D} --output {F}",
     "is a file that `clinicode evaluate` did not write"),
    ("evaluate-output-is-a-folder", "evaluate --checkpoint {RUN} --data {D} --output {W}",
     "is a folder; pass a file name"),
    ("evaluate-output-unwritable", "evaluate --checkpoint {RUN} --data {D} --output /proc/m.json",
     "cannot write in /proc"),
    ("compare-output-is-user-file", "compare --a {RUN} --b {RUN} --data {D} --output {F}",
     "is a file that `clinicode compare` did not write"),
    ("compare-output-is-checkpoint-file",
     "compare --a {RUN} --b {RUN} --data {D} --output {RUN}/checkpoint/labels.json",
     "lies inside the input folder --a"),
]


@pytest.mark.parametrize("case,command,message", BAD_PATHS, ids=[c[0] for c in BAD_PATHS])
def test_bad_output_path_is_refused_and_nothing_changes(world, case, command, message):
    before = snapshot(world["root"])
    args = [a.format(**{k: str(v) for k, v in world.items()}) for a in command.split()]
    fails(args + (["--device", "cpu"] if args[0] in ("predict", "evaluate", "compare") else []), message)
    assert snapshot(world["root"]) == before  # inputs, user files, the target: byte for byte (no probe left either)
    assert not Path("/proc/clinicode-out").exists()


def test_prepare_may_replace_only_its_own_earlier_output(world, tmp_path):
    out = tmp_path / "new" / "deeper" / "data"  # missing parents are created
    succeeds(["prepare", "--mimic-dir", world["M"], "--out", out])
    first = snapshot(out)
    (tmp_path / "empty").mkdir()
    succeeds(["prepare", "--mimic-dir", world["M"], "--out", tmp_path / "empty"])  # an empty folder is fine
    succeeds(["prepare", "--mimic-dir", world["M"], "--out", out])  # its own earlier output: replaced
    assert snapshot(out).keys() == first.keys()
    assert sorted(p.name for p in out.parent.iterdir()) == ["data"]  # no temporaries left


def test_predict_and_evaluate_replace_their_own_outputs(world, tmp_path):
    codes, metrics = tmp_path / "new" / "codes.jsonl", tmp_path / "other" / "m.json"  # missing parents are created
    for _ in range(2):
        succeeds(["predict", "--checkpoint", world["RUN"], "--input", world["N"], "--output", codes, "--device", "cpu"])
        succeeds(["evaluate", "--checkpoint", world["RUN"], "--data", world["D"], "--output", metrics, "--device",
                  "cpu"])
    assert [json.loads(x)["id"] for x in codes.read_text().splitlines()] == ["n0", "n1", "n2"]
    assert json.loads(metrics.read_text())["kind"] == "evaluation"
    # an evaluate output inside the run folder (beside, not inside, its checkpoint) is a normal place for it
    run = tmp_path / "run"
    shutil.copytree(world["RUN"], run, ignore=shutil.ignore_patterns("state"))
    succeeds(["evaluate", "--checkpoint", run, "--data", world["D"], "--output", run / "metrics.json", "--device",
              "cpu"])


def test_predict_output_folder_leaves_no_partial_behind(world):
    """The fault round: `--output` naming a folder crashed with a traceback and left OUT.partial."""
    before = snapshot(world["root"])
    fails(["predict", "--checkpoint", world["RUN"], "--input", world["N"], "--output", world["T"], "--device", "cpu"],
          "is a folder")
    assert snapshot(world["root"]) == before and not Path(str(world["T"]) + ".partial").exists()


# ------------------------------------------------------------------------- evaluate: the checkpoint's codes decide
def test_evaluate_scores_gold_codes_the_folders_own_train_split_lacks(tiny_run, demo_data, tmp_path):
    """A test split whose codes the folder's train split lacks was scored against the folder's codes (micro-F1 0.236
    instead of 0.302 in the fault round). The checkpoint's label set is the truth."""
    from clinicode.evaluate import evaluate
    from clinicode.metrics import all_metrics
    from clinicode.predict import Predictor

    test = pd.read_parquet(demo_data / "test.parquet")
    counts = pd.Series([c for row in test["labels"] for c in row]).value_counts()
    common = counts.index[0]  # keep one code in train: every other test code is unknown to the folder's train split
    d = tmp_path / "coded"
    d.mkdir()
    _jsonl(d / "train.jsonl", [{"id": "t0", "text": "hypertension", "labels": [common]}])
    _jsonl(d / "dev.jsonl", [{"id": "d0", "text": "hypertension", "labels": [common]}])
    _jsonl(d / "test.jsonl", [{"id": r.id, "text": r.text, "labels": list(r.labels)} for r in test.itertuples()])
    m = evaluate(checkpoint=tiny_run, data_dir=d, device="cpu")
    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    truth = all_metrics(pred.labels.multi_hot(test["labels"]), pred.score(test["text"].tolist()),
                        threshold=pred.threshold)
    assert m["f1_micro"] == pytest.approx(truth["f1_micro"]) and m["auc_macro"] == pytest.approx(truth["auc_macro"])
    assert m["n_gold_outside_labels"] == 0 and m["n_docs"] == len(test)


# ------------------------------------------------------------------------------------------ readable file modes
def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mode & 0o777 for p in folder.rglob("*")}


def test_everything_a_run_writes_has_the_umasks_normal_mode(tiny_run, demo_data):
    """model.safetensors and state/*.safetensors were 0600: the image's non-root user could not read them."""
    mask = os.umask(0)
    os.umask(mask)
    modes = _modes(tiny_run)
    files = {k: v for k, v in modes.items() if (tiny_run / k).is_file()}
    assert {"checkpoint/model.safetensors", "state/last.safetensors", "state/optim.safetensors"} <= files.keys()
    assert {k: v for k, v in files.items() if v != 0o666 & ~mask} == {}
    assert {k: v for k, v in modes.items() if k not in files and v != 0o777 & ~mask} == {}
    assert {k: v for k, v in _modes(demo_data).items() if v not in (0o666 & ~mask, 0o777 & ~mask)} == {}


# ---------------------------------------------------------------------------------------------------- resume
@pytest.fixture
def resumable(tiny_run, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    return run


@pytest.mark.parametrize("change,message", [
    (["--radius", "5"], "other model options (radius: 3 then 5)"),
    (["--window", "5"], "other model options (radius: 3 then 5)"),     # the old name of --radius, still accepted
    (["--embed-dim", "48"], "other model options (embed_dim: 32 then 48)"),
    (["--lr", "0.05"], "different options (lr: 0.02 then 0.05)"),
])
def test_resume_with_other_options_is_refused(resumable, demo_data, change, message):
    """A different --window/--embed-dim was silently ignored on --resume."""
    before = snapshot(resumable)
    args = ["train", "--data", demo_data, "--out", resumable, "--resume", *TINY_CLI]
    i = args.index("--window" if change[0] == "--radius" else change[0])   # TINY_CLI spells it --window
    fails(args[:i] + change + args[i + 2:], message)
    assert snapshot(resumable) == before


def test_resume_on_other_data_is_refused(resumable, demo_data, tmp_path):
    """A different --data re-tuned the threshold, rescored test on it and rewrote the manifest's data path."""
    other = tmp_path / "other_data"
    shutil.copytree(demo_data, other)
    df = pd.read_parquet(other / "dev.parquet")
    df.iloc[1:].to_parquet(other / "dev.parquet")  # one dev note fewer
    before = snapshot(resumable)
    fails(["train", "--data", other, "--out", resumable, "--resume", *TINY_CLI], "was trained on other data")
    assert snapshot(resumable) == before
    # the same data under another path is the same data: resuming from a copy works
    same = tmp_path / "same_data"
    shutil.copytree(demo_data, same)
    succeeds(["train", "--data", same, "--out", resumable, "--resume", *TINY_CLI])


def _damage(path: Path, how: str, other: Path) -> None:
    """Truncate PATH to half, empty it, or replace it with the same file of another run (which must differ)."""
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "emptied": b"", "from another run": other.read_bytes()}[how])
    assert path.read_bytes() != data


STATE_FILES = ["last.safetensors", "optim.safetensors", "ema.safetensors", "tokenizer.json", "state.json"]


@pytest.fixture(scope="module")
def other_state(demo_data, tmp_path_factory) -> Path:
    """RUN/state of another (one-epoch) run, for 'a file from another run'."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    from conftest import TINY_MODEL

    run = tmp_path_factory.mktemp("other") / "run"
    train(out_dir=run, config=TrainConfig(model="leam", epochs=1,
                                          lr=2e-2, w2v_epochs=1, min_doc_freq=2, top_k=40, seed=8,
                                          device="cpu"), data_dir=demo_data,
          model_options=dict(TINY_MODEL, hidden_dim=48), progress=False)
    return run / "state"


@pytest.mark.parametrize("damage", ["truncated", "emptied", "from another run"])
@pytest.mark.parametrize("name", STATE_FILES)
def test_resume_from_damaged_state_is_one_line(resumable, demo_data, other_state, name, damage):
    """Truncated state files gave tracebacks on --resume; a file from another run could load silently."""
    _damage(resumable / "state" / name, damage, other_state / name)
    before = snapshot(resumable)
    message = ("state.json is damaged" if name == "state.json" and damage != "from another run"
               else "does not match the hash in state.json" if name == "state.json"  # it lists the other run's files
               else f"state/{name} does not match the hash in state.json")
    res = fails(["train", "--data", demo_data, "--out", resumable, "--resume", *TINY_CLI], message)
    assert "the run cannot resume from it. Start a new --out folder" in res.stderr
    assert snapshot(resumable) == before


# --------------------------------------------------------------------------------------------- degenerate runs
def test_training_on_data_without_any_positive_label_is_refused(tmp_path):
    """labels.json present and no note labelled: training tuned the threshold to 0 and predict marked every code."""
    from clinicode.data.labels import LabelSet

    d = tmp_path / "data"
    d.mkdir()
    LabelSet.from_codes(["401.9", "428.0"]).save(d / "labels.json")
    for split in ("train", "dev"):
        _jsonl(d / f"{split}.jsonl", [{"id": f"{split}{i}", "text": "chest pain and fever",
                                       "labels": []} for i in range(6)])
    fails(["train", "--data", d, "--out", tmp_path / "run", "--device", "cpu", "--no-progress"],
          "no train note has a code of the label set (2 codes), so there is nothing to learn")
    assert not (tmp_path / "run").exists()
    _jsonl(d / "train.jsonl", [{"id": f"t{i}", "text": "chest pain and fever", "labels": ["401.9"]} for i in range(6)])
    fails(["train", "--data", d, "--out", tmp_path / "run", "--device", "cpu", "--no-progress"],
          "no dev note has a code of the label set (2 codes), so the threshold cannot be tuned")


def test_a_threshold_that_codes_everything_is_refused(tmp_path):
    """When every dev note carries every code, the best dev threshold marks everything: refuse that model."""
    d = tmp_path / "data"
    d.mkdir()
    words = ["fever", "cough", "rash", "pain", "edema", "nausea"]
    _jsonl(d / "train.jsonl", [{"id": f"t{i}", "text": f"{words[i % 6]} {words[(i + 1) % 6]}",
                                "labels": [["A"], ["B"], ["A", "B"]][i % 3]} for i in range(30)])
    _jsonl(d / "dev.jsonl", [{"id": f"d{i}", "text": f"{words[i % 6]} note", "labels": ["A", "B"]} for i in range(10)])
    fails(["train", "--data", d, "--out", tmp_path / "run", "--model", "tfidf-lr", "--no-progress"],
          "would mark every code on every note, so the model has learnt nothing usable")
    assert not (tmp_path / "run" / "checkpoint").exists()


# -------------------------------------------------------------------------------------------------- oddities
def test_missing_procedure_titles_are_warned_about(world, tmp_path):
    mimic = tmp_path / "mimic"
    shutil.copytree(world["M"], mimic)
    (mimic / "D_ICD_PROCEDURES.csv").unlink()
    res = succeeds(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p"])
    assert "warning: 17 of 50 codes have no description (e.g. 33.24, 36.15, 37.22)" in res.stderr
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert len(manifest["summary"]["labels_without_description"]) == 17


def test_frequent_label_set_never_turns_junk_into_codes(world, tmp_path):
    mimic = tmp_path / "mimic"
    shutil.copytree(world["M"], mimic)
    dx = pd.read_csv(mimic / "DIAGNOSES_ICD.csv", dtype=str, keep_default_na=False)
    junk = ["NA", "NAN", "401.90000", "\uff14\uff10\uff11\uff19"]  # the last is '4019' in full-width digits
    extra = pd.concat([dx.iloc[:1]] * (4 * 30), ignore_index=True)
    extra["ICD9_CODE"] = [junk[i % 4] for i in range(len(extra))]
    extra["HADM_ID"] = dx["HADM_ID"].iloc[: len(extra)].tolist() if len(dx) >= len(extra) else dx["HADM_ID"].iloc[0]
    pd.concat([dx, extra]).to_csv(mimic / "DIAGNOSES_ICD.csv", index=False)
    succeeds(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p", "--label-set", "frequent", "--top-k", "20"])
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    codes = [c["code"] for c in json.loads((tmp_path / "p" / "labels.json").read_text())]
    assert not set(junk) & set(codes) and not any(c.startswith(("NA", "401.9000")) for c in codes)
    assert manifest["dropped"]["DIAGNOSES_ICD.malformed_code"] == len(extra)


def test_the_same_notes_in_train_and_test_are_warned_about(tmp_path, caplog):
    d = tmp_path / "data"
    d.mkdir()
    rows = [{"id": f"n{i}", "text": f"note number {i} with chest pain",
             "labels": ["A" if i % 2 else "B"]} for i in range(12)]
    _jsonl(d / "train.jsonl", rows)
    _jsonl(d / "dev.jsonl", [dict(r, id=f"d{i}") for i, r in enumerate(rows[:4])])  # same texts, other ids
    _jsonl(d / "test.jsonl", rows[:3])  # same ids and texts
    with caplog.at_level("WARNING", logger="clinicode"):
        succeeds(["train", "--data", d, "--out", tmp_path / "run", "--model", "tfidf-lr", "--no-progress"])
    assert any("the same notes are in more than one split (ids: train/test 3; identical texts: "
               "train/dev 4, train/test 3"
               in r.getMessage() for r in caplog.records)
    manifest = json.loads((tmp_path / "run" / "checkpoint" / "manifest.json").read_text())
    assert manifest["data"]["leakage"]["ids"] == {"train/test": 3}


def test_csv_labels_separated_by_commas_are_refused(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.csv").write_text('id,text,labels\n1,chest pain,"401.9,428.0"\n')
    (d / "dev.csv").write_text("id,text,labels\n2,chest pain,401.9\n")
    fails(["train", "--data", d, "--out", tmp_path / "run"],
          "train.csv: the labels of document '1' contain ','; in CSV, codes are separated by ';' (e.g. 401.9;428.0)")


def test_jsonl_with_a_byte_order_mark_is_read_like_csv(world, tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "dev"):
        text = "".join(json.dumps({"id": f"{split}{i}", "text": f"fever {i}", "labels": ["A" if i % 2 else "B"]}) + "\n"
                       for i in range(8))
        (d / f"{split}.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    succeeds(["train", "--data", d, "--out", tmp_path / "run", "--model", "tfidf-lr", "--no-progress"])
    notes = tmp_path / "bom.jsonl"
    notes.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "text": "hypertension"}).encode() + b"\n"
                      + json.dumps({"id": None, "text": "heart failure"}).encode() + b"\n")
    out = tmp_path / "codes.jsonl"
    succeeds(["predict", "--checkpoint", world["RUN"], "--input", notes, "--output", out, "--device", "cpu"])
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["a", "line-2"] and all("error" not in r for r in recs)  # null id is not "None"


def test_os_errors_become_one_line(world, tmp_path):
    """Errors from the operating system (here a note folder that cannot be read) never show a traceback."""
    from clinicode.cli.root import os_error_message

    err = PermissionError(13, "Permission denied", str(tmp_path / "x"))
    line = os_error_message(err)
    assert line.startswith(f"Permission denied: {tmp_path / 'x'} (PermissionError);") and "\n" not in line
    missing = tmp_path / "nope.jsonl"
    fails(["predict", "--checkpoint", world["RUN"], "--input", missing, "--output", tmp_path / "o.jsonl", "--device",
           "cpu"],
          "no such file or folder")
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.partial.json").exists()


# -------------------------------------------------------------------------------- damaged checkpoints, one line
CHECKPOINT_FILES = ["model.safetensors", "model_config.json", "labels.json", "tokenizer.json", "threshold.json",
                    "train_config.json", "metrics_dev.json", "metrics_test.json", "manifest.json"]


@pytest.fixture(scope="module")
def other_checkpoint(other_state) -> Path:
    return other_state.parent / "checkpoint"


@pytest.mark.parametrize("damage", ["truncated", "emptied", "from another run"])
@pytest.mark.parametrize("name", CHECKPOINT_FILES)
@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_damaged_checkpoint_file_is_one_line(world, other_checkpoint, tmp_path, command, name, damage):
    run = tmp_path / "run"
    shutil.copytree(world["RUN"] / "checkpoint", run / "checkpoint")
    _damage(run / "checkpoint" / name, damage, other_checkpoint / name)
    before = snapshot(tmp_path)
    args = (["predict", "--checkpoint", run, "--input", world["N"], "--output",
             tmp_path / "o.jsonl"] if command == "predict"
            else ["evaluate", "--checkpoint", run, "--data", world["D"]])
    message = (f"{name} does not match the hash in manifest.json" if name != "manifest.json"
               else "manifest.json" if damage != "from another run" else "does not match the hash in manifest.json")
    fails(args + ["--device", "cpu"], message)
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------------ the app, damaged runs
@pytest.fixture(scope="module")
def damaged_runs(tiny_run, tmp_path_factory) -> Path:
    """Runs folder: 'good', three runs with a damaged checkpoint, and two whose side files are damaged."""
    root = tmp_path_factory.mktemp("damaged") / "runs"
    for name in ("good", "bad_weights", "bad_tokenizer", "bad_metrics", "bad_scores", "bad_split"):
        shutil.copytree(tiny_run, root / name, ignore=shutil.ignore_patterns("state"))
    w = root / "bad_weights" / "checkpoint" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-100] + b"\0" * 100)
    t = root / "bad_tokenizer" / "checkpoint" / "tokenizer.json"
    t.write_bytes(t.read_bytes()[:500])
    m = root / "bad_metrics" / "checkpoint" / "metrics_test.json"
    m.write_bytes(m.read_bytes()[:40])
    (root / "bad_scores" / "scores_test.npz").write_bytes(b"PK\x03\x04 not really a zip")
    split_dir = root / "bad_split" / "data"
    shutil.copytree(Path(json.loads((root / "bad_split" / "checkpoint" / "manifest.json").read_text())["data"]["path"]),
                    split_dir)
    (split_dir / "test.parquet").write_bytes(b"PAR1 damaged")
    manifest = root / "bad_split" / "checkpoint" / "manifest.json"
    # point the run at its own (damaged) copy of the data; the manifest's hash table is not about this field
    mj = json.loads(manifest.read_text())
    mj["data"]["path"] = str(split_dir)
    manifest.write_text(json.dumps(mj))
    return root


PAGES = ["code_note", "performance", "embeddings", "batch", "about_model"]


def _app(root: Path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("CLINICODE_RUNS", str(root))
    return AppTest.from_file(str(ROOT / "app_streamlit" / "main.py"), default_timeout=90)


def _messages(at) -> list[str]:
    return [e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info]


@pytest.mark.parametrize("name,reason", [
    ("bad_weights", "model.safetensors does not match the hash in manifest.json"),
    ("bad_tokenizer", "tokenizer.json does not match the hash in manifest.json"),
    ("bad_metrics", "metrics_test.json does not match the hash in manifest.json"),
])
def test_app_lists_a_damaged_run_as_damaged_on_every_page(damaged_runs, monkeypatch, name, reason):
    at = _app(damaged_runs, monkeypatch).run()
    assert not at.exception
    box = at.sidebar.selectbox(key="run_name")
    assert box.format_func(name) == f"{name} (damaged)" and box.format_func("good") == "good"
    box.set_value(name).run()
    for page in PAGES:
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        [err] = at.error
        assert f"Run **{name}** is damaged and cannot be used: {name}/checkpoint: {reason}" in err.value
        assert str(damaged_runs) not in err.value and str(damaged_runs.resolve()) not in err.value
    at.sidebar.selectbox(key="run_name").set_value("good").run()  # the other runs keep working
    at.switch_page("app_pages/performance.py").run()
    assert not at.exception and not at.error and len(at.metric) == 12


@pytest.mark.parametrize("name,page,message", [
    ("bad_scores", "performance", "The threshold and ROC curves are not available: scores_test.npz is unreadable"),
    ("bad_split", "code_note", "Test-split notes are not available: the test split in data/ is unreadable"),
    ("bad_split", "embeddings", "This page needs the run's test notes, but the test split in data/ is unreadable"),
])
def test_app_pages_explain_a_damaged_side_file_in_one_line(damaged_runs, monkeypatch, name, page, message):
    at = _app(damaged_runs, monkeypatch).run()
    at.sidebar.selectbox(key="run_name").set_value(name).run()
    for p in PAGES:  # no page crashes on the damaged run
        at.switch_page(f"app_pages/{p}.py").run()
        assert not at.exception, (p, [e.value for e in at.exception])
    at.switch_page(f"app_pages/{page}.py").run()
    found = [m for m in _messages(at) if message in m]
    assert len(found) == 1 and "\n" not in found[0] and str(damaged_runs) not in found[0]


def test_radius_is_the_flags_name_and_window_its_old_spelling():
    import re

    from typer.testing import CliRunner

    from clinicode.cli import app

    res = CliRunner().invoke(app, ["train", "--help"], terminal_width=200)
    assert res.exit_code == 0
    text = re.sub(r"[\s│]+", " ", res.output)   # the help as one line: rich wraps it inside a box
    assert "--radius,--window" in text and "--window is its old name" in text
