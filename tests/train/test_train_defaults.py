"""Training defaults and the small training options around LEAM: range checks, pos_weight, word2vec passes."""

import pytest
import torch

from clinicode.config import TrainConfig
from clinicode.embeddings import auto_w2v_epochs
from clinicode.errors import ConfigError
from clinicode.models.fused.options import FusedOptions
from clinicode.models.leam.model import LEAM
from clinicode.models.leam.options import LEAMConfig
from clinicode.training.loop import pos_weight as _pos_weight


def test_library_defaults_are_the_tuned_ones():
    cfg = TrainConfig()
    # the default kind is the fused model (#41): LEAM's part stops at 30 epochs, tfidf-lr carries the rare codes
    assert (cfg.model, FusedOptions().fused_epochs) == ("fused", 30)
    assert (cfg.lr, cfg.optimizer, cfg.weight_decay, cfg.pos_weight, cfg.w2v_epochs) == (1e-2, "adamw", 0.3, 0.25, 0)
    assert (cfg.decay_scope, cfg.ema_decay) == ("embeddings", 0.99)
    assert (cfg.lr_schedule, cfg.lr_decay, cfg.lr_patience, cfg.patience, cfg.epochs) == ("plateau", 0.5, 2, 5, 200)
    assert (cfg.patience_steps, cfg.lr_patience_steps) == (500, 200)
    lc = LEAMConfig(vocab_size=10, n_labels=2)
    # the default is not the paper's model: code evidence (round 10) with a window kept >= 0 (round 12)
    assert (lc.phrase_init, lc.hidden_dim, lc.code_evidence, lc.window_nonneg) == (1.0, 1000, True, True)


@pytest.mark.parametrize(("steps_per_epoch", "want"), [
    (504, (5, 2)),      # MIMIC-III top 50 (8,066 notes / 16): the epoch counts decide, as before
    (25, (20, 8)),      # ~400 notes: 500 and 200 steps are 20 and 8 epochs
    (43, (12, 5)),      # rounded up, never below the floor
    (1, (500, 200)),
])
def test_patience_covers_at_least_its_steps(steps_per_epoch, want):
    assert TrainConfig().patience_epochs(steps_per_epoch) == want
    assert TrainConfig(patience_steps=0, lr_patience_steps=0).patience_epochs(steps_per_epoch) == (5, 2)
    with pytest.raises(ConfigError, match="patience-steps"):
        TrainConfig(patience_steps=-1)


def test_a_train_config_saved_before_patience_steps_keeps_its_epoch_patience():
    from clinicode.config import saved_config

    old = saved_config(TrainConfig, {"patience": 5}, source="train_config.json")
    assert (old.patience_steps, old.lr_patience_steps) == (0, 0)
    assert old.patience_epochs(25) == (5, 2)


