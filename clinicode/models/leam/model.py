"""LEAM, the Label-Embedding Attentive Model (Wang et al., ACL 2018, Section 4), in one file that reads like the paper.

B notes, L tokens, P dimensions, K codes, r the phrase radius; the design: docs/training.md, "LEAM in the code"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from clinicode.models.leam import kernels, memory
from clinicode.models.leam.kernels import EPS
from clinicode.models.leam.memory import CPU_BLOCK, ORDERS, order as compute_order
from clinicode.models.leam.options import LEAMConfig

EVIDENCE_RHO0 = 0.0       # code_evidence: a_k = softplus(rho_k) starts at log 2 (docs/accuracy-tuning.md, round 9)
ATTEND_RHO0 = 10.0        # code_attention: t_k = softplus(rho_k) starts at ~10, sharp over u in [0, ~1]


@dataclass
class LEAMOutput:
    """What one forward pass returns; attention tensors are only filled when asked for."""

    logits: torch.Tensor                  # [B, K]
    beta: torch.Tensor | None = None      # [B, L]    attention over positions (0 on padding)
    doc: torch.Tensor | None = None       # [B, P]    z, the attended note vector


class SampledLogits(NamedTuple):
    """A training batch's logits for some of the codes (`code_sample`): columns `codes` of [B, K], each column's loss
    terms weighted by `weight` so that their sum stands for every code's (`sample_codes`)."""

    logits: torch.Tensor                  # [B, n]
    codes: torch.Tensor                   # [n] int64 code indices
    weight: torch.Tensor                  # [n]


