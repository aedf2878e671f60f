"""clinicode's public API: the serving surface (`clinicode.serving`, what the app imports) plus the verbs that train,
evaluate and prepare, in one module for a notebook and the pipelines (docs/predict.md). Importing it loads nothing
else: each name loads its module on first use, so `api.CHECKPOINT_DIR` needs no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clinicode import serving

if TYPE_CHECKING:  # the names beyond the serving surface's: at run time `__getattr__` reads both lists
    from clinicode.cluster import score_partition
    from clinicode.config import TrainConfig, config_from_dict, load_config
    from clinicode.data.prepare import prepare_mimic
    from clinicode.data.prepared import load_dataset
    from clinicode.data.protocols import PROTOCOLS, by_name as protocol_named
    from clinicode.data.splits import CAML_IDS, PUBLISHED
    from clinicode.evaluate import compare, evaluate
    from clinicode.files import write_json_atomic
    from clinicode.review import export as export_reviewed, queue as queue_for_review
    from clinicode.synthetic.mimic3 import write_demo_mimic
    from clinicode.synthetic.mimic4 import write_demo_mimic4
    from clinicode.train import train


_WHERE = {**serving.public_names(serving.__file__), **serving.public_names(__file__)}
__all__ = sorted(_WHERE)
__getattr__ = serving.lazy_getattr(__name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
