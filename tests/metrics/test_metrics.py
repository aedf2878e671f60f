"""Unit and property tests of clinicode.metrics against hand-computed values (docs/domain.md section 7)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from clinicode import metrics as M
from clinicode.metrics import bootstrap as B, checks as C, ranking as R, thresholds as T

# 3 documents x 5 labels. Label 3 has no gold positive but is predicted once (a false positive);
# label 4 has a gold positive but is never predicted at t = 0.5; S[0, 2] is exactly 0.5 (not predicted).
Y = np.array(
    [
        [1, 0, 1, 0, 0],
        [0, 1, 1, 0, 0],
        [1, 0, 0, 0, 1],
    ],
    dtype=np.float32,
)
S = np.array(
    [
        [0.9, 0.2, 0.5, 0.6, 0.1],
        [0.4, 0.8, 0.7, 0.1, 0.3],
        [0.3, 0.1, 0.2, 0.0, 0.4],
    ]
)
# Predictions at t = 0.5:  label:  0  1  2  3  4
#   TP                             1  1  1  0  0
#   PP                             1  1  1  1  0
#   GP                             2  1  2  0  1
CODES = ["401.9", "428.0", "427.31", "V58.61", "038.9"]


# ----------------------------------------------------------------------------------- thresholded metrics


def test_one_tie_rule_decides_the_predicted_codes() -> None:
    """Equal scores go by label index, lower first: in the order of the predicted codes and in the single-label pick."""
    s = np.array([0.2, 0.7, 0.4, 0.7, 0.5])
    assert M.predicted_indices(s, 0.4).tolist() == [1, 3, 4]              # 0.4 itself is not above 0.4
    assert M.predicted_indices(s, 0.9).tolist() == []
    assert M.predicted_indices(s, 0.9, single_label=True).tolist() == [1]  # the top score's lowest index
    assert M.binarize(s[None], 0.9, single_label=True)[0].tolist() == [False, True, False, False, False]
    assert M.binarize(s[None], 0.4)[0].tolist() == [i in (1, 3, 4) for i in range(5)]
    # the mapping form: its order is the label order, whatever the codes sort to as strings
    by_code = dict(zip(["V45.81", "428.0", "038.9", "250.00", "401.9"], [0.2, 0.7, 0.4, 0.7, 0.5]))
    assert M.predicted_codes(by_code, 0.4) == ["428.0", "250.00", "401.9"]
    assert M.predicted_codes(by_code, 0.0, single_label=True) == ["428.0"]
    assert M.predicted_codes({}, 0.5, single_label=True) == []
    with pytest.raises(ValueError, match="1-D"):
        M.predicted_indices(np.zeros((2, 3)), 0.5)


def test_binarize_is_strictly_greater() -> None:
    assert M.binarize(np.array([[0.5, 0.50001, 0.49999]]), 0.5).tolist() == [[False, True, False]]
    assert M.binarize(S, 0.5)[0, 2] == False  # noqa: E712 - exactly the threshold is negative
    assert M.binarize(np.array([[0.3]]), 0.3).tolist() == [[False]]


def test_micro_prf_hand_computed() -> None:
    p, r, f = M.micro_prf(Y, M.binarize(S, 0.5))
    # sum TP = 3, sum PP = 4, sum GP = 6
    assert p == pytest.approx(3 / 4)
    assert r == pytest.approx(3 / 6)
    assert f == pytest.approx(2 * 0.75 * 0.5 / 1.25)  # 0.6


def test_micro_prf_nothing_predicted_gives_zero_not_nan() -> None:
    p, r, f = M.micro_prf(Y, np.zeros_like(Y))
    assert (p, r, f) == (0.0, 0.0, 0.0)


def test_macro_prf_caml_form_hand_computed() -> None:
    p, r, f = M.macro_prf(Y, M.binarize(S, 0.5))
    # precision per label 1, 1, 1, 0 (FP only), 0 (never predicted) -> 0.6
    # recall per label 1/2, 1, 1/2, 0 (no gold), 0 -> 0.4
    assert p == pytest.approx(3 / 5, abs=1e-9)
    assert r == pytest.approx(2 / 5, abs=1e-9)
    assert f == pytest.approx(2 * 0.6 * 0.4 / 1.0, abs=1e-9)  # 0.48


def test_f1_macro_mean_hand_computed_and_differs_from_caml_form() -> None:
    yhat = M.binarize(S, 0.5)
    f_mean = M.f1_macro_mean(Y, yhat)
    # per label 2TP / (2TP + FP + FN): 2/3, 1, 2/3, 0/1, 0/1
    assert f_mean == pytest.approx((2 / 3 + 1 + 2 / 3 + 0 + 0) / 5)  # 0.4667
    assert M.macro_prf(Y, yhat)[2] == pytest.approx(0.48, abs=1e-9)
    assert abs(f_mean - 0.48) > 0.01


def test_macro_zero_denominators_contribute_zero() -> None:
    y = np.zeros((2, 2))
    p, r, f = M.macro_prf(y, np.zeros((2, 2), dtype=bool))
    assert (p, r, f) == (0.0, 0.0, 0.0)
    assert M.f1_macro_mean(y, np.zeros((2, 2))) == 0.0


def test_perfect_prediction_caml_macro_is_one_up_to_epsilon() -> None:
    y = np.array([[1, 0], [0, 1]])
    p, r, f = M.macro_prf(y, y)
    assert p == pytest.approx(1.0, abs=1e-9) and p < 1.0  # the 1e-10 of CAML is kept
    assert f == pytest.approx(1.0, abs=1e-9)


# -------------------------------------------------------------------------------------------------- AUC


def test_auc_macro_hand_computed_skips_label_without_positive() -> None:
    # label 0: pos {0.9, 0.3} vs neg {0.4} -> 1/2; labels 1, 2, 4 separate perfectly; label 3 has no positive
    value, n = M.auc_macro(Y, S)
    assert n == 4
    assert value == pytest.approx((0.5 + 1 + 1 + 1) / 4)


def test_auc_micro_hand_computed_with_ties() -> None:
    # 6 positives x 9 negatives; negatives ranked below each positive (ties count 1/2):
    # 0.9 -> 9, 0.8 -> 9, 0.7 -> 9, 0.5 -> 8, 0.4 -> 7 + 0.5, 0.3 -> 6 + 0.5
    assert M.auc_micro(Y, S) == pytest.approx(49 / 54)


def test_auc_undefined_returns_nan_and_zero_count() -> None:
    y = np.ones((3, 2))
    value, n = M.auc_macro(y, np.random.default_rng(0).random((3, 2)))
    assert math.isnan(value) and n == 0
    assert math.isnan(M.auc_micro(y, np.zeros((3, 2))))


# ---------------------------------------------------------------------------------------------- P@k, R@k


@pytest.mark.parametrize(
    ("k", "p_at_k", "r_at_k"),
    [
        (1, 1.0, 0.5),  # tops: 0, 1, 4 all gold; each doc has 2 gold codes
        (2, (1 / 2 + 1 + 1) / 3, (1 / 2 + 1 + 1) / 3),  # doc 0: top {0, 3}, one gold
        (3, 2 / 3, 1.0),
        (5, 2 / 5, 1.0),  # fewer than k gold codes: P@5 cannot exceed 2/5
    ],
)
def test_precision_recall_at_k_hand_computed(k: int, p_at_k: float, r_at_k: float) -> None:
    assert M.precision_at_k(Y, S, k=k) == pytest.approx(p_at_k)
    assert M.recall_at_k(Y, S, k=k) == pytest.approx(r_at_k)


def test_precision_at_k_ties_break_by_label_index() -> None:
    s = np.full((1, 5), 0.5)
    assert M.precision_at_k(np.array([[1, 1, 0, 0, 0]]), s, k=2) == 1.0
    assert M.precision_at_k(np.array([[0, 0, 0, 1, 1]]), s, k=2) == 0.0
    # three-way tie at 0.7 for labels 1, 2, 3: k=2 takes 1 and 2, k=3 reaches 3
    s = np.array([[0.2, 0.7, 0.7, 0.7, 0.1]])
    y = np.array([[0, 0, 0, 1, 0]])
    assert M.precision_at_k(y, s, k=2) == 0.0
    assert M.precision_at_k(y, s, k=3) == pytest.approx(1 / 3)
    assert M.recall_at_k(y, s, k=3) == 1.0


def test_recall_at_k_excludes_documents_without_gold() -> None:
    y = np.array([[1, 0, 0], [0, 0, 0]])
    s = np.array([[0.9, 0.1, 0.2], [0.5, 0.4, 0.3]])
    assert M.recall_at_k(y, s, k=1) == 1.0  # only document 0 counts
    assert M.precision_at_k(y, s, k=1) == 0.5  # both documents count for precision
    assert M.recall_at_k(np.zeros((2, 3)), s, k=1) == 0.0


def test_accuracy_single_label() -> None:
    y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]])
    s = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.2, 0.6], [0.4, 0.4, 0.2]])  # last: tie -> index 0
    assert M.accuracy(y, s) == pytest.approx(3 / 4)


# ------------------------------------------------------------------------------------------ validation


def test_shape_mismatch_message_gives_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"y_true has shape \(3, 5\) but scores has shape \(3, 4\)"):
        M.precision_at_k(Y, S[:, :4], k=1)
    with pytest.raises(ValueError, match=r"y_true has shape \(3, 5\) but y_pred has shape \(2, 5\)"):
        M.micro_prf(Y, Y[:2])


def test_not_2d_rejected() -> None:
    with pytest.raises(ValueError, match=r"y_true must be 2-D \[n_docs, n_labels\], got shape \(5,\)"):
        M.auc_micro(Y[0], S[0])


@pytest.mark.parametrize("k", [0, 6, -1, 2.5])
def test_k_out_of_range(k: object) -> None:
    with pytest.raises(ValueError, match=rf"1 <= k <= n_labels = 5, got k={k!r}"):
        M.precision_at_k(Y, S, k=k)  # type: ignore[arg-type]


def test_nan_scores_and_non_binary_gold_rejected() -> None:
    bad = S.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="scores contains 1 NaN or infinite values"):
        M.auc_macro(Y, bad)
    with pytest.raises(ValueError, match="y_true must hold only 0/1 values"):
        M.micro_prf(Y * 2, Y)


def test_bad_grid_rejected() -> None:
    with pytest.raises(ValueError, match="grid must be a non-empty 1-D array"):
        M.tune_threshold(Y, S, grid=[])


# ----------------------------------------------------------------------------------- threshold tuning


def test_tune_threshold_known_answer_default_grid() -> None:
    # positives score 0.6-0.8, negatives 0.1-0.55: any t in [0.55, 0.6) separates perfectly.
    y = np.array([[1, 0], [0, 1], [1, 0], [0, 1], [1, 1], [0, 0]])
    s = np.array([[0.6, 0.1], [0.2, 0.7], [0.8, 0.55], [0.1, 0.65], [0.75, 0.9], [0.55, 0.2]])
    assert M.tune_threshold(y, s) == pytest.approx(55 / 99)  # first grid point >= 0.55 on linspace(0, 1, 100)
    # With the grid point exactly 0.55, strictness makes 0.55 itself the (first) best threshold.
    assert M.tune_threshold(y, s, grid=[0.3, 0.55, 0.6, 0.7]) == 0.55
    assert M.micro_prf(y, M.binarize(s, 0.55))[2] == 1.0


def test_tune_threshold_returns_first_maximiser() -> None:
    y = np.array([[1, 0]])
    s = np.array([[0.9, 0.1]])
    assert M.tune_threshold(y, s, grid=[0.0, 0.2, 0.5, 0.95]) == 0.2  # 0.2 and 0.5 both give F1 = 1


def test_f1_by_threshold_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    y = (rng.random((200, 12)) < 0.2).astype(np.float32)
    s = np.round(np.clip(y * 0.3 + rng.random((200, 12)) * 0.7, 0, 1), 2)  # rounding makes exact ties with the grid
    grid = np.linspace(0, 1, 101)
    curve = M.f1_by_threshold(y, s, grid)
    assert set(curve) == {"threshold", "f1_micro", "f1_macro", "f1_macro_mean"}
    for g, t in enumerate(grid):
        yhat = M.binarize(s, t)
        assert curve["f1_micro"][g] == M.micro_prf(y, yhat)[2]
        assert curve["f1_macro"][g] == pytest.approx(M.macro_prf(y, yhat)[2], abs=1e-12)
        assert curve["f1_macro_mean"][g] == pytest.approx(M.f1_macro_mean(y, yhat), abs=1e-12)
    best = max(range(grid.size), key=lambda g: (M.micro_prf(y, M.binarize(s, grid[g]))[2], -g))
    assert M.tune_threshold(y, s, grid=grid) == grid[best]


def test_tune_threshold_is_fast_at_2000_x_50() -> None:
    import time

    rng = np.random.default_rng(0)
    y = (rng.random((2000, 50)) < 0.1).astype(np.float32)
    s = rng.random((2000, 50)).astype(np.float32)
    t0 = time.perf_counter()
    M.tune_threshold(y, s)
    assert time.perf_counter() - t0 < 1.0


# ------------------------------------------------------------------------------------------- reports


def test_all_metrics_keys_values_and_json() -> None:
    out = M.all_metrics(Y, S)
    assert list(out) == [
        "prec_micro", "rec_micro", "f1_micro", "prec_macro", "rec_macro", "f1_macro", "f1_macro_mean",
        "f1_macro_present", "n_codes_present", "auc_macro", "auc_micro", "n_auc_labels", "prec_at_5", "rec_at_5",
        "threshold", "n_docs", "n_labels",
    ]  # k = 8 > 5 labels is skipped; no accuracy key: rows have two gold labels
    assert out["f1_micro"] == pytest.approx(0.6)
    assert out["f1_macro"] == pytest.approx(0.48)
    assert out["f1_macro_mean"] == pytest.approx(7 / 15)
    assert out["n_codes_present"] == 4 and out["f1_macro_present"] == pytest.approx(7 / 12)  # code 4 has no gold note
    assert out["auc_macro"] == pytest.approx(0.875) and out["n_auc_labels"] == 4
    assert out["prec_at_5"] == pytest.approx(0.4)
    assert (out["threshold"], out["n_docs"], out["n_labels"]) == (0.5, 3, 5)
    assert all(type(v) in (float, int) for v in out.values())
    json.loads(json.dumps(out, allow_nan=False))


def test_all_metrics_threshold_and_ks() -> None:
    out = M.all_metrics(Y, S, threshold=0.45, ks=(1, 2))
    assert out["threshold"] == 0.45
    assert out["f1_micro"] == M.micro_prf(Y, S > 0.45)[2]  # S[0, 2] = 0.5 now predicted
    assert {"prec_at_1", "rec_at_1", "prec_at_2", "rec_at_2"} <= set(out) and "prec_at_5" not in out
    with pytest.raises(ValueError, match=r"ks must hold integers >= 1, got \[0\]"):
        M.all_metrics(Y, S, ks=(0,))


def test_all_metrics_adds_accuracy_for_single_label() -> None:
    y = np.eye(3)[[0, 1, 2, 0]]
    s = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.2, 0.6], [0.4, 0.4, 0.2]])
    assert M.all_metrics(y, s, ks=(1,))["accuracy"] == pytest.approx(0.75)


def test_per_label_metrics_hand_computed() -> None:
    rows = M.per_label_metrics(Y, S, CODES, threshold=0.5)
    assert [r["code"] for r in rows] == CODES
    assert [r["support"] for r in rows] == [2, 1, 2, 0, 1]
    assert [r["precision"] for r in rows] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert [r["recall"] for r in rows] == [0.5, 1.0, 0.5, 0.0, 0.0]
    assert [r["f1"] for r in rows] == pytest.approx([2 / 3, 1.0, 2 / 3, 0.0, 0.0])
    assert [r["auc"] for r in rows] == [0.5, 1.0, 1.0, None, 1.0]
    with pytest.raises(ValueError, match="codes has 4 entries but the arrays have 5 label columns"):
        M.per_label_metrics(Y, S, CODES[:4], threshold=0.5)


# ------------------------------------------------------------------------------------- property tests


@st.composite
def gold_and_scores(draw: st.DrawFn, *, unique: bool = False) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 12))
    k = draw(st.integers(1, 8))
    y = draw(arrays(np.int8, (n, k), elements=st.integers(0, 1)))
    # Scores on a 1/1000 grid: plenty of ties, and 1 - s keeps every order (no float collapse).
    s = draw(arrays(np.float64, (n, k), elements=st.integers(0, 1000).map(lambda i: i / 1000), unique=unique))
    return y, s


PROPS = settings(max_examples=60, deadline=None)


@PROPS
@given(gold_and_scores(), st.floats(0, 1))
def test_prop_metrics_in_unit_interval(ys: tuple[np.ndarray, np.ndarray], t: float) -> None:
    y, s = ys
    out = M.all_metrics(y, s, threshold=t, ks=(1, 3, 5))
    for key, v in out.items():
        if key in ("threshold", "n_docs", "n_labels", "n_auc_labels", "n_codes_present"):
            continue
        if key.startswith("auc") and math.isnan(v):
            continue
        assert 0.0 <= v <= 1.0 + 1e-12, key


@PROPS
@given(gold_and_scores(), st.randoms(use_true_random=False))
def test_prop_micro_f1_invariant_to_joint_permutation(ys: tuple[np.ndarray, np.ndarray], rnd) -> None:
    y, s = ys
    rows, cols = list(range(y.shape[0])), list(range(y.shape[1]))
    rnd.shuffle(rows)
    rnd.shuffle(cols)
    yp, sp = y[rows][:, cols], s[rows][:, cols]
    assert M.micro_prf(yp, sp > 0.5) == M.micro_prf(y, s > 0.5)
    assert M.all_metrics(yp, sp)["f1_micro"] == M.all_metrics(y, s)["f1_micro"]


@PROPS
@given(gold_and_scores(unique=True), st.randoms(use_true_random=False), st.integers(1, 8))
def test_prop_precision_at_k_invariant_to_label_permutation_without_ties(ys, rnd, k: int) -> None:
    y, s = ys
    k = min(k, y.shape[1])
    cols = list(range(y.shape[1]))
    rnd.shuffle(cols)
    assert M.precision_at_k(y[:, cols], s[:, cols], k=k) == pytest.approx(M.precision_at_k(y, s, k=k))
    assert M.recall_at_k(y[:, cols], s[:, cols], k=k) == pytest.approx(M.recall_at_k(y, s, k=k))


@PROPS
@given(gold_and_scores())
def test_prop_perfect_scores_give_one(ys: tuple[np.ndarray, np.ndarray]) -> None:
    y, _ = ys
    if not y.any():
        return
    s = y.astype(np.float64)  # 1.0 for every gold cell, 0.0 elsewhere
    p, r, f = M.micro_prf(y, M.binarize(s, 0.5))
    assert (p, r, f) == (1.0, 1.0, 1.0)
    assert M.f1_macro_mean(y, s > 0.5) == pytest.approx(y.any(axis=0).mean())  # labels without gold add 0
    if y.any(axis=0).all():
        assert M.macro_prf(y, s > 0.5)[2] == pytest.approx(1.0, abs=1e-9)
        assert M.f1_macro_mean(y, s > 0.5) == 1.0
    auc, n = M.auc_macro(y, s)
    assert n == 0 or auc == 1.0
    assert math.isnan(M.auc_micro(y, s)) or M.auc_micro(y, s) == 1.0
    g = y.sum(axis=1)
    for k in range(1, y.shape[1] + 1):  # the best achievable P@k / R@k
        assert M.precision_at_k(y, s, k=k) == pytest.approx(np.mean(np.minimum(g, k) / k))
        assert M.recall_at_k(y, s, k=k) == pytest.approx(np.mean(np.minimum(g[g > 0], k) / g[g > 0]))


@PROPS
@given(gold_and_scores())
def test_prop_auc_of_flipped_scores_sums_to_one(ys: tuple[np.ndarray, np.ndarray]) -> None:
    y, s = ys
    codes = [f"c{j}" for j in range(y.shape[1])]
    up = M.per_label_metrics(y, s, codes, threshold=0.5)
    down = M.per_label_metrics(y, 1.0 - s, codes, threshold=0.5)
    for a, b in zip(up, down):
        if a["auc"] is None:
            assert b["auc"] is None
        else:
            assert a["auc"] + b["auc"] == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------------
# paired_bootstrap
# --------------------------------------------------------------------------------------------------


def _two_models(seed: int = 0, n: int = 60, k: int = 6):
    rng = np.random.default_rng(seed)
    y = rng.random((n, k)) < 0.3
    y[0, :] = True  # every label has a positive and (almost surely) a negative
    good = np.clip(y * 0.5 + rng.random((n, k)) * 0.6, 0, 1)  # informative scores
    noise = rng.random((n, k))  # uninformative scores
    return y, good, noise


def test_paired_bootstrap_of_a_model_against_itself_is_exactly_zero():
    y, good, _ = _two_models()
    out = M.paired_bootstrap(y, [(good, 0.5)], [(good, 0.5)], n_boot=200)
    for key in ("f1_micro", "auc_macro"):
        assert out[key]["diff"] == 0.0 and out[key]["lo"] == 0.0 and out[key]["hi"] == 0.0
        assert out[key]["p_a_below_b"] == 0.0


def test_paired_bootstrap_observed_difference_is_the_metric_difference_of_the_run_means():
    y, good, noise = _two_models()
    runs_a = [(good, 0.5), (np.clip(good + 0.05, 0, 1), 0.4)]
    out = M.paired_bootstrap(y, runs_a, [(noise, 0.6)], n_boot=50)
    for key in ("f1_micro", "auc_macro"):
        mean_a = np.mean([M.all_metrics(y, s, threshold=t)[key] for s, t in runs_a])
        assert out[key]["diff"] == pytest.approx(mean_a - M.all_metrics(y, noise, threshold=0.6)[key], abs=1e-12)


def test_weighted_metrics_equal_the_metrics_of_the_explicitly_resampled_documents():
    # Ties between scores included: the weighted AUC must count a tied negative as half.
    y, good, _ = _two_models(seed=3, n=40, k=5)
    s = np.round(good, 1)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, len(y), size=(5, len(y)))
    w = np.stack([np.bincount(row, minlength=len(y)) for row in idx])  # [5, N]
    f1 = B._weighted_f1_micro(y, s, 0.45, w)
    auc = B._weighted_auc_macro(y, s, w)
    for r, row in enumerate(idx):
        ref = M.all_metrics(y[row], s[row], threshold=0.45)
        assert f1[r] == pytest.approx(ref["f1_micro"], abs=1e-12)
        assert auc[r] == pytest.approx(ref["auc_macro"], abs=1e-12)


@pytest.mark.parametrize("block_bytes", [1, 8 * 30, 32 << 20])
def test_the_blocked_weighted_auc_equals_the_sorting_form_on_many_codes(block_bytes, monkeypatch):
    """The pair-indicator products give the previous per-code sort's numbers (fixed seed, 1e-12): rare codes, codes
    with more positives than negatives (counted from the other side), codes with no positive or no negative, ties, and
    blocks of one code up to all of them."""
    monkeypatch.setattr(B, "_AUC_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(11)
    n, k = 60, 40
    y = rng.random((n, k)) < np.linspace(0.01, 0.95, k)
    y[:, 0], y[:, 1] = False, True                                      # no positive; no negative
    y[3, 2] = True                                                      # a code with a single note, maybe more
    s = np.round(rng.random((n, k)) * 0.6 + 0.4 * y, 1)                 # coarse: many ties
    w = rng.multinomial(n, np.full(n, 1.0 / n), size=25)
    w = np.vstack([np.ones((1, n), dtype=w.dtype), w])
    got, want = B._weighted_auc_macro(y, s, w), B._weighted_auc_macro_by_sorting(y, s, w)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got[0] == pytest.approx(M.auc_macro(y, s)[0], abs=1e-12)    # row 0: the documents as given
    none = B._weighted_auc_macro(np.zeros((n, 3), dtype=bool), s[:, :3], w)
    assert np.isnan(none).all()


def test_paired_bootstrap_separates_a_clearly_better_model_and_is_reproducible():
    y, good, noise = _two_models(n=200)
    out = M.paired_bootstrap(y, [(good, 0.5)], [(noise, 0.5)], n_boot=300, seed=1)
    assert out["f1_micro"]["lo"] > 0 and out["auc_macro"]["lo"] > 0.2
    assert out["auc_macro"]["lo"] <= out["auc_macro"]["diff"] <= out["auc_macro"]["hi"]
    assert out["f1_micro"]["p_a_below_b"] == 0.0
    assert M.paired_bootstrap(y, [(good, 0.5)], [(noise, 0.5)], n_boot=300, seed=1) == out
    flipped = M.paired_bootstrap(y, [(noise, 0.5)], [(good, 0.5)], n_boot=300, seed=1)
    assert flipped["auc_macro"]["hi"] == pytest.approx(-out["auc_macro"]["lo"], abs=1e-12)


def test_paired_bootstrap_rejects_empty_sides_and_mismatched_shapes():
    y, good, _ = _two_models()
    with pytest.raises(ValueError, match="at least one run"):
        M.paired_bootstrap(y, [], [(good, 0.5)])
    with pytest.raises(ValueError, match="shape"):
        M.paired_bootstrap(y, [(good[:, :3], 0.5)], [(good, 0.5)])
    with pytest.raises(ValueError, match="n_boot"):
        M.paired_bootstrap(y, [(good, 0.5)], [(good, 0.5)], n_boot=0)


# ------------------------------------------------------------------------------------------- at scale, vs sklearn


def _random_case(seed: int, n: int, k: int, *, ties: bool):
    rng = np.random.default_rng(seed)
    y = rng.random((n, k)) < rng.uniform(0.01, 0.5, size=k)              # codes common and rare
    y[:, 0] = False                                                       # a code absent from the split
    if k > 2:
        y[:, 1] = True                                                    # a code on every note (AUC undefined)
    s = rng.random((n, k)).astype(np.float32)
    if ties:
        s = np.round(s * 8) / 8                                           # many exact ties
    return y, s


@pytest.mark.parametrize("seed,n,k,ties", [(0, 50, 7, True), (1, 300, 40, False), (2, 120, 600, True),
                                           (3, 5000, 3, True)])
def test_aucs_equal_sklearn_per_code_and_micro(seed, n, k, ties) -> None:
    from sklearn.metrics import roc_auc_score

    y, s = _random_case(seed, n, k, ties=ties)
    aucs = M.label_aucs(y, s)
    for j in range(k):
        if 0 < y[:, j].sum() < n:
            assert aucs[j] == pytest.approx(roc_auc_score(y[:, j], s[:, j]), abs=1e-12)
        else:
            assert np.isnan(aucs[j])
    assert M.auc_micro(y, s) == pytest.approx(roc_auc_score(y.ravel(), s.ravel()), abs=1e-12)
    assert M.auc_macro(y, s) == (pytest.approx(np.nanmean(aucs)), int((~np.isnan(aucs)).sum()))


@pytest.mark.parametrize("seed,n,k", [(0, 30, 20), (1, 3000, 700)])
def test_top_k_equals_a_stable_sort_with_ties_across_row_chunks(seed, n, k, monkeypatch) -> None:
    monkeypatch.setattr(R, "_ROWS", 7)                                    # many chunks, one ragged
    y, s = _random_case(seed, n, k, ties=True)
    for kk in (1, 5, 15):
        top = np.argsort(-s.astype(np.float64), axis=1, kind="stable")[:, :kk]
        hits = np.take_along_axis(y, top, axis=1).sum(axis=1)
        assert M.precision_at_k(y, s, k=kk) == pytest.approx((hits / kk).mean(), abs=1e-12)
        gold = y.sum(axis=1)
        assert M.recall_at_k(y, s, k=kk) == pytest.approx((hits[gold > 0] / gold[gold > 0]).mean(), abs=1e-12)


def test_every_threshold_of_an_unsorted_grid_counts_like_binarize(monkeypatch) -> None:
    monkeypatch.setattr(T, "_ROWS", 13)
    y, s = _random_case(4, 200, 30, ties=True)
    grid = np.array([0.5, 0.0, 0.125, 0.99, 0.125, 1.0, 0.3])              # unsorted, repeated, on tie values
    curve = M.f1_by_threshold(y, s, grid)
    for g, t in enumerate(grid):
        yhat = M.binarize(s, t)
        assert curve["f1_micro"][g] == pytest.approx(M.micro_prf(y, yhat)[2], abs=1e-12)
        assert curve["f1_macro"][g] == pytest.approx(M.macro_prf(y, yhat)[2], abs=1e-12)


def test_macro_f1_over_present_codes_is_the_mean_over_codes_with_gold_notes() -> None:
    from sklearn.metrics import f1_score

    y, s = _random_case(5, 400, 50, ties=False)
    out = M.all_metrics(y, s, threshold=0.6)
    present = y.sum(axis=0) > 0
    assert out["n_codes_present"] == int(present.sum()) == 49
    want = f1_score(y[:, present], s[:, present] > 0.6, average="macro", zero_division=0)
    assert out["f1_macro_present"] == pytest.approx(want, abs=1e-12)
    assert out["f1_macro_mean"] == pytest.approx(want * 49 / 50, abs=1e-12)  # the absent code adds a 0
    assert out["n_auc_labels"] == 48                                       # absent and everywhere: no AUC


def test_float32_scores_are_not_copied_to_float64() -> None:
    s = np.zeros((3, 4), dtype=np.float32)
    assert C._check_scores(s) is s


def test_frequency_slices_split_codes_by_training_notes():
    y = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    s = np.array([[0.9, 0.2, 0.8, 0.1], [0.3, 0.7, 0.4, 0.2], [0.6, 0.1, 0.2, 0.3], [0.1, 0.8, 0.9, 0.4]])
    rows = M.per_label_metrics(y, s, ["a", "b", "c", "d"], threshold=0.5)
    for row, n in zip(rows, (25, 3, 19, 2)):
        row["train_count"] = n
    out = M.frequency_slices(rows, rare_below=20)
    assert out["rare_below"] == 20
    assert (out["rare"]["n_codes"], out["frequent"]["n_codes"]) == (3, 1)
    # rare: b, c present (d has no gold note: no AUC, not in macro-F1)
    assert out["rare"]["n_present"] == 2
    assert out["rare"]["auc_macro"] == pytest.approx((rows[1]["auc"] + rows[2]["auc"]) / 2)
    assert out["rare"]["f1_macro"] == pytest.approx((rows[1]["f1"] + rows[2]["f1"]) / 2)
    assert out["frequent"]["auc_macro"] == pytest.approx(rows[0]["auc"])
    none = M.frequency_slices(rows, rare_below=1)
    assert none["rare"] == {"n_codes": 0, "n_present": 0, "auc_macro": None, "f1_macro": None}
    del rows[0]["train_count"]
    with pytest.raises(ValueError, match="train_count"):
        M.frequency_slices(rows)
