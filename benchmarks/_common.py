"""Shared helpers for the benchmark scripts: synthetic MIMIC-sized notes and checkpoints, timing, BENCHMARKS.md
sections."""

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

    from clinicode.environment import environment_hash

    return (f"{time.strftime('%Y-%m-%d')}; Python {platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, {platform.machine()}; environment {environment_hash()} "
            "(ci/requirements-lock.txt when it matches `make lock`'s hash).")


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


# ------------------------------------------------------------------------------ what a benchmark may delete
OWN_MARK = ".clinicode-benchmark-made-this"  # written by a benchmark into (or beside) what it created


def mark_own(path: Path) -> None:
    """Mark PATH (a folder: a file inside it; a file: a file beside it) as created by a benchmark, so a later run may
    delete it. Call right after the benchmark (or the command it ran) created PATH."""
    path = Path(path)
    mark = path / OWN_MARK if path.is_dir() else path.with_name(path.name + OWN_MARK)
    mark.write_text("created by a clinicode benchmark; it may delete this on its next run\n")


def remove_own(path: Path, *, marks: tuple[str, ...] = ()) -> None:
    """Delete PATH if a benchmark created and marked it; nothing when it does not exist. `marks`: more file names
    that, inside a folder, mark it as a benchmark's (the data caches' GENERATED.json, written after creating it).

    Raises:
        SystemExit: PATH exists without the mark: the benchmark never deletes what it did not create (one line: what,
            why, how to fix).
    """
    import shutil

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink() and any((path / m).is_file() for m in (OWN_MARK, *marks)):
        shutil.rmtree(path)
        return
    beside = path.with_name(path.name + OWN_MARK)
    if path.is_file() and beside.is_file():
        path.unlink()
        beside.unlink()
        return
    raise SystemExit(f"{path} exists and was not created by this benchmark (no {OWN_MARK} mark); it is left alone. "
                     "Move it away or pass another --work-dir.")


def read_jsonl(path: Path) -> list[dict]:
    """The records of a coded-notes split (one JSON object a line)."""
    import json

    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_titles(folder: Path) -> dict[str, str]:
    """{code: title} from a public set's labels.tsv (columns code or label, and title)."""
    titles: dict[str, str] = {}
    with open(folder / "labels.tsv", encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(head, line.rstrip("\n").split("\t")))
            titles[row.get("code") or row.get("label", "")] = row.get("title", "")
    return titles


def multi_hot(rows: list[dict], codes: list[str]) -> np.ndarray:
    """[N, K] int8: 1 where row n's labels hold codes[k] (labels outside CODES left out)."""
    index = {c: k for k, c in enumerate(codes)}
    y = np.zeros((len(rows), len(codes)), dtype=np.int8)
    for i, r in enumerate(rows):
        for c in r["labels"]:
            if c in index:
                y[i, index[c]] = 1
    return y



TITLE_SUGGESTIONS = 10  # `predict --titles` before #43 listed this many at most (bench_suggestions, study_long_tail)
