"""A coder's review queue in one owner-only SQLite file (docs/review.md): the store (`store`) and the services over it
(`decisions`, `queue`, `teach`, `stats`, `export`, `audit`). `open_db` gives a `ReviewDB`: the store with the services
as methods, what the CLI and the app's Review page share. This module re-exports the public names."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from clinicode.review import decisions as _decisions, stats as _stats, teach as _teach
from clinicode.review.decisions import search_codes
from clinicode.review.export import EXPORT_KIND, export, is_review_export
from clinicode.review.queue import CHUNK, EXPLAIN, queue
from clinicode.review.stats import MIN_ROUTE_DECISIONS, ROUTE_TARGET, route_threshold
from clinicode.review.store import (
    ACTIONS,
    APPLICATION_ID,
    CLAIM_MINUTES,
    COMPANIONS,
    DB_ENV,
    MIGRATIONS,
    SCHEMA_VERSION,
    STATUSES,
    ClaimedError,
    ReviewError,
    ReviewStore,
    db_path,
    open_store,
    utc_now,
)


class ReviewDB(ReviewStore):
    """An open review database with the services as methods (`open_db`); close it, or use it as a context manager."""

    def decide(self, note_id: str, reviewer: str, *, accept: Sequence[str] = (), reject: Sequence[str] = (),
               add: Sequence[str] = (), done: bool = False,
               evidence: Mapping[str, Sequence[tuple[int, int]]] | None = None,
               now: float | None = None) -> dict[str, Any]:
        """Record REVIEWER's decisions on NOTE, all or none, with the spans that justify the codes it accepts or adds
        (`clinicode.review.decisions.decide`)."""
        return _decisions.decide(self, note_id, reviewer, accept=accept, reject=reject, add=add, done=done,
                                 evidence=evidence, now=now)

    def finish(self, note_id: str, reviewer: str, *, now: float | None = None) -> dict[str, Any]:
        """Mark NOTE done (every suggestion needs a decision)."""
        return self.decide(note_id, reviewer, done=True, now=now)

    def next_notes(self, k: int = 1, *, order: str | None = None, reviewer: str | None = None,
                   now: float | None = None) -> list[str]:
        """The next K notes to review by the next-note rule (`clinicode.review.teach.next_notes`)."""
        return _teach.next_notes(self, k, order=order or _teach.DEFAULT_ORDER, reviewer=reviewer, now=now)

    def stats(self, *, by: str = "day", min_decisions: int | None = None,
              target: float | None = None, reviewer: str | None = None) -> dict[str, Any]:
        """Agreement and what the queue teaches (`clinicode.review.stats.stats`); REVIEWER: a coder asking, blind to
        the other coder's decisions on notes they double code."""
        return _stats.stats(self, by=by, reviewer=reviewer,
                            **{k: v for k, v in (("min_decisions", min_decisions), ("target", target))
                               if v is not None})


def open_db(db: str | Path | None = None, *, create: bool = True, readonly: bool = False,
            _target: int = SCHEMA_VERSION) -> ReviewDB:
    """Open (creating when `create`, owner-only) and migrate the review database at --db / $CLINICODE_REVIEW_DB
    (`clinicode.review.store.open_store`, which names what is checked and refused)."""
    return open_store(db, create=create, readonly=readonly, handle=ReviewDB, _target=_target)


__all__ = ["ACTIONS", "APPLICATION_ID", "CHUNK", "CLAIM_MINUTES", "COMPANIONS", "DB_ENV", "EXPLAIN", "EXPORT_KIND",
           "MIGRATIONS", "MIN_ROUTE_DECISIONS", "ROUTE_TARGET", "SCHEMA_VERSION", "STATUSES", "ClaimedError",
           "ReviewDB", "ReviewError", "ReviewStore", "db_path", "export", "is_review_export", "open_db", "queue",
           "route_threshold", "search_codes", "utc_now"]
