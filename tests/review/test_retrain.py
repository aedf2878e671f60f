"""Retraining from decisions (`clinicode review retrain`): a new checkpoint with its own manifest from the finished
notes' decisions; the old checkpoint is never changed. tfidf-lr refits on train + decided notes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from clinicode.review import open_db

from helpers import fails, succeeds


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tfidf_run(demo_data, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("retrain") / "tfidf"
    succeeds(["train", "--data", demo_data, "--out", run, "--model", "tfidf-lr", "--device", "cpu", "--no-progress"])
    return run


def _decided(run: Path, demo_data: Path, tmp_path: Path, n: int = 20) -> tuple[Path, dict[str, set[str]]]:
    """N notes (demo test notes under new ids) queued with RUN and decided by their gold codes."""
    df = pd.read_parquet(demo_data / "test.parquet").head(n)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"new{i}", "text": t}) + "\n" for i, t in enumerate(df["text"])))
    gold = {f"new{i}": set(lab) for i, lab in enumerate(df["labels"])}
    db = tmp_path / "r.sqlite"
    succeeds(["review", "queue", "--checkpoint", run, "--input", notes, "--db", db])
    with open_db(db) as rdb:
        for note_id, codes in gold.items():
            suggested = {s["code"] for s in rdb.note(note_id)["suggestions"]}
            rdb.decide(note_id, "coder", accept=sorted(suggested & codes), reject=sorted(suggested - codes),
                       add=sorted(codes - suggested), done=True)
    return db, gold


def test_retrain_makes_a_new_checkpoint_and_leaves_the_old_one_alone(tfidf_run, demo_data, tmp_path):
    db, gold = _decided(tfidf_run, demo_data, tmp_path)
    before = _hashes(tfidf_run)
    out = tmp_path / "retrained"
    res = succeeds(["review", "retrain", "--checkpoint", tfidf_run, "--data", demo_data, "--out", out, "--db", db])
    assert "retrained tfidf-lr" in res.stdout and "(refitted on " in res.stdout
    assert _hashes(tfidf_run) == before                                    # the old checkpoint is only read
    manifest = json.loads((out / "checkpoint" / "manifest.json").read_text())
    old = json.loads((tfidf_run / "checkpoint" / "manifest.json").read_text())
    sha = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()
    src = manifest["retrained_from"]
    assert src["checkpoint_sha256"] == sha and src["decided_notes"] == 20 and src["review_db"] == str(db.resolve())
    train = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    base_train = pd.read_parquet(demo_data / "train.parquet")
    labels = [e["code"] for e in json.loads((out / "data" / "labels.json").read_text())]
    assert labels == [e["code"] for e in json.loads((tfidf_run / "checkpoint" / "labels.json").read_text())]
    reviewed = {r["id"]: set(r["labels"]) for r in train if r["id"].startswith("new")}
    assert reviewed == {i: c & set(labels) for i, c in gold.items()}     # the coders' codes, in the label set
    assert len(train) == 20 + sum(1 for lab in base_train["labels"] if set(lab) & set(labels))
    assert oct((out / "data" / "train.jsonl").stat().st_mode & 0o777) == "0o600"
    with open_db(db) as rdb:                         # queue with the new checkpoint: its notes name it
        assert rdb.stats()["checkpoints"][sha]["decisions"] > 0


def test_retrain_counts_the_training_notes_it_wrote_without_reading_them_again(tfidf_run, demo_data, tmp_path,
                                                                              monkeypatch):
    """`retrain_data` wrote the training notes and counted them: the retrain's start (warm or fresh) takes that count
    instead of reading train.jsonl again."""
    import clinicode.data.prepared as prepared

    db, _ = _decided(tfidf_run, demo_data, tmp_path, n=6)

    def read_again(path, split):
        raise AssertionError(f"{split} read again")

    monkeypatch.setattr(prepared, "read_split_codes", read_again)
    out = tmp_path / "retrained"
    res = succeeds(["review", "retrain", "--checkpoint", tfidf_run, "--data", demo_data, "--out", out, "--db", db])
    train = (out / "data" / "train.jsonl").read_text().splitlines()
    assert f"(refitted on {len(train):,} training notes)" in res.stdout


def test_retrain_refuses_bad_options_and_a_used_folder(tfidf_run, demo_data, tmp_path):
    db, _ = _decided(tfidf_run, demo_data, tmp_path, n=3)
    fails(["review", "retrain", "--checkpoint", tfidf_run, "--data", demo_data, "--out", tmp_path / "x", "--db", db,
           "--epochs", "0"], "--epochs must be >= 1")
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("keep")
    fails(["review", "retrain", "--checkpoint", tfidf_run, "--data", demo_data, "--out", used, "--db", db], "--out")
    assert (used / "mine.txt").read_text() == "keep" and not (used / "data").exists()


def test_a_leam_checkpoint_is_warm_started_from_its_weights(tiny_run, demo_data, tmp_path):
    from clinicode.checkpoint import load_checkpoint

    db, _ = _decided(tiny_run, demo_data, tmp_path, n=12)
    before = _hashes(tiny_run / "checkpoint")
    out = tmp_path / "warm"
    res = succeeds(["review", "retrain", "--checkpoint", tiny_run, "--data", demo_data, "--out", out, "--db", db,
                    "--epochs", "2", "--sample", "40", "--device", "cpu"])
    assert "retrained leam" in res.stdout and "warm start from its weights and vocabulary, 2 epochs" in res.stdout
    assert _hashes(tiny_run / "checkpoint") == before
    old, new = load_checkpoint(tiny_run / "checkpoint"), load_checkpoint(out / "checkpoint")
    assert new.tokenizer.vocab_size == old.tokenizer.vocab_size                 # the old vocabulary, no new word2vec
    assert new.manifest["retrained_from"]["checkpoint_sha256"] == old.manifest_sha256
    from clinicode.data.prepared import load_dataset

    base = load_dataset(demo_data).split("train")
    train = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    decided = {r["id"] for r in train} - set(base["id"].astype(str))
    assert len(decided) == 12 and len(train) == len(base) + 12                   # every training note, and the decided
    loop = json.loads((out / "data" / "manifest.json").read_text())["loop_notes"]
    assert len(loop) == 12 + 40 and decided <= set(loop)                         # the epochs: decided + the sample
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == 2
    counts = json.loads((out / "checkpoint" / "train_counts.json").read_text())["counts"]
    assert counts == {c: sum(c in r["labels"] for r in train) for c in new.labels.codes}   # every note, not the 52
    ow, nw = old.model.state_dict(), new.model.state_dict()
    moved = [k for k in ow if not (ow[k] == nw[k]).all()]
    assert moved, "the warm start trained the weights"
    # started from the old weights, not from scratch: the new label vectors stay close to the old ones
    import torch

    cos = torch.nn.functional.cosine_similarity(old.model.label_emb.detach(), new.model.label_emb.detach(), dim=1)
    assert float(cos.mean()) > 0.9


def test_a_checkpoint_of_the_default_kind_is_warm_started_and_refitted(demo_data, tmp_path):
    """The default kind (fused): its LEAM part starts from the checkpoint's weights, its tfidf-lr part and fusion
    are fitted again on the new data, and the result is a fused checkpoint beside the untouched old one."""
    from clinicode.checkpoint import load_checkpoint
    from clinicode.config import TrainConfig
    from clinicode.train import train

    from conftest import TINY_MODEL

    sizes = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
    run = tmp_path / "fused"
    train(out_dir=run, config=TrainConfig(epochs=3, batch_size=16, lr=2e-2, w2v_epochs=1, seed=7, device="cpu"),
          data_dir=demo_data, model_options=sizes, progress=False)
    db, _ = _decided(run, demo_data, tmp_path, n=12)
    before = _hashes(run / "checkpoint")
    out = tmp_path / "warm"
    res = succeeds(["review", "retrain", "--checkpoint", run, "--data", demo_data, "--out", out, "--db", db,
                    "--epochs", "2", "--sample", "40", "--device", "cpu"])
    assert "retrained fused" in res.stdout and "warm start from its weights and vocabulary, 2 epochs" in res.stdout
    assert _hashes(run / "checkpoint") == before
    old, new = load_checkpoint(run / "checkpoint"), load_checkpoint(out / "checkpoint")
    assert new.kind == "fused" and new.manifest["retrained_from"]["checkpoint_sha256"] == old.manifest_sha256
    import torch

    cos = torch.nn.functional.cosine_similarity(old.model.leam.label_emb.detach(), new.model.leam.label_emb.detach(),
                                                dim=1)
    assert float(cos.mean()) > 0.9                                              # the LEAM part started from the old
    assert not (old.model.leam.label_emb == new.model.leam.label_emb).all()     # and trained
    # the bag-of-words part is refitted on every training note and the decided ones, not on the epochs' 52
    assert len(new.model.lr.vocabulary) >= len(old.model.lr.vocabulary)


def test_the_base_notes_keep_their_evidence_spans_in_the_retrain_data(tfidf_run, demo_data, tmp_path):
    """Coders' evidence spans of the base's notes go with them (the default model learns its codes' mentions from
    them), kept to the checkpoint's codes."""
    from clinicode.review.export import retrain_data

    base = tmp_path / "base"
    base.mkdir()
    labels = [e["code"] for e in json.loads((tfidf_run / "checkpoint" / "labels.json").read_text())]
    for split in ("train", "dev", "test"):
        df = pd.read_parquet(demo_data / f"{split}.parquet")
        with open(base / f"{split}.jsonl", "w") as f:
            for i, t, lab in zip(df["id"], df["text"], df["labels"]):
                ev = [{"code": labels[0], "start": 0, "end": 4}, {"code": "NOT-A-CODE", "start": 0, "end": 4}]
                f.write(json.dumps({"id": str(i), "text": t, "labels": list(lab), "evidence": ev}) + "\n")
    db, _ = _decided(tfidf_run, demo_data, tmp_path, n=3)
    with open_db(db) as rdb:
        retrain_data(rdb, tmp_path / "out", base=base, labels=[(c, "") for c in labels])
    rows = [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    from_base = [r for r in rows if not r["id"].startswith("new")]
    assert from_base and all(r["evidence"] == [{"code": labels[0], "start": 0, "end": 4}] for r in from_base)
    assert all("evidence" not in r for r in rows if r["id"].startswith("new"))
    # `review export --base` keeps them too, in every split (it keeps the base's labels as they are)
    from clinicode.review.export import export

    with open_db(db) as rdb:
        export(rdb, tmp_path / "exported", base=base)
    for split in ("train", "dev", "test"):
        got = [json.loads(line) for line in (tmp_path / "exported" / f"{split}.jsonl").read_text().splitlines()]
        assert all(len(r["evidence"]) == 2 for r in got if not r["id"].startswith("new")), split


def test_rescore_gives_the_untouched_notes_the_retrained_models_suggestions(tfidf_run, demo_data, tmp_path):
    """`review rescore` after `review retrain`: notes no one opened, decided or was assigned take the new
    checkpoint's suggestions and next-note signals; the others keep what their decisions were made on."""
    db, _ = _decided(tfidf_run, demo_data, tmp_path, n=6)
    out = tmp_path / "retrained"
    succeeds(["review", "retrain", "--checkpoint", tfidf_run, "--data", demo_data, "--out", out, "--db", db])
    df = pd.read_parquet(demo_data / "dev.parquet").head(5)
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"id": f"m{i}", "text": t}) + "\n" for i, t in enumerate(df["text"])))
    succeeds(["review", "queue", "--checkpoint", tfidf_run, "--input", more, "--db", db])
    with open_db(db) as rdb:
        rdb.claim("m0", "ann")                                                    # open: kept
        old_sha = rdb.read("SELECT checkpoint_sha256 FROM suggestions WHERE note = 'm1'")[0][0]
        m1_before = rdb.note("m1")["suggestions"]
    fails(["review", "rescore", "--checkpoint", out, "--db", db, "--explain", "0"], "--explain must be an integer")
    fails(["review", "rescore", "--checkpoint", out, "--db", tmp_path / "none.sqlite"], "none.sqlite")
    res = succeeds(["review", "rescore", "--checkpoint", out, "--db", db])
    assert "rescored 4 notes" in res.stdout and "7 opened, decided or assigned notes kept" in res.stdout
    new_sha = load_checkpoint_sha(out)
    assert new_sha != old_sha
    with open_db(db) as rdb:
        sha_of = {r[0]: r[1] for r in rdb.read("SELECT note, MIN(checkpoint_sha256) FROM suggestions GROUP BY note")}
        signals = {r[0]: r[1] for r in rdb.read("SELECT note, checkpoint_sha256 FROM note_signals")}
        assert all(sha_of[f"m{i}"] == new_sha and signals[f"m{i}"] == new_sha for i in range(1, 5))
        assert sha_of["m0"] == old_sha and all(sha_of[f"new{i}"] == old_sha for i in range(6))
        assert [s["code"] for s in m1_before] and rdb.note("m1")["text"] == df["text"].iloc[1]
        assert rdb.next_notes(1, reviewer="bob")[0] in {f"m{i}" for i in range(1, 5)}


