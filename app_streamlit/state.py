"""Run discovery and cached loaders for the app: the model once per process (torch only then), test data per run.

Runs are checked (hashes, no weights) when listed; nothing here writes to disk, logs or caches note text."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import clinicode.serving as serving  # each name loads on first use: listing runs needs no torch, pandas only when read

RUNS_ENV = "CLINICODE_RUNS"
RUN_KEY = "run_dir"
MAX_TEST_NOTES = 1000  # notes embedded for the label-embedding page (deterministic subsample beyond that)


def runs_root() -> Path:
    """The runs folder: $CLINICODE_RUNS, else `runs/` in the working directory."""
    return Path(os.environ.get(RUNS_ENV) or "runs")


def list_runs(root: Path) -> list[str]:
    """Names of the run folders directly under `root` that hold checkpoint/manifest.json.

    A subfolder (or its checkpoint) that resolves outside `root`, e.g. through a symlink, is skipped.
    """
    try:
        base = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return []
    if not base.is_dir():
        return []
    names = []
    for child in sorted(base.iterdir(), key=lambda p: p.name):
        if child.name.startswith("."):
            continue
        try:
            manifest = child / serving.CHECKPOINT_DIR / serving.MANIFEST_FILE
            if inside_root(base, child) and inside_root(base, manifest):
                if manifest.resolve().is_file():
                    names.append(child.name)
        except OSError:
            continue
    return names


def inside_root(root: Path, path: Path) -> bool:
    """True when `path` exists and, with every symlink resolved, lies inside `root` (resolved)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return real.is_relative_to(root.resolve())


def resolve_run(root: Path, name: str) -> Path | None:
    """The resolved run folder for a picked name, or None if the name is not one of `list_runs(root)`."""
    if name not in list_runs(root):
        return None
    return (root / name).resolve()


def load_predictor(run_dir: str) -> Any:
    """The `Predictor` of a run folder, loaded once per process (keyed by the resolved path string and the titles).
    Its suggestion candidates: the code system's titles (ICD-10-CM), or the file $CLINICODE_TITLES (code<TAB>title)
    with $CLINICODE_TREE (code<TAB>tree numbers) when set, as `predict --titles/--tree`."""
    return _load_predictor(run_dir, os.environ.get("CLINICODE_TITLES"), os.environ.get("CLINICODE_TREE"))


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _load_predictor(run_dir: str, titles: str | None, tree: str | None) -> Any:
    predictor = serving.Predictor.from_checkpoint(run_dir, device="cpu",  # the first use of Predictor imports torch
                                              titles=serving.load_descriptions_tsv(titles) if titles else None,
                                              tree=serving.read_tree(tree) if tree else None)
    predictor.suggester  # the candidates are indexed under the loading spinner, not on the first note
    return predictor


@st.cache_data(show_spinner=False, max_entries=4)
def code_titles(run_dir: str) -> dict[str, str]:
    """{code: title} of a run's label set: the checkpoint's descriptions, and for codes without one the title their
    code system ships (ICD-10-CM's CMS tables; asked only when a code lacks a title)."""
    pred = load_predictor(run_dir)
    titles = dict(zip(pred.labels.codes, pred.labels.descriptions))
    missing = [c for c, d in titles.items() if not d]
    titles.update(pred.code_system.titles(missing) if missing else {})
    return titles


def short_reason(err: BaseException, run_dir: Path) -> str:
    """An error as one line with the server's folders left out: paths inside the run are shown from the run's name."""
    text = " ".join(str(err).split()) or type(err).__name__
    for prefix, shown in ((str(Path(run_dir).resolve()), Path(run_dir).name), (str(Path(run_dir)), Path(run_dir).name),
                          (str(runs_root().resolve()), "runs")):
        text = text.replace(prefix, shown)
    return text


def _signature(run_dir: Path) -> tuple:
    """Names, sizes and modification times of the checkpoint's files: a change re-runs the check."""
    ck = run_dir / serving.CHECKPOINT_DIR
    try:
        return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in ck.iterdir()))
    except OSError:
        return ()


