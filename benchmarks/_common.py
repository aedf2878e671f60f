"""Shared helpers for the benchmark scripts: synthetic MIMIC-sized notes and checkpoints, timing, BENCHMARKS.md sections."""

from __future__ import annotations

import platform
import re
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"


def synthetic_notes(n: int, *, n_tokens: int = 2500, vocab_size: int = 50_000, seed: int = 0) -> list[str]:
    """n notes of about n_tokens words drawn from a Zipf-like vocabulary of made-up words (no real text)."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}x" for i in range(vocab_size)])
    ranks = np.arange(1, vocab_size + 1)
    p = 1.0 / ranks
    p /= p.sum()
    out = []
    for _ in range(n):
        idx = rng.choice(vocab_size, size=n_tokens, p=p)
        toks = words[idx]
        out.append(" ".join(toks.tolist()) + ".")
    return out


def median_time(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine_line() -> str:
    import torch

    return (f"{time.strftime('%Y-%m-%d')}; Python {platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, {platform.machine()}.")


def publish(name: str, lines: list[str], *, write: bool = True) -> None:
    """Print a benchmark's markdown table and, unless write=False, store it as section NAME of BENCHMARKS.md."""
    table = "\n".join(lines)
    print(table)
    if write:
        write_section(name, table)


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section between <!-- bench:NAME:start --> and <!-- bench:NAME:end -->."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = BENCHMARKS_MD.read_text(encoding="utf-8") if BENCHMARKS_MD.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        text = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = BENCHMARKS_MD.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(BENCHMARKS_MD)
