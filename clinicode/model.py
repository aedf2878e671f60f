"""LEAM, the Label-Embedding Attentive Model (Wang et al., ACL 2018, Section 4), in one file that reads like the paper.

Knows nothing of files, MIMIC or the CLI. Notation follows the paper and docs/domain.md: B notes, L tokens, P embedding
dimensions, K codes (labels), r the phrase radius (window 2r+1). Tensors keep codes last ([B, L, K] is the paper's
G transposed): the window runs along L for all K codes at once, and the max over codes is a reduction of the last axis.

Design decisions (stated here, as the domain notes ask):
- **One attention per note, shared by all codes.** beta comes from the best-matching code at each position
  (m_l = max_k u_kl), as in the paper; there is no per-code attention. A per-code attention is another model
  (CAML, LAAT) and would need another name. Per-code evidence for explanations is row k of u (after the ReLU,
  before the max), which `forward(..., return_attention=True)` returns.
- **Phrase step: the paper's form,** u_l = ReLU(G[:, l-r:l+r] W1 + b1) with W1 in R^{2r+1} shared by all codes and
  b1 in R^K ("same" zero padding). The reference TensorFlow code's full K->K convolution is not used (screened: it
  lost dev micro-F1 on cmc2007 and mtsamples, docs/accuracy-tuning.md). `compat="linear"` is the paper's ablation
  "LEAM (linear)": m_l = max_k G_kl, no window, no ReLU.
- **Output:** sigmoid + BCE for multi-label notes; softmax + CE for one label per note (the paper's topic tasks).
- **Label regulariser:** the same head f classifies each code vector c_k as its own class (softmax cross-entropy
  against the identity), weight lambda (paper: 1).

One switch selects how the same equations are computed (as nanoGPT's flash-attention flag does):
- `fast=True` (default) on the CPU runs the hand-written kernels of `clinicode.kernels`: G as one [B, L, K] product
  with a cheap backward, the window as shifted adds, and in training the window, bias, ReLU and max fused so u is
  never written. Each kernel is tested against the plain expression, and a test checks that training with them
  follows the plain model's loss curve step by step.
- `fast=False`, or any non-CPU device (CUDA, where these ops are already fast), runs the plain PyTorch expressions
  below: the reference that the tests and benchmarks compare with.
- `table=model.word_code_table()` (inference only) takes G from a stored [V, K] cosine table, the paper's "store G
  offline": a note's G is a row gather and the word vectors are never materialised per position.

Training details around the model (not in the paper; each is a config value, see clinicode/config.py):
- `phrase_init` sets the initial W1 to phrase_init / (2r+1) per tap (default 1.0: a local mean of G). It is an
  initialisation only; W1 stays a free, trained parameter, so the model is unchanged.
- `loss(..., pos_weight=w)` weights positive BCE terms per code (label imbalance): (n_neg / n_pos) ** TrainConfig.pos_weight,
  0.25 by default; pos_weight 0 gives the paper's plain mean BCE.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from clinicode import kernels
from clinicode.config import LEAMConfig

_EPS = 1e-8


@dataclass
class LEAMOutput:
    """What one forward pass returns; attention tensors are only filled when asked for."""

    logits: torch.Tensor                  # [B, K]
    beta: torch.Tensor | None = None      # [B, L]    attention over positions (0 on padding)
    phrase: torch.Tensor | None = None    # [B, K, L] per-code phrase compatibility u (after ReLU, before max)
    doc: torch.Tensor | None = None       # [B, P]    z, the attended note vector


class LEAM(nn.Module):
    """Label-Embedding Attentive Model.

    Args:
        config: sizes and options; `config.vocab_size` rows in the word table, row 0 is PAD.
        fast: compute with the CPU kernels (same equations; see the module docstring). False: plain PyTorch.
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

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, *, return_attention: bool = False,
                table: torch.Tensor | None = None) -> LEAMOutput:
        """Score a batch of notes: G -> u -> m -> beta -> z -> f, the paper's equations in its order.

        Args:
            ids: [B, L] int64 token ids, 0 = PAD.
            mask: [B, L] bool, True for real tokens; every note needs at least one.
            return_attention: also return beta, u and z (for explanations).
            table: [V, K] `word_code_table()`, for inference: G is then looked up, not computed.
        Returns:
            LEAMOutput with logits [B, K] (and beta, u, z when asked for).
        """
        cfg = self.config
        fast = self.fast and ids.device.type == "cpu"
        E, C, W1, b1 = self.word_emb.weight, self.label_emb, self.phrase_w, self.phrase_b
        maskf = mask.unsqueeze(-1).to(E.dtype)                                        # [B, L, 1]

        # (1) G = cos(c_k, v_l): every code against every word; padded positions are 0.
        if table is not None:                                                         # inference: the stored table
            V = None                                                                  #   (word vectors never gathered)
            G = None if fast and cfg.compat == "cosine" else F.embedding(ids, table) * maskf  # [B, L, K]
        else:
            V = kernels.embed(E, ids) if fast else F.embedding(ids, E, padding_idx=0)  # [B, L, P]
            Cn = C / (C.norm(dim=-1, keepdim=True) + _EPS)                            # [K, P]   unit code vectors
            G = kernels.cosine_compat(V, Cn, mask) if fast else _cosine(V, Cn, mask)  # [B, L, K]

        # (2) u = ReLU(G[l-r : l+r] W1 + b1), phrase-level compatibility; (3) m_l = max_k u_kl.
        u: torch.Tensor | None
        if cfg.compat == "linear":                                                    # the paper's ablation
            u = G if G is not None else F.embedding(ids, table) * maskf               # [B, L, K]
            m = u.amax(dim=-1)                                                        # [B, L]
        elif fast and G is None:                                                      # table: gathered chunk by chunk
            m, u = kernels.table_phrase_max(ids, table, W1, b1, keep_u=return_attention)  # [B, L], [B, L, K] or None
        elif fast and not return_attention:
            u = None                                                                  # fused: u is never written
            m = kernels.phrase_max(G, W1, b1)                                         # [B, L]
        else:
            window = kernels.phrase_window(G, W1) if fast else _window(G, W1)         # [B, L, K] sum_j W1_j G[l+j-r]
            u = F.relu(window + b1)                                                   # [B, L, K]
            m = u.amax(dim=-1)                                                        # [B, L]

        # (4) beta = softmax over positions of m; padding never attended (max-subtracted inside softmax).
        beta = torch.softmax(m.masked_fill(~mask, float("-inf")), dim=-1)            # [B, L]

        # (5) z = sum_l beta_l v_l, with the unnormalised word vectors.
        if V is None:
            z = F.embedding_bag(ids, E, per_sample_weights=beta, mode="sum")         # [B, P]
        else:
            z = torch.bmm(beta.unsqueeze(1), V).squeeze(1)                            # [B, P]

        # (6) f: dropout -> Linear(P, H) -> ReLU -> dropout -> Linear(H, K).
        logits = self.head(z)                                                         # [B, K]
        if not return_attention:
            return LEAMOutput(logits=logits)
        return LEAMOutput(logits=logits, beta=beta, phrase=u.transpose(1, 2), doc=z)  # u as [B, K, L]

    @torch.no_grad()
    def word_code_table(self) -> torch.Tensor:
        """[V, K] cos(E_word[w], c_k) for every vocabulary word and code, 0 for PAD: G for any note is rows of it."""
        E, C = self.word_emb.weight, self.label_emb
        En = E / (E.norm(dim=-1, keepdim=True) + _EPS)                                # [V, P]
        Cn = C / (C.norm(dim=-1, keepdim=True) + _EPS)                                # [K, P]
        table = (En @ Cn.T).contiguous()                                              # [V, K]
        table[0] = 0.0
        return table

    def loss(self, logits: torch.Tensor, targets: torch.Tensor,
             pos_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Task loss plus lambda times the label-embedding regulariser.

        Args:
            logits: [B, K].
            targets: [B, K] float 0/1 (multi-label) or one-hot (single-label).
            pos_weight: optional [K] weights of the positive BCE terms (multi-label only; None = paper's loss).
        Returns:
            (total loss, task loss), both scalars.
        """
        if self.config.multilabel:
            task = F.binary_cross_entropy_with_logits(logits, targets, pos_weight=pos_weight)  # mean over B*K
        else:
            task = F.cross_entropy(logits, targets.argmax(dim=-1))
        if self.config.label_reg_weight == 0:
            return task, task
        label_logits = self.head(self.label_emb)                                      # [K, K] f(C)
        eye = torch.arange(self.config.n_labels, device=logits.device)                # [K] class k for c_k
        reg = F.cross_entropy(label_logits, eye)
        return task + self.config.label_reg_weight * reg, task

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, K] sigmoid (multi-label) or softmax (single-label) scores."""
        return torch.sigmoid(logits) if self.config.multilabel else torch.softmax(logits, dim=-1)


def _cosine(V: torch.Tensor, Cn: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """G[b, l, k] = cos(v_bl, c_k), 0 on padding: [B, L, P] words, [K, P] unit code vectors -> [B, L, K]."""
    Vn = V / (V.norm(dim=-1, keepdim=True) + _EPS)                                    # [B, L, P] unit word vectors
    return (Vn @ Cn.T) * mask.unsqueeze(-1).to(V.dtype)                               # [B, L, K]


def _window(G: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
    """sum_j W1[j] * G[:, l + j - r, :] with zero padding: one 1-channel convolution per code row, plain PyTorch."""
    B, L, K = G.shape
    r = W1.numel() // 2
    u = F.conv1d(G.transpose(1, 2).reshape(B * K, 1, L), W1.view(1, 1, -1), padding=r)  # [B*K, 1, L]
    return u.view(B, K, L).transpose(1, 2)                                            # [B, L, K]
