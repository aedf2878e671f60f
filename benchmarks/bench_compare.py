"""The macro-AUC of `compare`'s paired bootstrap at thousands of codes: the blocked pair-indicator form against the
previous per-code sort, same inputs, alternating runs, one thread.

    OMP_NUM_THREADS=1 python benchmarks/bench_compare.py [--notes 3000] [--codes 2000] [--resamples 200] [--repeat 3]

Synthetic gold with Zipf-like code frequencies (about 15 codes a note) and scores; prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from clinicode.metrics import bootstrap as M


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--codes", type=int, default=2000)
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n, k = a.notes, a.codes
    freq = 1.0 / np.arange(1, k + 1) ** 0.9
    freq = np.minimum(freq / freq.sum() * 15, 0.9)
    y = rng.random((n, k)) < freq
    s = np.clip(rng.random((n, k)).astype(np.float32) * 0.7 + 0.3 * y, 0, 1)
    w = rng.multinomial(n, np.full(n, 1.0 / n), size=a.resamples)
    w = np.vstack([np.ones((1, n), dtype=w.dtype), w])
    times: dict[str, list[float]] = {"blocked": [], "sorting": []}
    for _ in range(a.repeat):                                           # alternate: a busy machine hits both alike
        for name, fn in (("blocked", M._weighted_auc_macro), ("sorting", M._weighted_auc_macro_by_sorting)):
            t0 = time.perf_counter()
            out = fn(y, s, w)
            times[name].append(time.perf_counter() - t0)
            times.setdefault(name + "_value", []).append(float(out[0]))
    assert abs(times["blocked_value"][0] - times["sorting_value"][0]) < 1e-12
    b, o = statistics.median(times["blocked"]), statistics.median(times["sorting"])
    print(f"{n:,} notes x {k:,} codes x {a.resamples} resamples: blocked {b:.1f} s, sorting {o:.1f} s, {o / b:.1f}x")


if __name__ == "__main__":
    main()