@st.cache_data(show_spinner=False, max_entries=64)
def _check(run_dir: str, signature: tuple) -> str | None:
    try:
        serving.verify_checkpoint(Path(run_dir))  # hashes, no weights: listing runs stays light
    except (serving.ClinicodeError, OSError, ValueError) as err:
        return short_reason(err, Path(run_dir))
    return None


def run_problem(run_dir: Path) -> str | None:
    """None when every file of the run's checkpoint matches its hash, else the one-line reason (cached until the
    checkpoint's files change)."""
    return _check(str(run_dir), _signature(Path(run_dir)))


def current_run() -> Path:
    """The run chosen in the sidebar (main.py stores it before any page runs)."""
    return Path(st.session_state[RUN_KEY])


def current_predictor() -> Any:
    """The chosen run's Predictor; if it cannot be loaded (damaged since it was listed), say why and stop the page."""
    run = current_run()
    try:
        return load_predictor(str(run))
    except (serving.ClinicodeError, OSError, ValueError) as err:
        st.error(f"Run **{run.name}** cannot be loaded: {short_reason(err, run)}")
        st.stop()


@st.cache_data(show_spinner=False, max_entries=8)
def _read_card(run_dir: str) -> dict[str, Any]:
    return json.loads(json.dumps(load_predictor(run_dir).card(), default=str))


def read_card(run_dir: str) -> dict[str, Any]:
    """The model card as plain JSON data (safe to copy); if the run cannot be loaded (damaged since it was listed,
    or its pieces disagree), say why in one line and stop the page."""
    try:
        return _read_card(run_dir)
    except (serving.ClinicodeError, OSError, ValueError) as err:
        st.error(f"Run **{Path(run_dir).name}** cannot be loaded: {short_reason(err, Path(run_dir))}")
        st.stop()


@st.cache_data(show_spinner=False, max_entries=8)
def read_history(run_dir: str) -> pd.DataFrame:
    """RUN/history.jsonl as a DataFrame (empty when missing or unreadable; damaged lines are skipped)."""
    path = Path(run_dir) / serving.HISTORY_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return pd.DataFrame()
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return pd.DataFrame(rows)


@st.cache_data(show_spinner=False, max_entries=8)
def read_scores_test(run_dir: str) -> dict[str, Any]:
    """RUN/scores_test.npz as {"ids", "y_true", "scores"}; {} when absent; {"error": reason} when unreadable."""
    path = Path(run_dir) / serving.SCORES_TEST_FILE
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in ("ids", "y_true", "scores")}
        if out["y_true"].shape != out["scores"].shape or out["scores"].ndim != 2:
            raise ValueError(f"y_true {out['y_true'].shape} and scores {out['scores'].shape} differ")
        return out
    except Exception as err:  # zipfile, numpy and OS errors alike: a damaged file, never a crash
        return {"error": f"{serving.SCORES_TEST_FILE} is unreadable ({type(err).__name__}); "
                         "retrain the run to rewrite it"}


@st.cache_data(show_spinner="Computing F1 at every threshold…", max_entries=8)
def threshold_curve(run_dir: str, grid: tuple[float, ...]) -> dict[str, Any]:
    """Micro and macro F1 of the run's test scores at every threshold of the grid (cached: seconds at 9,000 codes)."""
    sc = read_scores_test(run_dir)
    return serving.f1_by_threshold(sc["y_true"], sc["scores"], np.asarray(grid))


@st.cache_data(show_spinner=False, max_entries=16)
def read_manifest(run_dir: str) -> dict[str, Any]:
    """RUN/checkpoint/manifest.json without loading the model (keeps the first page free of torch)."""
    try:
        manifest = Path(run_dir) / serving.CHECKPOINT_DIR / serving.MANIFEST_FILE
        return json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def test_data_dir(run_dir: Path, manifest: dict[str, Any]) -> Path | None:
    """The prepared-data folder the run trained on, if it still holds a test split."""
    return serving.test_data_dir(run_dir, manifest)


