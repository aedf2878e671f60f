"""Published split lists: CAML / MIMIC-IV-ICD `{train,dev,test}_{50,full}_hadm_ids.csv` and Edin et al.'s CSV.

Id lists only, never notes or codes; the published lists ship with the package (PUBLISHED, gzipped)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from clinicode.constants import SPLITS
from clinicode.errors import DataFormatError
from clinicode.format_streams import open_binary

SPLIT_FILE_TEMPLATE = "{split}_{kind}_hadm_ids.csv"
TOP50_CODES_FILE = "top50_codes.txt"          # a pinned top-50 list beside the split files (MIMIC-IV-ICD)
EDIN_SPLITS = {"train": "train", "val": "dev", "test": "test"}
# The published lists, packaged (origin and licence of each: split_lists/README.md). Folder names as in the recipes.
PUBLISHED = Path(__file__).parent / "split_lists"
CAML_IDS = PUBLISHED / "caml-mimic-ids"


def resolve(path: Path) -> Path:
    """PATH itself, or PATH.gz when only the gzipped file exists (the packaged lists are gzipped)."""
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and gz.is_file() else path


def packaged(path: Path | None) -> Path | None:
    """A --splits-dir/--splits-file as given, or, when it is relative and names nothing here, the packaged list of
    that name (`--splits-dir mimic-splits/nguyen2023/icd10` on a fresh clone)."""
    if path is None:
        return None
    path = Path(path)
    if path.is_absolute() or path.exists() or resolve(path).exists():
        return path
    inside = resolve(PUBLISHED / path)
    return PUBLISHED / path if inside.exists() else path


def split_file(splits_dir: Path, split: str, kind: str = "50") -> Path:
    """Path of the id list of `split` inside `splits_dir`: kind "50" (top-50 label sets) or "full"; `.csv.gz` when
    only that exists."""
    return resolve(Path(splits_dir) / SPLIT_FILE_TEMPLATE.format(split=split, kind=kind))


def _read_text(path: Path, encoding: str) -> str:
    """A whole (small) id list as text; `.gz` through gzip."""
    with open_binary(path, where=str(path)) as f:
        return f.read().decode(encoding)


def read_id_list(path: Path) -> list[int]:
    """Read one integer HADM_ID per line (an optional `hadm_id` header line; blank lines ignored).

    Raises:
        DataFormatError: if the file is missing, not UTF-8, holds a non-integer line or a duplicate id.
    """
    path = resolve(path)
    if not path.is_file():
        raise DataFormatError(
            f"split file {path} not found; expected CAML's id list there (copy it from caml-mimic's mimicdata/)."
        )
    try:
        lines = _read_text(path, "utf-8").splitlines()
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path} cannot be read as UTF-8 text ({type(err).__name__}); "
                              "expected one HADM_ID per line.") from err
    ids: list[int] = []
    seen: set[int] = set()
    for lineno, line in enumerate(lines, 1):
        s = line.strip()
        if not s or (not ids and s.lower() == "hadm_id"):  # blank lines, and an optional header
            continue
        try:
            hadm = int(s)
        except ValueError:
            raise DataFormatError(
                f"{path} line {lineno}: {s[:20]!r} is not an integer HADM_ID; expected one integer per line (after an "
                "optional hadm_id header)."
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


def read_splits(splits_dir: Path, kind: str = "50") -> dict[str, list[int]]:
    """Read the three id lists of one kind from `splits_dir` and check they are disjoint.

    Args:
        splits_dir: folder holding {train,dev,test}_{kind}_hadm_ids.csv (CAML's, or MIMIC-IV-ICD's).
        kind: "50" for top-50 label sets, "full" for full code sets.
    Returns:
        {"train": [...], "dev": [...], "test": [...]} in file order.
    Raises:
        DataFormatError: missing folder or file, malformed line, duplicate id, or overlapping splits.
    """
    splits_dir = Path(splits_dir)
    if not splits_dir.is_dir():
        raise DataFormatError(
            f"splits folder {splits_dir} does not exist; pass --splits-dir pointing at a folder of "
            f"*_{kind}_hadm_ids.csv files."
        )
    splits = {s: read_id_list(split_file(splits_dir, s, kind)) for s in SPLITS}
    check_disjoint(splits)
    return splits


def read_split_file(path: Path) -> dict[str, list[int]]:
    """Read an Edin-style split CSV (`hadm_id,split`, split train/val/test) into clinicode's train/dev/test lists.

    Raises:
        DataFormatError: missing or unreadable file, wrong header, an unknown split name, a non-integer or repeated id.
    """
    path = resolve(path)
    if not path.is_file():
        raise DataFormatError(f"--splits-file {path}: no such file; expected a CSV with columns hadm_id,split.")
    try:
        lines = _read_text(path, "utf-8-sig").splitlines()
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path} cannot be read as UTF-8 text ({type(err).__name__}); "
                              "expected hadm_id,split rows.") from err
    if not lines or [c.strip().lower() for c in lines[0].split(",")] != ["hadm_id", "split"]:
        raise DataFormatError(f"{path}: the first line must be the header hadm_id,split (Edin et al.'s format).")
    splits: dict[str, list[int]] = {s: [] for s in SPLITS}
    seen: set[int] = set()
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        raw_id, _, name = line.partition(",")
        try:
            hadm = int(raw_id.strip())
        except ValueError:
            raise DataFormatError(f"{path} line {lineno}: {raw_id.strip()[:20]!r} is not an integer hadm_id.") from None
        split = EDIN_SPLITS.get(name.strip())
        if split is None:
            raise DataFormatError(f"{path} line {lineno}: split {name.strip()[:20]!r} is not train, val or test.")
        if hadm in seen:
            raise DataFormatError(f"{path} line {lineno}: hadm_id {hadm} is listed twice; each id must appear once.")
        seen.add(hadm)
        splits[split].append(hadm)
    if not seen:
        raise DataFormatError(f"{path} lists no admissions; expected hadm_id,split rows after the header.")
    return splits
