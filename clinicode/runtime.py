"""Seeding and device choice, nothing else."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from clinicode.errors import ConfigError


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch so CPU runs repeat exactly."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))


def pick_device(device: str = "auto") -> torch.device:
    """'auto' picks CUDA when present, else CPU; 'cuda' without a GPU is an error with the fix."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device} was asked for, but torch sees no CUDA GPU; use --device cpu or auto.")
    return torch.device(device)
