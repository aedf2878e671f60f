"""The fused model learns each code's mentions from the training notes' evidence spans: it finds them again in new
notes (the title match), shows them first among the code's words, and keeps them owner-only in the checkpoint."""

import json
import random
import re
import stat
from dataclasses import replace

import numpy as np
import pytest

from clinicode.config import TrainConfig
from clinicode.data.prepared import read_split
from clinicode.errors import CheckpointError
from clinicode.evaluate import evidence_of
from clinicode.files import sha256_file
from clinicode.matching import Matching
from clinicode.models.fused.mentions import MAX_WORDS, MENTION_WEIGHT, MENTIONS_FILE, MentionLexicon
from clinicode.models.fused.scorer import MENTION_BAND
from clinicode.models.spans import WORD_BAR, word_spans
from clinicode.predict import Predictor
from clinicode.train import train

from conftest import TINY_MODEL

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
PHRASES = {"C1": "glorp fever", "C2": "vantic syndrome", "C3": "zelmic palsy", "C4": "hurdic anaemia",
           "C5": "plimsy gout", "C6": "crovan rash"}
FILLER = ("patient presented with history of the and was seen in clinic today after review notes stable plan follow "
          "up discussed family work walking sleep daily routine medication given").split()


def _note(rng, codes, upper=False):
    """A note of filler words holding each code's phrase once, and its evidence spans."""
    words = [rng.choice(FILLER) for _ in range(40)]
    text, evidence = "", []
    for i, w in enumerate(words):
        text += w + " "
        if i % 15 == 7 and codes:
            code = codes.pop()
            phrase = PHRASES[code].upper() if upper else PHRASES[code]
            evidence.append({"code": code, "start": len(text), "end": len(text) + len(phrase)})
            text += phrase + ", "
    return text.strip(), evidence


def _write(folder, *, with_evidence):
    rng = random.Random(0)
    folder.mkdir()
    for split, n in (("train", 120), ("dev", 60), ("test", 40)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                codes = sorted(rng.sample(sorted(PHRASES), 2))
                text, evidence = _note(rng, list(codes), upper=split == "test")
                row = {"id": f"{split}{i}", "text": text, "labels": codes}
                if with_evidence:
                    row["evidence"] = evidence
                f.write(json.dumps(row) + "\n")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("mentions")
    out = {}
    for with_evidence in (True, False):
        data = _write(base / f"data-{with_evidence}", with_evidence=with_evidence)
        cfg = TrainConfig(model="fused", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                          device="cpu", min_doc_freq=1)
        lines = []
        train(out_dir=base / f"run-{with_evidence}", config=cfg, data_dir=data, model_options=SIZES, progress=False,
              report=lines.append)
        out[with_evidence] = (base / f"run-{with_evidence}", lines)
    return out


def test_the_checkpoint_keeps_each_codes_mentions_owner_only(runs):
    run, lines = runs[True]
    path = run / "checkpoint" / MENTIONS_FILE
    held = json.loads(path.read_text())
    assert held["phrases"] == {code: [phrase] for code, phrase in PHRASES.items()}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads((run / "checkpoint" / "fusion.json").read_text())["mentions"] == len(PHRASES)
    assert any("6 phrases from the training notes' evidence spans" in line for line in lines)
    assert any("6 mention phrases learnt from 240 evidence spans" in line and "outside" not in line for line in lines)
    # trained on the same notes without evidence spans: no lexicon, as before
    plain, _ = runs[False]
    assert not (plain / "checkpoint" / MENTIONS_FILE).exists()
    assert json.loads((plain / "checkpoint" / "fusion.json").read_text())["mentions"] == 0


def test_a_mention_in_a_new_note_raises_its_codes_title_match(runs):
    pred = Predictor.from_checkpoint(runs[True][0], device="cpu")
    plain = Predictor.from_checkpoint(runs[False][0], device="cpu")
    note = "seen in clinic today with Glorp Fever again, plan follow up"
    k = pred.labels.index("C1")
    _, z_title = pred.scorer.bag_of_words([note])
    _, z_plain = plain.scorer.bag_of_words([note])
    assert z_title[0, k] == pytest.approx(z_plain[0, k] + MENTION_WEIGHT)
    others = [pred.labels.index(c) for c in PHRASES if c != "C1"]
    np.testing.assert_allclose(z_title[0, others], z_plain[0, others])


def test_the_mention_is_the_first_span_shown_for_its_code(runs):
    pred = Predictor.from_checkpoint(runs[True][0], device="cpu")
    note = "patient seen in clinic with a VANTIC SYNDROME flare; plan follow up and review"
    spans = pred.explain_codes(note, ["C2"], n=3)["C2"]
    start = note.index("VANTIC")
    assert (spans[0].start, spans[0].end) == (start, start + len("VANTIC SYNDROME"))


def test_a_codes_mentions_are_its_spans_on_their_own_band_above_the_word_bar(runs):
    """The fused scorer's span weights (`FusedScorer.code_spans`): a word inside one of the code's training mentions
    weighs in MENTION_BAND, every other word at most 1, and WORD_BAR never lets the two bands mix: a note holding the
    mention shows the mention alone; one without shows ordinary words."""
    assert WORD_BAR * MENTION_BAND[1] < MENTION_BAND[0] and WORD_BAR * MENTION_BAND[0] > 1.0
    pred = Predictor.from_checkpoint(runs[True][0], device="cpu")
    k = pred.labels.index("C2")
    with_mention = "patient seen in clinic with a VANTIC SYNDROME flare; plan follow up and review"
    without = "patient seen in clinic with a flare; plan follow up and review of the syndrome"
    for note, band in ((with_mention, MENTION_BAND), (without, (-1.0, 1.0))):
        enc = pred.scorer.encode([note], offsets=True)[0]
        [spans] = pred.scorer.code_spans(enc, [k], 5, text=note)
        assert spans and all(band[0] - 1e-6 <= s.weight <= band[1] + 1e-6 for s in spans), note
        rows = pred.scorer.word_rows(np.asarray(enc.ids), [k], text=note, offsets=enc.offsets)
        assert spans == word_spans(enc.offsets, rows[0], 5)                 # the one rule over the scorer's weights
    start = with_mention.index("VANTIC")
    [only] = pred.scorer.code_spans(pred.scorer.encode([with_mention], offsets=True)[0], [k], 5, text=with_mention)
    assert [(s.start, s.end) for s in only] == [(start, start + len("VANTIC SYNDROME"))]


def test_training_saves_the_evidence_figures_evaluate_reports(runs):
    """train (metrics_test.json) and evaluate judge the spans by one method (`clinicode.metrics.spans_report`)."""
    run = runs[True][0]
    pred = Predictor.from_checkpoint(run, device="cpu")
    saved = json.loads((run / "checkpoint" / "metrics_test.json").read_text())["evidence"]
    test = read_split(run.parent / "data-True", "test")
    again = evidence_of(pred, test["text"].tolist(), test["labels"].tolist(), test["evidence"].tolist(),
                             threshold=pred.threshold)
    assert saved["n_pairs"] > 0 and saved["span_code"]["n_predicted"] > 0
    assert again == saved


def test_the_lexicon_reads_only_sound_spans_of_known_codes(tmp_path):
    text = "Acute glorp fever; also x and a very long passage of one two three four five six seven words."
    evidence = [[{"code": "C1", "start": 6, "end": 17},                   # "glorp fever"
                 {"code": "C9", "start": 0, "end": 5},                    # a code the model does not have
                 {"code": "C2", "start": 50, "end": 10},                  # backwards
                 {"code": "C2", "start": 0, "end": 500},                  # past the end
                 {"code": "C3", "start": 38, "end": len(text) - 1},       # longer than MAX_WORDS words
                 {"code": "C4", "start": 17, "end": 18},                  # no word
                 {"code": "C4", "start": 24, "end": 25},                  # "x": no word of two letters
                 "not a mention"]]
    lex = MentionLexicon.build(["C1", "C2", "C3", "C4"], [text], evidence)
    assert lex.phrases == {("glorp", "fever"): (0,)}
    assert len(text[38:len(text) - 1].split()) > MAX_WORDS
    # whole words only, any case, any inflection (#50: "fevers" is "fever")
    m = lex.match(["GLORP FEVER", "glorp fevers", "glorpfever", "a glorp  fever b"], 4)
    assert m[:, 0].tolist() == [1.0, 1.0, 0.0, 1.0] and not m[:, 1:].any()
    assert lex.spans("x Glorp Fever", [0, 1]) == [[(2, 13)], []]


def test_a_damaged_or_foreign_mentions_file_is_refused(tmp_path):
    lex = MentionLexicon.build(["C1"], ["glorp fever"], [[{"code": "C1", "start": 0, "end": 11}]])
    lex.save(tmp_path)
    assert MentionLexicon.load(tmp_path, ["C1"]).phrases == lex.phrases
    with pytest.raises(CheckpointError, match="names codes this checkpoint does not have"):
        MentionLexicon.load(tmp_path, ["C7"])
    (tmp_path / MENTIONS_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="damaged"):
        MentionLexicon.load(tmp_path, ["C1"])
    assert len(MentionLexicon.load(tmp_path / "absent", ["C1"])) == 0


def test_an_acronym_matches_only_in_capitals():
    text = "Renal crisis (SRC) and HCM here."
    lex = MentionLexicon.build(["C1", "C2"], [text], [[{"code": "C1", "start": 14, "end": 17},
                                                        {"code": "C2", "start": 23, "end": 26}]])
    assert set(lex.phrases) == {("SRC",), ("HCM",)}
    m = lex.match(["we can see src", "SRC seen", "HCM seen", "Src"], 2)
    assert m.tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]


def test_acronyms_do_not_fire_on_the_words_of_a_capitalised_note():
    """#51 item 5: "CAN", "CM", "HIT", "LID" taught as acronyms coded a note typed in capitals; an acronym the training
    notes also write as an ordinary word is no mention on its own, and in capitals all around it is a word."""
    codes = ["kidney", "cardio", "thrombo", "dyskin", "scler"]
    train_text = ("Cardiac autonomic neuropathy (CAN) in diabetes; we can see it. Dilated CM; a 2 cm mass and a "
                  "3 cm cyst. Heparin-induced HIT; they hit the target. Levodopa LID; the lid of the eye. "
                  "Systemic sclerosis (SSC).")
    spans = [(codes[0], "CAN"), (codes[1], "CM"), (codes[2], "HIT"), (codes[3], "LID"), (codes[4], "SSC")]
    at = {w: re.search(rf"\b{w}\b", train_text).start() for _, w in spans}
    evidence = [[{"code": c, "start": at[w], "end": at[w] + len(w)} for c, w in spans]]
    lex = MentionLexicon.build(codes, [train_text], evidence)
    assert set(lex.phrases) == {("SSC",)}          # CAN is a stop word; CM, HIT, LID stand in lower case too
    note = "THE PATIENT CAN WALK. THERE IS A 2 CM NODULE. HE HIT HIS HEAD ON THE LID. NO SIGN OF SSC HERE EITHER."
    assert not lex.match([note], len(codes)).any()
    assert lex.match(["Known SSC, stable."], len(codes))[0].tolist() == [0, 0, 0, 0, 1]
    # "TG 250" names a measurement; "LIDs" is the acronym LID (lower-cased it matched the word "lid")
    lab = MentionLexicon.build(["K", "D"], ["renal TG was seen; LIDs then"], [[{"code": "K", "start": 6, "end": 8},
                                                                            {"code": "D", "start": 19, "end": 23}]])
    assert set(lab.phrases) == {("TG",), ("LID",)}
    assert lab.match(["Lipid panel: TG 250, HDL 40.", "TG = 3.1", "he hit the lid", "TG noted; LIDs"], 2).tolist() == [
        [0, 0], [0, 0], [0, 0], [1, 1]]
    # an older lexicon (read from a checkpoint, no training text) still needs the acronym out of a capitalised note
    old = MentionLexicon({("HIT",): (2,)}, tuple(codes))
    assert not old.match(["HE HIT HIS HEAD ON THE DOOR"], len(codes)).any()
    assert old.match(["Platelets fell: HIT suspected."], len(codes))[0, 2] == 1.0


def test_a_span_on_a_stop_word_teaches_no_mention_and_an_older_lexicon_drops_it(tmp_path):
    """#51 item 6: a coder's span on "and" taught it to 9 codes, and an unrelated note gained a code with "and" as its
    evidence. Stop words, numbers and punctuation alone are never a mention, learnt or read."""
    text = "Renal failure and sepsis, of the 2 kinds."
    evidence = [[{"code": "C1", "start": 14, "end": 17}, {"code": "C2", "start": 26, "end": 32},
                 {"code": "C1", "start": 0, "end": 13}, {"code": "C2", "start": 26, "end": 34}]]
    lex = MentionLexicon.build(["C1", "C2"], [text], evidence)
    assert set(lex.phrases) == {("renal", "failure")}
    assert not lex.match(["cough and fever of the chest"], 2).any()
    (tmp_path / MENTIONS_FILE).write_text(json.dumps({"format": "clinicode.mentions", "format_version": 1, "phrases": {
        "C1": ["and", "renal failure"], "C2": ["of the", "2", "and"]}}), encoding="utf-8")
    read = MentionLexicon.load(tmp_path, ["C1", "C2"])
    assert set(read.phrases) == {("renal", "failure")}
    assert read.spans("cough and fever; renal failure", [0, 1]) == [[(17, 30)], []]


def test_accents_plurals_and_genders_match_and_negation_is_the_matchings_choice():
    en = MentionLexicon({("chest", "pain"): (0,), ("sjogren", "syndrome"): (1,)}, ("C1", "C2"))
    notes = ["Denies chest pain, fever or cough.", "Chest pains since Monday.", "Sjögren's syndrome"]
    assert en.match(notes, 2).tolist() == [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]   # dev kept negated mentions
    negating = en.with_matching(Matching(negation=True))
    assert negating.match(notes, 2).tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    es = MentionLexicon({("carcinoma", "ductal"): (0,), ("metastasis", "osea"): (1,)}, ("C1", "C2"), "es")
    notes = ["Carcinomas ductales infiltrantes.", "Metástasis óseas múltiples.", "Se descarta carcinoma ductal."]
    assert es.match(notes, 2).tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    assert es.with_matching(Matching(negation=True)).match(notes, 2)[2].tolist() == [0.0, 0.0]
    assert es.spans("Carcinomas ductales.", [0]) == [[(0, 19)]]      # the note's own characters, not the keys'
    assert MentionLexicon.build(["C1"], ["El paciente presenta un carcinoma ductal de la mama."],
                                [[{"code": "C1", "start": 24, "end": 41}]]).language == "es"


def test_a_checkpoint_records_its_notes_language_and_an_older_one_reads_as_english(runs, tmp_path):
    import shutil

    run, _ = runs[True]
    assert json.loads((run / "checkpoint" / "fusion.json").read_text())["language"] == "en"
    old = tmp_path / "old"
    shutil.copytree(run / "checkpoint", old)
    meta = json.loads((old / "fusion.json").read_text())
    del meta["language"]                                        # as written before it was recorded
    (old / "fusion.json").write_text(json.dumps(meta))
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["files"]["fusion.json"] = sha256_file(old / "fusion.json")
    (old / "manifest.json").write_text(json.dumps(manifest))
    pred = Predictor.from_checkpoint(old, device="cpu")
    assert pred.checkpoint.model.mentions.language == "en"
    [rec] = pred.predict(["seen with glorp fever today"], threshold=0.0, top_k=None)
    assert rec.error is None


def test_a_warm_start_learns_mentions_from_its_notes_never_from_its_checkpoint(runs, tmp_path):
    """`review retrain`'s warm start starts LEAM's epochs from the checkpoint's weights, but learns mentions from its
    own training notes only: a checkpoint refitted on train + dev holds dev's mentions, and the fusion fitted on dev
    would trust them. On notes without evidence spans, the checkpoint's phrases are not carried over."""
    from clinicode.checkpoint import load_checkpoint

    run, _ = runs[True]
    assert load_checkpoint(run).model.mentions.phrases          # the checkpoint knows its phrases
    cfg = TrainConfig(model="fused", epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                      device="cpu", min_doc_freq=1)
    train(out_dir=tmp_path / "warm", config=cfg, data_dir=run.parent / "data-False", model_options=SIZES,
          progress=False, warm_start=load_checkpoint(run))
    assert not load_checkpoint(tmp_path / "warm" / "checkpoint").model.mentions.phrases
    assert json.loads((tmp_path / "warm" / "checkpoint" / "fusion.json").read_text())["mentions"] == 0


def test_no_mentions_keeps_the_spans_words_out_of_the_checkpoint(runs, tmp_path):
    run, _ = runs[True]
    cfg = TrainConfig(model="fused", epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                      device="cpu", min_doc_freq=1)
    train(out_dir=tmp_path / "off", config=cfg, data_dir=run.parent / "data-True",
          model_options={**SIZES, "mentions": False}, progress=False)
    assert not (tmp_path / "off" / "checkpoint" / MENTIONS_FILE).exists()
    assert json.loads((tmp_path / "off" / "checkpoint" / "fusion.json").read_text())["mentions"] == 0


