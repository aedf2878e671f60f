"""What a model kind's `fit(data, options, *, loop)` is given and gives back: the notes (`TrainingData`), the epoch
loop as a tool (`Loop`, handed over by the training package) asking a `LoopModel`, the fitted model (`Fitted`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from clinicode.config import TrainConfig
    from clinicode.data.labels import LabelSet, PartlyCoded
    from clinicode.models.declarations import KindFiles


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
    # `--fit-on train+dev`, for a kind that can `refit_on_dev`: every labelled note outside test as
    # (texts, [N, K] y, evidence or None); None: not asked
    train_and_dev: Callable[[], tuple[Sequence[str], np.ndarray, Sequence[Any] | None]] | None = None
    # `train --terminology`: code -> title of the codes outside `labels` a kind may score from their titles alone
    # (the fused model), and their [N_dev, T] 0/1 dev gold; empty: not asked
    terminology: Mapping[str, str] = dataclasses.field(default_factory=dict)
    y_dev_terminology: np.ndarray | None = None
    say: Callable[[str], None] = lambda line: None   # a status line for the user (what the kind fitted, how long)
    # codes known only on some training notes (coders added them in review; `review retrain`'s data names them):
    # fitted on those notes alone; None: every code is known on every note
    partly: PartlyCoded | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fitted:
    """A kind's trained model as training finishes it: threshold tuned on dev, test scored once, checkpoint saved."""

    model: Any
    tokenizer: Any | None = None
    # called once dev has chosen the threshold (`--fit-on train+dev`): the model test scores and the checkpoint keeps
    refit: Callable[[], Fitted] | None = None
    train_counts: np.ndarray | None = None   # the checkpoint's counts when they are not `TrainingData.train_counts`
    dev_ids: list | None = None              # dev as the tokenizer encodes it, when the loop already has it
    # [N_dev, K] dev's scores by this model, as its kind's scorer gives them, when fitting already scored dev (the
    # fused model's fusion): `finish` tunes the threshold on them instead of scoring dev again
    dev_scores: np.ndarray | None = None
    device: Any = "cpu"                      # where the model's weights are (the loop's): dev and test score there
    # the checkpoint's label set when the model holds more codes than the data's (`--terminology`'s follow them):
    # dev's and test's gold, the refit's notes and the checkpoint count them from then on
    labels: LabelSet | None = None
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)   # fields the checkpoint's manifest adds
    result: dict[str, Any] = dataclasses.field(default_factory=dict)     # fields `train`'s result adds


class MemoryPlan(Protocol):
    """One batch's memory plan as the loop uses it (LEAM's: `clinicode.models.leam.memory.MemoryPlan`)."""

    def summary(self) -> str:
        """The line the run reports."""

    def to_dict(self) -> dict[str, Any]:
        """What the checkpoint's manifest records as "memory"."""


class LoopModel(Protocol):
    """What the epoch loop asks of the model it trains (a kind's `loop_model`): a torch.nn.Module fed token ids,
    built from its configuration (`config_type`: the options plus what the data decides, saved with --resume's
    state), started from word and code vectors, one batch's forward and loss, a step's constraints, an epoch's
    figures, and the weights of a checkpoint it saved."""

    name: str                # the kind the loop's checkpoints name until the epochs end
    files: KindFiles         # the files its `save` writes (the loop saves the best epoch's weights with them)
    # the class of its model configuration (`model_config`; saved with --resume's state, and the kind's
    # model_config.json as `clinicode.checkpoint.model_options_as_saved` reads it)
    config_type: type

    def save(self, folder: Path, model: Any, tokenizer: Any | None) -> None:
        """Write its files for MODEL and its tokenizer into FOLDER (the best epoch's checkpoint)."""

    def model_config(self, options: Any, *, vocab_size: int, n_labels: int, multilabel: bool) -> Any:
        """The model's configuration: OPTIONS (an `options_type`) plus what the data decides."""

    def build(self, model_config: Any) -> Any:
        """A fresh model of MODEL_CONFIG (a torch.nn.Module)."""

    def vector_dim(self, model_config: Any) -> int:
        """The size of the word and code vectors the loop starts the model from (`start_from`)."""

    def start_from(self, model: Any, words: np.ndarray, codes: np.ndarray) -> None:
        """Copy starting vectors into MODEL: [V, P] words (the tokenizer's rows) and [K, P] codes."""

    def memory_plan(self, model_config: Any, *, batch_size: int, max_len: int, budget_mb: int, device: str,
                    training: bool, fast: bool = True) -> MemoryPlan:
        """One batch's memory plan (LEAM's: `clinicode.models.leam.memory.plan`); raises ConfigError when a batch
        cannot fit BUDGET_MB."""

    def forward(self, model: Any, ids: Any, mask: Any, *, plan: MemoryPlan, targets: Any = None) -> Any:
        """[B, K] logits of one training batch (ids and mask [B, L]; TARGETS its [B, K] labels, for a model that
        scores only the codes in play, handing `loss` what it needs); under torchrun the notes' dropout masks are the
        global batch's here, so the forward and `loss` are two steps (a regulariser in `loss` is not the batch's)."""

    def loss(self, model: Any, logits: Any, y: Any, *, pos_weight: Any, known: Any = None) -> tuple[Any, Any]:
        """(the loss to minimise, the task loss to report) of a batch's logits and its [B, K] float labels; KNOWN:
        [B, K] 1 where a label is known, 0 where it leaves the loss (`clinicode.data.labels.PartlyCoded`), or None."""

    def after_step(self, model: Any) -> None:
        """Called after each optimiser step (constraints on the weights)."""

    def epoch_stats(self, model: Any) -> dict[str, float]:
        """Figures about the weights for an epoch's history row."""

    def load_weights(self, folder: Path, model: Any) -> None:
        """The weights of the checkpoint in FOLDER (written by `save`) into MODEL."""


class Loop(Protocol):
    """The epoch loop (epochs, DDP, the weight average, early stopping on dev, `--resume`), a tool of the training
    package: it trains MODEL (a `LoopModel`) with OPTIONS over the run's notes (a warm start's from its checkpoint) and
    returns the best-on-dev weights, loaded. EPOCHS caps the run's --epochs (None: --epochs)."""

    def __call__(self, model: LoopModel, options: Any, *, epochs: int | None = None) -> Fitted:
        ...


__all__ = ["Fitted", "Loop", "LoopModel", "MemoryPlan", "TrainingData"]
