"""Property-based tests (hypothesis): ICD-9 formatting, tokenizer offsets on Unicode text, metric invariants.

Complements the properties already in data/test_icd9.py, data/test_tokenizer.py and metrics/test_metrics.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from clinicode import metrics as M
from clinicode.codes.icd9 import format_code, format_diagnosis, format_procedure
from clinicode.data.text import tokenize_with_offsets
from clinicode.errors import DataFormatError
from clinicode.tokenizer import ClinicalTokenizer

PROPS = settings(max_examples=80, deadline=None)

# ------------------------------------------------------------------------------------------------- ICD-9
DIGITS = "0123456789"
numeric_dx = st.text(DIGITS, min_size=1, max_size=5)
v_dx = st.builds(lambda p, d: p + d, st.sampled_from(["V", "v"]), st.text(DIGITS, min_size=1, max_size=4))
e_dx = st.builds(lambda p, d: p + d, st.sampled_from(["E", "e"]), st.text(DIGITS, min_size=1, max_size=4))
any_dx = st.one_of(numeric_dx, v_dx, e_dx)
padding = st.sampled_from(["", " ", "  ", "\t"])


@PROPS
@given(any_dx, padding, padding)
def test_diagnosis_dot_position_rules(raw, left, right):
    out = format_diagnosis(left + raw + right)
    bare = raw.upper()
    assert out.replace(".", "") == bare                      # every character kept, leading zeros included
    cut = 4 if bare.startswith("E") else 3
    if len(bare) > cut:
        assert out.index(".") == cut and out.count(".") == 1
    else:
        assert "." not in out                                # '486', 'V10', 'E849' stay without a dot


@PROPS
@given(any_dx, st.integers(0, 5))
def test_diagnosis_is_idempotent_wherever_a_dot_was(raw, at):
    """Re-formatting a formatted code, or a code with a dot in the wrong place, gives the same result."""
    once = format_diagnosis(raw)
    assert format_diagnosis(once) == once
    at = min(at, len(raw))
    assert format_diagnosis(raw[:at] + "." + raw[at:]) == once


@PROPS
@given(st.text(DIGITS, min_size=3, max_size=4), st.integers(0, 4), padding)
def test_procedure_dot_after_two_and_idempotent(raw, at, pad):
    out = format_procedure(pad + raw + pad)
    assert out == f"{raw[:2]}.{raw[2:]}" and out.replace(".", "") == raw
    assert format_procedure(out) == out
    at = min(at, len(raw))
    assert format_procedure(raw[:at] + "." + raw[at:]) == out


@PROPS
@given(st.text(DIGITS, min_size=0, max_size=2))
def test_short_procedure_codes_are_data_errors(raw):
    with pytest.raises(DataFormatError, match="ICD-9 procedure codes have 3-4"):
        format_procedure(raw)


@PROPS
@given(st.text(DIGITS, min_size=3, max_size=4))
def test_leading_zeros_survive_both_tables(raw):
    zeros = "00" + raw[2:]
    assert format_code(zeros, is_diagnosis=True).startswith("00")
    assert format_code(zeros, is_diagnosis=False).startswith("00.")


# ------------------------------------------------------------------------------------------- tokenizer
# Letters of many scripts (Latin with accents, Greek, Cyrillic, CJK, Arabic, Devanagari ...), decimal digits of any
# script, underscore, punctuation, spaces and control characters; surrogates and NUL excluded.
# Letters that Python calls numeric (CJK numerals such as U+5EFE, Numeric_Type=Numeric, category Lo) are left to the
# pinned case below: the reference drops a token made only of them, the Rust tokenizer keeps it (as [UNK]).
unicode_text = st.text(
    st.characters(categories=["Lu", "Ll", "Lt", "Lo", "Lm", "Nd", "Pc", "Pd", "Po", "Ps", "Pe", "Zs", "Cc"],
                  exclude_characters="\x00").filter(lambda c: not (c.isnumeric() and not c.isdecimal())),
    max_size=120,
)
SCRIPTS = "éüßøçñİıÆœαβγδΩжщёЖあ漢字한국어ابجदवनगर"  # precomposed letters only (no combining marks)


@pytest.fixture(scope="module")
def tokenizer():
    return ClinicalTokenizer.fit(["a"] * 3, min_doc_freq=1, max_len=100_000)


@settings(max_examples=150, deadline=None)
@given(unicode_text)
def test_offsets_on_unicode_letters_are_the_reference_tokens(text):
    """Rust tokenizer offsets equal CAML's \\w+ reference, and each span is the token in the original note."""
    tok = ClinicalTokenizer.fit(["a"] * 3, min_doc_freq=1, max_len=100_000)
    enc = tok.encode([text], offsets=True)[0]
    ref = tokenize_with_offsets(text)
    assert enc.offsets == [(a, b) for _, a, b in ref]
    for (a, b), (t, _, _) in zip(enc.offsets, ref):
        assert 0 <= a < b <= len(text) and text[a:b].lower() == t


