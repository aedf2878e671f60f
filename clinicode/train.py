"""The training verb as callers name it (`clinicode.train.train`, `retrain`): the rooms are in `clinicode.training`
(run, loop, finish, state); this module only names what the CLI, the pipelines and a notebook use."""

from __future__ import annotations

from clinicode.constants import RETRAIN_EPOCHS
from clinicode.training.run import (
    FRESH_GROWTH,
    RUN_DATA,
    WARM_PATIENCE,
    check_run_folder,
    retrain,
    retrain_start,
    train,
)
from clinicode.training.state import STATE_DIR, make_optimizer

__all__ = ["train", "retrain", "retrain_start", "check_run_folder", "make_optimizer", "STATE_DIR", "RUN_DATA",
           "RETRAIN_EPOCHS", "FRESH_GROWTH", "WARM_PATIENCE"]
