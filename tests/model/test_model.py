"""LEAM model: shapes, masking, the paper's equations, and that it can learn."""

import pytest
import torch

from clinicode.batching import pad_batch
from clinicode.errors import ConfigError
from clinicode.models.leam.memory import order
from clinicode.models.leam.model import LEAM
from clinicode.models.leam.options import (  # these tests pin the paper's model (the default adds code evidence)
    PAPER_MODEL,
    LEAMConfig,
)


def _model(**kw):
    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=30, n_labels=4, embed_dim=8, radius=2, hidden_dim=16, **{**PAPER_MODEL, **kw})
    return LEAM(cfg).eval()


def test_output_shapes_and_attention():
    model = _model()
    ids, mask = pad_batch([[2, 3, 4, 5, 6], [7, 8]])
    out = model(ids, mask, return_attention=True)
    u = model.phrase(ids, mask)
    assert out.logits.shape == (2, 4)
    assert out.beta.shape == (2, 5) and u.shape == (2, 4, 5) and out.doc.shape == (2, 8)
    torch.testing.assert_close(out.beta.sum(-1), torch.ones(2))
    assert torch.all(out.beta[1, 2:] == 0), "padding must get zero attention"
    assert torch.all(u >= 0), "u is a ReLU output"
    torch.testing.assert_close(model.phrase(ids, mask, torch.tensor([3, 1])), u[:, [3, 1]])


def test_padding_does_not_change_logits():
    model = _model()
    seq = [5, 9, 11, 3, 2, 7]
    a_ids, a_mask = pad_batch([seq])
    b_ids, b_mask = pad_batch([seq, list(range(2, 22))])  # padded to 20
    a = model(a_ids, a_mask).logits[0]
    b = model(b_ids, b_mask).logits[0]
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_cosine_compatibility_matches_definition():
    model = _model(compat="linear")  # the ablation's u is G itself
    ids, mask = pad_batch([[2, 3, 4]])
    G = model.phrase(ids, mask)                                          # [B, K, L]
    c, v = model.label_emb[1], model.word_emb(ids)[0, 2]
    torch.testing.assert_close(G[0, 1, 2], torch.dot(c, v) / (c.norm() * v.norm()), rtol=1e-5, atol=1e-6)


def test_attention_is_masked_softmax_of_max_over_labels():
    model = _model()
    ids, mask = pad_batch([[2, 3, 4, 5], [6]])
    out = model(ids, mask, return_attention=True)
    m = model.phrase(ids, mask)[0].amax(dim=0)
    torch.testing.assert_close(out.beta[0], torch.softmax(m, dim=0))
    z = (out.beta[0].unsqueeze(-1) * model.word_emb(ids)[0]).sum(0)
    torch.testing.assert_close(out.doc[0], z)


def test_window_spans_2r_plus_1_tokens():
    """u at position l sees G only at l-r..l+r: change one word and only the 2r+1 positions around it move."""
    model = _model()
    a_ids, mask = pad_batch([[2, 3, 4, 5, 6, 7, 8, 9, 10, 11]])
    b_ids = a_ids.clone()
    b_ids[0, 6] = 20
    ua = model.phrase(a_ids, mask)[0]
    ub = model.phrase(b_ids, mask)[0]
    moved = (ua - ub).abs().amax(dim=0) > 0                              # [L]
    r = model.config.radius
    assert moved.nonzero().flatten().tolist() == list(range(6 - r, 6 + r + 1))


def test_empty_note_is_defined():
    model = _model()
    ids, mask = pad_batch([[]])
    out = model(ids, mask)
    assert torch.isfinite(out.logits).all()


def test_label_regulariser_adds_to_loss():
    model = _model()
    logits = torch.zeros(2, 4)
    y = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
    total, task = model.loss(logits, y)
    assert total > task
    model0 = _model(label_reg_weight=0.0)
    total0, task0 = model0.loss(logits, y)
    assert total0 == task0


