"""The review database's schema: each migration step (file version i to i+1), the checks that a file is ours and at
this clinicode's version, and the UTC time every row is stamped with."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from clinicode.codes.systems import infer_code_system
from clinicode.review.store.errors import ReviewError

APPLICATION_ID = 0x436C5276          # "ClRv" in the SQLite header: this file is a clinicode review database
ACTIONS = ("accept", "reject", "add", "done")
STATUSES = ("pending", "in progress", "done")


def utc_now() -> str:
    """The time every row is stamped with: UTC, to the second."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _v1(con: sqlite3.Connection) -> None:
    """Notes, suggestions and the append-only decision log."""
    con.execute("""CREATE TABLE notes (
        id TEXT PRIMARY KEY, text TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'in_progress', 'done')),
        claimed_by TEXT, claim_expires REAL, queued_at TEXT NOT NULL)""")
    con.execute("""CREATE TABLE suggestions (
        note TEXT NOT NULL REFERENCES notes(id), checkpoint_sha256 TEXT NOT NULL, checkpoint_path TEXT NOT NULL,
        code TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', score REAL NOT NULL, evidence TEXT NOT NULL,
        rank INTEGER NOT NULL, PRIMARY KEY (note, code))""")
    con.execute("""CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT NOT NULL REFERENCES notes(id), code TEXT,
        action TEXT NOT NULL CHECK (action IN ('accept', 'reject', 'add', 'done')),
        reviewer TEXT NOT NULL, at TEXT NOT NULL)""")
    con.execute("CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions "
                "BEGIN SELECT RAISE(ABORT, 'decisions are append-only'); END")
    con.execute("CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions "
                "BEGIN SELECT RAISE(ABORT, 'decisions are append-only'); END")


def _v2(con: sqlite3.Connection) -> None:
    """Each checkpoint's full code list (adding a code searches it), and indexes for the queue and the log."""
    con.execute("""CREATE TABLE models (
        sha256 TEXT PRIMARY KEY, path TEXT NOT NULL, codes TEXT NOT NULL, first_used TEXT NOT NULL)""")
    # v1 files knew only the suggested codes of each checkpoint: start from those
    con.execute("""INSERT INTO models (sha256, path, codes, first_used)
        SELECT checkpoint_sha256, MIN(checkpoint_path), json_group_array(json_array(code, description)), ?
        FROM suggestions GROUP BY checkpoint_sha256""", (utc_now(),))
    con.execute("CREATE INDEX decisions_by_note ON decisions (note, id)")
    con.execute("CREATE INDEX notes_by_status ON notes (status)")


def _v3(con: sqlite3.Connection) -> None:
    """Each checkpoint's code system (adding a code is checked against it): earlier files' are inferred from their
    code lists, once, here."""
    con.execute("ALTER TABLE models ADD COLUMN system TEXT")
    for sha, codes in con.execute("SELECT sha256, codes FROM models").fetchall():
        system = infer_code_system(c for c, _ in json.loads(codes))
        con.execute("UPDATE models SET system = ? WHERE sha256 = ?", (system.name, sha))


def _v4(con: sqlite3.Connection) -> None:
    """Where each suggestion came from (#43): 'model' (a predicted code, the only kind before) or 'title' (a code the
    checkpoint lacks whose title stands in the note); decisions on the two are counted apart."""
    con.execute("ALTER TABLE suggestions ADD COLUMN source TEXT NOT NULL DEFAULT 'model' "
                "CHECK (source IN ('model', 'title'))")


