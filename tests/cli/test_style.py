"""STYLE's lint holds: `ruff check .` (pyproject.toml, [tool.ruff]: pyflakes, pycodestyle, import order, 120 columns)
runs as part of the test suite, and the check is shown to fail on a line it must refuse."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                                reason="ruff is not installed (it comes with the dev extra: pip install -e '.[dev]')")


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_the_tree_is_ruff_clean():
    res = _ruff(".")
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


def test_a_long_line_and_an_unused_import_are_caught(tmp_path):
    """The check is not vacuous: the project's own settings refuse a 121-character line and an unused import."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\nX = '" + "a" * 115 + "'\n")
    res = _ruff("--config", str(ROOT / "pyproject.toml"), str(bad), cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "E501" in res.stdout and "F401" in res.stdout, res.stdout