def test_every_found_mention_outranks_every_other_word_whatever_leams_cosine(runs):
    """A mention whose words LEAM finds against the code (a negative cosine) still comes before every other word."""
    pred = Predictor.from_checkpoint(runs[True][0], device="cpu")
    note = "crovan rash seen today; patient presented with history of rash and review notes stable"
    k = pred.labels.index("C6")
    enc = pred.scorer.encode([note], offsets=True)[0]
    rows = pred.scorer.word_rows(np.asarray(enc.ids), [k], text=note, offsets=enc.offsets)[0]
    inside = [i for i, (a, b) in enumerate(enc.offsets) if b <= len("crovan rash")]
    outside = [i for i in range(len(rows)) if i not in inside]
    assert rows[inside].min() > rows[outside].max()
    # and so when LEAM's cosines are turned against the mention's words
    pred.scorer.leam.word_rows = lambda ids, codes, **_: -np.abs(np.random.default_rng(0).normal(size=(1, len(ids))))
    rows = pred.scorer.word_rows(np.asarray(enc.ids), [k], text=note, offsets=enc.offsets)[0]
    assert rows[inside].min() > rows[outside].max()


def test_evidence_codes_spelled_otherwise_reach_their_labels(tmp_path):
    """ICD-9 labels written with dots and evidence spans naming the same codes without them ('4280' for '428.0'):
    the mentions are learnt for the labels' codes."""
    icd9 = {"C1": "428.0", "C2": "401.9", "C3": "250.00", "C4": "486", "C5": "584.9", "C6": "038.9"}
    data = _write(tmp_path / "raw", with_evidence=True)
    for split in ("train", "dev", "test"):
        rows = [json.loads(line) for line in (data / f"{split}.jsonl").read_text().splitlines()]
        for r in rows:
            r["labels"] = [icd9[c] for c in r["labels"]]
            r["evidence"] = [{**m, "code": icd9[m["code"]].replace(".", "")} for m in r["evidence"]]
        if split == "train":     # and one span naming a code that is no label: told, not learnt
            rows[0]["evidence"].append({"code": "V99.9", "start": 0, "end": 5})
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TrainConfig(model="fused", epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                      device="cpu", min_doc_freq=1)
    lines = []
    train(out_dir=tmp_path / "run", config=cfg, data_dir=data, model_options=SIZES, progress=False,
          report=lines.append)
    held = json.loads((tmp_path / "run" / "checkpoint" / MENTIONS_FILE).read_text())
    assert held["phrases"] == {icd9[code]: [phrase] for code, phrase in PHRASES.items()}
    assert any("6 mention phrases learnt from 240 evidence spans (1 more name codes outside the label set)" in line
               for line in lines)


def test_the_title_match_can_leave_negated_findings_out():
    """`Matching(negation=True)`: the title match reads a note with its negated words blanked (round 16 measured it
    and the default model keeps it off: the sets' gold codes count negated mentions)."""
    from clinicode.models.fused.model import title_rows
    from clinicode.models.fused.scorer import bag_of_words
    from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr

    texts = ["pneumonia in the left lung", "fracture of the left arm", "pneumonia again", "arm fracture again"]
    lr = fit_tfidf_lr(texts, np.array([[1, 0], [0, 1], [1, 0], [0, 1]]), single_label=False, min_doc_freq=1)
    titles = title_rows(lr, ["Pneumonia", "Fracture"])
    notes = ["No evidence of pneumonia. Arm fracture.", "Pneumonia. Arm fracture."]
    plain = MentionLexicon(codes=("P", "F"))
    negating = plain.with_matching(Matching(negation=True))
    _, z_plain = bag_of_words(lr, titles, plain, notes)
    z_lr, z_neg = bag_of_words(lr, titles, negating, notes)
    assert z_plain[0, 0] > 0 and z_neg[0, 0] == 0 and z_neg[0, 1] > 0
    np.testing.assert_allclose(z_neg[1], z_plain[1])                 # a note without a negation reads as it was
    np.testing.assert_allclose(z_lr, bag_of_words(lr, titles, plain, notes)[0])   # tfidf-lr reads the whole note


