"""A coder's review queue: notes scored by a checkpoint, the coder's decisions on them, export and agreement stats.

One SQLite file (the path the user chose: `--db` or $CLINICODE_REVIEW_DB) holds everything, note text included:
`notes` (text, status, who holds the claim and until when), `suggestions` (the model's predicted codes with scores
and evidence spans, from `Prediction.to_dict()`, and which checkpoint made them), `models` (each checkpoint's code
list, for adding codes) and `decisions` (an append-only audit log: reviewer, UTC time, note, code, action; triggers
refuse UPDATE and DELETE on it). The CLI (`clinicode review ...`) and the app's Review page both go through this
module, so a decision made in one is the same row as one made in the other.

Safety: the file is created owner-only (0600, before SQLite opens it; its -wal and -shm files follow the same
mode); writes run in `BEGIN IMMEDIATE` transactions with a busy timeout and retries, so two processes deciding at
once both succeed; a damaged or foreign file, a database from a newer clinicode and a full disk each raise one
`ReviewError` line, and a failed write rolls back whole, leaving what was saved before intact.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import sqlite3
import stat
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from clinicode.artifacts import atomic_dir, check_output, make_manifest, manifest_kind, write_manifest
from clinicode.codes import icd10 as code_titles
from clinicode.codes.search import code_matches
from clinicode.codes.systems import (
    ICD9_CM,
    ICD10,
    ICD10_CM,
    LOCAL,
    MESH_OMIM,
    CodeSystem,
    code_system,
    family_of,
    infer_code_system,
)
from clinicode.errors import ClinicodeError, ConfigError, DataFormatError
from clinicode.records import Record, read_records
from clinicode.safe_io import new_private_file

if TYPE_CHECKING:  # the app lists the queue without importing torch
    from clinicode.predict import Predictor

DB_ENV = "CLINICODE_REVIEW_DB"
APPLICATION_ID = 0x436C5276          # "ClRv" in the SQLite header: this file is a clinicode review database
SQLITE_MAGIC = b"SQLite format 3\x00"
CLAIM_MINUTES = 30                   # how long opening a note keeps it for its reviewer
BUSY_MS = 10_000                     # SQLite waits this long for another writer before reporting busy
RETRIES = 6                          # then we retry the whole transaction this many times (with jitter)
CHUNK = 256                          # notes scored and stored per transaction by `queue`
EXPLAIN = 5                          # evidence phrases stored per suggested code
MIN_ROUTE_DECISIONS = 20             # decided suggestions of one code from one checkpoint before a routing score
ROUTE_TARGET = 0.95                  # the acceptance rate a routing score must reach
EXPORT_KIND = "review-export"
ACTIONS = ("accept", "reject", "add", "done")
STATUSES = ("pending", "in progress", "done")
_CODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,15}$")


class ReviewError(ClinicodeError):
    """A review database problem or a refused decision (one line, no note text)."""


class ClaimedError(ReviewError):
    """The note is being reviewed by someone else (their claim has not expired)."""


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------------ schema
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


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3]   # step i takes a file from version i to i+1
SCHEMA_VERSION = len(MIGRATIONS)


# ------------------------------------------------------------------------------------------------ errors
def _code_of(err: sqlite3.Error) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF  # primary result code


def _busy(err: sqlite3.Error) -> bool:
    return _code_of(err) in (5, 6) or "locked" in str(err) or "busy" in str(err)


def _translate(err: sqlite3.Error, path: Path) -> ReviewError:
    """One line for an SQLite error (never the SQL, never note text)."""
    code, text = _code_of(err), str(err)
    if code == 13 or "disk is full" in text:
        return ReviewError(f"review database {path}: the disk is full, so this change was not saved (everything saved "
                           "before is intact); free some space and repeat the command.")
    if code in (11, 26) or "malformed" in text or "not a database" in text:
        return ReviewError(f"review database {path} is damaged ({text}); restore it from a "
                           "copy, or pass a new --db file.")
    if code == 14 or "unable to open" in text:
        return ReviewError(f"review database {path}: SQLite could not open it or its -wal/-shm files (the file or its "
                           "folder cannot be read or written); check their permissions and that the disk is "
                           "writable.")
    if code == 8 or "readonly" in text:
        return ReviewError(f"review database {path} cannot be written (read-only file or "
                           "folder); check its permissions.")
    if _busy(err):
        return ReviewError(f"review database {path} stayed busy with another process's changes for over a minute; "
                           "nothing was saved by this command, repeat it.")
    if "append-only" in text:
        return ReviewError(f"review database {path}: decisions are append-only and cannot be changed or removed.")
    return ReviewError(f"review database {path}: {type(err).__name__}: {text}; check the "
                       "file, or pass a new --db file.")


# ------------------------------------------------------------------------------------------------ opening
def db_path(db: str | Path | None) -> Path:
    """--db, else $CLINICODE_REVIEW_DB."""
    value = db if db not in (None, "") else os.environ.get(DB_ENV)
    if not value:
        raise ConfigError(f"no review database given; pass --db FILE or set {DB_ENV}.")
    return Path(value).expanduser()


def _create_owner_only(path: Path) -> bool:
    """Create the empty file 0600 before SQLite touches it (O_EXCL: never an existing file). True when this call made
    it, so a command that then fails may remove it again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        new_private_file(path).close()
    except FileExistsError:
        return False  # another process created it a moment ago; it is checked like any existing file
    return True


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))
COMPANIONS = ("-wal", "-shm", "-journal")  # SQLite's files beside the database; they hold note text too


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_db_file(path: Path, st: os.stat_result) -> None:
    """The database must be a regular file of ours that no one else may read: note text goes into it. Checked with
    stat only, so a FIFO or a device is refused at once, never opened."""
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"--db {path} is a folder; pass a file name for the review database.")
    if not stat.S_ISREG(st.st_mode):
        raise ReviewError(f"--db {path} is {_kind(st.st_mode)}, not a regular file; pass a file name for the review "
                          "database (nothing was opened).")
    if st.st_uid != os.geteuid():
        raise ReviewError(f"--db {path} belongs to another user (uid {st.st_uid}); the review database holds note "
                          "text and must be your own file: pass a new --db path, which clinicode creates owner-only "
                          "(nothing was opened).")


