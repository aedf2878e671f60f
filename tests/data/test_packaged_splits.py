"""The published split lists ship inside the package (#43): byte for byte the files of ../shared/data once
decompressed, each with its origin and licence, listed in the package data, used by `prepare`, `train --mimic-dir`
and the reproduction recipes by default, and found on a fresh clone with no ../shared beside it."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clinicode.constants import SPLITS
from clinicode.data.protocols import by_name
from clinicode.data.splits import CAML_IDS, PUBLISHED, read_splits, resolve
from pipelines import mimic3_top50, reproduce

from conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("caml-mimic-ids", "mimic-splits")
PACKAGED = sorted(p for p in PUBLISHED.rglob("*") if p.is_file() and p.name != "README.md")


def test_every_packaged_list_is_the_shared_file_byte_for_byte():
    if not all((SHARED_DATA / s).is_dir() for s in SOURCES):
        pytest.skip("../shared/data's split folders are not here")
    shared = sorted(p for s in SOURCES for p in (SHARED_DATA / s).rglob("*")
                    if p.is_file() and p.suffix in (".csv", ".tsv", ".txt"))
    assert len(shared) == len(PACKAGED) == 25
    for src in shared:
        rel = src.relative_to(SHARED_DATA)
        packaged = resolve(PUBLISHED / rel)
        assert packaged.is_file(), f"{rel} is not packaged"
        data = gzip.decompress(packaged.read_bytes()) if packaged.suffix == ".gz" else packaged.read_bytes()
        assert data == src.read_bytes(), f"{rel} differs from ../shared's"


def test_each_packaged_file_has_its_origin_and_licence_in_one_line():
    readme = (PUBLISHED / "README.md").read_text(encoding="utf-8")
    for p in PACKAGED:
        rel = str(p.relative_to(PUBLISHED))
        lines = [line for line in readme.splitlines() if f"`{rel}`" in line]
        assert len(lines) == 1, f"{rel}: expected one line in split_lists/README.md"
        assert "licen" in lines[0].lower() and "github.com/" in lines[0], lines[0]


def test_package_data_ships_every_list_and_the_package_stays_small():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data["clinicode.data"]
    base = ROOT / "clinicode" / "data"
    shipped = {p for pat in patterns for p in base.glob(pat) if p.is_file()}
    assert set(PACKAGED) | {PUBLISHED / "README.md"} <= shipped
    assert sum(p.stat().st_size for p in PACKAGED) < 5_000_000  # gzipped: 4.2 MB for 25 lists (16 MB plain)


def test_reproduce_resolves_the_recipes_splits_in_the_package(monkeypatch, tmp_path):
    seen = {}

    def fake_prepare(mimic_dir, data, **prep):
        seen.update(prep)
        raise reproduce.ConfigError("stop here")

    monkeypatch.setattr(reproduce, "prepare_mimic", fake_prepare)
    args = ["--mimic-dir", str(tmp_path), "--out", str(tmp_path / "run")]
    assert reproduce.main(["--recipe", "mimic4-icd10-full", *args]) == 1
    assert Path(seen["splits_file"]).parent == PUBLISHED / "mimic-splits" / "edin2023"
    assert reproduce.main(["--recipe", "mimic4-icd9-top50", *args]) == 1
    assert seen["splits_dir"] == PUBLISHED / "mimic-splits" / "nguyen2023" / "icd9"
    assert reproduce.main(["--recipe", "mimic3-top50", "--splits-root", str(tmp_path / "mine"), *args]) == 1
    assert seen["splits_dir"] == tmp_path / "mine" / "caml-mimic-ids"  # an explicit root still wins
    monkeypatch.setattr(mimic3_top50, "run_and_print", lambda config, out, **kw: seen.update(kw) or 0)
    mimic3_top50.main(args)
    # no folder given: prepare takes CAML's packaged lists when the data holds MIMIC-III's own admissions (the
    # MIMIC-III default test below) and splits a synthetic demo by patient (tests/cli/test_pipeline.py)
    assert seen["splits_dir"] is None
    mimic3_top50.main([*args, "--splits-dir", str(tmp_path / "caml")])
    assert seen["splits_dir"] == tmp_path / "caml"


FRESH = """
import json, sys
from pathlib import Path
from clinicode.constants import SPLITS
from clinicode.data.protocols import find_protocol
from clinicode.data.splits import read_split_file, read_splits, resolve, split_file
from pipelines.reproduce import RECIPES, load_recipe, run_pipeline
import pipelines.reproduce as r
seen = {}
def fake(mimic_dir, data, **prep):
    seen.update(prep)
    raise r.ConfigError("stop")
