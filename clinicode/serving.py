"""The serving surface: what the faces that score and review (the app) import, and never training, word vectors or
MIMIC preparation (an import contract); `clinicode.api` is it plus the verbs that train, evaluate and prepare.
Importing it loads nothing else: each name loads its module on first use, so listing runs needs no torch."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the one list of the surface's names: at run time `__getattr__` reads it, imports a name when asked
    from clinicode.checkpoint import (
        Checkpoint,
        load_checkpoint,
        model_options_as_saved,
        resolve_checkpoint_dir,
        test_data_dir,
        verify_checkpoint,
    )
    from clinicode.codes.chapters import chapter
    from clinicode.codes.icd9 import load_descriptions_tsv
    from clinicode.codes.search import code_matches
    from clinicode.codes.suggest import read_tree
    from clinicode.codes.systems import CODE_SYSTEMS, CodeSystem, code_system, infer_code_system
    from clinicode.constants import (
        CHECKPOINT_DIR,
        HISTORY_FILE,
        MANIFEST_FILE,
        METRICS_DEV_FILE,
        METRICS_TEST_FILE,
        MODEL_CONFIG_FILE,
        SCORES_TEST_FILE,
        THRESHOLD_FILE,
        TRAIN_CONFIG_FILE,
    )
    from clinicode.data.prepared import read_split_codes, read_split_texts
    from clinicode.errors import CheckpointError, ClinicodeError, ConfigError, DataFormatError
    from clinicode.formats import READERS, WRITERS, Upload, reader, writer
    from clinicode.metrics import HEADLINE, METRIC_LABELS, SUMMARY, binarize, f1_by_threshold, predicted_codes
    from clinicode.models import MODEL_KINDS, model_kind
    from clinicode.predict import WORD_BAR, CodeScore, Prediction, Predictor, Span
    from clinicode.predict_io import offered_writers, predict_file, records_bytes, score_records
    from clinicode.records import Record, read_records
    from clinicode.review import (
        CLAIM_MINUTES as REVIEW_CLAIM_MINUTES,
        DB_ENV as REVIEW_DB_ENV,
        STATUSES as REVIEW_STATUSES,
        ReviewError,
        open_db as open_review_db,
        search_codes as search_review_codes,
    )
    from clinicode.review.audit import agreement as review_agreement, work_times as review_work_times
    from clinicode.review.teach import DEFAULT_ORDER as DEFAULT_REVIEW_ORDER, ORDERS as REVIEW_ORDERS


def public_names(source: str | Path) -> dict[str, tuple[str, str]]:
    """{public name: (module, attribute)} of the `if TYPE_CHECKING:` block of the module file SOURCE (one list of a
    surface's names, no twin)."""
    tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {a.asname or a.name: (node.module, a.name) for node in block.body
            if isinstance(node, ast.ImportFrom) and node.module for a in node.names}


def lazy_getattr(module: str, where: dict[str, tuple[str, str]], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` for a surface: a name of WHERE imported from its home module on first use (torch,
    pandas and the rest load only when needed), then kept in NAMESPACE (the module's globals)."""
    def getattr_(name: str) -> Any:
        try:
            home, attr = where[name]
        except KeyError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(home), attr)
        namespace[name] = value  # the next lookup is a plain global
        return value

    return getattr_


_WHERE = public_names(__file__)
__all__ = sorted(_WHERE)
__getattr__ = lazy_getattr(__name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
