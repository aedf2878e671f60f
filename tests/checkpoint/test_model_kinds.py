"""Model kinds are plugins: a kind registered in MODEL_KINDS (here a fake one, in this test alone) is saved, verified,
loaded and scored through the registry with no other module changed; an unknown kind is one line naming the known
ones."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pytest
from typer.testing import CliRunner

from clinicode.checkpoint import load_checkpoint, save_checkpoint, verify_checkpoint
from clinicode.cli import app
from clinicode.config import TrainConfig
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError, ConfigError
from clinicode.files import read_json, write_json_atomic
from clinicode.models import MODEL_KINDS, Abilities, KindFiles, ModelKind, known_kinds, model_kind, train_kind
from clinicode.models.fitting import Fitted, Loop, TrainingData
from clinicode.predict import Predictor

CODES = ("401.9", "428.0", "584.9")
TITLES = ("Hypertension NOS", "Congestive heart failure NOS", "Acute kidney failure NOS")


class KeywordScorer:
    """A code scores 0.9 when its keyword is in the note, else 0.1."""

    single_label = False
    plan = None             # no memory plan
    terminology_codes = 0   # every code has its keyword

    def __init__(self, keywords: Mapping[str, str], codes: Sequence[str]) -> None:
        self.words = [keywords[c] for c in codes]

    def score(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([[0.9 if w in t.lower() else 0.1 for w in self.words] for t in texts], dtype=np.float32)

    def encode(self, texts: Sequence[str], *, offsets: bool) -> None:
        return None

    def score_encoded(self, encs: Sequence[Any], *, attention: bool) -> tuple[np.ndarray, None]:
        raise NotImplementedError


class KeywordKind:
    """The smallest model kind: one keyword per code, kept in keywords.json."""

    name = "keywords"
    summary = "one keyword per code"
    files = KindFiles(("keywords.json",))
    abilities = Abilities()
    loop_model = None
    options_type = None

    def save(self, folder: Path, model: Any, tokenizer: Any | None) -> None:
        write_json_atomic(folder / "keywords.json", {"keywords": model})

    def verify(self, folder: Path) -> None:
        if not isinstance(read_json(folder / "keywords.json").get("keywords"), dict):
            raise CheckpointError(f"{folder}: keywords.json holds no keyword table; retrain.")

    def load(self, folder: Path, *, labels: LabelSet, train_config: TrainConfig, device: Any) -> tuple[Any, None]:
        model = read_json(folder / "keywords.json")["keywords"]
        if set(model) != set(labels.codes):
            raise CheckpointError(f"{folder}: keywords.json and labels.json name other codes; retrain.")
        return model, None

    def card(self, model: Any) -> dict[str, Any]:
        return {"model_config": {"keywords": dict(model)}}

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        return "keyword lookup"

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> KeywordScorer:
        return KeywordScorer(checkpoint.model, checkpoint.labels.codes)

    def fit(self, data: TrainingData, options: None, *, loop: Loop) -> Fitted:
        """Each code's keyword: the word of its notes found least often in the others."""
        y = data.y
        words = [set(t.lower().split()) for t in data.texts]
        table = {}
        for k, code in enumerate(data.labels.codes):
            inside = [w for i, w in enumerate(words) if y[i, k]]
            outside = [w for i, w in enumerate(words) if not y[i, k]]
            pool = sorted(set().union(*inside)) if inside else ["-"]
            table[code] = max(pool, key=lambda v: (sum(v in w for w in inside) - sum(v in w for w in outside), v))
        return Fitted(model=table)


@pytest.fixture
def keywords(monkeypatch) -> KeywordKind:
    """The fake kind, registered for one test (the registry is restored after it)."""
    kind = KeywordKind()
    monkeypatch.setitem(MODEL_KINDS, kind.name, kind)
    return kind


def _save(folder: Path, kind: str = "keywords") -> Path:
    model = {"401.9": "hypertension", "428.0": "heart failure", "584.9": "kidney"}
    return save_checkpoint(folder, kind=kind, model=model, labels=LabelSet(CODES, TITLES), threshold=0.5,
                           train_config=TrainConfig(model=kind), train_counts=[3, 2, 1])


def test_the_built_in_kinds_are_registered_with_their_capabilities():
    # the built-in ones, whatever else is registered (every registered kind: tests/checkpoint/test_conformance.py)
    assert {"fused", "leam", "tfidf-lr"} <= set(MODEL_KINDS) and all(repr(n) in known_kinds() for n in MODEL_KINDS)
    leam, lr, fused = MODEL_KINDS["leam"], MODEL_KINDS["tfidf-lr"], MODEL_KINDS["fused"]
    # the fused kind explains and embeds through its LEAM part; its tfidf-lr part reads the text, so no ids alone
    # (and, with --fit-on train+dev, refits its parts without epochs on train and dev)
    assert fused.abilities == Abilities(explain=True, embed=True, refit_on_dev=True) and fused.loop_model is leam
    assert fused.files == KindFiles((*leam.files.required, *lr.files.required, "fusion.safetensors", "fusion.json"),
                                    optional=("mentions.json",))
    assert leam.abilities == Abilities(explain=True, embed=True, score_ids=True) and leam.loop_model is leam
    assert lr.abilities == Abilities() and lr.loop_model is None
    assert leam.files == KindFiles(("model.safetensors", "model_config.json", "tokenizer.json"))
    assert lr.files == KindFiles(("tfidf_lr.safetensors", "tfidf_lr.json"))
    for kind in MODEL_KINDS.values():
        assert all(hasattr(kind, m) for m in ModelKind.__annotations__) and callable(kind.scorer)