def load_checkpoint_sha(run: Path) -> str:
    from clinicode.checkpoint import load_checkpoint

    return load_checkpoint(run / "checkpoint").manifest_sha256


def test_codes_coders_add_join_the_retrained_label_set_and_too_rare_ones_are_named(demo_data, tmp_path):
    """A code the checkpoint lacks, added by coders on enough notes, becomes a code of the retrained checkpoint (the
    LEAM part grows a row for it, the bag-of-words parts learn it from the reviewed notes) and is found on notes like
    those; a code added on too few notes is named in the output, not dropped without a word."""
    from clinicode.checkpoint import load_checkpoint
    from clinicode.config import TrainConfig
    from clinicode.predict import Predictor
    from clinicode.review.export import MIN_ADDED_NOTES
    from clinicode.train import train

    from conftest import TINY_MODEL

    sizes = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
    run = tmp_path / "fused"
    train(out_dir=run, config=TrainConfig(epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, seed=7, device="cpu"),
          data_dir=demo_data, model_options=sizes, progress=False)
    old = load_checkpoint(run / "checkpoint")
    new_code, rare_code = "V10.3", "V12.54"
    assert new_code not in old.labels and rare_code not in old.labels
    df = pd.read_parquet(demo_data / "test.parquet").head(24)
    marked = "the patient keeps on warfarin daily for anticoagulation"
    notes = tmp_path / "notes.jsonl"
    texts = {f"g{i}": (t + " " + marked if i % 2 == 0 else t) for i, t in enumerate(df["text"])}
    notes.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    db = tmp_path / "r.sqlite"
    succeeds(["review", "queue", "--checkpoint", run, "--input", notes, "--db", db])
    gold = {f"g{i}": set(lab) for i, lab in enumerate(df["labels"])}
    with open_db(db) as rdb:
        for i, (note_id, text) in enumerate(texts.items()):
            suggested = {s["code"] for s in rdb.note(note_id)["suggestions"]}
            add = sorted(gold[note_id] - suggested) + ([new_code] if marked in text else [])
            if i == 1:
                add.append(rare_code)
            rdb.decide(note_id, "coder", accept=sorted(suggested & gold[note_id]),
                       reject=sorted(suggested - gold[note_id]), add=add, done=True)
    out = tmp_path / "grown"
    res = succeeds(["review", "retrain", "--checkpoint", run, "--data", demo_data, "--out", out, "--db", db,
                    "--epochs", "2", "--sample", "40", "--device", "cpu"])
    assert "1 codes coders added join the label set" in res.stderr and f"{new_code} (12 notes)" in res.stderr
    assert f"fewer than {MIN_ADDED_NOTES} reviewed notes" in res.stderr and f"{rare_code} (1 note)" in res.stderr
    assert "on test (without the 1 codes coders added: dev and test were never coded for them)" in res.stdout
    grown = load_checkpoint(out / "checkpoint")
    assert list(grown.labels.codes) == [*old.labels.codes, new_code]           # appended after the checkpoint's
    # the base's notes were never read for it: the data says so, and training learns it from the reviewed notes
    partly = json.loads((out / "data" / "manifest.json").read_text())["partly_coded"]
    assert partly == {"codes": [new_code], "notes": sorted(texts)}
    assert rare_code not in grown.labels
    assert grown.model.leam.label_emb.shape[0] == len(old.labels) + 1
    pred = Predictor.from_checkpoint(out, device="cpu")
    held_out = pd.read_parquet(demo_data / "dev.parquet").head(10)["text"]
    found = [new_code in [p.code for p in r.predicted]
             for r in pred.predict([t + " " + marked for t in held_out], top_k=5)]
    assert sum(found) >= 5
    # the base's notes were never read for it, so it is learnt from the reviewed notes alone (half of them carry it
    # here, so half is its prior): every note scores it higher with the marked words than without them
    j = list(grown.labels.codes).index(new_code)
    with_words = pred.score([t + " " + marked for t in held_out])[:, j]
    without = pred.score(list(held_out))[:, j]
    assert (with_words > without + 0.1).all()
    # ICD-9-CM ships no titles: the code joined untitled, and the command said so and how to give one
    assert grown.labels.descriptions[-1] == "" and "1 of them have no title" in res.stderr
    assert "--descriptions FILE" in res.stderr and new_code in res.stderr.split("have no title")[1]
    titles = tmp_path / "titles.tsv"
    titles.write_text("v103\tPersonal history of malignant neoplasm of bladder\n999.9\tnot added\n")
    res = succeeds(["review", "retrain", "--checkpoint", run, "--data", demo_data, "--out", tmp_path / "titled",
                    "--db", db, "--epochs", "1", "--sample", "10", "--device", "cpu", "--descriptions", titles])
    titled = load_checkpoint(tmp_path / "titled" / "checkpoint")
    assert list(titled.labels.codes) == [*old.labels.codes, new_code] and "have no title" not in res.stderr
    assert titled.labels.descriptions[-1] == "Personal history of malignant neoplasm of bladder"  # 'v103' as V10.3