def _check_private(path: Path, st: os.stat_result) -> None:
    if st.st_mode & 0o077:
        raise ReviewError(f"--db {path} can be read or written by others (mode {stat.S_IMODE(st.st_mode):04o}); the "
                          "review database holds note text and must be owner-only: if the file is yours, `chmod 600 "
                          f"{path}`, or pass a new --db path, which clinicode creates owner-only (nothing was opened).")


def _check_companions(path: Path) -> None:
    """A -wal, -shm or -journal file that clinicode did not make for this user (another owner, others may read it, a
    link or a FIFO) is refused before SQLite opens the database: SQLite would write note text into it."""
    for suffix in COMPANIONS:
        comp = Path(f"{path}{suffix}")
        try:
            st = comp.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            why = _kind(st.st_mode)
        elif st.st_uid != os.geteuid():
            why = f"owned by another user (uid {st.st_uid})"
        elif st.st_mode & 0o077:
            why = f"readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
        else:
            continue
        raise ReviewError(f"{comp} is not the review database's own {suffix[1:]} file: it is {why}, and SQLite "
                          "would write note text into it. If it is a leftover of yours and no one uses the database, "
                          "remove it; otherwise pass another --db path (nothing was opened).")


def _on_read_only_medium(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _check_header(path: Path, st: os.stat_result) -> None:
    # O_NONBLOCK: should the path have become a FIFO since the stat, opening it still returns at once
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise ReviewError(f"--db {path} was replaced while it was being opened; repeat the command.")
        head = os.read(fd, 100)  # SQLite's file header
    finally:
        os.close(fd)
    if head and head[:len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        raise ReviewError(f"{path} is not a clinicode review database (not an SQLite file); pass another --db path "
                          "(nothing was changed).")
    if len(head) == 100:  # told from the header alone, before SQLite opens the file
        app_id, pages = int.from_bytes(head[68:72], "big"), int.from_bytes(head[28:32], "big")
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and pages > 1):
            raise ReviewError(f"{path} is an SQLite database of another program, not a clinicode review database; "
                              "pass another --db path (nothing was changed).")


class ReviewDB:
    """An open review database. Use `open_db`; close it (or use it as a context manager) when done."""

    def __init__(self, path: Path, con: sqlite3.Connection, *, created: bool = False, readonly: bool = False) -> None:
        self.path = path
        self.con = con
        self.created = created    # this process made the file (a failed first `queue` may remove it again)
        self.readonly = readonly  # opened with mode=ro: reports and exports never write the file

    def __enter__(self) -> "ReviewDB":
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
        rows = self._read("PRAGMA integrity_check(100)")
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
    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        for attempt in range(RETRIES):
            try:
                return self.con.execute(sql, params).fetchall()
            except sqlite3.Error as err:
                if _busy(err) and attempt + 1 < RETRIES:
                    time.sleep(random.uniform(0.01, 0.1) * (attempt + 1))
                    continue
                raise _translate(err, self.path) from None
        raise AssertionError("unreachable")

    def write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn(con) in one IMMEDIATE transaction: all of it is saved or none; busy databases are retried."""
        for attempt in range(RETRIES):
            try:
                self.con.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as err:
                if _busy(err) and attempt + 1 < RETRIES:
                    time.sleep(random.uniform(0.01, 0.2) * (attempt + 1))
                    continue
                raise _translate(err, self.path) from None
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
                    if _busy(exc) and attempt + 1 < RETRIES:
                        time.sleep(random.uniform(0.01, 0.2) * (attempt + 1))
                        continue
                    raise _translate(exc, self.path) from None
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
        rows = [] if note_id is None else self._read(
            "SELECT system FROM models WHERE sha256 IN (SELECT DISTINCT checkpoint_sha256 FROM suggestions "
            "WHERE note = ?)", (note_id,))
        rows = rows or self._read("SELECT system FROM models")
        systems = [code_system(r[0]) for r in rows if r[0]]
        return family_of(systems) if systems else LOCAL

    def known_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        out: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            rows = self._read(f"SELECT id FROM notes WHERE id IN ({','.join('?' * len(part))})", part)
            out.update(r[0] for r in rows)
        return out

    def add_notes(self, items: Sequence[tuple[str, str, dict[str, Any]]], *, sha256: str, checkpoint: str) -> int:
        """Queue (id, text, Prediction.to_dict()) triples in one transaction; ids already present are left as they
        are. Returns how many were new."""
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
                evidence = (rec.get("evidence") or {}).get("codes") or {}
                con.executemany(
                    "INSERT INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, score, "
                    "evidence, rank) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(note_id, sha256, checkpoint, p["code"], p.get("description") or "", float(p["score"]),
                      json.dumps(evidence.get(p["code"], [])), rank)
                     for rank, p in enumerate(rec.get("predicted", []), start=1)])
            return added

        return self.write(run)

    # -------------------------------------------------------------------------------------------- reading
    def notes(self, *, status: Sequence[str] | None = None, code: str | None = None, min_score: float | None = None,
              now: float | None = None) -> list[dict[str, Any]]:
        """The queue without note text: id, status (pending / in progress / done), claim, suggestion codes, top score.

        status: keep these display statuses; code: notes suggesting (or finally coded with) this code;
        min_score: notes whose best suggestion scores at least this."""
        now = time.time() if now is None else now
        rows = self._read("""
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

    def note(self, note_id: str) -> dict[str, Any]:
        """One note: text, status, claim, suggestions (with evidence), each code's latest decision, the log."""
        rows = self._read("SELECT * FROM notes WHERE id = ?", (note_id,))
        if not rows:
            raise ReviewError(f"no note {note_id!r} in the review database {self.path}; check the id (see "
                              "`clinicode review stats`).")
        n = rows[0]
        sugg = [{"code": s["code"], "description": s["description"], "score": s["score"], "rank": s["rank"],
                 "evidence": json.loads(s["evidence"]), "checkpoint": s["checkpoint_path"],
                 "checkpoint_sha256": s["checkpoint_sha256"]}
                for s in self._read("SELECT * FROM suggestions WHERE note = ? ORDER BY rank", (note_id,))]
        log = [dict(r) for r in self._read("SELECT id, code, action, reviewer, at FROM decisions "
                                           "WHERE note = ? ORDER BY id",
                                           (note_id,))]
        return {"id": n["id"], "text": n["text"], "status": n["status"], "claimed_by": n["claimed_by"],
                "claim_expires": n["claim_expires"], "queued_at": n["queued_at"], "suggestions": sugg,
                "state": _state(log), "log": log}

    def model_codes(self, note_id: str | None = None) -> list[tuple[str, str]]:
        """(code, description) of the checkpoints that scored NOTE (every queued checkpoint when None)."""
        if note_id is None:
            rows = self._read("SELECT codes FROM models ORDER BY first_used")
        else:
            rows = self._read("SELECT m.codes FROM models m WHERE m.sha256 IN "
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
        reviewer = _reviewer(reviewer)
        now = time.time() if now is None else now

        def run(con: sqlite3.Connection) -> float:
            n = _open_note(con, self.path, note_id)
            _check_claim(n, reviewer, now)
            expires = now + minutes * 60
            con.execute("UPDATE notes SET claimed_by = ?, claim_expires = ? WHERE id = ?", (reviewer, expires, note_id))
            return expires

        return self.write(run)

    def release(self, note_id: str, reviewer: str) -> None:
        """Give up REVIEWER's claim on NOTE (no-op when they do not hold it)."""
        self.write(lambda con: con.execute(
            "UPDATE notes SET claimed_by = NULL, claim_expires = NULL WHERE id = ? AND claimed_by = ?",
                                           (note_id, reviewer)))

    # -------------------------------------------------------------------------------------------- decisions
    def decide(self, note_id: str, reviewer: str, *, accept: Sequence[str] = (), reject: Sequence[str] = (),
               add: Sequence[str] = (), done: bool = False, now: float | None = None) -> dict[str, Any]:
        """Record REVIEWER's decisions on NOTE as audit rows, all or none (one transaction), and finish it if `done`.

        accept/reject: suggested codes (reject also withdraws a code added earlier); add: a code the model did not
        suggest (one of a queued checkpoint's codes or an ICD-10-CM code); done: every suggestion must then have a
        decision. The reviewer's claim on the note is renewed.

        Raises:
            ClaimedError: another reviewer holds the note. ReviewError: unknown note or code, a finished note, a code
            given twice, or undecided suggestions at `done`.
        """
        reviewer = _reviewer(reviewer)
        now = time.time() if now is None else now
        accept, reject, add = ([_norm_code(c) for c in xs] for xs in (accept, reject, add))
        if not accept + reject + add and not done:
            raise ReviewError("nothing to record; pass --accept, --reject, --add CODE or --done.")
        system = self.code_system(note_id) if accept + reject + add else LOCAL
        model = [c for c, _ in self.model_codes(note_id) or self.model_codes()]
        add = [self._addable(c, note_id, system, model) for c in add]

        def run(con: sqlite3.Connection) -> dict[str, Any]:
            n = _open_note(con, self.path, note_id)
            _check_claim(n, reviewer, now)
            suggested = {r[0] for r in con.execute("SELECT code FROM suggestions WHERE note = ?", (note_id,))}
            state = _state([dict(r) for r in con.execute("SELECT code, action FROM decisions "
                                                         "WHERE note = ? ORDER BY id",
                                                         (note_id,))])
            added = {c for c, a in state.items() if a == "add"}
            for i, c in enumerate(accept):
                accept[i] = _same_code(system, c, suggested) or ""
                if not accept[i]:
                    raise ReviewError(f"note {note_id!r}: {c} is not a suggested code, so it cannot "
                                      f"be accepted; use --add {c}.")
            for i, c in enumerate(reject):
                reject[i] = _same_code(system, c, suggested | added) or ""
                if not reject[i]:
                    raise ReviewError(f"note {note_id!r}: {c} is neither suggested nor added, so "
                                      "there is nothing to reject.")
            for c in add:
                if _same_code(system, c, suggested):
                    c = _same_code(system, c, suggested)
                    raise ReviewError(f"note {note_id!r}: {c} is already suggested; use --accept {c}.")
            given = accept + reject + add  # as stored: one spelling per code, whatever case or dots were typed
            twice = sorted({c for c in given if given.count(c) > 1})
            if twice:
                raise ReviewError(f"note {note_id!r}: code {twice[0]} is given more than once; accept, "
                                  "reject or add each code once.")
            at = utc_now()
            rows = [(note_id, c, a, reviewer, at) for a, cs in (("accept", accept), ("reject", reject),
                                                                ("add", add)) for c in cs]
            for _, c, a, _, _ in rows:
                state[c] = a
            if done:
                undecided = sorted(c for c in suggested if state.get(c) not in ("accept", "reject"))
                if undecided:
                    raise ReviewError(f"note {note_id!r}: {len(undecided)} suggested code(s) have no decision yet "
                                      f"({', '.join(undecided[:5])}); accept or reject each before "
                                      "finishing (nothing was saved).")
                rows.append((note_id, None, "done", reviewer, at))
            con.executemany("INSERT INTO decisions (note, code, action, reviewer, at) VALUES (?, ?, ?, ?, ?)", rows)
            if done:
                con.execute("UPDATE notes SET status = 'done', claimed_by = NULL, claim_expires = NULL WHERE id = ?",
                            (note_id,))
            else:
                con.execute("UPDATE notes SET status = 'in_progress', claimed_by = ?, claim_expires = ? WHERE id = ?",
                            (reviewer, now + CLAIM_MINUTES * 60, note_id))
            return {"note": note_id, "accepted": accept, "rejected": reject, "added": add, "done": done,
                    "codes": sorted(c for c, a in state.items() if a in ("accept", "add"))}

        return self.write(run)

    def finish(self, note_id: str, reviewer: str, *, now: float | None = None) -> dict[str, Any]:
        """Mark NOTE done (every suggestion needs a decision)."""
        return self.decide(note_id, reviewer, done=True, now=now)

    def _addable(self, code: str, note_id: str, system: CodeSystem, model: Sequence[str]) -> str:
        """CODE as stored when a coder adds it: one of the model's codes (any case or dotting), or a code of the
        note's code system in clinicode's spelling (an ICD-10-CM code must be in the CMS tables; ICD-9-CM and
        ICD-10-PCS ship no tables, so their shape is checked)."""
        known = _same_code(system, code, set(model))
        if known:
            return known
        member = system.member(code)
        if member is None or member is LOCAL:
            other = next((s.member(code) for s in (ICD9_CM, ICD10, MESH_OMIM) if s is not system and s.is_valid(code)),
                         None)
            if other is not None and system is not LOCAL:
                raise ReviewError(f"note {note_id!r}: --add {code} is a code of {other.name}, but the model that "
                                  f"scored this note codes in {system.name}; add the {system.name} code (such as "
                                  f"{system.example}) instead.")
            raise ReviewError(f"note {note_id!r}: --add {code} is neither one of the model's codes nor a valid "
                              f"{system.name} code; check the spelling (the Review page searches codes and titles).")
        normalised = system.normalise(code)
        if member is ICD10_CM and not member.titles([normalised]):
            raise ReviewError(f"note {note_id!r}: --add {code} is neither one of the model's codes nor a valid "
                              "ICD-10-CM code (not in the CMS tables); check the spelling (the Review page searches "
                              "codes and titles).")
        return _same_code(system, normalised, set(model)) or normalised

    # -------------------------------------------------------------------------------------------- results
    def finished(self) -> list[dict[str, Any]]:
        """Done notes with text, final codes (accepted + added), suggested codes and when they were finished."""
        notes = {r["id"]: r["text"] for r in self._read("SELECT id, text FROM notes WHERE "
                                                        "status = 'done' ORDER BY rowid")}
        log: dict[str, list[dict[str, Any]]] = {i: [] for i in notes}
        for r in self._read("SELECT d.note, d.code, d.action, d.at FROM decisions d JOIN notes n ON n.id = d.note "
                            "WHERE n.status = 'done' ORDER BY d.id"):
            log[r["note"]].append(dict(r))
        suggested: dict[str, set[str]] = {i: set() for i in notes}
        scores: dict[str, dict[str, tuple[float, str]]] = {i: {} for i in notes}
        for r in self._read("SELECT s.note, s.code, s.score, s.checkpoint_sha256 FROM suggestions s JOIN notes n "
                            "ON n.id = s.note WHERE n.status = 'done'"):
            suggested[r[0]].add(r[1])
            scores[r[0]][r[1]] = (r[2], r[3])
        out = []
        for note_id, text in notes.items():
            state = _state(log[note_id])
            done_at = max((r["at"] for r in log[note_id] if r["action"] == "done"), default=None)
            out.append({"id": note_id, "text": text, "state": state, "suggested": suggested[note_id],
                        "scores": scores[note_id], "done_at": done_at,
                        "labels": sorted(c for c, a in state.items() if a in ("accept", "add"))})
        return out

    def stats(self, *, by: str = "day", min_decisions: int = MIN_ROUTE_DECISIONS,
              target: float = ROUTE_TARGET) -> dict[str, Any]:
        """Agreement of the model with coders on finished notes: overall, per code and per day or week, and what the
        queue teaches per code.

        accepted (suggested, kept: true positives), rejected (suggested, removed: false positives), added (not
        suggested, coded: misses); precision = accepted / (accepted + rejected), recall = accepted / (accepted + added).
        Per code also: `suggested` and `accept_rate` (= precision: how often coders kept the model's suggestion),
        `coded` and `missed_rate` (= added / coded: how often the code was coded without the model suggesting it).
        `routing` gives, per checkpoint and per code with at least MIN_DECISIONS decided suggestions, the lowest score
        at and above which at least MIN_DECISIONS suggestions were accepted at a rate >= TARGET (`route_threshold`),
        with the decisions behind it. It is a report: nothing is accepted without a coder.

        Raises:
            ReviewError: the database is damaged (the integrity check runs first).
        """
        if by not in ("day", "week"):
            raise ConfigError(f"--by must be day or week, got {by!r}.")
        self.check_integrity()
        overall = _counts()
        per_code: dict[str, dict[str, Any]] = {}
        per_time: dict[str, dict[str, Any]] = {}
        decided: dict[tuple[str, str], list[tuple[float, bool]]] = {}  # (checkpoint, code) -> (score, accepted)
        for n in self.finished():
            period = _period(n["done_at"], by)
            bucket = per_time.setdefault(period, _counts())
            bucket["notes"] += 1
            overall["notes"] += 1
            for code, action in n["state"].items():
                kind = {"accept": "accepted", "reject": "rejected", "add": "added"}[action]
                if kind != "added" and code not in n["suggested"]:
                    continue  # a withdrawn addition (reject after add) counts for nothing
                for c in (overall, bucket, per_code.setdefault(code, _counts())):
                    c[kind] += 1
                if kind != "added":
                    score, sha = n["scores"][code]
                    decided.setdefault((sha, code), []).append((score, kind == "accepted"))
        pending = self._read("SELECT COUNT(*) FROM notes WHERE status != 'done'")[0][0]
        paths = {r[0]: r[1] for r in self._read("SELECT sha256, path FROM models")}
        routing: dict[str, dict[str, Any]] = {}
        for (sha, code), pairs in sorted(decided.items()):
            if len(pairs) >= min_decisions:
                entry = routing.setdefault(sha, {"checkpoint": paths.get(sha, ""), "codes": {}})
                entry["codes"][code] = route_threshold(pairs, target=target, min_decisions=min_decisions)
        return {"overall": _rates(overall), "per_code": {c: _rates(v) for c, v in sorted(per_code.items())},
                "over_time": {p: _rates(v) for p, v in sorted(per_time.items())}, "by": by, "open_notes": pending,
                "routing": {"target": target, "min_decisions": min_decisions, "by_checkpoint": routing}}


def route_threshold(pairs: Sequence[tuple[float, bool]], *, target: float = ROUTE_TARGET,
                    min_decisions: int = MIN_ROUTE_DECISIONS) -> dict[str, Any]:
    """The lowest score at and above which coders accepted a code's suggestions at a rate >= TARGET.

    Args:
        pairs: (score, accepted) of every decided suggestion of one code from one checkpoint.
        target: the acceptance rate to reach, in (0, 1].
        min_decisions: the fewest decisions at and above the score that may back it.
    Returns:
        {"threshold", "decisions", "accepted", "rate", "lower_bound", "share", "all_decisions"}: decisions and
        accepted at and above the threshold, their rate and its 95% Wilson lower bound, the share of the code's
        decided suggestions at and above it, and how many there were in all. threshold (and the figures beside it)
        is None when no score reaches TARGET with at least MIN_DECISIONS decisions.
    """
    ranked = sorted(pairs, key=lambda p: -p[0])
    best: dict[str, Any] = {"threshold": None, "decisions": None, "accepted": None, "rate": None,
                            "lower_bound": None, "share": None}
    accepted = 0
    for i, (score, ok) in enumerate(ranked):
        accepted += ok
        n = i + 1
        if n < len(ranked) and ranked[i + 1][0] == score:
            continue  # a cut falls between different scores only
        if n >= min_decisions and accepted / n >= target:
            best = {"threshold": score, "decisions": n, "accepted": accepted, "rate": accepted / n,
                    "lower_bound": _wilson_lower(accepted, n), "share": n / len(ranked)}
    return {**best, "all_decisions": len(ranked)}


def _wilson_lower(k: int, n: int, z: float = 1.96) -> float:
    """The lower end of the 95% Wilson score interval of k successes in n: what the rate is at least, plausibly."""
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5
    return (centre - spread) / (1 + z * z / n)


def _counts() -> dict[str, Any]:
    return {"notes": 0, "accepted": 0, "rejected": 0, "added": 0}


def _rates(c: dict[str, Any]) -> dict[str, Any]:
    a, r, m = c["accepted"], c["rejected"], c["added"]
    return {**c, "precision": a / (a + r) if a + r else None, "recall": a / (a + m) if a + m else None,
            "suggested": a + r, "accept_rate": a / (a + r) if a + r else None,
            "coded": a + m, "missed_rate": m / (a + m) if a + m else None}


def _period(at: str | None, by: str) -> str:
    if not at:
        return "unknown"
    day = datetime.strptime(at[:10], "%Y-%m-%d")
    if by == "day":
        return day.strftime("%Y-%m-%d")
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def _state(log: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Each code's latest decision (accept, reject or add), in the order the log holds them."""
    state: dict[str, str] = {}
    for r in log:
        if r.get("code") is not None and r["action"] != "done":
            state[r["code"]] = r["action"]
    return state


def _reviewer(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise ReviewError("--reviewer must be a name (1-100 characters), so every decision says who made it.")
    return name.strip()


def _same_code(system: CodeSystem, code: str, codes: set[str]) -> str | None:
    """The one of CODES that CODE names, whatever its case or dotting ('y92230' finds 'Y92.230'), else None."""
    if code in codes:
        return code
    keys = {c.upper(): c for c in codes}
    if code.upper() in keys:
        return keys[code.upper()]
    if system.is_valid(code):
        normalised = system.normalise(code)
        if normalised in codes:
            return normalised
    bare = {c.upper().replace(".", ""): c for c in codes}
    return bare.get(code.upper().replace(".", ""))


def _norm_code(code: Any) -> str:
    c = str(code).strip()
    if not _CODE.match(c):
        raise ReviewError(f"{c[:20]!r} is not a code; expected letters, digits and dots such as 428.0 or I50.9.")
    return c


def _open_note(con: sqlite3.Connection, path: Path, note_id: str) -> sqlite3.Row:
    rows = con.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchall()
    if not rows:
        raise ReviewError(f"no note {note_id!r} in the review database {path}; check the id.")
    if rows[0]["status"] == "done":
        raise ReviewError(f"note {note_id!r} is finished; its decisions are final (see them in "
                          "`clinicode review stats`).")
    return rows[0]


def _check_claim(n: sqlite3.Row, reviewer: str, now: float) -> None:
    holder, expires = n["claimed_by"], n["claim_expires"]
    if holder is not None and holder != reviewer and (expires or 0) > now:
        until = datetime.fromtimestamp(expires, timezone.utc).strftime("%H:%M UTC")
        raise ClaimedError(f"note {n['id']!r} is being reviewed by {holder} until {until}; pick another note or wait "
                           "for the claim to expire.")


def _migrate(con: sqlite3.Connection, path: Path, *, target: int = SCHEMA_VERSION) -> None:
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


def _check_readable(con: sqlite3.Connection, path: Path) -> None:
    """What `_migrate` checks, for a read-only open: ours, and at this clinicode's schema (read-only cannot migrate)."""
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


def open_db(db: str | Path | None = None, *, create: bool = True, readonly: bool = False,
            _target: int = SCHEMA_VERSION) -> ReviewDB:
    """Open (creating when `create`, owner-only) and migrate the review database at --db / $CLINICODE_REVIEW_DB.

    Before SQLite sees the path: it must be a regular file (a FIFO or a device is refused at once, never opened) of
    this user that no one else may read, and any -wal, -shm or -journal beside it likewise. `readonly` (reports,
    exports) opens it with SQLite's mode=ro: it is never created, migrated or written (an empty file stays empty).

    Raises:
        ConfigError: no path given, or a folder. ReviewError: missing (create=False or readonly), not ours, shared
            with others, a special file, on a read-only medium (for writing), damaged, newer, or older (readonly).
    """
    path = db_path(db)
    created = False
    try:
        st = path.stat()
    except FileNotFoundError:
        if readonly or not create:
            raise ReviewError(f"no review database at {path}; queue notes into it first with `clinicode review "
                              "queue`.") from None
        if _on_read_only_medium(path.parent if path.parent.exists() else Path(path.anchor or ".")):
            raise ReviewError(f"cannot create the review database {path}: its folder is on a read-only file system; "
                              "pass a --db path on a writable disk.") from None
        created = _create_owner_only(path)
        st = path.stat()
    _check_db_file(path, st)
    _check_header(path, st)
    _check_private(path, st)
    _check_companions(path)
    read_only_medium = _on_read_only_medium(path)
    if readonly and st.st_size == 0:
        raise ReviewError(f"{path} is empty: it holds no review database yet (nothing was changed); queue notes into "
                          "it with `clinicode review queue`.")
    if read_only_medium and not readonly:
        raise ReviewError(f"review database {path} is on a read-only file system, so this command cannot save "
                          "anything; copy the file to a writable disk (or remount it read-write) and pass that "
                          "--db. `review stats` and `review export` can read it where it is.")
    uri = None
    if readonly:
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        if read_only_medium:  # SQLite cannot make its -shm there; nothing can change the file, so read it as is
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size:
                raise ReviewError(f"review database {path} is on a read-only file system with changes still in "
                                  f"{wal.name}; copy both files to a writable disk and pass that --db.")
            uri += "&immutable=1"
    old = os.umask(0o077)  # the -wal and -shm files (they hold note text too) are owner-only as well
    try:
        con = sqlite3.connect(uri or path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False,
                              uri=uri is not None)
        con.row_factory = sqlite3.Row
        try:
            con.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            if readonly:
                con.execute("PRAGMA query_only = ON")
                _check_readable(con, path)
            else:
                _open_for_writing(con, path, target=_target)
        except sqlite3.Error as err:
            con.close()
            raise _translate(err, path) from None
        except BaseException:
            con.close()
            raise
    finally:
        os.umask(old)
    return ReviewDB(path, con, created=created, readonly=readonly)


def _open_for_writing(con: sqlite3.Connection, path: Path, *, target: int) -> None:
    for attempt in range(RETRIES):
        try:
            _migrate(con, path, target=target)
            if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                con.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as err:
            if not _busy(err) or attempt + 1 == RETRIES:
                raise
            time.sleep(random.uniform(0.01, 0.2) * (attempt + 1))
    con.execute("PRAGMA synchronous = NORMAL")   # WAL: durable at checkpoints, never corrupt
    con.execute("PRAGMA foreign_keys = ON")


# ------------------------------------------------------------------------------------------------ queue
def queue(db: ReviewDB, predictor: "Predictor", input: str | Path | Any, *, explain: int = EXPLAIN, chunk: int = CHUNK,
          on_bad: Callable[[str], None] | None = None) -> dict[str, int]:
    """Score every note of INPUT (anything `clinicode predict` reads) and queue it with its suggestions.

    Notes whose id is already queued (or repeats an earlier record) are not scored again and change nothing.
    Bad records (no text, invalid JSON, nothing left after tokenising) are reported through `on_bad` and counted.
    Reading and tokenising the next chunk overlaps scoring and storing the current one, as in `predict`.

    Returns:
        {"queued", "already", "errors"}.
    Raises:
        DataFormatError: an unreadable or empty input.
    """
    if explain < 1:
        raise ConfigError(f"--explain must be >= 1 (evidence phrases per suggested code), got {explain}.")
    records = read_records(input)
    first = next(records, None)
    if first is None:
        raise DataFormatError(f"--input {input}: no records; expected one note per JSONL line, "
                              "CSV/parquet row or .txt file.")
    sha = predictor.checkpoint.manifest_sha256
    ck_path = str(predictor.checkpoint.path)
    labels = predictor.labels
    db.add_model(sha, ck_path, list(zip(labels.codes, labels.descriptions)), predictor.code_system)
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

    def store(recs: list[Record], preds: list[Any]) -> None:
        items = []
        for r, p in zip(recs, preds):
            rec = p.to_dict()
            if "error" in rec:
                bad(rec["error"])
            else:
                items.append((r.id, r.text, rec))
        if items:
            added = db.add_notes(items, sha256=sha, checkpoint=ck_path)
            counts["queued"] += added
            counts["already"] += len(items) - added  # another process queued them meanwhile

    # predict's own chunked scorer: tokenising the next chunk overlaps scoring and storing this one (imported here:
    # it loads torch, which `review decide`, `stats` and the app's queue view never need)
    from clinicode.predict_io import score_records

    for recs, preds in score_records(predictor, todo(), top_k=0, explain=explain, chunk=chunk):
        store(recs, preds)
    return counts


# ------------------------------------------------------------------------------------------------ codes
def search_codes(query: str, model_codes: Sequence[tuple[str, str]], *, system: CodeSystem | None = None,
                 limit: int = 25) -> list[tuple[str, str, str]]:
    """(code, title, source) matching QUERY by code prefix or words in the title: the model's codes first, then, when
    the model's code system (SYSTEM, else inferred from its codes) holds ICD-10-CM, ICD-10-CM's billable and category
    codes (the CMS tables shipped with simple-icd-10-cm). No other system ships titles to search."""
    if not query.strip():
        return []
    out = [(c, t, "model") for c, t in model_codes if code_matches(query, c, t)]
    system = system or infer_code_system(c for c, _ in model_codes)
    if ICD10_CM not in system.leaves:
        return out[:limit]
    have = {c for c, _, _ in out}
    for c, t, low in _icd10_cm_index():
        if len(out) >= limit:
            break
        if c not in have and code_matches(query, c, low):
            out.append((c, t, "ICD-10-CM"))
    return out[:limit]


_CM_INDEX: list[tuple[str, str, str]] | None = None


def _icd10_cm_index() -> list[tuple[str, str, str]]:
    """(code, title, lower-case title) of every ICD-10-CM category and code, built once per process (~1 s)."""
    global _CM_INDEX
    if _CM_INDEX is None:
        cm = code_titles._cm_module()
        titles = [(c, cm.get_description(c)) for c in cm.get_all_codes(with_dots=True)
                  if "-" not in c and not c.isdigit()]  # chapters (numbers) and blocks (ranges) are not codes
        _CM_INDEX = [(c, t, t.lower()) for c, t in titles]
    return _CM_INDEX


# ------------------------------------------------------------------------------------------------ export
def is_review_export(folder: Path) -> bool:
    return manifest_kind(folder) == EXPORT_KIND


def _split_of(note_id: str) -> tuple[int, str]:
    h = int(hashlib.md5(note_id.encode("utf-8")).hexdigest(), 16)
    return h, ("test" if h % 10 == 0 else "dev" if h % 10 == 1 else "train")


def export(db: ReviewDB, out: str | Path, *, base: str | Path | None = None) -> dict[str, int]:
    """Write the finished notes as a coded-notes folder `clinicode train --data` reads (labels = accepted + added).

    Alone (base None): each note's split comes from a hash of its id (about 80/10/10 train/dev/test, stable across
    exports; train and dev always get at least one note). With `base` (a prepared dataset or coded-notes folder): the
    base's splits are copied with their labels; coder labels only replace train labels (a reviewed note whose id is
    in the base's train takes the coders' codes there), a reviewed note whose id is in the base's dev or test is left
    out (counted as `kept_out`: dev and test stay exactly the base's, so the new model is measured as the old one
    was), and every other reviewed note joins train. Codes coders added that the base's label set lacks are appended
    to its labels.json.
    The folder is new, empty or an earlier export; it appears atomically, and its files (they hold note text) are
    owner-only. `descriptions.tsv` holds the reviewed codes' titles for `train --descriptions`.
    """
    out = Path(out)
    check_output(out, option="--out", command="review export", folder=True, recognise=is_review_export,
                 inputs={"--db": db.path, "--base": base})
    db.check_integrity()
    notes = db.finished()
    need = 1 if base is not None else 2
    if len(notes) < need:
        raise ReviewError(f"{len(notes)} finished note(s) in {db.path}; an export needs at least {need}"
                          f"{' (a train and a dev note)' if need == 2 else ''}. Finish notes with `clinicode review "
                          "decide ... --done` or on the Review page.")
    titles = dict(db.model_codes())
    codes = sorted({c for n in notes for c in n["labels"]})
    system = db.code_system()
    titles.update(system.titles([c for c in codes if c not in titles]))
    rows = {n["id"]: {"id": n["id"], "text": n["text"], "labels": n["labels"]} for n in notes}
    labels_json = None
    kept_out = 0
    if base is None:
        splits = _hash_splits(list(rows.values()))
    else:
        from clinicode.data.prepared import load_dataset

        ds = load_dataset(Path(base))
        splits = {}
        for name, df in ds.splits.items():
            part = []
            for i, t, lab in zip(df["id"], df["text"], df["labels"]):
                reviewed = rows.pop(str(i), None)
                if reviewed is not None and name == "train":
                    part.append(reviewed)
                else:
                    kept_out += reviewed is not None
                    part.append({"id": str(i), "text": t, "labels": list(lab)})
            splits[name] = part
        splits["train"].extend(rows.values())
        labels_json = _merged_labels(ds.labels, [c for c in codes if c not in ds.labels], titles, system)
    with atomic_dir(out, replaces=is_review_export) as tmp:
        os.chmod(tmp, 0o700)
        for name, part in splits.items():
            if part:
                _write_private(tmp / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part))
        if labels_json is not None:
            _write_private(tmp / "labels.json", json.dumps(labels_json, indent=1, ensure_ascii=False) + "\n")
        _write_private(tmp / "descriptions.tsv", "".join(f"{c}\t{titles[c]}\n" for c in codes if titles.get(c)))
        counts = {name: len(part) for name, part in splits.items()}
        counts.setdefault("test", 0)
        write_manifest(tmp, make_manifest(EXPORT_KIND, counts=counts, codes=len(codes), reviewed=len(notes),
                                          source=str(db.path), base=None if base is None else str(base)))
    return {**counts, "codes": len(codes), "reviewed": len(notes), "kept_out": kept_out}


def _merged_labels(base: Any, new: Sequence[str], titles: dict[str, str], system: CodeSystem) -> list[dict[str, str]]:
    """The base's labels.json entries with the codes coders added appended; each names its code system when the
    base's set and every added code's system are known."""
    from clinicode.data.labels import LabelSet

    fam = base.code_system
    members = [system.member(c) for c in new]
    if fam is not None and new:
        fam = None if any(m is None or m is LOCAL for m in members) else family_of([fam, *members])
    return LabelSet(tuple(base.codes) + tuple(new), tuple(base.descriptions) + tuple(titles.get(c, "") for c in new),
                    fam).to_json()


def _hash_splits(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    ranked = sorted(((_split_of(r["id"]), r) for r in rows), key=lambda t: t[0][0])
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "dev": [], "test": []}
    for (_, name), r in ranked:
        splits[name].append(r)
    for need in ("train", "dev"):  # tiny exports: borrow from the largest other split
        if not splits[need]:
            donor = max((s for s in splits if s != need), key=lambda s: len(splits[s]) - (s == "train"))
            splits[need].append(splits[donor].pop())
    return splits


def _write_private(path: Path, text: str) -> None:
    with new_private_file(path) as f:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
