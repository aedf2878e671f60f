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


def blind_to(db: ReviewStore, reviewer: str) -> set[str]:
    """The notes REVIEWER double codes that are not adjudicated yet: until then they may see only their own decisions
    and time on them (`ReviewStore.note` shows them nothing else either)."""
    return {r[0] for r in db.read("SELECT a.note FROM assignments a JOIN notes n ON n.id = a.note "
                                  "WHERE a.reviewer = ? AND n.status != 'done'", (reviewer,))}


def _double_coded(db: ReviewStore) -> list[dict[str, Any]]:
    """Notes both coders finished: their coders (in assignment order), each coder's codes, the model's suggestions,
    and the final codes when adjudicated."""
    coders: dict[str, list[tuple[str, str | None]]] = {}
    for r in db.read("SELECT note, reviewer, finished_at FROM assignments ORDER BY rowid"):
        coders.setdefault(r[0], []).append((r[1], r[2]))
    status = {r[0]: r[1] for r in db.read("SELECT id, status FROM notes WHERE id IN (SELECT note FROM assignments)")}
    log: dict[str, list[dict[str, Any]]] = {}
    for r in db.read("SELECT note, code, action, reviewer, source FROM decisions WHERE note IN "
                     "(SELECT note FROM assignments) ORDER BY id"):
        log.setdefault(r["note"], []).append(dict(r))
    suggested: dict[str, set[str]] = {}
    for r in db.read("SELECT note, code FROM suggestions WHERE note IN (SELECT note FROM assignments)"):
        suggested.setdefault(r[0], set()).add(r[1])
    out = []
    for note, pair in coders.items():
        if len(pair) != 2 or any(f is None for _, f in pair):
            continue
        rows = log.get(note, [])
        codes = {c: _coded(state_of(r for r in rows if r["reviewer"] == c and r["source"] != "adjudication"))
                 for c, _ in pair}
        final = _coded(state_of(rows)) if status.get(note) == "done" else None
        out.append({"note": note, "coders": [c for c, _ in pair], "codes": codes, "final": final,
                    "suggested": suggested.get(note, set())})
    return out


def _coded(state: dict[str, str]) -> set[str]:
    return {c for c, a in state.items() if a in ("accept", "add")}


def _named(n: dict[str, Any]) -> set[str]:
    """The codes anyone named on a double-coded note: either coder, the model, the adjudicator."""
    return set().union(*n["codes"].values(), n["suggested"], n["final"] or ())


def _cells(notes: Sequence[dict[str, Any]], codes: Sequence[str] | None, a: Any, b: Any) -> tuple[list[int], list[int]]:
    """Binary cells (note, code) of NOTES for the code sets a(note) and b(note): over CODES on every note, or over
    each note's own named codes when CODES is None."""
    x: list[int] = []
    y: list[int] = []
    for n in notes:
        for code in (codes if codes is not None else sorted(_named(n))):
            x.append(int(code in a(n)))
            y.append(int(code in b(n)))
    return x, y


def agreement(db: ReviewStore, *, reviewer: str | None = None) -> dict[str, Any]:
    """Agreement of double coders on the notes both finished.

    Kappa is Cohen's, binary (1 = the code was coded), over (note, code) cells. `overall_kappa` takes every note x
    every code anyone (a coder, the model, an adjudicator) named on any of those notes; `overall_kappa_note_codes`
    takes each note x only the codes named on that note (a code never named on a note adds no agreed 0 cells there,
    so it is usually the lower figure). Per code: over the notes, between each note's first and second coder, with
    how often each coded it. Per pair of coders (`per_pair`): over that pair's notes x the codes named on them. Per
    coder: with the other coder and with the adjudicated final codes, over their notes x the codes named on them
    (another pair's notes and codes never enter). REVIEWER: a coder asking; the notes still blind to them (assigned
    to them, not adjudicated) are left out, so nothing of the other coder's decisions shows (`blind_notes` counts
    them).
    """
    blind = blind_to(db, reviewer) if reviewer is not None else set()
    notes = [n for n in _double_coded(db) if n["note"] not in blind]
    codes = sorted(set().union(*map(_named, notes))) if notes else []
    per_code = {}
    for code in codes:
        a = [int(code in n["codes"][n["coders"][0]]) for n in notes]
        b = [int(code in n["codes"][n["coders"][1]]) for n in notes]
        per_code[code] = {"notes": len(notes), "first": sum(a), "second": sum(b),
                          "agree": sum(x == y for x, y in zip(a, b)), "kappa": kappa(a, b)}

    def between(group: Sequence[dict[str, Any]], me: str | None = None) -> dict[str, Any]:
        """kappa of GROUP's two coders over its notes x its named codes (ME first, when given)."""
        own = sorted(set().union(*map(_named, group))) if group else []

        def first(n: dict[str, Any]) -> set[str]:
            return n["codes"][me or n["coders"][0]]

        def second(n: dict[str, Any]) -> set[str]:
            return n["codes"][next(c for c in n["coders"] if c != (me or n["coders"][0]))]

        return {"notes": len(group), "codes": len(own), "kappa": kappa(*_cells(group, own, first, second)),
                "kappa_note_codes": kappa(*_cells(group, None, first, second))}

    pairs: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for n in notes:
        pairs.setdefault(tuple(sorted(n["coders"])), []).append(n)
    per_pair = [{"coders": list(p), **between(group)} for p, group in sorted(pairs.items())]
    per_coder = {}
    for me in sorted({c for n in notes for c in n["coders"]}):
        mine = [n for n in notes if me in n["coders"]]
        judged = [n for n in mine if n["final"] is not None]
        own = sorted(set().union(*map(_named, mine)))
        with_final = _cells(judged, own, lambda n: n["codes"][me], lambda n: n["final"])
        per_coder[me] = {"notes": len(mine), "codes": len(own), "kappa_with_other": between(mine, me)["kappa"],
                         "kappa_with_final": kappa(*with_final) if judged else None, "adjudicated_notes": len(judged)}

    def first_coder(n: dict[str, Any]) -> set[str]:
        return n["codes"][n["coders"][0]]

    def second_coder(n: dict[str, Any]) -> set[str]:
        return n["codes"][n["coders"][1]]

    return {"notes": len(notes), "adjudicated": sum(n["final"] is not None for n in notes),
            "waiting": sum(n["final"] is None for n in notes), "codes": len(codes),
            "overall_kappa": kappa(*_cells(notes, codes, first_coder, second_coder)),
            "overall_kappa_note_codes": kappa(*_cells(notes, None, first_coder, second_coder)),
            "per_code": per_code, "per_pair": per_pair, "per_coder": per_coder,
            **({"reviewer": reviewer, "blind_notes": len(blind)} if reviewer is not None else {})}


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


