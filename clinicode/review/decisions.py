"""Coders' decisions: accept, reject and add codes on a note, all or none, with codes checked against the note's
code system; and the code search of the Review page's *Add a code*."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Mapping, Sequence

from clinicode.codes.search import code_matches, search_catalogue
from clinicode.codes.systems import LOCAL, CodeSystem, check_code, infer_code_system
from clinicode.review.store import (
    CLAIM_MINUTES,
    ReviewError,
    ReviewStore,
    check_claim,
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


def decide(db: ReviewStore, note_id: str, reviewer: str, *, accept: Sequence[str] = (), reject: Sequence[str] = (),
           add: Sequence[str] = (), done: bool = False, evidence: Mapping[str, Sequence[tuple[int, int]]] | None = None,
           now: float | None = None) -> dict[str, Any]:
    """Record REVIEWER's decisions on NOTE as audit rows, all or none (one transaction), and finish it if `done`.

    accept/reject: suggested codes (reject also withdraws a code added earlier); add: a code the model did not
    suggest (one of the checkpoint's codes, or a code of the note's code system: `_addable`); done: every
    suggestion must then have a decision; evidence: {code: [(start, end), ...]}, the character spans of the note that
    justify a code this call accepts or adds (at most `MAX_SPANS` a code), stored with its decision row and taught to
    the default model by `review retrain` and `review export`. The reviewer's claim on the note is renewed.

    Raises:
        ClaimedError: another reviewer holds the note. ReviewError: unknown note or code, a finished note, a code
        given twice, undecided suggestions at `done`, or evidence for a code not accepted or added here, or outside
        the note's text.
    """
    reviewer = check_reviewer(reviewer)
    now = time.time() if now is None else now
    accept, reject, add = ([norm_code(c) for c in xs] for xs in (accept, reject, add))
    if not accept + reject + add and not done:
        raise ReviewError("nothing to record; pass --accept, --reject, --add CODE or --done.")
    given = [(norm_code(c), spans) for c, spans in (evidence or {}).items()]
    system = db.code_system(note_id) if accept + reject + add else LOCAL
    model = [c for c, _ in db.model_codes(note_id) or db.model_codes()]
    add = [_addable(db, c, note_id, system, model) for c in add]

    def run(con: sqlite3.Connection) -> dict[str, Any]:
        n = open_note(con, db.path, note_id)
        assigned = _assigned(con, note_id)
        _check_coder(n, assigned, reviewer, now)
        proposed = {r[0]: r[1] for r in con.execute("SELECT code, source FROM suggestions WHERE note = ?", (note_id,))}
        suggested = set(proposed)
        mine = " AND reviewer = ?" if assigned else ""
        state = state_of([dict(r) for r in con.execute("SELECT code, action FROM decisions "
                                                       f"WHERE note = ?{mine} ORDER BY id",
                                                       (note_id, reviewer) if assigned else (note_id,))])
        before = dict(state)
        _match_codes(note_id, system, accept, reject, add, suggested, {c for c, a in state.items() if a == "add"})
        spans = check_evidence(note_id, given, system, accept + add, len(n["text"]))
        at = utc_now()
        sha = note_checkpoint(con, note_id)
        rows = [(note_id, c, a, reviewer, at, sha, proposed.get(c, "person"), before.get(c), spans.get(c))
                for a, cs in (("accept", accept), ("reject", reject), ("add", add)) for c in cs]
        for r in rows:
            state[r[1]] = r[2]
        if done:
            undecided = sorted(c for c in suggested if state.get(c) not in ("accept", "reject"))
            if undecided:
                raise ReviewError(f"note {note_id!r}: {len(undecided)} suggested code(s) have no decision yet "
                                  f"({', '.join(undecided[:5])}); accept or reject each before "
                                  "finishing (nothing was saved).")
            rows.append((note_id, None, "done", reviewer, at, sha, "person", None, None))
        con.executemany("INSERT INTO decisions (note, code, action, reviewer, at, checkpoint_sha256, source, was, "
                        "spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        start_work(con, note_id, reviewer, now)
        _update_note(con, note_id, reviewer, done=done, double=bool(assigned), at=at, now=now)
        return {"note": note_id, "accepted": accept, "rejected": reject, "added": add, "done": done,
                "evidence": {c: json.loads(v) for c, v in spans.items()},
                "codes": sorted(c for c, a in state.items() if a in ("accept", "add"))}

    return db.write(run)


def _assigned(con: sqlite3.Connection, note_id: str) -> dict[str, str | None]:
    """{coder: finished_at or None} of a double-coded note; empty for a note coded once."""
    return {r[0]: r[1] for r in con.execute("SELECT reviewer, finished_at FROM assignments WHERE note = ?",
                                            (note_id,))}


def _check_coder(n: sqlite3.Row, assigned: dict[str, str | None], reviewer: str, now: float) -> None:
    """REVIEWER may decide on note N: one of its two coders, not finished yet, when it is double coded (claims aside:
    each works blind to the other's decisions); else no one else holds an unexpired claim on it."""
    note_id = n["id"]
    if not assigned:
        check_claim(n, reviewer, now)
        return
    if reviewer not in assigned:
        raise ReviewError(f"note {note_id!r} is double coded by {' and '.join(sorted(assigned))}; only they "
                          "decide on it (an adjudicator uses `clinicode review adjudicate`).")
    if assigned[reviewer] is not None:
        raise ReviewError(f"note {note_id!r}: {reviewer} finished it already; it waits for adjudication.")


def _match_codes(note_id: str, system: CodeSystem, accept: list[str], reject: list[str], add: list[str],
                 suggested: set[str], added: set[str]) -> None:
    """Spell ACCEPT and REJECT (in place) as the note's codes they name; refuse a code that is not suggested (or, for
    reject, added), an added code that is suggested, and a code given twice."""
    for i, c in enumerate(accept):
        accept[i] = same_code(system, c, suggested) or ""
        if not accept[i]:
            raise ReviewError(f"note {note_id!r}: {c} is not a suggested code, so it cannot "
                              f"be accepted; use --add {c}.")
    for i, c in enumerate(reject):
        reject[i] = same_code(system, c, suggested | added) or ""
        if not reject[i]:
            raise ReviewError(f"note {note_id!r}: {c} is neither suggested nor added, so "
                              "there is nothing to reject.")
    for c in add:
        if same_code(system, c, suggested):
            c = same_code(system, c, suggested)
            raise ReviewError(f"note {note_id!r}: {c} is already suggested; use --accept {c}.")
    given = accept + reject + add  # as stored: one spelling per code, whatever case or dots were typed
    twice = sorted({c for c in given if given.count(c) > 1})
    if twice:
        raise ReviewError(f"note {note_id!r}: code {twice[0]} is given more than once; accept, "
                          "reject or add each code once.")


def _update_note(con: sqlite3.Connection, note_id: str, reviewer: str, *, done: bool, double: bool, at: str,
                 now: float) -> None:
    """After REVIEWER's decisions: stop their clock when DONE; a double-coded note waits for adjudication, any other
    is finished (claim dropped) or stays in progress under the renewed claim."""
    if done:
        con.execute("UPDATE work SET finished = ? WHERE note = ? AND reviewer = ? AND finished IS NULL",
                    (now, note_id, reviewer))
    if done and double:
        con.execute("UPDATE assignments SET finished_at = ? WHERE note = ? AND reviewer = ?",
                    (at, note_id, reviewer))
        con.execute("UPDATE notes SET status = 'in_progress' WHERE id = ?", (note_id,))
    elif done:
        con.execute("UPDATE notes SET status = 'done', claimed_by = NULL, claim_expires = NULL WHERE id = ?",
                    (note_id,))
    elif double:
        con.execute("UPDATE notes SET status = 'in_progress' WHERE id = ?", (note_id,))
    else:
        con.execute("UPDATE notes SET status = 'in_progress', claimed_by = ?, claim_expires = ? WHERE id = ?",
                    (reviewer, now + CLAIM_MINUTES * 60, note_id))


def _addable(db: ReviewStore, code: str, note_id: str, system: CodeSystem, model: Sequence[str]) -> str:
    """CODE as stored when a coder adds it: one of the model's codes (however spelled), or a code of the note's code
    system in that system's one spelling (`CodeSystem.canonical`: 'S72001A' is 'S72.001A' on an ICD-10 run,
    'omim:312080' is 'OMIM:312080' on a MeSH/OMIM run); an ICD-10-CM code must be in the CMS tables (ICD-9-CM,
    ICD-10-PCS and MeSH ship no tables, so their shape is checked)."""
    known = same_code(system, code, set(model))
    if known:
        return known
    found = check_code(system, code)  # as a --titles file's codes are checked (Predictor)
    if found.not_in_tables:
        raise ReviewError(f"note {note_id!r}: --add {code} is neither one of the model's codes nor a valid "
                          "ICD-10-CM code (not in the CMS tables); check the spelling (the Review page searches "
                          "codes and titles).")
    if found.code is None:
        if found.other is not None and system is not LOCAL:
            raise ReviewError(f"note {note_id!r}: --add {code} is a code of {found.other.name}, but the model that "
                              f"scored this note codes in {system.name}; add the {system.name} code (such as "
                              f"{system.example}) instead.")
        raise ReviewError(f"note {note_id!r}: --add {code} is neither one of the model's codes nor a valid "
                          f"{system.name} code; check the spelling (the Review page searches codes and titles).")
    return found.code


def search_codes(query: str, model_codes: Sequence[tuple[str, str]], *, system: CodeSystem | None = None,
                 limit: int = 25) -> list[tuple[str, str, str]]:
    """(code, title, source) matching QUERY by code prefix or words in the title: the model's codes first (source
    "model"), then the codes the tables of the model's code system (SYSTEM, else inferred from its codes) list, source
    the member's name (`codes.search.search_catalogue`: ICD-10-CM's billable and category codes, the CMS tables shipped
    with simple-icd-10-cm; no other system ships tables to search)."""
    if not query.strip():
        return []
    out = [(c, t, "model") for c, t in model_codes if code_matches(query, c, t)][:limit]
    system = system or infer_code_system(c for c, _ in model_codes)
    return out + search_catalogue(query, system, skip={c for c, _, _ in out}, limit=limit - len(out))
