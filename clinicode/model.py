"""LEAM, the Label-Embedding Attentive Model (Wang et al., ACL 2018), in one file that reads like the paper.

Knows nothing of files, MIMIC or the CLI. Notation follows the paper and DOMAIN.md section 8:
B notes, L tokens, P embedding dimensions, K labels, r the phrase radius (window 2r+1).

Choices where the paper and its reference code differ (stated here, as DOMAIN.md asks):
- Phrase step: the paper's form, u_l = ReLU(G[:, l-r:l+r] W1 + b1) with W1 in R^{2r+1} shared by all labels
  and b1 in R^K, implemented as one single-channel convolution applied to every label row of G ("same"
  zero padding). The reference TensorFlow code's full K->K convolution is not used (screened: it lost dev
  micro-F1 on cmc2007 and mtsamples, docs/accuracy-tuning.md).
- `compat="linear"` is the paper's ablation "LEAM (linear)": m_l = max_k G[k, l], no window, no ReLU.
- Multi-label notes use sigmoid + BCE; single-label notes softmax + CE (the paper's topic tasks).
- The label regulariser classifies each label vector c_k with the same head f as its own class
  (softmax cross-entropy against the identity), weight lambda (paper: 1).

Training details around the model (not in the paper; each is a config value, see clinicode/config.py):
- `phrase_init` sets the initial W1 to phrase_init / (2r+1) per tap (default 1.0: a local mean of G). It is an
  initialisation only; W1 stays a free, trained parameter, so the model is unchanged.
- `loss(..., pos_weight=w)` weights positive BCE terms per label (label imbalance, like class_weight="balanced"
  in the tf-idf baseline): (n_neg / n_pos) ** TrainConfig.pos_weight, 0.25 by default; pos_weight 0 gives the
  paper's plain mean BCE.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from clinicode.config import LEAMConfig
from clinicode.kernels import cosine_compat, embed, phrase_max, phrase_window

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
    """

    def __init__(self, config: LEAMConfig) -> None:
        super().__init__()
        self.config = config
        P, K = config.embed_dim, config.n_labels
        self.word_emb = nn.Embedding(config.vocab_size, P, padding_idx=0)           # V = E_word[x]
        self.label_emb = nn.Parameter(torch.randn(K, P) * 0.1)                      # C, same space as words
        self.phrase_w = nn.Parameter(torch.full((2 * config.radius + 1,), config.phrase_init / (2 * config.radius + 1)))  # W1
        self.phrase_b = nn.Parameter(torch.zeros(K))                                # b1
        self.head = nn.Sequential(                                                  # f: z -> logits
            nn.Dropout(config.dropout),
            nn.Linear(P, config.hidden_dim),
            nn.ReLU(),
            nn.Dropout(config.dropout),
            nn.Linear(config.hidden_dim, K),
        )

    def compatibility(self, words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """G: cosine similarity between every label and every word; padded positions are 0.

        Args:
            words: [B, L, P] word vectors.
            mask: [B, L] bool, True for real tokens.
        Returns:
            [B, K, L] float tensor.
        """
        words_n = words / (words.norm(dim=-1, keepdim=True) + _EPS)                 # [B, L, P]
        labels_n = self.label_emb / (self.label_emb.norm(dim=-1, keepdim=True) + _EPS)  # [K, P]
        sim = torch.einsum("blp,kp->bkl", words_n, labels_n)                        # [B, K, L] G
        return sim * mask.unsqueeze(1).to(sim.dtype)                                # [B, K, L] padding -> 0

    def phrase_scores(self, G: torch.Tensor) -> torch.Tensor:
        """u: ReLU(G[:, l-r:l+r] W1 + b1), the label-phrase compatibility (identity for `compat="linear"`).

        Args:
            G: [B, K, L] compatibility.
        Returns:
            [B, K, L].
        """
        if self.config.compat == "linear":
            return G
        B, K, L = G.shape
        r = self.config.radius
        u = F.conv1d(G.reshape(B * K, 1, L), self.phrase_w.view(1, 1, -1), padding=r)  # [B*K, 1, L]
        return F.relu(u.view(B, K, L) + self.phrase_b.view(1, K, 1))              # [B, K, L]

    def attend(self, words: torch.Tensor, mask: torch.Tensor,
               with_phrase: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """beta and z for a batch of notes.

        Computes exactly `phrase_scores(compatibility(words, mask))`, laid out for speed: G as one [B, L, K]
        matrix product (codes contiguous) with each word's 1/|v| (0 on padding) applied to the K-wide result
        instead of normalising P-wide vectors (`clinicode.kernels.cosine_compat`), and the window by
        `clinicode.kernels.phrase_window`; both have hand-written backward passes. Without `with_phrase`, u is
        never materialised: `clinicode.kernels.phrase_max` fuses window, bias, ReLU and the max over codes.

        Args:
            words: [B, L, P] word vectors.
            mask: [B, L] bool, True for real tokens; every note needs at least one.
            with_phrase: also return u (explanations); False is the faster training path.
        Returns:
            (beta [B, L], z [B, P], u [B, K, L] or None).
        """
        labels_n = self.label_emb / (self.label_emb.norm(dim=-1, keepdim=True) + _EPS)  # [K, P]
        G = cosine_compat(words, labels_n, mask)                                    # [B, L, K] cosine G, 0 on PAD
        if self.config.compat == "linear":
            u = G                                                                   # [B, L, K] the ablation
            m = u.amax(dim=2)                                                       # [B, L]    best label per position
        elif with_phrase:
            u = F.relu(phrase_window(G, self.phrase_w) + self.phrase_b)             # [B, L, K] window 2r+1
            m = u.amax(dim=2)                                                       # [B, L]    best label per position
        else:
            u = None                                                                # same m, without writing u
            m = phrase_max(G, self.phrase_w, self.phrase_b)                         # [B, L]    max_k ReLU(window + b1)
        m = m.masked_fill(~mask, float("-inf"))                                     # [B, L]    padding never attended
        beta = torch.softmax(m, dim=-1)                                             # [B, L]    max-subtracted inside
        z = torch.bmm(beta.unsqueeze(1), words).squeeze(1)                          # [B, P]    unnormalised word vectors
        return beta, z, (None if u is None else u.transpose(1, 2))                  # u as [B, K, L]

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """V = E_word[x]: [B, L] ids -> [B, L, P], as `self.word_emb(ids)` with a faster CPU backward."""
        return embed(self.word_emb.weight, ids, padding_idx=0)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, *, return_attention: bool = False) -> LEAMOutput:
        """Score a batch of notes.

        Args:
            ids: [B, L] int64 token ids, 0 = PAD.
            mask: [B, L] bool, True for real tokens.
            return_attention: also return beta, u and z (for explanations).
        Returns:
            LEAMOutput with logits [B, K].
        """
        words = self.lookup(ids)                                                    # [B, L, P]
        beta, z, u = self.attend(words, mask, with_phrase=return_attention)
        logits = self.head(z)                                                       # [B, K]
        if return_attention:
            return LEAMOutput(logits=logits, beta=beta, phrase=u, doc=z)
        return LEAMOutput(logits=logits)

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
        label_logits = self.head(self.label_emb)                                    # [K, K] f(C)
        eye = torch.arange(self.config.n_labels, device=logits.device)              # [K] class k for c_k
        reg = F.cross_entropy(label_logits, eye)
        return task + self.config.label_reg_weight * reg, task

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, K] sigmoid (multi-label) or softmax (single-label) scores."""
        return torch.sigmoid(logits) if self.config.multilabel else torch.softmax(logits, dim=-1)
