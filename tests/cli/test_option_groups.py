"""The CLI package (#45): one module a command, options as typed dataclasses (`option_groups`), and the house sizes
(modules under 600 lines, functions at most 80, module docstrings at most 3 lines)."""

import ast
import dataclasses
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import pytest
import typer
from typer.testing import CliRunner

from clinicode.cli import app
from clinicode.cli.options import option_groups

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class _Where:
    out: Annotated[Path, typer.Option(help="Folder to write.")]
    name: Annotated[Optional[str], typer.Option(help="A name.")] = None


@dataclass(frozen=True, kw_only=True)
class _How:
    fast: Annotated[bool, typer.Option(help="Go fast.")] = False
    n: Annotated[int, typer.Option("--count", "-n", help="How many.")] = 3


def _toy(seen: list) -> typer.Typer:
    toy = typer.Typer(add_completion=False)

    @toy.command()
    @option_groups
    def cmd(where: _Where, how: _How,
            verbose: Annotated[bool, typer.Option(help="Talk.")] = False) -> None:
        seen.append((where, how, verbose))

    return toy


def test_a_command_gets_its_groups_filled_and_typer_sees_their_fields_in_order():
    seen: list = []
    toy = _toy(seen)
    res = CliRunner().invoke(toy, ["--out", "x", "-n", "5", "--verbose"])
    assert res.exit_code == 0, res.output
    assert seen == [(_Where(out=Path("x"), name=None), _How(fast=False, n=5), True)]
    helptext = CliRunner().invoke(toy, ["--help"], env={"COLUMNS": "200"}).output
    rows = re.findall(r"^│[ *]{1,5}(--[a-z0-9-]+)", helptext, flags=re.M)
    assert rows == ["--out", "--name", "--fast", "--count", "--verbose", "--help"]
    missing = CliRunner().invoke(toy, ["-n", "5"])
    assert missing.exit_code == 2 and "--out" in missing.output and not seen[1:]


def test_an_option_named_by_two_groups_is_refused_when_the_command_is_defined():
    @dataclass(frozen=True, kw_only=True)
    class Again:
        fast: bool = True

    def cmd(how: _How, again: Again) -> None:
        pass

    with pytest.raises(TypeError, match="repeats"):
        option_groups(cmd)


def test_train_takes_four_option_groups_listed_in_its_help_in_field_order():
    from clinicode.cli.train import FitOptions, ModelFlags, TrainData, TrainSchedule, train_cli

    groups = (TrainData, TrainSchedule, ModelFlags, FitOptions)
    names = [f.name for g in groups for f in dataclasses.fields(g)] + ["resume", "progress"]
    assert list(inspect.signature(train_cli).parameters) == names
    assert len(names) > 40 and all(len(dataclasses.fields(g)) <= 16 for g in groups)
    helptext = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"}).output
    rows = re.findall(r"^│[ *]{1,5}(--[a-z0-9-]+)", helptext, flags=re.M)  # each option row's first name, top to bottom
    assert rows == [f"--{n.replace('_', '-')}" for n in names] + ["--help"]


def test_train_passes_the_grouped_options_on_to_the_loop(tmp_path, monkeypatch):
    import clinicode.train

    got: dict = {}

    def fake_train(**kw):
        got.update(kw)
        return {}

    monkeypatch.setattr(clinicode.train, "train", fake_train)
    res = CliRunner().invoke(app, ["train", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--model",
                                   "leam", "--epochs", "2", "--embed-dim", "7", "--label-reg", "0.5", "--lr", "0.01",
                                   "--descriptions", str(tmp_path / "d.tsv"), "--no-progress"])
    assert res.exit_code == 0, res.output
    cfg = got["config"]
    assert (cfg.model, cfg.epochs, cfg.lr) == ("leam", 2, 0.01)
    assert got["model_options"]["embed_dim"] == 7 and got["model_options"]["label_reg_weight"] == 0.5
    assert got["data_dir"] == tmp_path and got["descriptions_path"] == tmp_path / "d.tsv"
    assert got["progress"] is False and got["resume"] is False


def test_each_command_lives_in_its_own_module():
    from clinicode.cli.review import review_app

    modules = {c.name: c.callback.__module__ for c in app.registered_commands}
    assert modules == {n: f"clinicode.cli.{n.replace('-', '_')}" for n in
                       ("prepare", "demo-data", "train", "evaluate", "compare", "predict", "serve")}
    assert {c.callback.__module__ for c in review_app.registered_commands} <= {
        f"clinicode.cli.review.{m}" for m in ("queue", "audit", "export", "stats")}


def test_the_cli_modules_keep_the_house_sizes():
    too_long = []
    for path in sorted((ROOT / "clinicode" / "cli").rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
        where = path.relative_to(ROOT)
        if len(src.splitlines()) >= 600:
            too_long.append(f"{where}: {len(src.splitlines())} lines")
        if len((ast.get_docstring(tree, clean=False) or "").splitlines()) > 3:
            too_long.append(f"{where}: module docstring over 3 lines")
        too_long += [f"{where}:{f.lineno} {f.name}: {f.end_lineno - f.lineno + 1} lines" for f in ast.walk(tree)
                     if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 80]
    assert too_long == []
