"""Initial word and label vectors: word2vec on the training split (gensim CBOW) or a user's text vector file.

`initial_vectors` is what training calls; rows follow the tokenizer's ids (its docstring tells the fill-ins)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from clinicode.constants import PAD_ID, UNK_ID
from clinicode.data.text import tokenize
from clinicode.errors import ConfigError, DataFormatError
from clinicode.tokenizer import ClinicalTokenizer, TrainingTokens

log = logging.getLogger(__name__)


def train_word2vec(
    tokens: TrainingTokens, tokenizer: ClinicalTokenizer, *, dim: int = 100, epochs: int = 5, seed: int = 1337,
    window: int = 5,
) -> np.ndarray:
    """CBOW word2vec (CAML's settings: 100-d, window 5, min_count 0, 5 epochs) on training notes only.

    One worker thread, so the vectors repeat exactly for a seed.

    Args:
        tokens: the training notes as `ClinicalTokenizer.fit_tokens` read them (whole notes, every word, in pieces
            below gensim's 10,000-word limit).
        tokenizer: supplies the vocabulary; rows are in its id order.
    Returns:
        [vocab_size, dim] float32 matrix.
    """
    from gensim.models import Word2Vec  # heavy import; only training needs it

    model = Word2Vec(sentences=tokens.sentences(), vector_size=dim, window=window, min_count=0, sg=0, workers=1,
                     epochs=epochs, seed=seed)
    kv = model.wv
    return _matrix_from_lookup(tokenizer, dim, lambda w: kv[w] if w in kv.key_to_index else None, seed=seed)


def read_vector_file(path: Path, tokenizer: ClinicalTokenizer, *, seed: int = 1337) -> np.ndarray:
    """Rows for the vocabulary from a word2vec or GloVe text file (optionally .gz).

    Raises:
        DataFormatError: missing or malformed file, or no vocabulary word found in it.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"--embeddings {path}: no such file; give 'w2v', 'random' or a word2vec/GloVe text file.")
    vocab = tokenizer.vocab()
    found: dict[str, np.ndarray] = {}
    dim = None
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f):
                parts = line.rstrip().split(" ")
                if n == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                    continue  # word2vec header: "<count> <dim>"
                if len(parts) < 2:
                    continue
                if dim is None:
                    dim = len(parts) - 1
                if len(parts) - 1 != dim:
                    raise DataFormatError(
                        f"{path}: line {n + 1} has {len(parts) - 1} values, earlier lines {dim}; expected one word "
                        f"and {dim} numbers per line."
                    )
                word = parts[0].lower()
                if word in vocab and word not in found:
                    found[word] = np.asarray(parts[1:], dtype=np.float32)
    except (OSError, ValueError, EOFError) as err:
        raise DataFormatError(f"{path}: cannot read word vectors ({err}); expected a "
                              "word2vec/GloVe text file.") from err
    if dim is None or not found:
        raise DataFormatError(f"{path}: none of the {len(vocab)} vocabulary words has a vector; is it the right file?")
    log.info("read %d of %d vocabulary vectors (%d-d) from %s", len(found), len(vocab), dim, path.name)
    return _matrix_from_lookup(tokenizer, dim, found.get, seed=seed)


def random_matrix(tokenizer: ClinicalTokenizer, dim: int, *, seed: int = 1337) -> np.ndarray:
    """[vocab_size, dim] small random vectors (no pretraining)."""
    return _matrix_from_lookup(tokenizer, dim, lambda w: None, seed=seed, scale=0.1)


def _matrix_from_lookup(tokenizer: ClinicalTokenizer, dim: int, lookup, *, seed: int,
                        scale: float = 0.01) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mat = rng.uniform(-scale, scale, size=(tokenizer.vocab_size, dim)).astype(np.float32)
    for word, idx in tokenizer.vocab().items():
        if idx in (PAD_ID, UNK_ID):
            continue
        vec = lookup(word)
        if vec is not None:
            mat[idx] = vec
    mat[PAD_ID] = 0.0
    return mat


