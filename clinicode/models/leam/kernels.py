"""CPU-friendly kernels for LEAM's forward and training step: each computes what a plain PyTorch expression does (tested
against it, with gradcheck) in fewer passes over memory. `memory.order`, beside it, decides which a forward runs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

_NOTES_PER_PASS = 4
_BLOCK = 32          # rows per block in the banded products of the window and of its weights' gradient
_BAND_MIN_CODES = 48  # the window as banded matmuls from this many codes (or word dimensions), shifted passes below
EPS = 1e-8           # the one epsilon of every norm in LEAM: v / (|v| + EPS), here, in `model` and at predict


def _shifted_sum(src: torch.Tensor, weights: list[float], L: int, out: torch.Tensor) -> torch.Tensor:
    """out[:, l] = sum_j weights[j] * src[:, l + j] for l < L: the window over a padded chunk of notes (src has at least
    L + 2r rows a note; out [notes, L, K] contiguous).

    With K >= _BAND_MIN_CODES, each note's rows are cut into blocks of T: block t is band @ src rows [tT, tT+T+2r),
    with band[i, i+j] = weights[j] ([T, T+2r], `_band`), and the blocks are overlapping strided views of src, so one
    matmul a note computes them all without copying. That is (T+2r)/(2r+1) times the multiply-adds of 2r+1 shifted
    passes over memory, at matmul's speed: 2-4x faster on the CPU from 100 codes or word dimensions (round 23 of
    docs/accuracy-tuning.md); with fewer, the passes are as fast. With the weights reversed and src the padded
    output gradient, the same sum is the window's transpose.
    """
    K = src.shape[2]
    if K < _BAND_MIN_CODES:
        torch.mul(src[:, 0:L], weights[0], out=out)
        for j in range(1, len(weights)):
            out.add_(src[:, j:j + L], alpha=weights[j])
        return out
    T, n = _BLOCK, len(weights)
    band = _band(weights, T, src.dtype)
    whole, rest = divmod(L, T)
    for i in range(src.shape[0]):
        note = src[i]
        if whole:
            blocks = note.as_strided((whole, T + n - 1, K), (T * note.stride(0), note.stride(0), note.stride(1)))
            torch.matmul(band, blocks, out=out[i, :whole * T].view(whole, T, K))
        if rest:
            torch.matmul(band[:rest, :rest + n - 1], note[whole * T:whole * T + rest + n - 1], out=out[i, whole * T:L])
    return out


def _band(weights: list[float], T: int, dtype: torch.dtype) -> torch.Tensor:
    """[T, T + 2r] zeros but band[i, i + j] = weights[j] (the j-th diagonal)."""
    n = len(weights)
    band = torch.zeros(T, T + n - 1, dtype=dtype)
    band.as_strided((T, n), (T + n, 1)).copy_(torch.tensor(weights, dtype=dtype).expand(T, n))
    return band


def _transposed_window(gp: torch.Tensor, wl: list[float], L: int) -> torch.Tensor:
    """dG[l] = sum_j w[j] * grad[l - j + r], from grad padded with r zero rows in front (gp[:, r + l] = grad[l])."""
    grad_G = torch.empty(gp.shape[0], L, gp.shape[2], dtype=gp.dtype)
    for s in range(0, gp.shape[0], _NOTES_PER_PASS):
        _shifted_sum(gp[s:s + _NOTES_PER_PASS], wl[::-1], L, grad_G[s:s + _NOTES_PER_PASS])
    return grad_G


def _padded_rows(L: int) -> int:
    """Rows after the left r-padding: L rounded up to whole blocks (so grad_w can view them as blocks)."""
    return -(-L // _BLOCK) * _BLOCK


class _PhraseWindow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, G: torch.Tensor, w: torch.Tensor,  # type: ignore[override]
                pair: bool) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        B, L, K = G.shape
        n = w.numel()
        r = n // 2
        wl = w.detach().tolist()
        Lt = _padded_rows(L)
        Gp = F.pad(G, (0, 0, r, r + Lt - L))                          # [B, Lt+2r, K] zeros around the note
        out = torch.empty_like(G)                                     # [B, L, K]
        for s in range(0, B, _NOTES_PER_PASS):
            _shifted_sum(Gp[s:s + _NOTES_PER_PASS], wl, L, out[s:s + _NOTES_PER_PASS])
        ctx.save_for_backward(Gp, w)
        return (out, out.clone()) if pair else out

    @staticmethod
    def backward(ctx, grad: torch.Tensor, grad_fixed: torch.Tensor | None = None):  # type: ignore[override]
        Gp, w = ctx.saved_tensors
        grad = grad.contiguous()
        B, L, K = grad.shape
        n = w.numel()
        r = n // 2
        wl = w.detach().tolist()
        grad_G = grad_w = None
        Lt = _padded_rows(L)
        gp = F.pad(grad, (0, 0, r, r + Lt - L))                       # [B, Lt+2r, K]
        if ctx.needs_input_grad[0]:   # a pair's second result reads G but not w: its gradient joins here only
            g_in = gp if grad_fixed is None else F.pad(grad + grad_fixed, (0, 0, r, r + Lt - L))
            grad_G = _transposed_window(g_in, wl, L)
        if ctx.needs_input_grad[1]:
            # dw[j] = sum_{l,k} grad[l, k] * Gp[l + j, k]: the j-th diagonal of the band of grad Gp^T. Cut the
            # rows into blocks of T; block t needs grad rows [tT, tT+T) against Gp rows [tT, tT+T+2r), both plain
            # strided views, so one bmm per note gives every block's [T, T+2r] product without copying.
            T, nb = _BLOCK, Lt // _BLOCK
            acc = torch.zeros(T, T + 2 * r, dtype=torch.float64)
            for b in range(B):
                Y = gp[b, r:r + Lt].view(nb, T, K)                                        # [nb, T, K]
                X = Gp[b].as_strided((nb, T + 2 * r, K), (T * K, K, 1))                    # [nb, T+2r, K] overlapping
                acc += torch.bmm(Y, X.transpose(1, 2)).sum(0, dtype=torch.float64)        # [T, T+2r] summed blocks
            grad_w = acc.as_strided((T, n), (T + 2 * r + 1,
                                             1)).sum(0).to(w.dtype)        # [n] dw[j] = sum_t acc[t, t+j]
        return grad_G, grad_w, None


def phrase_window(G: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sum_j w[j] * G[:, l + j - r, :] with zero padding ("same" length).

    A convolution with one weight vector shared by all K codes: PyTorch's 1-channel or depthwise convolutions run it at
    ~1 GFLOP/s on CPU; here it is 2r+1 shifted multiply-adds over [B, L, K] (codes contiguous), a few notes at a time so
    the working set stays in cache. The gradient of w is a banded product computed block by block with `bmm` on views.

    Args:
        G: [B, L, K] compatibility (codes last).
        w: [2r+1] window weights shared by all codes.
    Returns:
        [B, L, K] (CPU, float32 or float64).
    """
    return _PhraseWindow.apply(G.contiguous(), w, False)


