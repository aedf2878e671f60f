"""Model kinds as plugins: what a checkpoint, the predictor, training and the app ask of a model, in one place.

A model kind (`ModelKind`) is named by the manifest's "model" field and `train --model`. It owns its checkpoint files
(saving, checking and loading them), scores notes through a `Scorer`, and says what else it can do (`can_explain`,
`can_embed`, `scores_ids`) so callers ask the kind instead of comparing names. `MODEL_KINDS` is the registry:
a new model is one module beside `leam` and `tfidf_lr` plus one line here (docs/architecture.md, "Adding a model").

Importing this package imports neither torch nor scikit-learn: a kind loads them when it saves, loads or scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from clinicode.errors import CheckpointError, ConfigError
from clinicode.models import fused, leam, tfidf_lr

if TYPE_CHECKING:
    import numpy as np

    from clinicode.config import TrainConfig
    from clinicode.data.labels import LabelSet


class Scorer(Protocol):
    """A loaded model ready to score notes (`ModelKind.scorer`); `Predictor` holds one.

    Optional members, present when the kind says so: `score_ids(id_lists)` (`scores_ids`); `embed(texts)` and
    `label_embeddings()` (`can_embed`); `word_rows(token_ids, code_indices)` (`can_explain`); `plan` (the memory plan,
    for a model that has one).
    """

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """[N, K] float32 probabilities for raw notes, in input order."""

    def encode(self, texts: Sequence[str], *, offsets: bool) -> list[Any] | None:
        """The notes as the model's tokenizer encodes them (each with `.ids`, `.truncated` and, with offsets,
        `.offsets`), or None for a model that reads the text itself."""

    def score_encoded(self, encs: Sequence[Any], *, attention: bool) -> tuple[np.ndarray, list[Any] | None]:
        """([N, K] probabilities, each note's [L] token attention when asked and the kind `can_explain`, else None)
        for notes `encode` returned."""


class ModelKind(Protocol):
    """One kind of model a checkpoint can hold (`MODEL_KINDS`)."""

    name: str                # the manifest's "model", `train --model`, `Checkpoint.kind`
    summary: str             # a few words for `train --help`
    files: tuple[str, ...]   # the checkpoint files it writes and reads: the manifest must hash each one
    can_explain: bool        # token attention and per-code phrase spans (predict --explain, explain_codes, evidence)
    can_embed: bool          # note and code vectors (Predictor.embed and label_embeddings; the app's embedding map)
    scores_ids: bool         # scores notes its tokenizer already encoded (Predictor.score_ids: training's dev scoring)
    trained_by_loop: bool    # trained by the epoch loop (`train`, with ModelOptions); else fitted whole by `fit`

    def save(self, folder: Path, model: Any, tokenizer: Any | None) -> None:
        """Write the kind's files (`files`) for MODEL (and its tokenizer, if it has one) into FOLDER."""

    def verify(self, folder: Path) -> None:
        """Check the kind's files against each other without loading weights (no torch); raise CheckpointError."""

    def load(self, folder: Path, *, labels: LabelSet, train_config: TrainConfig,
             device: Any) -> tuple[Any, Any | None]:
        """(model, tokenizer or None) from FOLDER, checked against the checkpoint's labels and training options;
        raise CheckpointError naming the piece that disagrees."""

    def single_label(self, model: Any) -> bool:
        """True when MODEL gives one label per note (softmax scores): its prediction is the top code."""

    def device(self, model: Any) -> Any:
        """Where MODEL's weights are (the device its predictor scores on)."""

    def card(self, model: Any) -> dict[str, Any]:
        """The kind's part of the model card (`Predictor.card`): {"model_config": ...}."""

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        """The model as a person reads it in the app, from a card's model_config."""

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> Scorer:
        """A `Scorer` for a loaded checkpoint of this kind."""

    def fit(self, texts: Sequence[str], y: np.ndarray, *, single_label: bool) -> Any:
        """A model fitted whole on training notes and their [N, K] 0/1 labels (kinds not `trained_by_loop`)."""


MODEL_KINDS: dict[str, ModelKind] = {
    fused.KIND.name: fused.KIND,
    leam.KIND.name: leam.KIND,
    tfidf_lr.KIND.name: tfidf_lr.KIND,
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


def train_kind(name: object) -> ModelKind:
    """The registered kind `train --model NAME` asks for.

    Raises:
        ConfigError: one line naming the option, the known kinds and the value given.
    """
    kind = MODEL_KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ConfigError(f"--model must be {known_kinds()}, got {_shown(name)}.")
    return kind


__all__ = ["MODEL_KINDS", "ModelKind", "Scorer", "known_kinds", "model_kind", "train_kind"]
