"""Batch scoring of files: notes in (`clinicode.records`), one output record per note out through a format's writer.

`predict_file` (resume, output claimed and marked through `files.PartialFile`), `score_records` (the chunked scorer)."""

from __future__ import annotations

import errno
import functools
import itertools
import os
import sys
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from clinicode import formats
from clinicode.config import PREDICT, check_threshold
from clinicode.environment import environment_hash
from clinicode.errors import ConfigError, DataFormatError
from clinicode.file_inputs import input_fingerprint
from clinicode.files import (
    PartialFile,
    check_output,
    is_marked_file,
    read_json,
    write_json_atomic,
)
from clinicode.format_writers import CSV_HEADER, csv_row, record_line  # noqa: F401  (the output's writers)
from clinicode.predict import Prediction, Predictor
from clinicode.records import Record, read_records

CHUNK = 256
PARTIAL_KIND = "predict-partial"
OUTPUT_KIND = "predict-output"


def offered_writers(where: str) -> list[formats.Writer]:
    """The output formats offered by WHERE ("app": the app's downloads; "serve": its ?format=), from the registry."""
    return formats.offered(where)


def records_bytes(records: Iterable[Mapping[str, Any]], *, fmt: str = "jsonl",
                  context: Mapping[str, Any] | None = None) -> bytes:
    """Output records as a whole file in memory, byte for byte what `predict_file` writes (for the app's downloads).

    Args:
        records: `Prediction.to_dict()` records.
        fmt: an output format of `clinicode.formats` ("jsonl", "csv" or "fhir").
        context: what the format needs beyond the records (fhir: `systems`, `source`).
    Returns:
        UTF-8 bytes.
    """
    return formats.writer(fmt).to_bytes(records, context=context)


def score_records(
    predictor: Predictor,
    records: Iterable[Record],
    *,
    top_k: int | None = PREDICT.top_k,
    threshold: float | None = None,
    explain: int = PREDICT.explain,
    chunk: int | None = None,
) -> Iterator[tuple[list[Record], list[Prediction]]]:
    """Score records a chunk at a time: each chunk with one `Prediction` per record, in input order.

    A bad record (one with `error`) gets `Prediction(id, error=...)` and is never scored. Tokenising the next chunk
    (a worker thread; the Rust tokenizer releases the GIL) overlaps scoring the current one.

    Args:
        predictor: the loaded model.
        records: input records (`clinicode.records.read_records`).
        top_k, threshold, explain: as `Predictor.predict` (attention spans are never computed: records omit them).
        chunk: records per chunk (default `CHUNK`).
    Yields:
        (the chunk's records, their predictions).
    """
    size = CHUNK if chunk is None else chunk

    def chunks() -> Iterator[list[Record]]:
        part: list[Record] = []
        for rec in records:
            part.append(rec)
            if len(part) >= size:
                yield part
                part = []
        if part:
            yield part

    def prepare(part: list[Record]):
        good = [r for r in part if r.error is None]
        return predictor.prepare([r.text for r in good], ids=[r.id for r in good], explain=explain)

    with ThreadPoolExecutor(max_workers=1) as pool:
        source = chunks()
        current = next(source, None)
        pending = pool.submit(prepare, current) if current is not None else None
        while current is not None:
            prepared = pending.result()
            upcoming = next(source, None)
            pending = pool.submit(prepare, upcoming) if upcoming is not None else None
            preds = iter(predictor.finish(prepared, top_k=top_k, threshold=threshold, explain=explain, attention=False))
            yield current, [Prediction(r.id, error=r.error) if r.error is not None else next(preds) for r in current]
            current = upcoming


