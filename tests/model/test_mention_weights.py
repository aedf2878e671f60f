"""The mentions' weights and the longest match (`Matching.weighted`, `Matching.longest`): a phrase adds to each code
in the share of its training spans that named the code, times the share of its occurrences coders marked; where
phrases overlap only the longest counts; the weights are saved (mentions format 2) and an older file still reads as
it was made."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clinicode.errors import CheckpointError
from clinicode.matching import DEFAULT
from clinicode.models.fused.mentions import MENTIONS_FILE, MentionLexicon, read_mentions


def _spans(text: str, phrase: str, code: str) -> list[dict]:
    out, start = [], text.find(phrase)
    while start >= 0:
        out.append({"code": code, "start": start, "end": start + len(phrase)})
        start = text.find(phrase, start + 1)
    return out


def _lexicon() -> MentionLexicon:
    """'tumor' marked 9 times for A and once for B in notes that write it 30 times; 'adenocarcinoma' for C and
    'metastasis of adenocarcinoma' for D, always marked."""
    texts, evidence = [], []
    for i in range(10):
        text = f"note {i}: a tumor seen. tumor again here, and a tumor there."
        texts.append(text)
        first = text.find("tumor")
        evidence.append([{"code": "A" if i < 9 else "B", "start": first, "end": first + 5}])
    for i in range(4):
        text = f"case {i}: adenocarcinoma of the lung, then metastasis of adenocarcinoma."
        long_ = text.find("metastasis of adenocarcinoma")
        short = text.find("adenocarcinoma")
        texts.append(text)
        evidence.append([{"code": "C", "start": short, "end": short + 14},
                         {"code": "D", "start": long_, "end": long_ + 28},
                         *_spans(text[long_ + 14:], "adenocarcinoma", "C")[:0]])
    return MentionLexicon.build(["A", "B", "C", "D"], texts, evidence, language="en")


def test_a_phrase_weighs_by_the_codes_it_named_and_how_often_coders_marked_it():
    lex = _lexicon()
    z = lex.match(["the tumor grew"], 4)[0]
    assert z[0] == pytest.approx(0.9 * 10 / 30) and z[1] == pytest.approx(0.1 * 10 / 30)
    # 'adenocarcinoma' is written 8 times (4 inside the longer phrase) and marked 4 times for C
    assert lex.match(["adenocarcinoma of the colon"], 4)[0][2] == pytest.approx(4 / 8)
    unweighted = MentionLexicon.build(["A", "B", "C", "D"], [], [], language="en")
    assert unweighted.match(["the tumor grew"], 4).sum() == 0


def test_only_the_longest_of_overlapping_phrases_counts():
    lex = _lexicon()
    z = lex.match(["found a metastasis of adenocarcinoma in the liver"], 4)[0]
    assert z[3] > 0 and z[2] == 0            # D's phrase holds C's: only D
    both = lex.with_matching(DEFAULT.__class__(longest=False)).match(
        ["found a metastasis of adenocarcinoma in the liver"], 4)[0]
    assert both[3] > 0 and both[2] > 0


def test_the_weights_are_saved_and_read_back_and_an_older_file_reads_as_made(tmp_path):
    lex = _lexicon()
    lex.save(tmp_path)
    held = json.loads((tmp_path / MENTIONS_FILE).read_text())
    assert held["format_version"] == 2 and set(held["weights"]) == set(held["phrases"])
    back = MentionLexicon.load(tmp_path, ["A", "B", "C", "D"])
    note = ["the tumor grew; metastasis of adenocarcinoma"]
    np.testing.assert_allclose(back.match(note, 4), lex.match(note, 4), atol=1e-6)
    # format 1 (before the weights): every phrase 1.0 and overlapping phrases all counted, as it was made
    old = {"format": held["format"], "format_version": 1, "phrases": held["phrases"]}
    (tmp_path / MENTIONS_FILE).write_text(json.dumps(old))
    z = MentionLexicon.load(tmp_path, ["A", "B", "C", "D"]).match(note, 4)[0]
    assert list(z) == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("edit", ["too big", "missing", "short", "not a number"])
def test_damaged_weights_are_one_line(tmp_path, edit):
    _lexicon().save(tmp_path)
    path = tmp_path / MENTIONS_FILE
    held = json.loads(path.read_text())
    code = sorted(held["weights"])[0]
    if edit == "too big":
        held["weights"][code][0] = 1.5
    elif edit == "missing":
        del held["weights"][code]
    elif edit == "short":
        held["weights"][code] = held["weights"][code][1:]
    else:
        held["weights"][code][0] = "0.5"
    path.write_text(json.dumps(held))
    with pytest.raises(CheckpointError, match="weights do not match its phrases"):
        read_mentions(path, ["A", "B", "C", "D"])
    with pytest.raises(CheckpointError):
        MentionLexicon.load(tmp_path, ["A", "B", "C", "D"])
