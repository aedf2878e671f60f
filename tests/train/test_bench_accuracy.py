"""benchmarks/bench_accuracy.py's rare-code proxy and its reading of training options."""

import collections
import importlib.util
import json
from pathlib import Path

import pytest

from conftest import SHARED_DATA

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_accuracy.py"
_spec = importlib.util.spec_from_file_location("bench_accuracy", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _counts(rows: list[dict]) -> collections.Counter:
    return collections.Counter(c for r in rows for c in r["labels"])


@pytest.mark.skipif(not (SHARED_DATA / "mtsamples" / "train.jsonl").is_file(), reason="needs ../shared/data/mtsamples")
def test_rare_code_proxy_has_the_shape_of_a_small_coding_team(tmp_path):
    folder = bench.make_proxy("mtsamples-rare", tmp_path)
    source = SHARED_DATA / "mtsamples"
    for part in ("dev.jsonl", "test.jsonl"):
        assert (folder / part).read_bytes() == (source / part).read_bytes()
    full, kept = _read(source / "train.jsonl"), _read(folder / "train.jsonl")
    assert {r["id"] for r in kept} < {r["id"] for r in full}
    before, after = _counts(full), _counts(kept)
    assert set(after) == set(before)                              # every label keeps some training notes
    cap = bench.PROXIES["mtsamples-rare"][1]
    for code, n in before.items():                                # a label already below the cap keeps all its notes
        if n <= cap:
            assert after[code] == n, code
    assert sum(5 <= n <= 30 for n in after.values()) >= 0.75 * len(after)
    assert len(kept) < 0.4 * len(full)
    assert bench.make_proxy("mtsamples-rare", tmp_path / "again").joinpath("train.jsonl").read_bytes() == \
        (folder / "train.jsonl").read_bytes()                     # the same proxy on every run


def test_set_options_are_typed_and_checked():
    assert bench._parse_sets(["lr_schedule=constant", "lr_decay=0.3", "lr_patience=2"]) == \
        {"lr_schedule": "constant", "lr_decay": 0.3, "lr_patience": 2}
    assert bench._parse_sets(["label_reg_weight=0", "multilabel=false"]) == {"label_reg_weight": 0.0, "multilabel": False}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        bench._parse_sets(["no_such_option=1"])
    from clinicode.errors import ConfigError

    with pytest.raises(ConfigError):
        bench._parse_sets(["lr_decay=2"])
    with pytest.raises(ConfigError):
        bench._parse_sets(["dropout=1.5"])