@pytest.mark.parametrize("multilabel", [True, False])
def test_tiny_batch_overfits(multilabel):
    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=40, n_labels=3, embed_dim=16, radius=1, hidden_dim=32, dropout=0.0,
                     multilabel=multilabel, **PAPER_MODEL)
    model = LEAM(cfg)
    ids, mask = pad_batch([[2, 3, 4], [5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15]])
    y = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 0, 0]])
    if multilabel:
        y[1, 2] = 1.0
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(150):
        total, _ = model.loss(model(ids, mask).logits, y)
        opt.zero_grad()
        total.backward()
        opt.step()
    probs = model.probabilities(model.eval()(ids, mask).logits)
    if multilabel:
        assert ((probs > 0.5).float() == y).all()
    else:
        assert (probs.argmax(-1) == y.argmax(-1)).all()


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError, match="compat must be 'cosine' or 'linear'"):
        LEAMConfig(vocab_size=10, n_labels=2, compat="dot")
    with pytest.raises(ConfigError, match="radius"):
        LEAMConfig(vocab_size=10, n_labels=2, radius=-1)


def _pair(n_labels=5, **kw):
    """The same weights twice: the fast paths, and the plain PyTorch reference (LEAM(fast=False))."""
    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=40, n_labels=n_labels, embed_dim=8, radius=2, hidden_dim=16, **{**PAPER_MODEL, **kw})
    fast = LEAM(cfg).eval()
    ref = LEAM(cfg, fast=False).eval()
    ref.load_state_dict(fast.state_dict())
    return fast, ref


