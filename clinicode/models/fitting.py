"""What a model kind's `fit(data, options, *, loop)` is given and gives back: the notes (`TrainingData`), the epoch loop
as a tool (`Loop`, which the training package hands over) and the fitted model (`Fitted`). No torch."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:
    import numpy as np

    from clinicode.config import TrainConfig
    from clinicode.data.labels import LabelSet


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingData:
    """A run's notes as a kind's `fit` sees them (test is never among them), and the run's options."""

    texts: Sequence[str]              # every training note
    y: np.ndarray                     # [N, K] 0/1 over `labels`
    labels: LabelSet
    dev_texts: Sequence[str]          # the dev notes: a kind's own choices on dev (the threshold is tuned afterwards)
    y_dev: np.ndarray                 # [N_dev, K] 0/1
    train_counts: np.ndarray          # [K] training notes per code (the checkpoint's, the frequency bands)
    # each training note's coders' spans ({code, start, end}, codes spelled as the labels are); None: the notes have
    # none, or `--no-mentions` keeps their words out
    evidence: Sequence[Any] | None
    single_label: bool                # one code a note: softmax scores, the top code is the prediction
    config: TrainConfig               # the run's training options (seed, --min-doc-freq, --max-len, epochs, ...)
    warm_start: Any = None            # `review retrain`'s checkpoint: the loop starts from it; the rest never does
    # `--fit-on train+dev`, for a kind that `refits_on_dev`: every labelled note outside test as
    # (texts, [N, K] y, evidence or None); None: not asked
    train_and_dev: Callable[[], tuple[Sequence[str], np.ndarray, Sequence[Any] | None]] | None = None
    say: Callable[[str], None] = print   # a status line for the user (what the kind fitted, in how long)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fitted:
    """A kind's trained model as training finishes it: threshold tuned on dev, test scored once, checkpoint saved."""

    model: Any
    tokenizer: Any | None = None
    # called once dev has chosen the threshold (`--fit-on train+dev`): the model test scores and the checkpoint keeps
    refit: Callable[[], Fitted] | None = None
    train_counts: np.ndarray | None = None   # the checkpoint's counts when they are not `TrainingData.train_counts`
    dev_ids: list | None = None              # dev as the tokenizer encodes it, when the loop already has it
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)   # fields the checkpoint's manifest adds
    result: dict[str, Any] = dataclasses.field(default_factory=dict)     # fields `train`'s result adds


class Loop(Protocol):
    """The epoch loop (epochs, DDP, the weight average, early stopping on dev, `--resume`), a tool of the training
    package: it trains a model of KIND with OPTIONS over the run's notes (a warm start's from its checkpoint) and
    returns the best-on-dev weights, loaded. EPOCHS caps the run's --epochs (None: --epochs)."""

    def __call__(self, kind: Any, options: Any, *, epochs: int | None = None) -> Fitted:
        ...


__all__ = ["Fitted", "Loop", "TrainingData"]
