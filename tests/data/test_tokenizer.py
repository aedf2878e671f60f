"""Tokenizer: CAML's normalisation, document-frequency vocabulary, offsets into the raw note, round trip."""

import string

from hypothesis import given, settings, strategies as st

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


def _reference_fit(texts, min_doc_freq):
    """The vocabulary by its definition, from the pure-Python tokenisation: words in >= min_doc_freq notes, most
    frequent first, ties alphabetical."""
    from collections import Counter

    df = Counter(w for t in texts for w in set(tokenize(t)))
    return sorted((w for w, c in df.items() if c >= min_doc_freq), key=lambda w: (-df[w], w))


def test_fit_reads_the_notes_once_and_gives_what_training_reuses():
    """One Rust pass: the vocabulary of the definition, each note's kept ids (= encode), its whole word list (for
    word2vec, rare words included and nothing truncated) and the token count."""
    import random

    rng = random.Random(0)
    pool = ["heart", "failure", "Café", "B12", "x-ray", "2101", "İstanbul", "pt's", "3.5", "½", "Ⅻ", "zebra", "a_b"]
    texts = [" ".join(rng.choice(pool) + rng.choice(["", "s", "1", " 7"]) for _ in range(rng.randint(0, 40)))
             for _ in range(60)] + [NOTE, "", "123 456"]
    tok, tokens = ClinicalTokenizer.fit_tokens(texts, min_doc_freq=3, max_len=25)
    vocab = tok.vocab()
    assert [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1])][2:] == _reference_fit(texts, 3)
    assert ClinicalTokenizer.fit(texts, min_doc_freq=3, max_len=25).vocab() == vocab
    ids = tokens.ids()
    for text, mine, enc in zip(texts, ids, tok.encode_ids(texts)):
        assert mine.tolist() == enc.tolist() == [vocab.get(w, UNK_ID) for w in tokenize(text)][:25]
    assert tokens.n_tokens == sum(len(tokenize(t)) for t in texts)
    assert [w for piece in tokens.sentences() for w in piece] == [w for t in texts for w in tokenize(t)]


def test_fit_keeps_every_word_past_the_trainers_30000_default():
    """tokenizers' WordLevelTrainer keeps 30,000 words unless told otherwise, silently (ECOSYSTEM.md)."""
    texts = [" ".join(f"w{i}q" for i in range(k, 40_000, 3)) for k in range(3)] * 3
    tok, tokens = ClinicalTokenizer.fit_tokens(texts, min_doc_freq=3)
    assert tok.vocab_size == 40_000 + 2 and len(tokens.words) == 40_000 + 2


def test_word2vec_pieces_stay_below_gensims_limit():
    _, tokens = ClinicalTokenizer.fit_tokens(["alpha beta " * 12_000] * 3, min_doc_freq=1)
    pieces = list(tokens.sentences())
    assert [len(p) for p in pieces] == [10_000, 10_000, 4_000] * 3 and pieces == list(tokens.sentences())


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
