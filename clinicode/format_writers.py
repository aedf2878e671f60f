"""The output formats' writers (jsonl, csv, fhir): a record as its line, row or Bundle, and the ids a partial file
holds (`predict --resume`). `clinicode.formats` registers them."""

from __future__ import annotations

import csv
import json
from collections import Counter
from typing import Any, Mapping, TextIO

CSV_HEADER = ("id", "predicted", "scores", "truncated", "error", "suggested", "from_terminology")


def record_line(rec: Mapping[str, Any]) -> str:
    """One output record (`Prediction.to_dict()`) as its JSONL line, newline included."""
    return json.dumps(rec, ensure_ascii=False) + "\n"


def csv_row(rec: Mapping[str, Any]) -> list[Any]:
    """One output record as the row of the CSV output (columns `CSV_HEADER`)."""
    pred = ";".join(p["code"] for p in rec.get("predicted", []))
    suggested = ";".join(p["code"] for p in rec.get("suggested", []))  # from the titles, not predictions (#43)
    # predicted codes no training note carried, scored from a terminology's titles alone (`source`, #50)
    terms = ";".join(p["code"] for p in rec.get("predicted", []) if p.get("source") == "terminology")
    return [rec["id"], pred, json.dumps(rec.get("scores", {})), rec.get("truncated", ""), rec.get("error", ""),
            suggested, terms]


def jsonl_writer(f: TextIO, *, header: bool = True, context: Mapping[str, Any] | None = None):
    return lambda rec, note=None: f.write(record_line(rec))


def csv_writer(f: TextIO, *, header: bool = True, context: Mapping[str, Any] | None = None):
    w = csv.writer(f)
    if header:
        w.writerow(CSV_HEADER)
    return lambda rec, note=None: w.writerow(csv_row(rec))


def fhir_writer(f: TextIO, *, header: bool = True, context: Mapping[str, Any] | None = None):
    """One Bundle a record and line; CONTEXT: `systems` and `source` (`clinicode.fhir.code_systems`,
    `predictor_source`), so each Bundle names the checkpoint that suggested its codes. NOTE, the input record
    (`clinicode.records.Record`) when given: a DocumentReference's `subject` and its `document` link go into the
    Bundle as `$analyze` puts them (`clinicode.fhir.note_from_document_reference`, then `bundle`)."""
    from clinicode.fhir import bundle

    ctx = dict(context or {})

    def write(rec: Mapping[str, Any], note: Any = None) -> None:
        subject, document = getattr(note, "subject", None), getattr(note, "document", None)
        f.write(record_line(bundle([rec], systems=ctx.get("systems"), source=ctx.get("source"),
                                   subjects=[subject], documents=[document], family=ctx.get("family"))))

    return write


def jsonl_done(f: TextIO) -> Counter[str]:
    done: Counter[str] = Counter()
    for line in f:
        try:
            done[str(json.loads(line)["id"])] += 1
        except (json.JSONDecodeError, KeyError, TypeError):
            break  # a torn last line from a kill: re-score from here
    return done


def csv_done(f: TextIO) -> Counter[str]:
    rows = csv.reader(f)
    done: Counter[str] = Counter()
    for row in rows:
        # the header, and again where a resumed run's part starts (a part written before the last column was added
        # holds the header without it)
        if row and row != list(CSV_HEADER)[:len(row)]:
            done[row[0]] += 1
    return done


def fhir_document(records: list[Mapping[str, Any]], context: Mapping[str, Any]) -> Any:
    """One Bundle of all the batch's notes (serve's ?format=fhir), each with its subject."""
    from clinicode.fhir import bundle

    return bundle(records, systems=context.get("systems"), subjects=context.get("subjects"),
                  source=context.get("source"), request_id=context.get("request_id"),
                  family=context.get("family"))
