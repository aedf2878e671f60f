"""The tfidf-lr baseline (`baseline.TfidfLR`) as a model kind: fitted whole (no epoch loop, no options), it reads raw
text, shows no spans and has no note or code vectors. scikit-learn loads only when a model is fitted, saved or loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from clinicode.errors import CheckpointError
from clinicode.models.declarations import Abilities, KindFiles
from clinicode.models.fitting import Fitted, Loop, TrainingData

if TYPE_CHECKING:
    import numpy as np

    from clinicode.config import TrainConfig
    from clinicode.data.labels import LabelSet

FILES = KindFiles(("tfidf_lr.safetensors", "tfidf_lr.json"))


class TfidfLRScorer:
    """Scores raw notes with a TfidfLR (no tokenizer: `encode` gives None)."""

    plan = None              # no memory plan: scikit-learn scores a batch as it comes
    terminology_codes = 0    # every code learnt from notes

    def __init__(self, model: Any) -> None:
        self.model = model
        # softmax scores, the top code the prediction (`fit_tfidf_lr(single_label=True)`)
        self.single_label = bool(getattr(getattr(model, "config", None), "softmax", False))

    def score(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        return self.model.predict_proba(list(texts)).astype(np.float32)

    def encode(self, texts: Sequence[str], *, offsets: bool) -> None:
        return None

    def score_encoded(self, encs: Sequence[Any], *, attention: bool) -> tuple[np.ndarray, None]:
        raise NotImplementedError("tfidf-lr reads raw text: score it with `score`.")


class TfidfLRKind:
    """The bag-of-words baseline `train --model tfidf-lr` fits: one logistic regression per code."""

    name = "tfidf-lr"
    summary = "the bag-of-words baseline"
    files = FILES
    abilities = Abilities()  # no spans, no vectors, no token ids: it reads raw text
    loop_model = None        # fitted whole by `fit`: no epoch loop
    options_type = None      # `train --model tfidf-lr` refuses any model options (`clinicode.models.kind_options`)

    def save(self, folder: Path, model: Any, tokenizer: Any | None) -> None:
        model.save(folder)

    def verify(self, folder: Path) -> None:
        return None  # its files are checked when loaded (TfidfLR.load): there is no header to compare cheaply

    def load(self, folder: Path, *, labels: LabelSet, train_config: TrainConfig, device: Any) -> tuple[Any, None]:
        from clinicode.models.tfidf_lr.baseline import TfidfLR

        model = TfidfLR.load(folder)
        if model.n_labels != len(labels):
            raise CheckpointError(f"{folder}: labels.json lists {len(labels)} codes but the baseline has "
                                  f"{model.n_labels} outputs; retrain.")
        return model, None

    def card(self, model: Any) -> dict[str, Any]:
        return {"model_config": {}}

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        return self.name

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> TfidfLRScorer:
        return TfidfLRScorer(checkpoint.model)

    def fit(self, data: TrainingData, options: None, *, loop: Loop) -> Fitted:
        """Fit on train alone, words of at least --min-doc-freq notes (no options, no loop); dev and the seed are not
        used (liblinear's own random_state is fixed at 0, so a checkpoint's bytes do not depend on --seed)."""
        from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr

        return Fitted(model=fit_tfidf_lr(data.texts, data.y, single_label=data.single_label,
                                         min_doc_freq=data.config.min_doc_freq, partly=data.partly))


KIND = TfidfLRKind()