def test_notes(data_dir: Path) -> tuple[pd.DataFrame | None, str | None]:
    """(the test split's ids and gold codes, None), or (None, a one-line reason) when the split cannot be read.

    Note text is never cached: `test_note_text` reads the one note a page shows, when it shows it.
    """
    try:
        return read_test_codes(str(data_dir)), None
    except Exception as err:  # pandas, pyarrow and OS errors alike: a damaged split must not crash a page
        return None, f"the test split in {Path(data_dir).name}/ is unreadable ({type(err).__name__})"


@st.cache_data(show_spinner="Reading the test split…", max_entries=4)
def read_test_codes(data_dir: str) -> pd.DataFrame:
    """[id, labels] of the test split of a prepared-data folder (no note text)."""
    return serving.read_split_codes(Path(data_dir), "test").reset_index(drop=True)


def test_note_text(data_dir: Path, note_id: str) -> str:
    """One test note's text, read when shown; deliberately not cached (note text stays out of the app's caches)."""
    return serving.read_split_texts(Path(data_dir), "test", [note_id])[0]


@st.cache_data(show_spinner="Embedding the test notes…", max_entries=4)
def test_embeddings(run_dir: str, data_dir: str) -> dict[str, Any]:
    """Note vectors z of (up to MAX_TEST_NOTES) test notes, their gold codes, and the code vectors C.

    The texts are read, embedded and dropped here: only vectors and codes are cached.
    """
    pred = load_predictor(run_dir)
    codes = read_test_codes(data_dir)
    df = codes.sample(n=MAX_TEST_NOTES, random_state=0).sort_index() if len(codes) > MAX_TEST_NOTES else codes
    Z = pred.embed(serving.read_split_texts(Path(data_dir), "test", df["id"].tolist()))  # [N, P]
    C = pred.label_embeddings()                                                            # [K, P]
    return {"Z": Z, "C": C, "labels": [list(x) for x in df["labels"]], "n_total": len(codes)}


_SEED_FREE = ("seed", "device", "memory_mb")  # options that say where a run ran, not what it learnt


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@st.cache_data(show_spinner=False, max_entries=8)
def seed_siblings(root: str, run_dir: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Runs under ROOT trained like RUN except for the seed (same data fingerprint, same options), RUN included:
    [{run, seed, metrics}] with each run's test metrics, in name order. Unreadable runs are skipped.

    `names`: `list_runs(root)` now, so a run trained while the app is open is seen (it is part of the cache key)."""
    def key(run: Path) -> tuple | None:
        ck = run / serving.CHECKPOINT_DIR
        tc, mc = _read_json(ck / serving.TRAIN_CONFIG_FILE), _read_json(ck / serving.MODEL_CONFIG_FILE)
        manifest = _read_json(ck / serving.MANIFEST_FILE)
        if not isinstance(tc, dict) or not isinstance(manifest, dict):
            return None
        fingerprint = (manifest.get("data") or {}).get("fingerprint")
        if fingerprint is None:
            return None
        if isinstance(mc, dict):  # as read back: a key saved before it existed means what it meant then
            try:
                mc = serving.model_options_as_saved(mc, kind=manifest.get("model"))
            except serving.ClinicodeError:
                return None
        options = {k: v for k, v in tc.items() if k not in _SEED_FREE}
        return json.dumps([options, mc, fingerprint], sort_keys=True), tc.get("seed")

    here = key(Path(run_dir))
    if here is None:
        return []
    out = []
    for name in names:
        run = (Path(root) / name).resolve()
        k = key(run)
        metrics = _read_json(run / serving.CHECKPOINT_DIR / serving.METRICS_TEST_FILE)
        if k is not None and k[0] == here[0] and isinstance(metrics, dict) and metrics:
            out.append({"run": name, "seed": k[1], "metrics": metrics})
    return out