def _subset(demo_data: Path, out: Path, share: float) -> Path:
    """DEMO_DATA with only the first SHARE of its training notes (dev and test kept): a base that saw fewer notes."""
    from clinicode.data.prepared import load_dataset

    ds = load_dataset(demo_data)
    out.mkdir()
    for name in ("train", "dev", "test"):
        df = ds.split(name)
        df = df.head(int(len(df) * share)) if name == "train" else df
        df.to_parquet(out / f"{name}.parquet")
    (out / "labels.json").write_text(json.dumps([{"code": c, "description": d}
                                                 for c, d in zip(ds.labels.codes, ds.labels.descriptions)]))
    return out


def test_a_retrain_on_notes_that_outgrew_the_vocabulary_starts_fresh(demo_data, tmp_path):
    """A warm start keeps the checkpoint's vocabulary, so a base that saw a third of the notes is retrained fresh, as
    `train` would (a new vocabulary, every epoch its patience allows); `--start warm` still warm-starts it, and the
    warm start's manifest carries the notes its vocabulary came from down the chain."""
    from clinicode.checkpoint import load_checkpoint
    from clinicode.train import FRESH_GROWTH, retrain_start

    from conftest import TINY_SIZES

    small = _subset(demo_data, tmp_path / "small", 1 / 3)
    run = tmp_path / "base"
    succeeds(["train", "--data", small, "--out", run, *TINY_SIZES])
    db, _ = _decided(run, demo_data, tmp_path, n=6)
    old = load_checkpoint(run / "checkpoint")
    n_small = old.manifest["data"]["n_train"]
    assert retrain_start(old, n_small) == ("warm", n_small)
    assert retrain_start(old, int(n_small * FRESH_GROWTH)) == ("warm", n_small)
    assert retrain_start(old, int(n_small * FRESH_GROWTH) + 1) == ("fresh", n_small)
    fresh = tmp_path / "fresh"
    res = succeeds(["review", "retrain", "--checkpoint", run, "--data", demo_data, "--out", fresh, "--db", db,
                    "--epochs", "2", "--device", "cpu"])
    assert "fresh start, as train" in res.stdout and f"against the {n_small:,} its vocabulary came from" in res.stdout
    assert "on dev" in res.stdout and " -> " in res.stdout.split("micro-F1")[-1]   # the old figure, then the new
    new = load_checkpoint(fresh / "checkpoint")
    assert new.tokenizer.vocab_size != old.tokenizer.vocab_size and "vocabulary_notes" not in new.manifest
    warm = tmp_path / "warm"
    res = succeeds(["review", "retrain", "--checkpoint", run, "--data", demo_data, "--out", warm, "--db", db,
                    "--epochs", "2", "--start", "warm", "--device", "cpu"])
    assert "warm start from its weights and vocabulary" in res.stdout
    chained = load_checkpoint(warm / "checkpoint")
    assert chained.tokenizer.vocab_size == old.tokenizer.vocab_size
    assert chained.manifest["vocabulary_notes"] == n_small     # the next retrain measures growth from these notes
    assert retrain_start(chained, chained.manifest["data"]["n_train"])[1] == n_small
    assert chained.train_config.patience_steps == 0              # the warm start's own short schedule ...
    again = tmp_path / "again"
    (tmp_path / "db2").mkdir()
    db2, _ = _decided(warm, demo_data, tmp_path / "db2", n=3)
    succeeds(["review", "retrain", "--checkpoint", warm, "--data", demo_data, "--out", again, "--db", db2,
              "--start", "fresh", "--device", "cpu"])
    fresh_cfg, first = load_checkpoint(again / "checkpoint").train_config, old.train_config
    assert (fresh_cfg.epochs, fresh_cfg.patience, fresh_cfg.patience_steps) == (
        first.epochs, first.patience, first.patience_steps)     # ... never a fresh start's down the chain


