"""The CPU kernels compute the model's plain expressions (`clinicode.models.leam.model._cosine`, `_window`,
F.embedding), forward and backward, and pass gradcheck. Whole-model checks of the same are in
tests/model/test_model.py."""

import pytest
import torch
import torch.nn.functional as F

from clinicode.models.leam import kernels
from clinicode.models.leam.kernels import (
    _shifted_sum,
    best_dot,
    code_max,
    code_max_evidence,
    cosine_compat,
    embed,
    phrase_max,
    phrase_max_evidence,
    phrase_window,
    phrase_window_pair,
    table_phrase_max,
)
from clinicode.models.leam.model import _cosine, _window


@pytest.fixture(autouse=True, params=["banded", "shifted"])
def window_way(request, monkeypatch):
    """Every kernel test runs with the window as banded matmuls and as shifted passes (`_shifted_sum` picks one by the
    number of codes; these tests' few codes would otherwise see only the passes)."""
    monkeypatch.setattr(kernels, "_BAND_MIN_CODES", 1 if request.param == "banded" else 1 << 30)
    return request.param


def _grads(out: torch.Tensor, inputs, grad: torch.Tensor, **kw):
    return torch.autograd.grad(out, inputs, grad, **kw)


@pytest.mark.parametrize("B,L,K,r", [(1, 1, 1, 0), (3, 7, 5, 2), (9, 40, 6, 10), (2, 5, 3, 4), (2, 64, 3, 16),
                                     (2, 95, 4, 1), (1, 32, 2, 0)])
def test_phrase_window_matches_the_plain_window(B, L, K, r):
    torch.manual_seed(0)
    G = torch.randn(B, L, K, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * r + 1, dtype=torch.float64, requires_grad=True)
    ref, out = _window(G, w), phrase_window(G, w)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    for a, b in zip(_grads(ref, (G, w), grad), _grads(out, (G, w), grad)):
        torch.testing.assert_close(a, b)


def test_the_banded_window_reads_any_strides():
    """The window reads its blocks as strided views: a source whose codes are not contiguous gives the same sum."""
    torch.manual_seed(4)
    wide = torch.randn(3, 70 + 6, 10, dtype=torch.float64)
    src = wide[:, :, ::2]                                            # [3, 76, 5], codes two apart
    w = torch.randn(7, dtype=torch.float64)
    out = _shifted_sum(src, w.tolist(), 70, torch.empty(3, 70, 5, dtype=torch.float64))
    ref = sum(w[j] * src[:, j:j + 70] for j in range(7))
    torch.testing.assert_close(out, ref)


def test_window_pair_is_two_windows_the_second_with_its_weights_fixed():
    """phrase_window_pair makes one window; the second result's gradient reaches G only, as a window of w.detach()."""
    torch.manual_seed(5)
    G = torch.randn(3, 45, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, dtype=torch.float64, requires_grad=True)
    g1, g2 = torch.randn(3, 45, 6, dtype=torch.float64), torch.randn(3, 45, 6, dtype=torch.float64)
    S, Sd = phrase_window_pair(G, w)
    ref = (_window(G, w) * g1).sum() + (_window(G, w.detach()) * g2).sum()
    torch.testing.assert_close(Sd, S)
    for a, b in zip(torch.autograd.grad(ref, (G, w)), torch.autograd.grad((S * g1).sum() + (Sd * g2).sum(), (G, w))):
        torch.testing.assert_close(a, b)
    G1 = G[:1, :9].detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda G: phrase_window_pair(G, w)[1], (G1,))  # in G; in w it is 0 on purpose


def test_gradcheck():
    torch.manual_seed(1)
    G = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(phrase_window, (G, w))


