"""Word-level tokenizer (HuggingFace `tokenizers`) reproducing CAML's normalisation, with character offsets.

Fitted on training texts only; saved as tokenizer.json. Ids: PAD = 0, UNK = 1, then words by
training-document frequency (descending), ties alphabetical.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

from clinicode.constants import DEFAULT_MAX_LEN, PAD_ID, PAD_TOKEN, UNK_TOKEN
from clinicode.data.text import tokenize
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


def _build(vocab: dict[str, int], max_len: int) -> Tokenizer:
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Split(_SPLIT, behavior="removed")
    tok.enable_truncation(max_length=max_len)
    return tok


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
    def fit(cls, texts: Iterable[str], *, min_doc_freq: int = 3, max_len: int = DEFAULT_MAX_LEN) -> "ClinicalTokenizer":
        """Vocabulary = tokens found in at least `min_doc_freq` of `texts` (document frequency, not counts).

        Args:
            texts: training notes only (never dev or test).
            min_doc_freq: CAML uses 3.
            max_len: truncation length stored in tokenizer.json.
        Raises:
            DataFormatError: if no token reaches `min_doc_freq`.
        """
        df: Counter[str] = Counter()
        n_docs = 0
        for text in texts:
            df.update(set(tokenize(text)))
            n_docs += 1
        words = sorted((w for w, c in df.items() if c >= min_doc_freq), key=lambda w: (-df[w], w))
        if not words:
            raise DataFormatError(
                f"no word occurs in at least {min_doc_freq} of the {n_docs} training notes; "
                "pass more training data or a lower --min-doc-freq."
            )
        vocab = {PAD_TOKEN: PAD_ID, UNK_TOKEN: 1, **{w: i + 2 for i, w in enumerate(words)}}
        return cls(_build(vocab, max_len), max_len=max_len)

    @classmethod
    def load(cls, path: Path) -> "ClinicalTokenizer":
        """Read tokenizer.json (never from a hub)."""
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust side raises a plain Exception
            raise CheckpointError(f"{path}: not a readable tokenizer.json ({err}); re-create it with `clinicode train`.") from err
        trunc = tok.truncation
        max_len = int(trunc["max_length"]) if trunc else DEFAULT_MAX_LEN
        if tok.token_to_id(PAD_TOKEN) != PAD_ID or tok.token_to_id(UNK_TOKEN) != 1:
            raise CheckpointError(f"{path}: expected {PAD_TOKEN}=0 and {UNK_TOKEN}=1 in the vocabulary; not a clinicode tokenizer.")
        return cls(tok, max_len=max_len)

    def save(self, path: Path) -> None:
        from clinicode.artifacts import write_bytes_atomic

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
        if offsets:
            encs = self._tok.encode_batch(texts, add_special_tokens=False)
            return [Encoded(e.ids, [tuple(o) for o in e.offsets], bool(e.overflowing)) for e in encs]
        encs = self._tok.encode_batch_fast(texts, add_special_tokens=False)
        return [Encoded(e.ids, [], bool(e.overflowing)) for e in encs]

    def encode_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.encode(texts)]
