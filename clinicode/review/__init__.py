"""A coder's review queue: notes scored by a checkpoint, the coder's decisions on them, export and agreement stats.

One SQLite file (the path the user chose: `--db` or $CLINICODE_REVIEW_DB) holds everything, note text included:
`notes` (text, status, who holds the claim and until when), `suggestions` (the model's predicted codes with scores
and evidence spans, from `Prediction.to_dict()`, and which checkpoint made them), `models` (each checkpoint's code
list, for adding codes) and `decisions` (an append-only audit log: reviewer, UTC time, note, code, action; triggers
refuse UPDATE and DELETE on it). The CLI (`clinicode review ...`) and the app's Review page both go through this
package, so a decision made in one is the same row as one made in the other.

Safety: the file is created owner-only (0600, before SQLite opens it; its -wal and -shm files follow the same
mode); writes run in `BEGIN IMMEDIATE` transactions with a busy timeout and retries, so two processes deciding at
once both succeed; a damaged or foreign file, a database from a newer clinicode and a full disk each raise one
`ReviewError` line, and a failed write rolls back whole, leaving what was saved before intact.

Rooms: `database` (the file, its schema, opening it safely, transactions, claims), `decisions` (accept, reject, add),
`queue` (scoring notes into it), `teach` (which note next), `export` (a coded-notes folder for training, and
`review retrain`'s data), `stats` (agreement and what the queue teaches), `audit` (double coding, kappa,
adjudication, the audit trail, time per note). This module re-exports their public names.
"""

from clinicode.review.database import (
    ACTIONS,
    APPLICATION_ID,
    CLAIM_MINUTES,
    COMPANIONS,
    DB_ENV,
    MIGRATIONS,
    SCHEMA_VERSION,
    STATUSES,
    ClaimedError,
    ReviewDB,
    ReviewError,
    db_path,
    open_db,
    utc_now,
)
from clinicode.review.decisions import search_codes
from clinicode.review.export import EXPORT_KIND, export, is_review_export
from clinicode.review.queue import CHUNK, EXPLAIN, queue
from clinicode.review.stats import MIN_ROUTE_DECISIONS, ROUTE_TARGET, route_threshold

__all__ = ["ACTIONS", "APPLICATION_ID", "CHUNK", "CLAIM_MINUTES", "COMPANIONS", "DB_ENV", "EXPLAIN", "EXPORT_KIND",
           "MIGRATIONS", "MIN_ROUTE_DECISIONS", "ROUTE_TARGET", "SCHEMA_VERSION", "STATUSES", "ClaimedError",
           "ReviewDB", "ReviewError", "db_path", "export", "is_review_export", "open_db", "queue", "route_threshold",
           "search_codes", "utc_now"]
