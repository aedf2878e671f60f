"""Save and load self-contained checkpoint folders (safetensors + JSON); every piece is hashed and cross-checked.

Loading never unpickles. A checkpoint holds everything `predict` and the app need: weights, model config,
labels with descriptions, tokenizer, threshold, training config, metrics and a manifest with hashes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from clinicode import __version__
from clinicode.artifacts import (
    atomic_dir,
    make_manifest,
    manifest_kind,
    read_json,
    sha256_file,
    write_json_atomic,
    write_safetensors_atomic,
)
from clinicode.codes.systems import CodeSystem, infer_code_system
from clinicode.config import (  # is_paper_model: re-exported, the app reads a card's model through it
    LEAMConfig,
    TrainConfig,
    config_from_dict,
    config_to_dict,
    is_paper_model,
    load_config,
    save_config,
    saved_config,
)
from clinicode.constants import (  # noqa: F401  (artefact names are re-exported: the app takes them from here)
    CHECKPOINT_DIR,
    HISTORY_FILE,
    LABELS_FILE,
    MANIFEST_FILE,
    METRICS_DEV_FILE,
    METRICS_TEST_FILE,
    MODEL_CONFIG_FILE,
    RUN_DATA_DIR,
    SCHEMA_VERSION,
    SCORES_TEST_FILE,
    THRESHOLD_FILE,
    TOKENIZER_FILE,
    TRAIN_CONFIG_FILE,
    WEIGHTS_FILE,
)
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError, ClinicodeError
from clinicode.tokenizer import ClinicalTokenizer

if TYPE_CHECKING:  # torch and the model load only with the weights: verifying a checkpoint needs neither
    import torch

log = logging.getLogger(__name__)
CHECKPOINT_KIND = "checkpoint"
# Each code's number of training notes (covered by the manifest's hashes), so every reader can slice rare/frequent.
# Checkpoints from before it have none: `Checkpoint.train_counts` is then None ("no training counts").
TRAIN_COUNTS_FILE = "train_counts.json"
BASELINE_FILES = ("tfidf_lr.safetensors", "tfidf_lr.json")
_COMMON_FILES = (LABELS_FILE, THRESHOLD_FILE, TRAIN_CONFIG_FILE)
_REQUIRED_FILES = {
    "leam": (WEIGHTS_FILE, MODEL_CONFIG_FILE, TOKENIZER_FILE, *_COMMON_FILES),
    "tfidf-lr": (*BASELINE_FILES, *_COMMON_FILES),
}


@dataclass
class Checkpoint:
    """A loaded checkpoint. `model` is a LEAM (eval mode) or a TfidfLR, by `kind`."""

    path: Path
    kind: str                                   # "leam" or "tfidf-lr"
    model: Any
    labels: LabelSet
    threshold: float                            # dev-tuned global threshold
    train_config: TrainConfig
    manifest: dict[str, Any]
    tokenizer: ClinicalTokenizer | None = None  # LEAM only
    metrics_dev: dict[str, Any] = field(default_factory=dict)
    metrics_test: dict[str, Any] = field(default_factory=dict)
    # code -> training notes; None for checkpoints from before they were kept
    train_counts: dict[str, int] | None = None

    @property
    def max_len(self) -> int:
        return self.train_config.max_len

    @property
    def manifest_sha256(self) -> str:
        """SHA-256 of the manifest, which hashes every file of the checkpoint: which model scored something (predict's
        resume record, the service's /health, the review queue's suggestions)."""
        return hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode("utf-8")).hexdigest()

    @property
    def single_label(self) -> bool:
        """True for a model with one label per note (softmax scores): its prediction is the top code."""
        if self.kind == "leam":
            return not self.model.config.multilabel
        return bool(getattr(getattr(self.model, "config", None), "softmax", False))


def model_options_as_saved(data: dict[str, Any]) -> dict[str, Any]:
    """A run's model_config.json read back as LEAMConfig reads it: every field, those it predates with the value of
    its time (so runs from before a field existed compare equal to runs that spell the same model out).

    Raises:
        ConfigError: not a model configuration.
    """
    return config_to_dict(saved_config(LEAMConfig, data, source=MODEL_CONFIG_FILE))


def test_data_dir(run: Path, manifest: dict[str, Any]) -> Path | None:
    """The prepared dataset a run was trained on, if it still holds a test split (manifest's path, else RUN/data).

    The manifest's data.path is not covered by its hashes, so a folder outside the run is used only when its split
    files and the checkpoint's labels reproduce the manifest's data.fingerprint: an edited path cannot make the app
    show another folder's notes.
    """
    cands = []
    data = manifest.get("data") or {}
    if isinstance(data, dict) and data.get("path"):
        p = Path(str(data["path"]))
        p = p if p.is_absolute() else Path(run) / p
        inside = os.path.realpath(p).startswith(os.path.realpath(run) + os.sep)
        if inside or _data_fingerprint(p, Path(run) / CHECKPOINT_DIR / LABELS_FILE) == data.get("fingerprint"):
            cands.append(p)
    cands.append(Path(run) / RUN_DATA_DIR)
    for p in cands:
        if any((p / f"test.{ext}").is_file() for ext in ("parquet", "jsonl", "csv")):
            return p
    return None


def _data_fingerprint(data_dir: Path, labels_file: Path) -> str | None:
    """What `train` records as the manifest's data.fingerprint, for DATA_DIR and the labels in LABELS_FILE (cached
    while the files' sizes and modification times stay the same)."""
    try:
        stats = tuple((q.name, q.stat().st_size,
                       q.stat().st_mtime_ns) for q in sorted(Path(data_dir).iterdir()) if q.is_file())
        lst = labels_file.stat()
    except OSError:
        return None
    return _data_fingerprint_cached(str(data_dir), str(labels_file), stats, (lst.st_size, lst.st_mtime_ns))


@functools.lru_cache(maxsize=32)
def _data_fingerprint_cached(data_dir: str, labels_file: str, _stats: tuple, _labels_stat: tuple) -> str | None:
    from clinicode.data.prepared import dataset_fingerprint

    try:
        labels = LabelSet.load(Path(labels_file)).to_json()
        return hashlib.sha256((dataset_fingerprint(Path(data_dir)) + json.dumps(labels)).encode()).hexdigest()
    except (ClinicodeError, OSError, ValueError):
        return None


def leam_weight_shapes(config: LEAMConfig) -> dict[str, tuple[int, ...]]:
    """The tensor names and shapes a LEAM of CONFIG holds (`LEAM(config).state_dict()`), computed without torch."""
    P, K, H, V, r = config.embed_dim, config.n_labels, config.hidden_dim, config.vocab_size, config.radius
    shapes = {"word_emb.weight": (V, P), "label_emb": (K, P), "phrase_w": (2 * r + 1,), "phrase_b": (K,),
              "head.1.weight": (H, P), "head.1.bias": (H,), "head.4.weight": (K, H), "head.4.bias": (K,)}
    if config.code_evidence:
        shapes["evidence_rho"] = (K,)
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


def _release(version: object) -> tuple[int, ...]:
    """(0, 2, 0) for "0.2.0" or "0.2.0.dev1": the leading numeric parts of a clinicode version, () when none."""
    parts = []
    for piece in str(version or "").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def newer_writer(folder: Path, manifest: dict[str, Any]) -> str | None:
    """The one-line upgrade message when a newer clinicode (release or checkpoint schema) wrote this folder,
    else None."""
    wrote, schema = manifest.get("clinicode_version"), manifest.get("schema_version")
    newer_schema = isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION
    if not newer_schema and _release(wrote) <= _release(__version__):
        return None
    return (f"{folder}: written by clinicode {wrote or '?'} (checkpoint schema {schema}), newer than this clinicode "
            f"{__version__} (schema {SCHEMA_VERSION}); upgrade clinicode (pip install -U clinicode) to read it.")


def resolve_checkpoint_dir(path: Path) -> Path:
    """Accept a run folder (with checkpoint/ inside) or the checkpoint folder itself."""
    path = Path(path)
    if (path / CHECKPOINT_DIR / MANIFEST_FILE).is_file():
        return path / CHECKPOINT_DIR
    if (path / MANIFEST_FILE).is_file():
        return path
    if not path.exists():
        raise CheckpointError(f"--checkpoint {path}: no such folder; give a run folder written by `clinicode train`.")
    raise CheckpointError(
        f"--checkpoint {path}: no {CHECKPOINT_DIR}/{MANIFEST_FILE} inside; give a run folder "
        "written by `clinicode train` "
        "(an interrupted run has no checkpoint until its first epoch ends)."
    )


def save_checkpoint(
    out_dir: Path,
    *,
    kind: str,
    model: Any,
    labels: LabelSet,
    threshold: float,
    train_config: TrainConfig,
    tokenizer: ClinicalTokenizer | None = None,
    metrics_dev: dict[str, Any] | None = None,
    metrics_test: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    train_counts: Sequence[int] | None = None,
) -> Path:
    """Write a checkpoint folder atomically (a crash leaves the previous one intact).

    Args:
        out_dir: the checkpoint folder to (re)create.
        kind: "leam" (model is a LEAM; tokenizer required) or "tfidf-lr" (model is a TfidfLR).
        threshold: the dev-tuned global threshold.
        extra: more manifest fields (data description, seed, epoch ...).
        train_counts: each label's number of training notes, in label order (written to train_counts.json).
    Returns:
        out_dir.
    """
    import torch

    from clinicode.model import LEAM

    with atomic_dir(out_dir, replaces=lambda d: manifest_kind(d) == CHECKPOINT_KIND) as tmp:
        if kind == "leam":
            assert tokenizer is not None and isinstance(model, LEAM)
            state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
            write_safetensors_atomic(tmp / WEIGHTS_FILE, state, metadata={"format": "pt", "clinicode": "leam"})
            save_config(model.config, tmp / MODEL_CONFIG_FILE)
            tokenizer.save(tmp / TOKENIZER_FILE)
        elif kind == "tfidf-lr":
            model.save(tmp)
        else:
            raise CheckpointError(f"unknown model kind {kind!r}; expected 'leam' or 'tfidf-lr'.")
        labels.save(tmp / LABELS_FILE)
        write_json_atomic(tmp / THRESHOLD_FILE, {"threshold": float(threshold), "default": 0.5,
                                                 "tuned_on": "dev micro-F1"})
        save_config(train_config, tmp / TRAIN_CONFIG_FILE)
        write_json_atomic(tmp / METRICS_DEV_FILE, metrics_dev or {})
        write_json_atomic(tmp / METRICS_TEST_FILE, metrics_test or {})
        if train_counts is not None:
            if len(train_counts) != len(labels):
                raise CheckpointError(f"{len(train_counts)} training counts for {len(labels)} labels; "
                                      "give one count per label.")
            write_json_atomic(tmp / TRAIN_COUNTS_FILE, {"counts": {c: int(n)
                                                                   for c, n in zip(labels.codes, train_counts)}})
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = make_manifest(CHECKPOINT_KIND, model=kind, n_labels=len(labels), torch_version=torch.__version__,
                                 files=files, **(extra or {}))
        write_json_atomic(tmp / MANIFEST_FILE, manifest)
    return Path(out_dir)


def verify_checkpoint(path: Path, *, verify: bool = True) -> tuple[Path, dict[str, Any]]:
    """Check a checkpoint folder without loading its weights (no torch): manifest, schema version, hashes.

    Args:
        path: a run folder or its checkpoint/ folder.
        verify: compare every file's SHA-256 with the manifest (False: only that the files exist).
    Returns:
        (the checkpoint folder, its manifest).
    Raises:
        CheckpointError: naming the piece that is missing, damaged or unlisted, and how to fix it.
    """
    folder = resolve_checkpoint_dir(path)
    try:
        manifest = read_json(folder / MANIFEST_FILE)
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder / MANIFEST_FILE}: unreadable ({err}); the "
                              "checkpoint is damaged, retrain it.") from err
    if not isinstance(manifest, dict) or manifest.get("kind") != CHECKPOINT_KIND:
        raise CheckpointError(f"{folder}: manifest.json does not describe a clinicode checkpoint.")
    version = manifest.get("schema_version")
    upgrade = newer_writer(folder, manifest)
    if upgrade and version != SCHEMA_VERSION:
        raise CheckpointError(upgrade)
    if version != SCHEMA_VERSION:
        raise CheckpointError(
            f"{folder}: checkpoint schema version {version} (written by clinicode "
            f"{manifest.get('clinicode_version', '?')}), "
            f"but clinicode {__version__} reads version {SCHEMA_VERSION}; retrain with this version or "
            "install the one that wrote it."
        )
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{folder}: manifest.json has no 'files' table of SHA-256 hashes; the "
                              "checkpoint is damaged, retrain it.")
    kind = manifest.get("model")
    # Every piece that loading reads must be covered by a hash, or a swapped file would load unchecked.
    unlisted = [n for n in _REQUIRED_FILES.get(kind, ()) if n not in files]
    if unlisted:
        raise CheckpointError(
            f"{folder}: manifest.json lists no hash for {', '.join(unlisted)}; the checkpoint is damaged "
            "or was edited, retrain it."
        )
    for name, digest in files.items():
        p = folder / name
        if not p.is_file():
            raise CheckpointError(f"{folder}: {name} is missing; the checkpoint is incomplete, retrain or restore it.")
        if verify and sha256_file(p) != digest:
            raise CheckpointError(
                f"{folder}: {name} does not match the hash in manifest.json (changed or damaged after saving); "
                "restore the original file or retrain."
            )
    if kind == "leam":
        try:
            check_weight_shapes(folder)  # header only: no torch, no allocation
        except CheckpointError as err:  # a newer clinicode's config may hold keys this one does not know
            raise CheckpointError(upgrade or str(err)) from err
    return folder, manifest


