"""`ReviewStore`, an open review database: its transactions (all or nothing, busy files retried) and the reads and
writes every service shares (models, queued notes, claims, finished notes). Open it with `open_store`."""

from __future__ import annotations

import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from clinicode.codes.systems import LOCAL, CodeSystem, as_registered, code_system, family_of, infer_code_system
from clinicode.review.store.errors import RETRIES, ClaimedError, ReviewError, is_busy, translate
from clinicode.review.store.file_rules import COMPANIONS
from clinicode.review.store.rows import (
    CLAIM_MINUTES,
    check_claim,
    check_reviewer,
    final_evidence,
    open_note,
    start_work,
    state_of,
)
from clinicode.review.store.schema import utc_now

# a queued note no one has opened, decided or been assigned: `review rescore` may replace its suggestions
_UNTOUCHED = ("n.status = 'pending' AND n.claimed_by IS NULL "
              "AND NOT EXISTS (SELECT 1 FROM decisions d WHERE d.note = n.id) "
              "AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.note = n.id)")


class ReviewStore:
    """An open review database. Use `open_store` (or `clinicode.review.open_db`); close it (or use it as a context
    manager) when done."""

    def __init__(self, path: Path, con: sqlite3.Connection, *, created: bool = False, readonly: bool = False) -> None:
        self.path = path
        self.con = con
        self.created = created    # this process made the file (a failed first `queue` may remove it again)
        self.readonly = readonly  # opened with mode=ro: reports and exports never write the file

    def __enter__(self) -> "ReviewStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def check_integrity(self) -> None:
        """Run SQLite's integrity check (every page, every index against its table) before a report or an export.

        Raises:
            ReviewError: naming the first problem the check found; a damaged index would otherwise make the report
                count only the rows it still reaches.
        """
        rows = self.read("PRAGMA integrity_check(100)")
        problems = [line.strip() for r in rows for line in str(r[0]).splitlines()
                    if line.strip() and not line.startswith("*** in database")]
        if problems and problems != ["ok"]:
            more = f" and {len(problems) - 1}{'+' if len(problems) >= 100 else ''} more" if len(problems) > 1 else ""
            raise ReviewError(f"review database {self.path} is damaged (integrity check: {problems[0][:160]}{more}); "
                              "nothing was reported or exported. Restore it from a copy, or recover its rows with "
                              "`sqlite3 DB .recover` into a new file.")

    def discard_if_unused(self) -> bool:
        """Close and remove the database when this process created it and it holds no notes (a first `queue` that
        failed): nothing is left behind. Returns whether it was removed."""
        if not self.created or self.readonly:
            return False
        try:
            if self.con.execute("SELECT COUNT(*) FROM notes").fetchone()[0]:
                return False
        except sqlite3.Error:
            return False
        self.close()
        for suffix in ("", *COMPANIONS):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        return True

    # -------------------------------------------------------------------------------------------- transactions
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """The rows of one query (busy databases are retried; SQLite errors become one ReviewError line)."""
        for attempt in range(RETRIES):
            try:
                return self.con.execute(sql, params).fetchall()
            except sqlite3.Error as err:
                if is_busy(err) and attempt + 1 < RETRIES:
                    time.sleep(random.uniform(0.01, 0.1) * (attempt + 1))
                    continue
                raise translate(err, self.path) from None
        raise AssertionError("unreachable")

    def write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn(con) in one IMMEDIATE transaction: all of it is saved or none; busy databases are retried."""
        for attempt in range(RETRIES):
            try:
                self.con.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as err:
                if is_busy(err) and attempt + 1 < RETRIES:
                    time.sleep(random.uniform(0.01, 0.2) * (attempt + 1))
                    continue
                raise translate(err, self.path) from None
            try:
                result = fn(self.con)
                self.con.execute("COMMIT")
                return result
            except BaseException as exc:
                if self.con.in_transaction:
                    try:
                        self.con.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if isinstance(exc, sqlite3.Error):
                    if is_busy(exc) and attempt + 1 < RETRIES:
                        time.sleep(random.uniform(0.01, 0.2) * (attempt + 1))
                        continue
                    raise translate(exc, self.path) from None
                raise
        raise AssertionError("unreachable")

    # -------------------------------------------------------------------------------------------- models, queue
    def add_model(self, sha256: str, path: str, codes: Sequence[tuple[str, str]],
                  system: CodeSystem | None = None) -> None:
        """Record a checkpoint's codes and code system (inferred from the codes when not given)."""
        system = system or infer_code_system(c for c, _ in codes)
        self.write(lambda con: con.execute(
            "INSERT OR IGNORE INTO models (sha256, path, codes, first_used, system) VALUES (?, ?, ?, ?, ?)",
            (sha256, path, json.dumps([list(c) for c in codes]), utc_now(), system.name)))

    def code_system(self, note_id: str | None = None) -> CodeSystem:
        """The code system of the checkpoint that scored NOTE (of every queued checkpoint when None, or when the model
        suggested nothing for the note): what `decide --add` accepts and the export titles. The one place review
        learns a code system: each checkpoint's, recorded when it queued notes."""
        rows = [] if note_id is None else self.read(
            "SELECT system, codes FROM models WHERE sha256 IN (SELECT DISTINCT checkpoint_sha256 FROM suggestions "
            "WHERE note = ?)", (note_id,))
        rows = rows or self.read("SELECT system, codes FROM models")
        systems = [self.recorded_system(r[0], r[1]) for r in rows if r[0]]
        return family_of(systems) if systems else LOCAL

    @staticmethod
    def recorded_system(name: str, codes: str) -> CodeSystem:
        """The system a `models` row records (NAME), or the registered one its CODES (JSON) all belong to when it was
        recorded as local before clinicode knew that system (`as_registered`)."""
        system = code_system(name)
        return as_registered(system, (c for c, _ in json.loads(codes))) if system is LOCAL else system

    def known_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        out: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            rows = self.read(f"SELECT id FROM notes WHERE id IN ({','.join('?' * len(part))})", part)
            out.update(r[0] for r in rows)
        return out

    def add_notes(self, items: Sequence[tuple[str, str, dict[str, Any]]], *, sha256: str, checkpoint: str,
                  signals: dict[str, tuple[float, float]] | None = None) -> int:
        """Queue (id, text, Prediction.to_dict()) triples in one transaction; ids already present are left as they
        are. signals: each note's (uncertainty, rarity) for the next-note rule (`teach`). Returns how many were
        new."""
        now = utc_now()

        def run(con: sqlite3.Connection) -> int:
            added = 0
            for note_id, text, rec in items:
                cur = con.execute("INSERT OR IGNORE INTO notes (id, text, status, queued_at) "
                                  "VALUES (?, ?, 'pending', ?)",
                                  (note_id, text, now))
                if cur.rowcount != 1:
                    continue
                added += 1
                _suggest(con, note_id, rec, sha256, checkpoint, (signals or {}).get(note_id))
            return added

        return self.write(run)

    def untouched(self) -> list[str]:
        """The ids of the queued notes no one has opened, decided or been assigned: what `review rescore` may score
        again."""
        return [r[0] for r in self.read(f"SELECT n.id FROM notes n WHERE {_UNTOUCHED} ORDER BY n.rowid")]

    def texts(self, ids: Sequence[str]) -> list[str]:
        """The texts of notes IDS, in that order (read 500 at a time)."""
        found: dict[str, str] = {}
        for i in range(0, len(ids), 500):
            part = list(ids[i:i + 500])
            found.update((r[0], r[1]) for r in self.read(
                f"SELECT id, text FROM notes WHERE id IN ({','.join('?' * len(part))})", part))
        return [found[i] for i in ids]

    def rescore_notes(self, items: Sequence[tuple[str, dict[str, Any]]], *, sha256: str, checkpoint: str,
                      signals: dict[str, tuple[float, float]] | None = None) -> int:
        """Replace the suggestions and signals of queued notes with another checkpoint's ((id, Prediction.to_dict())
        pairs), in one transaction; a note someone opened, decided or was assigned meanwhile is left as it is.
        Returns how many were replaced."""

        def run(con: sqlite3.Connection) -> int:
            done = 0
            for note_id, rec in items:
                still = con.execute(f"SELECT 1 FROM notes n WHERE n.id = ? AND {_UNTOUCHED}", (note_id,)).fetchone()
                if still is None:
                    continue
                con.execute("DELETE FROM suggestions WHERE note = ?", (note_id,))
                con.execute("DELETE FROM note_signals WHERE note = ?", (note_id,))
                _suggest(con, note_id, rec, sha256, checkpoint, (signals or {}).get(note_id))
                done += 1
            return done

        return self.write(run)

    # -------------------------------------------------------------------------------------------- reading
    def notes(self, *, status: Sequence[str] | None = None, code: str | None = None, min_score: float | None = None,
              now: float | None = None) -> list[dict[str, Any]]:
        """The queue without note text: id, status (pending / in progress / done), claim, suggestion codes, top score.

        status: keep these display statuses; code: notes suggesting (or finally coded with) this code;
        min_score: notes whose best suggestion scores at least this."""
        now = time.time() if now is None else now
        rows = self.read("""
            SELECT n.id, n.status, n.claimed_by, n.claim_expires, n.queued_at,
                   (SELECT MAX(score) FROM suggestions s WHERE s.note = n.id) AS top,
                   (SELECT group_concat(code, ' ')
                      FROM (SELECT code FROM suggestions s WHERE s.note = n.id ORDER BY rank)) AS codes,
                   (SELECT COUNT(*) FROM decisions d WHERE d.note = n.id) AS n_decisions
            FROM notes n ORDER BY n.queued_at, n.rowid""")
        out = []
        for r in rows:
            claimed = r["claimed_by"] is not None and (r["claim_expires"] or 0) > now and r["status"] != "done"
            shown = "done" if r["status"] == "done" else ("in progress" if claimed or r["n_decisions"] else "pending")
            codes = (r["codes"] or "").split()
            if status is not None and shown not in status:
                continue
            if code and code not in codes:
                continue
            if min_score is not None and (r["top"] is None or r["top"] < min_score):
                continue
            out.append({"id": r["id"], "status": shown, "claimed_by": r["claimed_by"] if claimed else None,
                        "claim_expires": r["claim_expires"] if claimed else None, "top_score": r["top"],
                        "codes": codes, "queued_at": r["queued_at"]})
        return out

    def note(self, note_id: str, *, reviewer: str | None = None) -> dict[str, Any]:
        """One note: text, status, claim, suggestions (with evidence; `terminology`: the model scored the code from a
        terminology's title alone, no training note carried it), each code's latest decision, the log (each
        decision's `spans`, [start, end] pairs or None), and the coders' evidence of the codes it holds
        (`final_evidence`, {"code", "start", "end"}).

        A double-coded note not yet adjudicated is blind: `state` and `log` hold REVIEWER's decisions only (none when
        REVIEWER is None); `assigned` names its coders and when each finished."""
        rows = self.read("SELECT * FROM notes WHERE id = ?", (note_id,))
        if not rows:
            raise ReviewError(f"no note {note_id!r} in the review database {self.path}; check the id (see "
                              "`clinicode review stats`).")
        n = rows[0]
        sugg = [{"code": s["code"], "description": s["description"], "score": s["score"], "rank": s["rank"],
                 "evidence": json.loads(s["evidence"]), "checkpoint": s["checkpoint_path"],
                 "checkpoint_sha256": s["checkpoint_sha256"], "source": s["source"],
                 "terminology": bool(s["terminology"])}
                for s in self.read("SELECT * FROM suggestions WHERE note = ? ORDER BY rank", (note_id,))]
        log = [{**r, "spans": json.loads(r["spans"]) if r["spans"] else None} for r in map(dict, self.read(
            "SELECT id, code, action, reviewer, at, source, was, checkpoint_sha256, spans FROM decisions "
            "WHERE note = ? ORDER BY id", (note_id,)))]
        assigned = {r[0]: r[1] for r in self.read("SELECT reviewer, finished_at FROM assignments WHERE note = ? "
                                                  "ORDER BY rowid", (note_id,))}
        if assigned and n["status"] != "done":
            log = [r for r in log if r["reviewer"] == reviewer]
        return {"id": n["id"], "text": n["text"], "status": n["status"], "claimed_by": n["claimed_by"],
                "claim_expires": n["claim_expires"], "queued_at": n["queued_at"], "suggestions": sugg,
                "state": state_of(log), "log": log, "assigned": assigned, "evidence": final_evidence(log)}

    def model_codes(self, note_id: str | None = None) -> list[tuple[str, str]]:
        """(code, description) of the checkpoints that scored NOTE (every queued checkpoint when None)."""
        if note_id is None:
            rows = self.read("SELECT codes FROM models ORDER BY first_used")
        else:
            rows = self.read("SELECT m.codes FROM models m WHERE m.sha256 IN "
                              "(SELECT DISTINCT checkpoint_sha256 FROM suggestions WHERE note = ?)", (note_id,))
        seen: dict[str, str] = {}
        for r in rows:
            for code, desc in json.loads(r[0]):
                seen.setdefault(code, desc or "")
        return sorted(seen.items())

    # -------------------------------------------------------------------------------------------- claims
    def claim(self, note_id: str, reviewer: str, *, minutes: float = CLAIM_MINUTES, now: float | None = None) -> float:
        """Hold NOTE for REVIEWER for `minutes` (renewing their own claim). Returns the expiry (epoch seconds).

        Raises:
            ClaimedError: someone else holds an unexpired claim. ReviewError: no such note, or it is done.
        """
        reviewer = check_reviewer(reviewer)
        now = time.time() if now is None else now

        def run(con: sqlite3.Connection) -> float:
            n = open_note(con, self.path, note_id)
            expires = now + minutes * 60
            coders = [r[0] for r in con.execute("SELECT reviewer FROM assignments WHERE note = ?", (note_id,))]
            if coders:  # double coded: each coder works blind and in parallel; nobody else holds it
                if reviewer not in coders:
                    raise ClaimedError(f"note {note_id!r} is double coded by {' and '.join(sorted(coders))}; pick "
                                       "another note.")
                start_work(con, note_id, reviewer, now)
                return expires
            check_claim(n, reviewer, now)
            con.execute("UPDATE notes SET claimed_by = ?, claim_expires = ? WHERE id = ?", (reviewer, expires, note_id))
            start_work(con, note_id, reviewer, now)
            return expires

        return self.write(run)

    def release(self, note_id: str, reviewer: str) -> None:
        """Give up REVIEWER's claim on NOTE (no-op when they do not hold it)."""
        self.write(lambda con: con.execute(
            "UPDATE notes SET claimed_by = NULL, claim_expires = NULL WHERE id = ? AND claimed_by = ?",
                                           (note_id, reviewer)))

    # -------------------------------------------------------------------------------------------- finished notes
    def finished(self) -> list[dict[str, Any]]:
        """Done notes with text, final codes (accepted + added), their evidence spans (`final_evidence`), suggested
        codes and when they were finished."""
        notes = {r["id"]: r["text"] for r in self.read("SELECT id, text FROM notes WHERE "
                                                       "status = 'done' ORDER BY rowid")}
        log: dict[str, list[dict[str, Any]]] = {i: [] for i in notes}
        for r in self.read("SELECT d.note, d.code, d.action, d.at, d.reviewer, d.source, d.spans FROM decisions d "
                           "JOIN notes n ON n.id = d.note WHERE n.status = 'done' ORDER BY d.id"):
            log[r["note"]].append(dict(r))
        suggested: dict[str, set[str]] = {i: set() for i in notes}
        from_title: dict[str, set[str]] = {i: set() for i in notes}
        scores: dict[str, dict[str, tuple[float, str]]] = {i: {} for i in notes}
        for r in self.read("SELECT s.note, s.code, s.score, s.checkpoint_sha256, s.source FROM suggestions s "
                           "JOIN notes n ON n.id = s.note WHERE n.status = 'done'"):
            (from_title if r[4] == "title" else suggested)[r[0]].add(r[1])
            scores[r[0]][r[1]] = (r[2], r[3])
        out = []
        for note_id, text in notes.items():
            state = state_of(log[note_id])
            done_at = max((r["at"] for r in log[note_id] if r["action"] == "done"), default=None)
            out.append({"id": note_id, "text": text, "state": state, "suggested": suggested[note_id],
                        "from_title": from_title[note_id],
                        "scores": scores[note_id], "done_at": done_at,
                        "labels": sorted(c for c, a in state.items() if a in ("accept", "add")),
                        "evidence": final_evidence(log[note_id])})
        return out