class LEAM(nn.Module):
    """Label-Embedding Attentive Model.

    Args:
        config: sizes and options; `config.vocab_size` rows in the word table, row 0 is PAD.
        fast: compute in the cheaper order with the kernels (same equations; docs/training.md). False: the
            plain PyTorch reference.
    """

    def __init__(self, config: LEAMConfig, *, fast: bool = True) -> None:
        super().__init__()
        self.config = config
        self.fast = fast
        P, K, r = config.embed_dim, config.n_labels, config.radius
        self.word_emb = nn.Embedding(config.vocab_size, P, padding_idx=0)             # E_word: v_l = E_word[x_l]
        self.label_emb = nn.Parameter(torch.randn(K, P) * 0.1)                        # C: codes in the words' space
        self.phrase_w = nn.Parameter(torch.full((2 * r + 1,), config.phrase_init / (2 * r + 1)))  # W1
        self.phrase_b = nn.Parameter(torch.zeros(K))                                  # b1
        self.head = nn.Sequential(                                                    # f: z -> logits
            nn.Dropout(config.dropout),
            nn.Linear(P, config.hidden_dim),
            nn.ReLU(),
            nn.Dropout(config.dropout),
            nn.Linear(config.hidden_dim, K),
        )
        if config.code_evidence:                                           # a_k = softplus(rho_k) >= 0 (not the paper)
            self.evidence_rho = nn.Parameter(torch.full((K,), EVIDENCE_RHO0))
        if config.code_attention:                                          # t_k of (4'), not the paper
            self.attend_rho = nn.Parameter(torch.full((K,), ATTEND_RHO0))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, *, return_attention: bool = False,
                table: torch.Tensor | None = None, block: tuple[int, int] = CPU_BLOCK,
                order: str | None = None, codes: torch.Tensor | None = None) -> LEAMOutput:
        """Score a batch of notes: G -> u -> m -> beta -> z -> f, the paper's equations in its order.

        Args:
            ids: [B, L] int64 token ids, 0 = PAD.
            mask: [B, L] bool, True for real tokens, each note's first (as `pad_batch` makes them); one at least.
            return_attention: also return beta and z (for explanations; u for chosen codes: `phrase`).
            table: [V, K] `word_code_table()`, for inference: G is then looked up, not computed.
            block: (positions, codes) per score block with many codes (`clinicode.models.leam.memory.plan` sizes it).
            order: how, `MemoryPlan.order` ("plain", "table", "few codes", "many codes"); None: `memory.order`'s.
            codes: with `code_attention`, score only these codes ([n] indices; `sample_codes` draws them in training).
        Returns:
            LEAMOutput with logits [B, K] ([B, n] for `codes`; and beta, z when asked for).
        """
        cfg = self.config
        path = order or compute_order(cfg, device=ids.device.type, fast=self.fast, table=table is not None)
        if path not in ORDERS or (path == "table") != (table is not None):
            raise ValueError(f"order {path!r} with{'' if table is not None else 'out'} a table; expected one of "
                             f"{ORDERS}, and a table exactly when the order is 'table'")
        if codes is not None and (return_attention or not cfg.code_attention):
            raise ValueError("codes= scores some codes of a code_attention model's logits, and only the logits")
        if cfg.code_attention and not return_attention:                             # (4'-7') below, alone
            return LEAMOutput(logits=self.code_logits(ids, mask, unit_rows(self.label_emb), codes=codes))
        cpu = ids.device.type == "cpu"
        E, C, W1, b1 = self.word_emb.weight, self.label_emb, self.phrase_w, self.phrase_b
        Cn = unit_rows(C)                                                             # [K, P]   unit code vectors
        linear = cfg.compat == "linear"                                               # the paper's ablation: u = G
        evidence = cfg.code_evidence and not cfg.code_attention                     # code_logits has its own e
        V: torch.Tensor | None = None
        e: torch.Tensor | None = None                                                 # [B, K] evidence, (7) below

        # (1) G = cos(c_k, v_l): every code against every word; padded positions are 0.
        # (2) u = ReLU(G[l-r : l+r] W1 + b1), phrase-level compatibility; (3) m_l = max_k u_kl.
        # With code_evidence, (7)'s e_k = max_l window(G)_lk comes from the same window of the same products.
        if path == "table":                                                           # inference: the stored table
            if cpu and not linear:
                m, e = kernels.table_phrase_max(ids, table, W1, b1, evidence=True) if evidence else \
                    (kernels.table_phrase_max(ids, table, W1, b1), None)              # [B, L], [B, K]
            else:
                m, e = _plain_max(F.embedding(ids, table) * mask.unsqueeze(-1).to(table.dtype), W1, b1, mask,
                                  linear=linear, evidence=evidence)
        elif path == "plain":                                                         # the reference, step by step
            V = F.embedding(ids, E, padding_idx=0)                                    # [B, L, P]
            m, e = _plain_max(_cosine(V, Cn, mask), W1, b1, mask, linear=linear, evidence=evidence)
        elif path == "few codes":                                                     # G is small: [B, L, K] kernels
            V = kernels.embed(E, ids)
            G = kernels.cosine_compat(V, Cn, mask)                                    # [B, L, K]
            m, e = kernels.phrase_max_evidence(G, W1, b1, mask) if evidence else \
                (kernels.phrase_max(G, W1, b1), None)                                 # u never written
        else:                                                                         # window(G) = window(v^) C^T
            V = kernels.embed(E, ids) if cpu else F.embedding(ids, E, padding_idx=0)
            Vn = _unit_words(V, mask)                                                  # [B, L, P] v^
            S, Sd = self._windowed_pair(Vn, evidence=evidence)                        # [B, L, P]
            bias = None if linear else b1
            if evidence:                                                              # best positions: same blocks
                m, best = kernels.code_max_evidence(S, Cn, bias, mask, relu=not linear, block=block)
                e = kernels.best_dot(Sd, Cn, best)                                    # [B, K]
            else:
                m = kernels.code_max(S.reshape(-1, S.shape[-1]), Cn, bias, relu=not linear,
                                     block=block).view(mask.shape)                    # [B, L]

        # (4) beta = softmax over positions of m; padding never attended (max-subtracted inside softmax).
        beta = torch.softmax(m.masked_fill(~mask, float("-inf")), dim=-1)            # [B, L]

        # (5) z = sum_l beta_l v_l, with the unnormalised word vectors.
        if V is None:
            z = F.embedding_bag(ids, E, per_sample_weights=beta, mode="sum")         # [B, P]
        else:
            z = torch.bmm(beta.unsqueeze(1), V).squeeze(1)                            # [B, P]

        # (6) f: dropout -> Linear(P, H) -> ReLU -> dropout -> Linear(H, K).
        # (7) optional, not the paper: e_k = max_l window(G)_lk, each code's best phrase match in the note, a_k >= 0.
        # With code_attention the logits are (4'-7')'s (`code_logits`); beta and z are the note's, for explanations.
        logits = self.code_logits(ids, mask, Cn) if cfg.code_attention else self._note_logits(z, e)  # [B, K]
        if not return_attention:
            return LEAMOutput(logits=logits)
        return LEAMOutput(logits=logits, beta=beta, doc=z)

    def _note_logits(self, z: torch.Tensor, e: torch.Tensor | None) -> torch.Tensor:
        """(6) f(z) and (7) + a_k e_k with code evidence: [B, K]."""
        logits = self.head(z)
        return logits if e is None else logits + self.evidence_weight() * e.to(logits.dtype)

    def code_logits(self, ids: torch.Tensor, mask: torch.Tensor, Cn: torch.Tensor,
                    codes: torch.Tensor | None = None) -> torch.Tensor:
        """The logits with `code_attention` (not the paper), [B, K] ([B, n] for CODES): each code its own attention,
        (4') alpha_kl = softmax_l(t_k u_kl) (no max over codes), (5') z_k = sum_l alpha_kl v_l, (6') f(z_k)_k, the
        head on z_k keeping output k, and (7) with code evidence. u_kl = ReLU(S_l . c^_k + b1_k), S the windowed unit
        word vectors (`_windowed`); codes go by blocks (`memory.code_block`), and in training each block is recomputed
        in the backward pass rather than kept (torch.utils.checkpoint): one block's memory, whatever K is."""
        V = F.embedding(ids, self.word_emb.weight, padding_idx=0)                     # [B, L, P]
        Vn = _unit_words(V, mask)
        S, Sd = self._windowed_pair(Vn, evidence=self.config.code_evidence)           # [B, L, P]
        rho_e = self.evidence_rho if self.config.code_evidence else None
        per_code = [Cn, self.phrase_b, self.attend_rho, rho_e, self.head[4].weight, self.head[4].bias]
        if codes is not None:
            per_code = [None if t is None else t[codes] for t in per_code]
        K = per_code[0].shape[0]
        step = memory.code_block(K, batch=ids.shape[0], length=ids.shape[1], hidden=self.config.hidden_dim)
        keep = torch.is_grad_enabled() and step < K
        out = []
        for k0 in range(0, K, step):
            args = (S, Sd, V, mask, *(None if t is None else t[k0:k0 + step] for t in per_code))
            out.append(checkpoint(self._code_block, *args, use_reentrant=False) if keep else self._code_block(*args))
        return torch.cat(out, dim=1)

    def _code_block(self, S: torch.Tensor, Sd: torch.Tensor, V: torch.Tensor, mask: torch.Tensor, Cn: torch.Tensor,
                    b1: torch.Tensor, rho: torch.Tensor, rho_e: torch.Tensor | None, w_out: torch.Tensor,
                    b_out: torch.Tensor) -> torch.Tensor:
        """code_logits for one block of n codes: [B, n] (RHO_E: the evidence weights' rho, None without evidence).
        Scoring (no gradients) changes one [B, L, n] buffer in place: the same values, fewer passes and allocations.
        Training reads the evidence's best positions off the scores and Sd's dot there (`kernels.best_dot`): the max's
        value and gradient without a second [B, L, n] product and its backward."""
        raw = S @ Cn.T                                                                # [B, L, n] window(G)
        pad = ~mask.unsqueeze(-1)
        cosine = self.config.compat == "cosine"
        e = None
        if rho_e is not None and torch.is_grad_enabled():  # (7) e = max_l: Sd's dot at each code's best position
            e = kernels.best_dot(Sd, Cn, raw.detach().masked_fill(pad, float("-inf")).argmax(dim=1))  # [B, n]
        elif rho_e is not None:
            e = raw.masked_fill(pad, float("-inf")).amax(dim=1)                       # [B, n] (7), raw kept
        if torch.is_grad_enabled():
            u = F.relu(raw + b1) if cosine else raw
            alpha = torch.softmax((u * F.softplus(rho)).masked_fill(pad, float("-inf")), dim=1)
        else:
            u = raw.add_(b1).relu_() if cosine else raw
            alpha = torch.softmax(u.mul_(F.softplus(rho)).masked_fill_(pad, float("-inf")), dim=1)
        z = torch.bmm(alpha.transpose(1, 2), V)                                       # [B, n, P]
        drop1, hidden, relu, drop2, _ = self.head
        h = drop2(relu(hidden(drop1(z))))                                             # [B, n, H]
        logits = torch.einsum("bnh,nh->bn", h, w_out) + b_out
        return logits if e is None else logits + F.softplus(rho_e) * e

    def _windowed(self, Vn: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
        """S = window(v^), [B, L, P]: the unit word vectors (0 on padding) through the phrase window W1 (v^ itself for
        "linear"), so that S_l . c^_k = window(G)_lk."""
        if self.config.compat == "linear":
            return Vn
        return kernels.phrase_window(Vn, W1) if Vn.device.type == "cpu" else _window(Vn, W1)

    def _windowed_pair(self, Vn: torch.Tensor, *, evidence: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, Sd): S = `_windowed` and Sd what the code evidence (7) reads. Training "cosine" with evidence, Sd has S's
        values but its gradient reaches v^, not W1 (on the CPU one window makes both: `kernels.phrase_window_pair`);
        otherwise Sd is S."""
        W1 = self.phrase_w
        if not (evidence and self.config.compat == "cosine" and W1.requires_grad and torch.is_grad_enabled()):
            S = self._windowed(Vn, W1)
            return S, S
        if Vn.device.type == "cpu":
            return kernels.phrase_window_pair(Vn, W1)
        return _window(Vn, W1), _window(Vn, W1.detach())

    @torch.no_grad()
    def constrain(self) -> None:
        """After each optimiser step: with `window_nonneg`, W1's taps are projected onto >= 0 (a weighting of nearby
        positions; a free W1 can flip sign, and then max_l window(G) is the phrase that matches a code worst)."""
        if self.config.window_nonneg and self.config.compat == "cosine":
            self.phrase_w.clamp_(min=0.0)

    @torch.no_grad()
    def window_stats(self) -> dict[str, float]:
        """The phrase step's state, logged per epoch (history.jsonl): W1's sum and smallest tap, b1's mean and, with
        code evidence, the mean weight a_k. A W1 whose sum falls to 0 or below reads each code's worst phrase."""
        out = {"w1_sum": float(self.phrase_w.sum()), "w1_min": float(self.phrase_w.min()),
               "b1_mean": float(self.phrase_b.mean())}
        if self.config.code_evidence:
            out["a_mean"] = float(self.evidence_weight().mean())
        return out

    def evidence_weight(self) -> torch.Tensor:
        """a = softplus(rho), [K]: each code's weight on its best phrase match, never negative (a match can only count
        for its code; unconstrained weights of rare codes were driven below 0 in the first steps and stayed there)."""
        return F.softplus(self.evidence_rho)

    @torch.no_grad()
    def phrase(self, ids: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor | None = None, *,
               anchors: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """u for the given codes (all when None): [B, n, L], after the ReLU and before the max; G for "linear".

        The per-code evidence of explanations, by the plain expressions; pass a few codes, not thousands. With
        `anchors`, also each window's strongest token: anchor[b, k, l] = the position l' in l-r..l+r (real tokens only)
        with the largest term W1[l' - l + r] * G[b, l', k] of u[b, k, l] (l itself for "linear"; ties: the first).
        """
        V = F.embedding(ids, self.word_emb.weight, padding_idx=0)                     # [B, L, P]
        C = self.label_emb if codes is None else self.label_emb[codes]                # [n, P]
        G = _cosine(V, unit_rows(C), mask)                                            # [B, L, n]
        cosine = self.config.compat == "cosine"
        u = G
        if cosine:
            b1 = self.phrase_b if codes is None else self.phrase_b[codes]
            u = F.relu(_window(G, self.phrase_w) + b1)
        u = u.transpose(1, 2)                                                         # [B, n, L]
        if not anchors:
            return u
        B, L, n = G.shape
        if not cosine:
            return u, torch.arange(L, device=ids.device).expand(B, n, L)
        r = self.config.radius
        terms = F.pad(G, (0, 0, r, r)).unfold(1, 2 * r + 1, 1) * self.phrase_w        # [B, L, n, 2r+1] W1_j G_(l-r+j)
        real = F.pad(mask, (r, r), value=False).unfold(1, 2 * r + 1, 1)               # [B, L, 2r+1] tap on a token
        terms = terms.masked_fill(~real.unsqueeze(2), float("-inf"))
        anchor = terms.argmax(dim=-1) + torch.arange(L, device=ids.device)[None, :, None] - r  # [B, L, n]
        return u, anchor.transpose(1, 2)

    @torch.no_grad()
    def word_code_table(self) -> torch.Tensor:
        """[V, K] cos(E_word[w], c_k) for every vocabulary word and code, 0 for PAD: G for any note is rows of it."""
        E, C = self.word_emb.weight, self.label_emb
        En = unit_rows(E)                                                            # [V, P]
        Cn = unit_rows(C)                                                            # [K, P]
        table = (En @ Cn.T).contiguous()                                              # [V, K]
        table[0] = 0.0
        return table

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, pos_weight: torch.Tensor | None = None,
             weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Task loss plus lambda times the label-embedding regulariser.

        Args:
            logits: [B, K], or [B, n] for n codes of a `sample_codes` draw.
            targets: [B, K] float 0/1 (multi-label) or one-hot (single-label); [B, n] with the draw.
            pos_weight: optional [K] ([n]) weights of the positive BCE terms (multi-label only; None = paper's loss).
            weight: multi-label, the draw's [n] column weights: the weighted sum over B*n terms stands for the sum
                over B*K, so the task loss is still a mean over B*K (an unbiased estimate of it); [B, K] ([B, n]):
                also 0 for the labels not known (`clinicode.data.labels.PartlyCoded`), which leave the sum.
        Returns:
            (total loss, task loss), both scalars.
        """
        if self.config.multilabel and weight is not None:
            task = F.binary_cross_entropy_with_logits(logits, targets, weight=weight, pos_weight=pos_weight,
                                                      reduction="sum") / (targets.shape[0] * self.config.n_labels)
        elif self.config.multilabel:
            task = F.binary_cross_entropy_with_logits(logits, targets, pos_weight=pos_weight)  # mean over B*K
        else:
            task = F.cross_entropy(logits, targets.argmax(dim=-1))
        if self.config.label_reg_weight == 0:
            return task, task
        K, n = self.config.n_labels, self.config.label_reg_codes
        codes = (torch.arange(K, device=logits.device) if K <= n                      # [n] class k for c_k
                 else torch.randperm(K, device=logits.device)[:n])                    # a random n of them
        reg = F.cross_entropy(self.head(self.label_emb[codes]), codes)                # f(c_k) over all K classes
        return task + self.config.label_reg_weight * reg, task

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, K] sigmoid (multi-label) or softmax (single-label) scores."""
        return torch.sigmoid(logits) if self.config.multilabel else torch.softmax(logits, dim=-1)


def sample_codes(targets: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The codes one training batch scores with `code_sample` N, and their loss weights: every code positive in one of
    the batch's notes (TARGETS [B, K]) at weight 1, and N of the other codes drawn uniformly at random, each at weight
    (others / N), so that the weighted sum of their loss terms is an unbiased estimate of the others' sum. Every code
    at weight 1 when there are no more than N others. Returns ([n] code indices, [n] weights)."""
    in_play = targets.bool().any(dim=0)                                               # [K]
    others = (~in_play).nonzero().squeeze(1)
    K, device = targets.shape[1], targets.device
    if others.numel() <= n:
        return torch.arange(K, device=device), torch.ones(K, device=device)
    own = in_play.nonzero().squeeze(1)
    drawn = others[torch.randperm(others.numel(), device=device)[:n]]
    weight = torch.cat([torch.ones(own.numel(), device=device), torch.full((n,), others.numel() / n, device=device)])
    return torch.cat([own, drawn]), weight


def unit_rows(C: torch.Tensor) -> torch.Tensor:
    """Rows of C scaled to unit length."""
    return C / (C.norm(dim=-1, keepdim=True) + EPS)


def _unit_words(V: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """v^: [B, L, P] word vectors scaled to unit length, 0 on padding (MASK [B, L] False)."""
    return V * (mask.unsqueeze(-1).to(V.dtype) / (V.norm(dim=-1, keepdim=True) + EPS))


def _cosine(V: torch.Tensor, Cn: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """G[b, l, k] = cos(v_bl, c_k), 0 on padding: [B, L, P] words, [K, P] unit code vectors -> [B, L, K]."""
    Vn = unit_rows(V)                                                                # [B, L, P] unit word vectors
    return (Vn @ Cn.T) * mask.unsqueeze(-1).to(V.dtype)                               # [B, L, K]


def _window(G: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
    """sum_j W1[j] * G[:, l + j - r, :] with zero padding: one 1-channel convolution per code row, plain PyTorch."""
    B, L, K = G.shape
    r = W1.numel() // 2
    u = F.conv1d(G.transpose(1, 2).reshape(B * K, 1, L), W1.view(1, 1, -1), padding=r)  # [B*K, 1, L]
    return u.view(B, K, L).transpose(1, 2)                                            # [B, L, K]


def _plain_max(G: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor, mask: torch.Tensor, *, linear: bool,
               evidence: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """m_l = max_k u_kl (u = G for "linear") and, with `evidence`, e_k = max over real l of window(G)_lk with W1
    detached (G for "linear"): the plain expressions, [B, L, K] tensors stored. Returns (m [B, L], e [B, K] or None)."""
    m = (G if linear else F.relu(_window(G, W1) + b1)).amax(dim=-1)                 # [B, L]
    if not evidence:
        return m, None
    W = G if linear else _window(G, W1.detach())                                     # [B, L, K] before b1 and ReLU
    return m, W.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)          # [B, K]
