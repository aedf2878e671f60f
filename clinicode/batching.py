"""Token ids -> padded tensors and masks; length-bucketed batch orders that waste little padding."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from clinicode.constants import PAD_ID, UNK_ID


def pad_batch(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to the longest one.

    A note with no tokens gets a single UNK so that its attention is defined (softmax over one position).

    Returns:
        (ids [B, L] int64, mask [B, L] bool).
    """
    L = max(1, max((len(s) for s in seqs), default=1))
    ids = np.full((len(seqs), L), PAD_ID, dtype=np.int64)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, : len(s)] = s
        else:
            ids[i, 0] = UNK_ID
    t = torch.from_numpy(ids)
    mask = t != PAD_ID
    return t, mask


def bucketed_batches(lengths: Sequence[int], batch_size: int, *, rng: np.random.Generator | None,
                     pool: int = 50) -> list[np.ndarray]:
    """Index batches whose notes have similar lengths.

    With `rng`, notes are shuffled, cut into pools of `pool` batches, sorted by length inside each pool,
    batched, and the batches shuffled (random but with little padding). Without `rng`, notes are sorted by
    length (deterministic, for evaluation); callers restore the original order.
    """
    lengths = np.asarray(lengths)
    n = len(lengths)
    if rng is None:
        order = np.argsort(-lengths, kind="stable")
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    perm = rng.permutation(n)
    batches: list[np.ndarray] = []
    step = batch_size * pool
    for start in range(0, n, step):
        chunk = perm[start : start + step]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches
