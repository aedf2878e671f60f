"""LEAM's options: `ModelOptions` (what a user chooses, `train`'s model flags), `LEAMConfig` (those plus what the data
decides, saved as model_config.json) and the paper's model (`PAPER_OPTIONS`, `is_paper_model`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from clinicode.config import config_from_dict
from clinicode.errors import ConfigError


def _check_model_options(o: Any) -> None:
    """The checks of the options a user chooses (`ModelOptions` and `LEAMConfig` share them, and their messages)."""
    if o.embed_dim < 1 or o.hidden_dim < 1:
        raise ConfigError(f"LEAMConfig: embed_dim and hidden_dim must be >= 1, got {o.embed_dim}, {o.hidden_dim}.")
    if o.radius < 0:
        raise ConfigError(f"LEAMConfig.radius (r) must be >= 0, got {o.radius}; the window is 2r+1 tokens.")
    if not 0.0 <= o.dropout < 1.0:
        raise ConfigError(f"LEAMConfig.dropout must be in [0, 1), got {o.dropout}.")
    if o.label_reg_codes < 1:
        raise ConfigError(f"LEAMConfig.label_reg_codes must be >= 1, got {o.label_reg_codes}.")
    if o.compat not in ("cosine", "linear"):
        raise ConfigError(f"LEAMConfig.compat must be 'cosine' or 'linear', got {o.compat!r}.")
    if not 0.0 < o.phrase_init <= 100.0:
        raise ConfigError(f"LEAMConfig.phrase_init must be in (0, 100], got {o.phrase_init}.")
    if o.code_sample < 0:
        raise ConfigError(f"LEAMConfig.code_sample must be >= 0 (0: every code), got {o.code_sample}.")


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """The LEAM options a user chooses (`train`'s model flags); the data adds vocab_size, n_labels and multilabel.

    Saved as given (run.json's `model_options`, checked by --resume); the model's full set is LEAMConfig.
    """

    embed_dim: int = 100            # CAML's CBOW vectors (docs/domain.md section 6)
    radius: int = 10                # r: the phrase window over G spans 2r+1 positions
    hidden_dim: int = 1000          # MLP head (paper's reference code: 300); 1000 tuned on dev (decay_scope embeddings)
    dropout: float = 0.5
    label_reg_weight: float = 1.0   # lambda of the label-embedding regulariser (paper: 1)
    label_reg_codes: int = 256      # the regulariser averages over all codes up to this many, else a random this-many
    compat: Literal["cosine", "linear"] = "cosine"  # "cosine" (the paper's model) or "linear" (its ablation: no
                                                    # phrase window)
    phrase_init: float = 1.0        # initial sum of W1: every tap starts at phrase_init / (2r+1) (1.0 = a local mean)
    code_evidence: bool = True      # not the paper: each code's logit also gets a_k * max_l window(G)_lk
    window_nonneg: bool = True      # not the paper: W1's taps kept >= 0 after each step (a flipped window read each
                                    # code's worst phrase and collapsed seeds; issue 35, docs/accuracy-tuning.md)
    code_attention: bool = False    # not the paper: one attention per code (softmax over positions of t_k u_kl, no
                                    # max over codes), each code's attended words through the head, its own logit
    code_sample: int = 64           # read with code_attention only: each training batch scores its own codes plus
                                    # this many others drawn at random, weighted to stand for the rest (0: every
                                    # code; 64 kept its gain at a fifth of the cost, docs/accuracy-tuning.md, round 21)

    def __post_init__(self) -> None:
        _check_model_options(self)

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None) -> ModelOptions:
        """The options from a dict of some of them (the rest default), naming an unknown key."""
        return config_from_dict(cls, dict(options or {}), source="model options")

    def leam_config(self, *, vocab_size: int, n_labels: int, multilabel: bool = True) -> LEAMConfig:
        """The model's constructor arguments: these options plus what the data decides."""
        return LEAMConfig(vocab_size=vocab_size, n_labels=n_labels, multilabel=multilabel, **dataclasses.asdict(self))


@dataclass(frozen=True, kw_only=True)
class LEAMConfig:
    """The model's constructor arguments (`ModelOptions` + what the data decides); saved as model_config.json."""

    vocab_size: int
    n_labels: int
    embed_dim: int = ModelOptions.embed_dim
    radius: int = ModelOptions.radius
    hidden_dim: int = ModelOptions.hidden_dim
    dropout: float = ModelOptions.dropout
    label_reg_weight: float = ModelOptions.label_reg_weight
    label_reg_codes: int = ModelOptions.label_reg_codes
    compat: Literal["cosine", "linear"] = ModelOptions.compat
    multilabel: bool = True         # sigmoid + BCE; False: softmax + CE (one label per note)
    phrase_init: float = ModelOptions.phrase_init
    code_evidence: bool = ModelOptions.code_evidence
    window_nonneg: bool = ModelOptions.window_nonneg
    code_attention: bool = ModelOptions.code_attention
    code_sample: int = ModelOptions.code_sample
    # a model_config.json from before a field existed meant the behaviour of its time (`config.saved_config`): models
    # from before code evidence was the default were the paper's (set below, with PAPER_MODEL)
    saved_absent: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        if self.vocab_size < 3:
            raise ConfigError(f"LEAMConfig.vocab_size must be >= 3 (PAD, UNK and a word), got {self.vocab_size}.")
        if self.n_labels < 1:
            raise ConfigError(f"LEAMConfig.n_labels must be >= 1, got {self.n_labels}.")
        _check_model_options(self)

    @property
    def options(self) -> ModelOptions:
        """The options a user chose, without what the data decided."""
        return ModelOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ModelOptions)})


# The model options that make LEAM exactly Wang et al.'s (ACL 2018) model: `train --paper`, and every pipeline recipe
# that reproduces a published LEAM row pins them. The default differs (code evidence) because it codes better on
# ICD-coded data at 50 to thousands of codes (docs/accuracy-tuning.md, round 10).
PAPER_OPTIONS = ModelOptions(code_evidence=False, window_nonneg=False)
# The options where the paper's model departs from the default, as a dict (saved-config defaults, `**` in tests).
PAPER_MODEL: dict[str, Any] = {k: getattr(PAPER_OPTIONS, k) for k in ("code_evidence", "window_nonneg")}


def is_paper_model(model_config: dict[str, Any]) -> bool:
    """True when saved model options (model_config.json as read back) describe the paper's model."""
    return all(model_config.get(k, v) == v for k, v in PAPER_MODEL.items()) and not model_config.get("code_attention")


LEAMConfig.saved_absent = dict(PAPER_MODEL)
