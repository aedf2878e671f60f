"""Conformance checks for plugins (as scikit-learn's `check_estimator`): `check_kind` for a model kind, `check_writer`
and `check_reader` for formats, `check_code_system` for a code system. Each uses the plugin through the public path
and raises `ConformanceError` naming the plugin and the rule it breaks; the tests run them over every registered one."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import sys
import tempfile
import typing
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Mapping

import numpy as np

from clinicode import fhir
from clinicode.checkpoint import load_checkpoint, save_checkpoint
from clinicode.codes import systems as code_systems
from clinicode.config import TrainConfig, config_to_dict
from clinicode.constants import LABELS_FILE, MANIFEST_FILE, THRESHOLD_FILE, TRAIN_CONFIG_FILE
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError, ClinicodeError
from clinicode.formats import Reader, Writer
from clinicode.models import MODEL_KINDS, Abilities, AsksOfRun, KindFiles, ModelKind, RunNeeds
from clinicode.models.fitting import Fitted, TrainingData
from clinicode.predict import Predictor


class ConformanceError(AssertionError):
    """A plugin breaks a rule of its registry; the message names the plugin and the rule."""


def _need(ok: Any, who: str, rule: str) -> None:
    if not ok:
        raise ConformanceError(f"{who}: {rule}")


# A small coded set: three codes, each with its own cue words over shared filler, so any model can learn it.
_CODES = ("A01", "B02", "C03")
_CUES = (("fever", "chills", "sepsis"), ("rash", "itch", "hives"), ("cough", "wheeze", "asthma"))
_FILLER = "patient admitted stable discharged home daily follow clinic history noted".split()


def sample_notes(n: int = 36, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """N synthetic notes and their [N, 3] 0/1 labels over `_CODES` (every note has at least one code)."""
    rng = np.random.default_rng(seed)
    y = (rng.random((n, len(_CODES))) < 0.4).astype(np.float32)
    y[np.arange(n), np.arange(n) % len(_CODES)] = 1.0
    texts = []
    for row in y:
        words = list(rng.choice(_FILLER, size=10))
        for j in np.flatnonzero(row):
            words += list(rng.choice(_CUES[j], size=2))
        rng.shuffle(words)
        texts.append(" ".join(words))
    return texts, y


# ---------------------------------------------------------------------------------------------- model kinds
_CHECKPOINT_OWN = {MANIFEST_FILE, LABELS_FILE, THRESHOLD_FILE, TRAIN_CONFIG_FILE, "metrics_dev.json",
                   "metrics_test.json", "train_counts.json"}
_LOOP_MEMBERS = ("save", "model_config", "build", "vector_dim", "start_from", "memory_plan", "forward", "loss",
                 "after_step", "epoch_stats", "load_weights")


def _check_declarations(kind: ModelKind, who: str) -> None:
    _need(isinstance(kind.name, str) and kind.name and kind.name == kind.name.strip() and len(kind.name) <= 40,
          who, "`name` must be a short non-empty string (the manifest's model, `train --model`).")
    _need(isinstance(kind.summary, str) and kind.summary, who, "`summary` must be a non-empty string (--help).")
    _need(isinstance(getattr(kind, "files", None), KindFiles), who,
          "`files` must be a `KindFiles` (clinicode.models.declarations): the files it always writes, and those it "
          "sometimes does.")
    files, optional = kind.files.required, kind.files.optional
    _need(isinstance(files, tuple) and files and all(isinstance(f, str) and f and "/" not in f for f in files),
          who, "`files.required` must be a non-empty tuple of file names (no folders).")
    _need(len(set(files)) == len(files) and not set(files) & _CHECKPOINT_OWN, who,
          f"`files.required` must be distinct and none of the checkpoint's own ({', '.join(sorted(_CHECKPOINT_OWN))}).")
    _need(isinstance(optional, tuple) and all(isinstance(f, str) and f and "/" not in f for f in optional)
          and not set(optional) & (set(files) | _CHECKPOINT_OWN), who,
          "`files.optional` must be a tuple of file names (no folders), none of `files.required` or the checkpoint's "
          "own.")
    abilities = getattr(kind, "abilities", None)
    _need(isinstance(abilities, Abilities), who, "`abilities` must be an `Abilities` (clinicode.models.declarations).")
    for field in dataclasses.fields(Abilities):
        _need(isinstance(getattr(abilities, field.name), bool), who, f"`abilities.{field.name}` must be a bool.")
    opts = getattr(kind, "options_type", "missing")
    _need(opts is None or (isinstance(opts, type) and dataclasses.is_dataclass(opts)), who,
          "`options_type` must be None (no options) or a dataclass whose fields all have defaults.")
    if opts is not None:
        try:
            opts()
        except TypeError:
            raise ConformanceError(f"{who}: `options_type()` must build the default options.") from None
    members = ("save", "verify", "load", "card", "display_name", "scorer", "fit")
    for m in members:
        _need(callable(getattr(kind, m, None)), who, f"`{m}` must be a method.")
    looped = getattr(kind, "loop_model", "missing")
    _need(looped is None or all(callable(getattr(looped, m, None)) for m in _LOOP_MEMBERS), who,
          "`loop_model` must be None (fitted whole) or what the loop trains (`clinicode.models.fitting.LoopModel`).")
    if looped is not None:
        _need(isinstance(getattr(looped, "config_type", None), type), who,
              "`loop_model.config_type` must be the model configuration's class (saved with --resume's state).")
        _need(isinstance(getattr(looped, "files", None), KindFiles), who,
              "`loop_model.files` must be a `KindFiles` (the files its `save` writes for the loop's checkpoints).")
    _need(isinstance(kind.display_name({}), str), who, "`display_name({})` must be a string.")


def _cue_spans(texts: list[str], y: np.ndarray) -> list[list[dict[str, Any]]]:
    """Each note's evidence spans ({code, start, end}): the first cue word of each of its codes."""
    out = []
    for text, row in zip(texts, y):
        spans = []
        for j in np.flatnonzero(row):
            found = [(text.find(w), w) for w in _CUES[j] if text.find(w) >= 0]
            if found:
                start, word = min(found)
                spans.append({"code": _CODES[j], "start": start, "end": start + len(word)})
        out.append(spans)
    return out


