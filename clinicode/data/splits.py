"""CAML's HADM_ID split lists: read `{train,dev,test}_50_hadm_ids.csv`, check disjointness and sizes.

Id lists only; never reads notes or codes.
"""

from __future__ import annotations

from pathlib import Path

from clinicode.constants import CAML50_SPLIT_COUNTS, SPLITS
from clinicode.errors import DataFormatError

SPLIT_FILE_TEMPLATE = "{split}_50_hadm_ids.csv"


def split_file(splits_dir: Path, split: str) -> Path:
    """Path of CAML's top-50 id list for `split` inside `splits_dir`."""
    return Path(splits_dir) / SPLIT_FILE_TEMPLATE.format(split=split)


def read_id_list(path: Path) -> list[int]:
    """Read one integer HADM_ID per line (no header; blank lines ignored).

    Raises:
        DataFormatError: if the file is missing, not UTF-8, holds a non-integer line or a duplicate id.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(
            f"split file {path} not found; expected CAML's id list there (copy it from caml-mimic's mimicdata/)."
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path} cannot be read as UTF-8 text ({type(err).__name__}); expected one HADM_ID per line.") from err
    ids: list[int] = []
    seen: set[int] = set()
    for lineno, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        try:
            hadm = int(s)
        except ValueError:
            raise DataFormatError(
                f"{path} line {lineno}: {s[:20]!r} is not an integer HADM_ID; expected one integer per line, no header."
            ) from None
        if hadm in seen:
            raise DataFormatError(f"{path} line {lineno}: HADM_ID {hadm} is listed twice; each id must appear once.")
        seen.add(hadm)
        ids.append(hadm)
    if not ids:
        raise DataFormatError(f"{path} is empty; expected one HADM_ID per line.")
    return ids


def check_disjoint(splits: dict[str, list[int]]) -> None:
    """Raise DataFormatError naming the first pair of splits that share an id (and one example id)."""
    names = list(splits)
    sets = {n: set(splits[n]) for n in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            common = sets[a] & sets[b]
            if common:
                raise DataFormatError(
                    f"split lists {a} and {b} share {len(common)} HADM_ID(s), e.g. {min(common)}; "
                    "each admission must be in one split only. Use CAML's unmodified id files."
                )


def read_splits(splits_dir: Path) -> dict[str, list[int]]:
    """Read the three CAML top-50 id lists from `splits_dir` and check they are disjoint.

    Args:
        splits_dir: folder holding train_50_hadm_ids.csv, dev_50_hadm_ids.csv, test_50_hadm_ids.csv.
    Returns:
        {"train": [...], "dev": [...], "test": [...]} in file order.
    Raises:
        DataFormatError: missing folder or file, malformed line, duplicate id, or overlapping splits.
    """
    splits_dir = Path(splits_dir)
    if not splits_dir.is_dir():
        raise DataFormatError(
            f"splits folder {splits_dir} does not exist; pass --splits-dir pointing at CAML's *_50_hadm_ids.csv files."
        )
    splits = {s: read_id_list(split_file(splits_dir, s)) for s in SPLITS}
    check_disjoint(splits)
    return splits


def is_caml50(splits: dict[str, list[int]]) -> bool:
    """True when the lists have CAML's published top-50 sizes (8,066 / 1,573 / 1,729)."""
    return {s: len(ids) for s, ids in splits.items()} == CAML50_SPLIT_COUNTS
