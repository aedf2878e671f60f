"""config.ModelOptions: the LEAM options a user chooses, typed and checked once (issue 26, item 4)."""

import dataclasses

import pytest

from clinicode.config import saved_config
from clinicode.errors import ConfigError
from clinicode.models.leam.options import PAPER_MODEL, PAPER_OPTIONS, LEAMConfig, ModelOptions


def test_model_options_build_the_models_config_with_what_the_data_decides():
    opts = ModelOptions(embed_dim=8, radius=2, hidden_dim=16, dropout=0.0, code_evidence=False)
    cfg = opts.leam_config(vocab_size=30, n_labels=4, multilabel=False)
    assert cfg == LEAMConfig(vocab_size=30, n_labels=4, multilabel=False, embed_dim=8, radius=2, hidden_dim=16,
                             dropout=0.0, code_evidence=False)
    assert cfg.options == opts
    # the defaults are one set: LEAMConfig's option fields default to ModelOptions'
    assert ModelOptions().leam_config(vocab_size=3, n_labels=1) == LEAMConfig(vocab_size=3, n_labels=1)
    # model_config.json keeps its fields and their order
    assert [f.name for f in dataclasses.fields(LEAMConfig)] == [
        "vocab_size", "n_labels", "embed_dim", "radius", "hidden_dim", "dropout", "label_reg_weight",
        "label_reg_codes", "compat", "multilabel", "phrase_init", "code_evidence", "window_nonneg",
        "code_attention", "code_sample"]


@pytest.mark.parametrize("bad, message", [
    ({"radius": -1}, "LEAMConfig.radius (r) must be >= 0, got -1; the window is 2r+1 tokens."),
    ({"dropout": 1.0}, "LEAMConfig.dropout must be in [0, 1), got 1.0."),
    ({"compat": "dot"}, "LEAMConfig.compat must be 'cosine' or 'linear', got 'dot'."),
    ({"embed_dim": 0}, "LEAMConfig: embed_dim and hidden_dim must be >= 1, got 0, 1000."),
    ({"phrase_init": 0.0}, "LEAMConfig.phrase_init must be in (0, 100], got 0.0."),
    ({"label_reg_codes": 0}, "LEAMConfig.label_reg_codes must be >= 1, got 0."),
])
def test_bad_options_fail_with_the_same_message_as_the_models_config(bad, message):
    with pytest.raises(ConfigError) as options_err:
        ModelOptions.from_dict(bad)
    with pytest.raises(ConfigError) as config_err:
        LEAMConfig(vocab_size=3, n_labels=1, **bad)
    assert str(options_err.value) == str(config_err.value) == message


def test_an_unknown_option_is_named():
    with pytest.raises(ConfigError,
                       match="unknown key 'radus' in model options; known keys: code_attention, code_evidence, "
                             "code_sample, compat"):
        ModelOptions.from_dict({"radus": 3})
    with pytest.raises(ConfigError, match="unknown key 'vocab_size'"):  # the data decides it, not the user
        ModelOptions.from_dict({"vocab_size": 3})


def test_the_papers_model_is_expressed_through_the_options():
    assert PAPER_MODEL == {"code_evidence": False, "window_nonneg": False}
    assert dataclasses.replace(ModelOptions(), **PAPER_MODEL) == PAPER_OPTIONS
    # a model_config.json saved before code evidence existed still reads as the paper's model
    old = saved_config(LEAMConfig, {"vocab_size": 5, "n_labels": 2}, source="model_config.json")
    assert old.options == PAPER_OPTIONS


def test_train_takes_model_options_or_a_dict_of_some_and_trains_the_same(tmp_path, demo_data):
    import json

    from clinicode.config import TrainConfig
    from clinicode.train import train

    from conftest import TINY_MODEL

    cfg = TrainConfig(model="leam", epochs=1, batch_size=16, lr=5e-3, seed=3, device="cpu", embeddings="random")
    a = train(out_dir=tmp_path / "a", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    b = train(out_dir=tmp_path / "b", config=cfg, data_dir=demo_data, model_options=ModelOptions(**TINY_MODEL),
              progress=False)
    assert a["dev"] == b["dev"] and a["test"] == b["test"]
    # run.json keeps the options as given: the dict's keys, or every field of a ModelOptions
    assert json.loads((tmp_path / "a" / "run.json").read_text())["model_options"] == TINY_MODEL
    assert json.loads((tmp_path / "b" / "run.json").read_text())["model_options"] == dataclasses.asdict(
        ModelOptions(**TINY_MODEL))
