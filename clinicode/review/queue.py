"""`review queue`: score notes with a checkpoint and store them, with their suggestions and evidence, a chunk per
transaction; `review rescore`: score the untouched ones again with a retrained checkpoint."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from clinicode.errors import ConfigError, DataFormatError
from clinicode.records import Record, read_records
from clinicode.review.store import ReviewError, ReviewStore

if TYPE_CHECKING:  # the app lists the queue without importing torch
    from clinicode.predict import Predictor

CHUNK = 256                          # notes scored and stored per transaction by `queue`
EXPLAIN = 5                          # evidence phrases stored per suggested code
SIGNAL_CODES = 200                   # the best-scoring codes a note's next-note signals read (the rest score ~0)


def check_explain(value: Any) -> int:
    """THE bound of `review queue --explain`: evidence phrases stored per suggested code, an integer >= 1 (a queued
    suggestion with no evidence would give the coder nothing to check). The CLI and `queue` ask it, so both say the
    same line.

    Raises:
        ConfigError: anything else, naming the value and the bound.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--explain must be an integer >= 1 (evidence phrases stored per suggested code), got "
                          f"{str(value)[:20]}; e.g. --explain {EXPLAIN}.")
    return value


def queue(db: ReviewStore, predictor: "Predictor", input: str | Path | Any, *, explain: int = EXPLAIN,
          chunk: int = CHUNK, on_bad: Callable[[str], None] | None = None,
          input_format: str | None = None) -> dict[str, int]:
    """Score every note of INPUT (anything `clinicode predict` reads, in INPUT_FORMAT: a reader of
    `clinicode.formats`, e.g. fhir for DocumentReferences; None: by INPUT's name) and queue it with its suggestions.

    Notes whose id is already queued (or repeats an earlier record) are not scored again and change nothing.
    Bad records (no text, invalid JSON, nothing left after tokenising) are reported through `on_bad` and counted.
    Reading and tokenising the next chunk overlaps scoring and storing the current one, as in `predict`.

    Returns:
        {"queued", "already", "errors"}.
    Raises:
        DataFormatError: an unreadable or empty input.
    """
    explain = check_explain(explain)
    records = read_records(input, input_format)
    first = next(records, None)
    if first is None:
        raise DataFormatError(f"--input {input}: no records; expected one note per JSONL line, "
                              "CSV/parquet row or .txt file.")
    sha, ck_path = _register(db, predictor, "queue")
    counts = {"queued": 0, "already": 0, "errors": 0}
    seen: set[str] = set()

    def bad(msg: str) -> None:
        counts["errors"] += 1
        if on_bad:
            on_bad(msg)

    def todo() -> Iterator[Record]:
        """Records not yet queued, checked against the database a chunk at a time; bad records reported here."""
        it = itertools.chain([first], records)
        while True:
            raw = list(itertools.islice(it, chunk))
            if not raw:
                return
            known = db.known_ids(r.id for r in raw if r.error is None)
            for r in raw:
                if r.error is not None:
                    bad(r.error)
                elif r.id in known or r.id in seen:
                    counts["already"] += 1
                else:
                    seen.add(r.id)
                    yield r

    for items, signals in _scored(predictor, todo(), explain=explain, chunk=chunk, bad=bad):
        added = db.add_notes(items, sha256=sha, checkpoint=ck_path, signals=signals)
        counts["queued"] += added
        counts["already"] += len(items) - added  # another process queued them meanwhile
    return counts


def rescore(db: ReviewStore, predictor: "Predictor", *, explain: int = EXPLAIN, chunk: int = CHUNK,
            on_bad: Callable[[str], None] | None = None) -> dict[str, int]:
    """Score the queued notes no one has opened, decided or been assigned again with PREDICTOR's checkpoint (after
    `review retrain`), replacing their suggestions and next-note signals; every other note keeps what its decisions
    were made on. The texts are the database's own.

    Returns:
        {"rescored", "kept": queued notes left as they were, "errors"}.
    """
    explain = check_explain(explain)
    sha, ck_path = _register(db, predictor, "rescore")
    todo = db.untouched()
    total = db.read("SELECT COUNT(*) FROM notes")[0][0]
    counts = {"rescored": 0, "kept": total - len(todo), "errors": 0}

    def bad(msg: str) -> None:
        counts["errors"] += 1
        if on_bad:
            on_bad(msg)

    def records() -> Iterator[Record]:   # the texts a chunk at a time: a queue of long notes never sits in memory
        for k in range(0, len(todo), chunk):
            ids = todo[k:k + chunk]
            yield from (Record(i, t) for i, t in zip(ids, db.texts(ids)))

    for items, signals in _scored(predictor, records(), explain=explain, chunk=chunk, bad=bad):
        done = db.rescore_notes([(i, rec) for i, _, rec in items], sha256=sha, checkpoint=ck_path, signals=signals)
        counts["rescored"] += done
        counts["kept"] += len(items) - done   # opened or decided meanwhile
    return counts


