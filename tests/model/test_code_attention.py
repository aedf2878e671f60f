"""`code_attention`: one attention per code instead of LEAM's one per note (not the paper; off by default). Each code
attends over the note by softmax_l(t_k u_kl), without the max over codes, and its attended words go through the same
head, keeping output k. Every order computes the plain expression; blocks of codes change neither the logits nor the
gradients; the option trains, is saved and reads back through the command."""

import json

import pytest
import torch
import torch.nn.functional as F

import clinicode.models.leam.memory
from clinicode.batching import pad_batch
from clinicode.checkpoint import load_checkpoint
from clinicode.models.leam.kind import leam_weight_shapes
from clinicode.models.leam.memory import plan
from clinicode.models.leam.model import LEAM, _cosine, _window
from clinicode.models.leam.options import LEAMConfig
from clinicode.predict import Predictor

from helpers import fails, succeeds

NOTES = [[2, 3, 4, 5, 6, 7, 8, 30, 31, 2, 2], [9, 10, 11], [12], [13, 14, 15, 16, 17]]


def _model(n_labels=7, **kw):
    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=40, n_labels=n_labels, embed_dim=8, radius=2, hidden_dim=16, code_attention=True, **kw)
    model = LEAM(cfg).eval()
    with torch.no_grad():
        model.phrase_b.copy_(torch.linspace(-0.3, 0.2, n_labels))   # some codes' u clipped at 0 by the ReLU
        model.attend_rho.copy_(torch.linspace(-1.0, 3.0, n_labels))  # every code its own sharpness
        if kw.get("code_evidence", True):
            model.evidence_rho.copy_(torch.linspace(-2.0, 1.0, n_labels))
    return model


def _plain(model, ids, mask):
    """The logits written out from the paper's G: u, each code's softmax over positions, z_k, f(z_k)_k, + a_k e_k
    (e_k: the window of W1 detached, which the evidence reads but does not train)."""
    V = F.embedding(ids, model.word_emb.weight, padding_idx=0)
    C = model.label_emb
    G = _cosine(V, C / C.norm(dim=-1, keepdim=True), mask)
    W = _window(G, model.phrase_w)                                                     # [B, L, K]
    t = F.softplus(model.attend_rho)
    alpha = torch.softmax((F.relu(W + model.phrase_b) * t).masked_fill(~mask.unsqueeze(-1), float("-inf")), dim=1)
    z = torch.einsum("blk,blp->bkp", alpha, V)                                         # each code's note vector
    h = F.relu(model.head[1](z))
    logits = torch.einsum("bkh,kh->bk", h, model.head[4].weight) + model.head[4].bias
    if model.config.code_evidence:
        Wd = _window(G, model.phrase_w.detach())
        logits = logits + model.evidence_weight() * Wd.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
    return logits


@pytest.mark.parametrize("evidence", [True, False])
@pytest.mark.parametrize("n_labels", [5, 23])                          # few codes (K <= P = 8), many codes (K > P)
def test_every_order_computes_each_codes_own_attention(n_labels, evidence):
    model = _model(n_labels, code_evidence=evidence)
    ids, mask = pad_batch(NOTES)
    want = _plain(model, ids, mask)
    table = model.word_code_table()
    for kw in ({}, {"order": "plain"}, {"order": "many codes"}, {"order": "table", "table": table},
               {"return_attention": True}):
        torch.testing.assert_close(model(ids, mask, **kw).logits, want, rtol=1e-5, atol=1e-6, msg=str(kw))
    # not the note's one attention: the same model read by LEAM's head on z differs
    assert not torch.allclose(model.head(model(ids, mask, return_attention=True).doc), want, atol=1e-3)


