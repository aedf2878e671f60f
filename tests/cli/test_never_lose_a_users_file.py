"""Never lose a user's file (#31): one test per finding of the 152 hostile-but-realistic cases.

Every refused case exits with status 1, prints one line and no traceback, and leaves the whole folder tree it ran in
byte-identical (`helpers.snapshot`). Numbers in the test names are the issue's findings.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from clinicode.artifacts import make_manifest
from clinicode.cli import app
from clinicode.files import sha256_file, write_json_atomic
from clinicode.synthetic.mimic3 import write_demo_mimic

from conftest import TINY_CLI
from helpers import SECRET, fails, runner, snapshot, succeeds

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _notes(n: int, word: str = "hypertension") -> list[dict]:
    return [{"id": f"n{i}", "text": f"note {i}: {word} and atrial fibrillation"} for i in range(n)]


def _predict(run: Path, src, out, *extra) -> list:
    return ["predict", "--checkpoint", run, "--input", src, "--output", out, "--device", "cpu", "--no-progress", *extra]


def refused(root: Path, args: list, message: str):
    """FAILS with MESSAGE and the whole tree under ROOT unchanged, byte for byte."""
    before = snapshot(root)
    res = fails(args, message)
    assert snapshot(root) == before
    return res


@pytest.fixture
def place(tmp_path, tiny_run) -> dict[str, Path]:
    """A user's folder: notes, the run (a copy: the tree must stay byte-identical), and the output's would-be home."""
    _jsonl(tmp_path / "notes.jsonl", _notes(3))
    shutil.copytree(tiny_run, tmp_path / "run", ignore=shutil.ignore_patterns("state"))
    return {"root": tmp_path, "N": tmp_path / "notes.jsonl", "RUN": tmp_path / "run"}


# ------------------------------------------------------------------------------ 1. outputs are regular files or new
def test_1_predict_to_a_device_is_refused_and_the_device_stays(place):
    refused(place["root"], _predict(place["RUN"], place["N"], "/dev/null"),
            "--output /dev/null is a device, not a regular file")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # still the device, not a file of predictions


def test_1_evaluate_to_a_socket_is_refused(place, demo_data):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(place["root"] / "m.json"))
    try:
        refused(place["root"], ["evaluate", "--checkpoint", place["RUN"], "--data", demo_data, "--output",
                                place["root"] / "m.json", "--device", "cpu"], "is a socket, not a regular file")
    finally:
        sock.close()


@pytest.mark.parametrize("where", ["OUT", "OUT.partial"])
def test_1_a_fifo_output_is_refused_without_reading_it(place, where):
    """A FIFO is never opened: before the fix the check blocked forever reading it (the timeout turns that into a
    failure here instead of a hung test)."""
    out = place["root"] / "codes.jsonl"
    os.mkfifo(out if where == "OUT" else out.with_name("codes.jsonl.partial"))
    before = snapshot(place["root"])
    proc = subprocess.run([sys.executable, "-m", "clinicode", *map(str, _predict(place["RUN"], place["N"], out))],
                          capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a FIFO (named pipe), not a regular file" in lines[0]
    assert "Traceback" not in proc.stderr
    assert snapshot(place["root"]) == before


# ------------------------------------------------------------------ 2. predict's own output is known by its marker
@pytest.mark.parametrize("first", [
    {"id": "job-17", "error": "timeout"},                        # another tool's job log
    {"id": "n0", "predicted": ["401.9", "428.0"]},               # notes carrying gold codes
    {"id": "n0", "scores": {"401.9": 0.9}, "predicted": []},     # even records shaped exactly like predict's
])
def test_2_another_tools_jsonl_is_never_taken_for_predicts_output(place, first):
    user = place["root"] / "mine.jsonl"
    _jsonl(user, [first, {"id": "more", "text": SECRET}])
    refused(place["root"], _predict(place["RUN"], place["N"], user), "is a file that `clinicode predict` did not write")


def test_2_predicts_output_edited_since_is_no_longer_its_own(place):
    out = place["root"] / "codes.jsonl"
    succeeds(_predict(place["RUN"], place["N"], out))
    assert json.loads((place["root"] / ".codes.jsonl.clinicode.json").read_text())["sha256"] == sha256_file(out)
    succeeds(_predict(place["RUN"], place["N"], out))  # its own, unchanged: replaced
    with open(out, "a") as f:
        f.write('{"id": "added by hand", "predicted": []}\n')
    refused(place["root"], _predict(place["RUN"], place["N"], out), "is a file that `clinicode predict` did not write")


# --------------------------------------------------------------------- 3. OUT.partial(.json) of someone else stays
@pytest.mark.parametrize("name,content", [
    ("codes.jsonl.partial.json", b'{"my": "settings"}\n'),
    ("codes.jsonl.partial.json", b"not json at all"),
    ("codes.jsonl.partial", b'{"id": "n0", "predicted": []}\n'),   # a partial without predict's settings beside it
    (".codes.jsonl.clinicode.json", b'{"kind": "something else"}'),
])
def test_3_a_users_file_at_a_sidecar_name_is_neither_overwritten_nor_deleted(place, name, content):
    (place["root"] / name).write_bytes(content)
    for extra in ([], ["--resume"]):
        refused(place["root"], _predict(place["RUN"], place["N"], place["root"] / "codes.jsonl", *extra),
                "was not written by `clinicode predict`")


# ------------------------------------------------------------ 4. replacing an output removes only what it wrote
def test_4_rerunning_demo_data_keeps_a_users_files(tmp_path):
    out = tmp_path / "D"
    succeeds(["demo-data", "--out", out, "--n-admissions", "20"])
    succeeds(["demo-data", "--out", out, "--n-admissions", "20"])  # its own output alone: replaced
    (out / "my_notes.md").write_text("my notes")
    refused(tmp_path, ["demo-data", "--out", out, "--n-admissions", "20"],
            "my_notes.md inside it were not written by it")


def test_4_rerunning_demo_data_mimic4_keeps_a_file_in_a_subfolder(tmp_path):
    out = tmp_path / "D4"
    succeeds(["demo-data", "--format", "mimic4", "--out", out, "--n-admissions", "20"])
    (out / "hosp" / "analysis.ipynb").write_text("{}")
    refused(tmp_path, ["demo-data", "--format", "mimic4", "--out", out, "--n-admissions", "20"],
            "hosp/analysis.ipynb inside it were not written by it")


def test_4_rerunning_prepare_keeps_a_users_files(tmp_path):
    write_demo_mimic(tmp_path / "m", n_admissions=40, seed=2)
    out = tmp_path / "P"
    succeeds(["prepare", "--mimic-dir", tmp_path / "m", "--out", out])
    succeeds(["prepare", "--mimic-dir", tmp_path / "m", "--out", out])
    (out / "analysis.ipynb").write_text("{}")
    refused(tmp_path, ["prepare", "--mimic-dir", tmp_path / "m", "--out", out],
            "analysis.ipynb inside it were not written")


# ----------------------------------------------------------------------- 5. two predicts to one output: one refuses
def _partial_of_a_running_predict(place, out: Path) -> int:
    """OUT.partial and its settings as a predict run in progress has them, with that run's lock held (returned fd)."""
    succeeds(_predict(place["RUN"], place["N"], out))           # a real run's settings file, kept by renaming it back
    partial = out.with_name(out.name + ".partial")
    os.replace(out, partial)
    (place["root"] / f".{out.name}.clinicode.json").unlink()
    from clinicode.config import PREDICT
    from clinicode.predict import Predictor
    from clinicode.predict_io import _settings

    pred = Predictor.from_checkpoint(place["RUN"], device="cpu")
    write_json_atomic(out.with_name(out.name + ".partial.json"),
                      _settings(pred, input=place["N"], fmt="jsonl", top_k=PREDICT.top_k, threshold=None,
                                explain=PREDICT.explain, shard=(0, 1)))
    fd = os.open(partial, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("extra", [[], ["--resume"]])
def test_5_a_second_predict_to_an_output_being_written_is_refused(place, extra):
    out = place["root"] / "codes.jsonl"
    fd = _partial_of_a_running_predict(place, out)
    try:
        refused(place["root"], _predict(place["RUN"], place["N"], out, *extra),
                "is being written by another running clinicode command (codes.jsonl.partial is locked)")
    finally:
        os.close(fd)
    succeeds(_predict(place["RUN"], place["N"], out, "--resume"))  # the lock gone, the run continues as usual
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["n0", "n1", "n2"]


# ----------------------------------------------------------------- 6. --resume notices an input replaced in place
def _interrupted_run(place, src: Path, out: Path) -> None:
    """A predict run stopped by a bad record (--strict): OUT.partial and its settings stay, as after a kill."""
    rows = _notes(4)
    rows.insert(2, {"id": "bad", "text": ""})
    _jsonl(src, rows)
    fails(_predict(place["RUN"], src, out, "--strict"), "empty text")
    assert out.with_name(out.name + ".partial").is_file()


@pytest.mark.parametrize("how", ["other notes", "same size and time"])
def test_6_resume_after_the_input_was_replaced_is_refused(place, how):
    src, out = place["root"] / "in.jsonl", place["root"] / "codes.jsonl"
    _interrupted_run(place, src, out)
    st = src.stat()
    if how == "other notes":
        _jsonl(src, _notes(9, word="pneumonia"))
    else:  # the same number of bytes and the same modification time: only the head's hash tells
        data = src.read_bytes()
        src.write_bytes(data.replace(b"hypertension", b"hypertensiom"))
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert src.stat().st_size == st.st_size
    refused(place["root"], _predict(place["RUN"], src, out, "--resume"),
            "changed since codes.jsonl.partial was written (its size, modification time or first MiB differ)")


def test_6_resume_of_an_unchanged_input_continues(place):
    src, out = place["root"] / "in.jsonl", place["root"] / "codes.jsonl"
    _interrupted_run(place, src, out)
    res = succeeds(_predict(place["RUN"], src, out, "--resume"))
    assert "2 skipped as already done" in res.stderr


# --------------------------------------------------------------------- 7. two trains into one fresh --out: one wins
def test_7_a_second_train_into_a_claimed_fresh_folder_is_refused(tmp_path, demo_data):
    out = tmp_path / "run"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the first run holds while it trains (`claim_folder`)
    try:
        refused(tmp_path, ["train", "--data", demo_data, "--out", out, *TINY_CLI, "--seed", "2"],
                f"--out {out} is being written by another running clinicode command")
    finally:
        os.close(fd)
    assert list(out.iterdir()) == []


def test_7_two_train_processes_racing_for_one_folder(tmp_path, demo_data):
    """Two real processes: exactly one trains, the other refuses in one line; run.json and the checkpoint agree."""
    out = tmp_path / "run"
    args = ["train", "--data", str(demo_data), "--out", str(out), *TINY_CLI, "--epochs",
            "2"]  # the last --epochs counts
    procs = [subprocess.Popen([sys.executable, "-m", "clinicode", *args, "--seed", str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
             for seed in (1, 2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 1], results
    loser = next(err for rc, err in results if rc == 1)
    assert ("being written by another running clinicode command" in loser or "already holds a run" in loser)
    assert "Traceback" not in loser
    run = json.loads((out / "run.json").read_text())
    ck = json.loads((out / "checkpoint" / "manifest.json").read_text())
    assert run["train_config"]["seed"] == ck["seed"]


# ---------------------------------------------------------------------------- 8. non-UTF-8 on stdin: bad records
def test_8_non_utf8_bytes_on_stdin_are_bad_records_not_a_traceback(place):
    out = place["root"] / "codes.jsonl"
    data = (json.dumps({"id": "a", "text": "hypertension"}).encode() + b"\n"
            + b'{"id": "b", "text": "' + SECRET.encode() + b' caf\xe9"}\n'
            + json.dumps({"id": "c", "text": "atrial fibrillation"}).encode() + b"\n")
    res = runner().invoke(app, [str(a) for a in _predict(place["RUN"], "-", out)], input=data)
    assert res.exit_code == 0, (res.exception, res.stderr)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["a", "line-2", "c"]
    assert recs[1]["error"].startswith("line 2 of stdin: not UTF-8 text")
    assert SECRET not in out.read_text() + res.stderr
    res = runner().invoke(app, [str(a) for a in _predict(place["RUN"], "-", place["root"] / "s.jsonl", "--strict")],
                          input=data)
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "line 2 of stdin: not UTF-8 text" in res.stderr


# ------------------------------------------------------------ 9. a config that disagrees with the weights' headers
def _rehash(ck: Path) -> None:
    m = json.loads((ck / "manifest.json").read_text())
    m["files"] = {n: sha256_file(ck / n) for n in m["files"]}
    (ck / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def absurd_runs(tiny_run, tmp_path_factory) -> Path:
    """Runs folder: 'good', and 'absurd' whose model_config.json says embed_dim 10^9 and hidden_dim 10^7 (re-hashed)."""
    root = tmp_path_factory.mktemp("absurd") / "runs"
    for name in ("good", "absurd"):
        shutil.copytree(tiny_run, root / name, ignore=shutil.ignore_patterns("state"))
    ck = root / "absurd" / "checkpoint"
    cfg = json.loads((ck / "model_config.json").read_text())
    cfg.update(embed_dim=10**9, hidden_dim=10**7)
    (ck / "model_config.json").write_text(json.dumps(cfg))
    _rehash(ck)
    return root


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_9_absurd_config_sizes_are_refused_from_the_weights_header(absurd_runs, demo_data, tmp_path, command):
    import resource

    run = absurd_runs / "absurd"
    args = (_predict(run, demo_data / "test.parquet", tmp_path / "o.jsonl") if command == "predict"
            else ["evaluate", "--checkpoint", run, "--data", demo_data, "--device", "cpu"])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    refused(absurd_runs, args, "model_config.json implies tensor word_emb.weight of shape")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 500, grown_mb  # 10^9 x 20 floats would be 80 GB; nothing of the sort is allocated


def test_9_model_shapes_the_precheck_expects_are_the_models(tiny_run):
    from clinicode.models.leam.kind import leam_weight_shapes, weight_shapes
    from clinicode.models.leam.model import LEAM
    from clinicode.models.leam.options import LEAMConfig

    for evidence in (False, True):
        cfg = LEAMConfig(vocab_size=13, n_labels=7, embed_dim=6, hidden_dim=5, radius=2, code_evidence=evidence)
        assert leam_weight_shapes(cfg) == {k: tuple(v.shape) for k, v in LEAM(cfg).state_dict().items()}
    held = weight_shapes(tiny_run / "checkpoint" / "model.safetensors")
    assert held["word_emb.weight"][1] == 32 and held["head.1.weight"] == (64, 32)


def test_9_the_app_lists_a_run_whose_config_and_weights_disagree_as_damaged(absurd_runs, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("CLINICODE_RUNS", str(absurd_runs))
    at = AppTest.from_file(str(ROOT / "app_streamlit" / "main.py"), default_timeout=90).run()
    box = at.sidebar.selectbox(key="run_name")
    assert box.format_func("absurd") == "absurd (damaged)" and box.format_func("good") == "good"
    box.set_value("absurd").run()
    for page in ("performance", "about_model"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        [err] = at.error
        assert "Run **absurd** is damaged and cannot be used" in err.value and "the pieces disagree" in err.value
        assert "\n" not in err.value and str(absurd_runs) not in err.value


def test_9_pages_show_one_line_when_the_model_cannot_be_loaded(tiny_run, tmp_path, monkeypatch):
    """A run whose hashes and weight shapes check out but whose pieces disagree otherwise (labels.json lists fewer
    codes than the model has outputs): listed as healthy, so Model performance and Model card must catch the load
    error themselves, in one line."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "runs"
    shutil.copytree(tiny_run, root / "r", ignore=shutil.ignore_patterns("state"))
    ck = root / "r" / "checkpoint"
    labels = json.loads((ck / "labels.json").read_text())
    (ck / "labels.json").write_text(json.dumps(labels[:-1]))
    _rehash(ck)
    monkeypatch.setenv("CLINICODE_RUNS", str(root))
    at = AppTest.from_file(str(ROOT / "app_streamlit" / "main.py"), default_timeout=90).run()
    for page in ("performance", "about_model"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        [err] = at.error
        assert err.value.startswith("Run **r** cannot be loaded: r/checkpoint: labels.json lists"), err.value
        assert "\n" not in err.value and str(root) not in err.value


# ------------------------------------------------------------------------ 10. bounded reads per line and per note
def test_10_descriptions_from_dev_zero_fail_fast_in_one_line(tmp_path, demo_data):
    refused(tmp_path, ["train", "--data", demo_data, "--out", tmp_path / "run", "--descriptions", "/dev/zero",
                       *TINY_CLI],
            "/dev/zero: line 1 is longer than 64 KiB; expected code<TAB>description lines")
    assert not (tmp_path / "run").exists()


def test_10_a_jsonl_line_over_the_bound_is_a_bad_record_and_never_held(place, monkeypatch):
    import clinicode.records as records

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 4096)
    src, out = place["root"] / "in.jsonl", place["root"] / "codes.jsonl"
    _jsonl(src, [{"id": "a", "text": "hypertension"}, {"id": "big", "text": "x " * 10_000},
                 {"id": "c", "text": "sepsis"}])
    succeeds(_predict(place["RUN"], src, out))
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["a", "line-2", "c"]
    assert recs[1]["error"] == ("line 2 of in.jsonl: more than the 4,096 bytes a record may hold; "
                                "split or shorten the note")


def test_10_a_huge_note_is_cut_by_characters_before_tokenising(tiny_run):
    from clinicode.checkpoint import load_checkpoint
    from clinicode.tokenizer import CHARS_PER_TOKEN

    tok = load_checkpoint(tiny_run).tokenizer
    seen: list[int] = []
    real = tok._tok.encode_batch_fast

    def spy(texts, **kw):
        seen.extend(len(t) for t in texts)
        return real(texts, **kw)

    tok._tok = type("Spy", (), {"encode_batch_fast": staticmethod(spy), "encode_batch": tok._tok.encode_batch})()
    big = "hypertension " * 4_000_000  # 52 MB of text
    [enc] = tok.encode([big])
    assert seen == [tok.max_len * CHARS_PER_TOKEN] and enc.truncated and len(enc.ids) == tok.max_len


# --------------------------------------------------------------------------------------- 11. the misleading cases
def test_11_train_out_through_a_link_and_dotdot_is_checked_where_it_lands(tmp_path, demo_data):
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "w").mkdir()
    os.symlink(tmp_path / "a" / "b" / "c", tmp_path / "w" / "link")
    given = f"{tmp_path}/w/link/../../x"  # the system resolves the link first: tmp/a/x; read as text it is tmp/x
    succeeds(["train", "--data", demo_data, "--out", given, *TINY_CLI, "--epochs", "1"])
    assert (tmp_path / "a" / "x" / "checkpoint" / "manifest.json").is_file()
    assert json.loads((tmp_path / "a" / "x" / "run.json").read_text())["kind"] == "run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "w"]  # nothing at the textual tmp/x
    # and a resolved place inside an input is refused, whatever the spelling
    os.symlink(demo_data, tmp_path / "w" / "d")
    refused(tmp_path, ["train", "--data", demo_data, "--out", f"{tmp_path}/w/d/x", *TINY_CLI],
            "lies inside the input folder --data")


def test_11_a_failed_runs_run_json_does_not_block_a_plain_rerun(tmp_path, demo_data):
    out = tmp_path / "run"
    out.mkdir()
    write_json_atomic(out / "run.json", make_manifest("run", train_config={}, model_options={}))  # left by a failed run
    succeeds(["train", "--data", demo_data, "--out", out, *TINY_CLI, "--epochs", "1"])
    assert json.loads((out / "run.json").read_text())["train_config"]["seed"] == 7


def test_11_bad_options_leave_no_run_folder(tmp_path, demo_data):
    refused(tmp_path, ["train", "--data", demo_data, "--out", tmp_path / "run", *TINY_CLI, "--embed-dim", "0"],
            "embed_dim")
    assert not (tmp_path / "run").exists()


def test_11_input_from_a_pipe_is_read(place):
    r, w = os.pipe()
    os.write(w, "".join(json.dumps(x) + "\n" for x in _notes(2)).encode())
    os.close(w)
    out = place["root"] / "codes.jsonl"
    try:
        succeeds(_predict(place["RUN"], f"/dev/fd/{r}", out))
    finally:
        os.close(r)
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["n0", "n1"]


def test_11_a_folder_of_upper_case_txt_is_read_like_the_file_alone(place):
    d = place["root"] / "notes"
    d.mkdir()
    (d / "NOTE.TXT").write_text("hypertension and atrial fibrillation")
    succeeds(_predict(place["RUN"], d / "NOTE.TXT", place["root"] / "one.jsonl"))
    succeeds(_predict(place["RUN"], d, place["root"] / "all.jsonl"))
    assert [json.loads(x)["id"] for x in (place["root"] / "all.jsonl").read_text().splitlines()] == ["NOTE"]


def test_11_a_corrupt_parquet_is_named(place):
    src = place["root"] / "n.parquet"
    pd.DataFrame({"id": [f"n{i}" for i in range(5000)], "text": [f"note {i} " * 20 for i in range(5000)]}).to_parquet(
        src, row_group_size=1000, compression=None)
    data = bytearray(src.read_bytes())
    data[200:4200] = b"\xff" * 4000  # the footer stays readable; the first data page does not
    src.write_bytes(bytes(data))
    res = refused(place["root"], _predict(place["RUN"], src, place["root"] / "o.jsonl"),
                  f"--input {src}: damaged parquet file")
    assert "disk has room" not in res.stderr


def test_11_a_bad_byte_is_reported_by_its_line(place):
    rows = "id,text\n" + "".join(f"n{i},note {i} hypertension\n" for i in range(599))
    src = place["root"] / "n.csv"
    src.write_bytes(rows.encode() + b"n600," + SECRET.encode() + b" caf\xe9\n")
    res = refused(place["root"], _predict(place["RUN"], src, place["root"] / "o.jsonl"), "n.csv: not UTF-8 text (")
    assert "at line 601)" in res.stderr
    src = place["root"] / "n.jsonl"
    src.write_bytes(b"".join(json.dumps({"id": f"n{i}", "text": "hypertension"}).encode() + b"\n" for i in range(600))
                    + b'{"id": "x", "text": "caf\xe9"}\n')
    out = place["root"] / "j.jsonl"
    succeeds(_predict(place["RUN"], src, out))
    last = json.loads(out.read_text().splitlines()[-1])
    assert last["error"].startswith("line 601 of n.jsonl: not UTF-8 text")


def test_11_predict_into_a_closed_pipe_exits_quietly(place):
    src = place["root"] / "many.jsonl"
    _jsonl(src, _notes(600))
    proc = subprocess.Popen([sys.executable, "-m", "clinicode", *map(str, _predict(place["RUN"], src, "-"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=300) == 141, err
    assert "error" not in err and "disk has room" not in err and "Traceback" not in err and "Exception" not in err


def test_11_a_mimic4_table_missing_a_column_is_called_mimic4(tmp_path):
    from clinicode.synthetic.mimic4 import write_demo_mimic4

    write_demo_mimic4(tmp_path / "m4", n_admissions=30, seed=1)
    table = tmp_path / "m4" / "hosp" / "diagnoses_icd.csv"
    df = pd.read_csv(table, dtype=str)
    df.drop(columns=["icd_version"]).to_csv(table, index=False)
    refused(tmp_path, ["prepare", "--mimic-dir", tmp_path / "m4", "--icd-version", "10", "--out", tmp_path / "p"],
            "Is this the MIMIC-IV v2.2 table?")


def test_11_an_edited_data_path_cannot_make_the_app_show_another_folders_notes(tiny_run, demo_data, tmp_path):
    from clinicode.checkpoint import test_data_dir
    from clinicode.data.prepare import prepare_mimic

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("state"))
    manifest = json.loads((run / "checkpoint" / "manifest.json").read_text())
    assert test_data_dir(run, manifest) == Path(manifest["data"]["path"]) == demo_data.resolve()  # the real one: shown
    write_demo_mimic(tmp_path / "other_mimic", n_admissions=40, seed=9)
    prepare_mimic(tmp_path / "other_mimic", tmp_path / "other")
    manifest["data"]["path"] = str(tmp_path / "other")
    (run / "checkpoint" / "manifest.json").write_text(json.dumps(manifest))  # not covered by the hashes
    assert test_data_dir(run, manifest) is None


# ----------------------------------------------------------------------- the shared helpers other commands reuse
def test_new_private_file_is_owner_only_and_never_replaces_or_follows(tmp_path):
    from clinicode.files import new_private_file

    old = os.umask(0)
    try:
        with new_private_file(tmp_path / "notes.jsonl") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "notes.jsonl").stat().st_mode) == 0o600
    (tmp_path / "mine.txt").write_text("mine")
    os.symlink(tmp_path / "mine.txt", tmp_path / "link")
    for name in ("notes.jsonl", "mine.txt", "link"):
        with pytest.raises(FileExistsError):
            new_private_file(tmp_path / name)
    assert (tmp_path / "mine.txt").read_text() == "mine" and (tmp_path / "notes.jsonl").read_bytes() == b"x"
