"""benchmarks/study_long_tail.py: the threshold rules it compares and the recall@k of title-only suggestions."""

import importlib.util
import math
from pathlib import Path

import numpy as np

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "study_long_tail.py"
_spec = importlib.util.spec_from_file_location("study_long_tail", _SCRIPT)
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)


def test_micro_f1_matches_the_package_metric():
    from clinicode.metrics import micro_prf

    rng = np.random.default_rng(0)
    y, yhat = rng.random((30, 7)) < 0.3, rng.random((30, 7)) < 0.4
    assert math.isclose(study.micro_f1(y, yhat), micro_prf(y, yhat)[2])


def test_top_mask_keeps_k_per_row_and_breaks_ties_by_label_index():
    s = np.array([[0.1, 0.9, 0.9, 0.2], [0.5, 0.5, 0.5, 0.5]])
    assert study.top_mask(s, 1).tolist() == [[False, True, False, False], [True, False, False, False]]
    assert study.top_mask(s, 2).sum(axis=1).tolist() == [2, 2]
    assert study.top_mask(s, 9).all()                                   # k beyond K: every code


def test_global_threshold_is_the_first_best_grid_value():
    y = np.array([[1, 0], [0, 1], [0, 0]], dtype=bool)
    s = np.array([[0.8, 0.1], [0.2, 0.7], [0.3, 0.3]])
    t = study.best_threshold(y, s)
    assert 0.3 <= t < 0.7 and study.micro_f1(y, s > t) == 1.0
    assert t == study.GRID[np.flatnonzero(study.GRID >= 0.3)[0]]


def test_top1_rule_gives_every_note_a_code():
    y = np.array([[1, 0], [0, 1]], dtype=bool)
    s = np.array([[0.9, 0.1], [0.2, 0.3]])                              # note 2's code is below any good t
    out = study.rules(y, s, s)
    assert out["global+top1"][1].sum(axis=1).min() >= 1
    assert out["global+top1"][1][1].tolist() == [False, True]


def test_per_code_thresholds_fall_back_or_shrink_to_the_global_one():
    # code 0: positives score 0.6-0.7, negatives 0.5 -> its own best threshold sits in [0.5, 0.6); code 1 has 1 positive
    y = np.array([[1, 0], [1, 0], [0, 1], [0, 0]], dtype=bool)
    s = np.array([[0.6, 0.1], [0.7, 0.1], [0.5, 0.9], [0.5, 0.2]])
    t = 0.8
    own = study.code_thresholds(y, s, t, 2, shrink=False)
    assert 0.5 <= own[0] < 0.6 and own[1] == t                          # code 1: 1 positive < m = 2
    assert study.code_thresholds(y, s, t, 10**9, shrink=False).tolist() == [t, t]
    shrunk = study.code_thresholds(y, s, t, 2, shrink=True)
    assert math.isclose(shrunk[0], (2 * own[0] + 2 * t) / 4)            # n = 2 positives, weight m = 2


def test_recall_at_k_pools_gold_over_notes():
    scores = np.array([[0.9, 0.8, 0.1], [0.1, 0.2, 0.3]])
    gold = [[1, 2], [0]]
    r = study.recall_at(scores, gold, ks=(1, 2, 3))
    assert r == {1: 0.0, 2: 1 / 3, 3: 1.0}


def test_title_words_score_a_whole_phrase_above_scattered_words():
    notes = [["the", "left", "knee", "pain", "and", "hip"]]
    titles = [["knee", "pain"], ["hip", "pain"], ["elbow"]]
    s = study.title_word_scores(notes, titles, lambda w: 1.0)
    assert s[0, 0] == 3.0 and s[0, 1] == 1.0 and s[0, 2] == 0.0


def test_unseen_titles_idf_over_titles_and_the_shipped_rule():
    titles = ["kidney failure", "liver failure", "seizures"]
    notes = ["acute kidney failure", "seizures and liver problems"]
    s = study.title_scores_from_titles(titles, notes)
    assert s[0, 0] == 3.0 and s[0, 2] == 0.0          # whole title as a phrase: 2 + every word
    assert 0 < s[0, 1] < 1 and s[1, 1] < 1            # "failure" is in two titles: it weighs less than "kidney"
    assert s[1, 2] == 3.0
    # predict --titles suggests every title whose words all occur: K for note 1, S for note 2 (L lacks "failure")
    row = study._shipped_rule(["K", "L", "S"], titles, notes, [[0], [2]])
    assert row.endswith("| 1.00 | 1.000 | 1.000 |")
