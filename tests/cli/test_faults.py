"""Faults: kill -9 during train, prepare and predict, then resume; resume edge cases; atomic folder replacement.

The kill tests run the real CLI in a child process (`python -m clinicode ...`) and SIGKILL it at a known point,
found by polling the files it writes, never by sleeping for a guessed time.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from clinicode import files
from clinicode.checkpoint import load_checkpoint
from clinicode.cli import app
from clinicode.data.prepared import load_dataset
from clinicode.errors import ConfigError, DataFormatError
from clinicode.files import atomic_dir, sha256_file, write_json_atomic
from clinicode.predict import Predictor
from clinicode.predict_io import _settings, predict_file

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
runner = CliRunner()


def _spawn(args: list[str], *, code: str | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "clinicode", *map(str, args)]
    return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(proc: subprocess.Popen, ready, *, timeout: float, what: str) -> None:
    """Poll `ready()` every few ms until true; fail if the child exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the child exited ({proc.returncode}) before {what}: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def _kill9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    proc.stderr.close()


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


# ------------------------------------------------------------------------------------------------- train
def _state_epoch(run: Path) -> int:
    try:
        return int(json.loads((run / "state" / "state.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return 0  # not written yet, or caught mid-replace


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    """A small prepared dataset (about 150 training notes), so three epochs take seconds."""
    from clinicode.data.prepare import prepare_mimic
    from clinicode.synthetic.mimic3 import write_demo_mimic

    root = tmp_path_factory.mktemp("small")
    write_demo_mimic(root / "mimic", n_admissions=250, seed=4)
    prepare_mimic(root / "mimic", root / "data")
    return root / "data"


@pytest.mark.slow
def test_kill_9_during_training_then_resume(small_data, tmp_path):
    demo_data = small_data
    run, epochs = tmp_path / "run", 3
    args = ["train", "--data", demo_data, "--out", run, "--epochs", epochs, "--embed-dim", 16, "--window", 2,
            "--hidden-dim", 32, "--embeddings", "random", "--max-len", 400, "--lr", "0.02", "--device", "cpu",
            "--seed", 3, "--no-progress"]
    proc = _spawn(args)
    _wait_for(proc, lambda: _state_epoch(run) >= 1, timeout=240, what="the first finished epoch")
    _kill9(proc)
    # the last saved checkpoint loads, hashes and all
    ck = load_checkpoint(run)
    assert ck.kind == "leam" and ck.manifest["epoch"] >= 1
    res = runner.invoke(app, [str(a) for a in args + ["--resume"]])
    assert res.exit_code == 0, (res.exception, res.stderr[-2000:])
    hist = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in hist] == list(range(1, epochs + 1))
    final = load_checkpoint(run)
    assert final.manifest["epoch"] == max(hist, key=lambda h: (h["dev_f1_micro"], -h["epoch"]))["epoch"]
    assert final.metrics_test["n_docs"] == len(pd.read_parquet(demo_data / "test.parquet"))


# ----------------------------------------------------------------------------------------------- prepare
@pytest.fixture(scope="module")
def big_mimic(tmp_path_factory) -> Path:
    """A synthetic MIMIC folder with many non-discharge notes, so prepare runs for a while."""
    from clinicode.synthetic.mimic3 import write_demo_mimic

    out = tmp_path_factory.mktemp("big") / "mimic"
    write_demo_mimic(out, n_admissions=1500, n_other_notes=100_000, seed=2)
    return out


def _no_output_and_only_hidden_leftovers(parent: Path, out: Path) -> None:
    assert not out.exists()
    assert _visible(parent) == ["mimic"], _visible(parent)
    for p in parent.iterdir():
        if p.name.startswith(f".{out.name}."):
            assert p.name.endswith(".partial"), p.name  # a temporary name no reader opens
    with pytest.raises(DataFormatError, match="does not exist"):
        load_dataset(out)


def _prepare_completes(mimic: Path, out: Path) -> None:
    res = runner.invoke(app, ["prepare", "--mimic-dir", str(mimic), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    ds = load_dataset(out)
    assert sum(len(df) for df in ds.splits.values()) == sum(ds.manifest["summary"]["splits"].values())


def _prepare_child(mimic: Path, out: Path, patch: str) -> subprocess.Popen:
    """`clinicode prepare` in a child process, with `patch` (Python source) applied first to pace it."""
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        import clinicode.data.mimic as mimic
        import clinicode.data.prepare as prep
    """) + textwrap.dedent(patch) + textwrap.dedent(f"""
        from clinicode.cli import app
        sys.argv = ["clinicode", "prepare", "--mimic-dir", {str(mimic)!r}, "--out", {str(out)!r}]
        app()
    """)
    return _spawn([], code=code)


def test_kill_9_while_prepare_reads(big_mimic, tmp_path):
    """The child marks each NOTEEVENTS chunk it has read; the kill lands after the second chunk."""
    parent = tmp_path / "work"
    parent.mkdir()
    (parent / "mimic").symlink_to(big_mimic)
    out, marks = parent / "data", tmp_path / "chunks"
    proc = _prepare_child(big_mimic, out, f"""
        real = mimic._wrap_chunks
        def paced(path, chunks):
            for n, chunk in enumerate(real(path, chunks)):
                Path({str(marks)!r}).write_text(str(n + 1))
                time.sleep(0.05)
                yield chunk
        mimic._wrap_chunks = paced
    """)
    _wait_for(proc, lambda: marks.is_file() and marks.read_text() == "2", timeout=60, what="the read phase")
    _kill9(proc)
    _no_output_and_only_hidden_leftovers(parent, out)
    _prepare_completes(big_mimic, out)


def test_kill_9_while_prepare_writes_its_folder(big_mimic, tmp_path):
    """Slow the split writer down in the child so the kill lands while the temporary sibling is half full."""
    parent = tmp_path / "work"
    parent.mkdir()
    (parent / "mimic").symlink_to(big_mimic)
    out = parent / "data"
    proc = _prepare_child(big_mimic, out, """
        real = prep._write_splits
        def slow(out, docs, texts):
            real(out, docs, texts)
            time.sleep(30)
        prep._write_splits = slow
    """)

    def half_written() -> bool:
        return any(p.name.startswith(".data.") and (p / "train.parquet").is_file() for p in parent.iterdir())

    _wait_for(proc, half_written, timeout=60, what="the temporary output folder")
    _kill9(proc)
    leftovers = [p.name for p in parent.iterdir() if p.name.startswith(".data.")]
    assert leftovers and all(n.endswith(".partial") for n in leftovers)
    _no_output_and_only_hidden_leftovers(parent, out)
    _prepare_completes(big_mimic, out)
    # the next run swept the dead writer's temporary folder away
    assert [p.name for p in parent.iterdir() if p.name.startswith(".")] == []


# ----------------------------------------------------------------------------------------------- predict
@pytest.fixture(scope="module")
def predictor(tiny_run):
    return Predictor.from_checkpoint(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def many_notes(demo_data, tmp_path_factory) -> tuple[Path, list[str]]:
    texts = pd.concat([pd.read_parquet(demo_data / f"{s}.parquet") for s in ("train", "dev", "test")])["text"].tolist()
    ids = [f"n{i:05d}" for i in range(2000)]
    src = tmp_path_factory.mktemp("many") / "notes.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for i, rid in enumerate(ids):
            f.write(json.dumps({"id": rid, "text": texts[i % len(texts)]}) + "\n")
    return src, ids


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _complete_lines(p: Path) -> int:
    try:
        return p.read_bytes().count(b"\n")
    except OSError:
        return 0


@pytest.mark.slow  # a child process scoring 2,000 notes
def test_kill_9_during_predict_then_resume(tiny_run, many_notes, tmp_path):
    src, ids = many_notes
    out = tmp_path / "codes.jsonl"
    partial = tmp_path / "codes.jsonl.partial"
    proc = _spawn(["predict", "--checkpoint", tiny_run, "--input", src, "--output", out, "--explain", 5,
                   "--device", "cpu", "--no-progress"])
    _wait_for(proc, lambda: _complete_lines(partial) >= 1, timeout=120, what="the first flushed chunk")
    _kill9(proc)
    assert not out.exists(), "a killed run must not leave OUT"
    done = _complete_lines(partial)
    assert 0 < done < len(ids)
    res = runner.invoke(app, ["predict", "--checkpoint", str(tiny_run), "--input", str(src), "--output", str(out),
                              "--explain", "5", "--device", "cpu", "--resume"])
    assert res.exit_code == 0, (res.exception, res.stderr)
    recs = _records(out)
    assert [r["id"] for r in recs] == ids  # exactly one record per input id, in input order
    assert all("error" not in r and "evidence" in r for r in recs)
    assert not partial.exists()
    # the complete records were kept and skipped; only the rest (and a torn tail, if any) was scored
    assert f"scored {len(ids) - done:,} notes, 0 bad records" in res.stderr
    assert f"{done:,} skipped as already done" in res.stderr


def _same(a: list[dict], b: list[dict]) -> None:
    """Same records; scores may differ in the last float bits when a note is batched with other notes."""
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and x["truncated"] == y["truncated"] and len(x["scores"]) == len(y["scores"])
        common = x["scores"].keys() & y["scores"].keys()
        assert len(common) >= len(x["scores"]) - 1  # a near-tie at the top-k edge may swap
        assert [x["scores"][c] for c in common] == pytest.approx([y["scores"][c] for c in common], abs=1e-5)


def _write_jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _notes(n: int, *, dup_every: int = 0) -> list[dict]:
    rows = [{"id": f"n{i}", "text": f"note {i}: hypertension and atrial fibrillation"} for i in range(n)]
    if dup_every:
        rows = [dict(r, id=f"n{i % dup_every}") for i, r in enumerate(rows)]
    return rows


def _interrupted(predictor, src: Path, out: Path, text: str, **options) -> Path:
    """OUT.partial holding `text`, with the settings record an interrupted `predict` leaves beside it."""
    partial = out.with_name(out.name + ".partial")
    partial.write_text(text)
    opts = dict(top_k=10, threshold=None, explain=0, shard=(0, 1), **options)
    fmt = "csv" if out.suffix == ".csv" else "jsonl"
    write_json_atomic(out.with_name(out.name + ".partial.json"), _settings(predictor, input=src, fmt=fmt, **opts))
    return partial


def test_resume_of_a_finished_output_is_refused_and_changes_nothing(predictor, tmp_path):
    """A finished OUT carries no record of its checkpoint and options, so appending to it could mix two models."""
    src, out = tmp_path / "n.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(src, _notes(4))
    predict_file(predictor, input=src, output=out, progress=False)
    before = out.read_bytes()
    _write_jsonl(src, _notes(7))  # more notes arrived
    with pytest.raises(ConfigError,
                       match=r"o\.jsonl is a finished output and there is no o\.jsonl\.partial to continue"):
        predict_file(predictor, input=src, output=out, resume=True, progress=False)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.jsonl.clinicode.json", "n.jsonl", "o.jsonl"]


@pytest.mark.parametrize("change,message", [
    (dict(top_k=5), "--top-k 10 then 5"),
    (dict(threshold=0.9), "--threshold"),
    (dict(explain=3), "--explain 0 then 3"),
    (dict(shard=(1, 2)), "--shard [0, 1] then [1, 2]"),
])
def test_resume_with_other_options_is_refused(predictor, tmp_path, change, message):
    src, out = tmp_path / "n.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(src, _notes(6))
    predict_file(predictor, input=src, output=out, progress=False)
    partial = _interrupted(predictor, src, out, "".join(out.read_text().splitlines(keepends=True)[:2]))
    out.unlink()
    before = partial.read_bytes()
    with pytest.raises(ConfigError, match=re.escape(message)):
        predict_file(predictor, input=src, output=out, resume=True, progress=False, **change)
    assert partial.read_bytes() == before and not out.exists()


def test_resume_with_another_checkpoint_is_refused(predictor, tiny_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other, ignore=shutil.ignore_patterns("state"))
    thr = other / "checkpoint" / "threshold.json"
    thr.write_text(json.dumps({"threshold": 0.123}))
    m = json.loads((other / "checkpoint" / "manifest.json").read_text())
    m["files"]["threshold.json"] = sha256_file(thr)
    (other / "checkpoint" / "manifest.json").write_text(json.dumps(m))
    src, out = tmp_path / "n.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(src, _notes(6))
    predict_file(predictor, input=src, output=out, progress=False)
    partial = _interrupted(predictor, src, out, "".join(out.read_text().splitlines(keepends=True)[:3]))
    out.unlink()
    with pytest.raises(ConfigError, match=r"was written with other settings \(checkpoint .*tiny\S* then .*other"):
        predict_file(Predictor.from_checkpoint(other, device="cpu"), input=src, output=out, resume=True, progress=False)
    assert len(partial.read_text().splitlines()) == 3


def test_resume_of_a_partial_without_its_settings_is_refused(predictor, tmp_path):
    src, out = tmp_path / "n.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(src, _notes(3))
    partial = out.with_name("o.jsonl.partial")
    partial.write_text(json.dumps({"id": "n0", "scores": {}}) + "\n")
    # without its settings file nothing shows that predict wrote it (#31): refused, and left as it was
    with pytest.raises(ConfigError, match=r"o\.jsonl\.partial exists and was not written by `clinicode predict`"):
        predict_file(predictor, input=src, output=out, resume=True, progress=False)
    assert partial.read_text() == json.dumps({"id": "n0", "scores": {}}) + "\n" and not out.exists()


def test_resume_with_duplicate_ids_gives_one_record_per_input_record(predictor, tmp_path):
    src, out = tmp_path / "n.jsonl", tmp_path / "o.jsonl"
    rows = _notes(9, dup_every=3)  # ids n0 n1 n2 n0 n1 n2 n0 n1 n2
    _write_jsonl(src, rows)
    predict_file(predictor, input=src, output=out, progress=False)
    full = _records(out)
    assert [r["id"] for r in full] == [r["id"] for r in rows]
    for cut in (2, 4, 8):  # killed after `cut` records, each id already seen 0-2 times
        _interrupted(predictor, src, out, "".join(json.dumps(r) + "\n" for r in full[:cut]))
        out.unlink(missing_ok=True)
        counts = predict_file(predictor, input=src, output=out, resume=True, progress=False)
        assert counts["skipped"] == cut and counts["scored"] == 9 - cut and counts["duplicate_ids"] == 6
        _same(_records(out), full)


def test_resume_csv_output_heals_a_torn_row(predictor, tmp_path):
    src, out = tmp_path / "n.jsonl", tmp_path / "o.csv"
    _write_jsonl(src, _notes(6))
    predict_file(predictor, input=src, output=out, progress=False)
    full = out.read_bytes()
    rows = full.split(b"\r\n")
    partial = _interrupted(predictor, src, out, "")
    partial.write_bytes(b"\r\n".join(rows[:4]) + b"\r\n" + rows[4][:15])  # header, 3 rows, a torn 4th row
    out.unlink()
    counts = predict_file(predictor, input=src, output=out, resume=True, progress=False)
    assert counts == {"scored": 3, "errors": 0, "skipped": 3}
    with open(out, newline="", encoding="utf-8") as f:
        back = list(csv.DictReader(f))
    assert [r["id"] for r in back] == [f"n{i}" for i in range(6)]
    with open(out.with_name("again.csv"), "wb") as f:
        f.write(full)
    with open(out.with_name("again.csv"), newline="", encoding="utf-8") as f:
        want = list(csv.DictReader(f))
    assert [r["predicted"] for r in back] == [r["predicted"] for r in want]


def test_resume_continues_the_partial_not_a_stale_finished_output(predictor, tmp_path):
    """OUT from an older run and OUT.partial from an interrupted new one: every input id must end up in OUT."""
    src, out = tmp_path / "n.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(src, _notes(6))
    predict_file(predictor, input=src, output=out, progress=False)
    full = _records(out)
    _interrupted(predictor, src, out, "".join(json.dumps(r) + "\n" for r in full[:2]))
    counts = predict_file(predictor, input=src, output=out, resume=True, progress=False)
    assert counts["skipped"] == 2 and counts["scored"] == 4
    _same(_records(out), full)


def test_a_file_level_error_leaves_no_partial(predictor, tmp_path):
    out = tmp_path / "o.jsonl"
    with pytest.raises(DataFormatError, match="no such file or folder"):
        predict_file(predictor, input=tmp_path / "missing.jsonl", output=out, progress=False)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- atomic folders
def test_replacing_a_folder_never_leaves_it_missing(tmp_path, monkeypatch):
    """Die right after the first rename of a two-rename swap: the folder must still be there, old or new."""
    out = tmp_path / "ck"
    with atomic_dir(out) as tmp:
        (tmp / "v").write_text("1")
    real_replace = os.replace

    def dying_replace(src, dst):
        real_replace(src, dst)
        if Path(src) == out:
            raise KeyboardInterrupt("killed between the renames")

    monkeypatch.setattr(os, "replace", dying_replace)
    try:
        with atomic_dir(out) as tmp:
            (tmp / "v").write_text("2")
    except KeyboardInterrupt:
        pass
    assert out.is_dir() and (out / "v").read_text() in ("1", "2")
    assert (out / "v").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_stale_temporaries_of_dead_writers_are_swept_but_live_ones_kept(tmp_path):
    host = socket.gethostname().replace(".", "_")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    names = {
        f".ck.{host}-{dead_pid}.x1.partial": False,      # dead writer here: swept
        f".ck.old-{dead_pid}": False,                    # old folder of a dead swap: swept
        f".ck.{host}-{os.getppid()}.x2.partial": True,   # a live process: kept
        f".ck.otherhost-{dead_pid}.x3.partial": True,    # another machine's writer (shared disk): kept
        f".other.{host}-{dead_pid}.x4.partial": True,    # another folder's temporary: kept
    }
    for n in names:
        (tmp_path / n).mkdir()
    with atomic_dir(tmp_path / "ck") as tmp:
        (tmp / "f").write_text("x")
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"ck"} | {n for n, keep in names.items() if keep}
    assert files._alive(os.getpid()) and not files._alive(dead_pid)
