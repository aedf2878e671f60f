"""LEAM's scorer: the model's own forward over length-bucketed batches, as `clinicode.models.leam.memory.plan` decides.

Few codes: G is a row gather of the stored [V, K] word-code table; many: the codes are scored a block at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from clinicode.batching import bucketed_batches, pad_batch
from clinicode.models.leam.memory import MemoryPlan, plan
from clinicode.models.leam.model import unit_rows
from clinicode.models.spans import Span, word_spans
from clinicode.tokenizer import ClinicalTokenizer

_PIPELINE_CHUNK = 256  # notes tokenised ahead while the model scores the previous chunk


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op threads (None: leave as is)."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class LEAMScorer:
    """Scores notes with a loaded LEAM and its tokenizer. Thread-safe for concurrent calls (no mutation).

    Args:
        model: the LEAM, in eval mode, on DEVICE.
        tokenizer: the checkpoint's tokenizer.
        max_len: tokens kept per note (the checkpoint's training option).
    """

    # what a span's weight is, in words a coder reads under the highlighted note (`code_spans` states the scale)
    span_weight = "cosine with the code's vector"
    terminology_codes = 0    # every code learnt from notes (`Scorer`)

    def __init__(self, model: Any, tokenizer: ClinicalTokenizer, *, max_len: int, device: torch.device | str,
                 batch_size: int, memory_mb: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.n_labels = model.config.n_labels
        self.single_label = not model.config.multilabel   # softmax scores: the top code is the prediction
        self.plan: MemoryPlan = plan(model.config, batch_size=batch_size, max_len=max_len, budget_mb=memory_mb,
                                     device=self.device.type, training=False, fast=model.fast)
        self._table: torch.Tensor | None = model.word_code_table() if self.plan.use_table else None  # [V, K] G

    def _threads(self):
        return _torch_threads(1 if self.device.type == "cpu" else None)

    def _run(self, texts: Sequence[str], *, want_doc: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Scores (and the attended note vectors) of raw notes; notes keep their input order.

        Tokenisation (Rust, all cores, GIL released) of the next chunk overlaps the model on the current one,
        and on CPU the model runs on one thread: its ops are small and cache-resident, and two threads
        synchronising on every op were several times slower on a 2-core machine.
        """
        n = len(texts)
        scores = np.zeros((n, self.n_labels), dtype=np.float32)
        docs = np.zeros((n, self.model.config.embed_dim), dtype=np.float32) if want_doc else None
        tok = self.tokenizer
        starts = list(range(0, n, _PIPELINE_CHUNK))
        with ThreadPoolExecutor(max_workers=1) as pool, self._threads(), torch.inference_mode():
            pending = pool.submit(tok.encode, texts[0:_PIPELINE_CHUNK], offsets=False)
            for c, start in enumerate(starts):
                chunk = pending.result()
                if c + 1 < len(starts):
                    nxt = starts[c + 1]
                    pending = pool.submit(tok.encode, texts[nxt:nxt + _PIPELINE_CHUNK], offsets=False)
                self._forward([e.ids for e in chunk], start, scores, docs=docs)
        return scores, docs

    def _forward(self, id_lists: Sequence[Sequence[int]], start: int, scores: np.ndarray, *,
                 docs: np.ndarray | None = None, extras: list[Any] | None = None) -> None:
        """The model's forward (as the memory plan says) over length-bucketed batches of encoded notes; fills rows
        start.. of `scores` (and `docs`, and each note's beta in `extras`)."""
        model = self.model
        lengths = [len(x) for x in id_lists]
        for batch in bucketed_batches(lengths, self.batch_size, rng=None):
            ids, mask = pad_batch([id_lists[i] for i in batch])
            out = model(ids.to(self.device), mask.to(self.device),
                        return_attention=extras is not None or docs is not None,
                        table=self._table, block=self.plan.block, order=self.plan.order)
            rows = batch + start
            scores[rows] = model.probabilities(out.logits).float().cpu().numpy()
            if docs is not None:
                docs[rows] = out.doc.float().cpu().numpy()
            if extras is not None:
                beta_np = out.beta.float().cpu().numpy()
                for j, i in enumerate(batch):
                    extras[start + i] = beta_np[j, :lengths[i]]

    def score(self, texts: Sequence[str]) -> np.ndarray:
        return self._run(texts)[0]

    def encode(self, texts: Sequence[str], *, offsets: bool) -> list[Any]:
        return self.tokenizer.encode(texts, offsets=offsets)

    def score_encoded(self, encs: Sequence[Any], *, attention: bool) -> tuple[np.ndarray, list[Any] | None]:
        scores = np.zeros((len(encs), self.n_labels), dtype=np.float32)
        extras: list[Any] | None = [None] * len(encs) if attention else None
        with self._threads(), torch.inference_mode():
            self._forward([e.ids for e in encs], 0, scores, extras=extras)
        return scores, extras

    def score_ids(self, id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        scores = np.zeros((len(id_lists), self.n_labels), dtype=np.float32)
        with self._threads(), torch.inference_mode():
            self._forward(id_lists, 0, scores)
        return scores

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """[N, P] attended note vectors z."""
        return self._run(texts, want_doc=True)[1]  # type: ignore[return-value]  (want_doc: never None)

    def label_embeddings(self) -> np.ndarray:
        """[K, P] the learned code vectors C."""
        return self.model.label_emb.detach().float().cpu().numpy()

    def word_rows(self, tok_ids: np.ndarray, codes: list[int], *, text: str | None = None,
                  offsets: Any = None) -> np.ndarray:
        """G[k, l] = cos(v_l, c_k) of one note's tokens for the given codes (LEAM's first step, docs/domain.md
        section 8): [len(codes), L] float32, from the checkpoint's word and code vectors alone (TEXT and OFFSETS,
        the note and its tokens' spans, are not needed)."""
        model = self.model
        with self._threads(), torch.inference_mode():
            ids = torch.as_tensor(tok_ids, dtype=torch.long, device=self.device)
            V = model.word_emb.weight[ids]                                                # [L, P]
            C = model.label_emb[torch.as_tensor(codes, dtype=torch.long, device=self.device)]  # [n, P]
            return (unit_rows(C) @ unit_rows(V).T).float().cpu().numpy()                  # [n, L]

    def code_spans(self, enc: Any, codes: Sequence[int], n: int, *, text: str) -> list[list[Span]]:
        """Each code's evidence spans in one encoded note (ENC, with offsets), best first, at most n (`word_spans`).

        A span's weight is its best word's cosine with the code vector, cos(v_l, c_k) in [-1, 1] (LEAM's G, as
        `word_rows` gives it); a span holds the words at least `WORD_BAR` of the note's best for the code. TEXT is
        not read (the fused model's scorer reads it).
        """
        if not len(enc.ids) or not len(codes):
            return [[] for _ in codes]
        g = self.word_rows(np.asarray(enc.ids), list(codes))                               # [n_codes, L]
        return [word_spans(enc.offsets, row, n) for row in g]
