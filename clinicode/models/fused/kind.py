"""The fused model kind (`train --model fused`, the default): LEAM and tfidf-lr in one checkpoint, fused per code.

The maths is in `model.py` and `fusion.py`, training around LEAM's loop in `training.py`, scoring in `scorer.py`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from clinicode.config import TrainConfig, moved_fields
from clinicode.constants import LABELS_FILE, TRAIN_CONFIG_FILE
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError, ClinicodeError
from clinicode.files import write_bytes_atomic, write_json_atomic
from clinicode.matching import LANGUAGES, detect_language
from clinicode.models.declarations import Abilities, KindFiles
from clinicode.models.fitting import Fitted, Loop, TrainingData
from clinicode.models.fused.mentions import MENTIONS_FILE, MentionLexicon, read_mentions
from clinicode.models.fused.model import FusedModel, terminology_phrases, title_rows
from clinicode.models.fused.options import FusedOptions
from clinicode.models.leam.kind import KIND as LEAM_KIND, check_weight_shapes, weight_shapes
from clinicode.models.tfidf_lr.kind import KIND as LR_KIND

FUSION_WEIGHTS = "fusion.safetensors"
FUSION_META = "fusion.json"
FUSION_FORMAT = "clinicode.fusion"
# [K] each: LEAM's coefficient, tfidf-lr's, the title match's, the per-code shift, LEAM's share
_VECTORS = ("a", "c", "e", "offset", "w")
# the LEAM part's --fused-epochs applies to label sets of more codes than this: CAP_FROM with the coders' mentions,
# CAP_FROM_WITHOUT_MENTIONS without them (round 19: without mentions the part carries more of the fused model)
CAP_FROM = 100
CAP_FROM_WITHOUT_MENTIONS = 300
# the LEAM part attends per code (`code_attention` unset) when it learns no mentions and has more codes than this
# (round 21: up to +0.05 micro-F1 from 300 codes up, none lost; at 50 one attention a note converges, did better)
PER_CODE_FROM = 100


def fusion_header(path: Path) -> dict[str, tuple[int, ...]]:
    return weight_shapes(path)


def _terminology_codes(folder: Path) -> int:
    """How many codes of a terminology (`train --terminology`) follow the parts' codes, as fusion.json records them
    (0: none, or a checkpoint written before they could)."""
    try:
        held = json.loads((folder / FUSION_META).read_text(encoding="utf-8")).get("terminology") or {}
        n = held.get("codes", 0) if isinstance(held, dict) else None
    except (OSError, ValueError, AttributeError):
        return 0   # loading names what is wrong with fusion.json
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise CheckpointError(f"{folder / FUSION_META}: its terminology's 'codes' is {str(n)[:20]}, expected a count "
                              "of codes; the file was edited or damaged, restore the checkpoint or retrain.")
    return n


def _phrase_weight(fusion: Mapping[str, Any], folder: Path) -> float:
    """What a terminology's title said in a note adds to its title match, as fusion.json records it (1.0 without)."""
    import math

    w = (fusion.get("terminology") or {}).get("phrase", 1.0)
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
        raise CheckpointError(f"{folder / FUSION_META}: its terminology's 'phrase' is {str(w)[:20]}, expected a "
                              "non-negative number; the file was edited or damaged, restore the checkpoint or retrain.")
    return float(w)


def _language(fusion: Mapping[str, Any]) -> str:
    """The training notes' language as fusion.json records it; "en" for a checkpoint written before it did."""
    language = fusion.get("language", "en")
    if language not in LANGUAGES:
        raise CheckpointError(f"{FUSION_META}: language {language!r} is not one clinicode matches "
                              f"({', '.join(LANGUAGES)}); retrain.")
    return language


