"""Batch scoring of files: notes in (read by `clinicode.records`), one output record per note out.

Output goes to OUT.partial, flushed per chunk, and is renamed to OUT at the end: a killed run leaves no
half-written OUT, and `resume=True` continues from the ids already in OUT.partial. OUT.partial.json records the
checkpoint and options of the run that wrote it, so a resume with other ones is refused instead of mixing models.
Bad records get an `error` field and are counted; they never stop the run unless `strict`.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from clinicode.artifacts import check_output, read_json, write_json_atomic
from clinicode.config import PREDICT
from clinicode.environment import environment_hash
from clinicode.errors import ConfigError, DataFormatError
from clinicode.predict import Predictor
from clinicode.records import Record, read_records

CHUNK = 256
CSV_HEADER = ("id", "predicted", "scores", "truncated", "error")
PARTIAL_KIND = "predict-partial"


def is_predict_output(path: Path) -> bool:
    """True for a file `clinicode predict` wrote (JSONL records or its CSV header), or an empty file."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    if not first:
        return True  # empty: nothing to lose
    if first.rstrip("\r\n") == ",".join(CSV_HEADER):
        return True
    try:
        obj = json.loads(first)
    except ValueError:
        return False
    return isinstance(obj, dict) and "id" in obj and bool({"scores", "error", "predicted"} & obj.keys())


class _Writer:
    """JSONL or CSV records to OUT.partial; `finish()` renames it to OUT."""

    def __init__(self, out: str | Path, *, fmt: str, append: bool) -> None:
        self.stdout = str(out) == "-"
        self.fmt = fmt
        if self.stdout:
            self.f = sys.stdout
        else:
            self.final = Path(out)
            self.partial = self.final.with_name(self.final.name + ".partial")
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self.f = open(self.partial, "a" if append else "w", encoding="utf-8", newline="")
        self.csv = csv.writer(self.f) if fmt == "csv" else None
        if self.csv is not None and not (append and self.partial.stat().st_size > 0):
            self.csv.writerow(CSV_HEADER)

    def write(self, rec: dict[str, Any]) -> None:
        if self.csv is not None:
            pred = ";".join(p["code"] for p in rec.get("predicted", []))
            self.csv.writerow([rec["id"], pred, json.dumps(rec.get("scores", {})), rec.get("truncated", ""), rec.get("error", "")])
        else:
            self.f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    def flush(self) -> None:
        self.f.flush()
        if not self.stdout:
            os.fsync(self.f.fileno())

    def finish(self) -> None:
        self.flush()
        if not self.stdout:
            self.f.close()
            os.replace(self.partial, self.final)


def _done_ids(p: Path, fmt: str) -> Counter[str]:
    """How many records each id already has in `p` (a multiset, so duplicate input ids resume exactly)."""
    done: Counter[str] = Counter()
    if not p.is_file():
        return done
    with open(p, encoding="utf-8", newline="") as f:
        if fmt == "csv":
            done.update(row["id"] for row in csv.DictReader(f) if row.get("id") is not None)
        else:
            for line in f:
                try:
                    done[str(json.loads(line)["id"])] += 1
                except (json.JSONDecodeError, KeyError, TypeError):
                    break  # a torn last line from a kill: re-score from here
    return done


