"""What clinicode's outputs say about themselves: the manifest every stage writes (kind, versions, environment, time),
which folders are training runs, and tensors as safetensors. Writing them is `clinicode.files`."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clinicode import __version__
from clinicode.constants import RUN_DATA_DIR, RUN_FILE, SCHEMA_VERSION
from clinicode.environment import environment_hash
from clinicode.files import manifest_kind, real_path, write_bytes_atomic


def make_manifest(kind: str, **fields: Any) -> dict[str, Any]:
    """A manifest dict with schema and package versions, creation time and any stage-specific fields."""
    return {
        "kind": kind,
        "schema_version": SCHEMA_VERSION,
        "clinicode_version": __version__,
        "environment": environment_hash(),  # installed packages + Python (clinicode.environment); see `make lock`
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


def write_safetensors_atomic(path: Path, tensors: dict[str, Any], *, metadata: dict[str, str] | None = None) -> None:
    """Write torch tensors as a safetensors file atomically, with the umask's normal file mode.

    `safetensors.torch.save_file` creates its file with mode 0600, which other users (the Docker image's non-root
    user, a shared run folder) cannot read; serialising to bytes and writing them here gives the usual 0644.
    """
    from safetensors.torch import save

    write_bytes_atomic(path, save(tensors, metadata=metadata))


# ------------------------------------------------------------------------------------------------ run folders
def is_run_folder(folder: Path) -> bool:
    """A folder written by `clinicode train`: run.json, (older runs) state/state.json or a checkpoint, or a run in
    the making that so far holds only its own prepared dataset in RUN/data."""
    folder = Path(folder)
    if manifest_kind(folder, RUN_FILE) == "run" or holds_training(folder):
        return True
    try:
        entries = [p.name for p in folder.iterdir() if not p.name.startswith(".")]
    except OSError:
        return False
    return entries == [RUN_DATA_DIR] and manifest_kind(folder / RUN_DATA_DIR) == "prepared-dataset"


def holds_training(folder: Path) -> bool:
    """A run folder in which training has made progress: a state (an epoch ended) or a checkpoint.

    A run.json alone (a run that failed or was killed before its first epoch ended) is not: a plain re-run may start
    over there, as it would in a new folder.
    """
    folder = Path(folder)
    return (folder / "state" / "state.json").is_file() or manifest_kind(folder / "checkpoint") == "checkpoint"


def is_run_data(run: Path, data_dir: Path | None) -> bool:
    """True when DATA_DIR is RUN's own prepared dataset (RUN/data), which may sit inside the run folder."""
    return data_dir is not None and real_path(Path(data_dir)) == real_path(Path(run) / RUN_DATA_DIR)