def test_a_warm_start_stops_when_dev_stops_improving(tiny_run, demo_data, tmp_path):
    """The warm start's epochs end on its own patience (WARM_PATIENCE epochs without a dev gain, no step floor), not
    on a fixed count: given a cap far above it, it stops early and says so."""
    import clinicode.train as training

    db, _ = _decided(tiny_run, demo_data, tmp_path, n=6)
    out = tmp_path / "warm"
    res = succeeds(["review", "retrain", "--checkpoint", tiny_run, "--data", demo_data, "--out", out, "--db", db,
                    "--epochs", "60", "--device", "cpu"])
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) < 60 and "until dev stopped improving" in res.stdout
    assert sum(1 for r in history[-(training.WARM_PATIENCE + 1):] if r["best"]) == 0


def test_a_retrain_keeps_its_best_epoch_in_memory_and_writes_no_state(tiny_run, demo_data, tmp_path):
    """A retrain cannot be resumed (its command removes a run it did not finish), so it writes no RUN/state at each
    epoch (train --resume's) and no checkpoint per better epoch: it keeps the best epoch's weights in memory, and
    the checkpoint it saves is that epoch's, not the last one's."""
    db, _ = _decided(tiny_run, demo_data, tmp_path, n=6)
    out = tmp_path / "warm"
    succeeds(["review", "retrain", "--checkpoint", tiny_run, "--data", demo_data, "--out", out, "--db", db,
              "--epochs", "60", "--device", "cpu"])
    assert not (out / "state").exists() and (tiny_run / "state" / "state.json").is_file()   # a train still writes it
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    best = max(range(len(history)), key=lambda i: (history[i]["best"], i))
    assert best < len(history) - 1, "the last epoch was not the best one"
    manifest = json.loads((out / "checkpoint" / "manifest.json").read_text())
    dev = json.loads((out / "checkpoint" / "metrics_dev.json").read_text())
    assert manifest["epoch"] == best + 1 and dev["f1_micro"] == pytest.approx(history[best]["dev_f1_micro"], abs=1e-9)
    assert dev["f1_micro"] != pytest.approx(history[-1]["dev_f1_micro"], abs=1e-9)


def test_a_fresh_start_trains_with_the_checkpoints_own_model_options(tiny_run, demo_data, tmp_path):
    """A fresh start trains as `train` did for the checkpoint: its sizes and the paper's switches (tiny_run has no code
    evidence and a free window), never the defaults (embed_dim 100, hidden_dim 1000, code evidence on)."""
    from clinicode.checkpoint import load_checkpoint

    from conftest import TINY_MODEL

    db, _ = _decided(tiny_run, demo_data, tmp_path, n=6)
    out = tmp_path / "fresh"
    res = succeeds(["review", "retrain", "--checkpoint", tiny_run, "--data", demo_data, "--out", out, "--db", db,
                    "--start", "fresh", "--epochs", "2", "--device", "cpu"])
    assert "fresh start, as train" in res.stdout
    config = load_checkpoint(out / "checkpoint").model.config
    assert {k: getattr(config, k) for k in TINY_MODEL} == TINY_MODEL
