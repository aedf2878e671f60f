"""A `--titles` file is checked against the checkpoint's code system, as `review decide --add` checks a coder's code
(#51): an ICD-10 code for an ICD-9 model, an ICD-9 code for an ICD-10 one, or a line that is no code at all is never
suggested (in JSONL or as a FHIR Condition): left out and reported in one warning, or, when most of the file's codes
are not the system's, the file is refused in one line (counted, the first named)."""

from __future__ import annotations

import pytest

from clinicode.codes.systems import ICD9_CM, ICD10, LOCAL, check_code
from clinicode.config import TrainConfig
from clinicode.errors import DataFormatError
from clinicode.predict import Predictor

from helpers import fails, succeeds

NOTE = "Seen for chest pain since Monday; air embolism after the line was placed."


@pytest.fixture(scope="module")
def icd10_run(tmp_path_factory):
    """A tfidf-lr run on synthetic MIMIC-IV's ICD-10 codes (seconds)."""
    from clinicode.data.prepare import prepare_mimic
    from clinicode.synthetic.mimic4 import write_demo_mimic4
    from clinicode.train import train

    base = tmp_path_factory.mktemp("icd10")
    write_demo_mimic4(base / "mimic4", n_admissions=300, seed=2)
    prepare_mimic(base / "mimic4", base / "data", icd_version=10)
    train(out_dir=base / "run", config=TrainConfig(model="tfidf-lr", device="cpu"), data_dir=base / "data",
          progress=False)
    return base / "run"


def _titles(tmp_path, lines: str):
    path = tmp_path / "titles.tsv"
    path.write_text(lines, encoding="utf-8")
    return path


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text('{"id": "n1", "text": "%s"}\n' % NOTE, encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "fhir"])
def test_an_icd9_model_leaves_out_and_reports_title_lines_of_another_system_or_none(tiny_run, tmp_path, notes, fmt,
                                                                                     caplog):
    titles = _titles(tmp_path, "999.1\tAir embolism\nR07.9\tChest pain, unspecified\nnot a code\tChest pain\n"
                               "584.8\tAcute renal failure\n001-139.99\tInfectious and parasitic diseases\n"
                               "998.0\tPostoperative shock\n")
    out = tmp_path / f"out.{fmt}"
    succeeds(["predict", "--checkpoint", tiny_run, "--input", notes, "--output", out, "--format", fmt, "--titles",
              titles, "--no-progress"])
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "--titles" in r.getMessage()]
    assert said == ["--titles: 3 of 6 codes are not of the checkpoint's code system, ICD-9-CM (the first, 'R07.9', is "
                    "a code of ICD-10-CM); they are left out, never suggested."]  # the CLI shows warnings on stderr
    got = out.read_text(encoding="utf-8")
    assert "999.1" in got and "R07.9" not in got and "not a code" not in got  # the note says chest pain
    pred = Predictor.from_checkpoint(tiny_run, device="cpu",
                                     titles={"999.1": "Air embolism", "not a code": "Chest pain"})
    assert pred.titles_left_out == ("not a code",)
    assert [s.code for s in pred.predict([NOTE])[0].suggested] == ["999.1"]


@pytest.mark.parametrize("lines, said", [
    ("R07.9\tChest pain, unspecified\nR50.9\tFever, unspecified\n999.1\tAir embolism\n",
     "2 of 3 codes are not of the checkpoint's code system, ICD-9-CM (the first, 'R07.9', is a code of ICD-10-CM)"),
    ("not a code\tChest pain\n", "(the first, 'not a code', is no ICD-9-CM code)"),
])
def test_an_icd9_model_refuses_a_titles_file_of_another_system(tiny_run, tmp_path, notes, lines, said):
    out = tmp_path / "out.fhir"
    res = fails(["predict", "--checkpoint", tiny_run, "--input", notes, "--output", out, "--format", "fhir",
                 "--titles", _titles(tmp_path, lines), "--no-progress"], said)
    assert "give titles of ICD-9-CM codes (such as 401.9)" in res.stderr and not out.exists()
    with pytest.raises(DataFormatError, match="not of the checkpoint's code system"):
        Predictor.from_checkpoint(tiny_run, device="cpu", titles={"R07.9": "Chest pain, unspecified"})