# The files opened (Python's `open` audit event) while `_opened` records, for the rule that loading reads only the
# checkpoint's hashed files; one hook for the process, as audit hooks cannot be removed.
_OPENS: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENS and isinstance(args[0], (str, bytes, Path)):
        _OPENS[-1].append(str(args[0] if not isinstance(args[0], bytes) else args[0].decode(errors="replace")))


def _opened() -> list[str]:
    """Start recording the paths `open` is given (stop with `_OPENS.pop()`)."""
    if not getattr(_audit, "installed", False):
        sys.addaudithook(_audit)
        _audit.installed = True  # type: ignore[attr-defined]
    _OPENS.append([])
    return _OPENS[-1]


def other_options(options_type: type) -> Any:
    """OPTIONS_TYPE's options with as many fields as it accepts off their defaults: a bool flipped, an int one more, a
    float halved (0.5 from 0), a Literal's next choice, an optional bool left to the run (None) set true; a free
    string, or a value its own checks refuse, stays."""
    hints = typing.get_type_hints(options_type)
    changed: dict[str, Any] = {}
    for f in dataclasses.fields(options_type):
        d, hint = f.default, hints[f.name]
        if typing.get_origin(hint) is Literal:
            other = [c for c in typing.get_args(hint) if c != d]
        elif isinstance(d, bool):
            other = [not d]
        elif d is None and bool in typing.get_args(hint):
            other = [True]
        elif isinstance(d, int):
            other = [d + 1]
        elif isinstance(d, float):
            other = [d / 2 if d else 0.5]
        else:
            other = []
        for value in other[:1]:
            try:
                options_type(**changed, **{f.name: value})
            except ClinicodeError:
                continue
            changed[f.name] = value
    return options_type(**changed)


