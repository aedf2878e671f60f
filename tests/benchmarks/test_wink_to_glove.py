"""benchmarks/wink_to_glove.py: the npm GloVe package becomes a file that `--embeddings` reads as it is."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from clinicode.embeddings import read_vector_file
from clinicode.tokenizer import ClinicalTokenizer

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "wink_to_glove.py"
_spec = importlib.util.spec_from_file_location("wink_to_glove", _SCRIPT)
wink = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wink)


def _wink_json(path: Path) -> None:
    # the package's layout: each word's 3 values, then its L2 norm and its index (bookkeeping, not vector values)
    vectors = {"heart": [0.5, -1.25, 2.0, 2.4, 0], "failure": [1.0, 0.0, -3.0, 3.2, 1], "two words": [9, 9, 9, 15.6, 2]}
    path.write_text(json.dumps({"precision": 8, "l2NormIndex": 3, "wordIndex": 4, "size": 3, "dimensions": 3,
                                "words": list(vectors), "vectors": vectors, "unkVector": [0, 0, 0, 0, -1]}))


def test_converted_vectors_are_read_by_clinicode_with_the_bookkeeping_dropped(tmp_path):
    src, out = tmp_path / "wink.json", tmp_path / "glove.txt"
    _wink_json(src)
    assert wink.convert(src, out) == 2, "a word with a space cannot be a GloVe text line and is skipped"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["glove.txt", "wink.json"], "no temporary file is left"
    tok = ClinicalTokenizer.fit(["heart failure now", "heart failure again", "heart failure seen"], min_doc_freq=3)
    mat = read_vector_file(out, tok)
    assert mat.shape == (tok.vocab_size, 3)
    np.testing.assert_array_equal(mat[tok.token_id("heart")], [0.5, -1.25, 2.0])
    np.testing.assert_array_equal(mat[tok.token_id("failure")], [1.0, 0.0, -3.0])


def test_a_file_that_is_not_the_wink_json_is_refused_in_one_line(tmp_path):
    src = tmp_path / "glove.txt"
    src.write_text("heart 1 2 3\n")
    with pytest.raises(SystemExit, match="not a wink embeddings JSON file .* expected keys 'dimensions' and 'vectors'"):
        wink.convert(src, tmp_path / "out.txt")
    assert not (tmp_path / "out.txt").exists()


def test_a_damaged_vector_is_refused_and_leaves_no_partial_file(tmp_path):
    src, out = tmp_path / "wink.json", tmp_path / "glove.txt"
    src.write_text(json.dumps({"dimensions": 2, "vectors": {"heart": [1.0, 2.0, 2.2, 0],
                                                            "failure": ["x", 1.0, 1.4, 1]}}))
    with pytest.raises(SystemExit, match="vector 2 is not a list of numbers"):
        wink.convert(src, out)
    assert [f.name for f in tmp_path.iterdir()] == ["wink.json"], "nothing is written, not even a partial file"
