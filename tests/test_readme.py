"""The README's commands stay true: every `clinicode` command and option it shows exists."""

import re
from pathlib import Path

from typer.testing import CliRunner

from clinicode.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _commands():
    text = README.read_text(encoding="utf-8")
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
        command = words[1]
        res = runner.invoke(app, [command, "--help"], terminal_width=200)
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