class _TwoStepLoop:
    """The epoch loop as `check_kind` hands it to a kind's `fit`: two SGD steps over the notes through the `LoopModel`
    it is given, checking each answer it gives."""

    def __init__(self, texts: list[str], y: np.ndarray, labels: LabelSet, max_len: int, who: str) -> None:
        self.texts, self.y, self.labels, self.max_len, self.who = texts, y, labels, max_len, who

    def __call__(self, kind: Any, options: Any, *, epochs: int | None = None) -> Fitted:
        import torch

        from clinicode.batching import pad_batch
        from clinicode.tokenizer import ClinicalTokenizer

        texts, y, labels, who = self.texts, self.y, self.labels, self.who
        for m in _LOOP_MEMBERS:
            _need(callable(getattr(kind, m, None)), who, f"`{m}` must be a method of the `LoopModel` given the loop.")
        tokenizer, _ = ClinicalTokenizer.fit_tokens(texts, min_doc_freq=1, max_len=self.max_len)
        config = kind.model_config(options, vocab_size=tokenizer.vocab_size, n_labels=len(labels), multilabel=True)
        _need(isinstance(config, kind.config_type), who, "`model_config` must return a `config_type`.")
        model = kind.build(config)
        _need(isinstance(model, torch.nn.Module), who, "`build` must return a torch.nn.Module.")
        dim = kind.vector_dim(config)
        rng = np.random.default_rng(0)
        kind.start_from(model, rng.normal(size=(tokenizer.vocab_size, dim)).astype(np.float32),
                        rng.normal(size=(len(labels), dim)).astype(np.float32))
        plan = kind.memory_plan(config, batch_size=8, max_len=self.max_len, budget_mb=512, device="cpu",
                                training=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model.train()
        for start in (0, 8):
            ids, mask = pad_batch(tokenizer.encode_ids(texts[start:start + 8]))
            logits = kind.forward(model, ids, mask, plan=plan)
            _need(tuple(logits.shape) == (len(ids), len(labels)), who, "`forward` must give [B, K] logits.")
            loss, task = kind.loss(model, logits, torch.from_numpy(y[start:start + 8]), pos_weight=None)
            _need(loss.dim() == 0 and math.isfinite(float(loss.detach())) and math.isfinite(float(task.detach())),
                  who, "`loss` must return two finite scalars (the loss to minimise, the task loss).")
            opt.zero_grad()
            loss.backward()
            _need(any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters()), who,
                  "`loss` must give the model's weights a gradient.")
            opt.step()
            kind.after_step(model)
        stats = kind.epoch_stats(model)
        _need(isinstance(stats, dict) and all(isinstance(k, str) and isinstance(v, float) for k, v in stats.items()),
              who, "`epoch_stats` must return {name: float}.")
        model.eval()
        return Fitted(model=model, tokenizer=tokenizer)


