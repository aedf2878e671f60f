"""The review store: one SQLite file, its schema and migrations, opening it safely, transactions, and the rules every
writer of a note shares. It imports no review service; the services (decisions, stats, queue, teach, export, audit)
import it, and only its public names."""

from clinicode.review.store.codes import MAX_CODE_CHARS, norm_code, same_code
from clinicode.review.store.errors import BUSY_MS, RETRIES, ClaimedError, ReviewError
from clinicode.review.store.file_rules import COMPANIONS, SQLITE_MAGIC
from clinicode.review.store.handle import ReviewStore
from clinicode.review.store.opening import DB_ENV, db_path, open_store
from clinicode.review.store.rows import (
    CLAIM_MINUTES,
    check_claim,
    check_reviewer,
    note_checkpoint,
    open_note,
    start_work,
    state_of,
)
from clinicode.review.store.schema import ACTIONS, APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, STATUSES, utc_now
from clinicode.review.store.spans import MAX_SPANS, check_evidence

__all__ = ["ACTIONS", "APPLICATION_ID", "BUSY_MS", "CLAIM_MINUTES", "COMPANIONS", "DB_ENV", "MAX_CODE_CHARS",
           "MAX_SPANS", "MIGRATIONS", "RETRIES", "SCHEMA_VERSION", "SQLITE_MAGIC", "STATUSES", "ClaimedError",
           "ReviewError", "ReviewStore", "check_claim", "check_evidence", "check_reviewer", "db_path", "norm_code",
           "note_checkpoint", "open_note", "open_store", "same_code", "start_work", "state_of", "utc_now"]