@pytest.mark.parametrize("B,L,K,r", [(2, 33, 4, 3), (1, 64, 2, 16), (3, 95, 7, 1)])
def test_window_weight_gradient_across_block_edges(B, L, K, r):
    """dw is computed in 32-row blocks: note lengths on, below and above a block edge give the plain gradient."""
    torch.manual_seed(2)
    G = torch.randn(B, L, K, dtype=torch.float64)
    w = torch.randn(2 * r + 1, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(B, L, K, dtype=torch.float64)
    torch.testing.assert_close(_grads(_window(G, w), w, grad)[0], _grads(phrase_window(G, w), w, grad)[0])


def test_cosine_compat_matches_autograd_of_the_plain_expression():
    torch.manual_seed(3)
    words = torch.randn(3, 11, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 11) > 0.3
    with torch.no_grad():
        words[0, 2] = 0                                   # a zero vector: the norm's gradient must stay finite
    mask[0, 2] = True
    labels_n = labels / labels.norm(dim=-1, keepdim=True)
    out, ref = cosine_compat(words, labels_n, mask), _cosine(words, labels_n, mask)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    a = _grads(ref, (words, labels), grad, retain_graph=True)   # labels_n's graph is shared
    b = _grads(out, (words, labels), grad)
    assert torch.isfinite(b[0]).all()
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    assert (b[0][~mask] == 0).all()                       # padding gets no gradient


def test_cosine_compat_gradcheck():
    torch.manual_seed(4)
    words = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    labels_n = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda v, c: cosine_compat(v, c, mask), (words, labels_n))


def test_embed_matches_nn_embedding_with_padding_row():
    torch.manual_seed(5)
    weight = torch.randn(30, 4, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 30, (3, 17))
    ids[0, :3] = 0                                        # PAD, and repeated ids, must be handled like nn.Embedding
    ids[1, :5] = 7
    grad = torch.randn(3, 17, 4, dtype=torch.float64)
    ref = F.embedding(ids, weight, padding_idx=0)
    out = embed(weight, ids, padding_idx=0)
    torch.testing.assert_close(out, ref)
    (a,) = _grads(ref, weight, grad)
    (b,) = _grads(out, weight, grad)
    torch.testing.assert_close(a, b)
    assert (b[0] == 0).all()
    real = ids.clamp_min(1)                               # PAD's zeroed gradient is a convention, not a derivative
    assert torch.autograd.gradcheck(lambda w: embed(w, real, 0), (weight,))


