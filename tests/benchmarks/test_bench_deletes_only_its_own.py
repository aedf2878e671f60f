"""Benchmark scripts follow the commands' rule: they delete only what they created and marked, never a folder or
file of the same name that someone else put under --work-dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks._common import OWN_MARK, mark_own, remove_own  # noqa: E402

SCRIPTS = ["bench_scale.py", "bench_prepare.py", "bench_prepare_mimic4.py", "bench_review_loop.py"]


def test_a_marked_folder_or_file_is_deleted_and_anything_else_is_refused(tmp_path):
    mine = tmp_path / "run-k50"
    mine.mkdir()
    (mine / "checkpoint").mkdir()
    mark_own(mine)
    out = tmp_path / "pred-k50.jsonl"
    out.write_text("{}\n")
    mark_own(out)
    remove_own(mine)
    remove_own(out)
    assert not mine.exists() and not out.exists() and not list(tmp_path.iterdir())
    remove_own(tmp_path / "never-there")  # nothing to do

    theirs = tmp_path / "run-k1000"
    theirs.mkdir()
    (theirs / "weeks-of-work.txt").write_text("keep me")
    their_file = tmp_path / "pred-k1000.jsonl"
    their_file.write_text("keep me too")
    for path in (theirs, their_file):
        with pytest.raises(SystemExit, match="was not created by this benchmark .*left alone"):
            remove_own(path)
    assert (theirs / "weeks-of-work.txt").read_text() == "keep me" and their_file.read_text() == "keep me too"


def test_bench_scale_refuses_a_work_dir_whose_run_folder_it_did_not_create(tmp_path):
    data = tmp_path / "k50-n3000-p3000"  # the data folder bench_scale would use at K = 50, full size
    data.mkdir()
    (data / "notes.txt").write_text("someone's data")
    (tmp_path / "run-default-k50").mkdir()
    (tmp_path / "run-default-k50" / "precious.txt").write_text("someone's run")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_scale.py"), "--codes", "50", "--work-dir",
                          str(tmp_path), "--no-write", "--no-w2v"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "was not created by this benchmark" in res.stderr and "Traceback" not in res.stderr
    assert (data / "notes.txt").read_text() == "someone's data"
    assert (tmp_path / "run-default-k50" / "precious.txt").read_text() == "someone's run"


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_benchmark_deletes_by_name_without_the_mark(script):
    text = (ROOT / "benchmarks" / script).read_text()
    assert "rmtree" not in text and '"rm", "-rf"' not in text and ".unlink(missing_ok=True)" not in text
    assert "remove_own(" in text
    assert OWN_MARK.startswith(".")