def read_train_counts(folder: Path, manifest: dict[str, Any], labels: LabelSet) -> dict[str, int] | None:
    """{code: training notes} from train_counts.json, or None when the checkpoint predates it (or lists no hash for it).

    Raises:
        CheckpointError: the file is there but does not give one non-negative count per label.
    """
    if TRAIN_COUNTS_FILE not in (manifest.get("files") or {}):
        return None  # an older checkpoint: readers say "no training counts"
    try:
        raw = read_json(folder / TRAIN_COUNTS_FILE)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{folder / TRAIN_COUNTS_FILE}: unreadable ({err}); the "
                              "checkpoint is damaged, retrain it.") from err
    counts = raw.get("counts") if isinstance(raw, dict) else None
    if (not isinstance(counts, dict) or set(counts) != set(labels.codes)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values())):
        raise CheckpointError(f"{folder / TRAIN_COUNTS_FILE}: expected one non-negative training count per code of "
                              f"labels.json ({len(labels)} codes); the checkpoint is damaged, retrain it.")
    return {c: int(counts[c]) for c in labels.codes}


def _inferred_code_system(folder: Path, codes: Sequence[str]) -> CodeSystem:
    """The code system of a checkpoint written before labels.json named it: inferred from its codes, as then."""
    system = infer_code_system(codes)
    log.info("%s: labels.json names no code system (an older checkpoint); its %d codes are taken as %s", folder,
             len(codes), system.name)
    return system


