"""benchmarks/bench_review_new_codes.py: codes only coders added, through the commands, on a tiny synthetic set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _labels(path: Path) -> set[str]:
    return {c for line in path.read_text().splitlines() if line.strip() for c in json.loads(line)["labels"]}


@pytest.mark.slow   # 4 commands that load torch and one `review decide` a pool note: about a minute
def test_a_code_only_coders_gave_joins_the_retrained_checkpoint_and_is_counted(coded_notes, tmp_path):
    data = coded_notes("synthetic", 40, 20, 20)
    work = tmp_path / "work"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_review_new_codes.py"), "--data-dir", str(data),
           "--new", "1", "--min-notes", "3", "--base-share", "0.6", "--work-dir", str(work), "--no-write",
           "--train-args", "--model tfidf-lr"]          # seconds a train: the plumbing is what is tested
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((work / "new_codes-synthetic.json").read_text())
    (code,) = out["new_codes"]
    (run,) = work.glob("synthetic-*")
    # the base never saw the code: not in its label set, nor in any split of its data
    base_codes = {lab["code"] for lab in json.loads((run / "base" / "checkpoint" / "labels.json").read_text())}
    assert code not in base_codes
    for split in ("train", "dev", "test"):
        assert code not in _labels(run / "base-data" / f"{split}.jsonl")
    pool = (run / "pool.jsonl").read_text().splitlines()
    assert len(pool) == out["pool_notes"] and out["base_notes"] + out["pool_notes"] <= 40
    assert out["base_notes"] == round(0.6 * (out["base_notes"] + out["pool_notes"]))
    assert out["added_on"][code] >= 3 and out["runs"]["base"]["codes"][code]["known"] is False
    # the coders' codes made it a code of the retrained checkpoint; the counts are `predict`'s on the test notes
    gold = {json.loads(line)["id"] for line in (data / "test.jsonl").read_text().splitlines()
            if code in json.loads(line)["labels"]}
    assert len(gold) >= 3
    for name in ("retrained", "fresh"):
        got = out["runs"][name]["codes"][code]
        labels = [lab["code"] for lab in json.loads((run / name / "checkpoint" / "labels.json").read_text())]
        assert code in labels
        records = [json.loads(line) for line in (run / f"{name}-test-predictions.jsonl").read_text().splitlines()]
        on = {str(r["id"]) for r in records if code in {p["code"] for p in r["predicted"]}}
        assert got == {"known": True, "test_notes": len(gold), "found": len(on & gold), "predicted": len(on)}
    assert any(code in line for line in out["retrain"]["said"])      # the retrain names the code it learnt
    assert f"| {code} |" in res.stdout                                 # the published row
    for path in (run / "pool.jsonl", run / "review.sqlite"):           # note text: owner-only
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    # a second run reuses every run: the same figures, nothing trained again
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((work / "new_codes-synthetic.json").read_text())["runs"] == out["runs"]
