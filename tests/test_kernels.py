"""The CPU phrase-window kernel equals a depthwise convolution, forward and backward."""

import pytest
import torch
import torch.nn.functional as F

from clinicode.kernels import phrase_window


@pytest.mark.parametrize("B,L,K,r", [(1, 1, 1, 0), (3, 7, 5, 2), (9, 40, 6, 10), (2, 5, 3, 4)])
def test_phrase_window_matches_depthwise_conv(B, L, K, r):
    torch.manual_seed(0)
    G = torch.randn(B, L, K, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * r + 1, dtype=torch.float64, requires_grad=True)
    ref = F.conv1d(G.transpose(1, 2), w.view(1, 1, -1).expand(K, 1, -1), padding=r, groups=K).transpose(1, 2)
    out = phrase_window(G, w)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    a = torch.autograd.grad(ref, (G, w), grad)
    b = torch.autograd.grad(out, (G, w), grad)
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])


def test_gradcheck():
    torch.manual_seed(1)
    G = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(phrase_window, (G, w))