def _trained(kind: ModelKind, texts: list[str], y: np.ndarray, labels: LabelSet, max_len: int,
             options: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer or None) trained as `train` would with OPTIONS (the defaults when None): the kind's `fit`
    on the first 24 notes, dev the rest, each note's first cue as a coder's evidence span (so a kind that keeps
    something of them writes it), handed a loop of two steps (`_TwoStepLoop`)."""
    who = f"model kind {kind.name!r}"
    if options is None and kind.options_type is not None:
        options = kind.options_type()
    config = TrainConfig(model=kind.name, max_len=max_len, device="cpu", eval_batch_size=8, memory_mb=512)
    data = TrainingData(texts=texts[:24], y=y[:24], labels=labels, dev_texts=texts[24:], y_dev=y[24:],
                        train_counts=y[:24].sum(0).astype(int), evidence=_cue_spans(texts[:24], y[:24]),
                        single_label=False, config=config, say=lambda line: None)
    fitted = kind.fit(data, options, loop=_TwoStepLoop(texts, y, labels, max_len, who))
    _need(isinstance(fitted, Fitted), who, "`fit` must return a `Fitted` (clinicode.models.fitting).")
    return fitted.model, fitted.tokenizer


def check_kind(kind: ModelKind) -> None:
    """Check a model kind against `ModelKind` by using it: its declarations; trained as `train` would (one loop step,
    or `fit`); saved, verified and loaded through the checkpoint; scored through `Predictor`; what its `abilities` say
    it can do (`explain`, `embed`, `score_ids`) done; a checkpoint missing one of its `files` refused; and, for a kind
    with options, what they ask of a run (`run_needs()`, when they have it) preparable, and options off their
    defaults (`other_options`) given, saved and read back equal (its `card`).

    A kind not (yet) registered under its name is registered while it is checked, and the registry restored after.

    Raises:
        ConformanceError: the first rule the kind breaks, naming it.
    """
    who = f"model kind {getattr(kind, 'name', '?')!r}"
    _check_declarations(kind, who)
    before = MODEL_KINDS.get(kind.name)
    MODEL_KINDS[kind.name] = kind
    try:
        _check_use(kind, who)
        _check_options(kind, who)
    finally:
        if before is None:
            del MODEL_KINDS[kind.name]
        else:
            MODEL_KINDS[kind.name] = before


def _check_use(kind: ModelKind, who: str) -> None:
    texts, y = sample_notes()
    labels = LabelSet(_CODES, ("fever", "rash", "cough"))
    max_len = 64
    model, tokenizer = _trained(kind, texts, y, labels, max_len)
    card = kind.card(model)
    _need(isinstance(card, dict) and isinstance(card.get("model_config"), dict), who,
          "`card` must return {'model_config': {...}}.")
    json.dumps(card)
    with tempfile.TemporaryDirectory(prefix="clinicode-conformance-") as tmp:
        folder = Path(tmp) / "checkpoint"
        save_checkpoint(folder, kind=kind.name, model=model, labels=labels, threshold=0.5,
                        train_config=TrainConfig(model=kind.name, max_len=max_len, device="cpu"), tokenizer=tokenizer)
        for name in kind.files.required:
            _need((folder / name).is_file(), who, f"`save` must write each of `files.required` ({name} is missing).")
        # a file the kind reads must be one the manifest hashes and verifying checks: declared, or a file planted in
        # a copied checkpoint would change what it predicts with its hashes still matching
        declared = {*kind.files.every, *_CHECKPOINT_OWN}
        undeclared = sorted(p.name for p in folder.iterdir() if p.name not in declared)
        _need(not undeclared, who, f"`save` wrote {', '.join(undeclared)}, which `files` does not declare (the "
                                   "manifest must hash every file loading reads).")
        kind.verify(folder)
        opened = _opened()
        try:
            checkpoint = load_checkpoint(folder)
        finally:
            _OPENS.pop()
        root = os.path.realpath(folder)
        read = sorted({os.path.basename(p) for p in opened if os.path.dirname(os.path.realpath(p)) == root})
        _need(set(read) <= declared, who, f"loading read {', '.join(sorted(set(read) - declared))}, which `files` "
                                          "does not declare (the manifest must hash it).")
        scorer = kind.scorer(checkpoint, device="cpu", batch_size=8, memory_mb=512)
        _need(isinstance(getattr(scorer, "single_label", None), bool), who,
              "the scorer's `single_label` must be a bool (one label a note: the top code is the prediction).")
        terms = getattr(scorer, "terminology_codes", None)
        _need(isinstance(terms, int) and not isinstance(terms, bool) and 0 <= terms <= len(labels), who,
              "the scorer's `terminology_codes` must be how many of the last codes it scores from a terminology's "
              "titles alone (0 for none; `Scorer`).")
        _need(hasattr(scorer, "plan") and (scorer.plan is None or callable(getattr(scorer.plan, "summary", None))),
              who, "the scorer's `plan` must be its memory plan (with `summary()`), or None for a model without one "
                   "(`Scorer`).")
        pred = Predictor(checkpoint, device="cpu", batch_size=8, memory_mb=512)
        _need(pred.kind == kind.name, who, "the loaded checkpoint must name the kind.")
        s = pred.score(texts)
        _need(isinstance(s, np.ndarray) and s.shape == (len(texts), len(labels)) and s.dtype == np.float32, who,
              "the scorer's `score` must give [N, K] float32.")
        _need(np.isfinite(s).all() and (s >= 0).all() and (s <= 1).all(), who, "scores must be probabilities.")
        _need(np.allclose(pred.score(texts[:5][::-1]), s[:5][::-1], atol=1e-5), who,
              "a note's scores must not depend on the other notes of its batch or their order.")
        can = kind.abilities
        _need(not can.explain or callable(getattr(pred.scorer, "code_spans", None)), who,
              "`abilities.explain`: the scorer must give each code's spans on its own stated scale (`code_spans`).")
        _need(not can.explain or (isinstance(getattr(pred.scorer, "span_weight", None), str)
                                  and pred.scorer.span_weight.strip()), who,
              "`abilities.explain`: the scorer must say what a span's weight is (`span_weight`, a few words).")
        record = pred.predict(texts[:2], explain=2 if can.explain else 0)[0].to_dict()
        _need(record["id"] == "0" and "scores" in record, who, "`Predictor.predict` must give records.")
        if can.explain:
            _need(record.get("evidence", {}).get("spans"), who,
                  "`abilities.explain`: predict --explain must give spans.")
        if can.embed:
            _need(pred.embed(texts[:3]).shape[0] == 3 and pred.label_embeddings().shape[0] == len(labels), who,
                  "`abilities.embed`: the scorer must give note and code vectors.")
        if can.score_ids:
            ids = pred.checkpoint.tokenizer.encode_ids(texts[:4])
            _need(np.allclose(pred.score_ids(ids), s[:4], atol=1e-5), who,
                  "`abilities.score_ids`: score_ids must equal score on the same notes.")
        first = kind.files.required[0]
        (folder / first).unlink()
        try:
            load_checkpoint(folder)
        except CheckpointError:
            pass
        else:
            raise ConformanceError(f"{who}: a checkpoint without {first} must be refused.")


def _check_run_needs(kind: ModelKind, options: Any, who: str) -> None:
    """What OPTIONS ask of a run, when their type says it (`AsksOfRun`): a `RunNeeds` the run can prepare."""
    if not isinstance(options, AsksOfRun):
        return
    _need(callable(type(options).run_needs), who, "`options_type.run_needs` must be a method returning a `RunNeeds` "
                                                  "(clinicode.models.declarations.AsksOfRun).")
    needs = options.run_needs()
    _need(isinstance(needs, RunNeeds), who, f"`run_needs()` must return a `RunNeeds`, got {type(needs).__name__}.")
    _need(isinstance(needs.dev_codes, bool) and isinstance(needs.evidence, bool), who,
          "`run_needs()`'s `dev_codes` and `evidence` must be bools.")
    _need(needs.terminology is None or (isinstance(needs.terminology, str) and needs.terminology.strip()), who,
          "`run_needs()`'s `terminology` must be None or a code<TAB>title file or 'auto'.")
    _need(not needs.dev_codes or kind.abilities.refit_on_dev, who,
          "`run_needs()` asks for train and dev together (`dev_codes`) but `abilities.refit_on_dev` is False: its "
          "`fit` would never be given them.")


def _check_options(kind: ModelKind, who: str) -> None:
    """What the default options and options off their defaults ask of a run (`_check_run_needs`); those off their
    defaults, given to training, come back from the saved checkpoint as given."""
    if kind.options_type is None:
        return
    _check_run_needs(kind, kind.options_type(), who)
    options = other_options(kind.options_type)
    _check_run_needs(kind, options, who)
    texts, y = sample_notes()
    labels = LabelSet(_CODES, ("fever", "rash", "cough"))
    model, tokenizer = _trained(kind, texts, y, labels, 64, options)
    with tempfile.TemporaryDirectory(prefix="clinicode-conformance-") as tmp:
        save_checkpoint(Path(tmp) / "checkpoint", kind=kind.name, model=model, labels=labels, threshold=0.5,
                        train_config=TrainConfig(model=kind.name, max_len=64, device="cpu"), tokenizer=tokenizer)
        loaded = load_checkpoint(Path(tmp) / "checkpoint")
    given = config_to_dict(options)
    back = kind.card(loaded.model).get("model_config", {})
    # an option left to the run (None) comes back as the run chose it
    wrong = sorted(k for k, v in given.items() if back.get(k, "absent") != v and (v is not None or k not in back))
    shown = ", ".join(f"{k}: {given[k]!r} given, {back.get(k, 'absent')!r} read back" for k in wrong)
    _need(not wrong, who, f"options given to training must be saved with the checkpoint and read back (`card`'s "
                          f"model_config after loading): {shown}.")


# ---------------------------------------------------------------------------------------------- formats
# Output records as `Prediction.to_dict()` gives them, with the ids that trouble a format: a duplicate, a comma, a
# quote, a tab, a newline and non-ASCII text.
SAMPLE_RECORDS: tuple[Mapping[str, Any], ...] = tuple(
    {"id": i, "predicted": [{"code": "A01", "score": 0.9}], "scores": {"A01": 0.9, "B02": 0.2}, "truncated": False}
    for i in ("n1", "n2", "n1", 'a,b "c"', "tab\there", "line\nbreak", "café")
) + ({"id": "bad", "error": "the note is empty"},)
SAMPLE_CONTEXT: Mapping[str, Any] = {"systems": {}, "source": None}


def _writer_text(w: Writer, records: Any, *, header: bool = True, context: Mapping[str, Any] | None = None) -> str:
    buf = io.StringIO(newline="")
    write = w.open(buf, header=header, context=dict(context or SAMPLE_CONTEXT))
    for r in records:
        write(r, note=None)  # as predict calls it (NOTE: the input record, when it has one)
    return buf.getvalue()


def _check_names(fmt: Any, who: str, named_by: str) -> None:
    """A format's `name` (a lower-case word, as NAMED_BY takes it) and `suffixes` (lower-case file endings)."""
    _need(isinstance(fmt.name, str) and fmt.name.isidentifier() and fmt.name == fmt.name.lower(), who,
          f"`name` must be a lower-case word ({named_by}).")
    _need(isinstance(fmt.suffixes, tuple) and all(isinstance(s, str) and s.startswith(".") and s == s.lower()
                                                    for s in fmt.suffixes), who,
          "`suffixes` must be lower-case file endings ('.tsv').")


