"""The review database: one SQLite file, its schema and migrations, opening it safely, and the `ReviewDB` handle.

Owns the file rules (a regular owner-only file of this user, companions likewise, read-only opens for reports, the
integrity check) and the transactions; decisions, stats, queue and export are the package's other rooms.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import stat
import time
import unicodedata
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from clinicode.codes.systems import LOCAL, CodeSystem, code_system, family_of, infer_code_system
from clinicode.errors import ClinicodeError, ConfigError
from clinicode.files import new_private_file, path_kind

DB_ENV = "CLINICODE_REVIEW_DB"
APPLICATION_ID = 0x436C5276          # "ClRv" in the SQLite header: this file is a clinicode review database
SQLITE_MAGIC = b"SQLite format 3\x00"
CLAIM_MINUTES = 30                   # how long opening a note keeps it for its reviewer
BUSY_MS = 10_000                     # SQLite waits this long for another writer before reporting busy
RETRIES = 6                          # then we retry the whole transaction this many times (with jitter)
ACTIONS = ("accept", "reject", "add", "done")
STATUSES = ("pending", "in progress", "done")


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


# step i takes a file from version i to i+1
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5]
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


COMPANIONS = ("-wal", "-shm", "-journal")  # SQLite's files beside the database; they hold note text too


def _check_db_file(path: Path, st: os.stat_result) -> None:
    """The database must be a regular file of ours that no one else may read: note text goes into it. Checked with
    stat only, so a FIFO or a device is refused at once, never opened."""
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"--db {path} is a folder; pass a file name for the review database.")
    if not stat.S_ISREG(st.st_mode):
        raise ReviewError(f"--db {path} is a {path_kind(st.st_mode, devices=True)}, not a regular file; pass a file "
                          "name for the review database (nothing was opened).")
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
    link or a FIFO) is refused before SQLite opens the database: SQLite would write note text into it. The advice
    never removes one: a -wal may hold committed decisions that are in no other file (after a crash, or while the app
    has the database open), so a shared one is made owner-only again with chmod, as the database itself is."""
    loose, other = [], []
    for suffix in COMPANIONS:
        comp = Path(f"{path}{suffix}")
        try:
            st = comp.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            other.append(f"{comp} is a {path_kind(st.st_mode, devices=True)}")
        elif st.st_uid != os.geteuid():
            other.append(f"{comp} is owned by another user (uid {st.st_uid})")
        elif st.st_mode & 0o077:
            loose.append((comp, stat.S_IMODE(st.st_mode)))
    if other:
        raise ReviewError(f"{'; '.join(other)}: not the review database's own file, and SQLite would write note text "
                          "into it (it may also hold decisions not yet in the database, so keep it); pass another "
                          "--db path, or ask whoever made it (nothing was opened).")
    if loose:
        names = " ".join(str(c) for c, _ in loose)
        modes = ", ".join(f"{c.name} mode {m:04o}" for c, m in loose)
        raise ReviewError(f"the review database's own files can be read or written by others ({modes}); they hold "
                          f"note text and may hold decisions not yet in {path.name}: if they are yours, "
                          f"`chmod 600 {names}` (keep them: removing one loses those decisions), or pass another "
                          "--db path (nothing was opened).")


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
        rows = [] if note_id is None else self.read(
            "SELECT system FROM models WHERE sha256 IN (SELECT DISTINCT checkpoint_sha256 FROM suggestions "
            "WHERE note = ?)", (note_id,))
        rows = rows or self.read("SELECT system FROM models")
        systems = [code_system(r[0]) for r in rows if r[0]]
        return family_of(systems) if systems else LOCAL

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
                evidence = (rec.get("evidence") or {}).get("codes") or {}
                predicted = rec.get("predicted", [])
                con.executemany(
                    "INSERT INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, score, "
                    "evidence, rank, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'model')",
                    [(note_id, sha256, checkpoint, p["code"], p.get("description") or "", float(p["score"]),
                      json.dumps(evidence.get(p["code"], [])), rank)
                     for rank, p in enumerate(predicted, start=1)])
                # codes suggested from their titles (#43), after the model's; their score is a rank, not a probability
                con.executemany(
                    "INSERT OR IGNORE INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, "
                    "score, evidence, rank, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'title')",
                    [(note_id, sha256, checkpoint, p["code"], p.get("title") or "", float(p["score"]),
                      json.dumps([{**sp, "weight": 1.0} for sp in p.get("spans", [])]), rank)
                     for rank, p in enumerate(rec.get("suggested") or [], start=len(predicted) + 1)])
                if signals and note_id in signals:
                    con.execute("INSERT INTO note_signals (note, checkpoint_sha256, uncertainty, rarity) "
                                "VALUES (?, ?, ?, ?)", (note_id, sha256, *signals[note_id]))
            return added

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

    def next_notes(self, k: int = 1, *, order: str | None = None, reviewer: str | None = None,
                   now: float | None = None) -> list[str]:
        """The next K notes to review by the next-note rule (`clinicode.review.teach.next_notes`)."""
        from clinicode.review.teach import DEFAULT_ORDER, next_notes

        return next_notes(self, k, order=order or DEFAULT_ORDER, reviewer=reviewer, now=now)

    def note(self, note_id: str, *, reviewer: str | None = None) -> dict[str, Any]:
        """One note: text, status, claim, suggestions (with evidence), each code's latest decision, the log.

        A double-coded note not yet adjudicated is blind: `state` and `log` hold REVIEWER's decisions only (none when
        REVIEWER is None); `assigned` names its coders and when each finished."""
        rows = self.read("SELECT * FROM notes WHERE id = ?", (note_id,))
        if not rows:
            raise ReviewError(f"no note {note_id!r} in the review database {self.path}; check the id (see "
                              "`clinicode review stats`).")
        n = rows[0]
        sugg = [{"code": s["code"], "description": s["description"], "score": s["score"], "rank": s["rank"],
                 "evidence": json.loads(s["evidence"]), "checkpoint": s["checkpoint_path"],
                 "checkpoint_sha256": s["checkpoint_sha256"], "source": s["source"]}
                for s in self.read("SELECT * FROM suggestions WHERE note = ? ORDER BY rank", (note_id,))]
        log = [dict(r) for r in self.read("SELECT id, code, action, reviewer, at, source, was, checkpoint_sha256 "
                                           "FROM decisions WHERE note = ? ORDER BY id",
                                           (note_id,))]
        assigned = {r[0]: r[1] for r in self.read("SELECT reviewer, finished_at FROM assignments WHERE note = ? "
                                                  "ORDER BY rowid", (note_id,))}
        if assigned and n["status"] != "done":
            log = [r for r in log if r["reviewer"] == reviewer]
        return {"id": n["id"], "text": n["text"], "status": n["status"], "claimed_by": n["claimed_by"],
                "claim_expires": n["claim_expires"], "queued_at": n["queued_at"], "suggestions": sugg,
                "state": _state(log), "log": log, "assigned": assigned}

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
        reviewer = _reviewer(reviewer)
        now = time.time() if now is None else now

        def run(con: sqlite3.Connection) -> float:
            n = _open_note(con, self.path, note_id)
            expires = now + minutes * 60
            coders = [r[0] for r in con.execute("SELECT reviewer FROM assignments WHERE note = ?", (note_id,))]
            if coders:  # double coded: each coder works blind and in parallel; nobody else holds it
                if reviewer not in coders:
                    raise ClaimedError(f"note {note_id!r} is double coded by {' and '.join(sorted(coders))}; pick "
                                       "another note.")
                con.execute("INSERT OR IGNORE INTO work (note, reviewer, started) VALUES (?, ?, ?)",
                            (note_id, reviewer, now))
                return expires
            _check_claim(n, reviewer, now)
            con.execute("UPDATE notes SET claimed_by = ?, claim_expires = ? WHERE id = ?", (reviewer, expires, note_id))
            con.execute("INSERT OR IGNORE INTO work (note, reviewer, started) VALUES (?, ?, ?)",
                        (note_id, reviewer, now))
            return expires

        return self.write(run)

    def release(self, note_id: str, reviewer: str) -> None:
        """Give up REVIEWER's claim on NOTE (no-op when they do not hold it)."""
        self.write(lambda con: con.execute(
            "UPDATE notes SET claimed_by = NULL, claim_expires = NULL WHERE id = ? AND claimed_by = ?",
                                           (note_id, reviewer)))

    # -------------------------------------------------------------------------------------------- decisions, results
    def decide(self, note_id: str, reviewer: str, *, accept: Sequence[str] = (), reject: Sequence[str] = (),
               add: Sequence[str] = (), done: bool = False, now: float | None = None) -> dict[str, Any]:
        """Record REVIEWER's decisions on NOTE, all or none (`clinicode.review.decisions.decide`)."""
        from clinicode.review.decisions import decide

        return decide(self, note_id, reviewer, accept=accept, reject=reject, add=add, done=done, now=now)

    def finish(self, note_id: str, reviewer: str, *, now: float | None = None) -> dict[str, Any]:
        """Mark NOTE done (every suggestion needs a decision)."""
        return self.decide(note_id, reviewer, done=True, now=now)

    def finished(self) -> list[dict[str, Any]]:
        """Done notes with text, final codes, suggestions and scores (`clinicode.review.stats.finished`)."""
        from clinicode.review.stats import finished

        return finished(self)

    def stats(self, *, by: str = "day", min_decisions: int | None = None,
              target: float | None = None) -> dict[str, Any]:
        """Agreement and what the queue teaches (`clinicode.review.stats.stats`)."""
        from clinicode.review.stats import stats

        return stats(self, by=by, **{k: v for k, v in (("min_decisions", min_decisions), ("target", target))
                                    if v is not None})


def _state(log: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Each code's latest decision (accept, reject or add), in the order the log holds them."""
    state: dict[str, str] = {}
    for r in log:
        if r.get("code") is not None and r["action"] != "done":
            state[r["code"]] = r["action"]
    return state


def _reviewer(name: Any) -> str:
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
    if not created:
        return _open_existing(path, st, readonly=readonly, target=_target)
    companions = {s for s in COMPANIONS if os.path.lexists(f"{path}{s}")}  # planted before us: never ours to remove
    try:
        return _open_existing(path, st, readonly=readonly, target=_target, created=True)
    except BaseException:
        _remove_created(path, st, companions)  # a refused or failed first open leaves nothing it created
        raise


def _remove_created(path: Path, st: os.stat_result, kept: set[str]) -> None:
    """Remove the database file this process created a moment ago (only if it is still that file), and the SQLite
    companions that appeared with it; companions that were there before stay."""
    try:
        now = path.lstat()
    except OSError:
        return
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        return  # replaced meanwhile: not ours any more
    for suffix in COMPANIONS:
        if suffix not in kept:
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def _open_existing(path: Path, st: os.stat_result, *, readonly: bool, target: int, created: bool = False) -> ReviewDB:
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
                _open_for_writing(con, path, target=target)
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
