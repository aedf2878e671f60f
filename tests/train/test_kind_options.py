"""A model kind's own options (#53): a kind written as docs/architecture.md says, in a folder of its own with its own
options type, registered by one line, takes `train --model-option KEY=VALUE` (each value read by its field's type),
saves them with its checkpoint and reads them back; a bad key or value is one line naming the kind's options."""

from __future__ import annotations

import dataclasses
import importlib
import json
import textwrap
from pathlib import Path

import pytest

from clinicode.checkpoint import load_checkpoint
from clinicode.conformance import ConformanceError, check_kind
from clinicode.models import MODEL_KINDS, AsksOfRun, RunNeeds, parse_model_options, train_kind
from clinicode.predict import Predictor

from conftest import TINY_MODEL
from helpers import fails, succeeds

# clinicode/models/majority/ as a newcomer writes it: options.py (what a user chooses) and kind.py (the kind).
OPTIONS_PY = '''
from dataclasses import dataclass
from typing import Literal

from clinicode.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class MajorityOptions:
    smoothing: float = 1.0                      # added to each code's count of training notes
    power: int = 1                              # each code's share is raised to this power
    spread: Literal["share", "rank"] = "share"  # score by the share itself, or by its rank among the codes

    def __post_init__(self) -> None:
        if self.smoothing < 0 or self.power < 1:
            raise ConfigError(f"MajorityOptions: smoothing must be >= 0 and power >= 1, got {self.smoothing}, "
                              f"{self.power}.")
'''

KIND_PY = '''
from dataclasses import asdict

import numpy as np

from clinicode.config import config_from_dict
from clinicode.errors import CheckpointError
from clinicode.files import read_json, write_json_atomic
from clinicode.models.declarations import Abilities, KindFiles
from clinicode.models.fitting import Fitted

from .options import MajorityOptions


class PriorScorer:
    single_label = False
    plan = None
    terminology_codes = 0

    def __init__(self, scores):
        self.scores = np.asarray(scores, dtype=np.float32)

    def score(self, texts):
        return np.tile(self.scores, (len(texts), 1))

    def encode(self, texts, *, offsets):
        return None

    def score_encoded(self, encs, *, attention):
        raise NotImplementedError


class MajorityKind:
    name = "majority"
    summary = "every note scored by its codes' shares of the training notes"
    files = KindFiles(("majority.json",))
    abilities = Abilities()
    loop_model = None
    options_type = MajorityOptions

    def fit(self, data, options, *, loop):
        y = data.y
        share = (y.sum(0) + options.smoothing) / (len(y) + 2 * options.smoothing)
        if options.spread == "rank":
            share = (share.argsort().argsort() + 1) / (len(share) + 1)
        return Fitted(model={"options": asdict(options), "scores": (share ** options.power).tolist()})

    def save(self, folder, model, tokenizer):
        write_json_atomic(folder / "majority.json", model)

    def verify(self, folder):
        if not isinstance(read_json(folder / "majority.json").get("scores"), list):
            raise CheckpointError(f"{folder}: majority.json holds no scores; retrain.")

    def load(self, folder, *, labels, train_config, device):
        saved = read_json(folder / "majority.json")
        options = config_from_dict(MajorityOptions, saved["options"], source="majority.json")  # read back
        if len(saved["scores"]) != len(labels):
            raise CheckpointError(f"{folder}: majority.json and labels.json disagree; retrain.")
        return {"options": asdict(options), "scores": saved["scores"]}, None

    def card(self, model):
        return {"model_config": dict(model["options"])}

    def display_name(self, model_config):
        return "majority"

    def scorer(self, checkpoint, *, device, batch_size, memory_mb):
        return PriorScorer(checkpoint.model["scores"])


KIND = MajorityKind()
'''


@pytest.fixture
def majority(tmp_path, monkeypatch):
    """The kind's folder written in tmp, imported, and registered by one line (for this test alone)."""
    folder = tmp_path / "plugins" / "majority_kind"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "options.py").write_text(textwrap.dedent(OPTIONS_PY))
    (folder / "kind.py").write_text(textwrap.dedent(KIND_PY))
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    kind = importlib.import_module("majority_kind.kind").KIND
    monkeypatch.setitem(MODEL_KINDS, kind.name, kind)  # the registry line
    return kind