@pytest.mark.xfail(strict=True, reason="known: a token made only of letters Python calls numeric (U+5EFE, a CJK "
                   "numeral) is dropped by CAML's reference and kept by the Rust tokenizer as "
                   "[UNK]; rare in English notes")
def test_a_cjk_numeral_letter_alone_is_dropped_like_the_reference(tokenizer):
    text = "a \u5efe b"
    assert tokenizer.encode([text], offsets=True)[0].offsets == [(a, b) for _, a, b in tokenize_with_offsets(text)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(st.sampled_from(SCRIPTS + "abcXYZ019_"), min_size=1, max_size=8), min_size=1, max_size=20),
       st.sampled_from([" ", ", ", "\n", " / ", "; ", "-", "\t"]))
def test_offsets_hold_on_unicode_words_joined_by_separators(words, sep):
    text = sep.join(words)
    enc = ClinicalTokenizer.fit(["a"] * 3, min_doc_freq=1, max_len=100_000).encode([text], offsets=True)[0]
    ref = tokenize_with_offsets(text)
    assert enc.offsets == [(a, b) for _, a, b in ref]


# A naive Rust pre-tokenizer (_SPLIT = r"[^\w]+|\b\d+\b") and CAML's reference
# (clinicode/data/text.py: Python re `\w+`, drop `str.isnumeric()` tokens) disagree on characters outside
# letters and decimal digits: Oniguruma's \w includes combining marks (Mn/Mc) but not other numerics (No, Nl),
# Python's is the reverse. The vocabulary is fitted from the Python tokens and notes are encoded with Rust, so
# such words become [UNK] or lose a piece, and evidence offsets differ from the reference.
# tokenizer.py therefore spells the pre-tokenizer with Unicode classes (\p{L}, \p{N}, plus U+0307, which the
# Lowercase normalizer produces from 'İ'); these cases pin that.
@pytest.mark.parametrize("text", ["BSA 1.9 m\u00b2 today", "x\u00b9 y", "0\u00bc", "cafe\u0301 au lait",
                                  "\u216b cranial nerve",
                                  "\u0926\u0947\u0935\u0928\u093e\u0917\u0930\u0940 script"])
def test_offsets_on_superscripts_fractions_and_combining_marks(tokenizer, text):
    enc = tokenizer.encode([text], offsets=True)[0]
    assert enc.offsets == [(a, b) for _, a, b in tokenize_with_offsets(text)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["héllo", "Straße", "Ωmega", "пациент", "患者", "naïve", "x2", "B12", "café"]),
                min_size=1, max_size=30), st.integers(1, 12))
def test_truncation_keeps_a_prefix_of_the_offsets(words, max_len):
    text = " ".join(words)
    vocab_texts = [text] * 3
    tok = ClinicalTokenizer.fit(vocab_texts, min_doc_freq=1, max_len=max_len)
    enc = tok.encode([text], offsets=True)[0]
    ref = tokenize_with_offsets(text)
    assert enc.offsets == [(a, b) for _, a, b in ref][:max_len]
    assert enc.truncated == (len(ref) > max_len)
    assert all(i > 1 for i in enc.ids)  # every word is in the vocabulary (no UNK, no PAD)