def _register(db: ReviewStore, predictor: "Predictor", command: str) -> tuple[str, str]:
    """Record PREDICTOR's checkpoint (codes, code system) in DB; returns its (manifest SHA-256, path).

    Raises:
        ReviewError: DB's notes were scored in another code system (one queue holds one: a coder's additions, the
            stats and the exports are checked and titled in it); nothing is recorded.
    """
    sha, ck_path = predictor.checkpoint.manifest_sha256, str(predictor.checkpoint.path)
    system = predictor.code_system
    others = [(r[0], r[1]) for r in db.read("SELECT path, system, codes FROM models WHERE sha256 != ? ORDER BY "
                                            "first_used", (sha,))
              if r[1] and db.recorded_system(r[1], r[2]).name != system.name]
    if others:
        path, theirs = others[0]
        fix = ("a checkpoint that codes in " + theirs if command == "rescore" else
               "a new --db for these notes, or a checkpoint that codes in " + theirs)
        raise ReviewError(f"review {command} --checkpoint {ck_path}: it codes in {system.name}, but the queue in "
                          f"{db.path} holds notes scored in {theirs} (by {path}); one queue holds one code system: "
                          f"pass {fix} (nothing was changed).")
    labels = predictor.labels
    db.add_model(sha, ck_path, list(zip(labels.codes, labels.descriptions)), predictor.code_system)
    return sha, ck_path


def _scored(predictor: "Predictor", records: Iterator[Record], *, explain: int, chunk: int,
            bad: Callable[[str], None]) -> Iterator[tuple[list[tuple[str, str, dict[str, Any]]],
                                                      dict[str, tuple[float, float]]]]:
    """Each chunk of RECORDS scored: ([(id, text, Prediction.to_dict())] of the good ones, {id: (uncertainty,
    rarity)}); a record that could not be scored goes to BAD. Predict's own chunked scorer: tokenising the next chunk
    overlaps storing this one (imported here: it loads torch, which `review decide`, `stats` and the app's queue view
    never need)."""
    from clinicode.predict_io import score_records

    signal_of = _signaller(predictor)
    for recs, preds in score_records(predictor, records, top_k=SIGNAL_CODES, explain=explain, chunk=chunk):
        items = []
        for r, p in zip(recs, preds):
            rec = p.to_dict()
            if "error" in rec:
                bad(rec["error"])
            else:
                items.append((r.id, r.text, rec))
        if items:
            signals = signal_of([t for _, t, _ in items], [rec["scores"] for _, _, rec in items])
            yield items, {i: v for (i, _, _), v in zip(items, signals)}


def _signaller(predictor: "Predictor") -> Callable[[list[str], list[dict[str, float]]], list[tuple[float, float]]]:
    """(uncertainty, rarity) of notes from their best SIGNAL_CODES scores, the checkpoint's threshold and training
    counts, and its codes' titles (`teach.signals`; docs/review.md, "Which note next")."""
    import numpy as np

    from clinicode.review import teach

    codes = list(predictor.labels.codes)
    index = {c: k for k, c in enumerate(codes)}
    counts = predictor.checkpoint.train_counts
    n = None if counts is None else [counts.get(c, 0) for c in codes]
    titles = list(predictor.labels.descriptions)

    def run(texts: list[str], scores: list[dict[str, float]]) -> list[tuple[float, float]]:
        probs = np.zeros((len(texts), len(codes)), dtype=np.float32)
        for i, s in enumerate(scores):
            for c, v in s.items():
                probs[i, index[c]] = v
        unc, rare = teach.signals(probs, predictor.threshold, n, teach.title_hits(texts, titles))
        return [(float(u), float(r)) for u, r in zip(unc, rare)]

    return run
