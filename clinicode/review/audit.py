"""Double coding and the audit trail: a note assigned to two coders blind to each other's decisions, their agreement
(Cohen's kappa per code and per coder), the adjudication that records the final decision, every change with who,
when, from what, to what and its source, and each coder's time on a note (docs/review.md, "Double coding")."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Mapping, Sequence

from clinicode.review.store import (
    ReviewError,
    ReviewStore,
    check_evidence,
    check_reviewer,
    norm_code,
    note_checkpoint,
    open_note,
    same_code,
    start_work,
    state_of,
    utc_now,
)

SOURCES = ("model", "title", "person", "adjudication")  # who proposed the code a decision is about


def assign(db: ReviewStore, note_ids: Sequence[str], coders: Sequence[str]) -> int:
    """Assign each note to the two CODERS, to be coded blind (all or none). A note may not be finished, already
    double coded, or hold another reviewer's decisions. Returns how many notes were assigned."""
    coders = [check_reviewer(c) for c in coders]
    if len(set(coders)) != 2:
        raise ReviewError(f"double coding needs two different coders (--coder twice), got {', '.join(coders)}.")
    at = utc_now()

    def run(con: sqlite3.Connection) -> int:
        for note_id in note_ids:
            open_note(con, db.path, note_id)
            if con.execute("SELECT 1 FROM assignments WHERE note = ?", (note_id,)).fetchone():
                raise ReviewError(f"note {note_id!r} is double coded already (nothing was assigned).")
            others = {r[0] for r in con.execute("SELECT DISTINCT reviewer FROM decisions WHERE note = ?", (note_id,))}
            if others - set(coders):
                raise ReviewError(f"note {note_id!r} holds decisions of {', '.join(sorted(others - set(coders)))}; "
                                  "double code notes nobody else has decided on (nothing was assigned).")
            con.executemany("INSERT INTO assignments (note, reviewer, assigned_at) VALUES (?, ?, ?)",
                            [(note_id, c, at) for c in coders])
            con.execute("UPDATE notes SET claimed_by = NULL, claim_expires = NULL WHERE id = ?", (note_id,))
        return len(note_ids)

    return db.write(run)