def _v5(con: sqlite3.Connection) -> None:
    """Additive, for the next-note rule, retraining, double coding and the audit trail (#44): each queued note's
    signals; each decision's checkpoint, source (model, title, person, adjudication) and the code's state before it;
    assignments of a note to coders (double coding, blind to each other); each coder's time on a note. Earlier
    files keep every row: their decisions have no checkpoint (`audit_log` reads their note's), source or prior
    state."""
    con.execute("""CREATE TABLE note_signals (
        note TEXT PRIMARY KEY REFERENCES notes(id), checkpoint_sha256 TEXT NOT NULL,
        uncertainty REAL NOT NULL, rarity REAL NOT NULL)""")
    con.execute("ALTER TABLE decisions ADD COLUMN checkpoint_sha256 TEXT")
    con.execute("ALTER TABLE decisions ADD COLUMN source TEXT")
    con.execute("ALTER TABLE decisions ADD COLUMN was TEXT")
    con.execute("""CREATE TABLE assignments (
        note TEXT NOT NULL REFERENCES notes(id), reviewer TEXT NOT NULL, assigned_at TEXT NOT NULL,
        finished_at TEXT, PRIMARY KEY (note, reviewer))""")
    con.execute("""CREATE TABLE work (
        note TEXT NOT NULL REFERENCES notes(id), reviewer TEXT NOT NULL, started REAL NOT NULL, finished REAL,
        PRIMARY KEY (note, reviewer))""")


def _v6(con: sqlite3.Connection) -> None:
    """Additive (#44): the words a decision was made on. `spans` is a JSON list of [start, end] character offsets into
    the note's text, given with an accept or an add (`decide(evidence=...)`); NULL when none were given, as for every
    earlier row. Retraining and exports carry them as the note's evidence spans (the default model learns its codes'
    mentions from them)."""
    con.execute("ALTER TABLE decisions ADD COLUMN spans TEXT")


def _v7(con: sqlite3.Connection) -> None:
    """Additive (#50): `suggestions.terminology` is 1 for a model suggestion scored from a terminology's title alone
    (`train --terminology`: no training note carried the code; the record's `source` "terminology"), so the coder
    sees it; 0 for every other row and every earlier one."""
    con.execute("ALTER TABLE suggestions ADD COLUMN terminology INTEGER NOT NULL DEFAULT 0 "
                "CHECK (terminology IN (0, 1))")


# step i takes a file from version i to i+1
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(con: sqlite3.Connection, path: Path, *, target: int = SCHEMA_VERSION) -> None:
    """Check the file is ours and bring it to `target` (a list of steps, each in the same
    transaction as its version)."""
    app_id = con.execute("PRAGMA application_id").fetchone()[0]
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        tables = con.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
        if app_id != 0 or version != 0 or tables:
            raise ReviewError(f"{path} is an SQLite database of another program, not a clinicode review database; pass "
                              "another --db path (nothing was changed).")
    if version > SCHEMA_VERSION:
        raise ReviewError(f"{path} was written by a newer clinicode (review schema {version}; this one reads up to "
                          f"{SCHEMA_VERSION}); upgrade clinicode to use it (nothing was changed).")
    if version >= target:
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        version = con.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated meanwhile
        for step in MIGRATIONS[version:target]:
            step(con)
        con.execute(f"PRAGMA user_version = {int(max(version, target))}")
        con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def check_readable(con: sqlite3.Connection, path: Path) -> None:
    """What `migrate` checks, for a read-only open: ours, and at this clinicode's schema (read-only cannot migrate)."""
    app_id = con.execute("PRAGMA application_id").fetchone()[0]
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        if app_id != 0 or version != 0 or con.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
            raise ReviewError(f"{path} is an SQLite database of another program, not a clinicode review database; "
                              "pass another --db path (nothing was changed).")
        raise ReviewError(f"{path} holds no review database yet (nothing was changed); queue notes into it with "
                          "`clinicode review queue`.")
    if version > SCHEMA_VERSION:
        raise ReviewError(f"{path} was written by a newer clinicode (review schema {version}; this one reads up to "
                          f"{SCHEMA_VERSION}); upgrade clinicode to use it (nothing was changed).")
    if version < SCHEMA_VERSION:
        raise ReviewError(f"{path} has review schema {version}, from an older clinicode; run one writing command on it "
                          "first (`clinicode review queue` or `review decide`), which upgrades it, then repeat this "
                          "one (nothing was changed).")
