"""Save and load self-contained checkpoint folders (safetensors + JSON, never a pickle), every file hashed.

A checkpoint holds all `predict` and the app need: weights, options, labels, tokenizer, threshold, metrics, manifest."""

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
from clinicode.artifacts import make_manifest
from clinicode.codes.systems import CodeSystem, infer_code_system
from clinicode.config import TrainConfig, config_to_dict, load_config, save_config, saved_config
from clinicode.constants import (
    CHECKPOINT_DIR,
    LABELS_FILE,
    MANIFEST_FILE,
    METRICS_DEV_FILE,
    METRICS_TEST_FILE,
    MODEL_CONFIG_FILE,
    RUN_DATA_DIR,
    SCHEMA_VERSION,
    THRESHOLD_FILE,
    TRAIN_CONFIG_FILE,
)
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError, ClinicodeError
from clinicode.files import atomic_dir, manifest_kind, read_json, sha256_file, write_json_atomic
from clinicode.models import MODEL_KINDS, ModelKind, model_kind
from clinicode.tokenizer import ClinicalTokenizer

if TYPE_CHECKING:  # torch and the model load only with the weights: verifying a checkpoint needs neither
    import torch

log = logging.getLogger(__name__)
CHECKPOINT_KIND = "checkpoint"
# Each code's number of training notes (covered by the manifest's hashes), so every reader can slice rare/frequent.
# Checkpoints from before it have none: `Checkpoint.train_counts` is then None ("no training counts").
TRAIN_COUNTS_FILE = "train_counts.json"
# The files every checkpoint holds, beside those its model kind owns (`ModelKind.files.required`).
_COMMON_FILES = (LABELS_FILE, THRESHOLD_FILE, TRAIN_CONFIG_FILE)
# The files a checkpoint may hold and loading reads when it does (older checkpoints may lack them), beside its kind's
# (`ModelKind.files.optional`): one that is there must be hashed in the manifest, else it is refused unread.
_OPTIONAL_FILES = (METRICS_DEV_FILE, METRICS_TEST_FILE, TRAIN_COUNTS_FILE)


@dataclass
class Checkpoint:
    """A loaded checkpoint. `model` is what its model kind loads (a LEAM in eval mode, a TfidfLR ...), by `kind`."""

    path: Path
    kind: str                                   # the model kind's name (`clinicode.models.MODEL_KINDS`)
    model: Any
    labels: LabelSet
    threshold: float                            # dev-tuned global threshold
    train_config: TrainConfig
    manifest: dict[str, Any]
    tokenizer: ClinicalTokenizer | None = None  # for a kind that tokenizes (LEAM)
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
    def model_kind(self) -> ModelKind:
        """The registered kind of `model` (what it can do, how it scores)."""
        return model_kind(self.kind, folder=self.path)


