"""Tokenizer: CAML's normalisation, document-frequency vocabulary, offsets into the raw note, round trip."""

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from clinicode.constants import PAD_ID, UNK_ID
from clinicode.data.text import tokenize, tokenize_with_offsets
from clinicode.tokenizer import ClinicalTokenizer

NOTE = "Pt. w/ HTN, 2 yrs; [**2101-10-20**] CHF ex-smoker BP=140/90 café 3rd x2 B12 3.5 Pt's [**Hospital1 18**]"


def test_caml_examples():
    assert tokenize("500") == []
    assert tokenize("250mg") == ["250mg"]
    assert tokenize("B12") == ["b12"]
    assert tokenize("3.5") == []
    assert tokenize("x-ray") == ["x", "ray"]
    assert tokenize("Pt's") == ["pt", "s"]
    assert tokenize("[**2150-1-1**]") == []
    assert tokenize("[**Hospital1 18**]") == ["hospital1"]


def test_vocabulary_uses_document_frequency():
    docs = ["alpha alpha alpha alpha beta", "beta gamma", "beta gamma", "gamma delta"]
    tok = ClinicalTokenizer.fit(docs, min_doc_freq=3)
    vocab = tok.vocab()
    assert "beta" in vocab and "gamma" in vocab
    assert "alpha" not in vocab, "4 occurrences in one document are document frequency 1"
    assert vocab["[PAD]"] == PAD_ID and vocab["[UNK]"] == UNK_ID


def test_ids_match_reference_and_offsets_map_back(tmp_path):
    tok = ClinicalTokenizer.fit([NOTE] * 3, min_doc_freq=3)
    enc = tok.encode([NOTE], offsets=True)[0]
    ref = tokenize_with_offsets(NOTE)
    assert [NOTE[a:b].lower() for a, b in enc.offsets] == [t for t, _, _ in ref]
    assert enc.offsets == [(a, b) for _, a, b in ref]
    assert enc.ids == [tok.token_id(t) for t, _, _ in ref]
    assert "café" in [NOTE[a:b] for a, b in enc.offsets]
    tok.save(tmp_path / "tokenizer.json")
    again = ClinicalTokenizer.load(tmp_path / "tokenizer.json")
    assert again.encode([NOTE])[0].ids == enc.ids
    assert again.vocab() == tok.vocab() and again.max_len == tok.max_len


def test_unknown_words_become_unk_and_truncation_is_flagged():
    tok = ClinicalTokenizer.fit(["heart failure"] * 3, min_doc_freq=3, max_len=3)
    enc = tok.encode(["heart zebra failure heart failure"])[0]
    assert enc.ids == [tok.token_id("heart"), UNK_ID, tok.token_id("failure")]
    assert enc.truncated
    assert not tok.encode(["heart failure"])[0].truncated


_ALPHABET = string.ascii_letters + string.digits + " _-.,;:/[]*()'\n\té"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=200))
def test_offsets_always_map_back_to_the_exact_substring(text):
    tok = ClinicalTokenizer.fit(["a"] * 3, min_doc_freq=1, max_len=10_000)
    enc = tok.encode([text], offsets=True)[0]
    assert [(a, b) for _, a, b in tokenize_with_offsets(text)] == enc.offsets
    for (a, b), (t, _, _) in zip(enc.offsets, tokenize_with_offsets(text)):
        assert text[a:b].lower() == t