def _data(folder: Path) -> Path:
    """12 notes each of train, dev and test: code A on every note, B on the first and C on the second (so a model
    that scores every note alike still has a threshold that does not code everything: A alone)."""
    folder.mkdir()
    codes = [["A", "B"], ["A", "C"]] + [["A"]] * 10
    for split in ("train", "dev", "test"):
        rows = [{"id": f"{split}{i}", "text": f"note {i} of {split}", "labels": codes[i]} for i in range(12)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_a_new_kind_with_options_conforms(majority):
    check_kind(majority)  # includes its options off their defaults, saved and read back equal


def test_check_kind_catches_a_kind_that_forgets_its_options(majority, monkeypatch):
    """Not vacuous: a kind whose checkpoint comes back with the default options instead of those it was trained with
    (the options it was given never saved) breaks a rule."""
    load = type(majority).load

    def forgets(self, folder, **kw):
        model, tokenizer = load(self, folder, **kw)
        return {**model, "options": dataclasses.asdict(self.options_type())}, tokenizer

    monkeypatch.setattr(type(majority), "load", forgets)
    with pytest.raises(ConformanceError, match=r"options given to training must be saved with the checkpoint and "
                                               r"read back .*smoothing: 0\.5 given, 1\.0 read back"):
        check_kind(majority)


def test_a_new_kinds_options_are_set_from_the_cli_saved_and_read_back(majority, tmp_path):
    data = _data(tmp_path / "data")
    run = tmp_path / "run"
    succeeds(["train", "--data", data, "--out", run, "--model", "majority", "--model-option", "smoothing=2.5",
              "--model-option", "power=2", "--model-option", "spread=rank", "--no-progress"])
    chosen = {"smoothing": 2.5, "power": 2, "spread": "rank"}
    assert json.loads((run / "run.json").read_text())["model_options"] == chosen
    ck = load_checkpoint(run)
    assert ck.kind == "majority" and ck.model["options"] == chosen
    assert Predictor(ck).card()["model_config"] == chosen
    # the default options when none are given: every field saved, so a run says what it was trained with
    succeeds(["train", "--data", data, "--out", tmp_path / "plain", "--model", "majority", "--no-progress"])
    assert load_checkpoint(tmp_path / "plain").model["options"] == dataclasses.asdict(majority.options_type())


@pytest.mark.parametrize("args, message", [
    (["--model-option", "smoothin=2"], "--model-option smoothin: --model majority has no option 'smoothin'; its "
                                       "options: smoothing, power, spread; e.g. --model-option smoothing=1.0."),
    (["--model-option", "power=two"], "--model-option power=two: power takes an integer, got 'two'; e.g. "
                                      "--model-option power=1."),
    (["--model-option", "smoothing=nan"], "smoothing takes a number, got 'nan'"),
    (["--model-option", "spread=median"], "spread takes one of 'share', 'rank', got 'median'; e.g. --model-option "
                                          "spread=share."),
    (["--model-option", "power"], "--model-option 'power': expected KEY=VALUE, e.g. --model-option smoothing=1.0."),
    (["--model-option", "power=2", "--model-option", "power=3"], "--model-option power is given twice"),
    (["--model-option", "power=0"], "power >= 1, got 1.0, 0"),                   # the options type's own range check
    (["--embed-dim", "8"], "--model majority has no option 'embed_dim' (--embed-dim is LEAM's); its options: "
                           "smoothing, power, spread; set them with --model-option KEY=VALUE."),
])
def test_a_bad_model_option_is_one_line_naming_the_kinds_options_and_writes_nothing(majority, tmp_path, args,
                                                                                     message):
    data = _data(tmp_path / "data")
    fails(["train", "--data", data, "--out", tmp_path / "run", "--model", "majority", *args, "--no-progress"], message)
    assert not (tmp_path / "run").exists()


def test_model_options_for_a_kind_without_options_or_twice_for_leam_are_refused(tmp_path):
    data = _data(tmp_path / "data")
    fails(["train", "--data", data, "--out", tmp_path / "run", "--model", "tfidf-lr", "--model-option", "power=2"],
          "--model tfidf-lr takes no model options, got --model-option power; leave it out.")
    fails(["train", "--data", data, "--out", tmp_path / "run", "--model", "leam", "--embed-dim", "8",
           "--model-option", "embed_dim=16"], "--embed-dim and --model-option embed_dim both set embed_dim")
    fails(["train", "--data", data, "--out", tmp_path / "run", "--paper", "--model-option", "code_evidence=true"],
          "give one of --paper or --model-option code_evidence")
    assert not (tmp_path / "run").exists()


def test_values_are_read_by_the_fields_type():
    leam = train_kind("leam")
    got = parse_model_options(leam, ["embed_dim=8", "dropout=0.25", "compat=linear", "code_evidence=false",
                                     "window_nonneg=Yes"])
    assert got == {"embed_dim": 8, "dropout": 0.25, "compat": "linear", "code_evidence": False, "window_nonneg": True}
    assert parse_model_options(leam, []) == {}


def test_leam_takes_an_option_it_has_no_flag_for(tmp_path):
    data = tmp_path / "cues"
    data.mkdir()
    cues = [("fever cough", "A"), ("rash itch", "B"), ("knee pain", "C")]  # one code a note: every epoch is usable
    for split in ("train", "dev"):
        rows = [{"id": f"{split}{i}", "text": f"{cues[i % 3][0]} note {i}", "labels": [cues[i % 3][1]]}
                for i in range(12)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = [f"--{k.replace('_', '-')}" if isinstance(v, bool) and v else
             f"--no-{k.replace('_', '-')}" if isinstance(v, bool) else f"--{k.replace('_', '-')}={v}"
             for k, v in TINY_MODEL.items()]
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "leam", *flags, "--model-option",
              "label_reg_codes=2", "--epochs", "1", "--min-doc-freq", "1", "--w2v-epochs", "1", "--no-progress"])
    saved = json.loads((tmp_path / "run" / "checkpoint" / "model_config.json").read_text())
    assert saved["label_reg_codes"] == 2 and saved["embed_dim"] == TINY_MODEL["embed_dim"]
    assert load_checkpoint(tmp_path / "run").model.config.label_reg_codes == 2


