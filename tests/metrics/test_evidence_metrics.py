"""Evidence quality (clinicode.metrics): hit@1, hit@k and word precision/recall against hand-counted notes."""

from __future__ import annotations

import pytest

from clinicode import metrics as M

TEXT = "Heart failure and acute renal failure after lithium."
#       0    5 6     13 14 17 18  23 24  29 30    37 38  43 44    51
WORDS = M.word_spans(TEXT)


def test_word_spans_are_runs_of_letters_or_digits() -> None:
    assert WORDS.tolist() == [[0, 5], [6, 13], [14, 17], [18, 23], [24, 29], [30, 37], [38, 43], [44, 51]]
    assert M.word_spans("Drug-induced QT_prolongation, 5 mg").tolist() == [[0, 4], [5, 12], [13, 15], [16, 28],
                                                                        [30, 31], [32, 34]]
    assert M.word_spans("...").shape == (0, 2)


def test_a_word_half_inside_a_span_is_covered() -> None:
    assert M.words_covered(WORDS, [(3, 8)]).tolist() == [True, True] + [False] * 6
    assert M.words_covered(WORDS, [(5, 6)]).tolist() == [False] * 8          # the space between two words
    assert M.words_covered(WORDS, []).tolist() == [False] * 8


def test_evidence_quality_by_hand() -> None:
    # pair 1: gold "Heart failure"; shown "acute renal failure" first, then "Heart": a miss at 1, a hit at 2.
    #   shown words 4 (acute renal failure Heart), gold words 2, both 1 (Heart)
    # pair 2: gold "renal failure"; shown "renal": a hit at 1. shown 1, gold 2, both 1.
    shown = [[(18, 37), (0, 5)], [(24, 29)]]
    gold = [[(0, 13)], [(24, 37)]]
    q = M.evidence_quality(shown, gold, [WORDS, WORDS], k=2)
    assert q["n_pairs"] == 2 and q["k"] == 2
    assert q["hit_at_1"] == 0.5 and q["hit_at_k"] == 1.0
    assert q["token_precision"] == pytest.approx(2 / 5)
    assert q["token_recall"] == pytest.approx(2 / 4)
    assert q["token_f1"] == pytest.approx(2 * 0.4 * 0.5 / 0.9)
    assert q["words_per_code"] == pytest.approx(2.5)
    # k = 1: only the first span of each pair counts (pair 1 now shows 3 words, none of them gold)
    q1 = M.evidence_quality(shown, gold, [WORDS, WORDS], k=1)
    assert q1["hit_at_k"] == 0.5
    assert (q1["token_precision"], q1["token_recall"]) == (pytest.approx(1 / 4), pytest.approx(1 / 4))


def test_a_code_with_nothing_shown_is_a_miss_that_still_counts_its_gold_words() -> None:
    q = M.evidence_quality([[], [(0, 13)]], [[(0, 13)], [(0, 13)]], [WORDS, WORDS], k=5)
    assert q["hit_at_1"] == 0.5 and q["hit_at_k"] == 0.5
    assert q["token_precision"] == 1.0 and q["token_recall"] == 0.5
    assert q["words_per_code"] == 1.0


def test_no_pairs_gives_no_rates() -> None:
    q = M.evidence_quality([], [], [], k=5)
    assert q["n_pairs"] == 0 and q["hit_at_1"] is None and q["token_f1"] is None


def test_evidence_quality_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="one entry per pair"):
        M.evidence_quality([[]], [], [WORDS], k=5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        M.evidence_quality([[]], [[(0, 5)]], [WORDS], k=0)
    with pytest.raises(ValueError, match="pair 0 has no gold mention"):
        M.evidence_quality([[(0, 5)]], [[]], [WORDS], k=5)


def test_title_spans_runs_of_title_words_longest_first() -> None:
    assert M.title_spans("Heart Failure", TEXT) == [(0, 13), (30, 37)]
    assert M.title_spans("Kidney Failure, Acute", TEXT) == [(6, 13), (18, 23), (30, 37)]  # one word each: by position
    assert M.title_spans("Abnormalities of the Heart", TEXT) == [(0, 5)]            # stop words never match
    assert M.title_spans("Seizures", TEXT) == []


def test_random_spans_keep_each_span_s_length_in_words_and_the_seed() -> None:
    shown = [[(18, 37), (0, 5)], [(24, 29)]]
    a = M.random_spans(shown, [WORDS, WORDS], seed=3)
    assert a == M.random_spans(shown, [WORDS, WORDS], seed=3)
    assert [[int(M.words_covered(WORDS, [s]).sum()) for s in pair] for pair in a] == [[3, 1], [1]]
    starts = {M.random_spans([[(24, 29)]], [WORDS], seed=s)[0][0][0] for s in range(40)}
    assert starts == {int(x) for x in WORDS[:, 0]}                                # every word can be drawn


def test_evidence_figures_judges_only_correct_codes_with_a_mention() -> None:
    mentions = [[{"code": "HF", "start": 0, "end": 13}, {"code": "AKI", "start": 18, "end": 37}]]
    titles = {"HF": "Heart Failure", "AKI": "Acute Kidney Injury", "LI": "Lithium"}
    # HF and LI correct; LI has no mention in the note (counted, not judged); AKI missed (not judged)
    ev = M.evidence_figures([TEXT], mentions, [{"HF": [(0, 5), (30, 37)], "LI": [(44, 51)]}], titles, k=1)
    assert (ev["n_pairs"], ev["n_correct"], ev["n_correct_without_evidence"]) == (1, 2, 1)
    assert ev["model"]["hit_at_1"] == 1.0 and ev["model"]["token_precision"] == 1.0
    assert ev["model"]["token_recall"] == 0.5                                 # "Heart" of "Heart failure"
    assert ev["title"]["hit_at_1"] == 1.0 and ev["title"]["token_recall"] == 1.0    # "Heart failure", 2 words
    assert ev["random"]["words_per_code"] == 1.0
    # a model without per-code spans (tfidf-lr): no model row; the random floor takes the title spans' lengths
    ev = M.evidence_figures([TEXT], mentions, [{"HF": None}], titles, k=1)
    assert ev["model"] is None and ev["n_pairs"] == 1 and ev["random"]["words_per_code"] == 2.0


def test_a_blank_title_is_no_title() -> None:
    # the metrics know no code system: the caller blanks a display placeholder (tests/predict/test_evidence_report.py)
    mentions = [[{"code": "D000740", "start": 0, "end": 13}]]
    text = "Heart failure, no title of ICD 10 PCS."
    ev = M.evidence_figures([text], mentions, [{"D000740": [(0, 5)]}], {"D000740": ""}, k=1)
    assert ev["title"]["words_per_code"] == 0.0
    ev = M.evidence_figures([text], mentions, [{"D000740": [(0, 5)]}], {}, k=1)
    assert ev["title"]["words_per_code"] == 0.0
    ev = M.evidence_figures([text], mentions, [{"D000740": [(0, 5)]}], {"D000740": "Heart Failure"}, k=1)
    assert ev["title"]["hit_at_1"] == 1.0
