"""Model kinds as plugins (`ModelKind`, the registry `MODEL_KINDS`): what a checkpoint, the predictor and training ask.

A new model is one folder beside `leam/` and `tfidf_lr/` plus one registry line (docs/architecture.md). No torch."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Protocol, Sequence, Union

from clinicode.config import config_from_dict
from clinicode.errors import CheckpointError, ConfigError
from clinicode.models.declarations import Abilities, AsksOfRun, KindFiles, RunNeeds
from clinicode.models.fused.kind import KIND as FUSED
from clinicode.models.leam.kind import KIND as LEAM
from clinicode.models.tfidf_lr.kind import KIND as TFIDF_LR

if TYPE_CHECKING:
    import numpy as np

    from clinicode.config import TrainConfig
    from clinicode.data.labels import LabelSet
    from clinicode.models.fitting import Fitted, Loop, LoopModel, TrainingData


class Scorer(Protocol):
    """A loaded model ready to score notes (`ModelKind.scorer`); `Predictor` holds one.

    Optional members, present when the kind's `abilities` say so: `score_ids(id_lists)` (`score_ids`); `embed(texts)`
    and `label_embeddings()` (`embed`); `code_spans(enc, code_indices, n, *, text)` (`explain`: each code's evidence
    spans in one encoded note, best first, by `clinicode.models.spans.word_spans` over the kind's own word weights,
    whose meaning and range its docstring states, and `span_weight`, that meaning in a coder's words).
    """

    single_label: bool   # the model gives one label per note (softmax scores): its prediction is the top code
    # the memory plan scoring follows (LEAM's `MemoryPlan`; its `summary()` is predict's stderr line), or None for a
    # model that plans none (tfidf-lr)
    plan: Any
    # how many codes, the label set's last ones, the model scores from a terminology's titles alone, with no training
    # note (the fused model's `train --terminology`; `CodeScore.source` "terminology"); 0 for a model without any
    terminology_codes: int

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """[N, K] float32 probabilities for raw notes, in input order."""

    def encode(self, texts: Sequence[str], *, offsets: bool) -> list[Any] | None:
        """The notes as the model's tokenizer encodes them (each with `.ids`, `.truncated` and, with offsets,
        `.offsets`), or None for a model that reads the text itself."""

    def score_encoded(self, encs: Sequence[Any], *, attention: bool) -> tuple[np.ndarray, list[Any] | None]:
        """([N, K] probabilities, each note's [L] token attention when asked and the kind can `explain`, else None)
        for notes `encode` returned."""


class ModelKind(Protocol):
    """One kind of model a checkpoint can hold (`MODEL_KINDS`)."""

    name: str                # the manifest's "model", `train --model`, `Checkpoint.kind`
    summary: str             # a few words for `train --help`
    files: KindFiles         # the checkpoint files it writes and reads (always, or sometimes): the manifest hashes them
    abilities: Abilities     # what it can do beyond scoring (spans, vectors, scoring token ids, refitting on dev)
    # the options a user chooses (a dataclass: `train(model_options=...)`, `train --model-option KEY=VALUE`), given to
    # `fit`, saved with the kind's files and shown back by `card`; None: the kind takes none. What they ask a run to
    # prepare for `fit` (the coders' spans, train and dev together, a terminology) they say in a `run_needs()`
    # (`clinicode.models.declarations.AsksOfRun`, optional: without it, the coders' spans alone)
    options_type: type | None
    # what the epoch loop trains for it (`clinicode.models.fitting.LoopModel`, whose `config_type` is the class of the
    # kind's model configuration): itself (LEAM), its part (the fused model: LEAM's kind), or None: it is fitted whole
    # and its `fit` never calls the loop
    loop_model: LoopModel | None

    def save(self, folder: Path, model: Any, tokenizer: Any | None) -> None:
        """Write the kind's files (`files`) for MODEL (and its tokenizer, if it has one) into FOLDER."""

    def verify(self, folder: Path) -> None:
        """Check the kind's files against each other without loading weights (no torch); raise CheckpointError."""

    def load(self, folder: Path, *, labels: LabelSet, train_config: TrainConfig,
             device: Any) -> tuple[Any, Any | None]:
        """(model, tokenizer or None) from FOLDER on DEVICE, checked against the checkpoint's labels and training
        options; raise CheckpointError naming the piece that disagrees."""

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> Scorer:
        """A `Scorer` for a loaded checkpoint of this kind, scoring on DEVICE (where `load` put the model)."""

    def card(self, model: Any) -> dict[str, Any]:
        """The kind's part of the model card (`Predictor.card`): {"model_config": ...}."""

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        """The model as a person reads it in the app, from a card's model_config."""

    def fit(self, data: TrainingData, options: Any, *, loop: Loop) -> Fitted:
        """The kind's model trained on DATA (the training and dev notes, their labels and the run's options; never
        test) with OPTIONS (an `options_type`, or None for a kind that takes none: the model keeps them, `save` writes
        them and `card` shows them back). A kind fitted whole fits it here; a kind with a `loop_model` calls LOOP,
        the epoch loop the training package hands over, with that `LoopModel` (itself, or its part), and may fit
        parts before and after it (the fused model: tfidf-lr, then the loop, then the fusion on dev).
        Status lines for the user go to `data.say`; `train` then tunes the threshold on dev, scores test and saves."""


MODEL_KINDS: dict[str, ModelKind] = {
    FUSED.name: FUSED,
    LEAM.name: LEAM,
    TFIDF_LR.name: TFIDF_LR,
}


def known_kinds() -> str:
    """The registered names as a message lists them: "'leam' or 'tfidf-lr'"."""
    names = [repr(n) for n in MODEL_KINDS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _shown(name: object) -> str:
    """NAME as a message shows it: its repr, cut to 60 characters (a hand-edited manifest may hold anything)."""
    given = repr(name)
    return given if len(given) <= 60 else f"{given[:57]}..."


def model_kind(name: object, *, folder: Path | None = None) -> ModelKind:
    """The registered kind NAME (a checkpoint manifest's "model").

    Raises:
        CheckpointError: one line naming the unknown kind (and FOLDER's manifest, when given) and the known ones.
    """
    kind = MODEL_KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        given = _shown(name)
        where = f"{folder}: unknown model kind {given} in manifest.json" if folder is not None else \
            f"unknown model kind {given}"
        raise CheckpointError(f"{where}; expected {known_kinds()}.")
    return kind


def kind_options(kind: ModelKind, given: Any) -> Any:
    """KIND's options from what `train` was given (an `options_type`, a dict of some of them, or None), or None
    for a kind that takes none.

    Raises:
        ConfigError: an unknown or out-of-range option; or options given for a kind that takes none (they would be
            saved with the run as if they applied).
    """
    if kind.options_type is None:
        named = sorted(given if isinstance(given, dict) else vars(given)) if given else []
        if named:
            raise ConfigError(f"--model {kind.name} takes no model options, got {', '.join(named)}; leave them out "
                              "(they are another kind's).")
        return None
    if isinstance(given, kind.options_type):
        return given
    if given is not None and not isinstance(given, dict):
        raise ConfigError(f"--model {kind.name}: model options must be a dict or {kind.options_type.__name__}, got "
                          f"{type(given).__name__}.")
    return config_from_dict(kind.options_type, dict(given or {}), source="model options")


def run_needs(kind: ModelKind, options: Any) -> RunNeeds:
    """What a run prepares for KIND's `fit` given its OPTIONS (`kind_options`): their `run_needs()` when they are
    `AsksOfRun` (the fused model's: --fit-on, --mentions, --terminology), else the coders' spans alone; dev's
    codes only for a kind that can `refit_on_dev`."""
    needs = options.run_needs() if isinstance(options, AsksOfRun) else RunNeeds()
    return needs if kind.abilities.refit_on_dev or not needs.dev_codes else dataclasses.replace(needs, dev_codes=False)


def option_names(kind: ModelKind) -> tuple[str, ...]:
    """The names of KIND's options (its `options_type`'s fields), in their order; () for a kind that takes none."""
    return tuple(f.name for f in dataclasses.fields(kind.options_type)) if kind.options_type is not None else ()


def _spelt(value: Any) -> str:
    """A value as --model-option spells it (booleans as true/false)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _example(kind: ModelKind, name: str | None = None) -> str:
    """`--model-option NAME=default` (the kind's first option when NAME is None)."""
    assert kind.options_type is not None
    field = next(f for f in dataclasses.fields(kind.options_type) if name in (None, f.name))
    return f"--model-option {field.name}={_spelt(field.default)}"


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _read_value(hint: Any, text: str) -> tuple[bool, Any, str]:
    """(read, the value, what HINT takes) for TEXT read as a field of type HINT: bool, int, float, str, a Literal of
    choices, or one of them or None."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        found = [c for c in choices if _spelt(c) == text]
        return bool(found), found[0] if found else None, "one of " + ", ".join(repr(_spelt(c)) for c in choices)
    if origin in (Union, types.UnionType) and type(None) in typing.get_args(hint):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if text.lower() in ("none", "null"):
            return True, None, ""
        ok, value, what = _read_value(inner[0], text) if len(inner) == 1 else (False, None, str(hint))
        return ok, value, f"{what} or none"
    if hint is bool:
        low = text.lower()
        return low in _TRUE + _FALSE, low in _TRUE, "true or false"
    try:
        if hint is int:
            return True, int(text), "an integer"
        if hint is float:
            value = float(text)
            return math.isfinite(value), value, "a number"
    except ValueError:
        return False, None, "an integer" if hint is int else "a number"
    if hint is str:
        return True, text, "a string"
    return False, None, f"a {getattr(hint, '__name__', hint)}, which --model-option cannot spell"


def parse_model_options(kind: ModelKind, items: Sequence[str]) -> dict[str, Any]:
    """`train --model-option KEY=VALUE` items as KIND's options by name, each VALUE read by its field's type (int,
    float, bool as true/false, str, a Literal's choices); their ranges are the options type's own checks.

    Raises:
        ConfigError: one line naming the item, the kind's options and an example: an item without "=", a key the
            kind's `options_type` lacks (or any item for a kind that takes none), a value its field cannot take, or
            a key given twice.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if kind.options_type is None:
            raise ConfigError(f"--model {kind.name} takes no model options, got --model-option {key[:40]}; leave it "
                              "out.")
        names = option_names(kind)
        if not eq or not key:
            raise ConfigError(f"--model-option {item[:40]!r}: expected KEY=VALUE, e.g. {_example(kind)}.")
        if key not in names:
            raise ConfigError(f"--model-option {key[:40]}: --model {kind.name} has no option {key[:40]!r}; its "
                              f"options: {', '.join(names)}; e.g. {_example(kind)}.")
        if key in out:
            raise ConfigError(f"--model-option {key} is given twice; give each option once.")
        hint = typing.get_type_hints(kind.options_type)[key]
        ok, value, what = _read_value(hint, text.strip())
        if not ok:
            raise ConfigError(f"--model-option {key}={text[:20]}: {key} takes {what}, got {text[:20]!r}; e.g. "
                              f"{_example(kind, key)}.")
        out[key] = value
    return out


def train_kind(name: object) -> ModelKind:
    """The registered kind `train --model NAME` asks for.

    Raises:
        ConfigError: one line naming the option, the known kinds and the value given.
    """
    kind = MODEL_KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ConfigError(f"--model must be {known_kinds()}, got {_shown(name)}.")
    return kind


__all__ = ["MODEL_KINDS", "Abilities", "AsksOfRun", "KindFiles", "ModelKind", "RunNeeds", "Scorer", "kind_options",
           "known_kinds", "model_kind", "option_names", "parse_model_options", "run_needs", "train_kind"]
