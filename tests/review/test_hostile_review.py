"""The review queue, second hostile round (issue #36): one test per finding about the review database, the `review`
commands and the JSONL reader they share with `predict`.

Each refused case exits with status 1 and one line, and leaves what it did not create as it was. Synthetic notes only.
"""

from __future__ import annotations

import json
from pathlib import Path

from clinicode.records import read_records

from helpers import SECRET, succeeds

LONE = "\\ud800"  # a lone UTF-16 surrogate as JSON writes it: legal JSON, but no character


# ------------------------------------------------------------------------------------------------ the JSONL reader
def _hostile_jsonl(path: Path) -> Path:
    lines = ['{"id": "ok1", "text": "hypertension and congestive heart failure"}',
             '{"id": "sur-text", "text": "atrial fibrillation ' + LONE + ' ' + SECRET + '"}',
             '{"id": "sur-id-' + LONE + '", "text": "acute kidney failure"}',
             '{"id": "big", "text": "' + SECRET + '", "n": 1' + "0" * 5000 + '}',   # over Python's 4,300 digits
             '{"id": "deep", "text": "' + SECRET + '", "x": ' + "[" * 5000 + "]" * 5000 + '}',
             '{"id": "ok2", "text": "pneumonia and sepsis"}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_lone_surrogate_a_huge_number_or_deep_nesting_is_one_bad_record(tmp_path):
    recs = list(read_records(_hostile_jsonl(tmp_path / "in.jsonl")))
    assert [r.id for r in recs] == ["ok1", "sur-text", "line-3", "line-4", "line-5", "ok2"]
    assert [r.error is None for r in recs] == [True, False, False, False, False, True]
    assert "lone UTF-16 surrogate" in recs[1].error and "'id'" in recs[2].error
    assert "4,300 digits" in recs[3].error and "nesting too deep" in recs[4].error
    assert all(SECRET not in (r.error or "") for r in recs)


def test_predict_and_review_queue_report_those_records_and_score_the_rest(tiny_run, tmp_path):
    src = _hostile_jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "out.jsonl"
    res = succeeds(["predict", "--checkpoint", tiny_run, "--input", src, "--output", out, "--device", "cpu",
                    "--no-progress"])
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [("error" in r) for r in rows] == [False, True, True, True, True, False]
    assert "scored 2 notes, 4 bad records" in res.stderr + res.stdout
    db = tmp_path / "q.sqlite"
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", src, "--db", db])
    assert "queued 2 notes, 0 already in the queue (left unchanged), 4 bad records" in res.stdout
    assert res.stderr.count("bad record:") == 4 and SECRET not in res.stderr
