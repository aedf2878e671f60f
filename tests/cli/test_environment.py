"""The tested environment is pinned (ci/requirements-lock.txt, installed by `make`), and every manifest records the
hash of the environment that produced it, the same hash the lock file gives when the venv was installed from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from clinicode.environment import environment_hash, lock_hash, requirement_lines

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "ci" / "requirements-lock.txt"


def test_the_lock_pins_every_third_party_package_but_torch_and_the_package_stays_unpinned():
    lines = requirement_lines(LOCK.read_text().splitlines())
    names = {ln.split("==")[0] for ln in lines}
    assert {"numpy", "gensim", "scikit-learn", "tokenizers", "pandas", "streamlit"} <= names
    assert not names & {"torch", "clinicode", "pip"} and all(re.fullmatch(r"[a-z0-9-]+==\S+", ln) for ln in lines)
    deps = re.search(r"dependencies = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S).group(1)
    assert "==" not in deps and ">=" in deps  # `pip install clinicode` keeps its ranges


def test_make_ci_and_the_torch_pin_use_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert "LOCK ?= ci/requirements-lock.txt" in make and "-c $(LOCK)" in make
    install = make[make.index("$(VENV)/.installed:"):make.index("install: $(VENV)/.installed")]
    assert "$(LOCK)" in install.splitlines()[0] and "$(PIP_C)" in install  # reinstalled when the lock changes
    assert "\nlock:" in make and "pip freeze" in make
    assert (ROOT / "ci" / "constraints-cpu.txt").read_text().strip() == "torch==2.13.0"
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_this_venv_is_the_locked_one():
    """Fails when pyproject.toml gained or changed a dependency without `make lock` (or .venv predates the lock)."""
    assert environment_hash() == lock_hash(LOCK)


def test_every_manifest_records_the_environment(tiny_run, demo_data):
    for path in (tiny_run / "checkpoint" / "manifest.json", tiny_run / "run.json", demo_data / "manifest.json"):
        assert json.loads(path.read_text())["environment"] == environment_hash(), path


def test_the_hash_changes_with_a_package_version_or_python(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("# comment\nNumPy==2.0.0\nscikit_learn==1.5.0\ntorch==2.13.0\n")
    base = lock_hash(lock, "3.11.7")
    assert requirement_lines(lock.read_text().splitlines()) == ["numpy==2.0.0", "scikit-learn==1.5.0"]
    lock.write_text("numpy==2.0.1\nscikit-learn==1.5.0\n")
    assert lock_hash(lock, "3.11.7") != base
    lock.write_text("numpy==2.0.0\nscikit-learn==1.5.0\ntorch==2.14.0\n")  # torch's build is per machine
    assert lock_hash(lock, "3.11.7") == base and lock_hash(lock, "3.12.1") != base


def test_the_hash_reads_each_distribution_s_metadata_once(monkeypatch):
    """Each access to a distribution's `metadata` (and `version`) parses its METADATA file again; the hash, made once
    a process (0.1-1 s of it), asks once a distribution and is the hash of every name==version."""
    import importlib.metadata
    import platform

    from clinicode.environment import _digest

    installed = list(importlib.metadata.distributions())
    want = _digest(requirement_lines([f"{d.metadata['Name']}=={d.version}" for d in installed
                                      if d.metadata["Name"]]), platform.python_version())
    reads = []

    class Counted:
        def __init__(self, dist):
            self.dist = dist

        @property
        def metadata(self):
            reads.append(self)
            return self.dist.metadata

        @property
        def version(self):
            reads.append(self)
            return self.dist.version

    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [Counted(d) for d in installed])
    assert environment_hash.__wrapped__() == want
    assert len(reads) == len(installed)
