"""benchmarks/bench_review_loop.py: the loop driven through the commands, on a tiny synthetic set, one budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow   # 13 commands, 10 of them load torch: about a minute
def test_the_loop_chains_the_commands_and_reports_every_number(coded_notes, tmp_path):
    data = coded_notes("synthetic", 30, 20, 20)
    work = tmp_path / "work"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_review_loop.py"), "--data-dir", str(data), "--seeds", "0",
           "--budgets", "10", "--orders", "teach", "--work-dir", str(work), "--no-write",
           "--train-args", "--model tfidf-lr"]          # seconds a train: the loop's plumbing is what is tested
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((work / "review_loop.json").read_text())
    entry = out["sets"]["synthetic"]
    (swork,) = work.glob("synthetic*")        # the set's folder, named with the train options' tag
    seed = entry["seeds"]["0"]
    assert seed["seed_notes"] == round(0.1 * entry["train_notes"]) == 3
    assert seed["pool_notes"] == entry["train_notes"] - 3
    assert 0.0 <= seed["seed_run"]["micro_f1"] <= 1.0 and 0.0 <= seed["seed_run"]["macro_f1"] <= 1.0
    (p,) = seed["orders"]["teach"]
    assert p["budget"] == 10 and p["reviewed"] == round(0.1 * seed["pool_notes"])
    for value in (p["micro_f1"], p["macro_f1"], p["fresh"]["micro_f1"], p["fresh"]["macro_f1"]):
        assert 0.0 <= value <= 1.0
    assert p["codes_per_note"] >= 1     # every note holds a gold code of the label set
    assert p["retrain_s"] > 0 and p["rescore_s"] > 0 and p["next_s"] > 0 and p["fresh"]["train_cpu"] > 0
    assert p["retrain_cpu_over_fresh"] > 0
    assert p["fresh"]["train_s"] > 0 and p["decide_s_per_note"] > 0
    record = json.loads((swork / "seed0" / "teach" / "10" / "round.json").read_text())
    assert len(set(record["picked"])) == p["reviewed"] and set(record["reviewed"]) == set(record["picked"])
    for key, cell in entry["summary"]["teach"]["10"].items():
        if isinstance(cell, dict):
            assert 0.0 <= cell["worst"] <= cell["mean"] <= 1.0, key
    # the review database and the notes hold note text: owner-only
    assert oct((swork / "seed0" / "teach" / "10" / "review.sqlite").stat().st_mode & 0o777) == "0o600"
    assert oct((swork / "seed0" / "queue" / "pool.jsonl").stat().st_mode & 0o777) == "0o600"
    # a second run reuses every run, round and evaluation: the same figures, no command run again
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((work / "review_loop.json").read_text())["sets"] == out["sets"]


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_review_loop", ROOT / "benchmarks" / "bench_review_loop.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT))
    spec.loader.exec_module(module)
    return module


def test_add_keeps_the_published_sets_and_refuses_other_budgets(tmp_path, monkeypatch):
    """--add publishes a run's sets beside those already published; a file measured at other budgets or orders is
    refused in one line rather than mixed into one table."""
    bench = _bench()
    published = tmp_path / "review_loop.json"
    monkeypatch.setattr(bench, "RESULTS", published)
    assert bench._published_sets([10, 30], ["teach"]) == {}          # nothing published yet: nothing kept
    published.write_text(json.dumps({"budgets": [10, 30], "orders": ["teach"],
                                      "sets": {"cmc2007": {"seeds": {"0": {}}}, "ncbi": {"seeds": {"0": {}}}}}))
    kept = bench._published_sets([10, 30], ["teach"])
    assert set(kept) == {"cmc2007", "ncbi"}
    for budgets, orders in (([10, 60], ["teach"]), ([10, 30], ["teach", "arrival"])):
        with pytest.raises(SystemExit, match=r"--add: .* was measured at budgets \[10, 30\] and orders \['teach'\]"):
            bench._published_sets(budgets, orders)


def _seed(micro: float) -> dict:
    """One seed's figures as `measure_seed` records them, at one budget of the teach order."""
    point = {"micro_f1": micro, "macro_f1": micro / 2, "codes_per_note": 2.0, "retrain_cpu_over_fresh": 0.5,
             "fresh": {"micro_f1": micro + 0.1, "macro_f1": micro / 2 + 0.1}}
    return {"orders": {"teach": [point]}, "seed_run": {"micro_f1": micro - 0.1, "macro_f1": micro / 3},
            "commits": ["abc1234"]}


def test_add_merges_a_sets_new_seeds_with_its_published_ones(tmp_path, monkeypatch):
    """--add with a set already published keeps its seeds this run did not measure, and the mean and worst seed are
    recomputed over all of them."""
    bench = _bench()
    published = tmp_path / "review_loop.json"
    monkeypatch.setattr(bench, "RESULTS", published)
    old = bench.with_seeds({"data": "ncbi"}, {"0": _seed(0.8)}, [10], ["teach"])
    published.write_text(json.dumps({"budgets": [10], "orders": ["teach"], "sets": {"ncbi": old}}))
    monkeypatch.setattr(bench, "measure_set", lambda cli, name, *args: bench.with_seeds(
        {"data": name}, {"1": _seed(0.6)}, [10], ["teach"]))
    monkeypatch.setattr(bench, "_commit", lambda: "abc1234")
    monkeypatch.setattr(bench, "table", lambda *args: [])      # the figures, not their rendering, are tested here
    mask = os.umask(0o077)
    os.umask(mask)
    try:
        out = bench.main(["--sets", "ncbi", "--seeds", "1", "--budgets", "10", "--orders", "teach", "--work-dir",
                          str(tmp_path / "w"), "--no-write", "--add"])
    finally:   # main makes its process's files owner-only; this test's process is pytest's, shared with others
        os.umask(mask)
    entry = out["sets"]["ncbi"]
    assert list(entry["seeds"]) == ["0", "1"]
    cell = entry["summary"]["teach"]["10"]["micro_f1"]
    assert cell["mean"] == pytest.approx(0.7) and cell["worst"] == pytest.approx(0.6)
    assert entry["seed_run"]["micro_f1"]["worst"] == pytest.approx(0.5)