def check_writer(w: Writer) -> None:
    """Check an output format by using it: its declarations; the sample records written whole (`to_bytes`, UTF-8);
    a format that can resume (`done_ids`) reads back the id of every record it wrote, also after an appended part
    without header; a format offered by the app has a file ending; one offered by serve answers a batch.

    Raises:
        ConformanceError: the first rule the format breaks, naming it.
    """
    who = f"output format {getattr(w, 'name', '?')!r}"
    _check_names(w, who, "predict --format, serve's ?format=")
    _need(isinstance(w.media_type, str) and "/" in w.media_type, who, "`media_type` must be a media type.")
    _need(isinstance(w.what, str) and w.what, who, "`what` must say what the format is (--help).")
    data = w.to_bytes(SAMPLE_RECORDS, context=SAMPLE_CONTEXT)
    _need(isinstance(data, bytes) and data, who, "`to_bytes` must give the records as bytes.")
    data.decode("utf-8")
    if w.done_ids is not None:
        want = Counter(str(r["id"]) for r in SAMPLE_RECORDS)
        whole = _writer_text(w, SAMPLE_RECORDS)
        _need(w.done_ids(io.StringIO(whole, newline="")) == want, who,
              "`done_ids` must read back every written record's id, as often as it was written (--resume).")
        parts = _writer_text(w, SAMPLE_RECORDS[:3]) + _writer_text(w, SAMPLE_RECORDS[3:], header=False)
        _need(w.done_ids(io.StringIO(parts, newline="")) == want, who,
              "`done_ids` must read a file continued without a header (--resume appends).")
    if w.app:
        _need(w.suffixes, who, "a format offered by the app needs a file ending (its download's name).")
    if w.serve:
        body = w.document(list(SAMPLE_RECORDS), {**SAMPLE_CONTEXT, "subjects": [None] * len(SAMPLE_RECORDS)})
        _need(isinstance(body, (bytes, dict, list)), who, "`document` must give bytes or a JSON value (serve).")


