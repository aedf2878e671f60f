"""What a model kind declares about itself (`ModelKind.files`, `ModelKind.abilities`): the checkpoint files it owns,
what it can do beyond scoring and what its options ask of a run. Plain values, no torch; a kind's folder imports
them."""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class KindFiles:
    """The checkpoint files a kind writes and reads: the manifest hashes each one.

    `required`: written by every `save`; `verify_checkpoint` refuses a checkpoint whose manifest lists no hash for one.
    `optional`: written only sometimes and read when there (the fused model's mentions.json); one that is there must be
    hashed too, or a file planted in a copied run would change what the checkpoint predicts.
    """

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()

    @property
    def every(self) -> tuple[str, ...]:
        """Every file the kind may read: `required`, then `optional`."""
        return (*self.required, *self.optional)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Abilities:
    """What a kind can do beyond scoring notes; callers ask these, never the kind's name."""

    # token attention and per-code phrase spans: its scorer has `code_spans` and `span_weight` (predict --explain,
    # explain_codes, evidence)
    explain: bool = False
    # note and code vectors: its scorer has `embed` and `label_embeddings` (the app's embedding map)
    embed: bool = False
    # scores notes its tokenizer already encoded: its scorer has `score_ids` (training's dev scoring)
    score_ids: bool = False
    # with `--fit-on train+dev`, its `fit` refits on train and dev once dev has chosen
    # (`TrainingData.train_and_dev`), so the label set keeps the codes only dev carries
    refit_on_dev: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunNeeds:
    """What a run prepares for a kind's `fit` beyond train and dev, as the kind's options ask (`AsksOfRun`: an options
    type's `run_needs()`; an options type without it, or a kind without options, asks for the coders' spans alone)."""

    # the label set keeps the codes only dev carries, and `TrainingData.train_and_dev` is given (a kind that can
    # `refit_on_dev`: the fused model's --fit-on train+dev)
    dev_codes: bool = False
    # each training note's coders' spans (`TrainingData.evidence`), when the notes have them
    evidence: bool = True
    # a code<TAB>title file or "auto": its codes outside the label set reach `fit` as `TrainingData.terminology`
    # (the fused model's --terminology); read before anything is written
    terminology: str | None = None


@runtime_checkable
class AsksOfRun(Protocol):
    """An options type (`ModelKind.options_type`) whose options ask a run to prepare something for `fit` (the fused
    model's `--fit-on`, `--mentions`, `--terminology`). Optional: options without `run_needs` get `RunNeeds()`.
    `clinicode.models.run_needs` asks it once a run; `check_kind` checks it on the default options and on others."""

    def run_needs(self) -> RunNeeds:
        """What the run prepares for `fit` given these options; `dev_codes` only for a kind that can
        `refit_on_dev`."""


__all__ = ["Abilities", "AsksOfRun", "KindFiles", "RunNeeds"]