def predict_file(
    predictor: Predictor,
    *,
    input: str | Path,
    output: str | Path,
    top_k: int | None = PREDICT.top_k,
    threshold: float | None = None,
    explain: int = PREDICT.explain,
    strict: bool = False,
    resume: bool = False,
    shard: tuple[int, int] = (0, 1),
    progress: bool = True,
    on_bad: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Score every record of `input` into `output` (JSONL, or CSV when output ends in .csv).

    Args:
        shard: (i, n): score only records whose position p satisfies p % n == i (deterministic).
        resume: skip ids already present in OUT.partial (or, when there is none, in OUT) and append to it; an id
            that occurs n times in the input is skipped as often as it already occurs in the output.
    Returns:
        counts: {"scored", "errors", "skipped"}, plus "duplicate_ids" (records repeating an earlier id) when there
            are any; such records are scored like any other.
    Raises:
        DataFormatError: an unreadable or empty input; with strict=True, the first bad record.
    """
    from tqdm.auto import tqdm

    fmt = "csv" if str(output).endswith(".csv") else "jsonl"
    i_shard, n_shard = shard
    if threshold is not None and not 0.0 <= float(threshold) <= 1.0:
        raise ConfigError(f"--threshold must be in [0, 1], got {threshold}.")
    to_file = str(output) != "-"
    if to_file:
        check_output(Path(output), option="--output", command="predict", folder=False, recognise=is_predict_output,
                     inputs={"--input": input, "--checkpoint": predictor.checkpoint.path})
    records = read_records(input)
    first = next(records, None)  # file-level input errors surface here, before OUT.partial is created
    if first is None:
        raise DataFormatError(f"--input {input}: no records; expected one note per JSONL line, CSV/parquet row or .txt file.")
    done: Counter[str] = Counter()
    if to_file:
        out = Path(output)
        partial = out.with_name(out.name + ".partial")
        sidecar = out.with_name(out.name + ".partial.json")
        settings = _settings(predictor, input=input, fmt=fmt, top_k=top_k, threshold=threshold, explain=explain, shard=shard)
        if partial.exists() and (partial.is_dir() or not is_predict_output(partial)):
            raise ConfigError(f"{partial} exists and was not written by `clinicode predict`; move it away or choose another --output.")
        if resume and partial.is_file():
            _check_resumable(sidecar, settings, partial)
            _truncate_torn_tail(partial)
            done = _done_ids(partial, fmt)
        elif resume and out.is_file():
            raise ConfigError(f"--resume: {out} is a finished output and there is no {partial.name} to continue; write new "
                              "notes to another --output, or drop --resume to score everything again.")
        if not done:
            write_json_atomic(sidecar, settings)  # before the first record, so every OUT.partial has its settings
    writer = _Writer(output, fmt=fmt, append=resume and bool(done))
    counts = {"scored": 0, "errors": 0, "skipped": 0}
    seen: set[str] = set()
    bar = tqdm(desc="notes", unit="note", disable=not progress, file=sys.stderr)

    def write(chunk: list[Record], preds_list: list) -> None:
        preds = iter(preds_list)
        for r in chunk:
            rec = {"id": r.id, "error": r.error} if r.error is not None else next(preds).to_dict()
            if "error" in rec:
                counts["errors"] += 1
                if on_bad:
                    on_bad(rec["error"])
                if strict:
                    writer.flush()
                    raise DataFormatError(f"{rec['error']} (--strict stops at the first bad record; drop --strict to skip it)")
            else:
                counts["scored"] += 1
            writer.write(rec)
        writer.flush()
        bar.update(len(chunk))

    def chunks():
        chunk: list[Record] = []
        for pos, rec in enumerate(itertools.chain([first], records)):
            if pos % n_shard != i_shard:
                continue
            if rec.id in seen:
                counts["duplicate_ids"] = counts.get("duplicate_ids", 0) + 1
            seen.add(rec.id)
            if done[rec.id] > 0:
                done[rec.id] -= 1
                counts["skipped"] += 1
                continue
            chunk.append(rec)
            if len(chunk) >= CHUNK:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def prepare(chunk: list[Record]):
        good = [r for r in chunk if r.error is None]
        return predictor.prepare([r.text for r in good], ids=[r.id for r in good], explain=explain)

    # Reading and tokenising the next chunk (a worker thread; the Rust tokenizer releases the GIL) overlaps scoring and
    # writing the current one; records still come out in input order.
    with ThreadPoolExecutor(max_workers=1) as pool:
        source = chunks()
        current = next(source, None)
        pending = pool.submit(prepare, current) if current is not None else None
        while current is not None:
            prepared = pending.result()
            upcoming = next(source, None)
            pending = pool.submit(prepare, upcoming) if upcoming is not None else None
            write(current, predictor.finish(prepared, top_k=top_k, threshold=threshold, explain=explain, attention=False))
            current = upcoming
    bar.close()
    writer.finish()
    if to_file:
        Path(output).with_name(Path(output).name + ".partial.json").unlink(missing_ok=True)
    return counts


def _settings(predictor: Predictor, *, input: str | Path, fmt: str, top_k: int | None, threshold: float | None,
              explain: int, shard: tuple[int, int]) -> dict[str, Any]:
    """What decides the records a run writes: checkpoint (its manifest, which hashes every file) and options."""
    manifest = json.dumps(predictor.checkpoint.manifest, sort_keys=True).encode("utf-8")
    return {
        "kind": PARTIAL_KIND,
        "checkpoint": str(predictor.checkpoint.path),
        "checkpoint_sha256": hashlib.sha256(manifest).hexdigest(),
        "input": "-" if str(input) == "-" else os.path.realpath(input),
        "format": fmt,
        "top_k": top_k,
        "threshold": predictor.threshold if threshold is None else float(threshold),
        "explain": explain,
        "shard": list(shard),
        "environment": environment_hash(),  # recorded, not compared: a resume may follow an upgrade
    }


def _check_resumable(sidecar: Path, settings: dict[str, Any], partial: Path) -> None:
    """Refuse to append to OUT.partial unless it was written with the same checkpoint, input and options."""
    try:
        saved = read_json(sidecar)
    except (OSError, ValueError):
        saved = None
    if not isinstance(saved, dict) or saved.get("kind") != PARTIAL_KIND:
        raise ConfigError(f"--resume: {partial} has no readable record of the run that wrote it ({sidecar.name}), so it "
                          "cannot be continued safely; drop --resume to score everything again.")
    names = {"checkpoint_sha256": "checkpoint", "input": "--input", "format": "output format", "top_k": "--top-k",
             "threshold": "--threshold", "explain": "--explain", "shard": "--shard"}
    diff = [f"{label} {saved.get(k)!r} then {settings[k]!r}" for k, label in names.items() if saved.get(k) != settings[k]]
    if diff:
        if saved.get("checkpoint_sha256") != settings["checkpoint_sha256"]:
            diff[0] = f"checkpoint {saved.get('checkpoint')} then {settings['checkpoint']}"
        raise ConfigError(f"--resume: {partial} was written with other settings ({'; '.join(diff)}); repeat the original "
                          "options, or drop --resume to score everything again.")


def _truncate_torn_tail(p: Path) -> None:
    """Drop a partial last line left by a kill, so appended records start on a fresh line (JSONL and CSV).

    Every complete record ends in a newline (CSV rows in \\r\\n), so a file that does not end in one ends in
    a torn record.
    """
    if not p.is_file() or p.stat().st_size == 0:
        return
    with open(p, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:  # scan back block by block for the last newline (outputs can be large)
            start = max(0, pos - (1 << 16))
            f.seek(start)
            block = f.read(pos - start)
            if pos == end and block.endswith(b"\n"):
                return
            nl = block.rfind(b"\n")
            if nl >= 0:
                f.truncate(start + nl + 1)
                return
            pos = start
        f.truncate(0)