@pytest.mark.parametrize("evidence", [True, False])
def test_training_gets_the_plain_expressions_gradients(evidence):
    """The training path (evidence at each code's best position, one window for the attention and the evidence) gives
    every weight the plain expression's gradient."""
    ids, mask = pad_batch(NOTES)
    weights = torch.linspace(-1, 1, 23)
    grads = []
    for fn in (lambda m: _plain(m, ids, mask), lambda m: m(ids, mask).logits):
        model = _model(23, code_evidence=evidence)
        (fn(model) * weights).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and "phrase_w" in grads[0]
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_blocks_of_codes_change_neither_logits_nor_gradients(monkeypatch):
    """Codes go by blocks, each recomputed in the backward pass (checkpointed): the same values and gradients as one
    block of every code, down to a block of one code."""
    ids, mask = pad_batch(NOTES)
    runs = []
    for cells in (1 << 22, 40, 1):
        monkeypatch.setattr(clinicode.models.leam.memory, "CODE_CELLS", cells)
        model = _model(23)
        logits = model(ids, mask).logits
        (logits * torch.linspace(-1, 1, 23)).sum().backward()
        runs.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    for logits, grads in runs[1:]:
        torch.testing.assert_close(logits, runs[0][0], rtol=1e-5, atol=1e-6)
        for name, g in grads.items():
            torch.testing.assert_close(g, runs[0][1][name], rtol=1e-4, atol=1e-6, msg=name)
    grads = runs[0][1]
    assert grads["attend_rho"].abs().sum() > 0 and grads["label_emb"].abs().sum() > 0
    assert grads["phrase_w"].abs().sum() > 0                                  # the attention trains the window


def test_the_evidence_still_does_not_train_the_window():
    """As without code attention: e_k reads W1 detached, so with the attention's own part at 0 W1 gets no gradient."""
    model = _model(23).train()
    model.config = LEAMConfig(**{**model.config.__dict__, "dropout": 0.0})
    ids, mask = pad_batch(NOTES)
    with torch.no_grad():
        model.head[4].weight.zero_()                      # f(z_k)_k = b_k: only the evidence term depends on W1
    model(ids, mask).logits.sum().backward()
    assert model.phrase_w.grad.abs().max() == 0 and model.evidence_rho.grad.abs().sum() > 0


def test_its_weights_are_declared_and_off_is_the_model_without_it():
    cfg = LEAMConfig(vocab_size=40, n_labels=7, embed_dim=8, radius=2, hidden_dim=16, code_attention=True)
    assert {k: tuple(v.shape) for k, v in LEAM(cfg).state_dict().items()} == leam_weight_shapes(cfg)
    assert leam_weight_shapes(cfg)["attend_rho"] == (7,)
    off = LEAMConfig(vocab_size=40, n_labels=7, embed_dim=8, radius=2, hidden_dim=16)
    assert "attend_rho" not in leam_weight_shapes(off) and not off.code_attention


def test_the_memory_plan_counts_its_blocks():
    mb = 4 / (1 << 20)
    for K, training in ((50, True), (9000, True), (9000, False)):
        a = plan(LEAMConfig(vocab_size=50_000, n_labels=K), batch_size=16, max_len=2500, budget_mb=8192,
                 training=training)
        b = plan(LEAMConfig(vocab_size=50_000, n_labels=K, code_attention=True), batch_size=16, max_len=2500,
                 budget_mb=8192, training=training)
        cells = min(K * 16 * 2500, clinicode.models.leam.memory.CODE_CELLS)
        assert b.batch_mb - a.batch_mb >= 4 * cells * mb
        assert b.batch_mb - a.batch_mb < 12 * (1 << 22) * mb + 4 * 16 * 2500 * 100 * mb   # one block, whatever K is


def test_scoring_builds_no_table_it_would_not_read():
    """At inference with few codes LEAM gathers G from a [V, K] table; code attention's logits never read it."""
    for attention in (False, True):
        cfg = LEAMConfig(vocab_size=5_000, n_labels=50, code_attention=attention)
        p = plan(cfg, batch_size=64, max_len=2500, budget_mb=2048, training=False)
        assert (p.order == "table") == (p.table_mb > 0) == (not attention)


def test_a_block_bounds_both_its_position_and_its_hidden_tensors():
    from clinicode.models.leam.memory import CODE_CELLS, code_block

    assert code_block(50, batch=16, length=100, hidden=1000) == 50           # all at once when they fit
    for B, L, H in ((64, 300, 1000), (16, 2500, 1000), (16, 10, 5000)):
        n = code_block(9000, batch=B, length=L, hidden=H)
        assert B * L * n <= CODE_CELLS and B * H * n <= CODE_CELLS and n >= 1
    assert code_block(9000, batch=1 << 20, length=1 << 20, hidden=1) == 1    # one code at least