def test_the_kind_protocol_has_at_most_15_members_and_no_one_kind_answers_for_the_model():
    """What a kind declares is grouped (`files`: always and sometimes; `abilities`); what a model says of itself is
    asked of it: one label a note (its scorer's `single_label`), where its weights are (`Fitted.device`, the loaded
    checkpoint's device) and its configuration class (its `loop_model`'s `config_type`)."""
    members = {m for m in vars(ModelKind) if not m.startswith("_")} | set(ModelKind.__annotations__)
    assert len(members) <= 15, sorted(members)
    assert not members & {"single_label", "device", "config_type", "optional_files", "can_explain", "can_embed",
                          "scores_ids", "refits_on_dev"}
    for kind in MODEL_KINDS.values():
        assert not any(hasattr(kind, m) for m in ("single_label", "device", "optional_files", "can_explain")), kind


def test_a_registered_kind_saves_verifies_loads_and_scores_through_the_registry(keywords, tmp_path):
    folder = _save(tmp_path / "run" / "checkpoint")
    _, manifest = verify_checkpoint(tmp_path / "run")
    assert manifest["model"] == "keywords" and "keywords.json" in manifest["files"]

    ck = load_checkpoint(tmp_path / "run")
    assert ck.kind == "keywords" and ck.model_kind is keywords and ck.path == folder
    assert ck.train_counts == {"401.9": 3, "428.0": 2, "584.9": 1}

    pred = Predictor(ck)
    assert pred.single_label is False   # the scorer's
    notes = ["Known hypertension, now heart failure.", "Acute kidney injury.", "   "]
    np.testing.assert_allclose(pred.score(notes[:2]), [[0.9, 0.9, 0.1], [0.1, 0.1, 0.9]], rtol=1e-6)
    recs = pred.predict(notes, explain=3)
    assert [c.code for c in recs[0].predicted] == ["401.9", "428.0"] and recs[0].evidence is None
    assert [c.code for c in recs[1].predicted] == ["584.9"] and recs[2].error is not None
    assert pred.card()["model_config"] == {"keywords": ck.model} and pred.card()["model"] == "keywords"
    assert pred.plan is None
    with pytest.raises(ConfigError, match="phrase evidence exists only for .*this one is keywords"):
        pred.explain_codes(notes[0], ["401.9"])
    with pytest.raises(ConfigError, match="note embeddings exist only for .*this one is keywords"):
        pred.embed(notes)
    with pytest.raises(ConfigError, match="score_ids needs a checkpoint that scores token ids"):
        pred.score_ids([[1, 2]])


def test_a_kinds_file_without_a_hash_in_the_manifest_is_refused(keywords, tmp_path):
    folder = _save(tmp_path / "checkpoint")
    m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    del m["files"]["keywords.json"]
    (folder / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"manifest\.json lists no hash for keywords\.json"):
        load_checkpoint(folder)


def test_a_kind_that_is_no_longer_registered_is_one_line_naming_the_known_ones(tmp_path, monkeypatch):
    monkeypatch.setitem(MODEL_KINDS, "keywords", KeywordKind())
    folder = _save(tmp_path / "checkpoint")
    monkeypatch.delitem(MODEL_KINDS, "keywords")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(folder)
    assert str(err.value) == f"{folder}: unknown model kind 'keywords' in manifest.json; expected {known_kinds()}."
    assert "'keywords'" not in known_kinds()


def test_an_unknown_kind_in_a_manifest_is_one_line_from_the_cli(tiny_run, tmp_path):
    ck = tmp_path / "run" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", ck)
    m = json.loads((ck / "manifest.json").read_text(encoding="utf-8"))
    m["model"] = "svm"  # the manifest hashes the other files, not itself
    (ck / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(CheckpointError, match=re.escape(f"unknown model kind 'svm' in manifest.json; expected "
                                                        f"{known_kinds()}.") + "$"):
        load_checkpoint(ck)
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "1", "text": "chest pain"}) + "\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["predict", "--checkpoint", str(tmp_path / "run"), "--input",
                                   str(tmp_path / "in.jsonl")])
    err = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and len(err) == 1 and err[0].startswith("error: ")
    assert f"unknown model kind 'svm' in manifest.json; expected {known_kinds()}." in err[0]


def test_an_unknown_kind_is_refused_before_anything_is_written(tmp_path, keywords):
    # the registered kinds, the one registered here last (read from the registry: no test pins the list of kinds)
    known = known_kinds()
    assert known.endswith(" or 'keywords'") and all(repr(n) in known for n in MODEL_KINDS)
    with pytest.raises(CheckpointError, match=r"^unknown model kind 'svm'; expected " + re.escape(known) + r"\.$"):
        _save(tmp_path / "checkpoint", kind="svm")
    assert not (tmp_path / "checkpoint").exists()
    with pytest.raises(ConfigError, match=r"^--model must be " + re.escape(known) + r", got 'svm'\.$"):
        train_kind("svm")
    assert train_kind("keywords") is keywords and model_kind("leam") is MODEL_KINDS["leam"]


@pytest.mark.parametrize("given, shown", [(["leam"], "['leam']"), (3, "3"), ("../x", "'../x'"), (None, "None"),
                                          ("x" * 5000, "'" + "x" * 56 + "...")])
def test_a_hand_edited_model_field_is_named_in_one_short_line(given, shown):
    # A manifest's "model" may be a list, a number, a path or a 5,000-character string: never looked up as a path,
    # and shown cut so the message stays one readable line.
    with pytest.raises(CheckpointError) as err:
        model_kind(given, folder=Path("run/checkpoint"))
    assert str(err.value) == f"run/checkpoint: unknown model kind {shown} in manifest.json; expected {known_kinds()}."
    with pytest.raises(ConfigError) as err:
        train_kind(given)
    assert len(str(err.value)) < 120