def test_a_note_is_scanned_once_for_its_scores_and_its_spans_and_the_memory_is_bounded(monkeypatch):
    """Scoring a note, fusing it on dev and explaining it all ask for its mentions: the lexicon scans it once and
    answers the same; it forgets once SEEN_CHARS characters of notes were scanned, and a new lexicon starts empty."""
    import clinicode.models.fused.mentions as mentions

    lex = MentionLexicon({("crovan", "rash"): (0,), ("bleb",): (1,)}, ("A01", "B02"))
    scans = []
    real = MentionLexicon._scan
    monkeypatch.setattr(MentionLexicon, "_scan", lambda self, text: scans.append(text) or real(self, text))
    note = "A crovan rash and a bleb; later the crovan rash faded."
    first = lex.match([note], 2)
    assert first.tolist() == [[1.0, 1.0]] and len(scans) == 1
    assert lex.spans(note, [0, 1]) == [[(2, 13), (36, 47)], [(20, 24)]]
    assert lex.match([note], 2).tolist() == first.tolist() and len(scans) == 1       # remembered, the same answer
    monkeypatch.setattr(mentions, "SEEN_CHARS", len(note) + 5)
    other = "No rash here at all."
    lex.match([other], 2)
    lex.match([note], 2)
    assert scans == [note, other, note]           # the note was forgotten when the other would pass the bound
    assert sum(len(t) for t in lex._seen) <= mentions.SEEN_CHARS
    assert replace(lex, language="en")._seen == {}


def test_the_leam_parts_cap_follows_whether_the_model_learnt_mentions(tmp_path, monkeypatch):
    """`fit` asks `loop_epochs` with what it built: the coders' spans make mentions, --no-mentions none; with the
    caps set around this label set of 6 codes, only the run with mentions stops at --fused-epochs."""
    from clinicode.models.fused import kind as fused_kind

    monkeypatch.setattr(fused_kind, "CAP_FROM", 1)
    monkeypatch.setattr(fused_kind, "CAP_FROM_WITHOUT_MENTIONS", 10_000)
    data = _write(tmp_path / "data", with_evidence=True)
    epochs = {}
    for mentions in (True, False):
        cfg = TrainConfig(model="fused", epochs=3, batch_size=16, lr=2e-2, w2v_epochs=1, patience=10, seed=3,
                          device="cpu", min_doc_freq=1)
        res = train(out_dir=tmp_path / f"run-{mentions}", config=cfg, data_dir=data, progress=False,
                    model_options={**SIZES, "fused_epochs": 1, "mentions": mentions, "fit_on": "train"})
        epochs[mentions] = len(res["history"])
    assert epochs == {True: 1, False: 3}


def test_without_mentions_and_with_many_codes_the_leam_part_attends_per_code_unless_told(runs, tmp_path,
                                                                                         monkeypatch):
    """The fused model's `code_attention` None chooses by the run: per code when it learns no coders' mentions and
    has more than PER_CODE_FROM codes, per note otherwise; the choice is said, saved and read back; a given value is
    kept. The module's runs have 6 codes: per note with or without spans."""
    from clinicode.models.fused import kind as fused_kind

    for run, _ in runs.values():
        assert json.loads((run / "checkpoint" / "model_config.json").read_text())["code_attention"] is False
    monkeypatch.setattr(fused_kind, "PER_CODE_FROM", 5)
    cfg = TrainConfig(model="fused", epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3,
                      device="cpu", min_doc_freq=1)
    chosen = {}
    for with_evidence, given in ((True, None), (False, None), (False, False)):
        name = f"{with_evidence}-{given}"
        lines = []
        train(out_dir=tmp_path / name, config=cfg, data_dir=runs[with_evidence][0].parent / f"data-{with_evidence}",
              progress=False, report=lines.append, model_options={**SIZES, "code_attention": given})
        saved = json.loads((tmp_path / name / "checkpoint" / "model_config.json").read_text())
        chosen[name] = saved["code_attention"]
        assert Predictor.from_checkpoint(tmp_path / name).card()["model_config"]["code_attention"] is chosen[name]
        said = [line for line in lines if "attends per code" in line]
        assert said == (["fused: no coders' mentions to learn and 6 codes, so its LEAM part attends per code "
                         "(--model-option code_attention=false: one attention per note)"] if name == "False-None"
                        else [])
    assert chosen == {"True-None": False, "False-None": True, "False-False": False}
