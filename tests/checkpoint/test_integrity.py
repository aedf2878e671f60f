"""Checkpoint integrity: hashes checked on load, mismatched pieces refused by name, and no pickle anywhere.

Each tampering test copies the tiny run's checkpoint, changes one piece, and (where the hash check would
otherwise stop it first) re-hashes that piece in manifest.json, so the cross-check behind it is exercised.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from clinicode.checkpoint import load_checkpoint
from clinicode.data.labels import LabelSet
from clinicode.errors import CheckpointError
from clinicode.files import sha256_file
from clinicode.tokenizer import ClinicalTokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ck(tiny_run, tmp_path) -> Path:
    """A private copy of the tiny run's checkpoint folder."""
    dst = tmp_path / "run" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", dst)
    return dst


def _manifest(ck: Path) -> dict:
    return json.loads((ck / "manifest.json").read_text(encoding="utf-8"))


def _rehash(ck: Path, *names: str) -> None:
    m = _manifest(ck)
    for name in names:
        m["files"][name] = sha256_file(ck / name)
    (ck / "manifest.json").write_text(json.dumps(m), encoding="utf-8")


def test_untouched_copy_loads(ck):
    loaded = load_checkpoint(ck)
    assert loaded.kind == "leam" and len(loaded.labels) == 50


def test_flipped_byte_in_weights_is_refused_naming_the_file(ck):
    p = ck / "model.safetensors"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not match the hash in manifest\.json"):
        load_checkpoint(ck)


@pytest.mark.parametrize("name", ["labels.json", "tokenizer.json", "threshold.json", "model_config.json",
                                  "train_config.json"])
def test_any_edited_piece_fails_its_hash(ck, name):
    p = ck / name
    p.write_bytes(p.read_bytes() + b" ")
    with pytest.raises(CheckpointError, match=rf"{name.replace('.', '[.]')} does not match the hash"):
        load_checkpoint(ck)


def test_labels_from_a_run_with_another_label_count_are_refused(ck):
    labels = load_checkpoint(ck).labels
    other = LabelSet(labels.codes[:10], labels.descriptions[:10])  # what a top-10 run would have written
    other.save(ck / "labels.json")
    _rehash(ck, "labels.json")
    with pytest.raises(CheckpointError,
                       match=r"labels\.json lists 10 codes but the model has 50 outputs; .*different runs"):
        load_checkpoint(ck)


def test_tokenizer_truncating_at_another_max_len_is_refused_naming_both_files(ck):
    """max_len is written twice (tokenizer.json truncates, train_config.json sizes the memory plan and the app's
    message); loading refuses a checkpoint where they disagree."""
    tok = ClinicalTokenizer.load(ck / "tokenizer.json")
    other = ClinicalTokenizer(tok._tok, max_len=tok.max_len + 7)
    other.save(ck / "tokenizer.json")
    _rehash(ck, "tokenizer.json")
    want = (rf"tokenizer\.json truncates notes at {tok.max_len + 7} tokens "
            rf"but train_config\.json says max_len {tok.max_len};")
    with pytest.raises(CheckpointError, match=want):
        load_checkpoint(ck)


def test_tokenizer_with_another_vocabulary_size_is_refused(ck):
    n_rows = json.loads((ck / "model_config.json").read_text())["vocab_size"]
    other = ClinicalTokenizer.fit(["chest pain fever", "chest pain cough", "chest pain rash"], min_doc_freq=1)
    assert other.vocab_size != n_rows
    other.save(ck / "tokenizer.json")
    _rehash(ck, "tokenizer.json")
    with pytest.raises(CheckpointError,
                       match=rf"tokenizer\.json has {other.vocab_size} words but the model "
                             rf"has {n_rows} embedding rows"):
        load_checkpoint(ck)


def test_foreign_tokenizer_json_is_refused(ck):
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "[PAD]": 1, "a": 2},
                               unk_token="[UNK]")).save(str(ck / "tokenizer.json"))
    _rehash(ck, "tokenizer.json")
    with pytest.raises(CheckpointError,
                       match=r"tokenizer\.json: expected \[PAD\]=0 and \[UNK\]=1 .*not a clinicode tokenizer"):
        load_checkpoint(ck)