def show(db: ReviewStore, note_id: str, *, reviewer: str | None = None) -> dict[str, Any]:
    """One note for scripts (`review show`), without its text: status, claim, the suggestions (code, title, score,
    rank, source, `terminology`: scored from a terminology's title alone, checkpoint, evidence offsets), the decisions
    so far (`log`: who, when, action, source, was, spans), each code's latest decision (`state`), the final codes'
    evidence spans, and its `coders` when double coded (`assigned`: when each finished).

    A double-coded note not yet adjudicated is blind (`blind`: true): REVIEWER (one of its coders) gets only their
    own decisions and finishing time; anyone else, none of them.

    Raises:
        ReviewError: no such note.
    """
    reviewer = None if reviewer is None else check_reviewer(reviewer)
    n = db.note(note_id, reviewer=reviewer)
    blind = bool(n["assigned"]) and n["status"] != "done"
    sugg = [{k: v for k, v in s.items() if k != "evidence"}
            | {"evidence": [{k: e[k] for k in ("start", "end", "weight") if k in e} for e in s["evidence"]]}
            for s in n["suggestions"]]
    # while blind, when the other coder finished is theirs: only REVIEWER's own finishing time is given
    assigned = {c: f for c, f in n["assigned"].items() if c == reviewer} if blind else n["assigned"]
    return {"id": n["id"], "status": n["status"], "claimed_by": n["claimed_by"], "claim_expires": n["claim_expires"],
            "queued_at": n["queued_at"], "suggestions": sugg, "state": n["state"], "log": n["log"],
            "evidence": n["evidence"], "coders": list(n["assigned"]), "assigned": assigned, "blind": blind,
            **({"reviewer": reviewer} if reviewer is not None else {})}


def work_times(db: ReviewStore, *, reviewer: str | None = None) -> list[dict[str, Any]]:
    """Each reviewer's time on each note: from their first claim or decision to finishing (None while open). `role`:
    "adjudicator" for the one who adjudicated the note (their row times the ruling, not a coding), else "coder".
    REVIEWER: a coder asking; on the notes still blind to them only their own rows are given."""
    blind = blind_to(db, reviewer) if reviewer is not None else set()
    judges = {(r[0], r[1]) for r in db.read("SELECT DISTINCT note, reviewer FROM decisions "
                                            "WHERE source = 'adjudication'")}
    return [{"note": r[0], "reviewer": r[1], "seconds": None if r[3] is None else round(r[3] - r[2], 3),
             "role": "adjudicator" if (r[0], r[1]) in judges else "coder"}
            for r in db.read("SELECT note, reviewer, started, finished FROM work ORDER BY rowid")
            if r[0] not in blind or r[1] == reviewer]


def median_time(times: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """{"median_seconds", "finished"}: the median of coders' finished times per note (`work_times`); adjudications
    are left out (they time a ruling on work already timed). median_seconds is None when none finished."""
    done = sorted(t["seconds"] for t in times if t["seconds"] is not None and t.get("role") != "adjudicator")
    return {"median_seconds": done[len(done) // 2] if done else None, "finished": len(done)}


__all__ = ["SOURCES", "adjudicate", "agreement", "assign", "audit_log", "blind_to", "kappa", "median_time",
           "show", "work_times"]