class _Writer:
    """JSONL or CSV records to OUT.partial (locked while open); `finish()` marks and renames it to OUT."""

    def __init__(self, out: str | Path, *, fmt: str, append: bool, claim: PartialFile | None = None,
                 run_id: str = "", context: Mapping[str, Any] | None = None) -> None:
        self.stdout = str(out) == "-"
        self.fmt = fmt
        self.run_id = run_id
        if self.stdout:
            self.f = sys.stdout
        else:
            assert claim is not None and claim.fd is not None  # the locked OUT.partial (`PartialFile.lock`)
            self.claim = claim
            self.partial = claim.partial
            fd = claim.fd
            if append:
                os.lseek(fd, 0, os.SEEK_END)
            else:
                os.ftruncate(fd, 0)
            self.f = open(fd, "w", encoding="utf-8", newline="", closefd=True)
        self.write = formats.writer(fmt).open(self.f, header=not (append and self.partial.stat().st_size > 0),
                                              context=context)

    def flush(self) -> None:
        self.f.flush()
        if not self.stdout:
            os.fsync(self.f.fileno())

    def close(self) -> None:
        """Release the lock without finishing (an error stopped the run; OUT.partial stays for --resume)."""
        if not self.stdout and not self.f.closed:
            try:
                self.f.close()
            except OSError:  # its last flush failed (a full disk): the error being raised already says so
                pass

    def finish(self) -> None:
        self.flush()
        if not self.stdout:
            self.claim.publish(self.run_id)  # the marker, then the rename to OUT
            self.f.close()  # releases the lock, after the rename


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file-size limit


def _write_failed(err: OSError, path: Path, *, started: bool) -> Exception:
    """The one line for an output that could not be written (a full disk above all): names the file and what to do
    next. STARTED: records were being written to PATH (OUT.partial), which is kept for --resume."""
    if err.errno not in _NO_ROOM:
        return err
    what = err.strerror or "no space left"
    if started:
        return ConfigError(f"{what} while writing {path}; free space (or choose another --output), then run the "
                           f"same command with --resume to continue from the records in {path.name}, or without "
                           "--resume to start over (it is replaced).")
    return ConfigError(f"{what} while writing {path} (nothing was written); free space or choose another --output, "
                       "then run the command again.")


# Endings that promise a compressed or binary file, which predict does not write: refused, never plain JSONL under them.
_NOT_WRITTEN = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".zip": "zip", ".parquet": "Parquet"}


def check_output_suffix(output: str | Path) -> None:
    """Refuse an --output whose ending names a compressed or binary format (.jsonl.gz, .parquet, ...): predict writes
    plain text (JSONL, CSV or FHIR NDJSON) and would otherwise write it under a name that says otherwise."""
    end = Path(str(output).lower()).suffix
    if end in _NOT_WRITTEN:
        raise ConfigError(f"--output {output}: predict writes plain text (JSONL, CSV or FHIR NDJSON), not "
                          f"{_NOT_WRITTEN[end]}; name the output .jsonl or .csv and convert the finished file "
                          "(e.g. `gzip OUT.jsonl`; Parquet: pandas.read_json(OUT, lines=True).to_parquet(...)).")