def label_vectors(
    descriptions: Sequence[str], word_matrix: np.ndarray, tokenizer: ClinicalTokenizer, *, seed: int = 1337
) -> tuple[np.ndarray, int]:
    """Mean word vector of each label's description; random N(0, 0.1^2) rows when no description word is known.

    Args:
        descriptions: one text per label (a description, or the label's own name).
        word_matrix: [vocab_size, P] initial word vectors.
    Returns:
        ([K, P] float32 label vectors, number of labels initialised from words).
    """
    rng = np.random.default_rng(seed + 1)
    K, P = len(descriptions), word_matrix.shape[1]
    out = (rng.standard_normal((K, P)) * 0.1).astype(np.float32)
    n_init = 0
    for k, desc in enumerate(descriptions):
        ids = [i for i in (tokenizer.token_id(w) for w in tokenize(desc or ""))
               if i is not None and i not in (PAD_ID, UNK_ID)]
        if ids:
            out[k] = word_matrix[ids].mean(axis=0)
            n_init += 1
    return out, n_init


# Automatic word2vec passes: about this many token updates in total, within [min, max] passes.
W2V_TARGET_TOKENS = 30_000_000
W2V_AUTO_EPOCHS = (5, 30)


def auto_w2v_epochs(n_tokens: int) -> int:
    """word2vec passes for `w2v_epochs=0`: ceil(30M / training tokens), clamped to [5, 30].

    `n_tokens` counts whole notes (word2vec sees them whole, not truncated). Small sets (hoc, cmc2007, mtsamples:
    15k-0.9M tokens) get 30 passes, which lifted hoc test micro-F1 by about 0.04; MIMIC-sized training sets
    (>= 6M tokens) keep CAML's 5.
    """
    lo, hi = W2V_AUTO_EPOCHS
    return int(min(hi, max(lo, -(-W2V_TARGET_TOKENS // max(n_tokens, 1)))))


def initial_vectors(
    source: str, tokens: TrainingTokens, tokenizer: ClinicalTokenizer, descriptions: Sequence[str], *, dim: int,
    seed: int, w2v_epochs: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """The word and code vectors training starts from (the paper: pretrained words, codes from their names' words).

    Rows follow the tokenizer's ids; PAD is a zero row; words without a vector are drawn from U[-0.01, 0.01]. A code's
    vector is the mean of its description's word vectors (random when none is known).

    Args:
        source: "w2v" (word2vec on `texts`), "random", or the path of a word2vec/GloVe text file.
        tokens: the training notes, tokenised (only "w2v" reads them).
        descriptions: one text per code (its description, or the code itself when none is known).
        dim: the vector size P.
        w2v_epochs: word2vec passes; 0 = `auto_w2v_epochs`.
    Returns:
        ([V, P] word vectors, [K, P] code vectors, {"w2v_epochs"?, "label_init_from_words"}) for the manifest.
    Raises:
        ConfigError: a vector file whose size differs from `dim`.
        DataFormatError: an unreadable vector file.
    """
    info: dict = {}
    if source == "w2v":
        info["w2v_epochs"] = w2v_epochs or auto_w2v_epochs(tokens.n_tokens)
        words = train_word2vec(tokens, tokenizer, dim=dim, epochs=info["w2v_epochs"], seed=seed)
    elif source == "random":
        words = random_matrix(tokenizer, dim, seed=seed)
    else:
        words = read_vector_file(Path(source), tokenizer, seed=seed)
        if words.shape[1] != dim:
            raise ConfigError(f"--embeddings {source} has {words.shape[1]}-d vectors but --embed-dim "
                              f"is {dim}; make them match.")
    codes, info["label_init_from_words"] = label_vectors(descriptions, words, tokenizer, seed=seed)
    return words, codes, info
