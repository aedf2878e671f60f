"""CPU-friendly kernels for LEAM's phrase step; same mathematics as a depthwise convolution, tested against it.

The phrase window u[b, l, k] = sum_j w[j] * G[b, l + j - r, k] (zero padding) is a convolution with one weight
vector shared by all K codes. PyTorch's 1-channel or depthwise convolutions run it at ~1 GFLOP/s on CPU; here
it is 2r+1 shifted multiply-adds over [B, L, K] (codes contiguous), a few notes at a time so the working set
stays in cache, with a hand-written backward pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_NOTES_PER_PASS = 4


class _PhraseWindow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, G: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        B, L, K = G.shape
        n = w.numel()
        r = n // 2
        wl = w.detach().tolist()
        Gp = F.pad(G, (0, 0, r, r))                                   # [B, L+2r, K]
        out = torch.empty_like(G)                                     # [B, L, K]
        for s in range(0, B, _NOTES_PER_PASS):
            g, o = Gp[s:s + _NOTES_PER_PASS], out[s:s + _NOTES_PER_PASS]
            torch.mul(g[:, 0:L], wl[0], out=o)
            for j in range(1, n):
                o.add_(g[:, j:j + L], alpha=wl[j])
        ctx.save_for_backward(Gp, w)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        Gp, w = ctx.saved_tensors
        grad = grad.contiguous()
        B, L, K = grad.shape
        n = w.numel()
        r = n // 2
        wl = w.detach().tolist()
        grad_G = grad_w = None
        if ctx.needs_input_grad[0]:
            gp = F.pad(grad, (0, 0, r, r))                            # [B, L+2r, K]
            grad_G = torch.empty_like(grad)
            for s in range(0, B, _NOTES_PER_PASS):
                g, o = gp[s:s + _NOTES_PER_PASS], grad_G[s:s + _NOTES_PER_PASS]
                torch.mul(g[:, 2 * r:2 * r + L], wl[0], out=o)        # dG[l] = sum_j w[j] grad[l - j + r]
                for j in range(1, n):
                    o.add_(g[:, 2 * r - j:2 * r - j + L], alpha=wl[j])
        if ctx.needs_input_grad[1]:
            acc = torch.zeros(n, dtype=torch.float64)
            for b in range(B):                                        # dw[j] = sum grad * G shifted by j
                windows = Gp[b].as_strided((n, L * K), (K, 1))        # [n, L*K] row j = Gp[b, j:j+L] (a view)
                acc += (windows @ grad[b].reshape(-1)).double()       # [n]
            grad_w = acc.to(w.dtype)
        return grad_G, grad_w


def phrase_window(G: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sum_j w[j] * G[:, l + j - r, :] with zero padding ("same" length).

    Args:
        G: [B, L, K] compatibility (codes last).
        w: [2r+1] window weights shared by all codes.
    Returns:
        [B, L, K]. On CUDA (or without CPU-friendly shapes) a depthwise convolution computes the same thing.
    """
    if G.device.type != "cpu" or G.dtype not in (torch.float32, torch.float64):
        K = G.shape[-1]
        r = w.numel() // 2
        u = F.conv1d(G.transpose(1, 2), w.view(1, 1, -1).expand(K, 1, -1), padding=r, groups=K)  # [B, K, L]
        return u.transpose(1, 2)                                                                # [B, L, K]
    return _PhraseWindow.apply(G.contiguous(), w)