def test_weights_that_disagree_with_model_config_are_refused(ck):
    cfg = json.loads((ck / "model_config.json").read_text())
    cfg["hidden_dim"] += 1
    (ck / "model_config.json").write_text(json.dumps(cfg))
    _rehash(ck, "model_config.json")
    with pytest.raises(CheckpointError,
                       match=r"model_config\.json implies tensor head\.\S+ of shape .*model\.safetensors holds"):
        load_checkpoint(ck)


def test_weights_that_are_not_safetensors_are_refused(ck):
    (ck / "model.safetensors").write_bytes(b"\x80\x04not a tensor file")
    _rehash(ck, "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file"):
        load_checkpoint(ck)


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json", "labels.json"])
def test_missing_file_is_named(ck, name):
    (ck / name).unlink()
    with pytest.raises(CheckpointError, match=rf"{name.replace('.', '[.]')} is missing; the checkpoint is incomplete"):
        load_checkpoint(ck)


@pytest.mark.parametrize("name", ["model.safetensors", "labels.json", "tokenizer.json"])
def test_a_piece_without_a_hash_in_the_manifest_is_refused(ck, name):
    """Removing the manifest entry must not switch the hash check off for that piece."""
    m = _manifest(ck)
    del m["files"][name]
    (ck / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match=rf"manifest\.json lists no hash for {name.replace('.', '[.]')}"):
        load_checkpoint(ck)


def test_manifest_without_files_table_is_refused(ck):
    m = _manifest(ck)
    del m["files"]
    (ck / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match=r"manifest\.json has no 'files' table"):
        load_checkpoint(ck)


def test_incompatible_schema_version_is_refused_before_the_hashes(ck):
    m = _manifest(ck)
    m["schema_version"] = 0  # an older schema: retrain (a newer one asks for an upgrade, below)
    (ck / "manifest.json").write_text(json.dumps(m))
    (ck / "model.safetensors").write_bytes(b"damaged too")  # the version error comes first
    with pytest.raises(CheckpointError,
                       match=r"checkpoint schema version 0 \(written by clinicode .*\), but clinicode "
                             r"\S+ reads version 1; retrain"):
        load_checkpoint(ck)


@pytest.mark.parametrize("piece", ["train_config.json", "model_config.json", "labels.json"])
def test_a_checkpoint_from_a_newer_clinicode_asks_for_an_upgrade_naming_its_version(ck, piece):
    """A newer release adds keys without changing the schema: the reader names the writer's version, not a key."""
    data = json.loads((ck / piece).read_text(encoding="utf-8"))
    if piece == "labels.json":
        data = {"format": "from the future", "labels": data}
    else:
        data["added_in_a_later_release"] = 1
    (ck / piece).write_text(json.dumps(data), encoding="utf-8")
    _rehash(ck, piece)
    m = _manifest(ck)
    m["clinicode_version"] = "9.4.0"
    (ck / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(ck)
    msg = str(err.value)
    assert "written by clinicode 9.4.0" in msg and "upgrade clinicode" in msg and "\n" not in msg
    assert "unknown key" not in msg and "added_in_a_later_release" not in msg


def test_a_newer_checkpoint_schema_asks_for_an_upgrade_before_anything_else(ck, tmp_path):
    from helpers import fails

    m = _manifest(ck)
    m["schema_version"], m["clinicode_version"] = 2, "0.3.0.dev1"
    (ck / "manifest.json").write_text(json.dumps(m))
    (ck / "model.safetensors").write_bytes(b"written differently by then")
    with pytest.raises(CheckpointError, match=r"written by clinicode 0\.3\.0\.dev1 \(checkpoint schema 2\), newer than "
                                              r"this clinicode \S+ \(schema 1\); upgrade clinicode"):
        load_checkpoint(ck)
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"id": "a", "text": "chest pain"}) + "\n")
    fails(["predict", "--checkpoint", ck.parent, "--input", notes, "--output", tmp_path / "pred.jsonl"],
          "upgrade clinicode")


def test_same_or_older_releases_are_not_called_newer():
    from clinicode.checkpoint import _release

    assert _release("0.1.0") < _release("0.1.1") < _release("0.2.0.dev1") < _release("0.10.0") < _release("1.0")
    assert _release("0.1.0") == (0, 1, 0) and _release("") == () and _release(None) == ()


