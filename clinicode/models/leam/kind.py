"""LEAM as a model kind: its checkpoint files (weights, model_config.json, tokenizer.json), their checks, its scorer and
what the epoch loop asks of it. Verifying a LEAM checkpoint reads the weights' header only: no torch."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from clinicode.artifacts import write_safetensors_atomic
from clinicode.config import load_config, save_config
from clinicode.constants import MODEL_CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE
from clinicode.errors import CheckpointError, ClinicodeError
from clinicode.models.declarations import Abilities, KindFiles
from clinicode.models.fitting import Fitted, Loop, TrainingData
from clinicode.models.leam.options import PAPER_MODEL, LEAMConfig, ModelOptions, is_paper_model
from clinicode.tokenizer import ClinicalTokenizer

if TYPE_CHECKING:
    import numpy as np

    from clinicode.config import TrainConfig
    from clinicode.data.labels import LabelSet
    from clinicode.models.leam.memory import MemoryPlan
    from clinicode.models.leam.scorer import LEAMScorer


def leam_weight_shapes(config: LEAMConfig) -> dict[str, tuple[int, ...]]:
    """The tensor names and shapes a LEAM of CONFIG holds (`LEAM(config).state_dict()`), computed without torch."""
    P, K, H, V, r = config.embed_dim, config.n_labels, config.hidden_dim, config.vocab_size, config.radius
    shapes = {"word_emb.weight": (V, P), "label_emb": (K, P), "phrase_w": (2 * r + 1,), "phrase_b": (K,),
              "head.1.weight": (H, P), "head.1.bias": (H,), "head.4.weight": (K, H), "head.4.bias": (K,)}
    if config.code_evidence:
        shapes["evidence_rho"] = (K,)
    if config.code_attention:
        shapes["attend_rho"] = (K,)
    return shapes


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors file's header; no tensor is read (and torch is not needed).

    Raises:
        CheckpointError: not a readable safetensors file.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(err).__name__}); retrain.") from None


def check_weight_shapes(folder: Path) -> LEAMConfig:
    """Compare model_config.json with the weights' header before anything is allocated: an edited config (absurd
    sizes) is one line instead of gigabytes.

    Returns:
        the model configuration.
    Raises:
        CheckpointError: the configuration is unreadable, or implies other tensors than the weights hold.
    """
    try:
        model_config = load_config(LEAMConfig, folder / MODEL_CONFIG_FILE)
    except ClinicodeError as err:
        raise CheckpointError(f"{folder}: {err}") from err
    held = weight_shapes(folder / WEIGHTS_FILE)
    implied = leam_weight_shapes(model_config)
    missing = sorted(set(implied) - set(held))
    unexpected = sorted(set(held) - set(implied))
    if missing or unexpected:
        raise CheckpointError(f"{folder / WEIGHTS_FILE}: missing tensors {missing}, unexpected {unexpected}; retrain.")
    for name, shape in implied.items():
        if held[name] != shape:
            raise CheckpointError(
                f"{folder}: {MODEL_CONFIG_FILE} implies tensor {name} of shape {shape}, but {WEIGHTS_FILE} holds "
                f"{held[name]}; the pieces disagree (edited or from different runs), retrain.")
    return model_config


class LEAMKind:
    """LEAM (Wang et al., ACL 2018, with clinicode's options): `train --model leam`, `--paper`, and the fused model's
    attention part."""

    name = "leam"
    summary = "label-embedding attention (with code evidence; --paper: the paper's)"
    files = KindFiles((WEIGHTS_FILE, MODEL_CONFIG_FILE, TOKENIZER_FILE))
    abilities = Abilities(explain=True, embed=True, score_ids=True)
    options_type = ModelOptions
    config_type = LEAMConfig   # the loop's: model_config.json's class, saved with --resume's state
    # `train --paper`: the options where Wang et al.'s model departs from the default, and one it never has
    paper_options = {**PAPER_MODEL, "code_attention": False}

    def save(self, folder: Path, model: Any, tokenizer: ClinicalTokenizer | None) -> None:
        from clinicode.models.leam.model import LEAM

        assert tokenizer is not None and isinstance(model, LEAM)
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        write_safetensors_atomic(folder / WEIGHTS_FILE, state, metadata={"format": "pt", "clinicode": "leam"})
        save_config(model.config, folder / MODEL_CONFIG_FILE)
        tokenizer.save(folder / TOKENIZER_FILE)

    def verify(self, folder: Path) -> None:
        check_weight_shapes(folder)  # header only: no torch, no allocation

    def load(self, folder: Path, *, labels: LabelSet, train_config: TrainConfig,
             device: Any) -> tuple[Any, ClinicalTokenizer]:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from clinicode.models.leam.model import LEAM

        model_config = check_weight_shapes(folder)  # before anything is built or allocated
        tokenizer = ClinicalTokenizer.load(folder / TOKENIZER_FILE)
        if model_config.n_labels != len(labels):
            raise CheckpointError(
                f"{folder}: labels.json lists {len(labels)} codes but the model has {model_config.n_labels} outputs; "
                "the pieces come from different runs, retrain with `clinicode train`."
            )
        if model_config.vocab_size != tokenizer.vocab_size:
            raise CheckpointError(
                f"{folder}: tokenizer.json has {tokenizer.vocab_size} words but the model has "
                f"{model_config.vocab_size} embedding rows; the pieces come from different runs, retrain with "
                "`clinicode train`."
            )
        if tokenizer.max_len != train_config.max_len:  # both written by one `train`; the tokenizer truncates
            raise CheckpointError(
                f"{folder}: tokenizer.json truncates notes at {tokenizer.max_len} tokens but "
                "train_config.json says max_len "
                f"{train_config.max_len}; the pieces come from different runs, retrain with `clinicode train`."
            )
        try:
            state = load_file(str(folder / WEIGHTS_FILE), device="cpu")
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{folder / WEIGHTS_FILE}: not a readable safetensors file ({err}); "
                                  "retrain.") from err
        model = LEAM(model_config)
        expected = model.state_dict()
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        if missing or unexpected:
            raise CheckpointError(f"{folder / WEIGHTS_FILE}: missing tensors {missing}, unexpected {unexpected}; "
                                  "retrain.")
        for k, v in state.items():
            if v.shape != expected[k].shape:
                raise CheckpointError(
                    f"{folder / WEIGHTS_FILE}: tensor {k} has shape {tuple(v.shape)}, model_config.json implies "
                    f"{tuple(expected[k].shape)}; retrain."
                )
        model.load_state_dict(state)
        model.to(device).eval()
        return model, tokenizer

    def card(self, model: Any) -> dict[str, Any]:
        return {"model_config": asdict(model.config)}

    def display_name(self, model_config: Mapping[str, Any]) -> str:
        """"LEAM + evidence" (clinicode's default: code evidence), "LEAM, attention per code" (`code_attention`),
        "LEAM (paper)" (Wang et al.'s model exactly, `train --paper` or a run from before the default changed) or
        "LEAM (variant)" (none of these)."""
        if model_config.get("code_attention"):
            return "LEAM, attention per code" + (" + evidence" if model_config.get("code_evidence") else "")
        if model_config.get("code_evidence"):
            return "LEAM + evidence"
        return "LEAM (paper)" if is_paper_model(dict(model_config)) else "LEAM (variant)"

    def scorer(self, checkpoint: Any, *, device: Any, batch_size: int, memory_mb: int) -> LEAMScorer:
        from clinicode.models.leam.scorer import LEAMScorer

        return LEAMScorer(checkpoint.model, checkpoint.tokenizer, max_len=checkpoint.max_len, device=device,
                          batch_size=batch_size, memory_mb=memory_mb)

    @property
    def loop_model(self) -> LEAMKind:
        """What the epoch loop trains: LEAM itself (its answers below)."""
        return self

    def fit(self, data: TrainingData, options: ModelOptions, *, loop: Loop) -> Fitted:
        """LEAM trained by the epoch loop over the run's notes, its best-on-dev weights."""
        return loop(self, options)

    # What the epoch loop asks (`clinicode.models.fitting.LoopModel`).
    def model_config(self, options: ModelOptions, *, vocab_size: int, n_labels: int, multilabel: bool) -> LEAMConfig:
        return options.leam_config(vocab_size=vocab_size, n_labels=n_labels, multilabel=multilabel)

    def build(self, model_config: LEAMConfig) -> Any:
        from clinicode.models.leam.model import LEAM

        return LEAM(model_config)

    def vector_dim(self, model_config: LEAMConfig) -> int:
        return model_config.embed_dim

    def start_from(self, model: Any, words: np.ndarray, codes: np.ndarray) -> None:
        import torch

        with torch.no_grad():
            model.word_emb.weight.copy_(torch.from_numpy(words))
            model.label_emb.copy_(torch.from_numpy(codes))

    def memory_plan(self, model_config: LEAMConfig, *, batch_size: int, max_len: int, budget_mb: int, device: str,
                    training: bool, fast: bool = True) -> MemoryPlan:
        from clinicode.models.leam.memory import plan

        return plan(model_config, batch_size=batch_size, max_len=max_len, budget_mb=budget_mb, device=device,
                    training=training, fast=fast)

    def forward(self, model: Any, ids: Any, mask: Any, *, plan: MemoryPlan, targets: Any = None) -> Any:
        """[B, K] logits; in training with `code_sample` (multi-label), a `SampledLogits` of the codes in play."""
        cfg = model.config
        if targets is None or not (cfg.code_attention and cfg.code_sample and cfg.multilabel) or not model.training:
            return model(ids, mask, block=plan.block, order=plan.order).logits
        from clinicode.models.leam.model import SampledLogits, sample_codes

        codes, weight = sample_codes(targets, cfg.code_sample)
        return SampledLogits(model(ids, mask, block=plan.block, order=plan.order, codes=codes).logits, codes, weight)

    def loss(self, model: Any, logits: Any, y: Any, *, pos_weight: Any, known: Any = None) -> tuple[Any, Any]:
        if not isinstance(logits, tuple):
            return model.loss(logits.float(), y, pos_weight=pos_weight, weight=known)
        codes = logits.codes                                                          # a SampledLogits
        return model.loss(logits.logits.float(), y[:, codes], pos_weight=None if pos_weight is None else
                          pos_weight[codes], weight=logits.weight if known is None else logits.weight * known[:, codes])

    def after_step(self, model: Any) -> None:
        model.constrain()

    def epoch_stats(self, model: Any) -> dict[str, float]:
        return model.window_stats()

    def load_weights(self, folder: Path, model: Any, *, new_code_words: Sequence[Sequence[int]] = ()) -> None:
        """FOLDER's weights into MODEL. A MODEL with more codes than FOLDER's (a `review retrain` whose coders added
        codes: they come after the checkpoint's) keeps the checkpoint's rows for its codes; each new code starts as a
        rare code would: its vector the mean of its title's word vectors (NEW_CODE_WORDS: the token ids of each new
        code's title, in order; none: a random start), no weight on the attended note, the lowest bias of the old."""
        import torch
        from safetensors.torch import load_file

        held = load_file(str(folder / WEIGHTS_FILE))
        own = model.state_dict()
        k_old = held["label_emb"].shape[0]
        k_new = own["label_emb"].shape[0]
        if k_new > k_old:
            for name, t in list(held.items()):
                mine = own[name]
                if t.shape != mine.shape and t.shape[0] == k_old and mine.shape[0] == k_new and \
                        t.shape[1:] == mine.shape[1:]:
                    grown = mine.clone()
                    grown[:k_old] = t
                    if name.endswith("weight") and name != "label_emb":
                        grown[k_old:] = 0.0          # the head's rows: nothing learnt of the new codes yet
                    elif name.endswith("bias"):
                        grown[k_old:] = t.min()      # a new code starts as unlikely as the rarest old one
                    held[name] = grown
            emb = held["word_emb.weight"]
            for i, ids in enumerate(new_code_words):
                ids = [j for j in ids if 0 < j < emb.shape[0]]
                if ids and k_old + i < k_new:
                    held["label_emb"][k_old + i] = emb[torch.tensor(ids)].mean(dim=0)
        model.load_state_dict(held)


KIND = LEAMKind()