def check_reader(r: Reader) -> None:
    """Check an input format by using it: its declarations, and its own `example` read back as two notes, "n1" and
    "n2", with their text (and, for a format that reads training splits, their labels).

    Raises:
        ConformanceError: the first rule the format breaks, naming it.
    """
    from clinicode.formats import read_rows

    who = f"input format {getattr(r, 'name', '?')!r}"
    _check_names(r, who, "--input-format")
    _need(isinstance(r.what, str) and r.what and callable(r.rows), who, "`what` and `rows` must be given.")
    _need(not r.splits or r.suffixes, who, "a format that reads training splits needs a file ending (train.<end>).")
    if r.example is None:
        return
    example = r.example()
    _need(isinstance(example, bytes), who, "`example()` must give a file's bytes.")
    rows = list(read_rows(io.BytesIO(example), r, name=f"example{(r.suffixes or ('',))[0]}"))
    good = [row.fields for row in rows if row.fields is not None]
    _need(len(good) == 2 and [str(f.get("id")) for f in good] == ["n1", "n2"]
          and all(isinstance(f.get("text"), str) and f["text"] for f in good), who,
          "its `example()` must read back as two notes with ids n1 and n2 and their text.")
    if r.splits:
        _need(all(len(f.get("labels") if f.get("labels") is not None else "") > 0 for f in good), who,
              "a format that reads training splits must give each example note its labels.")