def _saved_options(folder: Path, fusion: Mapping[str, Any]) -> dict[str, Any]:
    """The fused model's own options as saved: fusion.json's "options", or, in a checkpoint written before they moved
    there (#53), the four keys its train_config.json held (absent ones default)."""
    own = fusion.get("options")
    if isinstance(own, dict):
        return own
    if own is not None:
        raise CheckpointError(f"{folder / FUSION_META}: its 'options' is {type(own).__name__}, expected an object; the "
                              "file was edited or damaged, restore the checkpoint or retrain.")
    try:
        held = json.loads((folder / TRAIN_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}   # loading names what is wrong with train_config.json
    return moved_fields(TrainConfig, held) if isinstance(held, dict) else {}


def _mentions_note(mentions: MentionLexicon, codes: Sequence[str], evidence: Sequence[Any] | None) -> str:
    """"; the mentions learnt, and the spans that named other codes" for the line fitting the first parts says;
    "" without evidence spans."""
    if evidence is None:
        return ""
    known = set(codes)
    spans = [m for note_spans in evidence for m in (note_spans or ()) if isinstance(m, Mapping)]
    outside = sum(1 for m in spans if str(m.get("code")) not in known)
    return (f"; {len(mentions):,} mention phrases learnt from {len(spans) - outside:,} evidence spans"
            + (f" ({outside:,} more name codes outside the label set)" if outside else ""))


def _fusion_line(fusion: Mapping[str, Any]) -> str:
    """What the fusion fitted on dev chose, as `train` reports it."""
    return (f"LEAM's share per band {fusion['weights']}, title match {fusion['title_weights']} (bands up to "
            f"{fusion['edges']} training notes, then more), {fusion['per_code_thresholds']} per-code thresholds, "
            f"{fusion.get('mentions', 0):,} phrases from the training notes' evidence spans"
            + (f"; {fusion['codes_outside_train']:,} codes only dev carries joined the label set, learnt from dev "
               "when the parts refit" if fusion.get("codes_outside_train") else "")
            + (f"; {fusion['terminology']['codes']:,} codes of --terminology joined it, scored from their titles "
               f"({fusion['terminology']['dev_positives']:,} dev notes of codes without a training note fitted their "
               "band)" if fusion.get("terminology") else ""))


def _with_terminology(data: TrainingData) -> tuple[LabelSet, np.ndarray, np.ndarray]:
    """(the data's label set followed by `--terminology`'s codes, dev's [N_dev, K + T] gold over both, the [K + T]
    training notes per code, none for the terminology's): what the fusion, test and the checkpoint see once those
    codes join after the loop; the data's own without a terminology."""
    more, labels = data.terminology, data.labels
    if not more:
        return labels, data.y_dev, data.train_counts
    grown = LabelSet(labels.codes + tuple(more), labels.descriptions + tuple(more.values()), labels.code_system)
    y_dev = np.concatenate([np.asarray(data.y_dev), np.asarray(data.y_dev_terminology, dtype=data.y_dev.dtype)], axis=1)
    return grown, y_dev, np.concatenate([data.train_counts, np.zeros(len(more), dtype=np.int64)])


class FusedKind:
    """LEAM and tfidf-lr in one checkpoint, their logits fused per code with weights learnt on dev."""

    name = "fused"
    summary = "LEAM, tfidf-lr, title match and mentions fused per code, the default"
    files = KindFiles((*LEAM_KIND.files.required, *LR_KIND.files.required, FUSION_WEIGHTS, FUSION_META),
                      optional=(MENTIONS_FILE,))  # the mentions: written when the training notes had evidence spans
    # not `score_ids`: the tfidf-lr part reads the text itself; `refit_on_dev`: with --fit-on train+dev the parts
    # without epochs refit on train and dev (`fit`)
    abilities = Abilities(explain=True, embed=True, refit_on_dev=True)
    loop_model = LEAM_KIND  # the loop trains the LEAM part (`fit`: tfidf-lr first, the loop, the fusion on dev last)
    options_type = FusedOptions   # its LEAM part's options (asked of the LEAM kind), then its own four

    def save(self, folder: Path, model: FusedModel, tokenizer: Any | None) -> None:
        from safetensors.numpy import save as st_save

        LEAM_KIND.save(folder, model.leam, tokenizer)
        LR_KIND.save(folder, model.lr, None)
        write_bytes_atomic(folder / FUSION_WEIGHTS, st_save(
            {k: np.ascontiguousarray(getattr(model, k), dtype=np.float64) for k in _VECTORS},
            metadata={"clinicode": "fusion"}))
        own = {"options": model.options.own()} if model.options is not None else {}
        write_json_atomic(folder / FUSION_META, {"format": FUSION_FORMAT, "format_version": 1, **model.fusion, **own})
        model.mentions.save(folder)

    def verify(self, folder: Path) -> None:
        config = check_weight_shapes(folder)
        held = fusion_header(folder / FUSION_WEIGHTS)
        k = config.n_labels + _terminology_codes(folder)
        want = {name: (k,) for name in _VECTORS}
        if held != want:
            raise CheckpointError(f"{folder / FUSION_WEIGHTS}: holds {held}, the model's {k} codes need "
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
        extra = _terminology_codes(folder)   # a terminology's codes, last in labels.json: the parts score the others
        parts = labels if not extra else LabelSet(labels.codes[:-extra], labels.descriptions[:-extra],
                                                  labels.code_system)
        leam, tokenizer = LEAM_KIND.load(folder, labels=parts, train_config=train_config, device=device)
        lr, _ = LR_KIND.load(folder, labels=parts, train_config=train_config, device=device)
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
        fusion = {k: v for k, v in meta.items() if k not in ("format", "format_version", "options")}
        options = FusedOptions.read_back(leam.config.options, _saved_options(folder, meta))
        language = _language(fusion)
        terminology = tuple(zip(labels.codes[len(parts):], labels.descriptions[len(parts):]))
        return FusedModel(leam, lr, **{k: vectors[k].astype(np.float64) for k in _VECTORS}, fusion=fusion,
                          titles=title_rows(lr, labels.descriptions),
                          mentions=MentionLexicon.load(folder, labels.codes).in_language(language),
                          terminology=terminology,
                          phrases=terminology_phrases(terminology, labels.codes, language),
                          phrase_weight=_phrase_weight(fusion, folder), options=options), tokenizer

    def card(self, model: FusedModel) -> dict[str, Any]:
        own = model.options.own() if model.options is not None else {}
        return {"model_config": {**asdict(model.leam.config), **own}, "fusion": dict(model.fusion)}

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        return "LEAM + tfidf-lr (fused)"

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> Any:
        from clinicode.models.fused.scorer import FusedScorer

        return FusedScorer(checkpoint.model, checkpoint.tokenizer, max_len=checkpoint.max_len, device=device,
                           batch_size=batch_size, memory_mb=memory_mb)

    def fit(self, data: TrainingData, options: Any, *, loop: Loop) -> Fitted:
        """Fit tfidf-lr and the mentions on every training note, run the loop over the LEAM part (`loop_epochs`),
        fuse the parts on dev and, when asked (`--fit-on train+dev`), refit the parts without epochs on train and dev
        once dev has chosen the threshold (`training.refit_on_all`). A warm start (`review retrain`) reaches only the
        loop: what is fitted here comes from the notes alone, never from its checkpoint, whose mentions after
        `--fit-on train+dev` hold dev's phrases that the fusion fitted on dev would trust. `--terminology`'s codes
        (`data.terminology`) join after the loop, scored from their titles alone (`training.join_terminology`): the
        checkpoint's label set is the data's followed by them (`Fitted.labels`)."""
        from clinicode.models.fused.training import fit_lr_part, fuse, refit_on_all

        t0 = time.perf_counter()
        options = options if options is not None else FusedOptions()
        codes = data.labels.codes
        evidence = data.evidence if options.mentions else None   # --no-mentions: the coders' spans stay unread
        mentions = (MentionLexicon.build(codes, data.texts, evidence, partly=data.partly) if evidence is not None
                    else MentionLexicon(codes=tuple(codes), language=detect_language(data.texts)))
        lr = fit_lr_part(data.texts, data.y, single_label=data.single_label, min_doc_freq=data.config.min_doc_freq,
                         partly=data.partly)
        data.say(f"{self.name}: the part before the epochs fitted in {time.perf_counter() - t0:.0f} s"
                 + _mentions_note(mentions, codes, evidence))
        part = options.leam_part(per_code=not len(mentions) and len(data.labels) > PER_CODE_FROM)
        if options.code_attention is None and part.code_attention:
            data.say(f"{self.name}: no coders' mentions to learn and {len(data.labels):,} codes, so its LEAM part "
                     f"attends per code (--model-option code_attention=false: one attention per note)")
        options = dataclasses.replace(options, code_attention=part.code_attention)   # saved as chosen
        trained = loop(self.loop_model, part,
                       epochs=self.loop_epochs(data.config, options, len(data.labels), mentions=len(mentions) > 0))
        t0 = time.perf_counter()
        config = data.config
        labels, y_dev, counts = _with_terminology(data)   # `--terminology`'s codes join after the loop, rowless
        final, dev_scores = fuse(trained.model, trained.tokenizer, lr, mentions=mentions, dev_texts=data.dev_texts,
                                 y_dev=y_dev, train_counts=data.train_counts, descriptions=data.labels.descriptions,
                                 max_len=config.max_len, device=trained.device,
                                 batch_size=config.eval_batch_size, memory_mb=config.memory_mb,
                                 terminology=data.terminology or None,
                                 unread=() if data.partly is None else data.partly.columns.tolist())
        final = dataclasses.replace(final, options=options)
        data.say(f"fusion fitted on dev in {time.perf_counter() - t0:.0f} s: {_fusion_line(final.fusion)}")

        def refit() -> Fitted:
            t1 = time.perf_counter()
            texts, y, both = data.train_and_dev()
            partly = (None if data.partly is None or data.single_label   # dev's notes were never read for them
                      else data.partly.then_unread(len(texts) - len(data.texts)))
            model = refit_on_all(final, texts, y, codes=labels.codes, descriptions=labels.descriptions,
                                 evidence=both if options.mentions else None, single_label=data.single_label,
                                 min_doc_freq=config.min_doc_freq, partly=partly)
            data.say(f"--fit-on train+dev: tfidf-lr, the titles and the mentions refitted on train and dev in "
                     f"{time.perf_counter() - t1:.0f} s, each code keeping the fusion dev chose; test scores this "
                     "model")
            return dataclasses.replace(fitted, model=dataclasses.replace(model, options=options), refit=None,
                                       train_counts=y.sum(axis=0))

        grown = {"labels": labels, "train_counts": counts} if data.terminology else {}
        fitted = dataclasses.replace(trained, model=final, dev_ids=None, dev_scores=dev_scores, **grown,
                                     refit=refit if (options.fit_on == "train+dev" and data.train_and_dev is not None
                                                     and len(data.dev_texts)) else None,
                                     result={**trained.result, **({"fusion": final.fusion} if final.fusion else {})})
        return fitted

    def loop_epochs(self, config: TrainConfig, options: FusedOptions, n_labels: int, *, mentions: bool) -> int:
        """The LEAM part's epoch cap: --fused-epochs (at most --epochs) for a label set of more than CAP_FROM codes
        when the model has the coders' MENTIONS (more than CAP_FROM_WITHOUT_MENTIONS without them), where LEAM's
        epochs are long and tfidf-lr, the titles and the mentions carry the many rare codes; with fewer codes LEAM
        trains as the leam kind does (its patience ends it). At 50 codes a 30-epoch LEAM part cost 0.026 micro-F1
        (docs/accuracy-tuning.md, round 14); at 300 codes without mentions 0.018-0.037, the fused model falling below
        LEAM alone, and with them nothing, for a quarter of the CPU (round 19)."""
        cap_from = CAP_FROM if mentions else CAP_FROM_WITHOUT_MENTIONS
        return min(config.epochs, options.fused_epochs) if n_labels > cap_from else config.epochs


KIND = FusedKind()
