"""benchmarks/bench_accuracy.py's rare-code proxy and its reading of training options."""

import collections
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conftest import SHARED_DATA

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import accuracy_report as report, accuracy_sets as sets  # bench_accuracy.py's parts

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
    cap = bench.PROXIES["mtsamples-rare"][2]
    for code, n in before.items():                                # a label already below the cap keeps all its notes
        if n <= cap:
            assert after[code] == n, code
    assert sum(5 <= n <= 30 for n in after.values()) >= 0.75 * len(after)
    assert len(kept) < 0.4 * len(full)
    assert bench.make_proxy("mtsamples-rare", tmp_path / "again").joinpath("train.jsonl").read_bytes() == \
        (folder / "train.jsonl").read_bytes()                     # the same proxy on every run


@pytest.mark.skipif(not (SHARED_DATA / "mtsamples" / "train.jsonl").is_file(), reason="needs ../shared/data/mtsamples")
def test_keyword_proxy_has_hundreds_of_specific_mostly_rare_labels(tmp_path):
    folder = bench.make_proxy("mtsamples-keywords", tmp_path)
    source = SHARED_DATA / "mtsamples"
    n_labels = bench.PROXIES["mtsamples-keywords"][2]
    counts = _counts(_read(folder / "train.jsonl"))
    assert len(counts) == n_labels == 300
    assert min(counts.values()) >= sets.KEYWORD_MIN_NOTES
    assert sum(n < 20 for n in counts.values()) >= 0.66 * n_labels          # most labels are rare codes
    assert sum(5 <= n <= 30 for n in counts.values()) >= 0.8 * n_labels
    for part in ("train", "dev", "test"):
        src, out = _read(source / f"{part}.jsonl"), _read(folder / f"{part}.jsonl")
        assert [(r["id"], r["text"]) for r in out] == [(r["id"], r["text"]) for r in src]   # every note, unchanged
        for s, o in zip(src, out):
            assert set(o) == {"id", "text", "labels"}                        # no specialty or description leaks in
            assert set(o["labels"]) <= {" ".join(k.lower().split()) for k in s["keywords"]}
            assert set(o["labels"]) <= set(counts)                           # dev/test use the training label set
        assert sum(1 for r in out if r["labels"]) >= 0.85 * len(out)
    # the most frequent keywords are labels and a keyword given in 4 training notes is not
    full = collections.Counter(" ".join(k.lower().split())
                               for r in _read(source / "train.jsonl") for k in set(r["keywords"]))
    assert full.most_common(1)[0][0] in counts
    assert not any(full[k] < sets.KEYWORD_MIN_NOTES for k in counts)
    again = bench.make_proxy("mtsamples-keywords", tmp_path / "again")
    for part in ("train.jsonl", "dev.jsonl", "test.jsonl"):
        assert (again / part).read_bytes() == (folder / part).read_bytes()   # the same proxy on every run