def model_options_as_saved(data: dict[str, Any], *, kind: object) -> dict[str, Any]:
    """A run's model_config.json read back as its model kind (KIND: the manifest's "model") reads it, through the
    `config_type` of what its epoch loop trains (`ModelKind.loop_model`): every field, those it predates with the value
    of its time (so runs from before a field existed compare equal to runs that spell the same model out); as given
    for a kind fitted whole.

    Raises:
        ConfigError: not a model configuration of the kind.
        CheckpointError: KIND is not a registered kind.
    """
    looped = model_kind(kind).loop_model
    config_type = looped.config_type if looped is not None else None
    return config_to_dict(saved_config(config_type, data, source=MODEL_CONFIG_FILE)) if config_type else dict(data)


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
        kind: a registered model kind's name (`clinicode.models.MODEL_KINDS`): "leam" (model is a LEAM; tokenizer
            required), "tfidf-lr" (model is a TfidfLR) ...
        threshold: the dev-tuned global threshold.
        extra: more manifest fields (data description, seed, epoch ...).
        train_counts: each label's number of training notes, in label order (written to train_counts.json).
    Returns:
        out_dir.
    """
    import torch

    plugin = model_kind(kind)  # an unknown kind fails before anything is written
    with atomic_dir(out_dir, replaces=lambda d: manifest_kind(d) == CHECKPOINT_KIND) as tmp:
        plugin.save(tmp, model, tokenizer)
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
    _check_inside(folder, MANIFEST_FILE)
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
    plugin = MODEL_KINDS.get(kind) if isinstance(kind, str) else None  # an unknown kind: load_checkpoint says so
    optional = (*_OPTIONAL_FILES, *(plugin.files.optional if plugin else ()))
    for name in (*files, *optional):  # before anything reads or hashes them
        _check_inside(folder, name)
    # Every piece that loading reads must be covered by a hash, or a swapped file would load unchecked.
    unlisted = [n for n in ((*plugin.files.required, *_COMMON_FILES) if plugin else ()) if n not in files]
    if unlisted:
        raise CheckpointError(
            f"{folder}: manifest.json lists no hash for {', '.join(unlisted)}; the checkpoint is damaged "
            "or was edited, retrain it."
        )
    # A file loading reads when it is there, there without a hash: planted in the folder, or the manifest edited.
    planted = [n for n in optional if n not in files and ((folder / n).exists() or (folder / n).is_symlink())]
    if planted:
        raise CheckpointError(
            f"{folder}: holds {', '.join(planted)} but manifest.json lists no hash for it; it was added or the "
            "manifest edited after saving (loading would read it unchecked): remove it or restore the checkpoint "
            "(nothing was read)."
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
    if plugin is not None:
        try:
            plugin.verify(folder)  # headers only: no torch, no allocation
        except CheckpointError as err:  # a newer clinicode's config may hold keys this one does not know
            raise CheckpointError(upgrade or str(err)) from err
    return folder, manifest


def _check_inside(folder: Path, name: Any) -> None:
    """NAME, as manifest.json lists it, must be a file of FOLDER itself: a plain file name (no folder part, no '..',
    not absolute) that is no symbolic link leading out of the folder. Checked before anything opens it, so an edited
    manifest cannot make loading read (and hash) /etc/passwd or another user's file.

    Raises:
        CheckpointError: naming the entry and why it is refused.
    """
    shown = ascii(name)[:80] if isinstance(name, str) else type(name).__name__
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name
            or os.path.isabs(name)):
        raise CheckpointError(f"{folder}: manifest.json lists {shown}, expected the name of a file inside the "
                              "checkpoint folder (no folder part, no '..'); the manifest was edited or damaged, "
                              "restore the checkpoint or retrain (nothing was read).")
    p = folder / name
    if p.is_symlink():
        target = os.path.realpath(p)
        if not target.startswith(os.path.realpath(folder) + os.sep):
            raise CheckpointError(f"{folder}: {shown} is a symbolic link leading outside the checkpoint folder; a "
                                  "checkpoint's files are its own: copy the file in instead of linking it, or restore "
                                  "the checkpoint (nothing was read).")


def _read_threshold(folder: Path) -> float:
    """The tuned threshold from threshold.json: {"threshold": a number from 0 to 1, ...}.

    Raises:
        CheckpointError: one line naming the file, what it holds and what it should.
    """
    raw = read_json(folder / THRESHOLD_FILE)
    value = raw.get("threshold") if isinstance(raw, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        got = ("no 'threshold' key" if isinstance(raw, dict) and "threshold" not in raw
               else f"threshold {str(value)[:40]}" if isinstance(raw, dict) else f"a JSON {type(raw).__name__}")
        raise CheckpointError(f"{folder / THRESHOLD_FILE}: holds {got}, expected {{\"threshold\": a probability from 0 "
                              "to 1}; the checkpoint was edited or damaged, restore it or retrain.")
    return float(value)


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
    folder, manifest = verify_checkpoint(path, verify=verify)
    kind = manifest.get("model")
    plugin = model_kind(kind, folder=folder)
    try:
        labels = LabelSet.load(folder / LABELS_FILE)
        system = labels.code_system or _inferred_code_system(folder, labels.codes)
        labels = LabelSet(labels.codes, system.display_titles(labels.codes, labels.descriptions),  # what readers show
                          system)
        train_config = load_config(TrainConfig, folder / TRAIN_CONFIG_FILE)
        threshold = _read_threshold(folder)
        listed = manifest["files"]  # verify_checkpoint refused such a file there without a hash
        metrics_dev = read_json(folder / METRICS_DEV_FILE) if METRICS_DEV_FILE in listed else {}
        metrics_test = read_json(folder / METRICS_TEST_FILE) if METRICS_TEST_FILE in listed else {}
    except CheckpointError:
        raise
    except (ClinicodeError, OSError, KeyError, ValueError, TypeError) as err:
        # A newer clinicode's files may hold keys this one does not know: say so rather than name the key.
        raise CheckpointError(newer_writer(folder, manifest) or f"{folder}: {err}") from err
    # The kind's own files and their agreement with labels and options (its header checks ran in verify_checkpoint,
    # where a newer clinicode's model config says "upgrade").
    model, tokenizer = plugin.load(folder, labels=labels, train_config=train_config, device=device)
    train_counts = read_train_counts(folder, manifest, labels)  # after the kind's checks, which name the cause
    return Checkpoint(folder, kind, model, labels, threshold, train_config, manifest, tokenizer, metrics_dev,
                      metrics_test,
                      train_counts)


__all__ = ["Checkpoint", "TRAIN_COUNTS_FILE", "read_train_counts", "load_checkpoint", "save_checkpoint",
           "verify_checkpoint", "resolve_checkpoint_dir", "test_data_dir", "model_options_as_saved"]
