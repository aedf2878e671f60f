"""clinicode.codes.titles: a code's title found in a note (every title word, any order), and where."""

from __future__ import annotations

from clinicode.codes.titles import TitleIndex, title_words, word_runs

NOTE = "Acute renal failure after lithium; seizures. Renal biopsy: acute tubular necrosis."
# Acute 0-5, renal 6-11, failure 12-19, seizures 35-43, Renal 45-50, acute 59-64, tubular 65-72, necrosis 73-81


def test_title_words_drop_stop_words_and_split_on_punctuation():
    assert title_words("Abnormalities, Drug-Induced") == {"abnormalities", "drug", "induced"}
    assert title_words("Diseases of the Heart") == {"diseases", "heart"}
    assert title_words("Of The") == frozenset()


def test_word_runs_join_neighbouring_matches_in_text_order():
    assert word_runs(NOTE, {"acute", "renal", "failure"}) == [(3, 0, 19), (1, 45, 50), (1, 59, 64)]
    assert word_runs(NOTE, {"kidney"}) == []


def test_every_title_word_must_occur_in_any_order_case_insensitive():
    index = TitleIndex({"D1": "Renal Failure, Acute", "D2": "Kidney Failure", "D3": "Necrosis, Acute Tubular",
                        "D4": "Seizures", "D5": "Of the"})
    assert len(index) == 4                                                  # a title of stop words only is left out
    found = index.match(NOTE)
    assert [m.code for m in found] == ["D3", "D1", "D4"]                     # D2: "kidney" is not in the note
    d1 = next(m for m in found if m.code == "D1")
    assert d1.spans == ((0, 19), (45, 50), (59, 64)) and d1.title == "Renal Failure, Acute"
    assert [m.code for m in index.match(NOTE, limit=1)] == ["D3"]
    assert index.match("nothing to see") == []


def test_excluded_codes_are_never_suggested_and_rarer_titles_rank_first():
    index = TitleIndex({"D1": "Acute Disease", "D2": "Acute Renal Disease", "D3": "Renal Disease",
                        "D4": "Acute Disease"}, exclude={"D4"})
    found = index.match("an acute renal disease")
    assert [m.code for m in found] == ["D2", "D1", "D3"]     # the three-word title first; D1 and D3 tie: by code
    assert found[0].specificity > found[1].specificity >= found[2].specificity
    assert index.fingerprint != TitleIndex({"D1": "Acute Disease"}).fingerprint
