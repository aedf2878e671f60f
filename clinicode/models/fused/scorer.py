"""The fused model's scorer: LEAM's, tfidf-lr's and the title match's logits on the same notes, fused per code, and
each code's highlighted words from all three (`FusedScorer.word_rows`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from clinicode.matching import blank_negated
from clinicode.models.fused.mentions import MENTION_WEIGHT
from clinicode.models.leam.scorer import LEAMScorer
from clinicode.models.spans import WORD_BAR, Span, word_spans
from clinicode.tokenizer import ClinicalTokenizer

# LEAM's least share of a code's evidence: on bc5cdr dev (top 50 and every code) a floor of 0.5 beat the code's own
# LEAM share w_k (hit@1 0.854 / 0.794 against 0.806 / 0.782), and LEAM's cosines alone lost at every code (0.750)
EVIDENCE_LEAM_FLOOR = 0.5
# a token inside one of the code's training mentions scores MENTION_FLOOR + its evidence / 10 (in [1.9, 2.1]), above
# every other token (at most 1): the mentions come first, in their own order. With WORD_BAR 0.8 the bar of a note
# holding a mention lies in [1.52, 1.68]: every mention token clears it and no other token does (`code_spans`)
MENTION_FLOOR = 2.0
MENTION_BAND = (MENTION_FLOOR - 0.1, MENTION_FLOOR + 0.1)  # where a mention token's weight lies
assert WORD_BAR * MENTION_BAND[1] < MENTION_BAND[0] and WORD_BAR * MENTION_BAND[0] > 1.0  # the two bands never mix


def title_features(lr: Any, mentions: Any, texts: Sequence[str], x: Any) -> Any:
    """[N, V] the notes' tf-idf rows the title match reads: X (their tf-idf rows) where nothing is negated, else the
    rows of the notes with their negated words blanked (`clinicode.matching.blank_negated`, in MENTIONS' language and
    when its matching negates): "no evidence of pneumonia" is no title match of Pneumonia."""
    if not mentions.matching.negation:
        return x
    blanked = [blank_negated(t, mentions.language) for t in texts]
    changed = [i for i, (b, t) in enumerate(zip(blanked, texts)) if b is not t]
    if not changed:
        return x
    import scipy.sparse as sp

    again = lr.transform([blanked[i] for i in changed]).astype(np.float32)          # [M, V]
    take = np.arange(len(texts))
    take[changed] = len(texts) + np.arange(len(changed))
    return sp.vstack([sp.csr_matrix(x), again]).tocsr()[take]                       # [N, V]


def bag_of_words(lr: Any, titles: Any, mentions: Any, texts: Sequence[str], phrases: Any = None,
                 phrase_weight: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """([N, K'] tfidf-lr's logits, [N, K] title matches) from one tf-idf pass over the notes (and one more over those
    holding a negated finding, for the title match: `title_features`); a code's title match counts MENTION_WEIGHT more
    where one of its training mentions (MENTIONS, a `MentionLexicon`) occurs in the note, and PHRASE_WEIGHT times
    that where its title is said there (PHRASES: a terminology's titles, `model.terminology_phrases`). TITLES: [K, V]
    the codes' titles as tfidf-lr's features (`title_rows`); tfidf-lr scores its own K' codes (K' < K: a
    terminology's codes follow them)."""
    x = lr.transform(list(texts)).astype(np.float32)                               # [N, V]
    z_lr = np.asarray(x @ lr.coef.T, dtype=np.float32) + lr.intercept               # [N, K']
    z_title = np.asarray((title_features(lr, mentions, texts, x) @ titles.T).todense(), dtype=np.float32)  # [N, K]
    for lexicon, weight in ((mentions, 1.0), (phrases, phrase_weight)):
        if lexicon is not None and len(lexicon) and weight:
            z_title += MENTION_WEIGHT * weight * lexicon.match(texts, z_title.shape[1])
    return z_lr, z_title


class _LogitsOf:
    """The LEAM as `LEAMScorer` uses it, but giving logits where it asks for probabilities."""

    def __init__(self, leam: Any) -> None:
        self._leam = leam

    def __getattr__(self, name: str) -> Any:
        return getattr(self._leam, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._leam(*args, **kwargs)

    def probabilities(self, logits: Any) -> Any:
        return logits


class _WithText:
    """A note's encoding (`ids`, `truncated`, `offsets`) with its text, which the tfidf-lr part reads."""

    __slots__ = ("enc", "text")

    def __init__(self, enc: Any, text: str) -> None:
        self.enc, self.text = enc, text

    @property
    def ids(self) -> Any:
        return self.enc.ids

    @property
    def truncated(self) -> bool:
        return self.enc.truncated

    @property
    def offsets(self) -> Any:
        return self.enc.offsets


class FusedScorer:
    """Scores notes with a loaded `FusedModel`; thread-safe as `LEAMScorer` is (no mutation after construction)."""

    # what a span's weight is, in words a coder reads under the highlighted note (`code_spans` states the scale)
    span_weight = ("the code's training mentions first, then the words its parts weigh most for it (LEAM's cosine "
                   "and the bag-of-words parts' weights, mixed)")

    def __init__(self, model: Any, tokenizer: ClinicalTokenizer, *, max_len: int, device: Any, batch_size: int,
                 memory_mb: int) -> None:
        self.model = model
        self.leam = LEAMScorer(_LogitsOf(model.leam), tokenizer, max_len=max_len, device=device,
                               batch_size=batch_size, memory_mb=memory_mb)
        self.plan = self.leam.plan
        self.terminology_codes = len(model.terminology)   # the last codes, scored from their titles alone
        self.tokenizer = tokenizer
        self.single_label = not model.leam.config.multilabel   # softmax scores: the top code is the prediction
        lr = model.lr
        where = {t: j for j, t in enumerate(lr.vocabulary)}
        # tokenizer id -> tfidf-lr feature (-1: a word the bag-of-words part does not know)
        self._feature = np.full(tokenizer.vocab_size, -1, dtype=np.int64)
        for word, i in tokenizer.vocab().items():
            self._feature[i] = where.get(word, -1)

    def probabilities(self, z: np.ndarray) -> np.ndarray:
        """[N, K] float32 scores of [N, K] fused logits (softmax for a single-label model, else sigmoid)."""
        if self.single_label:
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        return (0.5 * (1.0 + np.tanh(0.5 * np.clip(z, -30.0, 30.0)))).astype(np.float32)

    def bag_of_words(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """([N, K] tfidf-lr's logits, [N, K] title matches) of the notes (`bag_of_words`)."""
        return bag_of_words(self.model.lr, self.model.titles, self.model.mentions, texts, self.model.phrases,
                            self.model.phrase_weight)

    def logits(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([N, K] LEAM's logits, tfidf-lr's, title matches) of raw notes: the parts before fusion (ablations,
        studies)."""
        return (self.leam.score(texts), *self.bag_of_words(texts))

    def score(self, texts: Sequence[str]) -> np.ndarray:
        return self.probabilities(self.model.fuse(*self.logits(texts)))

    def encode(self, texts: Sequence[str], *, offsets: bool) -> list[_WithText]:
        return [_WithText(e, t) for e, t in zip(self.leam.encode(texts, offsets=offsets), texts)]

    def score_encoded(self, encs: Sequence[Any], *, attention: bool) -> tuple[np.ndarray, list[Any] | None]:
        z_leam, extras = self.leam.score_encoded([e.enc for e in encs], attention=attention)
        z_lr, z_title = self.bag_of_words([e.text for e in encs])
        return self.probabilities(self.model.fuse(z_leam, z_lr, z_title)), extras

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.leam.embed(texts)

    def label_embeddings(self) -> np.ndarray:
        """[K, P] LEAM's code vectors; a terminology's codes, which LEAM has no row for, get zero rows."""
        c = self.leam.label_embeddings()
        extra = len(self.model.terminology)
        return np.vstack([c, np.zeros((extra, c.shape[1]), dtype=c.dtype)]) if extra else c

    def lr_word_rows(self, tok_ids: np.ndarray, codes: list[int], *, matrix: Any = None) -> np.ndarray:
        """[len(codes), L] tfidf-lr's share of each code's logit carried by each token's word: coefficient x the
        word's tf-idf weight in this note (as tfidf-lr weighs it: sublinear tf, idf, unit norm over the note's known
        words); 0 for words it does not know. MATRIX: another [K, V] weight than the coefficients (the titles)."""
        lr = self.model.lr
        feats = self._feature[np.asarray(tok_ids, dtype=np.int64)]                    # [L]
        known = feats >= 0
        uniq, counts = np.unique(feats[known], return_counts=True)
        tf = (1.0 + np.log(counts)) if lr.config.sublinear_tf else counts.astype(np.float64)
        x = tf * lr.idf[uniq]
        norm = float(np.sqrt((x * x).sum())) or 1.0
        weight = dict(zip(uniq.tolist(), (x / norm).tolist()))
        xl = np.array([weight.get(int(f), 0.0) for f in feats])                       # [L] each token's weight
        out = np.zeros((len(codes), len(feats)), dtype=np.float64)
        if known.any():
            rows = lr.coef[np.asarray(codes)] if matrix is None else matrix[np.asarray(codes)].toarray()
            out[:, known] = rows[:, feats[known]] * xl[known]
        return out

    def word_rows(self, tok_ids: np.ndarray, codes: list[int], *, text: str | None = None,
                  offsets: Any = None) -> np.ndarray:
        """[len(codes), L] each token's evidence for each code: v_k x LEAM's cosine + (1 - v_k) x the bag-of-words
        parts' word contributions to the fused logit (c_k x tfidf-lr's + e_k x the title match's; positive part),
        each scaled by its note-best first, with v_k = max(w_k, EVIDENCE_LEAM_FLOOR): a code's words from the
        bag-of-words parts count at most as much as LEAM's (docs/accuracy-tuning.md, round 14: dev chose it).
        Given the note (TEXT, and OFFSETS, its tokens' character spans), a token inside one of the code's training
        mentions found in it scores above every other token (`MENTION_FLOOR`), so the mentions come first (round 15)."""
        k = np.asarray(codes, dtype=np.int64)
        parts = k < self.model.n_parts          # a terminology's codes have no LEAM or tfidf-lr row: their words are
        g = np.zeros((len(k), len(tok_ids)))    # the title match's alone
        if parts.any():
            g[parts] = self.leam.word_rows(tok_ids, k[parts].tolist())
        if not len(codes) or not g.shape[1]:
            return g.astype(np.float32)
        contrib = np.zeros_like(g)
        if parts.any():
            contrib[parts] = self.model.c[k[parts]][:, None] * self.lr_word_rows(tok_ids, k[parts].tolist())
        if self.model.titles is not None and self.model.e[k].any():
            contrib += self.model.e[k][:, None] * self.lr_word_rows(tok_ids, codes, matrix=self.model.titles)
        contrib = np.clip(contrib, 0.0, None)                                         # [n, L]
        gmax = g.max(axis=1, keepdims=True)
        cmax = contrib.max(axis=1, keepdims=True)
        gs = np.where(gmax > 0, g / np.where(gmax > 0, gmax, 1.0), g)
        cs = contrib / np.where(cmax > 0, cmax, 1.0)
        w = np.maximum(self.model.w[np.asarray(codes)], EVIDENCE_LEAM_FLOOR)[:, None]
        rows = w * gs + (1.0 - w) * cs                                                # [n, L], at most 1
        if text is not None and offsets is not None and (len(self.model.mentions) or len(self.model.phrases)):
            said = [a + b for a, b in zip(self.model.mentions.spans(text, codes),
                                          self.model.phrases.spans(text, codes))]
            inside = self._inside(said, offsets) > 0
            rows = np.where(inside, MENTION_FLOOR + np.clip(rows, -1.0, 1.0) / 10, rows)
        return rows.astype(np.float32)

    def code_spans(self, enc: Any, codes: Sequence[int], n: int, *, text: str) -> list[list[Span]]:
        """Each code's evidence spans in one encoded note (ENC, with offsets; TEXT, the note), best first, at most n
        (`word_spans` over `word_rows`).

        A span's weight is its best word's evidence for the code, on two bands that never mix: a word of an ordinary
        span weighs at most 1 (LEAM's cosine and the bag-of-words parts' contributions, each divided by its
        note-best, mixed by v_k: the code's best word scores 1 when both parts agree on it; a code whose words all
        have a cosine <= 0 shows its best word alone, in [-1, 1]); a word inside one of the code's training mentions
        weighs in `MENTION_BAND` ([1.9, 2.1]). So when the note holds a mention of the code, its spans are exactly
        the mentions found (all above `WORD_BAR` x the best, every other word below it), ranked by their words'
        evidence.
        """
        if not len(enc.ids) or not len(codes):
            return [[] for _ in codes]
        g = self.word_rows(np.asarray(enc.ids), list(codes), text=text, offsets=enc.offsets)  # [n_codes, L]
        return [word_spans(enc.offsets, row, n) for row in g]

    @staticmethod
    def _inside(spans: list[list[tuple[int, int]]], offsets: Any) -> np.ndarray:
        """[len(spans), L] 1.0 where the token's character span overlaps one of the row's spans."""
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        out = np.zeros((len(spans), len(offs)), dtype=np.float64)
        for r, row in enumerate(spans):
            for a, b in row:
                out[r, (offs[:, 0] < b) & (offs[:, 1] > a)] = 1.0
        return out
