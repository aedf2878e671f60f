"""`code_sample`: with `code_attention`, a training batch scores its own codes (positive in one of its notes) and a
random draw of the others, weighted so that the loss stands for every code's. The draw keeps every code in play,
its weights make the loss an unbiased estimate of the full one, the sampled logits are the full logits' columns, and
scoring (dev, predict) always reads every code."""

import json

import pytest
import torch

from clinicode.batching import pad_batch
from clinicode.errors import ConfigError
from clinicode.models.leam.kind import KIND
from clinicode.models.leam.memory import plan
from clinicode.models.leam.model import LEAM, SampledLogits, sample_codes
from clinicode.models.leam.options import LEAMConfig, ModelOptions

from helpers import succeeds

NOTES = [[2, 3, 4, 5, 6, 7, 8, 30, 31, 2, 2], [9, 10, 11], [12], [13, 14, 15, 16, 17]]


def _targets(K=40):
    y = torch.zeros(4, K)
    y[0, [1, 5]] = 1.0
    y[1, 5] = 1.0
    y[3, min(30, K - 1)] = 1.0
    return y


def test_the_draw_keeps_the_batchs_codes_and_weights_the_others_to_stand_for_the_rest():
    torch.manual_seed(0)
    y = _targets()
    codes, weight = sample_codes(y, 6)
    assert codes[:3].tolist() == [1, 5, 30] and weight[:3].tolist() == [1.0, 1.0, 1.0]
    drawn = codes[3:].tolist()
    assert len(drawn) == len(set(drawn)) == 6 and not {1, 5, 30} & set(drawn)
    assert weight[3:].tolist() == pytest.approx([37 / 6] * 6)
    # no more others than the draw: every code, unweighted
    every, w = sample_codes(_targets(9), 6)                        # 3 codes in play, 6 others
    assert every.tolist() == list(range(9)) and w.tolist() == [1.0] * 9


def test_the_sampled_loss_is_an_unbiased_estimate_of_the_full_loss():
    torch.manual_seed(1)
    K = 40
    model = LEAM(LEAMConfig(vocab_size=40, n_labels=K, embed_dim=8, radius=2, hidden_dim=16, code_attention=True,
                            code_sample=5, label_reg_weight=0.0))
    logits, y = torch.randn(4, K) * 2, _targets(K)
    pw = torch.linspace(0.5, 3.0, K)
    full, _ = model.loss(logits, y, pos_weight=pw)
    draws = []
    for _ in range(4000):
        codes, weight = sample_codes(y, 5)
        draws.append(model.loss(logits[:, codes], y[:, codes], pos_weight=pw[codes], weight=weight)[0])
    draws = torch.stack(draws)
    assert draws.std() > 0.01                                      # a draw, not the full loss every time
    assert draws.mean().item() == pytest.approx(full.item(), rel=0.02)


@pytest.mark.parametrize("evidence", [True, False])
def test_some_codes_are_the_full_logits_columns_and_train_only_their_rows(evidence):
    torch.manual_seed(2)
    model = LEAM(LEAMConfig(vocab_size=40, n_labels=23, embed_dim=8, radius=2, hidden_dim=16, code_attention=True,
                            code_evidence=evidence, dropout=0.0))
    ids, mask = pad_batch(NOTES)
    codes = torch.tensor([17, 2, 9])
    some = model(ids, mask, codes=codes).logits
    torch.testing.assert_close(some, model(ids, mask).logits[:, codes], rtol=1e-5, atol=1e-6)
    some.sum().backward()
    rows = model.head[4].weight.grad.abs().sum(dim=1)
    assert (rows[codes] > 0).all() and rows.sum() == rows[codes].sum()   # no other code's output row moved
    assert (model.attend_rho.grad != 0).sum() == 3
    with pytest.raises(ValueError, match="codes= scores some codes"):
        model(ids, mask, codes=codes, return_attention=True)


def test_the_kind_draws_in_training_only():
    torch.manual_seed(3)
    cfg = LEAMConfig(vocab_size=40, n_labels=40, embed_dim=8, radius=2, hidden_dim=16, code_attention=True,
                     code_sample=4)
    model = LEAM(cfg)
    ids, mask = pad_batch(NOTES)
    p = plan(cfg, batch_size=4, max_len=11, budget_mb=256, device="cpu", training=True)
    y = _targets()
    out = KIND.forward(model.train(), ids, mask, plan=p, targets=y)
    assert isinstance(out, SampledLogits) and out.logits.shape == (4, 7)
    loss, task = KIND.loss(model, out, y, pos_weight=None)
    assert torch.isfinite(loss) and task > 0
    assert KIND.forward(model.eval(), ids, mask, plan=p, targets=y).shape == (4, 40)   # dev scoring: every code
    assert KIND.forward(model.train(), ids, mask, plan=p).shape == (4, 40)              # no labels: every code
    one = LEAM(LEAMConfig(vocab_size=40, n_labels=40, embed_dim=8, radius=2, hidden_dim=16, code_sample=4))
    assert KIND.forward(one.train(), ids, mask, plan=p, targets=y).shape == (4, 40)     # one attention a note


def test_it_is_a_count_and_samples_by_default():
    with pytest.raises(ConfigError, match=r"code_sample must be >= 0 \(0: every code\), got -1"):
        ModelOptions.from_dict({"code_sample": -1, "code_attention": True})
    assert ModelOptions().code_sample == 64 and not ModelOptions().code_attention   # LEAM alone: one per note


def test_train_takes_it_and_saves_it(tmp_path):
    data = tmp_path / "cues"
    data.mkdir()
    cues = [("fever cough", "A"), ("rash itch", "B"), ("knee pain", "C"), ("chest pain", "D"), ("sore eye", "E")]
    for split in ("train", "dev", "test"):
        rows = [{"id": f"{split}{i}", "text": f"{cues[i % 5][0]} note {i}", "labels": [cues[i % 5][1]]}
                for i in range(15)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "leam", "--embed-dim", "8",
              "--hidden-dim", "16", "--model-option", "code_attention=true", "--model-option", "code_sample=1",
              "--epochs", "2", "--batch-size", "2", "--min-doc-freq", "1", "--w2v-epochs", "1", "--seed", "3",
              "--no-progress"])
    saved = json.loads((tmp_path / "run" / "checkpoint" / "model_config.json").read_text())
    assert saved["code_attention"] is True and saved["code_sample"] == 1
