"""Seeding, device choice and the torchrun process group, nothing else."""

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
    """'auto' picks CUDA when present, else CPU; 'cuda' without a GPU is an error with the fix.

    Under torchrun each process takes the GPU of its LOCAL_RANK.
    """
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) if "LOCAL_RANK" in os.environ else None)
        return torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device} was asked for, but torch sees no CUDA GPU; use --device cpu or auto.")
    return torch.device(device)


def world() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) for a plain process."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def init_distributed(device: torch.device) -> tuple[int, int]:
    """Join the torchrun process group (NCCL on CUDA, gloo on CPU) when WORLD_SIZE > 1; returns (rank, world)."""
    rank, size, _ = world()
    if size > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return rank, size


def barrier() -> None:
    """Wait for every process of a torchrun job (no-op in a plain process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
