"""The rules every writer of a note shares: who may write (a printable reviewer name, an open note, an unexpired
claim), each code's latest decision, the checkpoint a note shows, and each coder's clock on it."""

from __future__ import annotations

import json
import sqlite3
import unicodedata
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from clinicode.review.store.errors import ClaimedError, ReviewError

CLAIM_MINUTES = 30                   # how long opening a note keeps it for its reviewer


def state_of(log: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Each code's latest decision (accept, reject or add), in the order the log holds them."""
    state: dict[str, str] = {}
    for r in log:
        if r.get("code") is not None and r["action"] != "done":
            state[r["code"]] = r["action"]
    return state


def final_evidence(log: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """{"code", "start", "end"} spans of each code the LOG (a note's decisions, oldest first, with reviewer, source and
    spans: JSON text as stored, or decoded) finally holds, accepted or added: those of the latest accept or add row
    of that code that carried spans. On an adjudicated note the adjudicator's rows fix the codes; a code the
    adjudicator marked spans on has those, any other the spans of each coder who still held the code when they
    finished (each coder's latest such row; a span both marked, once)."""
    adjudicated = any(r.get("source") == "adjudication" for r in log)
    coders = sorted({r["reviewer"] for r in log if r.get("source") != "adjudication"}) if adjudicated else [None]
    out = []
    for code, action in sorted(state_of(log).items()):
        if action not in ("accept", "add"):
            continue
        ruled = next((r["spans"] for r in reversed(log) if adjudicated and r.get("code") == code
                      and r.get("source") == "adjudication" and r.get("spans")), None)
        if ruled:
            out += [{"code": code, "start": a, "end": b}
                    for a, b in (json.loads(ruled) if isinstance(ruled, str) else ruled)]
            continue
        spans: list[tuple[int, int]] = []
        for coder in coders:
            rows = [r for r in log if r.get("code") == code and (coder is None or (
                r["reviewer"] == coder and r.get("source") != "adjudication"))]
            if state_of(rows).get(code) not in ("accept", "add"):
                continue
            marked = next((r["spans"] for r in reversed(rows) if r["action"] in ("accept", "add") and r.get("spans")),
                          None)
            pairs = json.loads(marked) if isinstance(marked, str) else marked or []
            spans += [s for s in map(tuple, pairs) if s not in spans]
        out += [{"code": code, "start": a, "end": b} for a, b in spans]
    return out


def check_reviewer(name: Any) -> str:
    """The reviewer's name as stored with every decision: 1-100 printable characters. A name holding a control or
    format character (an escape sequence, a newline, a tab, a right-to-left override) is refused, never stored: it
    would rewrite the terminal or split the line of everyone who reads the log or `review stats`."""
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise ReviewError("--reviewer must be a name (1-100 characters), so every decision says who made it.")
    bad = next((ch for ch in name.strip() if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")),
               None)
    if bad is not None:
        raise ReviewError(f"--reviewer {ascii(name.strip()[:40])} holds the control character U+{ord(bad):04X}; a "
                          "reviewer name is printable text on one line (letters, digits, spaces, punctuation): pass "
                          "it without escape codes, tabs or line breaks (nothing was saved).")
    return name.strip()


def open_note(con: sqlite3.Connection, path: Path, note_id: str) -> sqlite3.Row:
    rows = con.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchall()
    if not rows:
        raise ReviewError(f"no note {note_id!r} in the review database {path}; check the id.")
    if rows[0]["status"] == "done":
        raise ReviewError(f"note {note_id!r} is finished; its decisions are final (see them in "
                          "`clinicode review stats`).")
    return rows[0]


def check_claim(n: sqlite3.Row, reviewer: str, now: float) -> None:
    holder, expires = n["claimed_by"], n["claim_expires"]
    if holder is not None and holder != reviewer and (expires or 0) > now:
        until = datetime.fromtimestamp(expires, timezone.utc).strftime("%H:%M UTC")
        raise ClaimedError(f"note {n['id']!r} is being reviewed by {holder} until {until}; pick another note or wait "
                           "for the claim to expire.")


def note_checkpoint(con: sqlite3.Connection, note_id: str) -> str | None:
    """The checkpoint whose suggestions NOTE shows (the one that scored it when it was queued)."""
    row = con.execute("SELECT checkpoint_sha256 FROM suggestions WHERE note = ? UNION ALL "
                      "SELECT checkpoint_sha256 FROM note_signals WHERE note = ? LIMIT 1",
                      (note_id, note_id)).fetchone()
    return None if row is None else row[0]


def start_work(con: sqlite3.Connection, note_id: str, reviewer: str, now: float) -> None:
    """Start REVIEWER's clock on NOTE (the first claim or decision; later ones keep the first start)."""
    con.execute("INSERT OR IGNORE INTO work (note, reviewer, started) VALUES (?, ?, ?)", (note_id, reviewer, now))