def phrase_window_pair(G: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`phrase_window` twice from one window: the second result's gradient reaches G but not w (the window of w
    detached, as the code evidence reads it: `clinicode.models.leam.model`), at the cost of a copy, not a window."""
    return _PhraseWindow.apply(G.contiguous(), w, True)


class _Cosine(torch.autograd.Function):
    """G[b, l, k] = mask[b, l] * <v_bl, c_k> / (|v_bl| + eps), for unit-normalised label vectors c_k."""

    @staticmethod
    def forward(ctx, words: torch.Tensor, labels_n: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        n = words.norm(dim=-1, keepdim=True)                          # [B, L, 1] |v|
        inv = mask.unsqueeze(-1).to(words.dtype) / (n + EPS)         # [B, L, 1] 0 on padding
        G = torch.matmul(words, labels_n.t()).mul_(inv)               # [B, L, K]
        ctx.save_for_backward(words, labels_n, n, inv, G)
        return G

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        words, labels_n, n, inv, G = ctx.saved_tensors
        B, L, P = words.shape
        K = labels_n.shape[0]
        dS = grad * inv                                               # [B, L, K] gradient of V C_n^T
        grad_words = grad_labels = None
        if ctx.needs_input_grad[0]:
            # d/dv of inv = m / (|v| + EPS) is -m v / (|v| (|v| + EPS)^2); times sum_k grad S, that is
            # -v * sum_k(grad G) / (|v| (|v| + EPS)). Rows with |v| = 0 have G = 0, so the clamp only avoids 0/0.
            t = (grad * G).sum(-1, keepdim=True)                      # [B, L, 1]
            c = t.neg_().div_((n * (n + EPS)).clamp_min_(torch.finfo(n.dtype).tiny))  # [B, L, 1]
            grad_words = torch.matmul(dS, labels_n).addcmul_(words, c)                  # [B, L, P]
        if ctx.needs_input_grad[1]:
            grad_labels = dS.reshape(-1, K).t() @ words.reshape(-1, P)                  # [K, P]
        return grad_words, grad_labels, None


def cosine_compat(words: torch.Tensor, labels_n: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cosine compatibility with padding zeroed: `(words @ labels_n.T) * mask / (|words| + eps)`.

    Its backward is two matrix products and one row-scaled add, instead of autograd's chain through the norm (five
    passes over [B, L, P]).

    Args:
        words: [B, L, P] word vectors.
        labels_n: [K, P] label vectors already divided by their norms.
        mask: [B, L] bool, True for real tokens.
    Returns:
        [B, L, K] (codes last).
    """
    return _Cosine.apply(words, labels_n, mask)