@pytest.mark.parametrize("n_labels", [5, 23])                          # few codes (K <= P = 8), many codes (K > P)
@pytest.mark.parametrize("compat", ["cosine", "linear"])
def test_every_fast_path_equals_the_plain_forward(compat, n_labels):
    """The kernels, the window on the word vectors with scores by blocks, and the stored word-code table all compute
    the reference forward."""
    fast, ref = _pair(n_labels, compat=compat)
    assert order(fast.config) == ("few codes" if n_labels <= 8 and compat == "cosine" else "many codes")
    ids, mask = pad_batch([[2, 3, 4, 5, 6, 7, 8, 30, 31], [9, 10, 11], [12]])
    want = ref(ids, mask, return_attention=True)
    table = fast.word_code_table()
    for model, kw in ((fast, {}), (fast, {"block": (4, 3)}), (fast, {"table": table}), (ref, {"table": table})):
        got = model(ids, mask, return_attention=True, **kw)
        for name in ("logits", "beta", "doc"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(model(ids, mask, **kw).logits, want.logits, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_labels", [5, 23])
def test_the_fast_backward_equals_the_plain_one(n_labels):
    """Every parameter's gradient, padding included, in float64: few codes (G kernels), many codes (code_max)."""
    fast, ref = _pair(n_labels, dropout=0.0)
    fast, ref = fast.double().train(), ref.double().train()
    ids, mask = pad_batch([[2, 3, 4, 5, 6, 7, 8, 30, 31, 2, 2], [9, 10, 11], [12, 13, 14, 15, 16]])
    y = (torch.rand(3, n_labels, generator=torch.Generator().manual_seed(1)) < 0.3).double()
    for model in (fast, ref):
        torch.manual_seed(5)                                             # the regulariser's draw of codes, if any
        model.loss(model(ids, mask, block=(4, 3)).logits, y)[0].backward()
    for (name, a), b in zip(fast.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12, msg=name)


def test_word_code_table_is_the_cosine_of_every_word_and_code():
    model = _model()
    table = model.word_code_table()
    E, C = model.word_emb.weight, model.label_emb
    assert table.shape == (30, 4) and (table[0] == 0).all()
    torch.testing.assert_close(table[7, 2], torch.dot(E[7], C[2]) / (E[7].norm() * C[2].norm()))


@pytest.mark.parametrize("n_labels,embed_dim", [(50, 100), (1000, 16)])   # few codes (K <= P) and many codes
def test_training_with_the_fast_kernels_follows_the_reference_loss_curve(n_labels, embed_dim):
    """Same init, data and AdamW steps: the fast paths must give the plain model's losses step by step, at K = 50
    (G and the fused window) and at K = 1,000 (the window on the word vectors, codes by blocks, the regulariser
    averaged over 256 random codes, drawn identically for both)."""
    from clinicode.config import TrainConfig
    from clinicode.train import make_optimizer

    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=200, n_labels=n_labels, embed_dim=embed_dim, radius=3, hidden_dim=16, dropout=0.0,
                     **PAPER_MODEL)
    fast, ref = LEAM(cfg), LEAM(cfg, fast=False)
    assert order(fast.config) == ("many codes" if n_labels > embed_dim else "few codes")
    ref.load_state_dict(fast.state_dict())
    lengths = [70, 45, 33, 64, 12, 70]                                 # padding and block edges (32 rows) included
    ids, mask = pad_batch([torch.randint(1, 200, (n,)).tolist() for n in lengths])
    y = (torch.rand(len(lengths), n_labels) < 0.3).float()
    curves: dict = {"fast": [], "ref": []}
    for name, model in (("fast", fast), ("ref", ref)):
        torch.manual_seed(1)
        opt = make_optimizer(model, TrainConfig(lr=1e-2))
        for _ in range(25):
            loss, task = model.loss(model(ids, mask, block=(100, 300)).logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            curves[name].append((loss.item(), task.item()))
    assert curves["fast"][-1][1] < 0.8 * curves["fast"][0][1]          # it learns
    torch.testing.assert_close(torch.tensor(curves["fast"]), torch.tensor(curves["ref"]), rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(fast.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=name)


def test_label_regulariser_averages_over_random_codes_beyond_label_reg_codes():
    """K > label_reg_codes: each step scores that many random codes against all K; the mean over draws is the full
    regulariser (an unbiased estimate)."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=10, n_labels=40, embed_dim=4, hidden_dim=8, label_reg_codes=8, dropout=0.0,
                     **PAPER_MODEL)
    model = LEAM(cfg)
    logits, y = torch.zeros(1, 40), torch.zeros(1, 40)
    full = F.cross_entropy(model.head(model.label_emb), torch.arange(40)).item()
    draws = [(model.loss(logits, y)[0] - model.loss(logits, y)[1]).item() for _ in range(400)]
    assert len(set(round(d, 6) for d in draws)) > 10                  # it samples
    assert abs(sum(draws) / len(draws) - full) < 0.02 * full
    exact = LEAM(LEAMConfig(vocab_size=10, n_labels=40, embed_dim=4, hidden_dim=8, label_reg_codes=40, dropout=0.0,
                            **PAPER_MODEL))
    exact.load_state_dict(model.state_dict())
    assert abs((exact.loss(logits, y)[0] - exact.loss(logits, y)[1]).item() - full) < 1e-6


@pytest.mark.parametrize("compat", ["cosine", "linear"])
def test_phrase_anchors_are_each_windows_strongest_real_token(compat):
    """The explanation's anchor of u[k, l]: the token l' of the window l-r..l+r inside the note with the largest
    W1[l' - l + r] * G[l', k] (first on ties), written out position by position; negative taps included."""
    from clinicode.batching import pad_batch
    from clinicode.models.leam.model import LEAM, _cosine
    from clinicode.models.leam.options import LEAMConfig

    torch.manual_seed(21)
    model = LEAM(LEAMConfig(vocab_size=30, n_labels=6, embed_dim=8, radius=2, hidden_dim=8, compat=compat)).eval()
    with torch.no_grad():
        model.phrase_w.copy_(torch.tensor([0.5, -1.0, 0.9, 0.2, -0.3]))
    ids, mask = pad_batch([[3, 4, 5, 6, 7, 8, 9], [10, 11, 12]])
    codes = torch.tensor([4, 1])
    u, anchor = model.phrase(ids, mask, codes, anchors=True)
    torch.testing.assert_close(u, model.phrase(ids, mask, codes))
    C = model.label_emb[codes]
    G = _cosine(model.word_emb(ids), C / C.norm(dim=-1, keepdim=True), mask).detach()   # [B, L, n]
    r = 2 if compat == "cosine" else 0
    for b, n_tok in enumerate(mask.sum(1).tolist()):
        for k in range(len(codes)):
            for centre in range(n_tok):
                lo, hi = max(0, centre - r), min(n_tok - 1, centre + r)
                w = model.phrase_w.detach()[lo - centre + r: hi - centre + r + 1] if r else torch.ones(1)
                want = lo + int(torch.argmax(w * G[b, lo:hi + 1, k]))
                assert anchor[b, k, centre] == want, (b, k, centre)