@pytest.mark.parametrize("value", [1.5, -0.1, "NaN"])
def test_threshold_outside_0_1_is_refused(ck, value):
    (ck / "threshold.json").write_text(json.dumps({"threshold": float(value)}))
    _rehash(ck, "threshold.json")
    with pytest.raises(CheckpointError, match=r"threshold\.json: holds threshold .*expected \{\"threshold\": a "
                                              r"probability from 0 to 1\}"):
        load_checkpoint(ck)


def test_not_a_checkpoint_manifest(ck):
    (ck / "manifest.json").write_text(json.dumps({"kind": "prepared-dataset"}))
    with pytest.raises(CheckpointError, match=r"manifest\.json does not describe a clinicode checkpoint"):
        load_checkpoint(ck)
    (ck / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"manifest\.json: unreadable .*damaged, retrain"):
        load_checkpoint(ck)


# ------------------------------------------------------------------------------------------------ no pickle
_SCANNED = ("clinicode", "app_streamlit", "pipelines", "benchmarks")
_BANNED_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "shelve", "marshal"}
_BANNED_CALLS = {"torch.load", "joblib.load", "pd.read_pickle", "pandas.read_pickle", "np.load", "numpy.load"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _pickle_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in _BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in _BANNED_MODULES:
                found.append(f"from {node.module} import ...")
            if node.module in ("torch", "joblib") and any(a.name == "load" for a in node.names):
                found.append(f"from {node.module} import load")
            if node.module == "pandas" and any(a.name == "read_pickle" for a in node.names):
                found.append("from pandas import read_pickle")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            kwargs = {k.arg: k.value for k in node.keywords}
            if name in ("np.load", "numpy.load"):
                ap = kwargs.get("allow_pickle")
                if not (isinstance(ap, ast.Constant) and ap.value is False):
                    found.append(f"{name}(...) without allow_pickle=False at line {node.lineno}")
            elif name in _BANNED_CALLS or name.endswith(".read_pickle") or name.endswith("torch.load"):
                found.append(f"{name}(...) at line {node.lineno}")
            ap = kwargs.get("allow_pickle")
            if isinstance(ap, ast.Constant) and ap.value is True:
                found.append(f"allow_pickle=True at line {node.lineno}")
    return found


def test_no_pickle_anywhere_in_the_sources():
    files = [p for d in _SCANNED for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 20
    offenders = {str(p.relative_to(ROOT)): u for p in files if (u := _pickle_uses(p))}
    assert offenders == {}


def test_the_pickle_scanner_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nimport torch\nimport numpy as np\nfrom joblib import load\n"
        "torch.load('x')\nnp.load('y')\nnp.load('z', allow_pickle=True)\nimport pandas as pd\npd.read_pickle('w')\n"
        "np.load('ok', allow_pickle=False)\n"
    )
    uses = _pickle_uses(bad)
    assert len(uses) == 7, uses
    assert not any("'ok'" in u for u in uses)


# ------------------------------------------------------------------------------------------------ Docker image
def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of the Dockerfile, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_runs_as_non_root_with_a_healthcheck_and_no_baked_in_data():
    steps = _dockerfile()
    users = [arg for ins, arg in steps if ins == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    last_user = max(i for i, (ins, _) in enumerate(steps) if ins == "USER")
    assert steps[-1][0] == "CMD" and last_user < len(steps) - 1  # the app process runs as that user
    health = [arg for ins, arg in steps if ins == "HEALTHCHECK"]
    assert health and "NONE" not in health[0].upper() and "_stcore/health" in health[0]
    for ins, arg in steps:
        if ins in ("COPY", "ADD"):
            sources = [a for a in arg.split() if not a.startswith("--")][:-1]
            for src in sources:
                top = src.strip("./").split("/")[0]
                assert top not in ("runs", "data", "demo", "tests", ".venv", ""), f"{ins} {arg}"
                assert not src.endswith((".parquet", ".csv", ".jsonl", ".npz", ".safetensors")), f"{ins} {arg}"
        if ins in ("ENV", "ARG"):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", arg) or [arg.split()[0]]:
                assert not re.search(r"SECRET|PASSW|API_?KEY|CREDENTIAL|(^|_)TOKEN($|_)|AWS_|HF_", name.upper()), name
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert ":/runs:ro" in text  # the documented run command mounts the runs read-only


def test_dockerignore_keeps_environments_data_and_runs_out_of_the_context():
    entries = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", "runs", "demo", "data", "tests", ".git"} <= entries
