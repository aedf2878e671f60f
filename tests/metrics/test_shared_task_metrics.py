"""The shared tasks' metrics (clinicode.metrics): MAP as trec_eval computes it and CodiEsp-X's span-and-code F1,
against hand-computed notes, scikit-learn and brute-force references written here from the published definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from clinicode import metrics as M

Y = np.array([[1, 0, 1, 0],
              [0, 0, 0, 0],
              [1, 0, 0, 0]])
S = np.array([[0.9, 0.8, 0.7, 0.1],
              [0.1, 0.2, 0.3, 0.4],
              [0.2, 0.3, 0.4, 0.5]])


def _brute_ap(gold: set[int], scores: list[float], n_gold: int, depth: int) -> float:
    """trec_eval's AP of one query, the slow way: walk the ranked list, add precision at each relevant rank."""
    ranked = sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:depth]
    found, total = 0, 0.0
    for rank, j in enumerate(ranked, start=1):
        if j in gold:
            found += 1
            total += found / rank
    return total / n_gold


def test_average_precision_by_hand() -> None:
    # note 0: gold ranked 1st and 3rd -> (1/1 + 2/3) / 2; note 1: no gold, no AP; note 2: gold ranked 4th -> 1/4
    ap = M.average_precisions(Y, S)
    assert ap[0] == pytest.approx(5 / 6) and math.isnan(ap[1]) and ap[2] == pytest.approx(1 / 4)
    value, n = M.mean_average_precision(Y, S)
    assert n == 2 and value == pytest.approx((5 / 6 + 1 / 4) / 2)


def test_gold_codes_without_a_column_count_as_never_retrieved() -> None:
    # note 0 has a third gold code the model has no column for: the same hits, one more in the denominator
    ap = M.average_precisions(Y, S, n_gold=[3, 0, 1])
    assert ap[0] == pytest.approx((1 + 2 / 3) / 3)
    # a note whose only gold code has no column counts, with AP 0 (it was not left out of the mean)
    value, n = M.mean_average_precision(Y, S, n_gold=[2, 1, 1])
    assert n == 3 and value == pytest.approx((5 / 6 + 0 + 1 / 4) / 3)


def test_depth_cuts_the_ranking() -> None:
    # depth 2: note 0 keeps only its first hit (1/1) over 2 gold codes; note 2's hit at rank 4 is gone
    assert M.mean_average_precision(Y, S, depth=2)[0] == pytest.approx((1 / 2 + 0) / 2)


def test_ties_rank_by_label_index() -> None:
    flat = np.full((2, 4), 0.5)
    assert M.average_precisions(np.array([[0, 0, 0, 1], [1, 0, 0, 0]]), flat).tolist() == [0.25, 1.0]


def test_map_is_nan_without_any_gold_code() -> None:
    value, n = M.mean_average_precision(np.zeros((2, 3)), np.ones((2, 3)))
    assert math.isnan(value) and n == 0
    assert M.map_figures(np.zeros((2, 3)), np.ones((2, 3)))["map"] is None


def test_average_precision_equals_sklearn_and_brute_force_on_random_notes() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random((60, 40)) < 0.1).astype(int)
    s = rng.random((60, 40))                                    # continuous: no ties, where sklearn agrees
    extra = rng.integers(0, 3, size=60)                         # gold codes outside the columns
    ap = M.average_precisions(y, s)
    ap_out = M.average_precisions(y, s, n_gold=y.sum(axis=1) + extra)
    ap_cut = M.average_precisions(y, s, n_gold=y.sum(axis=1) + extra, depth=7)
    for i in range(len(y)):
        gold = set(np.flatnonzero(y[i]).tolist())
        if gold:
            assert ap[i] == pytest.approx(average_precision_score(y[i], s[i]))
        n_gold = len(gold) + int(extra[i])
        if n_gold:
            assert ap_out[i] == pytest.approx(_brute_ap(gold, s[i].tolist(), n_gold, 1000))
            assert ap_cut[i] == pytest.approx(_brute_ap(gold, s[i].tolist(), n_gold, 7))
        else:
            assert math.isnan(ap_out[i])
    # ties too (scores on a coarse grid), against the brute force with its label-index tie rule
    st = np.round(s, 1)
    ap_t = M.average_precisions(y, st)
    for i in np.flatnonzero(y.sum(axis=1)):
        assert ap_t[i] == pytest.approx(_brute_ap(set(np.flatnonzero(y[i]).tolist()), st[i].tolist(),
                                                  int(y[i].sum()), 1000))


def test_map_per_family_ranks_each_family_alone() -> None:
    # columns: two diagnoses, two procedures; note 0 has gold D0 and P3, note 1 gold P2 and one procedure outside
    y = np.array([[1, 0, 0, 1], [0, 0, 1, 0]])
    s = np.array([[0.1, 0.9, 0.2, 0.8], [0.9, 0.8, 0.1, 0.7]])
    f = M.map_figures(y, s, n_gold=[2, 2], families=["diagnoses", "diagnoses", "procedures", "procedures"],
                      family_gold={"diagnoses": [1, 0], "procedures": [1, 2]})
    # all codes: note 0 ranks P3 2nd and D0 4th -> (1/2 + 2/4) / 2; note 1 ranks P2 4th of 2 gold -> (1/4) / 2
    assert f["map"] == pytest.approx(((1 / 2 + 2 / 4) / 2 + (1 / 4) / 2) / 2) and f["n_map_notes"] == 2
    # diagnoses alone: note 0 ranks D0 2nd of {D1, D0}; note 1 has no gold diagnosis
    assert f["map_diagnoses"] == pytest.approx(1 / 2) and f["n_map_notes_diagnoses"] == 1
    # procedures alone: note 0 ranks P3 1st; note 1 ranks P2 2nd, with a second gold procedure never retrieved
    assert f["map_procedures"] == pytest.approx((1 + (1 / 2) / 2) / 2) and f["n_map_notes_procedures"] == 2
    # one family only: no split
    assert "map_diagnoses" not in M.map_figures(y, s, families=["diagnoses"] * 4)


