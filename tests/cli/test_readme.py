"""The README and docs stay true: every `clinicode` command and option they show exists, every relative link
resolves, and the README's Python example runs."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from clinicode.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
SUB_APPS = {"review"}  # command groups: `clinicode review queue ...`


def _commands(path: Path = README):
    text = path.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    joined = "\n".join(blocks).replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("clinicode "):
            yield line


def test_readme_cli_commands_and_options_exist():
    runner = CliRunner()
    seen = 0
    for line in _commands():
        words = line.split()
        command = " ".join(words[1:3] if words[1] in SUB_APPS else words[1:2])  # `review queue` is one command
        res = runner.invoke(app, [*command.split(), "--help"], terminal_width=200)
        assert res.exit_code == 0, f"README shows unknown command: {line}"
        for opt in re.findall(r"--[a-z][a-z0-9-]*", line):
            assert opt in res.output, f"README shows {opt} which `clinicode {command}` does not have"
        seen += 1
    assert seen >= 8


def test_readme_quickstart_is_two_make_targets():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    targets = [line.split()[1] for line in quick.strip().splitlines()]
    assert targets == ["demo", "test"]
    makefile = (README.parent / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_run_all_runs_every_benchmark_script():
    """benchmarks/run_all.py regenerates BENCHMARKS.md: it must list every bench_*.py (bench_app.py was missed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    listed = {s for s, _, _ in run_all.SCRIPTS}
    assert listed == {p.name for p in (ROOT / "benchmarks").glob("bench_*.py")}


def test_run_all_skips_a_missing_script_with_a_message(monkeypatch, capsys):
    """A benchmark script missing from the checkout is skipped by name; the others still run and the exit is 0."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    ran = []
    monkeypatch.setattr(run_all, "SCRIPTS", [("bench_gone.py", [], []), ("bench_app.py", ["--x"], ["--y"])])
    monkeypatch.setattr(run_all.subprocess, "run", lambda cmd: ran.append(cmd) or SimpleNamespace(returncode=0))
    monkeypatch.setattr(run_all.sys, "argv", ["run_all.py"])
    assert run_all.main() == 0
    assert [c[1:] for c in ran] == [[str(ROOT / "benchmarks" / "bench_app.py"), "--x"]]
    assert "skipped bench_gone.py: not found" in capsys.readouterr().err


def test_the_readme_python_example_runs(tiny_run, capsys):
    """The README's Python block, with its run folder pointed at a real (tiny) run, runs and prints codes."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1 and '"runs/leam"' in blocks[0]
    exec(compile(blocks[0].replace('"runs/leam"', repr(str(tiny_run))), "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert len(out) >= 2 and out[-2].startswith("{") and out[-1].startswith("[")  # scores dict, evidence words
    assert len(eval(out[-1])) == 3


def test_every_docs_command_and_option_exists():
    runner = CliRunner()
    help_of: dict[str, str] = {}

    def options_of(command: str) -> str:
        if command not in help_of:
            res = runner.invoke(app, [*command.split(), "--help"], terminal_width=200)
            assert res.exit_code == 0, f"unknown command {command!r}"
            help_of[command] = res.output
        return help_of[command]

    seen = 0
    for doc in DOCS:
        for line in _commands(doc):
            words = line.split()[1:]
            root = [w for w in words[: next((i for i, w in enumerate(words) if not w.startswith("-")), len(words))]]
            rest = words[len(root):]
            for opt in root:  # options before the command belong to `clinicode` itself (--verbose, --version)
                assert opt in options_of(""), f"{doc.name}: `clinicode` has no {opt} ({line})"
            if rest:
                n = 2 if rest[0] in SUB_APPS and len(rest) > 1 else 1  # `review queue` is one command
                command = " ".join(rest[:n])
                for opt in re.findall(r"--[a-z][a-z0-9-]*", " ".join(rest[n:])):
                    assert opt in options_of(command), \
                        f"{doc.name} shows {opt} which `clinicode {command}` does not have"
            seen += 1
    assert seen >= 20


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.name} -> {target}")
    assert broken == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_in_the_docs_names_a_heading():
    broken = []
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            page = (doc.parent / target) if target else doc
            if page.suffix != ".md" or not page.is_file():
                continue
            text = page.read_text(encoding="utf-8")
            headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
            if anchor not in headings:
                broken.append(f"{doc.name} -> {target}#{anchor}")
    assert broken == []


def test_the_code_map_names_every_module_in_its_contract_layer():
    """Each module and package of clinicode/ has a row in the code map (docs/architecture.md), in the layer the import
    contract gives it (pyproject.toml), so the map cannot drift from the code."""
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    contract = {m.strip().removeprefix("clinicode."): i + 1 for i, row in enumerate(layers)
                for m in re.split(r"[|:]", row)}  # "|" joins independent siblings, ":" siblings that may import
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    text = text.split("## Code map", 1)[1].split("\n\n", 2)[2].split("\n## ", 1)[0]  # the map's table, not later ones
    readme: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| Layer") or line.startswith("|---"):
            continue
        layer, names = line.split("|")[1:3]
        for name in re.findall(r"`([a-z_0-9]+)/?`", names):
            readme[name] = int(layer.split()[0])
    modules = {p.stem for p in (ROOT / "clinicode").glob("*.py") if not p.stem.startswith("__")}  # not __main__
    modules |= {p.name for p in (ROOT / "clinicode").iterdir() if (p / "__init__.py").is_file()}
    assert modules == set(readme), (sorted(modules - set(readme)), sorted(set(readme) - modules))
    assert {m: readme[m] for m in contract} == contract


def test_the_readme_stays_a_front_page():
    """The README is the front page (what clinicode is, how to start, where each topic lives): at most 200 lines, the
    rest in docs/."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readme_commands_run_on_a_fresh_clone():
    """Every folder a README command reads (--data, --mimic-dir, --checkpoint, --a, --b) is one an earlier README
    command wrote (--out), and no command reaches outside the repository (#43: `../shared/data/mtsamples` was one):
    a fresh clone runs them top to bottom."""
    written: set[str] = set()
    seen = 0
    for line in _commands():
        assert "../" not in line, f"README reaches outside the repository: {line}"
        opts = dict(re.findall(r"(--[a-z-]+)\s+([^\s-][^\s]*)", line))
        for opt in ("--data", "--mimic-dir", "--checkpoint", "--a", "--b"):
            if opt in opts:
                assert opts[opt] in written, f"README reads {opts[opt]} before any command writes it: {line}"
                seen += 1
        if "--out" in opts:
            written.add(opts["--out"])
    assert seen >= 8


def test_the_one_line_descriptions_name_the_default_model_as_the_readme_does():
    """`clinicode --help`, the fused kind's summary (`train --help`), serve's API description and pyproject.toml's
    describe the default, fused model (LEAM, tf-idf logistic regression, title match, mentions), not LEAM alone."""
    pytest.importorskip("fastapi")
    from clinicode.models import MODEL_KINDS
    from clinicode.serve import create_app

    described = {
        "clinicode --help": CliRunner().invoke(app, ["--help"], terminal_width=400).output,
        "the fused kind's summary": MODEL_KINDS["fused"].summary,
        "serve's API description": create_app().description,
        "pyproject.toml": re.search(r'^description = "(.*)"$', (ROOT / "pyproject.toml").read_text(encoding="utf-8"),
                                    flags=re.M).group(1),
    }
    for where, text in described.items():
        flat = " ".join(text.split())
        assert "with LEAM" not in flat and "(LEAM)" not in flat, where
        assert all(part in flat for part in ("LEAM", "title match", "mentions")), (where, flat)
        assert "tf-idf logistic regression" in flat or "tfidf-lr" in flat, (where, flat)
