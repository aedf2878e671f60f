"""CLI data commands: demo-data -> prepare on synthetic tables; bad input gives exit 1 and one stderr line."""

import pytest

typer_testing = pytest.importorskip("typer.testing")

from clinicode.cli import app  # noqa: E402


def _runner():
    try:
        return typer_testing.CliRunner(mix_stderr=False)
    except TypeError:  # newer Click keeps stderr separate by default
        return typer_testing.CliRunner()


def test_demo_data_then_prepare(tmp_path):
    runner = _runner()
    res = runner.invoke(app, ["demo-data", "--out", str(tmp_path / "m"), "--n-admissions", "80", "--seed", "1"])
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(app, ["prepare", "--mimic-dir", str(tmp_path / "m"), "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.stderr
    assert "documents: train" in res.stdout
    assert (tmp_path / "p" / "train.parquet").is_file()


@pytest.mark.parametrize("args", [
    ["prepare", "--mimic-dir", "{tmp}/nope", "--out", "{tmp}/p"],
    ["prepare", "--mimic-dir", "{tmp}", "--out", "{tmp}/p"],
    ["prepare", "--mimic-dir", "{tmp}", "--out", "{tmp}/p", "--label-set", "top50"],
    ["demo-data", "--out", "{tmp}/m", "--n-admissions", "0"],
])
def test_bad_input_exit_1_one_line(tmp_path, args):
    res = _runner().invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "p").exists()
