"""Frozen per-stage configuration dataclasses with range checks and strict JSON I/O (unknown keys rejected).

The one home of every default but a model kind's own; CLI options stay None unless given (--help shows these)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from clinicode.errors import ConfigError
from clinicode.files import write_json_atomic

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Training options; saved as train_config.json beside the weights."""

    model: str = "fused"            # a model kind's name (clinicode.models.MODEL_KINDS): "fused" (LEAM and tfidf-lr
                                    # fused per code, #41), "leam" or "tfidf-lr"
    epochs: int = 200               # a cap only: patience ends runs (small sets: 15-60 epochs; a cap of 50 ended
                                    # runs still improving)
    batch_size: int = 16
    lr: float = 1e-2                # tuned on hoc/mtsamples/cmc2007 dev (BENCHMARKS.md); was 2e-3
    optimizer: str = "adamw"        # "adamw" (decoupled weight decay) or "adam" (weight_decay as L2 in the gradient)
    weight_decay: float = 0.3       # AdamW decay; the main regulariser of the trainable word vectors on small sets
    decay_scope: str = "embeddings" # parameters decayed: "all", "matrices" (not biases or W1), "embeddings" (word
                                    # and label vectors)
    pos_weight: float = 0.25        # label imbalance: BCE positives weighted (n_neg / n_pos) ** pos_weight (0 = off)
    max_len: int = 2500             # tokens kept per note (CAML: first 2,500)
    min_doc_freq: int = 3           # vocabulary: words in >= 3 training notes
    embeddings: str = "w2v"         # "w2v" (trained on the train split), "random", or a path to a text vector file
    w2v_epochs: int = 0             # 0 = auto: ceil(30M / training tokens) clamped to [5, 30]; CAML used 5
    patience: int = 5               # stop once more than this many epochs in a row bring no dev micro-F1 gain
    lr_schedule: str = "plateau"    # "plateau": lr *= lr_decay after every lr_patience epochs without a dev gain;
                                    # or "constant"
    lr_decay: float = 0.5           # plateau: the factor applied to the learning rate at each decay
    lr_patience: int = 2            # plateau: epochs in a row without a dev gain before each decay (1 decays on noise)
    patience_steps: int = 500       # patience is never shorter than this many optimiser steps (on ~500 training notes
                                    # an epoch is ~25 steps: 5 epochs stopped seeds on a slow climb, issue 35); 0 = off
    lr_patience_steps: int = 200    # the same floor for lr_patience; 0 = off
    ema_decay: float = 0.99         # weight moving average (decay warmed up as (1+t)/(10+t)) for dev scoring and the
                                    # checkpoint; 0 = off
    seed: int = 1337
    device: str = "auto"
    top_k: int | None = None
    single_label: bool | None = None  # None: decided from the data (every note has exactly one label)
    eval_batch_size: int = 64
    memory_mb: int = 2048           # scratch memory of one batch, training and dev scoring (models/leam/memory.py)

    def patience_epochs(self, steps_per_epoch: int) -> tuple[int, int]:
        """(patience, lr_patience) in epochs for epochs of STEPS_PER_EPOCH optimiser steps: the epoch counts, raised
        to cover at least patience_steps and lr_patience_steps steps (MIMIC-sized sets keep the epoch counts; a set of
        a few hundred notes waits as many steps as they do)."""
        steps = max(1, steps_per_epoch)
        return (max(self.patience, -(-self.patience_steps // steps)),
                max(self.lr_patience, -(-self.lr_patience_steps // steps)))

    def __post_init__(self) -> None:
        if self.memory_mb < 64:
            raise ConfigError(f"--memory-budget must be >= 64 (MB), got {self.memory_mb}.")
        # Which names exist is the model-kind registry's (`clinicode.models.train_kind`), above this layer: the CLI
        # and the start of every run (`training.run.open_run`) ask it, before anything is written.
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"--model must name a model kind, got {self.model!r}.")
        for name in ("epochs", "batch_size", "max_len", "min_doc_freq", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if self.w2v_epochs < 0:
            raise ConfigError(f"--w2v-epochs must be >= 1, or 0 for automatic, got {self.w2v_epochs}.")
        if self.optimizer not in ("adamw", "adam"):
            raise ConfigError(f"--optimizer must be 'adamw' or 'adam', got {self.optimizer!r}.")
        if self.decay_scope not in ("all", "matrices", "embeddings"):
            raise ConfigError(f"--decay-scope must be 'all', 'matrices' or 'embeddings', got {self.decay_scope!r}.")
        if not 0.0 <= self.weight_decay <= 10.0:
            raise ConfigError(f"--weight-decay must be in [0, 10], got {self.weight_decay}.")
        if not 0.0 <= self.pos_weight <= 1.0:
            raise ConfigError(f"--pos-weight must be in [0, 1] (an exponent on n_neg / n_pos), got {self.pos_weight}.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"--ema-decay must be in [0, 1), got {self.ema_decay}.")
        if self.lr_schedule not in ("plateau", "constant"):
            raise ConfigError(f"--lr-schedule must be 'plateau' or 'constant', got {self.lr_schedule!r}.")
        if not 0.0 < self.lr_decay < 1.0:
            raise ConfigError(f"--lr-decay must be in (0, 1) (the factor applied at each decay), got {self.lr_decay}.")
        if self.lr_patience < 1:
            raise ConfigError(f"--lr-patience must be >= 1, got {self.lr_patience}.")
        if self.patience < 0:
            raise ConfigError(f"--patience must be >= 0, got {self.patience}.")
        if self.patience_steps < 0 or self.lr_patience_steps < 0:
            raise ConfigError(f"--patience-steps and --lr-patience-steps must be >= 0 (0 = off), got "
                              f"{self.patience_steps} and {self.lr_patience_steps}.")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}.")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"--device must be auto, cpu or cuda, got {self.device!r}.")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(f"--top-k must be >= 1, got {self.top_k}.")


LABEL_SETS = ("caml50", "top50", "frequent", "full")


@dataclass(frozen=True, kw_only=True)
class PrepareConfig:
    """How `prepare` turns MIMIC tables into a dataset; saved in the dataset's manifest.

    `label_set` None means the release's usual one: caml50 for MIMIC-III, top50 for MIMIC-IV.
    """

    label_set: str | None = None    # caml50 | top50 (a splits folder's top50_codes.txt, else the 50 most frequent)
                                    # | frequent | full
    top_k: int = 50                 # K for label_set "frequent"
    min_code_count: int = 1         # label_set "full": keep codes seen in at least this many admissions with a note
    icd_version: int | None = None  # MIMIC-IV: 9 or 10 (required); MIMIC-III is ICD-9
    chunksize: int = 20_000         # MIMIC-III note rows parsed at a time (bounds memory)
    note_chunksize: int = 5_000     # MIMIC-IV discharge rows parsed at a time (~10 KB each)

    def __post_init__(self) -> None:
        if self.label_set is not None and self.label_set not in LABEL_SETS:
            raise ConfigError(f"--label-set must be one of {', '.join(LABEL_SETS)}, got {self.label_set!r}.")
        for name in ("top_k", "min_code_count", "chunksize", "note_chunksize"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}.")
        if self.icd_version not in (None, 9, 10):
            raise ConfigError(f"--icd-version must be 9 or 10, got {self.icd_version!r}.")


# ------------------------------------------------------------------ the user's predict options (one rule, three faces)
# Where a value comes from: "cli" (command-line flags: --top-k 5), "query" (a request's query string: ?top_k=5) or
# "json" (a request's JSON body: "top_k": 5). Flags and query values arrive as text and are read as numbers; a JSON
# value must already be one (a JSON string "5" is refused, as a JSON number 5.0 is for an integer option).
SOURCES = ("cli", "query", "json")
_KINDS = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object",
          type(None): "null"}


def kind_of(v: Any) -> str:
    """A JSON value's kind for a message ('a string', 'an object', 'null', ...), never its content."""
    return _KINDS.get(type(v), type(v).__name__)


def _name(option: str, source: str) -> str:
    return f"--{option.replace('_', '-')}" if source == "cli" else option


def _example(option: str, value: str, source: str) -> str:
    return {"cli": f"{_name(option, source)} {value}", "query": f"?{option}={value}",
            "json": f'"{option}": {value}'}[source]


def _as_number(v: Any, kind: type, source: str) -> Any:
    """A flag's or query's text read as KIND; anything else (or unreadable text) as given, for the check to refuse."""
    if source != "json" and isinstance(v, str):
        try:
            return kind(v)
        except ValueError:
            return v
    return v


def _shown(v: Any, source: str) -> str:
    """The value as given, for a message: numbers as they are, flag and query text cut to 20 characters, other JSON
    values by their kind only (a request's content is never echoed)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(v)
    if isinstance(v, str) and source != "json":
        return repr(v[:20])
    return kind_of(v)


def check_top_k(v: Any, *, source: str = "cli") -> int | None:
    """THE rule for `top_k`: a positive integer, or "all" (every code: None). 0 is refused on every face.

    Raises:
        ConfigError: one line naming the option as its face spells it, the value given and an example.
    """
    if v == "all":
        return None
    n = _as_number(v, int, source)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        every = "'all'" if source == "cli" else '"all"'
        raise ConfigError(f"{_name('top_k', source)} must be a positive integer or {every}, got {_shown(n, source)}; "
                          f"e.g. {_example('top_k', '5', source)}, or "
                          f"{_example('top_k', every if source == 'json' else 'all', source)} for every code's score.")
    return n


def check_explain(v: Any, *, max_explain: int | None = None, source: str = "cli") -> int:
    """THE rule for `explain`: an integer from 0 (to MAX_EXPLAIN when given).

    Raises:
        ConfigError: as `check_top_k`.
    """
    n = _as_number(v, int, source)
    if (isinstance(n, bool) or not isinstance(n, int) or n < 0
            or (max_explain is not None and n > max_explain)):
        allowed = ">= 0" if max_explain is None else f"from 0 to {max_explain}"
        raise ConfigError(f"{_name('explain', source)} must be an integer {allowed}, got {_shown(n, source)}; "
                          f"e.g. {_example('explain', '3', source)} for three evidence spans per code.")
    return n


def check_threshold(v: Any, *, source: str = "cli") -> float:
    """THE rule for a decision threshold: a number in [0, 1] (NaN refused); returned as a float.

    Raises:
        ConfigError: as `check_top_k`.
    """
    x = _as_number(v, float, source)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0:
        raise ConfigError(f"{_name('threshold', source)} must be a number in [0, 1], got {_shown(x, source)}; leave "
                          "it out to use the checkpoint's tuned threshold.")
    return float(x)


@dataclass(frozen=True, kw_only=True)
class PredictConfig:
    """What `predict` (CLI, API, app, clusters) writes per note."""

    top_k: int | None = 10          # codes listed in `scores`, highest first; None: every code
    explain: int = 0                # with N > 0: the N highest-attention spans and up to N evidence spans per predicted
                                    # code (its nearest words, docs/predict.md)
    threshold: float | None = None  # codes scoring above it are predicted; None: the checkpoint's tuned threshold
    batch_size: int = 64            # notes per forward pass
    memory_mb: int = 2048           # scratch memory of one batch and the stored word-code table (models/leam/memory.py)

    def __post_init__(self) -> None:
        if self.memory_mb < 64:
            raise ConfigError(f"--memory-budget must be >= 64 (MB), got {self.memory_mb}.")
        if self.top_k is not None:
            check_top_k(self.top_k)
        check_explain(self.explain)
        if self.threshold is not None:
            check_threshold(self.threshold)
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}.")

    @classmethod
    def from_user(cls, *, top_k: Any = None, explain: Any = None, threshold: Any = None,
                  max_explain: int | None = None, source: str = "cli", **rest: Any) -> PredictConfig:
        """The options a user gave, checked and normalised once, for every face (`clinicode predict` and `review
        queue`, `clinicode serve`'s body and query string): the one place their rules live.

        Args:
            top_k: a positive integer, or "all" (every code's score: top_k None); None: not given (the default).
                0 is refused on every face (the service always refused it).
            explain: an integer from 0 (to max_explain when given); None: not given (the default).
            threshold: a number in [0, 1]; None: the checkpoint's tuned threshold.
            max_explain: the most `explain` may be (the service's per-request bound); None: no bound.
            source: "cli", "query" or "json" (see SOURCES): how the options are named in messages and whether text
                is read as numbers.
            **rest: other PredictConfig fields (batch_size, memory_mb), checked as the constructor checks them.
        Returns:
            The PredictConfig, with top_k None for "all" and threshold a float (or None).
        Raises:
            ConfigError: the first bad option, in one line: as given, what is expected, and an example.
        """
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}.")
        given: dict[str, Any] = {}
        if top_k is not None:
            given["top_k"] = check_top_k(top_k, source=source)
        if explain is not None:
            given["explain"] = check_explain(explain, max_explain=max_explain, source=source)
        if threshold is not None:
            given["threshold"] = check_threshold(threshold, source=source)
        return cls(**given, **rest)


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """The paired bootstrap of `compare`."""

    n_boot: int = 2000              # resamples of the notes
    seed: int = 0                   # seed of the resampling


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Synthetic MIMIC-shaped data of `demo-data`."""

    n_admissions: int = 2000
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """`clinicode serve`: per-request limits (over them: 413) and the micro-batching bounds (docs/serve.md)."""

    max_notes: int = 64             # notes per request
    max_text_chars: int = 100_000   # characters per note (about 15,000 words; LEAM keeps the first max_len tokens)
    max_body_mb: float = 8.0        # request body
    max_explain: int = 20           # `explain` per request
    batch_notes: int = 32           # notes of concurrent requests scored together at most (a larger request: alone)
    batch_wait_ms: float = 5.0      # how long the scorer waits for more notes once it has some
    max_pending: int = 64           # requests being read, tokenised or scored at once; more: 503 with Retry-After
    read_timeout: float = 30.0      # seconds for a request's head and body to arrive (slow clients: dropped / 408)
    idle_timeout: float = 5.0       # seconds a keep-alive connection may stay idle between requests
    write_timeout: float = 30.0     # seconds an answer may wait for its client to read it (a stalled reader: dropped)
    grace: float = 10.0             # seconds a SIGTERM/SIGINT gives admitted requests; those not scored by then: 503
    allow_hosts: tuple[str, ...] = ()    # Host names accepted beside loopback and the bound address ("*": any)
    allow_origins: tuple[str, ...] = ()  # browser Origins accepted beside the server's own ("*": any)

    def __post_init__(self) -> None:
        for name in ("max_notes", "max_text_chars", "batch_notes", "max_pending"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if not 0 < self.max_body_mb <= 1024:  # inf passed `> 0` and then failed every request
            raise ConfigError(f"--max-body-mb must be in (0, 1024] megabytes, got {self.max_body_mb}.")
        if not 0 <= self.batch_wait_ms <= 1000:
            raise ConfigError(f"--batch-wait-ms must be in [0, 1000], got {self.batch_wait_ms}.")
        for name in ("read_timeout", "idle_timeout", "write_timeout", "grace"):
            if not 0 < getattr(self, name) <= 3600:
                raise ConfigError(f"--{name.replace('_', '-')} must be in (0, 3600] seconds, "
                                  f"got {getattr(self, name)}.")
        for origin in self.allow_origins:  # one no browser's Origin header can equal would allow nothing, silently
            why = _origin_problem(origin)
            if why:
                raise ConfigError(f"--allow-origin {str(origin)[:80]!r}: {why}; give an origin as browsers send it, "
                                  "scheme://host[:port] such as https://coding.example.org, or '*' for any.")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 2**20)


def _origin_problem(origin: object) -> str | None:
    """Why ORIGIN is no value a browser's Origin header can hold (RFC 6454: scheme, host and a port other than the
    scheme's own, lower-cased by the Gate), or None for such a value or '*'."""
    from urllib.parse import urlsplit

    if not isinstance(origin, str):
        return "not a string"
    value = origin.strip().rstrip("/")
    if value == "*":
        return None
    if value.lower() == "null":
        return "'null' is what sandboxed and file:// pages send, any of them: it cannot name one site"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "its port is not a number from 0 to 65535"
    if parts.scheme.lower() not in ("http", "https") or "://" not in value:
        return "not an http:// or https:// origin"
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return "it names no host (or has user information)"
    if parts.path or parts.query or parts.fragment:
        return "an origin has no path, query or fragment"
    if port == {"http": 80, "https": 443}[parts.scheme.lower()]:
        return f"browsers leave out the default port {port}"
    return None


PREPARE, PREDICT, COMPARE, DEMO = PrepareConfig(), PredictConfig(), CompareConfig(), DemoConfig()


def default_of(cls: type, name: str) -> Any:
    """The default of field NAME of config class CLS (for --help texts)."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_from_dict(cls: type[T], data: dict[str, Any], *, source: str = "config") -> T:
    """Build `cls` from a dict, naming any unknown key (e.g. a typo) instead of ignoring it."""
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in {source}; known keys: {', '.join(sorted(known))}.")
    try:
        return cls(**data)
    except TypeError as err:
        raise ConfigError(f"{source}: {err}.") from err


def save_config(cfg: Any, path: Path) -> None:
    write_json_atomic(path, config_to_dict(cfg))


# A configuration saved with a run or checkpoint (train_config.json, model_config.json, state/state.json) before a
# field existed meant the behaviour of its time, not today's default: runs before the plateau schedule kept the
# learning rate constant. A model kind's configuration says its own (a class attribute `saved_absent`: LEAM's).
SAVED_ABSENT: dict[type, dict[str, Any]] = {TrainConfig: {"lr_schedule": "constant", "patience_steps": 0,
                                                          "lr_patience_steps": 0}}


# Fields that left a configuration for a model kind's options: a file saved before holds them. The fused model's four
# left TrainConfig (#53): its kind reads them back from a checkpoint's train_config.json, and resuming a run started
# before refuses (`clinicode.training.state`).
SAVED_MOVED: dict[type, tuple[str, ...]] = {TrainConfig: ("fused_epochs", "mentions", "fit_on", "terminology")}


def moved_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of DATA (CLS as saved) that have since left CLS (`SAVED_MOVED`), by name."""
    return {k: data[k] for k in SAVED_MOVED.get(cls, ()) if k in data}


def saved_config(cls: type[T], data: dict[str, Any], *, source: str) -> T:
    """`cls` as saved with a run or checkpoint; fields the saved file predates take their value of that time, and
    fields that have since left it (`SAVED_MOVED`) are their new owner's to read."""
    absent = SAVED_ABSENT.get(cls) or getattr(cls, "saved_absent", {})
    moved = SAVED_MOVED.get(cls, ())
    return config_from_dict(cls, {**absent, **{k: v for k, v in data.items() if k not in moved}}, source=source)


def load_config(cls: type[T], path: Path) -> T:
    """A configuration file saved with a run or checkpoint (see `saved_config`), with one-line errors."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: cannot read configuration ({err}).") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}.")
    return saved_config(cls, data, source=str(Path(path).name))