def _suggest(con: sqlite3.Connection, note_id: str, rec: dict[str, Any], sha256: str, checkpoint: str,
             signals: tuple[float, float] | None) -> None:
    """Store a note's suggestions (the model's, then the codes suggested from their titles) and its signals."""
    evidence = (rec.get("evidence") or {}).get("codes") or {}
    predicted = rec.get("predicted", [])
    con.executemany(   # terminology: a code scored from its title alone, no training note carried it (#50)
        "INSERT INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, score, "
        "evidence, rank, source, terminology) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'model', ?)",
        [(note_id, sha256, checkpoint, p["code"], p.get("description") or "", float(p["score"]),
          json.dumps(evidence.get(p["code"], [])), rank, int(p.get("source") == "terminology"))
         for rank, p in enumerate(predicted, start=1)])
    # codes suggested from their titles (#43), after the model's; their score is a rank, not a probability
    con.executemany(
        "INSERT OR IGNORE INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, "
        "score, evidence, rank, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'title')",
        [(note_id, sha256, checkpoint, p["code"], p.get("title") or "", float(p["score"]),
          json.dumps([{**sp, "weight": 1.0} for sp in p.get("spans", [])]), rank)
         for rank, p in enumerate(rec.get("suggested") or [], start=len(predicted) + 1)])
    if signals is not None:
        con.execute("INSERT INTO note_signals (note, checkpoint_sha256, uncertainty, rarity) VALUES (?, ?, ?, ?)",
                    (note_id, sha256, *signals))