@pytest.mark.skipif(not (SHARED_DATA / "mtsamples" / "train.jsonl").is_file(), reason="needs ../shared/data/mtsamples")
def test_proxies_keep_their_label_sets_and_big_public_sets_get_top_50(tmp_path):
    assert bench.top_k_for("mtsamples-keywords", bench.make_proxy("mtsamples-keywords", tmp_path)) is None
    assert bench.top_k_for("mtsamples", SHARED_DATA / "mtsamples") is None       # 40 labels: no cut
    many = tmp_path / "many"                                                     # a public set with 60 labels
    many.mkdir()
    for part in ("train", "dev", "test"):
        rows = [{"id": f"{part}{i}", "text": f"note {i} word{i % 60}", "labels": [f"L{i % 60}"]} for i in range(120)]
        (many / f"{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert bench.top_k_for("many", many) == sets.TOP_K


def test_set_options_are_typed_and_checked():
    assert bench._parse_sets(["lr_schedule=constant", "lr_decay=0.3", "lr_patience=2"]) == \
        {"lr_schedule": "constant", "lr_decay": 0.3, "lr_patience": 2}
    assert bench._parse_sets(["label_reg_weight=0", "multilabel=false"]) == {"label_reg_weight": 0.0,
                                                                             "multilabel": False}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        bench._parse_sets(["no_such_option=1"])
    from clinicode.errors import ConfigError

    with pytest.raises(ConfigError):
        bench._parse_sets(["lr_decay=2"])
    with pytest.raises(ConfigError):
        bench._parse_sets(["dropout=1.5"])


def test_goals_are_judged_for_every_leam_row_and_proxies_against_tfidf_lr():
    def rows(*f1, auc=0.97):
        return [{"f1_micro": v, "auc_macro": auc} for v in f1]
    results = {("hoc", "tfidf-lr"): rows(0.77), ("hoc", "leam"): rows(0.78, 0.775, 0.785),
               ("hoc", "leam+evidence"): rows(0.78, 0.74, 0.80),
               ("mtsamples-keywords", "tfidf-lr"): rows(0.50, auc=0.975),
               ("mtsamples-keywords", "leam"): rows(0.52, 0.51, auc=0.96),
               ("mtsamples-keywords", "leam+evidence"): rows(0.57, 0.56, auc=0.985)}
    lines = report.goals(results, ["hoc", "mtsamples-keywords"])
    text = "\n".join(lines)
    assert len(lines) == 6 and "tfidf-lr" not in [line.split(",")[1].split(":")[0].strip() for line in lines]
    assert "- hoc, leam: micro-F1 sd 0.0050" in text
    assert [ln for ln in lines if ln.startswith("- hoc, leam:")][0].endswith(": met")
    assert [ln for ln in lines if ln.startswith("- hoc, leam+evidence:")][0].endswith("not met")     # sd 0.03
    proxy = {ln.split(" (")[0]: ln for ln in lines if "(rare-code proxy)" in ln}
    assert proxy["- mtsamples-keywords, leam"].endswith("not met")      # macro-AUC below tfidf-lr's
    assert proxy["- mtsamples-keywords, leam+evidence"].endswith(": met")


@pytest.mark.skipif(not (SHARED_DATA / "mtsamples" / "train.jsonl").is_file(), reason="needs ../shared/data/mtsamples")
def test_many_codes_proxy_at_50_and_all_labels(tmp_path):
    few = _counts(_read(bench.make_proxy("mtsamples-keywords-50", tmp_path / "50") / "train.jsonl"))
    three = _counts(_read(bench.make_proxy("mtsamples-keywords", tmp_path / "300") / "train.jsonl"))
    every = _counts(_read(bench.make_proxy("mtsamples-keywords-all", tmp_path / "all") / "train.jsonl"))
    assert len(few) == 50 and set(few) < set(three) < set(every)          # the 50 most given are among the 300
    assert min(few.values()) >= max(n for k, n in three.items() if k not in few)
    assert len(every) > 2000 and min(every.values()) == sets.KEYWORD_ALL_MIN
    assert sum(n <= 10 for n in every.values()) >= 0.85 * len(every)      # most codes have a handful of notes
    assert set(sets.ISSUE_SCALES) <= set(bench.DATASETS)


def test_issue_goals_judge_each_scale_against_tfidf_lr():
    def rows(*f1, auc=0.9, p8=0.3):
        return [{"f1_micro": v, "auc_macro": auc, "prec_at_8": p8} for v in f1]
    results = {("mtsamples-keywords-50", "tfidf-lr"): rows(0.50), ("mtsamples-keywords-50",
                                                                   "leam"): rows(0.62, 0.61, 0.60),
               ("mtsamples-keywords-50", "leam (paper)"): rows(0.70, 0.70, 0.52),          # mean ok, worst seed not
               ("mtsamples-keywords", "tfidf-lr"): rows(0.40, auc=0.95, p8=0.30),
               ("mtsamples-keywords", "leam"): rows(0.51, 0.52, auc=0.96, p8=0.29),           # P@8 below tfidf-lr
               ("mtsamples-keywords-all", "tfidf-lr"): rows(0.20),
               ("mtsamples-keywords-all", "leam"): rows(0.25, auc=0.91, p8=0.31), ("hoc", "leam"): rows(0.1)}
    lines = {ln.split(",")[0] + "," + ln.split(",")[1]: ln for ln in report.issue_goals(results)}
    assert len(lines) == 4 and not any("hoc" in k for k in lines)
    assert "NOT met" not in lines["- mtsamples-keywords-50 (50 codes), leam"]
    paper_50 = lines["- mtsamples-keywords-50 (50 codes), leam (paper)"]
    assert "worst micro-F1 0.5200 (goal >= 0.5500: NOT met)" in paper_50
    assert "worst P@8 0.2900 (goal >= 0.3000: NOT met)" in lines["- mtsamples-keywords (300 codes), leam"]
    assert "worst micro-F1 0.5100 (goal >= 0.5000: met)" in lines["- mtsamples-keywords (300 codes), leam"]
    assert "NOT met" not in lines["- mtsamples-keywords-all (all codes), leam"]


@pytest.mark.skipif(not (SHARED_DATA / "mtsamples" / "train.jsonl").is_file(), reason="needs ../shared/data/mtsamples")
def test_small_training_proxy_keeps_500_of_the_50_keyword_notes(tmp_path):
    full = bench.make_proxy("mtsamples-keywords-50", tmp_path / "full")
    small = bench.make_proxy("mtsamples-keywords-50-500", tmp_path / "small")
    rows, all_rows = _read(small / "train.jsonl"), _read(full / "train.jsonl")
    assert len(rows) == sets.SMALL_TRAIN < len(all_rows)
    ids = [r["id"] for r in all_rows]
    kept = [ids.index(r["id"]) for r in rows]
    assert kept == sorted(kept) and all(all_rows[i] == r for i, r in zip(kept, rows))   # file order, rows unchanged
    assert kept != list(range(sets.SMALL_TRAIN))                                        # a shuffle, not the head
    for part in ("dev.jsonl", "test.jsonl"):
        assert (small / part).read_bytes() == (full / part).read_bytes()
    again = bench.make_proxy("mtsamples-keywords-50-500", tmp_path / "again")
    assert (again / "train.jsonl").read_bytes() == (small / "train.jsonl").read_bytes()


def test_cantemist_runs_at_every_code_with_its_map_without_8000_6():
    assert "cantemist-icdo3" in sets.DATASETS
    assert bench.top_k_for("cantemist-icdo3", sets.source_dir("cantemist-icdo3")) is None   # not cut to 50
    assert sets.MAP_WITHOUT["cantemist-icdo3"] == ("8000/6",)
    assert bench._n_seeds("cantemist-icdo3", "fused", 5) == 3 and bench._n_seeds("cantemist-icdo3", "leam", 5) == 0


def test_shared_task_table_shows_absent_figures_as_absent():
    results = {("cantemist-icdo3", "tfidf-lr"): [{"map": 0.59, "map_without": 0.55, "span_precision": None,
                                                  "span_recall": None, "span_f1": None}],
               ("cantemist-icdo3", "fused"): [{"map": 0.74, "map_without": 0.70, "span_precision": 0.7,
                                               "span_recall": 0.6, "span_f1": 0.65},
                                              {"map": 0.72, "map_without": 0.68, "span_precision": 0.7,
                                               "span_recall": 0.6, "span_f1": 0.63}],
               ("hoc", "tfidf-lr"): [{"f1_micro": 0.7}]}                       # a row from before: left out
    lines = report.shared_task_table(results)
    rows = {ln.split(" | ")[1]: ln for ln in lines if ln.startswith("| cantemist-icdo3")}
    assert set(rows) == {"tfidf-lr", "fused"} and not any(ln.startswith("| hoc") for ln in lines)
    assert rows["tfidf-lr"].endswith("| 0.5900 | 0.5500 | - | - | - | 0.5900 | - |")        # absent, not 0
    assert "| 0.7300 ± 0.0141 |" in rows["fused"] and rows["fused"].endswith("| 0.7200 | 0.6300 |")
    assert "without 8000/6" in lines[0]