def load_checkpoint(path: Path, *, device: torch.device | str = "cpu", verify: bool = True) -> Checkpoint:
    """Load and validate a checkpoint folder.

    Checks the schema version, every file's SHA-256 against the manifest, and that weights, config, labels
    and tokenizer agree. Raises CheckpointError naming the piece that is wrong and how to fix it.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from clinicode.model import LEAM

    folder, manifest = verify_checkpoint(path, verify=verify)
    kind = manifest.get("model")
    try:
        labels = LabelSet.load(folder / LABELS_FILE)
        system = labels.code_system or _inferred_code_system(folder, labels.codes)
        labels = LabelSet(labels.codes, system.display_titles(labels.codes, labels.descriptions),  # what readers show
                          system)
        train_config = load_config(TrainConfig, folder / TRAIN_CONFIG_FILE)
        threshold = float(read_json(folder / THRESHOLD_FILE)["threshold"])
        metrics_dev = read_json(folder / METRICS_DEV_FILE) if (folder / METRICS_DEV_FILE).is_file() else {}
        metrics_test = read_json(folder / METRICS_TEST_FILE) if (folder / METRICS_TEST_FILE).is_file() else {}
    except CheckpointError:
        raise
    except (ClinicodeError, OSError, KeyError, ValueError, TypeError) as err:
        # A newer clinicode's files may hold keys this one does not know: say so rather than name the key.
        raise CheckpointError(newer_writer(folder, manifest) or f"{folder}: {err}") from err
    if not 0.0 <= threshold <= 1.0:  # also rejects NaN
        raise CheckpointError(f"{folder}: {THRESHOLD_FILE} holds threshold {threshold}, expected a "
                              "probability in [0, 1]; retrain.")

    if kind == "tfidf-lr":
        from clinicode.baseline import TfidfLR

        model = TfidfLR.load(folder)
        n_out = model.n_labels
        if n_out != len(labels):
            raise CheckpointError(f"{folder}: labels.json lists {len(labels)} codes but the baseline has "
                                  f"{n_out} outputs; retrain.")
        return Checkpoint(folder, kind, model, labels, threshold, train_config, manifest, None, metrics_dev,
                          metrics_test,
                          read_train_counts(folder, manifest, labels))
    if kind != "leam":
        raise CheckpointError(f"{folder}: unknown model kind {kind!r} in manifest.json; expected 'leam' or 'tfidf-lr'.")

    try:
        model_config = check_weight_shapes(folder)  # before anything is built or allocated
    except CheckpointError as err:
        raise CheckpointError(newer_writer(folder, manifest) or str(err)) from err
    tokenizer = ClinicalTokenizer.load(folder / TOKENIZER_FILE)
    if model_config.n_labels != len(labels):
        raise CheckpointError(
            f"{folder}: labels.json lists {len(labels)} codes but the model has {model_config.n_labels} outputs; "
            "the pieces come from different runs, retrain with `clinicode train`."
        )
    if model_config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(
            f"{folder}: tokenizer.json has {tokenizer.vocab_size} words but the model has {model_config.vocab_size} "
            "embedding rows; the pieces come from different runs, retrain with `clinicode train`."
        )
    if tokenizer.max_len != train_config.max_len:  # both are written by one `train`; the tokenizer is what truncates
        raise CheckpointError(
            f"{folder}: tokenizer.json truncates notes at {tokenizer.max_len} tokens but "
            "train_config.json says max_len "
            f"{train_config.max_len}; the pieces come from different runs, retrain with `clinicode train`."
        )
    try:
        state = load_file(str(folder / WEIGHTS_FILE), device="cpu")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{folder / WEIGHTS_FILE}: not a readable safetensors file ({err}); retrain.") from err
    model = LEAM(model_config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{folder / WEIGHTS_FILE}: missing tensors {missing}, unexpected {unexpected}; retrain.")
    for k, v in state.items():
        if v.shape != expected[k].shape:
            raise CheckpointError(
                f"{folder / WEIGHTS_FILE}: tensor {k} has shape {tuple(v.shape)}, model_config.json implies "
                f"{tuple(expected[k].shape)}; retrain."
            )
    train_counts = read_train_counts(folder, manifest, labels)  # after the label-count checks, which name the cause
    model.load_state_dict(state)
    model.to(device).eval()
    return Checkpoint(folder, kind, model, labels, threshold, train_config, manifest, tokenizer, metrics_dev,
                      metrics_test,
                      train_counts)


__all__ = ["Checkpoint", "TRAIN_COUNTS_FILE", "read_train_counts", "load_checkpoint", "save_checkpoint",
           "resolve_checkpoint_dir", "config_to_dict", "config_from_dict", "is_paper_model"]


def __getattr__(name: str) -> Any:
    """`read_split_codes` and `read_split_texts` are re-exported for the app, loaded on first use: they need pandas
    (a second or more of start-up), which scoring does not."""
    if name in ("read_split_codes", "read_split_texts"):
        from clinicode.data import prepared

        return getattr(prepared, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