def test_an_icd9_models_own_system_titles_are_still_suggested(tiny_run, tmp_path, notes):
    titles = _titles(tmp_path, "999.1\tAir embolism\n9991\tAir embolism\n")  # dotted or not: one code
    out = tmp_path / "out.jsonl"
    pred = Predictor.from_checkpoint(tiny_run, device="cpu", titles={"999.1": "Air embolism", "9991": "Air embolism"})
    assert pred.titles_left_out == ()
    succeeds(["predict", "--checkpoint", tiny_run, "--input", notes, "--output", out, "--titles", titles,
              "--no-progress"])
    assert '"999.1"' in out.read_text(encoding="utf-8")


def test_an_icd10_model_refuses_icd9_titles(icd10_run, tmp_path, notes):
    pred = Predictor.from_checkpoint(icd10_run, device="cpu", suggest=False)
    assert pred.code_system is ICD10
    titles = _titles(tmp_path, "780.60\tFever, unspecified\n786.50\tChest pain, unspecified\n")
    fails(["predict", "--checkpoint", icd10_run, "--input", notes, "--titles", titles, "--no-progress"],
          "2 of 2 codes are not of the checkpoint's code system, ICD-10-CM/PCS (the first, '780.60', is a code of "
          "ICD-9-CM)")
    ok = Predictor.from_checkpoint(icd10_run, device="cpu", titles={"R07.9": "Chest pain, unspecified",
                                                                     "786.50": "Chest pain, unspecified"})
    assert [s.code for s in ok.predict([NOTE])[0].suggested] == ["R07.9"] and ok.titles_left_out == ("786.50",)
    with pytest.raises(DataFormatError, match=r"the first, 'R99\.99', is not in the CMS tables"):
        Predictor.from_checkpoint(icd10_run, device="cpu", titles={"R99.99": "Not a code of the tables"})


def test_the_check_is_the_one_review_decide_add_uses():
    assert check_code(ICD9_CM, "4280").code == "428.0"
    assert check_code(ICD9_CM, "R07.9").other.name == "ICD-10-CM"
    assert check_code(ICD10, "780.60").other is ICD9_CM and check_code(ICD10, "R079").code == "R07.9"
    assert check_code(ICD9_CM, "not a code").code is None and check_code(ICD9_CM, "not a code").other is None
    assert check_code(LOCAL, "anything").code is None  # a checkpoint's own labels: nothing is one of a system's


def test_a_checkpoints_suggestions_stand_in_their_room_without_a_predictor(caplog):
    """`codes.suggest.CheckpointSuggestions` is what `Predictor` asks: the titles in the checkpoint's spelling, the
    foreign ones left out, and one note's suggestions ranked with its scores of the checkpoint's codes."""
    from clinicode.codes.suggest import CheckpointSuggestions

    titles = {"9991": "Air embolism", "R07.9": "Chest pain, unspecified", "998.0": "Postoperative shock",
              "786.5": "Chest pain"}
    room = CheckpointSuggestions(["428.0", "786.50"], ["Congestive heart failure", "Chest pain, unspecified"],
                                 ICD9_CM, titles=titles)
    assert room.left_out == ("R07.9",) and "left out, never suggested" in caplog.text
    assert [s.code for s in room.suggest("Air embolism after the line.", [0.1, 0.2])] == ["999.1"]  # as '999.1'
    # a trained code under a candidate ('786.50' under '786.5') lowers it by its score: the model knows it
    low, high = room.suggest("chest pain", [0.0, 0.0]), room.suggest("chest pain", [0.0, 0.9])
    assert [s.code for s in low] == ["786.5"] and (not high or high[0].score < low[0].score)
    assert CheckpointSuggestions(["428.0"], [""], ICD9_CM, titles=titles, enabled=False).suggester is None
    with pytest.raises(DataFormatError, match="2 of 3 codes are not of the checkpoint's code system"):
        CheckpointSuggestions(["428.0"], [""], ICD9_CM, titles={"R07.9": "a", "R50.9": "b", "999.1": "c"})


def test_icd10_cm_s_billable_titles_come_from_a_public_function_of_its_module():
    """`codes.suggest` asks `icd10.icd10_cm_billable_titles` (no module reaches into `icd10._cm_module`)."""
    import inspect

    from clinicode.codes import icd10, suggest
    from clinicode.codes.systems import ICD10_CM

    titles = icd10.icd10_cm_billable_titles()
    assert len(titles) == 74_736 and ("R07.9", "Chest pain, unspecified") in titles
    assert suggest.system_titles(ICD10_CM) == dict(titles) and suggest.system_titles(ICD9_CM) == {}
    assert "_cm_module" not in inspect.getsource(suggest)
