"""clinicode's public API: what a notebook, the app and pipelines import, in one module (docs/predict.md).

Importing it loads nothing else: each name loads its module on first use, so `api.CHECKPOINT_DIR` needs no torch."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the one list of public names: at run time `__getattr__` reads it and imports a name when asked
    from clinicode.checkpoint import (
        Checkpoint,
        load_checkpoint,
        model_options_as_saved,
        resolve_checkpoint_dir,
        test_data_dir,
        verify_checkpoint,
    )
    from clinicode.cluster import score_partition
    from clinicode.codes.chapters import chapter
    from clinicode.codes.icd9 import load_descriptions_tsv
    from clinicode.codes.search import code_matches
    from clinicode.codes.suggest import read_tree
    from clinicode.codes.systems import CODE_SYSTEMS, CodeSystem, code_system, infer_code_system
    from clinicode.config import TrainConfig, config_from_dict, load_config
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
    from clinicode.data.prepare import prepare_mimic
    from clinicode.data.prepared import load_dataset, read_split_codes, read_split_texts
    from clinicode.data.protocols import PROTOCOLS, by_name as protocol_named
    from clinicode.data.splits import CAML_IDS, PUBLISHED
    from clinicode.errors import CheckpointError, ClinicodeError, ConfigError, DataFormatError
    from clinicode.evaluate import compare, evaluate
    from clinicode.files import write_json_atomic
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
        export as export_reviewed,
        open_db as open_review_db,
        queue as queue_for_review,
        search_codes as search_review_codes,
    )
    from clinicode.review.audit import agreement as review_agreement, work_times as review_work_times
    from clinicode.review.teach import DEFAULT_ORDER as DEFAULT_REVIEW_ORDER, ORDERS as REVIEW_ORDERS
    from clinicode.synthetic.mimic3 import write_demo_mimic
    from clinicode.synthetic.mimic4 import write_demo_mimic4
    from clinicode.train import train


def _names() -> dict[str, tuple[str, str]]:
    """{public name: (module, attribute)}, read from the `if TYPE_CHECKING:` block above (one list, no twin)."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {a.asname or a.name: (node.module, a.name) for node in block.body
            if isinstance(node, ast.ImportFrom) and node.module for a in node.names}


_WHERE = _names()
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (torch, pandas and the rest load only when needed)."""
    try:
        module, attr = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