def adjudicate(db: ReviewStore, note_id: str, reviewer: str, codes: Sequence[str], *,
               evidence: Mapping[str, Sequence[tuple[int, int]]] | None = None,
               now: float | None = None) -> dict[str, Any]:
    """Record the final codes of a double-coded note both coders finished, and finish it.

    Every code either coder or the model named gets a decision by REVIEWER with source "adjudication" (accept or
    add when in CODES, reject otherwise), so the note's final state is the adjudicator's whatever the coders said.
    EVIDENCE: {code: [(start, end), ...]} of final codes, the words the adjudicator kept them on (checked as
    `decide` checks them); a final code without it keeps the spans of the coders who kept it.
    """
    reviewer = check_reviewer(reviewer)
    now = time.time() if now is None else now
    final = [norm_code(c) for c in codes]
    given = [(norm_code(c), spans) for c, spans in (evidence or {}).items()]
    system = db.code_system(note_id)

    def run(con: sqlite3.Connection) -> dict[str, Any]:
        n = open_note(con, db.path, note_id)
        coders = {r[0]: r[1] for r in con.execute("SELECT reviewer, finished_at FROM assignments WHERE note = ?",
                                                  (note_id,))}
        if not coders:
            raise ReviewError(f"note {note_id!r} is not double coded; decide on it with `clinicode review decide`.")
        waiting = sorted(c for c, f in coders.items() if f is None)
        if waiting:
            raise ReviewError(f"note {note_id!r}: {' and '.join(waiting)} not finished yet; adjudicate once both "
                              "coders finished.")
        if reviewer in coders:
            raise ReviewError(f"note {note_id!r}: {reviewer} coded it; someone else adjudicates.")
        suggested = {r[0] for r in con.execute("SELECT code FROM suggestions WHERE note = ?", (note_id,))}
        per_coder = {c: state_of([dict(r) for r in con.execute(
            "SELECT code, action FROM decisions WHERE note = ? AND reviewer = ? ORDER BY id", (note_id, c))])
            for c in coders}
        named = suggested | {c for s in per_coder.values() for c in s}
        chosen = [same_code(system, c, named) or c for c in final]
        unknown = [c for c in chosen if c not in named]
        if unknown:
            raise ReviewError(f"note {note_id!r}: {unknown[0]} was named by neither coder nor the model; the final "
                              "codes are chosen from theirs.")
        spans = check_evidence(note_id, given, system, chosen, len(n["text"]), keeps="--code {code}")
        at, sha = utc_now(), note_checkpoint(con, note_id)
        rows = []
        for c in sorted(named):
            action = ("accept" if c in suggested else "add") if c in chosen else "reject"
            was = "/".join(f"{k}:{per_coder[k].get(c, '-')}" for k in sorted(coders))
            rows.append((note_id, c, action, reviewer, at, sha, "adjudication", was, spans.get(c)))
        rows.append((note_id, None, "done", reviewer, at, sha, "adjudication", None, None))
        con.executemany("INSERT INTO decisions (note, code, action, reviewer, at, checkpoint_sha256, source, was, "
                        "spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        start_work(con, note_id, reviewer, now)
        con.execute("UPDATE work SET finished = ? WHERE note = ? AND reviewer = ? AND finished IS NULL",
                    (now, note_id, reviewer))
        con.execute("UPDATE notes SET status = 'done', claimed_by = NULL, claim_expires = NULL WHERE id = ?",
                    (note_id,))
        return {"note": note_id, "codes": sorted(chosen), "coders": per_coder}

    return db.write(run)


def kappa(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Cohen's kappa of two raters' labels of the same items (as sklearn's `cohen_kappa_score`); None when chance
    agreement is 1 (both raters gave one and the same label throughout: kappa is undefined)."""
    n = len(a)
    if n != len(b):
        raise ValueError(f"kappa needs the same items from both raters, got {n} and {len(b)}.")
    if n == 0:
        return None
    labels = sorted(set(a) | set(b), key=str)
    observed = sum(x == y for x, y in zip(a, b)) / n
    expected = sum((sum(x == lab for x in a) / n) * (sum(y == lab for y in b) / n) for lab in labels)
    if expected >= 1:
        return None
    return (observed - expected) / (1 - expected)


def _double_coded(db: ReviewStore) -> list[dict[str, Any]]:
    """Notes both coders finished: their coders (in assignment order), each coder's codes, and the final codes when
    adjudicated."""
    coders: dict[str, list[tuple[str, str | None]]] = {}
    for r in db.read("SELECT note, reviewer, finished_at FROM assignments ORDER BY rowid"):
        coders.setdefault(r[0], []).append((r[1], r[2]))
    status = {r[0]: r[1] for r in db.read("SELECT id, status FROM notes WHERE id IN (SELECT note FROM assignments)")}
    log: dict[str, list[dict[str, Any]]] = {}
    for r in db.read("SELECT note, code, action, reviewer, source FROM decisions WHERE note IN "
                     "(SELECT note FROM assignments) ORDER BY id"):
        log.setdefault(r["note"], []).append(dict(r))
    out = []
    for note, pair in coders.items():
        if len(pair) != 2 or any(f is None for _, f in pair):
            continue
        rows = log.get(note, [])
        codes = {c: _coded(state_of(r for r in rows if r["reviewer"] == c and r["source"] != "adjudication"))
                 for c, _ in pair}
        final = _coded(state_of(rows)) if status.get(note) == "done" else None
        out.append({"note": note, "coders": [c for c, _ in pair], "codes": codes, "final": final})
    return out


def _coded(state: dict[str, str]) -> set[str]:
    return {c for c, a in state.items() if a in ("accept", "add")}


def agreement(db: ReviewStore) -> dict[str, Any]:
    """Agreement of double coders on the notes both finished.

    Per code: Cohen's kappa over those notes between each note's first and second coder (1 = the code was coded),
    with how often each coded it. Per coder: kappa with the other coder over every (note, code) cell of their notes
    (codes: all codes anyone or the model named on those notes), and with the adjudicated final codes where there is
    one. Overall: kappa over every cell.
    """
    notes = _double_coded(db)
    suggested: dict[str, set[str]] = {}
    for r in db.read("SELECT note, code FROM suggestions WHERE note IN (SELECT note FROM assignments)"):
        suggested.setdefault(r[0], set()).add(r[1])
    codes = sorted({c for n in notes for s in n["codes"].values() for c in s}
                   | {c for n in notes for c in suggested.get(n["note"], ())}
                   | {c for n in notes for c in (n["final"] or ())})
    per_code = {}
    for code in codes:
        a = [int(code in n["codes"][n["coders"][0]]) for n in notes]
        b = [int(code in n["codes"][n["coders"][1]]) for n in notes]
        per_code[code] = {"notes": len(notes), "first": sum(a), "second": sum(b),
                          "agree": sum(x == y for x, y in zip(a, b)), "kappa": kappa(a, b)}
    cells: dict[str, tuple[list[int], list[int], list[int], list[int]]] = {}
    all_a: list[int] = []
    all_b: list[int] = []
    for n in notes:
        first, second = n["coders"]
        for code in codes:
            x, y = int(code in n["codes"][first]), int(code in n["codes"][second])
            all_a.append(x)
            all_b.append(y)
            for me, mine, theirs in ((first, x, y), (second, y, x)):
                c = cells.setdefault(me, ([], [], [], []))
                c[0].append(mine)
                c[1].append(theirs)
                if n["final"] is not None:
                    c[2].append(mine)
                    c[3].append(int(code in n["final"]))
    per_coder = {me: {"notes": len(c[0]) // max(len(codes), 1), "kappa_with_other": kappa(c[0], c[1]),
                      "kappa_with_final": kappa(c[2], c[3]) if c[2] else None,
                      "adjudicated_notes": len(c[2]) // max(len(codes), 1)}
                 for me, c in sorted(cells.items())}
    return {"notes": len(notes), "adjudicated": sum(n["final"] is not None for n in notes),
            "waiting": sum(n["final"] is None for n in notes), "codes": len(codes),
            "overall_kappa": kappa(all_a, all_b), "per_code": per_code, "per_coder": per_coder}


def audit_log(db: ReviewStore) -> list[dict[str, Any]]:
    """Every decision: note, code, action (to what), was (from what: the code's earlier state for that reviewer, or
    each coder's for an adjudication), reviewer, at, source, checkpoint (the one whose suggestions the note showed;
    for rows written before schema 5, the note's), spans (the [start, end] character offsets the coder gave as
    evidence for an accept or add; None when none were given). Offsets only, no note text."""
    rows = [dict(r) for r in db.read("SELECT id, note, code, action, was, reviewer, at, source, checkpoint_sha256, "
                                     "spans FROM decisions ORDER BY id")]
    for r in rows:
        if r["checkpoint_sha256"] is None:
            r["checkpoint_sha256"] = note_checkpoint(db.con, r["note"])
        r["spans"] = json.loads(r["spans"]) if r["spans"] else None
    return rows


def work_times(db: ReviewStore) -> list[dict[str, Any]]:
    """Each reviewer's time on each note: from their first claim or decision to finishing (None while open)."""
    return [{"note": r[0], "reviewer": r[1], "seconds": None if r[3] is None else round(r[3] - r[2], 3)}
            for r in db.read("SELECT note, reviewer, started, finished FROM work ORDER BY rowid")]


__all__ = ["SOURCES", "adjudicate", "agreement", "assign", "audit_log", "kappa", "work_times"]
