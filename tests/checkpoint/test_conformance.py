"""The conformance checks (`clinicode.conformance`) over every registered model kind and format, instead of lists
pinned in tests; the checks are not vacuous; and a toy kind, writer and reader registered in a test alone go through
the checks and every consumer (train, predict and --resume, serve's format choice, the app's downloads, train --data)
with no other file changed."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from clinicode import formats
from clinicode.codes.systems import REGISTRY
from clinicode.conformance import ConformanceError, check_code_system, check_kind, check_reader, check_writer
from clinicode.models import MODEL_KINDS, Abilities, KindFiles
from clinicode.models.tfidf_lr.kind import TfidfLRKind

from helpers import fails, succeeds


@pytest.mark.parametrize("name", list(MODEL_KINDS))
def test_every_registered_model_kind_conforms(name):
    check_kind(MODEL_KINDS[name])


@pytest.mark.parametrize("name", list(formats.WRITERS))
def test_every_registered_writer_conforms(name):
    check_writer(formats.WRITERS[name])


@pytest.mark.parametrize("name", list(formats.READERS))
def test_every_registered_reader_conforms(name):
    check_reader(formats.READERS[name])


@pytest.mark.parametrize("system", REGISTRY, ids=lambda s: s.name)
def test_every_registered_code_system_conforms(system):
    check_code_system(system)  # the toy SNOMED CT of tests/data/test_code_systems.py shows the checks are not vacuous


# ------------------------------------------------------------------ the checks catch what they promise
class _ClaimsFiles(TfidfLRKind):
    name = "claims-files"
    files = KindFiles(("tfidf_lr.safetensors", "tfidf_lr.json", "extra.bin"))  # says it writes a file it never writes


class _ReadsUndeclared(TfidfLRKind):
    name = "reads-undeclared"

    def load(self, folder, **kw):  # reads a file when it is there, which the manifest would not hash (#51)
        try:
            with open(folder / "extra.json", encoding="utf-8"):
                pass
        except OSError:
            pass
        return super().load(folder, **kw)


class _WritesUndeclared(TfidfLRKind):
    name = "writes-undeclared"

    def save(self, folder, model, tokenizer):
        super().save(folder, model, tokenizer)
        (folder / "extra.json").write_text("{}")


def test_a_kind_reading_or_writing_a_file_it_does_not_declare_is_caught():
    with pytest.raises(ConformanceError, match=r"model kind 'reads-undeclared': loading read extra\.json, which "
                                               r"`files` does not declare"):
        check_kind(_ReadsUndeclared())
    with pytest.raises(ConformanceError, match=r"model kind 'writes-undeclared': `save` wrote extra\.json, which "
                                               r"`files` does not declare"):
        check_kind(_WritesUndeclared())
    declared = _WritesUndeclared()
    declared.files = KindFiles(declared.files.required, optional=("extra.json",))
    check_kind(declared)


class _NoDoneIds(TfidfLRKind):
    name = "no-done"


def test_a_kind_that_breaks_a_rule_is_named_with_the_rule():
    with pytest.raises(ConformanceError, match=r"model kind 'claims-files': `save` must write each of "
                                               r"`files.required` \(extra\.bin is missing\)"):
        check_kind(_ClaimsFiles())
    bad = TfidfLRKind()
    bad.files = KindFiles(("manifest.json",))
    with pytest.raises(ConformanceError, match="none of the checkpoint's own"):
        check_kind(bad)
    says_it_explains = TfidfLRKind()
    says_it_explains.abilities = Abilities(explain=True)  # its scorer gives no spans
    with pytest.raises(ConformanceError, match=r"`abilities.explain`: the scorer must give each code's spans "
                                               r".*`code_spans`"):
        check_kind(says_it_explains)
    flags = TfidfLRKind()
    flags.abilities = frozenset({"explain"})   # a set of names, not the one `Abilities` value
    with pytest.raises(ConformanceError, match=r"`abilities` must be an `Abilities`"):
        check_kind(flags)
    loose = TfidfLRKind()
    loose.files = ("tfidf_lr.safetensors", "tfidf_lr.json")   # a bare tuple, the optional files undeclared
    with pytest.raises(ConformanceError, match=r"`files` must be a `KindFiles`"):
        check_kind(loose)


class _ScorerWithoutLabelFact(TfidfLRKind):
    name = "no-label-fact"

    def scorer(self, checkpoint, **kw):
        scorer = super().scorer(checkpoint, **kw)
        del scorer.single_label   # whether the top code alone is the prediction: the Predictor asks the scorer
        return scorer


def test_a_scorer_must_say_whether_its_model_gives_one_label_a_note():
    with pytest.raises(ConformanceError, match=r"model kind 'no-label-fact': the scorer's `single_label` must be a "
                                               r"bool"):
        check_kind(_ScorerWithoutLabelFact())


class _Stating:
    """A scorer forwarding every member of the one it wraps but MISSING, which it lacks (or states as VALUE)."""

    def __init__(self, scorer, missing, value):
        self._scorer, self._missing, self._value = scorer, missing, value

    def __getattr__(self, name):
        if name == self._missing:
            if self._value is None:
                raise AttributeError(name)
            return self._value
        return getattr(self._scorer, name)


class _ScorerLeavingOut(TfidfLRKind):
    name = "unstated"

    def __init__(self, missing, value=None):
        self.missing, self.value = missing, value

    def scorer(self, checkpoint, **kw):
        return _Stating(super().scorer(checkpoint, **kw), self.missing, self.value)


@pytest.mark.parametrize("missing, value, rule", [
    ("terminology_codes", None, r"the scorer's `terminology_codes` must be how many of the last codes"),
    ("terminology_codes", 4, r"the scorer's `terminology_codes` must be how many of the last codes"),   # 3 codes
    ("plan", None, r"the scorer's `plan` must be its memory plan \(with `summary\(\)`\), or None"),
    ("plan", "a plan", r"the scorer's `plan` must be its memory plan"),
])
def test_a_scorer_states_its_plan_and_its_terminology_codes(missing, value, rule):
    """`Predictor` asks every scorer both (`Scorer`): none is a hook found by name."""
    with pytest.raises(ConformanceError, match=rf"model kind 'unstated': {rule}"):
        check_kind(_ScorerLeavingOut(missing, value))


def test_a_kind_that_shows_spans_must_say_what_their_weight_is(monkeypatch):
    """The app's caption under a code's highlighted words reads the scorer's `span_weight`: a kind that shows spans
    without saying what their weight is fails the check."""
    from clinicode.models.leam.kind import KIND as LEAM_KIND
    from clinicode.models.leam.scorer import LEAMScorer

    monkeypatch.setattr(LEAMScorer, "span_weight", " ")
    with pytest.raises(ConformanceError, match=r"must say what a span's weight is \(`span_weight`"):
        check_kind(LEAM_KIND)


def test_a_writer_that_loses_ids_on_resume_or_a_reader_that_misreads_are_caught():
    jsonl = formats.WRITERS["jsonl"]
    forgetful = dataclasses.replace(jsonl, name="forgetful", done_ids=lambda f: Counter(set(json.loads(line)["id"]
                                                                                             for line in f)))
    with pytest.raises(ConformanceError, match="output format 'forgetful': `done_ids` must read back every"):
        check_writer(forgetful)
    with pytest.raises(ConformanceError, match="offered by the app needs a file ending"):
        check_writer(dataclasses.replace(formats.WRITERS["fhir"], app=True))
    csv_reader = formats.READERS["csv"]
    with pytest.raises(ConformanceError, match="input format 'misread': its `example\\(\\)` must read back"):
        check_reader(dataclasses.replace(csv_reader, name="misread", example=lambda: b"id,text\nn1,a\n"))


# ------------------------------------------------------------------ toys registered here alone
def _tsv_writer(f, *, header=True, context=None):
    if header:
        f.write("id\tcodes\n")
    return lambda rec, note=None: f.write(f"{json.dumps(str(rec['id']))}\t"
                               f"{','.join(p['code'] for p in rec.get('predicted', []))}\n")


def _tsv_done(f) -> Counter:
    done: Counter = Counter()
    for line in f:
        if not line.endswith("\n"):
            break  # a torn last line
        first = line.split("\t", 1)[0]
        if first != "id":
            done[json.loads(first)] += 1
    return done


def _tsv_rows(f, where, *, limit=formats.MAX_RECORD_BYTES, **_):
    for n, row in enumerate(csv.DictReader(io.TextIOWrapper(f, encoding="utf-8", newline=""), delimiter="\t"),
                            start=1):
        yield formats.Row(n, dict(row))


def _tsv_example() -> bytes:
    return b"id\ttext\tlabels\nn1\tfever and chills\tA01\nn2\trash itch\tB02;C03\n"


TSV_WRITER = formats.Writer("tsv", (".tsv",), "text/tab-separated-values", _tsv_writer, "id<TAB>codes",
                            done_ids=_tsv_done, app=True, serve=True)
TSV_READER = formats.Reader("tsv", (".tsv",), _tsv_rows, "tab-separated id, text, labels", splits=True,
                            example=_tsv_example)


@pytest.fixture
def toys(monkeypatch):
    """A toy kind (the keyword kind of test_model_kinds), writer and reader, registered for one test."""
    from test_model_kinds import KeywordKind

    kind = KeywordKind()
    monkeypatch.setitem(MODEL_KINDS, kind.name, kind)
    monkeypatch.setitem(formats.WRITERS, "tsv", TSV_WRITER)
    monkeypatch.setitem(formats.READERS, "tsv", TSV_READER)
    return kind


def _tsv_split(path: Path, rows: list[tuple[str, str, str]]) -> None:
    path.write_text("id\ttext\tlabels\n" + "".join(f"{i}\t{t}\t{labels}\n" for i, t, labels in rows))


def test_a_toy_kind_writer_and_reader_conform_and_every_consumer_takes_them(toys, tmp_path):
    check_kind(toys)
    check_writer(TSV_WRITER)
    check_reader(TSV_READER)
    # train --data reads TSV splits; the toy kind is fitted whole through the registry
    data = tmp_path / "data"
    data.mkdir()
    notes = [("hypertension follow up", "401.9"), ("heart failure worse", "428.0"), ("kidney injury", "584.9")]
    for split in ("train", "dev"):
        _tsv_split(data / f"{split}.tsv", [(f"{split}{i}", notes[i % 3][0] + f" visit {i}", notes[i % 3][1])
                                           for i in range(9)])
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "keywords", "--no-progress"])
    manifest = json.loads((tmp_path / "run" / "checkpoint" / "manifest.json").read_text())
    assert manifest["model"] == "keywords" and manifest["data"]["n_train"] == 9
    # predict reads TSV and writes it; --resume continues a partial TSV output instead of starting over
    src = tmp_path / "in.tsv"
    _tsv_split(src, [(f"n{i}", notes[i % 3][0], "") for i in range(6)])
    out = tmp_path / "out.tsv"
    args = ["predict", "--checkpoint", tmp_path / "run", "--input", src, "--output", out, "--format", "tsv",
            "--no-progress"]
    succeeds(args)
    lines = out.read_text().splitlines()
    assert lines[0] == "id\tcodes" and lines[1] == '"n0"\t401.9' and len(lines) == 7
    # a kill after three notes and half a line: OUT.partial beside its settings, as predict leaves it
    from clinicode.config import PREDICT
    from clinicode.files import write_json_atomic
    from clinicode.predict import Predictor
    from clinicode.predict_io import _settings, predict_file

    pred = Predictor.from_checkpoint(tmp_path / "run", device="cpu")
    out.with_name("out.tsv.partial").write_text("\n".join(lines[:4]) + "\n" + lines[4][:3])
    write_json_atomic(out.with_name("out.tsv.partial.json"),
                      _settings(pred, input=src, fmt="tsv", top_k=PREDICT.top_k, threshold=None, explain=0,
                                shard=(0, 1)))
    out.unlink()
    counts = predict_file(pred, input=src, output=out, output_format="tsv", resume=True, progress=False)
    assert counts == {"scored": 3, "errors": 0, "skipped": 3}
    assert out.read_text().splitlines() == lines


def test_serve_and_the_app_offer_a_registered_writer(toys, predictor):
    from fastapi.testclient import TestClient

    from clinicode.predict_io import offered_writers
    from clinicode.serve import create_app

    assert [w.name for w in offered_writers("app")][-1] == "tsv"  # the app's downloads (app_pages/batch.py)
    assert "tsv" in formats.service_formats()
    with TestClient(create_app(predictor), base_url="http://127.0.0.1:8000") as client:
        res = client.post("/v1/predict?format=tsv", json={"notes": [{"id": "a", "text": "chest pain"}]})
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/tab-separated-values")
        assert res.text.startswith('id\tcodes\n"a"\t')
        res = client.post("/v1/predict?format=xml", json={"notes": [{"id": "a", "text": "chest pain"}]})
        assert res.status_code == 422
        assert "use format=json (the default) or format=fhir or format=tsv" in res.json()["error"]["message"]
        spec = client.get("/openapi.json").json()["paths"]["/v1/predict"]["post"]["parameters"][0]["schema"]
        assert spec["enum"] == ["json", "fhir", "tsv"]


def test_a_format_that_cannot_resume_says_so(toys, tiny_run, tmp_path):
    no_resume = dataclasses.replace(TSV_WRITER, name="tsvwhole", done_ids=None)
    formats.WRITERS["tsvwhole"] = no_resume
    try:
        (tmp_path / "in.jsonl").write_text(json.dumps({"id": "1", "text": "chest pain"}) + "\n")
        fails(["predict", "--checkpoint", tiny_run, "--input", tmp_path / "in.jsonl", "--output",
               tmp_path / "o.tsv", "--format", "tsvwhole", "--resume"], "--format tsvwhole cannot resume")
    finally:
        del formats.WRITERS["tsvwhole"]


def test_options_off_their_defaults_set_an_option_left_to_the_run():
    """`check_kind` trains with options off their defaults: the fused model's code_attention, None (the run chooses),
    is tried set; a bool is flipped, an int raised, and a free string left."""
    from clinicode.conformance import other_options
    from clinicode.models.fused.options import FusedOptions

    other, default = other_options(FusedOptions), FusedOptions()
    assert default.code_attention is None and other.code_attention is True
    assert other.mentions is not default.mentions and other.code_sample == default.code_sample + 1
    assert other.terminology is None