# ------------------------------------------------------------------------------------------------ metrics
@st.composite
def gold_and_scores(draw):
    n, k = draw(st.integers(1, 10)), draw(st.integers(1, 6))
    y = draw(arrays(np.int8, (n, k), elements=st.integers(0, 1)))
    s = draw(arrays(np.float64, (n, k), elements=st.integers(0, 200).map(lambda i: i / 200)))
    return y, s


def _f1(y, yhat):
    tp = float((y * yhat).sum())
    pp, gp = float(yhat.sum()), float(y.sum())
    p = tp / pp if pp else 0.0
    r = tp / gp if gp else 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


@PROPS
@given(gold_and_scores(), st.integers(0, 200).map(lambda i: i / 200))
def test_f1_micro_at_t_equals_f1_of_binarize(ys, t):
    y, s = ys
    yhat = M.binarize(s, t)
    assert np.array_equal(yhat, (s > t).astype(yhat.dtype))           # strictly greater
    want = _f1(y, yhat)
    assert M.all_metrics(y, s, threshold=t)["f1_micro"] == pytest.approx(want, abs=1e-12)
    assert M.micro_prf(y, yhat)[2] == pytest.approx(want, abs=1e-12)
    curve = M.f1_by_threshold(y, s, [t])
    assert curve["f1_micro"][0] == pytest.approx(want, abs=1e-12)
    assert curve["f1_macro_mean"][0] == pytest.approx(M.f1_macro_mean(y, yhat), abs=1e-12)
    assert curve["f1_macro"][0] == pytest.approx(M.macro_prf(y, yhat)[2], abs=1e-12)


MONOTONE = {
    "sqrt": np.sqrt,
    "cube": lambda s: s ** 3,
    "logit": lambda s: np.log((s + 1e-3) / (1 - s + 1e-3)),
    "affine": lambda s: 0.2 + 0.5 * s,
    "rank": lambda s: np.argsort(np.argsort(s.ravel(), kind="stable"), kind="stable").reshape(s.shape) / s.size
    if len(np.unique(s)) == s.size else s,
}


@PROPS
@given(gold_and_scores(), st.sampled_from(sorted(MONOTONE)))
def test_auc_and_ranking_metrics_invariant_under_monotone_transforms(ys, name):
    y, s = ys
    t = MONOTONE[name](s)
    assert np.all(np.diff(t.ravel()[np.argsort(s.ravel(), kind="stable")]) >= 0)  # order (and ties) kept
    a1, n1 = M.auc_macro(y, s)
    a2, n2 = M.auc_macro(y, t)
    assert n1 == n2
    assert (math.isnan(a1) and math.isnan(a2)) or a1 == pytest.approx(a2, abs=1e-12)
    m1, m2 = M.auc_micro(y, s), M.auc_micro(y, t)
    assert (math.isnan(m1) and math.isnan(m2)) or m1 == pytest.approx(m2, abs=1e-12)
    for k in range(1, y.shape[1] + 1):
        assert M.precision_at_k(y, t, k=k) == pytest.approx(M.precision_at_k(y, s, k=k))


@PROPS
@given(gold_and_scores(), st.integers(0, 199).map(lambda i: i / 200))
def test_tuned_threshold_is_a_maximiser_of_f1_micro(ys, _):
    y, s = ys
    grid = np.linspace(0, 1, 21)
    best = M.tune_threshold(y, s, grid=grid)
    f_best = _f1(y, M.binarize(s, best))
    assert all(f_best >= _f1(y, M.binarize(s, g)) - 1e-12 for g in grid)


@PROPS
@given(gold_and_scores())
def test_micro_f1_is_between_min_and_max_of_per_label_contributions_when_pooled(ys):
    """Pooling: micro counts are the sums of the per-label counts, so micro-F1 of a one-label slice repeats."""
    y, s = ys
    assume(y.shape[1] >= 1)
    yhat = M.binarize(s, 0.5)
    stacked_y = np.concatenate([y, y], axis=0)
    stacked_hat = np.concatenate([yhat, yhat], axis=0)
    assert M.micro_prf(stacked_y, stacked_hat) == pytest.approx(M.micro_prf(y, yhat))
