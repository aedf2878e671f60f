"""`review export`: finished notes as a coded-notes folder for training, alone or merged with a base dataset."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from clinicode.artifacts import make_manifest
from clinicode.codes.systems import LOCAL, CodeSystem, family_of
from clinicode.constants import EVIDENCE, MANIFEST_FILE
from clinicode.data.labels import PARTLY_CODED
from clinicode.files import atomic_dir, check_output, manifest_kind, new_private_file, write_manifest
from clinicode.review.audit import agreement, audit_log, work_times
from clinicode.review.store import ReviewError, ReviewStore

EXPORT_KIND = "review-export"
MIN_ADDED_NOTES = 3   # a code coders added joins a retrained model's label set from this many reviewed notes on
AUDIT_FILE = "audit.json"  # the audit trail beside the notes (no note text; not a split, so not .jsonl)


def is_review_export(folder: Path) -> bool:
    return manifest_kind(folder) == EXPORT_KIND


def _split_of(note_id: str) -> tuple[int, str]:
    h = int(hashlib.md5(note_id.encode("utf-8")).hexdigest(), 16)
    return h, ("test" if h % 10 == 0 else "dev" if h % 10 == 1 else "train")


def export(db: ReviewStore, out: str | Path, *, base: str | Path | None = None) -> dict[str, int]:
    """Write the finished notes as a coded-notes folder `clinicode train --data` reads (labels = accepted + added).

    Alone (base None): each note's split comes from a hash of its id (about 80/10/10 train/dev/test, stable across
    exports; train and dev always get at least one note). With `base` (a prepared dataset or coded-notes folder): the
    base's splits are copied with their labels; coder labels only replace train labels (a reviewed note whose id is
    in the base's train takes the coders' codes there), a reviewed note whose id is in the base's dev or test is left
    out (counted as `kept_out`: dev and test stay exactly the base's, so the new model is measured as the old one
    was), and every other reviewed note joins train. Codes coders added that the base's label set lacks are appended
    to its labels.json when at least one training note carries them; a code with no training note in the folder
    (its notes all in dev or test, or kept out) is left out of labels.json and listed as `untrained` (and in the
    manifest's `codes_without_training_notes`): no model can learn it from this folder.
    The folder is new, empty or an earlier export; it appears atomically, and its files (they hold note text) are
    owner-only. A reviewed note's row carries the coders' evidence spans of its codes when they marked some
    (`ReviewStore.finished`). `descriptions.tsv` holds the reviewed codes' titles for `train --descriptions`;
    `audit.json` every decision (who, when, from what, to what, source, checkpoint, evidence spans), each coder's
    time per note and the double coders' kappa (`clinicode.review.audit`).
    """
    out = Path(out)
    check_output(out, option="--out", command="review export", folder=True, recognise=is_review_export,
                 inputs={"--db": db.path, "--base": base})
    db.check_integrity()
    notes = db.finished()
    need = 1 if base is not None else 2
    if len(notes) < need:
        raise ReviewError(f"{len(notes)} finished note(s) in {db.path}; an export needs at least {need}"
                          f"{' (a train and a dev note)' if need == 2 else ''}. Finish notes with `clinicode review "
                          "decide ... --done` or on the Review page.")
    titles = dict(db.model_codes())
    codes = sorted({c for n in notes for c in n["labels"]})
    system = db.code_system()
    titles.update(system.titles([c for c in codes if c not in titles]))
    rows = {n["id"]: _reviewed_row(n, n["labels"]) for n in notes}
    labels_json = None
    kept_out = 0
    if base is None:
        splits = _hash_splits(list(rows.values()))
    else:
        from clinicode.data.prepared import load_dataset

        ds = load_dataset(Path(base))
        splits, kept_out = _with_base(ds, rows)
    # A code whose reviewed notes all fell in dev or test (or were kept out) has no training note: no model can learn
    # it from this folder. Named, recorded in the manifest, and never appended to a base's labels.json.
    taught = {c for r in splits["train"] for c in r["labels"]}
    untrained = [c for c in codes if c not in taught and (base is None or c not in ds.labels)]
    partly: dict[str, Any] = {}   # the codes the base's notes were never coded for: `train` learns them from ours
    if base is not None:
        labels_json = _merged_labels(ds.labels, [c for c in codes if c not in ds.labels and c in taught], titles,
                                     system)
        partly = _partly_coded(ds, {e["code"] for e in labels_json}, {n["id"] for n in notes},
                               {str(i) for i in ds.split("train")["id"]})
    with atomic_dir(out, replaces=is_review_export) as tmp:
        os.chmod(tmp, 0o700)
        for name, part in splits.items():
            if part:
                _write_private(tmp / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part))
        if labels_json is not None:
            _write_private(tmp / "labels.json", json.dumps(labels_json, indent=1, ensure_ascii=False) + "\n")
        _write_private(tmp / "descriptions.tsv", "".join(f"{c}\t{titles[c]}\n" for c in codes if titles.get(c)))
        # the audit trail beside the decisions (no note text): every change, each coder's time, double coders' kappa
        _write_private(tmp / AUDIT_FILE, json.dumps({"decisions": audit_log(db), "work": work_times(db),
                                                     "agreement": agreement(db)}, indent=1) + "\n")
        counts = {name: len(part) for name, part in splits.items()}
        counts.setdefault("test", 0)
        write_manifest(tmp, make_manifest(EXPORT_KIND, counts=counts, codes=len(codes), reviewed=len(notes),
                                          source=str(db.path), base=None if base is None else str(base),
                                          codes_without_training_notes=untrained, **partly))
        os.chmod(tmp / MANIFEST_FILE, 0o600)  # like every file of the folder (docs/review.md)
    return {**counts, "codes": len(codes), "reviewed": len(notes), "kept_out": kept_out, "untrained": untrained}


RETRAIN_KIND = "prepared-dataset"  # a run's own data (RUN/data), which `train` accepts inside its --out
LOOP_NOTES = "loop_notes"          # the manifest's list of the training notes a warm start's epochs see


def retrain_data(db: ReviewStore, out: str | Path, *, base: str | Path, labels: Sequence[tuple[str, str]],
                 sample: int | None = None, seed: int = 0, system: CodeSystem | None = None,
                 checkpoint: str | Path = "", titles: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The coded-notes folder `review retrain` trains on: the finished notes with the coders' codes, plus the base's
    training notes (all of them; a warm start's epochs see only the decided notes and a random SAMPLE of the others,
    named in the manifest's `loop_notes`), and the base's dev and test unchanged, every
    split's codes kept to LABELS (the checkpoint's (code, title) list, which labels.json fixes: a retrained model
    has the same outputs). Base notes left without a code of LABELS are dropped, as `train --top-k` drops them;
    reviewed notes are kept whatever they hold (a note coded with none of the codes is a lesson too), with the
    coders' evidence spans of their kept codes (a fused checkpoint learns those mentions). Reviewed
    notes whose id is in the base's dev or test are left out (`kept_out`), as `export --base` does.

    SYSTEM: the checkpoint's code system (inferred from LABELS when None), the base's and the queue's too (checked
    before anything is written). CHECKPOINT: its path, for that message. Every file written is owner-only.

    Codes coders added that LABELS lacks join the label set, after LABELS, when at least MIN_ADDED_NOTES reviewed
    notes carry them (the retrained model grows a row for each, started from its title: TITLES', a `--descriptions`
    file's {code: title}, else the one SYSTEM ships, as `train` fills them); the others are left out ("too_few").

    Returns:
        {"train", "dev", "test", "reviewed", "sampled", "kept_out", "notes": ids of the reviewed notes used,
        "added_codes": {code: reviewed notes} that joined, "untitled": those of them with no title,
        "too_few": {code: reviewed notes} left out}.
    Raises:
        ReviewError: no finished note, or the base or the queue codes in another system than the checkpoint.
    """
    import random

    from clinicode.codes.systems import infer_code_system
    from clinicode.data.prepared import load_dataset

    out = Path(out)
    check_output(out, option="--out", command="review retrain", folder=True,
                 recognise=lambda f: manifest_kind(f) == RETRAIN_KIND, inputs={"--db": db.path, "--data": base})
    db.check_integrity()
    notes = db.finished()
    if not notes:
        raise ReviewError(f"no finished note in {db.path}; finish notes with `clinicode review decide ... --done` or "
                          "on the Review page, then retrain.")
    system = system or infer_code_system(c for c, _ in labels)
    ds = load_dataset(Path(base))
    _same_system(db, ds, system, base=base, checkpoint=checkpoint)
    held = {str(i) for name in ("dev", "test") if name in ds.splits for i in ds.splits[name]["id"]}
    known = {c for c, _ in labels}
    added = Counter(c for n in notes if n["id"] not in held for c in set(n["labels"]) if c not in known)
    joined = sorted(c for c, k in added.items() if k >= MIN_ADDED_NOTES)
    untitled: list[str] = []
    if joined:   # the model grows a row for each, after the checkpoint's codes; titles as `train` fills them
        named = _titles_of(joined, system, titles or {})
        labels = [*labels, *((c, named.get(c, "")) for c in joined)]
        untitled = [c for c in joined if not named.get(c)]
    keep = {c for c, _ in labels}
    reviewed = [_reviewed_row(n, sorted(c for c in n["labels"] if c in keep)) for n in notes if n["id"] not in held]
    ids = {r["id"] for r in reviewed}

    def rows(name: str) -> list[dict[str, Any]]:
        df = ds.splits.get(name)
        if df is None:
            return []
        out_rows = []
        spans = df[EVIDENCE] if EVIDENCE in df.columns else [None] * len(df)
        for i, t, lab, ev in zip(df["id"], df["text"], df["labels"], spans):
            codes = sorted(c for c in lab if c in keep)
            if codes and str(i) not in ids:
                out_rows.append(_base_row(str(i), t, codes, ev, keep=keep))
        return out_rows

    base_train = rows("train")
    loop = None        # the notes a warm start's epochs see: the decided ones and the sample (None: every note)
    if sample is not None and sample < len(base_train):
        loop = sorted(ids | {r["id"] for r in random.Random(seed).sample(base_train, max(sample, 0))})
    splits = {"train": reviewed + base_train, "dev": rows("dev"), "test": rows("test")}
    counts = _write_retrain_folder(out, splits, labels, manifest={
        "reviewed": len(reviewed), "source": str(db.path), "base": str(base), "sample": sample, LOOP_NOTES: loop,
        **_partly_coded(ds, keep, ids, {r["id"] for r in base_train})})
    sampled = len(base_train) if loop is None else len(loop) - len(reviewed)
    return {**counts, "reviewed": len(reviewed), "sampled": sampled, "kept_out": len(notes) - len(reviewed),
            "notes": sorted(ids), "added_codes": {c: added[c] for c in joined},
            "untitled": untitled,
            "too_few": {c: k for c, k in sorted(added.items()) if c not in joined}}


def _with_base(ds: Any, rows: dict[str, dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """DS's splits as coded-notes rows, a reviewed note of ROWS (by id) in place of its base train note and the other
    reviewed notes added to train; and how many reviewed notes were left out for being in the base's dev or test."""
    rows, splits, kept_out = dict(rows), {}, 0
    for name, df in ds.splits.items():
        part = []
        spans = df[EVIDENCE] if EVIDENCE in df.columns else [None] * len(df)
        for i, t, lab, ev in zip(df["id"], df["text"], df["labels"], spans):
            reviewed = rows.pop(str(i), None)
            if reviewed is not None and name == "train":
                part.append(reviewed)
            else:
                kept_out += reviewed is not None
                part.append(_base_row(str(i), t, list(lab), ev))
        splits[name] = part
    splits["train"].extend(rows.values())
    return splits, kept_out


def _partly_coded(ds: Any, keep: set[str], reviewed: set[str], base_train: set[str]) -> dict[str, Any]:
    """The manifest's `PARTLY_CODED` entry: the codes of KEEP the base's notes were never coded for (those its label
    set lacks, and those it already named partly coded), known only on the REVIEWED notes (and on the base's training
    notes BASE_TRAIN it named as read for them); {} when there are none."""
    prior = ds.manifest.get(PARTLY_CODED) or {}
    codes = sorted(c for c in keep if c not in ds.labels or c in set(prior.get("codes", ())))
    if not codes:
        return {}
    read = reviewed | {str(i) for i in prior.get("notes", ()) if str(i) in base_train}
    return {PARTLY_CODED: {"codes": codes, "notes": sorted(read)}}


def _titles_of(codes: Sequence[str], system: CodeSystem, given: Mapping[str, str]) -> dict[str, str]:
    """{code: title} for CODES as `train` fills a label set's: GIVEN's (a `--descriptions` file, any spelling of
    SYSTEM), else the title SYSTEM ships."""
    spelled = {system.canonical(c) or c.strip(): title for c, title in given.items()}
    return {**system.titles(codes), **{c: spelled[c] for c in codes if spelled.get(c)}}


def _write_retrain_folder(out: Path, splits: dict[str, list[dict[str, Any]]], labels: Sequence[tuple[str, str]], *,
                          manifest: dict[str, Any]) -> dict[str, int]:
    """OUT as a coded-notes folder of SPLITS with LABELS fixed in labels.json, every file owner-only; returns each
    split's notes."""
    from clinicode.data.labels import LabelSet

    with atomic_dir(out, replaces=lambda f: manifest_kind(f) == RETRAIN_KIND) as tmp:
        os.chmod(tmp, 0o700)
        for name, part in splits.items():
            if part:
                _write_private(tmp / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                              for r in part))
        label_set = LabelSet(tuple(c for c, _ in labels), tuple(d for _, d in labels), None)
        _write_private(tmp / "labels.json", json.dumps(label_set.to_json(), indent=1, ensure_ascii=False) + "\n")
        counts = {name: len(part) for name, part in splits.items()}
        write_manifest(tmp, make_manifest(RETRAIN_KIND, counts=counts, **manifest))
        os.chmod(tmp / MANIFEST_FILE, 0o600)  # like every file of the folder: it names the reviewed notes' ids
    return counts


def _same_system(db: ReviewStore, ds: Any, system: CodeSystem, *, base: str | Path, checkpoint: str | Path) -> None:
    """Refuse a base dataset or a queue that codes in another system than the checkpoint's, before anything is
    written (another system's notes would keep no code of its label set)."""
    from clinicode.codes.systems import infer_code_system

    theirs = ds.labels.code_system or infer_code_system(ds.labels.codes)
    if theirs.name != system.name:
        raise ReviewError(f"review retrain: --data {base} holds {theirs.name} codes, but --checkpoint {checkpoint} "
                          f"codes in {system.name}; pass the dataset the checkpoint was trained on (nothing was "
                          "written).")
    queued = db.code_system()
    if queued is not LOCAL and queued.name != system.name:
        raise ReviewError(f"review retrain: the queue in {db.path} holds notes scored in {queued.name}, but "
                          f"--checkpoint {checkpoint} codes in {system.name}; retrain the checkpoint that scored "
                          "them (nothing was written).")


def _reviewed_row(note: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    """A finished note as a coded-notes row: id, text, LABELS, and the coders' evidence spans of those labels (only
    when they marked some: the default model learns its codes' mentions from them)."""
    row = {"id": note["id"], "text": note["text"], "labels": labels}
    spans = [m for m in note.get("evidence", ()) if m["code"] in labels]
    if spans:
        row[EVIDENCE] = spans
    return row


def _base_row(note_id: str, text: str, labels: list[str], evidence: Any, *,
              keep: set[str] | None = None) -> dict[str, Any]:
    """A base dataset's note as a coded-notes row; its coders' evidence spans stay with it when the base has them
    (of the codes in KEEP; None: all), since the default model learns its codes' mentions from them."""
    row: dict[str, Any] = {"id": note_id, "text": text, "labels": labels}
    if isinstance(evidence, (list, tuple)) or hasattr(evidence, "tolist"):
        row[EVIDENCE] = [{"code": str(m["code"]), "start": int(m["start"]), "end": int(m["end"])}
                         for m in (evidence.tolist() if hasattr(evidence, "tolist") else evidence)
                         if keep is None or str(m["code"]) in keep]
    return row


def _merged_labels(base: Any, new: Sequence[str], titles: dict[str, str], system: CodeSystem) -> list[dict[str, str]]:
    """The base's labels.json entries with the codes coders added appended; each names its code system when the
    base's set and every added code's system are known."""
    from clinicode.data.labels import LabelSet

    fam = base.code_system
    members = [system.member(c) for c in new]
    if fam is not None and new:
        fam = None if any(m is None or m is LOCAL for m in members) else family_of([fam, *members])
    return LabelSet(tuple(base.codes) + tuple(new), tuple(base.descriptions) + tuple(titles.get(c, "") for c in new),
                    fam).to_json()


def _hash_splits(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    ranked = sorted(((_split_of(r["id"]), r) for r in rows), key=lambda t: t[0][0])
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "dev": [], "test": []}
    for (_, name), r in ranked:
        splits[name].append(r)
    for need in ("train", "dev"):  # tiny exports: borrow from the largest other split
        if not splits[need]:
            donor = max((s for s in splits if s != need), key=lambda s: len(splits[s]) - (s == "train"))
            splits[need].append(splits[donor].pop())
    return splits


def _write_private(path: Path, text: str) -> None:
    with new_private_file(path) as f:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