# ---------------------------------------------------------------------------------------------- code systems
def check_code_system(system: code_systems.CodeSystem) -> None:
    """Check a registered code system (an entry of `codes.systems.REGISTRY`, a single system or a family) by asking
    what its consumers ask: its declarations; each member's example code valid, spelled once for good
    (`canonical` twice gives the same), a diagnosis or a procedure, grouped, titled only by itself; blanks refused;
    the registry, in its order, reading the example as this system's (`infer_code_system`, `family_of`, MIXED: no
    system before it claims it); a coder's code checked (`check_code`, in the tables of a system that ships them);
    labels.json naming the member and read back as this system; FHIR coding it with the member's URI.

    Raises:
        ConformanceError: the first rule the system breaks, naming it.
    """
    who = f"code system {getattr(system, 'name', '?')!r}"
    _need(isinstance(system, code_systems.CodeSystem), who, "must be a `CodeSystem` (clinicode/codes/systems.py).")
    _need(isinstance(system.name, str) and system.name and system.name == system.name.strip()
          and len(system.name) <= 40, who, "`name` must be a short non-empty string (what labels.json records).")
    _need(any(s is system for s in code_systems.REGISTRY), who,
          "must be in `REGISTRY` (clinicode/codes/systems.py), placed before any system whose shapes overlap its own "
          "and should lose.")
    _need(code_systems.code_system(system.name) is system, who,
          "its name must be its own: another system of `CODE_SYSTEMS` has it.")
    for part in system.leaves:
        _check_member(system, part)
    _need(system.is_valid(system.example), who, f"its `example` {system.example!r} must be one of its codes.")


