"""Layer contracts (pyproject.toml, [tool.importlinter]) hold: `lint-imports` runs as part of the test suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_layer_contract_is_kept():
    res = _lint()
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    n_contracts = (ROOT / "pyproject.toml").read_text(encoding="utf-8").count("[[tool.importlinter.contracts]]")
    assert f"{n_contracts} kept, 0 broken" in res.stdout
    # the rule the model kinds rest on (#45): train and training reach a model only through the kind
    assert "the training loop imports no model" in res.stdout
    assert "metrics imports no code system KEPT" in res.stdout        # #45: the title floor takes titles, not codes
    # review without a circle (#45): the store imports no service, and services import the store, not one another
    assert "the review store imports no review service" in res.stdout
    assert "review services never import one another" in res.stdout
    # the app imports only the serving surface (tests/app/test_app.py), which reaches no training or preparation (#53)
    assert "the serving surface (all the app imports) never imports training" in res.stdout
    # LEAM's memory planning lives with LEAM (#53): its scorer owns predict's plan, the loop asks the LoopModel
    assert "only LEAM's folder imports LEAM's memory plan KEPT" in res.stdout


def test_a_broken_contract_is_caught(tmp_path):
    """The checker is not vacuous: a contract the code breaks (predict does import checkpoint) fails."""
    cfg = tmp_path / "broken.toml"
    cfg.write_text('[tool.importlinter]\nroot_package = "clinicode"\n\n[[tool.importlinter.contracts]]\n'
                   'name = "deliberately broken"\ntype = "forbidden"\nsource_modules = ["clinicode.predict"]\n'
                   'forbidden_modules = ["clinicode.checkpoint"]\n')
    res = _lint("--config", str(cfg))
    assert res.returncode == 1 and "deliberately broken BROKEN" in res.stdout
