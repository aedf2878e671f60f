"""The environment a result was produced in, as one short hash recorded in every manifest (`environment_hash`).

A venv installed exactly from ci/requirements-lock.txt gives `lock_hash` of that file: a run says if it was tested."""

from __future__ import annotations

import functools
import hashlib
import platform
import re
from pathlib import Path

# Not part of the pinned set: the package itself, the installer, and torch's per-machine build.
_EXCLUDED = re.compile(r"^(clinicode|pip|setuptools|wheel|torch|triton|nvidia-.*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _digest(lines: list[str], python: str) -> str:
    text = "\n".join(sorted(set(lines))) + f"\npython=={python}\n"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def requirement_lines(lines: list[str]) -> list[str]:
    """`name==version` lines (normalised) of a pip-freeze style text, without comments and excluded packages."""
    out = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        name, _, version = line.partition("==")
        name = _norm(name.split("[", 1)[0].strip())
        if not _EXCLUDED.match(name):
            out.append(f"{name}=={version.strip()}")
    return out


@functools.lru_cache(maxsize=1)
def environment_hash() -> str:
    """16 hex characters: the installed third-party distributions (name==version, names normalised, sorted) and this
    Python's version. Torch (and its CUDA companions) is left out: its build is chosen per machine (`TORCH_CONSTRAINT`)
    and manifests record `torch_version` beside it."""
    from importlib.metadata import distributions

    lines = []
    for d in distributions():
        meta = d.metadata   # parsed from its METADATA file at each access (`version` too): once a distribution
        if meta["Name"]:
            lines.append(f"{meta['Name']}=={meta['Version']}")
    return _digest(requirement_lines(lines), platform.python_version())


def lock_hash(path: Path, python: str | None = None) -> str:
    """The hash `environment_hash` gives in a venv installed exactly from the lock file PATH (this Python by default):
    `ci/requirements-lock.txt`, what `make` installs, so a run's manifest says whether it ran on the tested set."""
    return _digest(requirement_lines(Path(path).read_text(encoding="utf-8").splitlines()),
                   python or platform.python_version())
