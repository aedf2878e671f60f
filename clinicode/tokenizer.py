"""Word-level tokenizer (HuggingFace `tokenizers`) reproducing CAML's normalisation, with character offsets.

Fitted on training texts only; saved as tokenizer.json. Ids: PAD 0, UNK 1, then words by document frequency."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from clinicode.constants import DEFAULT_MAX_LEN, PAD_ID, PAD_TOKEN, UNK_ID, UNK_TOKEN
from clinicode.errors import CheckpointError, DataFormatError

# Remove every non-word run and every all-numeric word: what is left are CAML's \w+ tokens minus those for
# which str.isnumeric() is true. Spelled with Unicode classes (\p{L}, \p{N}) so superscripts, fractions and
# Roman numerals count as numeric, as in Python; U+0307 stays word-internal because lowercasing 'İ' yields
# 'i' + U+0307.
_W = r"[\p{L}\p{N}_\x{0307}]"
_SPLIT = Regex(rf"[^\p{{L}}\p{{N}}_\x{{0307}}]+|(?<!{_W})\p{{N}}+(?!{_W})")


@dataclass(frozen=True)
class Encoded:
    """One encoded note.

    ids: token ids, at most max_len; offsets: (start, end) character spans into the original text
    (empty when offsets were not asked for); truncated: the note had more than max_len tokens.
    """

    ids: list[int]
    offsets: list[tuple[int, int]]
    truncated: bool


def _build(vocab: dict[str, int] | None, max_len: int | None) -> Tokenizer:
    tok = Tokenizer(models.WordLevel(vocab=vocab,
                                     unk_token=UNK_TOKEN) if vocab else models.WordLevel(unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Split(_SPLIT, behavior="removed")
    if max_len is not None:
        tok.enable_truncation(max_length=max_len)
    return tok


_ENCODE_CHUNK = 512     # notes per batched encode when only ids are kept
_W2V_MAX_WORDS = 10_000  # gensim silently truncates longer "sentences"; notes are cut into pieces below this


@dataclass
class TrainingTokens:
    """The training notes, tokenised once by `ClinicalTokenizer.fit_tokens`.

    words: [W] every distinct word of the training notes (object array), by its id in `notes`.
    notes: per note, its words as ids into `words`, whole (not truncated).
    to_vocab: [W] the tokenizer's id of each word (UNK for words below the document-frequency cut).
    max_len: tokens kept per note.
    """

    words: np.ndarray
    notes: list[np.ndarray]
    to_vocab: np.ndarray
    max_len: int

    @property
    def n_tokens(self) -> int:
        """Words in the whole notes (word2vec's corpus size)."""
        return int(sum(len(a) for a in self.notes))

    def ids(self) -> list[np.ndarray]:
        """Each note as the tokenizer encodes it: vocabulary ids, first `max_len` tokens (int32 arrays)."""
        return [self.to_vocab[a[: self.max_len]] for a in self.notes]

    def sentences(self) -> "_Sentences":
        """The whole notes as lists of words, in pieces below gensim's 10,000-word limit; iterable many times."""
        return _Sentences(self)


class _Sentences:
    def __init__(self, tokens: TrainingTokens) -> None:
        self.tokens = tokens

    def __iter__(self) -> Iterator[list[str]]:
        words = self.tokens.words
        for a in self.tokens.notes:
            for i in range(0, len(a), _W2V_MAX_WORDS):
                yield words[a[i:i + _W2V_MAX_WORDS]].tolist()


CHARS_PER_TOKEN = 64  # characters read per kept token at most: a note longer than max_len * 64 is cut before tokenising


class ClinicalTokenizer:
    """CAML-style word tokenizer backed by a Rust `tokenizers.Tokenizer`.

    Args:
        tokenizer: a WordLevel tokenizer built by `fit` or read by `load`.
        max_len: tokens kept per note; longer notes are cut (and flagged as truncated).
    """

    def __init__(self, tokenizer: Tokenizer, *, max_len: int = DEFAULT_MAX_LEN) -> None:
        self._tok = tokenizer
        self.max_len = max_len
        self._tok.enable_truncation(max_length=max_len)
        self._tok.no_padding()

    @classmethod
    def fit(cls, texts: Sequence[str], *, min_doc_freq: int = 3, max_len: int = DEFAULT_MAX_LEN) -> "ClinicalTokenizer":
        """Vocabulary = tokens found in at least `min_doc_freq` of `texts` (document frequency, not counts).

        Args:
            texts: training notes only (never dev or test).
            min_doc_freq: CAML uses 3.
            max_len: truncation length stored in tokenizer.json.
        Raises:
            DataFormatError: if no token reaches `min_doc_freq`.
        """
        return cls.fit_tokens(texts, min_doc_freq=min_doc_freq, max_len=max_len)[0]

    @classmethod
    def fit_tokens(cls, texts: Sequence[str], *, min_doc_freq: int = 3,
                   max_len: int = DEFAULT_MAX_LEN) -> tuple["ClinicalTokenizer", TrainingTokens]:
        """`fit`, plus the training notes as tokens for training to reuse, so no note is tokenised twice.

        One pass in Rust on all cores: `tokenizers`' trainer collects every word, one batched encode gives each note's
        words as ids, and document frequencies come from those ids with numpy. `TrainingTokens` holds the kept ids of
        every note (epochs), their count and the words themselves (word2vec)."""
        texts = list(texts)
        every = _build(None, None)                                    # all words: the trainer's vocabulary, uncut
        # The trainer's vocab_size defaults to 30,000 and silently drops the rest; ask for every word.
        trainer = trainers.WordLevelTrainer(vocab_size=2**31 - 1, min_frequency=0, show_progress=False,
                                            special_tokens=[PAD_TOKEN, UNK_TOKEN])
        every.train_from_iterator(texts, trainer, length=len(texts))
        notes = [np.asarray(e.ids, dtype=np.int32)                    # a chunk at a time: an Encoding holds ~80
                 for i in range(0, len(texts), _ENCODE_CHUNK)         # bytes per token (strings, offsets, masks)
                 for e in every.encode_batch_fast(texts[i:i + _ENCODE_CHUNK], add_special_tokens=False)]
        n_words = every.get_vocab_size()
        df = np.zeros(n_words, dtype=np.int64)                        # notes each word occurs in
        for a in notes:
            df[np.unique(a)] += 1
        words = np.empty(n_words, dtype=object)
        for w, i in every.get_vocab().items():
            words[i] = w
        kept = [i for i in np.flatnonzero(df >= min_doc_freq).tolist() if i > 1]  # never PAD or UNK themselves
        if not kept:
            raise DataFormatError(
                f"no word occurs in at least {min_doc_freq} of the {len(texts)} training notes; "
                "pass more training data or a lower --min-doc-freq."
            )
        kept.sort(key=lambda i: (-df[i], words[i]))
        to_vocab = np.full(n_words, UNK_ID, dtype=np.int32)
        to_vocab[kept] = np.arange(2, len(kept) + 2, dtype=np.int32)
        to_vocab[PAD_ID] = PAD_ID
        vocab = {PAD_TOKEN: PAD_ID, UNK_TOKEN: UNK_ID, **{words[i]: n + 2 for n, i in enumerate(kept)}}
        return cls(_build(vocab, max_len), max_len=max_len), TrainingTokens(words, notes, to_vocab, max_len)

    @classmethod
    def load(cls, path: Path) -> "ClinicalTokenizer":
        """Read tokenizer.json (never from a hub)."""
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust side raises a plain Exception
            raise CheckpointError(f"{path}: not a readable tokenizer.json ({err}); re-create "
                                  "it with `clinicode train`.") from err
        trunc = tok.truncation
        max_len = int(trunc["max_length"]) if trunc else DEFAULT_MAX_LEN
        if tok.token_to_id(PAD_TOKEN) != PAD_ID or tok.token_to_id(UNK_TOKEN) != 1:
            raise CheckpointError(f"{path}: expected {PAD_TOKEN}=0 and {UNK_TOKEN}=1 in the vocabulary; "
                                  "not a clinicode tokenizer.")
        return cls(tok, max_len=max_len)

    def save(self, path: Path) -> None:
        from clinicode.files import write_bytes_atomic

        write_bytes_atomic(Path(path), self._tok.to_str(pretty=False).encode("utf-8"))

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def vocab(self) -> dict[str, int]:
        return self._tok.get_vocab()

    def token_id(self, word: str) -> int | None:
        return self._tok.token_to_id(word)

    def encode(self, texts: Sequence[str], *, offsets: bool = False) -> list[Encoded]:
        """Encode a batch of notes in parallel (Rust, all cores).

        Args:
            texts: raw notes.
            offsets: also return character spans (slower; needed for highlighting).
        Returns:
            one Encoded per note, in order.
        """
        texts = list(texts)
        if not texts:
            return []
        # max_len tokens never need more than CHARS_PER_TOKEN characters each: a longer note is cut first (and flagged
        # truncated), so a 50 MB note costs what its head costs instead of gigabytes of token objects.
        cap = self.max_len * CHARS_PER_TOKEN
        cut = [len(t) > cap for t in texts]
        texts = [t[:cap] if c else t for t, c in zip(texts, cut)]
        if offsets:
            encs = self._tok.encode_batch(texts, add_special_tokens=False)
            return [Encoded(e.ids, [tuple(o) for o in e.offsets], bool(e.overflowing) or c) for e, c in zip(encs, cut)]
        encs = self._tok.encode_batch_fast(texts, add_special_tokens=False)
        return [Encoded(e.ids, [], bool(e.overflowing) or c) for e, c in zip(encs, cut)]

    def encode_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each note (int32 arrays: a tenth of the memory of lists of Python ints), encoded a chunk of
        notes at a time so the Rust-side encodings never pile up."""
        texts = list(texts)
        return [np.asarray(e.ids, dtype=np.int32) for i in range(0, len(texts), _ENCODE_CHUNK)
                for e in self.encode(texts[i:i + _ENCODE_CHUNK])]
