"""Initial vectors: word2vec on training text, a user's word2vec/GloVe file, OOV rows, label vectors."""

import numpy as np
import pytest

from clinicode.constants import PAD_ID, UNK_ID
from clinicode.embeddings import label_vectors, read_vector_file, train_word2vec
from clinicode.errors import DataFormatError
from clinicode.tokenizer import ClinicalTokenizer

DOCS = ["heart failure with reduced ejection fraction", "atrial fibrillation and heart failure",
        "acute kidney failure", "heart rate controlled"] * 3


@pytest.fixture(scope="module")
def tok():
    return ClinicalTokenizer.fit(DOCS, min_doc_freq=3)


def test_word2vec_rows_follow_the_vocabulary_and_repeat_for_a_seed(tok):
    tokens = ClinicalTokenizer.fit_tokens(DOCS, min_doc_freq=3)[1]
    a = train_word2vec(tokens, tok, dim=16, epochs=2, seed=5)
    b = train_word2vec(tokens, tok, dim=16, epochs=2, seed=5)
    assert a.shape == (tok.vocab_size, 16) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not a[PAD_ID].any(), "PAD is a zero row"
    assert np.abs(a[tok.token_id("heart")]).max() > 0.01  # a trained vector, not the OOV draw


@pytest.mark.parametrize("header", [True, False])
def test_text_vector_files_word2vec_and_glove(tok, tmp_path, header):
    path = tmp_path / "vecs.txt"
    lines = (["2 3"] if header else []) + ["Heart 1 2 3", "failure 4 5 6", "unrelated 7 8 9"]
    path.write_text("\n".join(lines) + "\n")
    mat = read_vector_file(path, tok, seed=1)
    assert mat.shape == (tok.vocab_size, 3)
    np.testing.assert_array_equal(mat[tok.token_id("heart")], [1, 2, 3])  # words are lowercased to match
    np.testing.assert_array_equal(mat[tok.token_id("failure")], [4, 5, 6])
    oov = mat[tok.token_id("atrial")]
    assert np.all(np.abs(oov) <= 0.01), "words without a vector are drawn from U[-0.01, 0.01]"
    assert not mat[PAD_ID].any()


def test_bad_vector_files_are_refused(tok, tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        read_vector_file(tmp_path / "missing.txt", tok)
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("heart 1 2 3\nfailure 4 5\n")
    with pytest.raises(DataFormatError, match="line 2 has 2 values, earlier lines 3"):
        read_vector_file(ragged, tok)
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("zebra 1 2\n")
    with pytest.raises(DataFormatError, match="none of the .* vocabulary words has a vector"):
        read_vector_file(foreign, tok)


def test_label_vectors_average_description_words(tok):
    words = np.arange(tok.vocab_size * 2, dtype=np.float32).reshape(tok.vocab_size, 2)
    vecs, n_init = label_vectors(["Heart failure", "zzz unknown", ""], words, tok, seed=0)
    expected = words[[tok.token_id("heart"), tok.token_id("failure")]].mean(axis=0)
    np.testing.assert_allclose(vecs[0], expected)
    assert n_init == 1, "labels without known description words fall back to random vectors"
    assert UNK_ID not in (tok.token_id("heart"), tok.token_id("failure"))


def test_word2vec_vectors_repeat_across_processes_whatever_the_hash_seed(tmp_path):
    """Runs repeat exactly from --seed alone: Python's per-process string-hash seed does not enter the vectors."""
    import os
    import subprocess
    import sys

    code = ("import hashlib\nfrom clinicode.embeddings import train_word2vec\nfrom clinicode.tokenizer "
            "import ClinicalTokenizer\n"
            "texts = [f'patient {w} chest pain fever {i % 7} cough {w}{i % 5}' for i, w in "
            "enumerate(['a1', 'b2', 'c3'] * 40)]\n"
            "tok, tokens = ClinicalTokenizer.fit_tokens(texts, min_doc_freq=1)\n"
            "print(hashlib.sha256(train_word2vec(tokens, tok, dim=8, epochs=1, seed=5).tobytes()).hexdigest())\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in (1, 2)}
    assert len(outs) == 1 and len(next(iter(outs)).strip()) == 64