def test_keep_freed_memory_takes_effect_on_glibc():
    """Run in a child so the test process keeps its allocator settings."""
    import platform
    import subprocess
    import sys

    code = ("from clinicode.runtime import keep_freed_memory; import torch; ok = keep_freed_memory(); "
            "torch.ones(10**7).sum(); print(ok)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert out == str(glibc)


@pytest.mark.parametrize("B,L,K,r", [(1, 1, 1, 0), (5, 13, 4, 2), (9, 40, 6, 10)])
def test_phrase_max_matches_relu_window_amax(B, L, K, r):
    torch.manual_seed(6)
    G = torch.randn(B, L, K, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * r + 1, dtype=torch.float64, requires_grad=True)
    b = torch.randn(K, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        b[0] = -50.0 if K > 1 else b[0]                   # a code that is never the best
        G[0, 0] = -10.0                                   # a position whose best score is 0 after ReLU (no gradient)
    ref = F.relu(_window(G, w) + b).amax(2)
    out = phrase_max(G, w, b)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    for x, y in zip(_grads(ref, (G, w, b), grad), _grads(out, (G, w, b), grad)):
        torch.testing.assert_close(x, y)


def test_phrase_max_gradcheck():
    torch.manual_seed(7)
    G = torch.randn(3, 9, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(phrase_max, (G, w, b))


@pytest.mark.parametrize("B,L,K,r", [(1, 1, 1, 0), (6, 17, 5, 3), (2, 9, 3, 0)])
def test_table_phrase_max_equals_the_window_over_gathered_rows(B, L, K, r):
    torch.manual_seed(8)
    table = torch.randn(20, K)
    table[0] = 0.0                                        # PAD: the window's zero padding
    ids = torch.randint(1, 20, (B, L))
    ids[0, L // 2:] = 0                                   # a padded note
    w, b = torch.randn(2 * r + 1), torch.randn(K)
    u_ref = F.relu(_window(F.embedding(ids, table), w) + b)
    torch.testing.assert_close(table_phrase_max(ids, table, w, b), u_ref.amax(-1))


@pytest.mark.parametrize("N,K,P,block", [(1, 1, 3, (256, 2048)), (37, 50, 8, (5, 7)), (200, 1000, 6, (64, 128)),
                                         (9, 13, 4, (9, 13)), (30, 20, 5, (1, 1))])
@pytest.mark.parametrize("relu,bias", [(True, True), (False, False)])
def test_code_max_matches_the_max_over_every_score(N, K, P, block, relu, bias):
    """Scores by blocks of rows and codes (block edges inside and at the ends), backward through the winners only."""
    torch.manual_seed(9)
    S = torch.randn(N, P, dtype=torch.float64, requires_grad=True)
    C = torch.randn(K, P, dtype=torch.float64, requires_grad=True)
    b = torch.randn(K, dtype=torch.float64, requires_grad=True) if bias else None
    with torch.no_grad():
        S[0] = -S[0].abs() if relu else S[0]
        if relu and K > 1:
            C[:] = C.abs()                                # row 0 scores below 0 everywhere: no gradient after ReLU
            b[:] = -b.abs()
    full = S @ C.T + (b if bias else 0)
    ref = (F.relu(full) if relu else full).amax(1)
    out = code_max(S, C, b, relu=relu, block=block)
    torch.testing.assert_close(out, ref)
    if relu and K > 1:
        assert out[0] == 0
    grad = torch.randn_like(ref)
    inputs = (S, C, b) if bias else (S, C)
    for x, y in zip(_grads(ref, inputs, grad), _grads(out, inputs, grad)):
        torch.testing.assert_close(x, y)


def test_code_max_gradcheck_and_ties_go_to_the_first_code():
    torch.manual_seed(10)
    S = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    C = torch.randn(11, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s, c, bb: code_max(s, c, bb, block=(3, 4)), (S, C, b))
    C2 = torch.cat([C[:5], C[:5]]).detach().requires_grad_()  # codes 5..9 repeat 0..4 in another block
    b2 = torch.cat([b[:5], b[:5]]).detach().requires_grad_()
    code_max(S, C2, b2, block=(7, 5)).sum().backward()
    assert (b2.grad[5:] == 0).all() and b2.grad[:5].sum() > 0


def test_code_max_keeps_float32_under_autocast():
    S, C = torch.randn(6, 3), torch.randn(5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = code_max(S, C, torch.zeros(5))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, F.relu(S @ C.T).amax(1))


def _masked_window_max(W, mask):
    return W.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)  # [B, K] each code's best real position


@pytest.mark.parametrize("B,L,K,r", [(1, 1, 1, 0), (5, 13, 4, 2), (9, 40, 6, 10)])
def test_phrase_max_evidence_is_the_window_max_over_positions_from_the_same_pass(B, L, K, r):
    """m as phrase_max (on real positions), e = max over real positions of the window before b1; e's gradient reaches
    G at each code's best position and never w or b1."""
    torch.manual_seed(11)
    G = torch.randn(B, L, K, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * r + 1, dtype=torch.float64, requires_grad=True)
    b = torch.randn(K, dtype=torch.float64, requires_grad=True)
    lengths = torch.randint(1, L + 1, (B,))
    lengths[0] = L
    mask = torch.arange(L)[None, :] < lengths[:, None]
    m, e = phrase_max_evidence(G, w, b, mask)
    m_ref = F.relu(_window(G, w) + b).amax(2)
    e_ref = _masked_window_max(_window(G, w.detach()), mask)
    torch.testing.assert_close(e, e_ref)
    torch.testing.assert_close(m[mask], m_ref[mask])
    assert (m[~mask] == 0).all()
    gm, ge = torch.randn_like(m_ref) * mask, torch.randn_like(e_ref)
    want = _grads((m_ref * gm).sum() + (e_ref * ge).sum(), (G, w, b), torch.tensor(1.0, dtype=torch.float64))
    got = _grads((m * gm).sum() + (e * ge).sum(), (G, w, b), torch.tensor(1.0, dtype=torch.float64))
    for x, y in zip(want, got):
        torch.testing.assert_close(x, y)


def test_phrase_max_evidence_gradcheck():
    torch.manual_seed(12)
    G = torch.randn(3, 9, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    both = lambda g, ww, bb: tuple(phrase_max_evidence(g, ww, bb, mask))  # noqa: E731
    assert torch.autograd.gradcheck(lambda g, bb: both(g, w.detach(), bb), (G, b))
    assert torch.autograd.gradcheck(lambda ww: both(G.detach(), ww, b.detach())[0], (w,))  # e does not train w


@pytest.mark.parametrize("B,L,K,r", [(1, 1, 1, 0), (6, 17, 5, 3), (2, 9, 3, 0)])
def test_table_phrase_max_evidence_is_the_window_max_over_real_positions(B, L, K, r):
    torch.manual_seed(13)
    table = torch.randn(20, K, dtype=torch.float64)
    table[0] = 0.0
    ids = torch.randint(1, 20, (B, L))
    ids[0, L // 2 + 1:] = 0
    mask = ids != 0
    w, b = torch.randn(2 * r + 1, dtype=torch.float64), torch.randn(K, dtype=torch.float64)
    W = _window(F.embedding(ids, table), w)
    m, e = table_phrase_max(ids, table, w, b, evidence=True)
    torch.testing.assert_close(e, _masked_window_max(W, mask))
    torch.testing.assert_close(m[mask], F.relu(W + b).amax(-1)[mask])


@pytest.mark.parametrize("B,L,K,P,block", [(1, 1, 1, 3, (256, 2048)), (4, 11, 50, 8, (5, 7)), (3, 30, 200, 6, (4, 64)),
                                           (2, 9, 13, 4, (9, 13)), (3, 6, 20, 5, (1, 1))])
@pytest.mark.parametrize("relu,bias", [(True, True), (False, False)])
def test_code_max_evidence_finds_each_codes_best_position_in_the_same_blocks(B, L, K, P, block, relu, bias):
    """m as code_max on real rows (0 on padding, no gradient there); best = argmax over each note's real positions of
    S_l . C_k, with row blocks that end inside and at the end of notes; best_dot then equals the plain max with its
    gradient."""
    torch.manual_seed(14)
    S = torch.randn(B, L, P, dtype=torch.float64, requires_grad=True)
    C = torch.randn(K, P, dtype=torch.float64, requires_grad=True)
    b = torch.randn(K, dtype=torch.float64, requires_grad=True) if bias else None
    lengths = torch.randint(1, L + 1, (B,))
    lengths[-1] = L
    mask = torch.arange(L)[None, :] < lengths[:, None]
    full = S @ C.T                                                   # [B, L, K]
    scored = full + (b if bias else 0)
    m_ref = (F.relu(scored) if relu else scored).amax(2)
    m, best = code_max_evidence(S, C, b, mask, relu=relu, block=block)
    torch.testing.assert_close(m[mask], m_ref[mask])
    assert (m[~mask] == 0).all()
    torch.testing.assert_close(best, full.masked_fill(~mask.unsqueeze(-1), float("-inf")).argmax(1))
    e = best_dot(S, C, best)
    e_ref = _masked_window_max(full, mask)
    torch.testing.assert_close(e, e_ref)
    gm, ge = torch.randn_like(m_ref), torch.randn_like(e_ref)        # any gradient on padding must not leak in
    inputs = (S, C, b) if bias else (S, C)
    one = torch.tensor(1.0, dtype=torch.float64)
    want = _grads((m_ref * gm * mask).sum() + (e_ref * ge).sum(), inputs, one)
    got = _grads((m * gm).sum() + (e * ge).sum(), inputs, one)
    for x, y in zip(want, got):
        torch.testing.assert_close(x, y)


def test_best_dot_gradcheck():
    torch.manual_seed(15)
    S = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    C = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    pos = torch.randint(0, 5, (3, 7))
    assert torch.autograd.gradcheck(lambda s, c: best_dot(s, c, pos), (S, C))