def test_map_input_errors_say_what_to_pass() -> None:
    with pytest.raises(ValueError, match=r"n_gold\[0\] = 1 is fewer than the note's 2 gold codes"):
        M.mean_average_precision(Y, S, n_gold=[1, 0, 1])
    with pytest.raises(ValueError, match="one count per note \\(3\\)"):
        M.mean_average_precision(Y, S, n_gold=[1, 2])
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        M.mean_average_precision(Y, S, depth=0)
    with pytest.raises(ValueError, match="one family per column \\(4\\)"):
        M.map_figures(Y, S, families=["diagnoses"])


# ---------------------------------------------------------------------------------------------- span-and-code F1
def test_a_span_holds_a_reference_inside_it_within_the_slack() -> None:
    gold = [(10, 20)]
    shown = [(10, 20), (0, 30), (0, 31), (9, 19), (12, 20), (0, 20), (11, 20)]
    #        exact     10 each side  11 after  ends early  starts late  10 before  starts inside
    assert M.span_holds(shown, gold)[:, 0].tolist() == [True, True, False, False, False, True, False]
    assert M.span_holds([(5, 25)], gold, slack=4)[:, 0].tolist() == [False]
    assert M.span_holds([(6, 24)], gold, slack=4)[:, 0].tolist() == [True]


def test_span_code_prf_by_hand() -> None:
    mentions = [[{"code": "8000/6", "start": 10, "end": 20}, {"code": "8000/6", "start": 50, "end": 60},
                 {"code": "8140/3", "start": 100, "end": 114}],
                [{"code": "8000/1", "start": 5, "end": 11}]]
    shown = [{"8000/6": [(0, 5), (48, 62)],           # right: its 2nd span holds the 2nd reference
              "8140/3": [(0, 5)],                     # wrong place
              "8500/3": [(100, 114)]},                # not a gold code of the note
             {"8000/1": None}]                        # predicted with no span: never right
    q = M.span_code_prf(shown, mentions)
    assert (q["n_predicted"], q["n_gold"], q["n_correct"], q["slack"]) == (4, 3, 1, 10)
    assert q["precision"] == pytest.approx(1 / 4) and q["recall"] == pytest.approx(1 / 3)
    assert q["f1"] == pytest.approx(2 * (1 / 4) * (1 / 3) / (1 / 4 + 1 / 3))


def test_span_code_prf_is_absent_without_references() -> None:
    q = M.span_code_prf([{"8000/6": [(0, 5)]}], [[]])
    assert q["precision"] is None and q["recall"] is None and q["f1"] is None and q["n_predicted"] == 1
    assert M.span_code_prf([{}], [[{"code": "a", "start": 0, "end": 1}]])["f1"] == 0.0  # references, nothing right


def test_span_code_prf_equals_a_brute_force_of_the_published_rule() -> None:
    rng = np.random.default_rng(1)
    codes = ["a", "b", "c", "d"]
    shown, mentions = [], []
    for _ in range(40):
        refs = []
        for _ in range(int(rng.integers(0, 5))):
            start, code = int(rng.integers(0, 200)), codes[int(rng.integers(0, 4))]
            refs.append({"code": code, "start": start, "end": start + int(rng.integers(1, 15))})
        pred = {}
        for c in codes:
            if rng.random() < 0.5:
                spans = []
                for _ in range(int(rng.integers(0, 4))):
                    a = int(rng.integers(0, 200))
                    spans.append((a, a + int(rng.integers(1, 40))))
                pred[c] = spans
        shown.append(pred)
        mentions.append(refs)
    # brute force: one row per (note, code, shown span) x (gold reference) pair, as the published script merges them
    right = set()
    for i, (pred, refs) in enumerate(zip(shown, mentions)):
        for code, spans in pred.items():
            for a, b in spans:
                for m in refs:
                    if m["code"] == code and 0 <= m["start"] - a <= 10 and 0 <= b - m["end"] <= 10:
                        right.add((i, code))
    n_pred = sum(len(p) for p in shown)
    n_gold = len({(i, m["code"]) for i, refs in enumerate(mentions) for m in refs})
    q = M.span_code_prf(shown, mentions)
    assert q["n_correct"] == len(right) and q["n_predicted"] == n_pred and q["n_gold"] == n_gold
    assert q["precision"] == pytest.approx(len(right) / n_pred)
    assert q["recall"] == pytest.approx(len(right) / n_gold)


def test_span_code_input_errors() -> None:
    with pytest.raises(ValueError, match="one entry per note, got 1 and 2"):
        M.span_code_prf([{}], [[], []])
    with pytest.raises(ValueError, match="slack must be an integer >= 0"):
        M.span_code_prf([{}], [[]], slack=-1)