r.prepare_mimic = fake
out = {}
for name in RECIPES:
    try:
        run_pipeline(load_recipe(name), mimic_dir=Path("m"), out=Path(sys.argv[1]) / name)
    except r.ConfigError:
        pass
    prep = load_recipe(name)["prepare"]
    kind = "full" if prep["label_set"] == "full" else "50"
    if "splits_file" in seen and seen.get("splits_file") is not None and "splits_dir" not in seen:
        files = [resolve(seen["splits_file"])]
        n = sum(map(len, read_split_file(seen["splits_file"]).values()))
    else:
        files = [split_file(seen["splits_dir"], s, kind) for s in SPLITS]
        n = sum(map(len, read_splits(seen["splits_dir"], kind).values()))
        if prep["label_set"] == "top50":
            files.append(Path(seen["splits_dir"]) / "top50_codes.txt")
    p = find_protocol(files)
    out[name] = [p.name if p else None, n, str(files[0])]
    seen.clear()
print(json.dumps(out))
"""


def test_a_fresh_clone_finds_every_recipes_published_lists(tmp_path):
    """The package and the recipes copied alone (no ../shared beside them): each recipe's split files are found in
    the package and are its protocol's, byte for byte."""
    clone = tmp_path / "clone" / "clinicode-repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("clinicode", "pipelines"):
        shutil.copytree(ROOT / part, clone / part, ignore=ignore)
    assert not (clone.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(clone)}
    res = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "runs")], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    found = json.loads(res.stdout)
    assert set(found) == set(reproduce.RECIPES)
    for name, (protocol, n, first) in found.items():
        expected = by_name(reproduce.load_recipe(name)["protocol"])
        assert protocol == expected.name, name
        assert first.startswith(str(clone / "clinicode" / "data" / "split_lists")), first
        assert n >= sum(expected.counts.values()), name


def test_prepare_uses_the_packaged_caml_lists_for_mimic3_by_default(tmp_path):
    """MIMIC-III's own admissions and no split option: CAML's packaged lists and their published counts; a demo's
    invented admissions keep the hash split by patient."""
    from clinicode.data.prepare import prepare_mimic
    from clinicode.synthetic.mimic3 import write_demo_mimic

    mimic = tmp_path / "mimic"
    write_demo_mimic(mimic, n_admissions=200, n_other_notes=0, seed=1, hadm_ids_from=CAML_IDS)
    summary = prepare_mimic(mimic, tmp_path / "out")
    assert summary["protocol"] == "caml-mimic3-top50" and summary["comparable"] is True
    assert summary["splits"] == by_name("caml-mimic3-top50").counts
    listed = read_splits(CAML_IDS)
    import pandas as pd

    ids = {s: set(pd.read_parquet(tmp_path / "out" / f"{s}.parquet")["id"]) for s in SPLITS}
    assert all(ids[s] == {str(h) for h in listed[s]} for s in SPLITS)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert json.dumps(manifest).count(str(CAML_IDS)) >= 1

    demo = tmp_path / "demo"
    write_demo_mimic(demo, n_admissions=300, n_other_notes=0, seed=1)
    summary = prepare_mimic(demo, tmp_path / "out2")
    assert summary["protocol"] is None and sum(summary["splits"].values()) > 0
