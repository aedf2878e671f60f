"""The fused model kind (`train --model fused`, the default): LEAM and tfidf-lr in one checkpoint, fused per code.

The maths is in `model.py` and `fusion.py`, training around LEAM's loop in `training.py`, scoring in `scorer.py`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from clinicode.config import TrainConfig
from clinicode.constants import LABELS_FILE
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError, ClinicodeError
from clinicode.files import write_bytes_atomic, write_json_atomic
from clinicode.matching import LANGUAGES, detect_language
from clinicode.models.fused.mentions import MENTIONS_FILE, MentionLexicon, read_mentions
from clinicode.models.fused.model import FusedModel, title_rows
from clinicode.models.leam.kind import KIND as LEAM_KIND, check_weight_shapes, weight_shapes
from clinicode.models.tfidf_lr.kind import KIND as LR_KIND

if TYPE_CHECKING:
    from clinicode.memory import MemoryPlan

FUSION_WEIGHTS = "fusion.safetensors"
FUSION_META = "fusion.json"
FUSION_FORMAT = "clinicode.fusion"
# [K] each: LEAM's coefficient, tfidf-lr's, the title match's, the per-code shift, LEAM's share
_VECTORS = ("a", "c", "e", "offset", "w")
CAP_FROM = 100   # the LEAM part's --fused-epochs applies to label sets of more codes than this


def fusion_header(path: Path) -> dict[str, tuple[int, ...]]:
    return weight_shapes(path)


def _language(fusion: Mapping[str, Any]) -> str:
    """The training notes' language as fusion.json records it; "en" for a checkpoint written before it did."""
    language = fusion.get("language", "en")
    if language not in LANGUAGES:
        raise CheckpointError(f"{FUSION_META}: language {language!r} is not one clinicode matches "
                              f"({', '.join(LANGUAGES)}); retrain.")
    return language