def _tiny_set(d):
    import json

    d.mkdir()
    for split in ("train", "dev"):
        rows = [{"id": f"{split}{i}", "text": ["fever cough fever", "rash itch rash"][i % 2] + f" note {i}",
                 "labels": [["A"], ["B"]][i % 2]} for i in range(16)]
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_paper_flag_trains_exactly_the_papers_model_and_the_default_does_not(tmp_path):
    import json

    from typer.testing import CliRunner

    from clinicode.cli import app
    from clinicode.models.leam.options import PAPER_MODEL, is_paper_model

    d = _tiny_set(tmp_path / "data")
    small = ["--embed-dim", "8", "--window", "1", "--hidden-dim", "8", "--epochs", "3", "--lr", "0.05", "--w2v-epochs",
             "1", "--device", "cpu",
             "--no-progress"]
    saved = {}
    for name, flags in (("paper", ["--paper"]), ("default", [])):
        res = CliRunner().invoke(app, ["train", "--data", str(d), "--out", str(tmp_path / name), *small, *flags])
        assert res.exit_code == 0, res.output
        saved[name] = json.loads((tmp_path / name / "checkpoint" / "model_config.json").read_text())
    assert {k: saved["paper"][k] for k in PAPER_MODEL} == PAPER_MODEL == {"code_evidence": False,
                                                                          "window_nonneg": False}
    assert is_paper_model(saved["paper"]) and not is_paper_model(saved["default"])
    kinds = {n: json.loads((tmp_path / n / "checkpoint" / "manifest.json").read_text())["model"] for n in saved}
    assert kinds == {"paper": "leam", "default": "fused"}     # the default is the fused model (#41); --paper a LEAM
    res = CliRunner().invoke(app, ["train", "--data", str(d), "--out", str(tmp_path / "pf"), *small, "--paper",
                                   "--model", "fused"])
    assert res.exit_code == 1 and "--paper trains the paper's LEAM (--model leam)" in res.output
    assert not (tmp_path / "pf").exists()
    assert saved["default"]["code_evidence"] and saved["default"]["window_nonneg"]
    for flag in ("--code-evidence", "--window-nonneg"):
        res = CliRunner().invoke(app, ["train", "--data", str(d), "--out", str(tmp_path / "both"), *small, "--paper",
                                       flag])
        assert res.exit_code == 1 and f"give one of --paper or {flag}" in res.output
        assert not (tmp_path / "both").exists()
    res = CliRunner().invoke(app, ["train", "--data", str(d), "--out", str(tmp_path / "free"), *small,
                                   "--no-window-nonneg"])
    assert res.exit_code == 0, res.output
    free = json.loads((tmp_path / "free" / "checkpoint" / "model_config.json").read_text())
    assert free["code_evidence"] and not free["window_nonneg"]
    # the window's state is logged every epoch (the collapse's mechanism, issue 35)
    rows = [json.loads(line) for line in (tmp_path / "default" / "history.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all({"w1_sum", "w1_min", "b1_mean", "a_mean"} <= set(r) for r in rows)
    assert all(r["w1_min"] >= 0 for r in rows)


def test_a_model_config_saved_before_the_default_changed_reads_as_the_papers_model():
    from clinicode.checkpoint import model_options_as_saved

    def read(saved):  # as its kind reads it (the fused kind's LEAM part reads the same)
        return [(model_options_as_saved(saved, kind=k)["code_evidence"],
                 model_options_as_saved(saved, kind=k)["window_nonneg"]) for k in ("leam", "fused")]

    old = {"vocab_size": 10, "n_labels": 2, "compat": "cosine"}           # written before code_evidence/window_nonneg
    assert read(old) == [(False, False)] * 2
    round9 = {**old, "code_evidence": True}                                 # code evidence before window_nonneg
    assert read(round9) == [(True, False)] * 2
    new = {**old, "code_evidence": True, "window_nonneg": True}
    assert read(new) == [(True, True)] * 2


@pytest.mark.parametrize("nonneg", [True, False])
def test_window_nonneg_keeps_every_tap_of_w1_at_or_above_zero(nonneg):
    m = LEAM(LEAMConfig(vocab_size=10, n_labels=2, radius=2, window_nonneg=nonneg))
    with torch.no_grad():
        m.phrase_w.copy_(torch.tensor([0.3, -0.2, 0.5, -1.0, 0.1]))      # as a gradient step can leave it
    m.constrain()
    want = [0.3, 0.0, 0.5, 0.0, 0.1] if nonneg else [0.3, -0.2, 0.5, -1.0, 0.1]
    torch.testing.assert_close(m.phrase_w.detach(), torch.tensor(want))


def test_training_applies_the_window_constraint_after_every_step(tmp_path, monkeypatch):
    """A run whose W1 is pushed below 0 at every step ends with W1 >= 0 (the default), and below 0 with --paper."""
    from clinicode.train import train
    from clinicode.training.loop import _Trainer

    d = _tiny_set(tmp_path / "data")
    seen = {}
    original = _Trainer.train_epoch

    def push_down(self, epoch):
        step = self.opt.step

        def stepped(*a, **k):
            out = step(*a, **k)
            with torch.no_grad():
                self.model.phrase_w.sub_(0.5)                     # what a sign flip looks like to the projection
            return out
        self.opt.step = stepped
        loss = original(self, epoch)
        seen[self.model_config.window_nonneg] = self.model.phrase_w.detach().clone()
        return loss

    monkeypatch.setattr(_Trainer, "train_epoch", push_down)
    for nonneg in (True, False):
        cfg = TrainConfig(model="leam", epochs=1, w2v_epochs=1, device="cpu", ema_decay=0.0)
        train(out_dir=tmp_path / f"run-{nonneg}", config=cfg, data_dir=d, progress=False,
              model_options=dict(embed_dim=8, radius=1, hidden_dim=8, window_nonneg=nonneg))
    assert (seen[True] >= 0).all() and (seen[False] < 0).all()


CLI_TO_CONFIG = {**{n: (TrainConfig, n) for n in ("model", "epochs", "patience",
                                                  "batch_size",
                                                  "max_len", "lr",
                                                  "embeddings",
                                                  "seed", "weight_decay", "optimizer", "pos_weight", "decay_scope",
                                                  "ema_decay",
                                                  "w2v_epochs", "min_doc_freq", "eval_batch_size", "device",
                                                  "lr_schedule", "lr_decay", "lr_patience")},
                 **{n: (FusedOptions, n) for n in ("fused_epochs", "mentions", "fit_on")},
                 "embed_dim": (LEAMConfig, "embed_dim"), "radius": (LEAMConfig, "radius"),
                 "hidden_dim": (LEAMConfig, "hidden_dim"),
                 "dropout": (LEAMConfig, "dropout"), "label_reg": (LEAMConfig, "label_reg_weight"),
                 "compat": (LEAMConfig, "compat"),
                 "code_evidence": (LEAMConfig, "code_evidence")}   # --paper is a switch with no default of its own


def test_cli_repeats_no_default_and_its_help_shows_config_defaults():
    """config.py is the only home of a default: CLI options are None unless given; --help shows config.py's value."""
    import inspect
    import typing

    from clinicode.cli import train_cli
    from clinicode.config import default_of

    params = inspect.signature(train_cli).parameters
    hints = typing.get_type_hints(train_cli, include_extras=True)
    for cli_name, (cls, field) in CLI_TO_CONFIG.items():
        assert params[cli_name].default is None, cli_name
        option = hints[cli_name].__metadata__[0]
        assert option.show_default == str(default_of(cls, field)), cli_name


def test_a_run_given_no_options_records_the_config_defaults(tmp_path):
    import json

    from typer.testing import CliRunner

    from clinicode.cli import app

    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "dev"):
        rows = [{"id": f"{split}{i}", "text": ["fever cough", "rash itch", "fever rash"][i % 3] + f" note {i}",
                 "labels": [["A"], ["B"], ["A", "B"]][i % 3]} for i in range(12)]
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(app, ["train", "--data", str(d), "--out", str(tmp_path / "run"), "--model", "tfidf-lr"])
    assert res.exit_code == 0, res.output
    saved = json.loads((tmp_path / "run" / "checkpoint" / "train_config.json").read_text())
    assert saved == {**vars(TrainConfig()), "model": "tfidf-lr"}


@pytest.mark.parametrize("kw, match", [
    (dict(optimizer="sgd"), "optimizer"),
    (dict(weight_decay=-0.1), "weight-decay"),
    (dict(pos_weight=1.5), "pos-weight"),
    (dict(w2v_epochs=-1), "w2v-epochs"),
    (dict(decay_scope="head"), "decay-scope"),
    (dict(ema_decay=1.0), "ema-decay"),
])
def test_train_config_rejects_bad_values(kw, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**kw)


def test_phrase_init_sets_w1_and_is_checked():
    m = LEAM(LEAMConfig(vocab_size=10, n_labels=2, radius=2, phrase_init=5.0))
    torch.testing.assert_close(m.phrase_w.detach(), torch.full((5,), 1.0))
    with pytest.raises(ConfigError, match="phrase_init"):
        LEAMConfig(vocab_size=10, n_labels=2, phrase_init=0.0)


def test_pos_weight_balances_rare_labels_and_changes_the_loss():
    y = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    w = _pos_weight(y, 1.0)
    torch.testing.assert_close(w, torch.tensor([1 / 3, 3.0]))
    torch.testing.assert_close(_pos_weight(y, 0.5), w.sqrt())
    m = LEAM(LEAMConfig(vocab_size=10, n_labels=2, label_reg_weight=0.0))
    logits = torch.tensor([[0.5, -1.0], [0.2, 0.3], [-0.4, 1.0], [1.0, -2.0]])
    plain, _ = m.loss(logits, y)
    weighted, _ = m.loss(logits, y, pos_weight=w)
    assert not torch.isclose(plain, weighted)


@pytest.mark.slow  # counts 10 million tokens
def test_auto_w2v_epochs_scales_with_corpus_size():
    assert auto_w2v_epochs(1_000) == 30                         # tiny corpus: the cap
    assert auto_w2v_epochs(10_000_000) == 5                     # 10M tokens: CAML's 5 passes
    assert auto_w2v_epochs(2_000_000) == 15                     # 2M tokens: in between


def test_weight_decay_reaches_only_the_scoped_parameters():
    from clinicode.train import make_optimizer

    model = LEAM(LEAMConfig(vocab_size=10, n_labels=2, hidden_dim=4))
    names = {id(p): n for n, p in model.named_parameters()}

    def decayed(scope):
        opt = make_optimizer(model, TrainConfig(decay_scope=scope, weight_decay=0.3))
        got = {names[id(p)] for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
        assert sum(len(g["params"]) for g in opt.param_groups) == len(names)   # every parameter is optimised once
        return got

    assert decayed("embeddings") == {"word_emb.weight", "label_emb"}
    assert decayed("matrices") == {"word_emb.weight", "label_emb", "head.1.weight", "head.4.weight"}
    assert decayed("all") == set(names.values())


@pytest.mark.parametrize("bad, match", [(dict(lr_schedule="cosine"), "--lr-schedule must be 'plateau' or 'constant'"),
                                        (dict(lr_decay=1.0), r"--lr-decay must be in \(0, 1\)"),
                                        (dict(lr_decay=0.0), r"--lr-decay must be in \(0, 1\)"),
                                        (dict(lr_patience=0), "--lr-patience must be >= 1")])
def test_schedule_options_are_range_checked(bad, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**bad)


def test_cli_docs_state_the_config_defaults():
    """docs/cli.md's train table shows each option's default; it must be config.py's (a test, not a promise)."""
    import re
    from pathlib import Path

    from clinicode.config import default_of

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## `train`", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `--([a-z0-9-]+)[^`]*` \| ([^|]*) \|", section, flags=re.M))
    checked = 0
    for cli_name, (cls, field) in CLI_TO_CONFIG.items():
        doc = rows.get(cli_name.replace("_", "-"))
        if doc is None:
            continue
        want = default_of(cls, field)
        assert doc.strip().strip("`") == str(want), f"--{cli_name}: docs say {doc.strip()}, config.py says {want}"
        checked += 1
    assert checked >= 20