def _done_ids(p: Path, fmt: str) -> Counter[str]:
    """How many records each id already has in `p` (a multiset, so duplicate input ids resume exactly), as the
    output format reads its own file back (`Writer.done_ids`)."""
    read = formats.writer(fmt).done_ids
    if not p.is_file() or read is None:
        return Counter()
    with open(p, encoding="utf-8", newline="") as f:
        return read(f)


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
    input_format: str | None = None,
    output_format: str | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Score every record of `input` into `output` (JSONL, or CSV when output ends in .csv).

    Args:
        shard: (i, n): score only records whose position p satisfies p % n == i (deterministic).
        resume: skip ids already present in OUT.partial (or, when there is none, in OUT) and append to it; an id
            that occurs n times in the input is skipped as often as it already occurs in the output.
        input_format: a reader of `clinicode.formats` (None: by the input's name).
        output_format: a writer of `clinicode.formats` (None: CSV when output ends in .csv, else JSONL); "fhir"
            writes one Bundle a line, built with CONTEXT (`systems`, `source`), and cannot --resume.
    Returns:
        counts: {"scored", "errors", "skipped"}, plus "duplicate_ids" (records repeating an earlier id) when there
            are any; such records are scored like any other.
    Raises:
        DataFormatError: an unreadable or empty input; with strict=True, the first bad record.
        ConfigError: an output that is not a regular file or new, not clinicode's, or being written by another run.
    """
    fmt = formats.writer(output_format).name if output_format else formats.writer_for(str(output)).name
    if threshold is not None:
        check_threshold(threshold)  # before any output is claimed (the rule of every face: clinicode.config)
    _check_output_format(fmt, output, resume=resume)
    to_file = str(output) != "-"
    if to_file:
        check_output_suffix(output)
        # a link: its target is written (the link stays)
        output = check_output(Path(output), option="--output", command="predict", folder=False,
                              recognise=functools.partial(is_marked_file, kind=OUTPUT_KIND),
                              inputs={"--input": input, "--checkpoint": predictor.checkpoint.path})
    records = read_records(input, input_format)
    first = next(records, None)  # file-level input errors surface here, before OUT.partial is created
    if first is None:
        raise DataFormatError(f"--input {input}: no records; expected one note per JSONL line, "
                              "CSV/parquet row or .txt file.")
    done: Counter[str] = Counter()
    claim: PartialFile | None = None
    run_id = uuid.uuid4().hex
    if to_file:
        settings = _settings(predictor, input=input, fmt=fmt, top_k=top_k, threshold=threshold, explain=explain,
                             shard=shard, run_id=run_id)
        claim, done = _claim_output(Path(output), fmt=fmt, resume=resume, settings=settings)
    writer = _Writer(output, fmt=fmt, append=resume and bool(done), claim=claim, run_id=run_id, context=context)
    try:
        counts = _score(predictor, writer, first, records, done, shard=shard, top_k=top_k, threshold=threshold,
                        explain=explain, strict=strict, progress=progress, on_bad=on_bad)
        writer.finish()
    except OSError as err:
        if claim is None or err.errno not in _NO_ROOM:
            raise
        raise _write_failed(err, claim.partial, started=True) from None
    finally:
        writer.close()
    if claim is not None:
        claim.drop_sidecar()
    return counts


def _check_output_format(fmt: str, output: str | Path, *, resume: bool) -> None:
    """Refuse a writer FMT under a name promising another format, and --resume where FMT or stdout cannot resume."""
    chosen = formats.writer(fmt)
    other = formats.writer_for(str(output))  # the format the output's name promises (the default: any other name)
    # a format without a file ending of its own (fhir: JSON lines) under a name that promises another (.csv)
    if not chosen.suffixes and other is not chosen and other is not formats.writer_for("-"):
        raise ConfigError(f"--format {fmt} writes {chosen.what}: give an --output not ending in "
                          f"{formats.suffix(str(output))} (that is {other.name}'s ending).")
    if resume and chosen.done_ids is None:
        raise ConfigError(f"--format {fmt} cannot resume: drop --resume (its output is written whole; rerun to "
                          "replace it).")
    if resume and str(output) == "-":
        raise ConfigError("--resume continues the OUT.partial of an --output file; output to stdout (--output -) "
                          "cannot be continued: give --output FILE, or drop --resume to score everything again.")


def _claim_output(out: Path, *, fmt: str, resume: bool, settings: dict[str, Any]) -> tuple[PartialFile, Counter[str]]:
    """Check and lock OUT.partial; with RESUME, the ids it already holds (else its new sidecar, SETTINGS, is written).

    OUT.partial, flushed per chunk, is renamed to OUT at the end (a killed run leaves no half-written OUT); its sidecar
    OUT.partial.json records the checkpoint, options and input of the run, so a resume with other ones is refused
    instead of mixing models or notes. A finished OUT gets a hidden marker (run id, size, SHA-256): only a file that
    matches it is predict's own and may be replaced.

    Raises:
        ConfigError: a file predict did not write, a finished OUT to resume, another run writing it.
    """
    claim = PartialFile(out, kind=OUTPUT_KIND, partial_kind=PARTIAL_KIND, command="predict", option="--output")
    partial, sidecar = claim.partial, claim.sidecar
    claim.check()  # an OUT.partial, sidecar or marker that predict did not write is refused
    if resume and not partial.is_file() and out.is_file():
        raise ConfigError(f"--resume: {out} is a finished output and there is no "
                          f"{partial.name} to continue; write new "
                          "notes to another --output, or drop --resume to score everything again.")
    claim.lock()  # a second run to the same output stops here
    done: Counter[str] = Counter()
    try:
        if resume and claim.existed:
            _check_resumable(sidecar, settings, partial)
            _truncate_torn_tail(partial)
            done = _done_ids(partial, fmt)
        if not done:
            write_json_atomic(sidecar, settings)  # before the first record, so every OUT.partial has its settings
    except OSError as err:
        claim.abandon()
        raise _write_failed(err, sidecar, started=False) from None
    except BaseException:
        claim.abandon()
        raise
    return claim, done


def _score(predictor: Predictor, writer: _Writer, first: Record, records: Any, done: Counter[str], *,
           shard: tuple[int, int], top_k: int | None, threshold: float | None, explain: int, strict: bool,
           progress: bool, on_bad: Callable[[str], None] | None) -> dict[str, int]:
    """Score FIRST and RECORDS (skipping the ids in DONE) into WRITER (which writes each in its format); returns the
    counts."""
    from tqdm.auto import tqdm

    i_shard, n_shard = shard
    counts = {"scored": 0, "errors": 0, "skipped": 0}
    seen: set[str] = set()
    bar = tqdm(desc="notes", unit="note", disable=not progress, file=sys.stderr)

    def write(chunk: list[Record], preds: list[Prediction]) -> None:
        for note, p in zip(chunk, preds):
            rec = p.to_dict()
            if "error" in rec:
                counts["errors"] += 1
                if on_bad:
                    on_bad(rec["error"])
                if strict:
                    writer.flush()
                    raise DataFormatError(f"{rec['error']} (--strict stops at the first bad record; "
                                          "drop --strict to skip it)")
            else:
                counts["scored"] += 1
            writer.write(rec, note=note)
        writer.flush()
        bar.update(len(chunk))

    def todo() -> Iterator[Record]:
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
            yield rec

    for chunk, preds in score_records(predictor, todo(), top_k=top_k, threshold=threshold, explain=explain):
        write(chunk, preds)
    bar.close()
    return counts


def _settings(predictor: Predictor, *, input: str | Path, fmt: str, top_k: int | None, threshold: float | None,
              explain: int, shard: tuple[int, int], run_id: str = "") -> dict[str, Any]:
    """What decides the records a run writes: checkpoint (its manifest, which hashes every file) and options."""
    return {
        "kind": PARTIAL_KIND,
        "checkpoint": str(predictor.checkpoint.path),
        "checkpoint_sha256": predictor.checkpoint.manifest_sha256,
        "input": "-" if str(input) == "-" else os.path.realpath(input),
        "format": fmt,
        "top_k": top_k,
        "threshold": predictor.threshold if threshold is None else float(threshold),
        "explain": explain,
        "shard": list(shard),
        "titles": predictor.suggester.fingerprint if predictor.suggester is not None else None,
        "input_file": None if str(input) == "-" else input_fingerprint(input),
        "run_id": run_id,
        "environment": environment_hash(),  # recorded, not compared: a resume may follow an upgrade
    }


def _check_resumable(sidecar: Path, settings: dict[str, Any], partial: Path) -> None:
    """Refuse to append to OUT.partial unless it was written with the same checkpoint, input and options."""
    try:
        saved = read_json(sidecar)
    except (OSError, ValueError):
        saved = None
    if not isinstance(saved, dict) or saved.get("kind") != PARTIAL_KIND:
        raise ConfigError(f"--resume: {partial} has no readable record of the run that wrote "
                          f"it ({sidecar.name}), so it "
                          "cannot be continued safely; drop --resume to score everything again.")
    names = {"checkpoint_sha256": "checkpoint", "input": "--input", "format": "output format", "top_k": "--top-k",
             "threshold": "--threshold", "explain": "--explain", "shard": "--shard", "titles": "--titles"}
    diff = [f"{label} {saved.get(k)!r} then {settings[k]!r}"
            for k, label in names.items() if saved.get(k) != settings[k]]
    if not diff and (saved.get("input_file") is None or settings["input_file"] is None):
        raise ConfigError(f"--resume: {partial} was written from a stream (stdin or a pipe), "
                          "which cannot be checked for "
                          "changes; drop --resume to score everything again.")
    if not diff and saved.get("input_file") != settings["input_file"]:
        raise ConfigError(f"--resume: --input {settings['input']} changed since {partial.name} was written (its size, "
                          "modification time or first MiB differ); drop --resume to score the "
                          "new notes from the start.")
    if diff:
        if saved.get("checkpoint_sha256") != settings["checkpoint_sha256"]:
            diff[0] = f"checkpoint {saved.get('checkpoint')} then {settings['checkpoint']}"
        raise ConfigError(f"--resume: {partial} was written with other settings "
                          f"({'; '.join(diff)}); repeat the original "
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