class FusedKind:
    """LEAM and tfidf-lr in one checkpoint, their logits fused per code with weights learnt on dev."""

    name = "fused"
    summary = "LEAM, tfidf-lr, title match and mentions fused per code, the default"
    files = (*LEAM_KIND.files, *LR_KIND.files, FUSION_WEIGHTS, FUSION_META)
    optional_files = (MENTIONS_FILE,)  # written when the training notes had evidence spans
    can_explain = True
    can_embed = True
    scores_ids = False      # the tfidf-lr part reads the text itself
    trained_by_loop = True  # the LEAM part is; tfidf-lr is fitted first and the fusion on dev last (`before_loop`,
    #                         `after_loop`)
    options_type = LEAM_KIND.options_type   # LEAM's options, for its part (asked of the LEAM kind, not imported)
    config_type = LEAM_KIND.config_type
    loop_kind = LEAM_KIND         # the loop trains, scores on dev and saves the LEAM part as a LEAM until `after_loop`

    def save(self, folder: Path, model: FusedModel, tokenizer: Any | None) -> None:
        from safetensors.numpy import save as st_save

        LEAM_KIND.save(folder, model.leam, tokenizer)
        LR_KIND.save(folder, model.lr, None)
        write_bytes_atomic(folder / FUSION_WEIGHTS, st_save(
            {k: np.ascontiguousarray(getattr(model, k), dtype=np.float64) for k in _VECTORS},
            metadata={"clinicode": "fusion"}))
        write_json_atomic(folder / FUSION_META, {"format": FUSION_FORMAT, "format_version": 1, **model.fusion})
        model.mentions.save(folder)

    def verify(self, folder: Path) -> None:
        config = check_weight_shapes(folder)
        held = fusion_header(folder / FUSION_WEIGHTS)
        want = {k: (config.n_labels,) for k in _VECTORS}
        if held != want:
            raise CheckpointError(f"{folder / FUSION_WEIGHTS}: holds {held}, the model's {config.n_labels} codes need "
                                  f"{want}; the pieces come from different runs, retrain.")
        if (folder / MENTIONS_FILE).is_file():  # checked here too, so a run whose mentions would fail is not listed
            try:                                 # as healthy (the app's run list verifies; it does not load)
                codes = LabelSet.load(folder / LABELS_FILE).codes
            except (ClinicodeError, OSError, ValueError):
                return  # loading names what is wrong with labels.json
            read_mentions(folder / MENTIONS_FILE, codes)

    def load(self, folder: Path, *, labels: LabelSet, train_config: TrainConfig, device: Any) -> tuple[FusedModel, Any]:
        from safetensors.numpy import load as st_load

        self.verify(folder)
        leam, tokenizer = LEAM_KIND.load(folder, labels=labels, train_config=train_config, device=device)
        lr, _ = LR_KIND.load(folder, labels=labels, train_config=train_config, device=device)
        try:
            vectors = st_load((folder / FUSION_WEIGHTS).read_bytes())
            meta = json.loads((folder / FUSION_META).read_text(encoding="utf-8"))
            if meta.get("format") != FUSION_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}")
        except Exception as err:  # safetensors raises its own error type for a damaged header
            raise CheckpointError(f"{folder}: {FUSION_WEIGHTS} or {FUSION_META} is damaged ({type(err).__name__}); "
                                  "retrain.") from None
        if not all(np.isfinite(v).all() for v in vectors.values()):
            raise CheckpointError(f"{folder / FUSION_WEIGHTS}: holds values that are not finite; retrain.")
        fusion = {k: v for k, v in meta.items() if k not in ("format", "format_version")}
        return FusedModel(leam, lr, **{k: vectors[k].astype(np.float64) for k in _VECTORS}, fusion=fusion,
                          titles=title_rows(lr, labels.descriptions),
                          mentions=MentionLexicon.load(folder, labels.codes).in_language(_language(fusion))), tokenizer

    def single_label(self, model: FusedModel) -> bool:
        return not model.leam.config.multilabel

    def device(self, model: FusedModel) -> Any:
        return LEAM_KIND.device(model.leam)

    def card(self, model: FusedModel) -> dict[str, Any]:
        return {"model_config": asdict(model.leam.config), "fusion": dict(model.fusion)}

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        return "LEAM + tfidf-lr (fused)"

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> Any:
        from clinicode.models.fused.scorer import FusedScorer

        return FusedScorer(checkpoint.model, checkpoint.tokenizer, max_len=checkpoint.max_len, device=device,
                           batch_size=batch_size, memory_mb=memory_mb)

    def fit(self, texts: Sequence[str], y: np.ndarray, *, options: Any, labels: LabelSet, dev_texts: Sequence[str],
            y_dev: np.ndarray, single_label: bool, seed: int, min_doc_freq: int) -> Any:
        raise NotImplementedError("the fused model's LEAM part is trained by the epoch loop (`clinicode.train`).")

    # Around the epoch loop (optional members of `ModelKind`, which `clinicode.train` asks for).
    def loop_epochs(self, config: TrainConfig, n_labels: int) -> int:
        """The LEAM part's epoch cap: --fused-epochs (at most --epochs) for a label set of more than CAP_FROM codes,
        where LEAM's epochs are long and tfidf-lr and the titles carry the many rare codes; with fewer codes LEAM
        trains as the leam kind does (its patience ends it): at 50 codes a 30-epoch LEAM part cost 0.026 micro-F1
        (docs/accuracy-tuning.md, round 14)."""
        return min(config.epochs, config.fused_epochs) if n_labels > CAP_FROM else config.epochs

    def before_loop(self, texts: Sequence[str], y: np.ndarray, *, single_label: bool, codes: Sequence[str] = (),
                    evidence: Sequence[Any] | None = None, warm_start: Any = None,
                    min_doc_freq: int = TrainConfig.min_doc_freq) -> Any:
        """The tfidf-lr part, fitted on the training notes before LEAM's epochs (words of at least MIN_DOC_FREQ
        notes, `train --min-doc-freq`), and the codes' mentions in them
        (EVIDENCE: each note's {code, start, end} spans, when the training split carries them). A warm start
        (`review retrain`) learns them from every training note too, never from its checkpoint: a checkpoint
        refitted on train + dev (`--fit-on`) holds dev's mentions, and the fusion fitted on dev would trust them."""
        from clinicode.models.fused.training import Before, fit_lr_part

        del warm_start   # the epochs start from its weights; what is fitted here comes from the notes alone
        mentions = (MentionLexicon.build(codes, texts, evidence) if evidence is not None
                    else MentionLexicon(codes=tuple(codes), language=detect_language(texts)))
        note = ""
        if evidence is not None:
            known = set(codes)
            spans = [m for note_spans in evidence for m in (note_spans or ()) if isinstance(m, Mapping)]
            outside = sum(1 for m in spans if str(m.get("code")) not in known)
            note = (f"{len(mentions):,} mention phrases learnt from {len(spans) - outside:,} evidence spans"
                    + (f" ({outside:,} more name codes outside the label set)" if outside else ""))
        return Before(fit_lr_part(texts, y, single_label=single_label, min_doc_freq=min_doc_freq), mentions, note)

    def after_loop(self, model: Any, tokenizer: Any, before: Any, *, dev_texts: Sequence[str], y_dev: np.ndarray,
                   train_counts: np.ndarray, descriptions: Sequence[str], max_len: int, device: Any,
                   batch_size: int, memory_mb: int) -> FusedModel:
        """The fused model of the trained LEAM part (MODEL) and BEFORE (the tfidf-lr part), fitted on dev."""
        from clinicode.models.fused.training import fuse

        return fuse(model, tokenizer, before.lr, mentions=before.mentions, dev_texts=dev_texts, y_dev=y_dev,
                    train_counts=train_counts, descriptions=descriptions, max_len=max_len, device=device,
                    batch_size=batch_size, memory_mb=memory_mb)

    def refit(self, model: FusedModel, texts: Sequence[str], y: np.ndarray, *, codes: Sequence[str],
              descriptions: Sequence[str], evidence: Sequence[Any] | None, single_label: bool,
              min_doc_freq: int) -> FusedModel:
        """`train --fit-on train+dev`: the parts that need no epochs refitted on every labelled note
        (`training.refit_on_all`)."""
        from clinicode.models.fused.training import refit_on_all

        return refit_on_all(model, texts, y, codes=codes, descriptions=descriptions, evidence=evidence,
                            single_label=single_label, min_doc_freq=min_doc_freq)

    # The epoch loop trains the LEAM part: LEAM's answers (`loop_kind`).
    def model_config(self, options: Any, *, vocab_size: int, n_labels: int, multilabel: bool) -> Any:
        return LEAM_KIND.model_config(options, vocab_size=vocab_size, n_labels=n_labels, multilabel=multilabel)

    def build(self, model_config: Any) -> Any:
        return LEAM_KIND.build(model_config)

    def vector_dim(self, model_config: Any) -> int:
        return LEAM_KIND.vector_dim(model_config)

    def start_from(self, model: Any, words: np.ndarray, codes: np.ndarray) -> None:
        LEAM_KIND.start_from(model, words, codes)

    def memory_plan(self, model_config: Any, *, batch_size: int, max_len: int, budget_mb: int, device: str,
                    training: bool, fast: bool = True) -> MemoryPlan:
        return LEAM_KIND.memory_plan(model_config, batch_size=batch_size, max_len=max_len, budget_mb=budget_mb,
                                     device=device, training=training, fast=fast)

    def forward(self, model: Any, ids: Any, mask: Any, *, plan: MemoryPlan) -> Any:
        return LEAM_KIND.forward(model, ids, mask, plan=plan)

    def loss(self, model: Any, logits: Any, y: Any, *, pos_weight: Any) -> tuple[Any, Any]:
        return LEAM_KIND.loss(model, logits, y, pos_weight=pos_weight)

    def after_step(self, model: Any) -> None:
        LEAM_KIND.after_step(model)

    def epoch_stats(self, model: Any) -> dict[str, float]:
        return LEAM_KIND.epoch_stats(model)

    def load_weights(self, folder: Path, model: Any, *, new_code_words: Sequence[Sequence[int]] = ()) -> None:
        LEAM_KIND.load_weights(folder, model, new_code_words=new_code_words)


KIND = FusedKind()