class _Embed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor,
                padding_idx: int) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(ids)
        ctx.rows, ctx.padding_idx = weight.shape[0], padding_idx
        return weight.index_select(0, ids.reshape(-1)).view(*ids.shape, weight.shape[1])  # [..., P]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (ids,) = ctx.saved_tensors
        P = grad.shape[-1]
        out = grad.new_zeros(ctx.rows, P)                             # [V, P] dense, like nn.Embedding's
        out.index_add_(0, ids.reshape(-1), grad.reshape(-1, P))
        out[ctx.padding_idx] = 0                                      # the PAD row never learns
        return out, None, None


def embed(weight: torch.Tensor, ids: torch.Tensor, padding_idx: int = 0) -> torch.Tensor:
    """`F.embedding(ids, weight, padding_idx)` with a faster CPU backward: `index_add_` (deterministic on CPU), ~4x
    faster than `embedding_dense_backward` on a 50,000-word table."""
    return _Embed.apply(weight, ids, padding_idx)


class _PhraseMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, G: torch.Tensor, w: torch.Tensor, bias: torch.Tensor,  # type: ignore[override]
                pad: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        B, L, K = G.shape
        n = w.numel()
        r = n // 2
        wl = w.detach().tolist()
        Gp = F.pad(G, (0, 0, r, r))                                   # [B, L+2r, K]
        m = torch.empty(B, L, dtype=G.dtype)                          # [B, L] best code's score
        arg = torch.empty(B, L, dtype=torch.long)                     # [B, L] the best code
        e = torch.empty(B, K if pad is not None else 0, dtype=G.dtype)  # [B, K] each code's best window (evidence)
        pos = torch.empty(B, K if pad is not None else 0, dtype=torch.long)  # ... and its position
        o = torch.empty(min(B, _NOTES_PER_PASS), L, K, dtype=G.dtype)  # scratch for a few notes, reused
        for s in range(0, B, _NOTES_PER_PASS):
            g = Gp[s:s + _NOTES_PER_PASS]
            c = _shifted_sum(g, wl, L, o[:g.shape[0]])                # window(G) for these notes
            if pad is not None:                                       # the evidence reads the same window, before b1
                c.masked_fill_(pad[s:s + _NOTES_PER_PASS].unsqueeze(-1), float("-inf"))
                torch.max(c, dim=1, out=(e[s:s + _NOTES_PER_PASS], pos[s:s + _NOTES_PER_PASS]))
            c.add_(bias).relu_()                                      # u for these notes (0 on padding with a mask)
            torch.max(c, dim=2, out=(m[s:s + _NOTES_PER_PASS], arg[s:s + _NOTES_PER_PASS]))
        ctx.save_for_backward(Gp, w, m, arg, pos)
        ctx.mark_non_differentiable(pos)
        return m, e

    @staticmethod
    def backward(ctx, grad_m: torch.Tensor, grad_e: torch.Tensor):  # type: ignore[override]
        Gp, w, m, arg, pos = ctx.saved_tensors
        B, L = m.shape
        K = Gp.shape[2]
        n = w.numel()
        r = n // 2
        g = grad_m * (m > 0)                                          # [B, L] ReLU passes only positive maxima
        grad_G = grad_w = grad_b = None
        if ctx.needs_input_grad[2]:
            grad_b = torch.zeros(K, dtype=torch.float64).index_add_(0, arg.reshape(-1),
                                                                    g.reshape(-1).double()).to(g.dtype)
        if ctx.needs_input_grad[1]:
            # dw[j] = sum_l g[l] * G[l + j - r, arg[l]]: the window of each position's winning code only. The evidence
            # adds nothing here: it reads W1 but does not train it (clinicode.models.leam.model).
            windows = Gp.unfold(1, n, 1)                              # [B, L, K, n] a view
            picked = windows.gather(2, arg[:, :, None, None].expand(B, L, 1, n)).squeeze(2)  # [B, L, n]
            grad_w = torch.einsum("bln,bl->n", picked.double(), g.double()).to(w.dtype)
        if ctx.needs_input_grad[0]:
            wl = w.detach().tolist()
            du = torch.zeros(B, L + 2 * r, K, dtype=g.dtype)          # [B, L+2r, K] one non-zero per position
            du[:, r:r + L].scatter_(2, arg.unsqueeze(-1), g.unsqueeze(-1))
            if pos.numel() and grad_e is not None:                    # ... and one per code: its best position
                du[:, r:r + L].scatter_add_(1, pos.unsqueeze(1), grad_e.unsqueeze(1))
            grad_G = _transposed_window(du, wl, L)
        return grad_G, grad_w, grad_b, None


