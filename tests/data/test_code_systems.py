"""Code systems as values (clinicode.codes.systems): each system's validation and spelling table, FHIR URIs, kinds and
groups; inference for label sets that name none, in the one registry's order; labels.json recording the system;
prepared folders and checkpoints carrying it, old checkpoints inferring it once; a new system added by one line."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from clinicode.codes import systems
from clinicode.codes.systems import (
    CODE_SYSTEMS,
    DIAGNOSIS,
    ICD9_CM,
    ICD10,
    ICD10_CM,
    ICD10_PCS,
    ICDO3,
    LOCAL,
    MESH,
    MESH_OMIM,
    MIXED,
    OMIM,
    PROCEDURE,
    REGISTRY,
    CodeSystem,
    check_code,
    code_system,
    family_of,
    infer_code_system,
)
from clinicode.constants import CAML_TOP50
from clinicode.data.labels import LabelSet
from clinicode.data.prepared import load_dataset
from clinicode.errors import DataFormatError
from clinicode.files import read_json, sha256_file
from tests.conftest import SHARED_DATA


# (system, as a user may write it, clinicode's spelling); every row is valid and normalises as shown
@pytest.mark.parametrize("system, given, want", [
    (ICD9_CM, "401.9", "401.9"), (ICD9_CM, "4019", "401.9"), (ICD9_CM, " 0389 ", "038.9"),
    (ICD9_CM, "v5861", "V58.61"), (ICD9_CM, "E8497", "E849.7"), (ICD9_CM, "e849.7", "E849.7"),
    (ICD9_CM, "486", "486"), (ICD9_CM, "38.93", "38.93"), (ICD9_CM, "00.40", "00.40"),
    (ICD10_CM, "J189", "J18.9"), (ICD10_CM, "j18.9", "J18.9"), (ICD10_CM, "y92230", "Y92.230"),
    (ICD10_CM, "I10", "I10"), (ICD10_CM, "s72001a", "S72.001A"), (ICD10_CM, "e11.65", "E11.65"),
    (ICD10_PCS, "02hv33z", "02HV33Z"), (ICD10_PCS, "5A1955Z", "5A1955Z"),
    (ICD10, "y92.230", "Y92.230"), (ICD10, "02hv33z", "02HV33Z"),
    (MESH, "d009369", "D009369"), (MESH, "D000069279", "D000069279"), (MESH, "c537666", "C537666"),
    (MESH, "MESH:C535662", "MESH:C535662"),
    (OMIM, "omim:312080", "OMIM:312080"), (MESH_OMIM, "OMIM:312080", "OMIM:312080"),
    (ICDO3, "8140/3", "8140/3"), (ICDO3, "8070/34", "8070/34"), (ICDO3, " 8140/3/h ", "8140/3/H"),
    (ICDO3, "9590/6", "9590/6"),
    (LOCAL, " my-label ", "my-label"), (LOCAL, "Sepsis", "Sepsis"),
])
def test_valid_codes_and_their_spelling(system, given, want):
    assert system.is_valid(given)
    assert system.normalise(given) == want
    assert system.normalise(want) == want  # idempotent


@pytest.mark.parametrize("system, code", [
    (ICD9_CM, "J18.9"), (ICD9_CM, "12"), (ICD9_CM, "40.1.9"), (ICD9_CM, "４０１９"), (ICD9_CM, "E11.65"),
    (ICD10_CM, "401.9"), (ICD10_CM, "E849.7"), (ICD10_CM, "J1.89"), (ICD10_PCS, "02HV3.3Z"), (ICD10_PCS, "02HV33"),
    (ICD10_PCS, "02HO33Z"),  # PCS never uses O or I
    (ICD10, "401.9"), (MESH, "D12345"), (MESH, "X009369"), (MESH, "OMIM:312080"), (OMIM, "312080"),
    (ICDO3, "8140"), (ICDO3, "8140/4"), (ICDO3, "7140/3"), (ICDO3, "8140/30"), (ICDO3, "8140/3/X"), (ICDO3, "C50.9"),
    (LOCAL, ""), (LOCAL, "   "),
])
def test_invalid_codes_are_refused_with_one_line(system, code):
    assert not system.is_valid(code)
    with pytest.raises(DataFormatError, match=rf"is not a {system.name} code; expected a code such as "
                                              rf"'{system.example}'"):
        system.normalise(code)


# CodeSystem.canonical: the one spelling of a code however written, decided by the system (#42): review's --add and
# --titles files ask it, so an undotted MIMIC spelling finds the checkpoint's dotted code
@pytest.mark.parametrize("system, given, kind, want", [
    (ICD10, "S72001A", None, "S72.001A"),   # was taken for an ICD-10-PCS code by its 7-character shape
    (ICD10, "s72.001a", None, "S72.001A"), (ICD10, "J189", None, "J18.9"), (ICD10, "02hv33z", None, "02HV33Z"),
    (ICD10, "H401131", None, "H40.1131"),   # both shapes allow it: the CMS tables know the ICD-10-CM code
    (ICD10, "X000XXA", None, "X00.0XXA"),
    (ICD10, "B2111ZZ", None, "B2111ZZ"),    # both shapes allow it, no such ICD-10-CM code: the PCS code
    (ICD10, "ZZZZZZZ", None, None), (ICD10, "SZZZZZZ", None, None), (ICD10, "401.9", None, None),
    (ICD10, "J189", PROCEDURE, None), (ICD10, "02HV33Z", PROCEDURE, "02HV33Z"), (ICD10, "02HV33Z", DIAGNOSIS, None),
    (ICD9_CM, "0040", None, "004.0"), (ICD9_CM, "00.40", None, "00.40"),  # undotted digits: a diagnosis
    (ICD9_CM, "0040", PROCEDURE, "00.40"), (ICD9_CM, "0040", DIAGNOSIS, "004.0"), (ICD9_CM, "00.40", DIAGNOSIS, None),
    (ICD9_CM, "004.0", PROCEDURE, None), (ICD9_CM, "v5861", None, "V58.61"), (ICD9_CM, "J18.9", None, None),
    (MESH_OMIM, "OMIM:312080", None, "OMIM:312080"), (MESH_OMIM, "mesh:c535662", None, "MESH:C535662"),
    (MESH_OMIM, "d009369", None, "D009369"), (MESH_OMIM, "S72.001A", None, None),
    (LOCAL, " my label ", None, "my label"), (LOCAL, "  ", None, None), (ICD10, None, None, None),
])
def test_canonical_is_the_systems_one_spelling(system, given, kind, want):
    assert system.canonical(given, kind=kind) == want
    if want is not None:
        assert system.canonical(want, kind=kind) == want  # idempotent
        assert system.normalise(given) == want or kind is not None


def test_an_undotted_icd10_cm_code_is_no_pcs_code():
    assert ICD10.member("S72001A") is ICD10_CM and ICD10.kind("S72001A") == DIAGNOSIS
    assert not ICD10_PCS.is_valid("S72001A") and not ICD10.is_valid("ZZZZZZZ")


def test_each_system_has_its_fhir_uri_and_kind():
    assert ICD9_CM.uri == "http://hl7.org/fhir/sid/icd-9-cm"
    assert ICD10_CM.uri == "http://hl7.org/fhir/sid/icd-10-cm"
    assert ICD10_PCS.uri == "http://www.cms.gov/Medicare/Coding/ICD10"
    assert MESH.uri == "https://www.nlm.nih.gov/mesh"
    assert OMIM.uri == "https://omim.org"
    assert ICDO3.uri == "http://terminology.hl7.org/CodeSystem/icd-o-3" and ICDO3.kind("8140/3") == DIAGNOSIS
    assert LOCAL.uri == "" and ICD10.uri == ""  # a family has no URI of its own: its members do
    assert (ICD10.uri_of("J18.9"), ICD10.uri_of("02HV33Z")) == (ICD10_CM.uri, ICD10_PCS.uri)
    assert (ICD9_CM.kind("38.93"), ICD9_CM.kind("401.9"), ICD9_CM.kind("V58.61")) == (PROCEDURE, DIAGNOSIS, DIAGNOSIS)
    assert (ICD10.kind("02HV33Z"), ICD10.kind("J18.9"), MESH_OMIM.kind("D009369")) == (PROCEDURE, DIAGNOSIS,
                                                                                        DIAGNOSIS)
    assert ICD10.member("nonsense") is None and ICD10.uri_of("nonsense") == "" and ICD10.kind("nonsense") == DIAGNOSIS


def test_groups_follow_the_system_not_the_codes_shape():
    # V58.61 has both versions' shapes: an ICD-10 set groups it with ICD-10-CM's chapters, an ICD-9 set with ICD-9's
    assert ICD9_CM.group("V58.61").startswith("ICD-9 dx: Supplementary V codes")
    assert ICD10.group("V58.61") == "ICD-10-CM: External causes of morbidity"
    assert ICD9_CM.group("38.93") == "ICD-9 px: Operations on the cardiovascular system"
    assert ICD10.group("B2111ZZ") == "ICD-10-PCS: Imaging"
    assert (MESH_OMIM.group("D009369"), MESH_OMIM.group("C537666"), MESH_OMIM.group("OMIM:312080")) == (
        "MeSH: descriptors", "MeSH: supplementary concepts", "OMIM")
    assert MESH_OMIM.group("401.9") == "Other codes"
    assert (ICDO3.group("8140/3"), ICDO3.group("8140/6/H")) == ("ICD-O-3 morphology 814x",) * 2


def test_titles_are_those_the_system_ships():
    assert ICD10.titles(["J18.9", "02HV33Z"]) == {"J18.9": "Pneumonia, unspecified organism"}
    assert ICD9_CM.titles(["V58.61"]) == {}  # not ICD-10-CM's V58.61, whose title the shape guess would have taken
    assert MESH_OMIM.titles(["D009369"]) == {}


def test_registry_by_name():
    for name, system in CODE_SYSTEMS.items():
        assert code_system(name) is system and system.name == name
    assert {"ICD-9-CM", "ICD-10-CM", "ICD-10-PCS", "ICD-10-CM/PCS", "MeSH"} <= set(CODE_SYSTEMS)
    with pytest.raises(DataFormatError, match=r"unknown code system 'ICD-11'; known: ICD-9-CM, MeSH, OMIM, MeSH/OMIM, "
                                              r"ICD-10-PCS, ICD-10-CM, ICD-10-CM/PCS, ICD-O-3, local, mixed\.$"):
        code_system("ICD-11")


@pytest.mark.parametrize("codes, want", [
    (CAML_TOP50, ICD9_CM),                          # diagnoses and procedures: one classification
    (["V58.61"], ICD9_CM),                          # fits both versions: ICD-9, as the shape guess decided
    (["J18.9", "I10"], ICD10), (["02HV33Z", "J18.9", "V58.61"], ICD10), (["02HV33Z"], ICD10),
    (["D009369", "C537666"], MESH_OMIM),            # not ICD-10-PCS, whose shape D009369 also has
    (["D009369", "OMIM:312080"], MESH_OMIM),
    (["401.9", "J18.9"], MIXED), (["401.9", "my-label"], MIXED), (["a", "b"], LOCAL),
    (["D009369", "401.9"], MIXED),
    (["8140/3", "8000/6", "8070/34", "8010/3/H"], ICDO3),   # CANTEMIST's eCIE-O-3.1 morphology codes
    (["8140/3", "my-label"], MIXED),
])
def test_infer_code_system(codes, want):
    assert infer_code_system(codes) is want


def test_family_of_members():
    assert family_of([ICD10_CM]) is ICD10  # an ICD-10 set may receive a PCS code even when its labels hold none
    assert family_of([ICD10_PCS, ICD10_CM]) is ICD10 and family_of([ICD9_CM]) is ICD9_CM
    assert family_of([MESH]) is MESH_OMIM and family_of([LOCAL]) is LOCAL
    assert family_of([ICD9_CM, ICD10_CM]) is MIXED


def test_every_question_asks_the_registry_in_its_order():
    """One ordered list: a MeSH id is MeSH wherever it is asked (it also has the shape of an undotted ICD-10-PCS
    code), in a mixed set, by check_code and in the names a message lists."""
    assert REGISTRY == [ICD9_CM, MESH_OMIM, ICD10, ICDO3]
    assert MIXED.leaves == (ICD9_CM, MESH, OMIM, ICD10_PCS, ICD10_CM, ICDO3, LOCAL)
    assert MIXED.member("D009369") is MESH and MIXED.canonical("d009369") == "D009369"
    assert check_code(ICD9_CM, "D009369").other is MESH and check_code(ICD9_CM, "02HV33Z").other is ICD10_PCS
    assert check_code(MESH_OMIM, "J18.9").other is ICD10_CM


# ------------------------------------------------------------------ adding a code system (docs/architecture.md)
# The recipe tried: one value and one registry line. SNOMED CT concept ids are 6 to 18 digits; a 7-digit one has the
# shape of an undotted ICD-10-PCS code, so the line goes before ICD-10.
SNOMED = CodeSystem(
    "SNOMED CT", "http://snomed.info/sct", example="22298006",
    _valid=lambda c: c.isdigit() and 6 <= len(c) <= 18, _group=lambda c: "SNOMED CT",
    _titles=lambda codes: {c: "Myocardial infarction" for c in codes if c == "22298006"},
    _catalogue=lambda: (("22298006", "Myocardial infarction"), ("38341003", "Hypertensive disorder")))


@pytest.fixture
def snomed(monkeypatch):
    """SNOMED CT registered for one test, before ICD-10 (its one registry line)."""
    monkeypatch.setattr(systems, "REGISTRY", [ICD9_CM, MESH_OMIM, SNOMED, ICD10])
    return SNOMED


def test_a_new_code_system_is_one_value_and_one_registry_line(snomed, tmp_path):
    from clinicode import fhir
    from clinicode.codes.search import search_catalogue
    from clinicode.conformance import check_code_system
    from clinicode.review.decisions import search_codes

    check_code_system(snomed)
    assert code_system("SNOMED CT") is snomed and "SNOMED CT" in CODE_SYSTEMS
    assert infer_code_system(["22298006", "1234567"]) is snomed  # 1234567: a PCS shape, read as SNOMED CT first
    assert family_of([snomed]) is snomed and family_of([snomed, ICD9_CM]) is MIXED
    assert check_code(ICD9_CM, "22298006").other is snomed and check_code(snomed, " 22298006 ").code == "22298006"
    LabelSet.from_codes(["22298006", "38341003"], code_system=snomed).save(tmp_path / "labels.json")
    assert read_json(tmp_path / "labels.json")[0]["system"] == "SNOMED CT"
    assert LabelSet.load(tmp_path / "labels.json").code_system is snomed
    assert fhir.code_systems(["22298006"]) == {"22298006": ("diagnosis", "http://snomed.info/sct")}
    assert fhir.code_systems(["22298006", "401.9"])["22298006"] == ("diagnosis", "http://snomed.info/sct")
    assert search_catalogue("hypertensive", snomed) == [("38341003", "Hypertensive disorder", "SNOMED CT")]
    assert search_codes("myocard", [("22298006", "Myocardial infarction")]) == [
        ("22298006", "Myocardial infarction", "model")]
    assert search_codes("3834", [("22298006", "Myocardial infarction")]) == [
        ("38341003", "Hypertensive disorder", "SNOMED CT")]


def test_a_registered_system_the_registry_reads_as_another_fails_its_check(monkeypatch):
    from clinicode.conformance import ConformanceError, check_code_system

    late = CodeSystem("SNOMED CT", "http://snomed.info/sct", example="1234567",
                      _valid=lambda c: c.isdigit() and 6 <= len(c) <= 18)
    monkeypatch.setattr(systems, "REGISTRY", [*REGISTRY, late])  # after ICD-10, whose PCS takes a 7-digit id
    with pytest.raises(ConformanceError, match="reads its example '1234567' as a code of ICD-10-PCS: move this "
                                               "system before that one in `REGISTRY`"):
        check_code_system(late)
    with pytest.raises(ConformanceError, match="must be in `REGISTRY`"):
        check_code_system(SNOMED)


@pytest.mark.skipif(not (SHARED_DATA / "ncbi-disease-mesh").is_dir(), reason="needs the public MeSH sets")
@pytest.mark.parametrize("name", ["bc5cdr-disease-mesh", "ncbi-disease-mesh"])
def test_public_mesh_sets_are_mesh(name):
    codes = [line.split("\t")[0] for line in (SHARED_DATA / name / "labels.tsv").read_text().splitlines()[1:]]
    assert len(codes) > 700 and infer_code_system(codes) is MESH_OMIM
    assert all(MESH_OMIM.kind(c) == DIAGNOSIS for c in codes)


@pytest.mark.skipif(not (SHARED_DATA / "cantemist-icdo3").is_dir(), reason="needs the public ICD-O-3 set")
def test_the_public_icdo3_set_is_icdo3_and_a_coder_may_add_a_code_the_model_lacks():
    """Every code of CANTEMIST (labels.tsv) and of its title table is ICD-O-3, so a coder's `--add` of a morphology
    code a checkpoint lacks is checked and taken (under LOCAL no code outside the model is)."""
    folder = SHARED_DATA / "cantemist-icdo3"
    codes = [line.split("\t")[0] for line in (folder / "labels.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    titled = [line.split("\t")[0] for line in (folder / "descriptions.tsv").read_text(encoding="utf-8").splitlines()]
    assert len(codes) == 849 and infer_code_system(codes) is ICDO3 and infer_code_system(titled) is ICDO3
    assert check_code(ICDO3, "8140/6").code == "8140/6" and check_code(LOCAL, "8140/6").code is None
    assert check_code(ICDO3, "8140/7").code is None   # no such behaviour code: a typo is refused


def test_a_set_recorded_as_local_before_its_system_was_registered_is_that_system(tmp_path):
    """A checkpoint trained on ICD-O-3 codes before ICD-O-3 was registered recorded them as local: it reads as
    ICD-O-3 (labels.json and a review queue's record alike), so it, its data and its queue agree on one system."""
    from clinicode.review import open_db

    path = tmp_path / "labels.json"
    path.write_text(json.dumps([{"code": "8140/3", "description": "Adenocarcinoma", "system": "local"},
                                {"code": "8000/6", "description": "", "system": "local"}]))
    assert LabelSet.load(path).code_system is ICDO3
    path.write_text(json.dumps([{"code": "Sepsis", "system": "local"}, {"code": "8140/3", "system": "local"}]))
    assert LabelSet.load(path).code_system is LOCAL      # not all of one registered system: local as recorded
    with open_db(tmp_path / "queue.sqlite") as db:
        db.add_model("a" * 64, "runs/old", [("8140/3", "Adenocarcinoma"), ("8000/6", "")], LOCAL)
        assert db.code_system() is ICDO3


# ------------------------------------------------------------------ labels.json
def test_labels_json_round_trip_records_each_codes_system(tmp_path):
    labels = LabelSet.from_codes(["J18.9", "02HV33Z"], {"J18.9": "Pneumonia"}, code_system=ICD10)
    labels.save(tmp_path / "labels.json")
    raw = json.loads((tmp_path / "labels.json").read_text())
    assert raw == [{"code": "J18.9", "description": "Pneumonia", "system": "ICD-10-CM"},
                   {"code": "02HV33Z", "description": "", "system": "ICD-10-PCS"}]
    back = LabelSet.load(tmp_path / "labels.json")
    assert back.code_system is ICD10 and back == labels and back.to_json() == labels.to_json()


@pytest.mark.parametrize("entries", [[{"code": "401.9", "description": ""}, "38.93"],
                                     [{"code": "401.9", "system": "ICD-9-CM"}, {"code": "J18.9"}]])  # hand-edited
def test_labels_json_without_a_system_for_every_code_names_none(tmp_path, entries):
    (tmp_path / "labels.json").write_text(json.dumps(entries))
    assert LabelSet.load(tmp_path / "labels.json").code_system is None


@pytest.mark.parametrize("entries, message", [
    ([{"code": "401.9", "system": "ICD-10-CM"}], r"entry 0 says '401.9' is a ICD-10-CM code, which it is not"),
    ([{"code": "401.9", "system": "ICD-42"}], r"unknown code system 'ICD-42'; known: ICD-9-CM"),
])
def test_labels_json_with_wrong_systems_is_refused(tmp_path, entries, message):
    (tmp_path / "labels.json").write_text(json.dumps(entries))
    with pytest.raises(DataFormatError, match=message):
        LabelSet.load(tmp_path / "labels.json")


def test_a_label_set_refuses_codes_outside_its_system():
    with pytest.raises(DataFormatError, match=r"1 code\(s\) are not ICD-9-CM codes, e.g. 'J18.9'"):
        LabelSet.from_codes(["401.9", "J18.9"], code_system=ICD9_CM)


def _coded_folder(folder: Path, labels: list | None) -> Path:
    folder.mkdir()
    for split, n in (("train", 4), ("dev", 2)):
        rows = [{"id": f"{split}{i}", "text": f"note {i} words here", "labels": ["D009369", "C537666"][: 1 + i % 2]}
                for i in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if labels is not None:
        (folder / "labels.json").write_text(json.dumps(labels))
    return folder


def test_a_coded_notes_folder_without_a_system_is_inferred_once_at_load(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="clinicode"):
        ds = load_dataset(_coded_folder(tmp_path / "d", None))
    assert ds.labels.code_system is MESH_OMIM
    assert "names no code system; its 2 codes are MeSH/OMIM" in caplog.text


def test_a_coded_notes_folder_may_name_its_system(tmp_path, caplog):
    labels = [{"code": "D009369", "system": "MeSH"}, {"code": "C537666", "system": "MeSH"}]
    with caplog.at_level(logging.INFO, logger="clinicode"):
        ds = load_dataset(_coded_folder(tmp_path / "d", labels), top_k=1)
    assert ds.labels.code_system is MESH_OMIM and ds.labels.codes == ("D009369",)  # top_k keeps the system
    assert "names no code system" not in caplog.text


# ------------------------------------------------------------------ prepare and the checkpoint
def test_prepare_records_the_system_and_the_checkpoint_carries_it(demo_data, tiny_run):
    assert {e["system"] for e in json.loads((demo_data / "labels.json").read_text())} == {"ICD-9-CM"}
    saved = json.loads((tiny_run / "checkpoint" / "labels.json").read_text())
    assert {e["system"] for e in saved} == {"ICD-9-CM"}
    from clinicode.predict import Predictor

    assert Predictor.from_checkpoint(tiny_run, device="cpu").code_system is ICD9_CM


def test_an_old_checkpoint_still_loads_and_says_its_system_was_inferred(tiny_run, tmp_path, caplog):
    from clinicode.checkpoint import load_checkpoint

    ck = tmp_path / "run" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", ck)
    old = [{"code": e["code"], "description": e["description"]} for e in json.loads((ck / "labels.json").read_text())]
    (ck / "labels.json").write_text(json.dumps(old))  # as clinicode wrote it before labels named their system
    manifest = read_json(ck / "manifest.json")
    manifest["files"]["labels.json"] = sha256_file(ck / "labels.json")
    (ck / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.INFO, logger="clinicode"):
        loaded = load_checkpoint(ck)
    assert loaded.labels.code_system is ICD9_CM
    assert "labels.json names no code system (an older checkpoint); its 50 codes are taken as ICD-9-CM" in caplog.text


def test_spelling_gives_each_code_as_the_label_set_writes_it():
    from clinicode.codes.systems import spelling

    icd9 = spelling(["428.0", "401.9", "250.00"])
    assert [icd9(c) for c in ("4280", " 401.9 ", "25000", "999.9")] == ["428.0", "401.9", "250.00", "999.9"]
    icd10 = spelling(["r52", "I10"])
    assert [icd10(c) for c in ("R52", "i10", "R51")] == ["r52", "I10", "R51"]
