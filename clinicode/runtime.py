"""Seeding, device choice and the torchrun process group, nothing else."""

from __future__ import annotations

import functools
import os
import random
from typing import Any

import numpy as np
import torch

from clinicode.errors import ConfigError


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch so CPU runs repeat exactly.

    Python's string-hash seed (PYTHONHASHSEED) is fixed at interpreter start and cannot be set here; nothing in
    clinicode depends on it (gensim 4 seeds its vectors from `seed`; tests/train/test_embeddings.py checks across
    processes).
    """
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


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


@functools.cache
def _glibc() -> Any:
    """The C library (a ctypes handle), loaded once per process; None off Linux or where it cannot be loaded. Callers
    look up glibc-only functions on it (`mallopt`, `malloc_trim`) and get None on musl and others."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks for reuse instead of returning them to the OS.

    A CPU training step allocates and frees the same tens of megabytes (activations, the dense word-vector
    gradient) every time. With glibc's defaults the blocks above 128 KB are fresh `mmap`s, so every step pays
    page faults on first touch (~10% of a step at B=16, L=2,500). Raising the mmap threshold to glibc's
    maximum (32 MB) and the trim threshold to 1 GB makes those allocations come from, and go back to, the heap;
    the cost is that RSS stays at its peak until the process exits. The `train` command calls this; library
    users may choose to. Returns False (and changes nothing) where glibc's `mallopt` is unavailable.
    """
    mallopt = getattr(_glibc(), "mallopt", None)
    if mallopt is None:
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    # mmap threshold first: setting either value turns off glibc's dynamic adjustment of both.
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the OS now (glibc's `malloc_trim(0)`); the numbers computed are untouched.

    `keep_freed_memory` keeps freed blocks for the next training step; between phases (the vocabulary and word2vec
    before the first epoch, an epoch's buffers before dev is scored, training's before the final scoring) those blocks
    are dead weight that would otherwise stack with the next phase's and set the peak RSS. Returns False (and changes
    nothing) where glibc's `malloc_trim` is unavailable.
    """
    trim = getattr(_glibc(), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