def _check_member(family: code_systems.CodeSystem, part: code_systems.CodeSystem) -> None:
    """The rules for one single system PART of the registered FAMILY (itself for a single system)."""
    cs = code_systems
    who = f"code system {part.name!r}" + (f" (of {family.name!r})" if part is not family else "")
    _need(isinstance(part.name, str) and part.name and part.name == part.name.strip() and len(part.name) <= 40
          and cs.code_system(part.name) is part, who, "`name` must be a short string no other system has.")
    _need(isinstance(part.uri, str) and part.uri and not any(c.isspace() for c in part.uri) and ":" in part.uri,
          who, "`uri` must be its FHIR system URI (Coding.system), an absolute URI.")
    example = part.example
    _need(isinstance(example, str) and example.strip(), who, "`example` must be one of its codes (error messages).")
    spelled = part.canonical(example)
    _need(spelled is not None and part.member(example) is part, who, f"its `example` {example!r} must be valid.")
    _need(part.canonical(spelled) == spelled and part.member(spelled) is part, who,
          f"`canonical` must spell its own spelling {spelled!r} unchanged (one spelling a code).")
    for blank in ("", "   "):
        _need(part.canonical(blank) is None and not part.is_valid(blank), who, "a blank string must be no code.")
    _need(part.kind(spelled) in (cs.DIAGNOSIS, cs.PROCEDURE), who, "`kind` must give DIAGNOSIS or PROCEDURE.")
    group = part.group(spelled)
    _need(isinstance(group, str) and group.strip(), who, "`group` must give a non-empty name (the app groups by it).")
    titles = part.titles([spelled])
    _need(isinstance(titles, dict) and set(titles) <= {spelled}, who,
          "`titles` must give {code: title} for codes it was asked of only.")
    # the registry, in its order, reads the example as this system's: no system before it claims it
    _need(cs.MIXED.member(spelled) is part, who,
          f"the registry reads its example {spelled!r} as a code of {getattr(cs.MIXED.member(spelled), 'name', '?')}"
          ": move this system before that one in `REGISTRY`, or narrow its `_valid`.")
    _need(cs.infer_code_system([spelled]) is family and cs.family_of([part]) is family, who,
          f"a label set of its example must be inferred as {family.name!r} (`infer_code_system`, `family_of`).")
    found = cs.check_code(family, example)
    _need(found.code == spelled, who, f"`check_code` must take its example {example!r} as {spelled!r}"
          + (" (a system that ships tables must list it in them)." if part.ships_tables else "."))
    if part.ships_tables:
        listed = part.catalogue()[:5]
        _need(listed and all(isinstance(c, str) and isinstance(t, str) and part.canonical(c) == c
                             for c, t, _ in listed), who,
              "`_catalogue` must list (code, title) pairs in its own spelling (the review page searches them).")
        _need(titles.get(spelled), who, "a system that ships tables must title its example (`_titles`).")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / LABELS_FILE
        LabelSet.from_codes([spelled], code_system=family).save(path)
        entry = json.loads(path.read_text(encoding="utf-8"))[0]
        back = LabelSet.load(path)
    _need(entry.get("system") == part.name and back.code_system is family and back.codes == (spelled,), who,
          "labels.json must record each code's member by name and read back as this system.")
    _need(fhir.code_systems([spelled], family) == {spelled: (part.kind(spelled), part.uri)}, who,
          "FHIR must code its example with its `uri` and its `kind`.")