def phrase_max(G: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """m = max over codes of ReLU(phrase_window(G, w) + bias), without materialising the [B, L, K] scores.

    The window, bias, ReLU and max over codes are fused chunk by chunk; only the winning code per position is kept
    for the backward pass, where the gradients of w and b1 become gathers over B*L positions.

    Same value as `F.relu(phrase_window(G, w) + bias).amax(dim=2)`. The gradient is the same except at exact ties
    between codes: `amax` splits it evenly among them, this kernel gives it to the first (as `torch.max` does);
    both are valid subgradients, and a position whose best score is 0 after ReLU passes no gradient in either.

    Args:
        G: [B, L, K] compatibility (codes last).
        w: [2r+1] window weights.
        bias: [K] per-code bias b1.
    Returns:
        [B, L] (CPU, float32 or float64).
    """
    return _PhraseMax.apply(G.contiguous(), w, bias, None)[0]


def phrase_max_evidence(G: torch.Tensor, w: torch.Tensor, bias: torch.Tensor,
                        mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`phrase_max` and, from the same window in the same pass, e[b, k] = max over the note's real positions of
    phrase_window(G, w)[b, l, k] (before the bias and the ReLU: the code evidence of `clinicode.models.leam.model`).

    e's gradient reaches G through each code's best position only (ties: the first position, as `torch.max`) and never
    reaches w or bias (the evidence reads the window but does not train it). m is 0 on padding (no gradient there;
    the attention never looks at padding).

    Args:
        G: [B, L, K] compatibility (codes last).
        w: [2r+1] window weights.
        bias: [K] per-code bias b1.
        mask: [B, L] bool, True for real tokens; every note needs one.
    Returns:
        (m [B, L], e [B, K]) (CPU, float32 or float64).
    """
    return _PhraseMax.apply(G.contiguous(), w, bias, ~mask)


@torch.no_grad()
def table_phrase_max(ids: torch.Tensor, table: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, *,
                     evidence: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """m = max over codes of ReLU(window(G) + bias) with G[b, l] = table[ids[b, l]] (inference; no autograd).

    PAD's table row is 0, so padding ids on both sides gives the window's "same" zero padding for free; G is gathered
    for a few notes at a time, so the [n, L+2r, K] working set stays in the CPU cache.

    Args:
        ids: [B, L] token ids, 0 = PAD.
        table: [V, K] word-code cosines with row 0 all zero (`LEAM.word_code_table`).
        w: [2r+1] window weights W1.
        bias: [K] per-code bias b1.
        evidence: also return e[b, k] = max over the note's real (non-PAD) positions of window(G)[b, l, k], from the
            same window (m is then 0 on padding).
    Returns:
        m [B, L], or (m, e [B, K]) with `evidence`.
    """
    B, L = ids.shape
    K = table.shape[1]
    r = w.numel() // 2
    wl = w.detach().tolist()
    ids_p = F.pad(ids, (r, r), value=0)                                # [B, L+2r]
    m = torch.empty(B, L, dtype=table.dtype)
    e = torch.empty(B, K if evidence else 0, dtype=table.dtype)
    scratch = torch.empty(min(B, _NOTES_PER_PASS), L, K, dtype=table.dtype)
    for s in range(0, B, _NOTES_PER_PASS):
        Gp = F.embedding(ids_p[s:s + _NOTES_PER_PASS], table)          # [n, L+2r, K]
        u = _shifted_sum(Gp, wl, L, scratch[:Gp.shape[0]])             # [n, L, K] window
        if evidence:
            u.masked_fill_((ids[s:s + _NOTES_PER_PASS] == 0).unsqueeze(-1), float("-inf"))
            e[s:s + _NOTES_PER_PASS] = u.amax(dim=1)
        u.add_(bias).relu_()
        m[s:s + _NOTES_PER_PASS] = u.amax(dim=2)
    return (m, e) if evidence else m


class _CodeMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, S: torch.Tensor, C: torch.Tensor, bias: torch.Tensor | None, relu: bool,  # type: ignore[override]
                block: tuple[int, int], lengths: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        N, K = S.shape[0], C.shape[0]
        rows, width = max(1, min(block[0], N)), max(1, min(block[1], K))
        m = torch.empty(N, dtype=S.dtype, device=S.device)                # running best score per row
        arg = torch.empty(N, dtype=torch.long, device=S.device)           # ... and its code
        scores = torch.empty(rows, width, dtype=S.dtype, device=S.device)  # the one [rows, codes] block, reused
        best = torch.empty(rows, dtype=S.dtype, device=S.device)
        where = torch.empty(rows, dtype=torch.long, device=S.device)
        if lengths is None:                                               # every row, blocks across notes
            segments = [(r0, min(N, r0 + rows), -1, 0) for r0 in range(0, N, rows)]
            e_val = e_pos = torch.empty(0, 0, dtype=torch.long, device=S.device)
            valid = None
        else:                                                             # each note's real rows, blocks within a note
            L = N // len(lengths)
            segments = [(b * L + l0, b * L + min(n_b, l0 + rows), b, l0) for b, n_b in enumerate(lengths)
                        for l0 in range(0, n_b, rows)]
            e_val = torch.empty(len(lengths), K, dtype=S.dtype, device=S.device)   # each code's best score per note
            e_blk = torch.empty(len(lengths), K, dtype=torch.long, device=S.device)  # ... the row block holding it
            col = torch.empty(width, dtype=S.dtype, device=S.device)
            valid = torch.zeros(N, dtype=torch.bool, device=S.device)
            m.zero_()
            arg.zero_()                                                   # padding: m = 0, no gradient
        for r0, r1, note, l0 in segments:
            s = S[r0:r1]
            n = s.shape[0]
            m_r, arg_r = m[r0:r1], arg[r0:r1]
            if valid is not None:
                valid[r0:r1] = True
            for k0 in range(0, K, width):
                c = C[k0:k0 + width]
                w = c.shape[0]
                o = scores[:n, :w]
                if bias is None:
                    torch.mm(s, c.t(), out=o)
                else:
                    torch.addmm(bias[k0:k0 + width], s, c.t(), out=o)
                if note >= 0:                                             # the evidence: each code's best row block
                    ev, eb = e_val[note, k0:k0 + w], e_blk[note, k0:k0 + w]
                    if l0 == 0:                                           # (amax: the max with indices along rows
                        torch.amax(o, dim=0, out=ev)                      # was 20x slower; the row is found below)
                        eb.zero_()
                    else:
                        torch.amax(o, dim=0, out=col[:w])
                        better = col[:w] > ev                             # strict: ties keep the earlier position
                        ev.copy_(torch.where(better, col[:w], ev))
                        eb.masked_fill_(better, l0)
                if k0 == 0:
                    torch.max(o, dim=1, out=(m_r, arg_r))
                    continue
                torch.max(o, dim=1, out=(best[:n], where[:n]))
                better = best[:n] > m_r                                   # strict: ties keep the earlier code
                m_r.copy_(torch.where(better, best[:n], m_r))
                arg_r.copy_(torch.where(better, where[:n] + k0, arg_r))
        if lengths is not None:                                           # each code's row in its best block
            e_pos = torch.empty_like(e_blk)
            for b, n_b in enumerate(lengths):
                for l0 in range(0, n_b, rows):
                    ks = (e_blk[b] == l0).nonzero().squeeze(1)
                    if ks.numel():
                        sb = torch.mm(C[ks], S[b * L + l0:b * L + min(n_b, l0 + rows)].t())     # [codes won, rows]
                        if bias is not None:
                            sb.add_(bias[ks].unsqueeze(1))                # as scored above
                        e_pos[b, ks] = sb.argmax(dim=1) + l0              # (codes as rows: the faster argmax)
        if relu:
            m.clamp_(min=0)
        ctx.relu, ctx.has_bias, ctx.K = relu, bias is not None, K
        ctx.save_for_backward(S, C, m, arg, valid if valid is not None else torch.empty(0, dtype=torch.bool))
        ctx.mark_non_differentiable(e_pos)
        return m, e_pos

    @staticmethod
    def backward(ctx, grad_m: torch.Tensor, _grad_pos: torch.Tensor | None):  # type: ignore[override]
        S, C, m, arg, valid = ctx.saved_tensors
        g = grad_m * (m > 0) if ctx.relu else grad_m                      # [N] ReLU passes only positive maxima
        if valid.numel():
            g = g * valid                                                 # padding rows were not scored
        grad_S = grad_C = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_S = C.index_select(0, arg).mul_(g.unsqueeze(1))          # [N, P] each row's winner, scaled
        if ctx.needs_input_grad[1]:
            grad_C = torch.zeros_like(C).index_add_(0, arg, S * g.unsqueeze(1))  # [K, P]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = torch.zeros(ctx.K, dtype=torch.float64, device=g.device).index_add_(0, arg, g.double()).to(g.dtype)
        return grad_S, grad_C, grad_b, None, None, None


def _code_max(S: torch.Tensor, C: torch.Tensor, bias: torch.Tensor | None, relu: bool, block: tuple[int, int],
              lengths: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    if S.dtype in (torch.float16, torch.bfloat16):
        S, C = S.float(), C.float()
        bias = bias.float() if bias is not None else None
    with torch.autocast(S.device.type, enabled=False):
        return _CodeMax.apply(S, C.to(S.dtype), None if bias is None else bias.to(S.dtype), relu, block, lengths)


def code_max(S: torch.Tensor, C: torch.Tensor, bias: torch.Tensor | None = None, *, relu: bool = True,
             block: tuple[int, int] = (256, 2048)) -> torch.Tensor:
    """m[n] = max over k of (S[n] . C[k] + bias[k]), then ReLU when `relu`, without storing the [N, K] scores.

    For many codes: the scores exist one block at a time (a running max and its winning code), and the backward goes
    through each row's winner only, so it costs O(B L P) whatever K is. Plain torch ops, so it runs on CUDA too.

    Same value as `F.relu(S @ C.T + bias).amax(1)` (or without the ReLU); the gradient is the same except at exact ties
    between codes, where this one goes to the first code (as `torch.max`) and `amax` splits it. Scores are computed
    block by block, `block` = (rows, codes): on the CPU a block that fits the cache is fastest; on a GPU the caller
    sizes it from its memory budget. Under autocast the scores are computed in float32 (the max over thousands of
    cosines needs the precision).

    Args:
        S: [N, P] one vector per position (the windowed unit word vectors, or the unit word vectors themselves).
        C: [K, P] unit code vectors.
        bias: [K] per-code bias, or None.
        relu: apply the ReLU to the max (the paper's u); False for the linear ablation's max_k G.
        block: (rows, codes) per score block.
    Returns:
        [N].
    """
    return _code_max(S, C, bias, relu, block, None)[0]


def code_max_evidence(S: torch.Tensor, C: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor, *,
                      relu: bool = True, block: tuple[int, int] = (256, 2048)) -> tuple[torch.Tensor, torch.Tensor]:
    """`code_max` over the notes' real positions and, from the same score blocks, each code's best position per note.

    Row blocks stay inside one note, so the max over a block's rows (the other axis of the same [rows, codes] scores)
    gives each code's best position: the code evidence of `model` costs one more max per block, not another
    product: the blocks keep each code's best value and the row block holding it (`amax`; the max with indices along
    rows was 20x slower), then each code's scores are recomputed over that one block to find the row (+ rows/L of the
    product). Positions are compared with the bias added, which is the same for every position of a code (so the same
    winner up to rounding at near-ties); ties go to the first position. Padding rows are not scored: m is 0 there and
    passes no gradient.

    Args:
        S: [B, L, P] one vector per position.
        C: [K, P] unit code vectors.
        bias: [K] per-code bias, or None.
        mask: [B, L] bool, True for real tokens: each note's tokens come first (as `pad_batch` makes them).
        relu, block: as `code_max`.
    Returns:
        (m [B, L], best [B, K] position of each code's highest S_l . C_k in the note, no gradient).
    """
    B, L, P = S.shape
    lengths = mask.sum(dim=1).tolist()
    m, best = _code_max(S.reshape(B * L, P), C, bias, relu, block, lengths)
    return m.view(B, L), best


class _BestDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, S: torch.Tensor, C: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        e = torch.empty(pos.shape, dtype=S.dtype, device=S.device)
        for b in range(S.shape[0]):                                       # one note's [K, P] winners at a time
            e[b] = (S[b].index_select(0, pos[b]) * C).sum(-1)
        ctx.save_for_backward(S, C, pos)
        return e

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        S, C, pos = ctx.saved_tensors
        grad_S = torch.zeros_like(S) if ctx.needs_input_grad[0] else None
        grad_C = torch.zeros_like(C) if ctx.needs_input_grad[1] else None
        for b in range(S.shape[0]):
            g = grad[b].unsqueeze(1)                                      # [K, 1]
            if grad_S is not None:
                grad_S[b].index_add_(0, pos[b], g * C)
            if grad_C is not None:
                grad_C.addcmul_(g, S[b].index_select(0, pos[b]))
        return grad_S, grad_C, None


def best_dot(S: torch.Tensor, C: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """e[b, k] = S[b, pos[b, k]] . C[k]: each code's score at its chosen position, with gradients to S and C.

    The same as `(S.gather(1, pos[..., None].expand(B, K, P)) * C).sum(-1)` without the [B, K, P] gathered tensor in
    the graph (one note's [K, P] exists at a time, forward and backward): at 9,000 codes that tensor was 57 MB a batch
    of 16 notes, three times in training.

    Args:
        S: [B, L, P] one vector per position.
        C: [K, P] code vectors.
        pos: [B, K] int64 positions in 0..L-1.
    Returns:
        [B, K].
    """
    return _BestDot.apply(S, C.to(S.dtype), pos)