def test_train_takes_it_saves_it_and_the_checkpoint_scores_with_it(tmp_path):
    data = tmp_path / "cues"
    data.mkdir()
    cues = [("fever cough", "A"), ("rash itch", "B"), ("knee pain", "C")]
    for split in ("train", "dev", "test"):
        rows = [{"id": f"{split}{i}", "text": f"{cues[i % 3][0]} note {i}", "labels": [cues[i % 3][1]]}
                for i in range(12)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "leam", "--embed-dim", "8",
              "--hidden-dim", "16", "--model-option", "code_attention=true", "--epochs", "3", "--min-doc-freq", "1",
              "--w2v-epochs", "1", "--seed", "3", "--no-progress"])
    saved = json.loads((tmp_path / "run" / "checkpoint" / "model_config.json").read_text())
    assert saved["code_attention"] is True
    ck = load_checkpoint(tmp_path / "run")
    assert ck.model.config.code_attention and hasattr(ck.model, "attend_rho")
    predictor = Predictor(ck)
    assert predictor.card()["model_config"]["code_attention"] is True
    scores = predictor.predict(["fever cough today", "knee pain again"], threshold=0.0)
    assert len(scores) == 2


@pytest.mark.gpu
def test_cuda_computes_the_same_code_attention():
    """The same code on CUDA (its "many codes" order), values and gradients, against the CPU."""
    cpu = _model(23)
    gpu = _model(23).cuda()
    ids, mask = pad_batch(NOTES)
    want = cpu(ids, mask).logits
    want.sum().backward()
    got = gpu(ids.cuda(), mask.cuda()).logits
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(gpu.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_the_paper_has_none_and_a_run_with_it_is_named_so(tmp_path):
    from clinicode.models.leam.kind import KIND
    from clinicode.models.leam.options import is_paper_model

    assert not is_paper_model({"code_evidence": False, "window_nonneg": False, "code_attention": True})
    assert is_paper_model({"code_evidence": False, "window_nonneg": False})         # a config from before it
    assert KIND.display_name({"code_attention": True, "code_evidence": True}) == "LEAM, attention per code + evidence"
    fails(["train", "--data", tmp_path, "--out", tmp_path / "run", "--paper", "--model-option", "code_attention=true"],
          "give one of --paper or --model-option code_attention")
    assert not (tmp_path / "run").exists()


def test_explanations_compute_the_evidence_once(monkeypatch):
    """Asked for its attention, a code-attention model runs the note's path for beta and z; its logits' evidence is
    code_logits' own, so that path computes no second e (its kernels would raise here)."""
    import clinicode.models.leam.kernels as kernels

    model = _model(23)
    ids, mask = pad_batch(NOTES)
    want = model(ids, mask).logits

    def refuse(*_a, **_k):
        raise AssertionError("the note's path computed code evidence")

    for name in ("code_max_evidence", "phrase_max_evidence", "table_phrase_max"):
        monkeypatch.setattr(kernels, name, refuse)
    for order in ("many codes", "few codes", "plain"):
        out = model(ids, mask, return_attention=True, order=order)
        torch.testing.assert_close(out.logits, want, rtol=1e-5, atol=1e-6)
        assert out.beta is not None and out.doc is not None


@pytest.mark.parametrize("evidence", [True, False])
def test_scoring_in_place_gives_the_training_paths_values(evidence):
    """Without gradients (dev scoring, predict) a block changes its [B, L, n] buffer in place: the same logits as the
    path that keeps every tensor, and as the plain expressions. Code 0 points away from the one-word note's word, so
    its evidence there is below 0, the window's value on padding far from the word: the max must skip padding."""
    model = _model(23, code_evidence=evidence)
    with torch.no_grad():
        model.label_emb[0] = -model.word_emb.weight[12]
    ids, mask = pad_batch(NOTES)
    kept = model(ids, mask).logits
    with torch.no_grad():
        in_place = model(ids, mask).logits
    torch.testing.assert_close(in_place, kept.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(in_place, _plain(model, ids, mask).detach(), rtol=1e-5, atol=1e-6)
