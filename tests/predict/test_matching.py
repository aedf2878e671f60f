"""Matching that survives clinical language (#50, #51): folding, stems, the notes' language, negated findings and
capitalised notes, as `clinicode.matching` gives them to the mentions and the title suggestions."""

import pytest

from clinicode.matching import (
    WORD,
    blank_negated,
    caps_context,
    detect_language,
    fold,
    inflect,
    is_stopword_phrase,
    negated,
    stem,
)


def _held(text, language):
    words = [(fold(m.group()), m.start(), m.end()) for m in WORD.finditer(text)]
    return [text[a:b] for (_, a, b), h in zip(words, negated(text, words, language)) if h]


def test_case_and_accents_fold_and_inflections_share_a_stem():
    assert fold("Sjögren") == "sjogren" and fold("BEHÇET") == "behcet" and fold("Sézary") == "sezary"
    assert stem("diseases", "en") == stem("disease", "en") and stem("coughing", "en") == stem("cough", "en")
    assert stem("tumores", "es") == stem("tumor", "es") and stem("malignas", "es") == stem("maligno", "es")
    assert stem("hepatitis", "en") != stem("hepatic", "en")          # an inflammation is not its organ's adjective
    assert stem("hepatitides", "en") == "hepatitis" and stem("cm", "en") == "cm" and stem("t4n0", "en") == "t4n0"
    # the plural endings alone (what dev kept: `Matching.inflection` "plural")
    assert inflect("injuries", "en") == "injury" and inflect("metastases", "en") == "metastasis"
    assert inflect("abscess", "en") == "abscess" and inflect("hepatitis", "en") == "hepatitis"
    assert inflect("tumores", "es") == inflect("tumor", "es") == "tumor"
    assert inflect("malignas", "es") == inflect("maligna", "es") != inflect("maligno", "es")   # gender is kept
    assert inflect("lesiones", "es") == inflect("lesion", "es") and inflect("metastasis", "es") == "metastasis"
    assert inflect("infiltrantes", "es") == inflect("infiltrante", "es") and inflect("series", "es") == "serie"


@pytest.mark.parametrize("text, language, held", [
    ("Review of systems: denies chest pain, fever or cough. No nausea.", "en",
     ["chest", "pain", "fever", "or", "cough", "nausea"]),
    ("No evidence of pneumonia. Mild atelectasis.", "en", ["pneumonia"]),
    ("Negative for malignancy but positive for dysplasia.", "en", ["malignancy"]),
    ("Pulmonary embolism was ruled out; DVT present.", "en", ["Pulmonary", "embolism"]),
    ("No change in the nodule.", "en", []),                         # a pseudo-trigger negates nothing
    ("Sin signos de metástasis. Se descarta carcinoma ductal, pero hay adenoma.", "es",
     ["metástasis", "carcinoma", "ductal"]),
    ("No se observan adenopatías. Tumor descartado.", "es", ["adenopatías", "Tumor"]),
])
def test_a_negation_holds_the_words_of_its_scope_in_the_sentence(text, language, held):
    assert _held(text, language) == held


def test_a_scope_ends_after_a_few_words_and_blanking_keeps_offsets():
    text = "no one two three four five six seven eight"
    assert _held(text, "en") == ["one", "two", "three", "four", "five", "six"]
    note = "Denies cough. Pneumonia seen."
    blank = blank_negated(note, "en")
    assert len(blank) == len(note) and "cough" not in blank and blank.endswith("Pneumonia seen.")
    assert blank_negated("Pneumonia seen.", "en") == "Pneumonia seen."


def test_the_notes_language_is_told_by_their_stop_words():
    assert detect_language(["El paciente presenta una masa en el pulmón de 3 cm y se descarta metástasis."]) == "es"
    assert detect_language(["The patient has a mass in the lung and there is no metastasis."]) == "en"
    assert detect_language([]) == "en"


def test_phrases_of_stop_words_and_numbers_only_are_no_mentions():
    assert is_stopword_phrase(["and"]) and is_stopword_phrase(["of", "the"]) and is_stopword_phrase(["de", "la", "2"])
    assert not is_stopword_phrase(["renal", "failure"]) and not is_stopword_phrase(["no", "hodgkin"])


def test_a_capitalised_note_is_its_own_context():
    assert all(caps_context("THE PATIENT CAN WALK WITH A 2 CM NODULE".split()))
    assert all(caps_context("HE HIT HIS HEAD ON THE LID".split()))
    assert caps_context("Lipid panel TG 250 and HDL low".split()) == [False] * 7
    assert caps_context("CBC BMP LFT TSH within normal limits".split()) == [False] * 7   # acronyms tell nothing