def test_what_a_kinds_options_ask_of_a_run_is_asked_once_a_train(majority, tmp_path, monkeypatch):
    """An options type that says what the run prepares (`AsksOfRun.run_needs`, declared and documented, not a hook
    found by name) is asked once a run, and is one by its shape alone."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    asked = []

    def run_needs(self):
        asked.append(self)
        return RunNeeds(evidence=False)

    monkeypatch.setattr(majority.options_type, "run_needs", run_needs, raising=False)
    assert isinstance(majority.options_type(), AsksOfRun)
    train(out_dir=tmp_path / "run", config=TrainConfig(model="majority", device="cpu"),
          data_dir=_data(tmp_path / "data"), model_options={"power": 2}, progress=False)
    assert len(asked) == 1 and asked[0].power == 2, asked


@pytest.mark.parametrize("answer, rule", [
    (dict(evidence=False), r"`run_needs\(\)` must return a `RunNeeds`, got dict"),
    (RunNeeds(dev_codes=True), r"`run_needs\(\)` asks for train and dev together \(`dev_codes`\) but "
                               r"`abilities.refit_on_dev` is False"),
    (RunNeeds(terminology=" "), r"`run_needs\(\)`'s `terminology` must be None or a code<TAB>title file or 'auto'"),
])
def test_check_kind_checks_what_the_options_ask_of_a_run(majority, monkeypatch, answer, rule):
    monkeypatch.setattr(majority.options_type, "run_needs", lambda self: answer, raising=False)
    with pytest.raises(ConformanceError, match=rf"model kind 'majority': {rule}"):
        check_kind(majority)


def test_check_kind_refuses_a_run_needs_that_is_no_method(majority, monkeypatch):
    monkeypatch.setattr(majority.options_type, "run_needs", True, raising=False)
    with pytest.raises(ConformanceError, match=r"`options_type.run_needs` must be a method returning a `RunNeeds`"):
        check_kind(majority)
