"""Synthetic, MIMIC-IV-shaped tables (hosp/ codes and titles, note/ discharge and radiology) for tests and benchmarks.

Invented text and public ICD titles only, with real MIMIC-IV's traps; never reads or imitates real patient text."""

from __future__ import annotations

import csv
import datetime as dt
import gzip as gzip_module
import io
import logging
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from clinicode.config import DEMO
from clinicode.data.splits import read_id_list, read_split_file
from clinicode.errors import ConfigError, DataFormatError
from clinicode.synthetic.mimic3 import _csv_field
from clinicode.synthetic.mimic4_codes import CodeInfo, code_catalogue, code_pools, draw_codes
from clinicode.synthetic.mimic4_text import README4, Padder4, discharge_texts, pad_discharge, radiology_text

log = logging.getLogger(__name__)

# Exact MIMIC-IV v2.2 / MIMIC-IV-Note v2.2 column layouts.
DIAGNOSES_HEADER = ("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version")
PROCEDURES_HEADER = ("subject_id", "hadm_id", "seq_num", "chartdate", "icd_code", "icd_version")
TITLES_HEADER = ("icd_code", "icd_version", "long_title")
NOTE_HEADER = ("note_id", "subject_id", "hadm_id", "note_type", "note_seq", "charttime", "storetime", "text")
TABLES = {
    "diagnoses_icd": ("hosp", DIAGNOSES_HEADER), "procedures_icd": ("hosp", PROCEDURES_HEADER),
    "d_icd_diagnoses": ("hosp", TITLES_HEADER), "d_icd_procedures": ("hosp", TITLES_HEADER),
    "discharge": ("note", NOTE_HEADER), "radiology": ("note", NOTE_HEADER),
}


# Trap rates (per admission unless said otherwise).
_P_ICD9 = 0.6                 # extra admissions coded in ICD-9; the rest ICD-10
_KINDS, _KIND_P = "LNC", (0.75, 0.18, 0.07)  # L codes+note, N codes without discharge note, C note without codes
# With split lists, the listed ids are the coded admissions with a note; the extra ones then stand mostly for
# MIMIC-IV's ~100k admissions without a discharge note.
_KIND_P_WITH_LISTS = (0.10, 0.85, 0.05)
_P_DUP_CODE = 0.025           # per code row: written twice
_P_ADDENDUM = 0.05            # an AD row carrying part of the evidence
_P_AD_FIRST = 0.5             # ... stored before its DS row
_P_DUP_NOTE = 0.02            # an exactly repeated note row
_P_EMPTY = 0.02               # an extra row with empty text
_P_DISTRACTOR = 0.1           # a phrase of a code the admission does not have
_P_RAD_NO_HADM = 0.15         # radiology rows without hadm_id
_CHUNK = 2000                 # admissions per written chunk: bounds memory at full size
_BOTH = 19                    # version mark of a listed admission coded in both ICD-9 and ICD-10


def _version_of(path: Path) -> int:
    """9 or 10 from the file name or its two nearest folders, the nearest part that names icd9 or icd10."""
    for part in reversed(path.absolute().parts[-3:]):
        low = part.lower()
        has9, has10 = bool(re.search(r"icd[-_]?9(?!\d)", low)), bool(re.search(r"icd[-_]?10(?!\d)", low))
        if has9 and has10:
            break
        if has9 or has10:
            return 9 if has9 else 10
    raise ConfigError(f"cannot tell the ICD version of split file {path}; expected 'icd9' or 'icd10' (not both) "
                      "in its name or folder, e.g. mimiciv_icd9_split.csv or icd10/train_full_hadm_ids.csv.")


def _read_hadm_lists(paths: Sequence[Path]) -> dict[int, int]:
    """hadm_id -> 9, 10 or _BOTH from split files (one id a line, optional `hadm_id` header, or `hadm_id,split`).

    An id in both an ICD-9 and an ICD-10 list is coded in both versions (Edin et al.'s lists share 7 such ids).

    Raises:
        ConfigError: a path's ICD version cannot be inferred.
        DataFormatError: a file is missing, unreadable, or holds a non-id or a non-MIMIC-IV id.
    """
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.glob("*.csv"))
            if not found:
                raise DataFormatError(f"split folder {p} holds no .csv file; expected hadm_id lists such as "
                                      "train_full_hadm_ids.csv or mimiciv_icd9_split.csv.")
            files.extend(found)
        else:
            files.append(p)
    listed: dict[int, int] = {}
    for path in files:
        version = _version_of(path)
        if not path.is_file():
            raise DataFormatError(f"split file {path} not found; expected a file of MIMIC-IV hadm_ids.")
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            edin = f.readline().strip().lower().replace(" ", "") == "hadm_id,split"
        ids = [h for split in read_split_file(path).values() for h in split] if edin else read_id_list(path)
        for hadm in ids:  # the same readers as `prepare`, so both agree on what a split file holds
            if not 20_000_000 <= hadm <= 29_999_999:
                raise DataFormatError(f"{path}: {hadm} is not a MIMIC-IV hadm_id; expected 8 digits starting with 2 "
                                      "(MIMIC-III ids do not fit).")
            if listed.setdefault(hadm, version) != version:
                listed[hadm] = _BOTH
    return listed


@dataclass
class _Counts:
    diagnoses_icd: int = 0
    procedures_icd: int = 0
    discharge: int = 0
    radiology: int = 0
    duplicate_code_rows: int = 0
    addenda: int = 0
    addenda_before_report: int = 0
    duplicate_note_rows: int = 0
    empty_text_rows: int = 0
    distractor_notes: int = 0
    admissions_codes_without_note: int = 0
    admissions_note_without_codes: int = 0
    radiology_without_hadm: int = 0
    discharge_text_chars: int = 0
    discharge_texts: int = 0


def _open_text4(path: Path, *, gzip: bool):
    if gzip:  # mtime=0: the same arguments give byte-identical .gz files
        raw = gzip_module.GzipFile(path, "wb", compresslevel=1, mtime=0)
        return io.TextIOWrapper(raw, encoding="utf-8", newline="")
    return open(path, "w", newline="", encoding="utf-8")


_FIRST_DAY = dt.date(2110, 1, 1).toordinal()  # MIMIC-IV shifts dates into ~2110-2210


def _date_str(ordinal: int) -> str:
    return dt.date.fromordinal(ordinal).isoformat()


def _stamp(rng: random.Random, ordinal: int, first_hour: int = 0) -> str:
    return f"{_date_str(ordinal)} {rng.randint(first_hour, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


@dataclass
class _Seqs:
    """Running note_seq of the current subject's discharge (DS/AD) and radiology (RR) notes."""

    note: int = 0
    rad: int = 0
    subject: int = -1  # note_seq counts per subject, as in MIMIC-IV-Note


def _code_rows(rng: random.Random, cat: tuple[CodeInfo, ...], codes: list[int], s: int, h: int, admit: int,
               disch: int, is_dx: bool, counts: _Counts) -> list[tuple]:
    """diagnoses_icd or procedures_icd rows of one admission; ~2.5% of codes written again under a later seq_num."""
    rows, dups = [], []
    for seq, i in enumerate(codes, 1):
        c = cat[i]
        rows.append((s, h, seq, c.code, c.version) if is_dx else
                    (s, h, seq, _date_str(admit + rng.randint(0, disch - admit)), c.code, c.version))
        if rng.random() < _P_DUP_CODE:
            dups.append(rows[-1])
    rows.extend((*row[:2], len(codes) + n, *row[3:]) for n, row in enumerate(dups, 1))
    counts.duplicate_code_rows += len(dups)
    return rows


def _discharge_rows(rng: random.Random, s: int, h: int, disch: int, ds: str, ad: str, seqs: _Seqs, counts: _Counts,
                    texts: list[str], is_ad: list[bool]) -> list[tuple[str, int]]:
    """(csv prefix, index into `texts` or -1 for empty text) of one admission's discharge rows, in file order.

    Appends the DS (and AD) text to `texts`. Traps: an AD stored before its DS, an exact duplicate row, an extra
    row with empty text; the DS with text is always there.
    """
    ct = f"{_date_str(disch)} 00:00:00"
    rows = []
    for note_type, text in (("DS", ds), ("AD", ad)):
        if text:
            seqs.note += rng.randint(1, 3)
            stored = _stamp(rng, disch + (note_type == "AD") * rng.randint(0, 3), first_hour=8)
            rows.append((f"{s}-{note_type}-{seqs.note},{s},{h},{note_type},{seqs.note},{ct},{stored}", len(texts)))
            texts.append(text)
            is_ad.append(note_type == "AD")
    if len(rows) == 2:
        counts.addenda += 1
        if rng.random() < _P_AD_FIRST:  # stored out of note_seq order
            rows.reverse()
            counts.addenda_before_report += 1
    if rng.random() < _P_DUP_NOTE:
        rows.append(rows[-1])
        counts.duplicate_note_rows += 1
    if rng.random() < _P_EMPTY:
        seqs.note += 1
        t = rng.choice(("DS", "AD"))
        rows.append((f"{s}-{t}-{seqs.note},{s},{h},{t},{seqs.note},{ct},{_stamp(rng, disch, first_hour=8)}", -1))
        counts.empty_text_rows += 1
    return rows


def _radiology_rows(rng: random.Random, s: int, h: int, n_with: int, n_without: int, admit: int, disch: int,
                    sex: str, seqs: _Seqs, counts: _Counts) -> list[str]:
    """CSV lines of RR notes during one admission; the last `n_without` carry no hadm_id (outpatient studies)."""
    lines = []
    for j in range(n_with + n_without):
        seqs.rad += rng.randint(1, 4)
        hid = h if j < n_with else ""
        when = f"{_date_str(admit + rng.randint(0, disch - admit))} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        lines.append(f"{s}-RR-{seqs.rad},{s},{hid},RR,{seqs.rad},{when}00,{when}{rng.randint(10, 59)},"
                     f"{_csv_field(radiology_text(rng, sex))}\n")
    counts.radiology_without_hadm += n_without
    return lines


def _check_args(n_admissions, seed, n_tail_codes, discharge_chars, n_radiology, gzip) -> None:
    def is_int(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not is_int(n_admissions) or n_admissions < 0:
        raise ConfigError(f"n_admissions must be a non-negative integer, got {n_admissions!r}.")
    if not is_int(seed) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}.")
    if not is_int(n_tail_codes) or n_tail_codes < 0:
        raise ConfigError(f"n_tail_codes must be a non-negative integer, got {n_tail_codes!r}.")
    if discharge_chars is not None and (not is_int(discharge_chars) or discharge_chars < 1):
        raise ConfigError(f"discharge_chars must be a positive integer or None, got {discharge_chars!r}.")
    if n_radiology is not None and (not is_int(n_radiology) or n_radiology < 0):
        raise ConfigError(f"n_radiology must be a non-negative integer or None, got {n_radiology!r}.")
    if not isinstance(gzip, bool):
        raise ConfigError(f"gzip must be True or False, got {gzip!r}.")


def write_demo_mimic4(
    out_dir: Path,
    *,
    n_admissions: int = DEMO.n_admissions,
    seed: int = DEMO.seed,
    gzip: bool = False,
    n_tail_codes: int = 200,
    discharge_chars: int | None = None,
    n_radiology: int | None = None,
    hadm_ids_from: Sequence[Path] = (),
) -> dict:
    """Write a synthetic MIMIC-IV folder atomically; the options are those of `_write_demo_mimic4`.

    `out_dir` may be new, empty, or an earlier `demo-data` folder (replaced whole); anything else is refused.
    """
    from clinicode.artifacts import make_manifest
    from clinicode.files import atomic_dir, check_output, write_manifest
    from clinicode.synthetic.mimic3 import SYNTHETIC_KIND, is_synthetic_folder

    _check_args(n_admissions, seed, n_tail_codes, discharge_chars, n_radiology, gzip)
    paths = [hadm_ids_from] if isinstance(hadm_ids_from, (str, Path)) else list(hadm_ids_from)
    final = Path(out_dir)
    check_output(final, option="--out", command="demo-data", folder=True, recognise=is_synthetic_folder,
                 inputs={f"--hadm-ids-from {p}": p for p in paths})
    with atomic_dir(final, replaces=is_synthetic_folder) as tmp:
        summary = _write_demo_mimic4(tmp, n_admissions=n_admissions, seed=seed, gzip=gzip, n_tail_codes=n_tail_codes,
                                     discharge_chars=discharge_chars, n_radiology=n_radiology, hadm_ids_from=paths)
        summary["out_dir"] = str(final)
        summary["files"] = {k: str(final / Path(v).relative_to(tmp)) for k, v in summary["files"].items()}
        write_manifest(tmp, make_manifest(SYNTHETIC_KIND, format="mimic4", simple_icd_10_cm=_cm_version(),
                                          **{k: v for k, v in summary.items() if k not in ("out_dir", "files")}))
    return summary


def _cm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("simple-icd-10-cm")
    except PackageNotFoundError:
        return "?"


def _write_demo_mimic4(
    out_dir: Path,
    *,
    n_admissions: int,
    seed: int,
    gzip: bool,
    n_tail_codes: int,
    discharge_chars: int | None,
    n_radiology: int | None,
    hadm_ids_from: Sequence[Path],
) -> dict:
    """Write a synthetic MIMIC-IV v2.2 + MIMIC-IV-Note v2.2 shaped folder (`hosp/`, `note/`, README.txt).

    Traps as in real data: ICD-9 and ICD-10 admissions mixed in one table, undotted codes with leading zeros
    (0389, 0040, 0BH17EZ) and 3-character codes (486, I10), duplicate code rows, admissions with codes but no
    discharge note and with a note but no codes, AD addenda carrying part of the evidence (half stored before
    their DS row), exact duplicate note rows, empty texts, radiology notes with code-like words (some without
    hadm_id), `___` de-identification, quoted newlines, commas and double quotes in text.

    Args:
        out_dir: the (temporary) folder to fill.
        n_admissions: admissions in no split list, with all traps (0 is allowed with `hadm_ids_from`). Alone:
            75% coded with a note, 18% coded without a discharge note, 7% a note without codes. With
            `hadm_ids_from`: 10/85/5%, as MIMIC-IV's ~100k admissions without a discharge note
            (n_admissions=100_000 with all published lists gives MIMIC-IV's size).
        seed: the same arguments give byte-identical files (with the same simple-icd-10-cm data).
        gzip: write `.csv.gz` (deterministic headers) instead of `.csv`.
        n_tail_codes: tail codes per ICD version beyond the top 50, Zipf-like rarer (some seen in 1-9
            admissions, others in dozens at the default size). ICD-9 is capped at the embedded list
            (`summary["n_tail_codes"]` tells how many were used, `summary["tail_capped"]` whether capped).
        discharge_chars: pad DS and AD texts to this mean length in characters with label-free filler
            (MIMIC-IV's discharge notes average ~10,500). None: short template notes (~1.5 KB); ids, codes and
            signal phrases are the same either way.
        n_radiology: radiology rows (default 2 per admission), ~15% without hadm_id.
        hadm_ids_from: split files or folders of them (one id a line with or without a `hadm_id` header, or
            `hadm_id,split` CSV). The ICD version comes from `icd9`/`icd10` in the path. Every listed id gets
            a non-empty DS note and at least one top-50 code of that version (traps only where they cannot
            remove it), so preparing with those lists reproduces the published counts. An id in lists of
            both versions is coded in both, with a top-50 code of each.
    Returns:
        {"out_dir", "synthetic": True, "seed", "n_admissions" (all), "n_listed", "n_extra",
        "admissions_by_version" {9, 10, "both"}, "rows" (per table), "traps" (counts), "n_tail_codes" {9, 10},
        "n_tail_codes_requested", "tail_capped", "discharge_chars", "mean_discharge_chars", "bytes", "files"}.
    Raises:
        ConfigError: a bad argument, a split path without a clear ICD version, or simple-icd-10-cm missing.
        DataFormatError: an unreadable or malformed split file.
    """
    _check_args(n_admissions, seed, n_tail_codes, discharge_chars, n_radiology, gzip)
    if isinstance(hadm_ids_from, (str, Path)):
        hadm_ids_from = [hadm_ids_from]
    listed = _read_hadm_lists([Path(p) for p in hadm_ids_from])
    n_total = len(listed) + n_admissions
    if n_total < 1:
        raise ConfigError("n_admissions must be at least 1 when hadm_ids_from lists no ids, got 0.")
    cat = code_catalogue(n_tail_codes)
    out_dir = Path(out_dir)
    for sub in ("hosp", "note"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    pools, same_version = code_pools(cat)
    draw = _Draw(rng, cat, pools, same_version, _Admissions.draw(nrng, listed, n_admissions, n_radiology))

    ext = ".csv.gz" if gzip else ".csv"
    files = {name: out_dir / sub / f"{name}{ext}" for name, (sub, _) in TABLES.items()}
    padder = Padder4(seed) if discharge_chars is not None else None
    counts = _Counts()
    _write_admission_tables(draw, files, gzip=gzip, padder=padder, discharge_chars=discharge_chars, counts=counts)
    title_rows = {name: _write_title_table4(files[name], cat, diagnoses=want_dx, gzip=gzip)
                  for name, want_dx in (("d_icd_diagnoses", True), ("d_icd_procedures", False))}
    (out_dir / "README.txt").write_text(README4.format(seed=seed), encoding="utf-8")
    summary = _summary(draw, counts, title_rows, files, seed=seed, n_admissions=n_admissions,
                       n_tail_codes=n_tail_codes, discharge_chars=discharge_chars)
    summary["out_dir"] = str(out_dir)
    log.info("synthetic MIMIC-IV folder %s: %d admissions, %d discharge rows", out_dir, n_total, counts.discharge)
    return summary


@dataclass(frozen=True)
class _Draw:
    """What every admission is drawn from: the one generator, the catalogue, its pools and the admissions."""

    rng: random.Random
    cat: tuple[CodeInfo, ...]
    pools: dict
    same_version: dict[int, list[int]]
    adm: "_Admissions"


@dataclass
class _Chunk:
    """The rows of up to _CHUNK admissions, written together (`_write_chunk`)."""

    dx_rows: list[tuple] = field(default_factory=list)
    px_rows: list[tuple] = field(default_factory=list)
    note_rows: list[tuple[str, int]] = field(default_factory=list)  # (csv prefix, index into texts or -1 for empty)
    texts: list[str] = field(default_factory=list)
    is_ad: list[bool] = field(default_factory=list)
    rad_lines: list[str] = field(default_factory=list)


def _write_admission_tables(draw: _Draw, files: dict[str, Path], *, gzip: bool, padder: Padder4 | None,
                            discharge_chars: int | None, counts: _Counts) -> None:
    """diagnoses_icd, procedures_icd, discharge and radiology: every admission in table order, _CHUNK at a time."""
    handles = {name: _open_text4(files[name], gzip=gzip)
               for name in ("diagnoses_icd", "procedures_icd", "discharge", "radiology")}
    try:
        writers = {name: csv.writer(f, lineterminator="\n") for name, f in handles.items()}
        for name, f in handles.items():
            writers[name].writerow(TABLES[name][1])
        seqs = _Seqs()
        order = draw.adm.order
        for lo in range(0, len(order), _CHUNK):
            chunk = _Chunk()
            for a in order[lo:lo + _CHUNK].tolist():
                _add_admission(draw, a, chunk, seqs, counts)
            _write_chunk(chunk, handles, writers, padder=padder, discharge_chars=discharge_chars, counts=counts)
    finally:
        for f in handles.values():
            f.close()


def _add_admission(draw: _Draw, a: int, chunk: _Chunk, seqs: _Seqs, counts: _Counts) -> None:
    """One admission's code rows, discharge rows (unless it has no note) and radiology lines, added to CHUNK."""
    rng, adm = draw.rng, draw.adm
    h, s, v, k = int(adm.hadm[a]), int(adm.subject[a]), int(adm.version[a]), _KINDS[adm.kind[a]]
    if s != seqs.subject:
        seqs.subject, seqs.note, seqs.rad = s, rng.randint(1, 20), rng.randint(1, 30)
    sex = "F" if s % 2 else "M"
    admit = _FIRST_DAY + rng.randrange(36_500)
    disch = admit + 1 + int(rng.gammavariate(1.5, 3.0))
    dx, px = _admission_codes(draw, a, v, k)
    chunk.dx_rows += _code_rows(rng, draw.cat, dx, s, h, admit, disch, True, counts)
    chunk.px_rows += _code_rows(rng, draw.cat, px, s, h, admit, disch, False, counts)
    if k == "N":
        counts.admissions_codes_without_note += 1
    else:
        counts.admissions_note_without_codes += k == "C"
        ds, ad = _admission_texts(draw, dx, px, v, sex, counts)
        chunk.note_rows += _discharge_rows(rng, s, h, disch, ds, ad, seqs, counts, chunk.texts, chunk.is_ad)
    chunk.rad_lines += _radiology_rows(rng, s, h, int(adm.rad_with[a]), int(adm.rad_without[a]), admit, disch,
                                       sex, seqs, counts)


def _admission_codes(draw: _Draw, a: int, v: int, k: str) -> tuple[list[int], list[int]]:
    """(diagnoses, procedures) of admission A of version V and kind K (none for a note without codes)."""
    dx: list[int] = []
    px: list[int] = []
    if k == "C":
        return dx, px
    # Listed in both an ICD-9 and an ICD-10 list (7 real ids are): coded in both versions.
    for vv in ((9, 10) if v == _BOTH else (v,)):
        vdx, vpx = draw_codes(draw.rng, draw.pools, vv)
        if draw.adm.is_listed[a] and not any(draw.cat[i].top for i in vdx + vpx):
            vdx.insert(0, draw.pools[vv, True, True].draw(draw.rng, 1)[0])  # listed ids keep a top-50 code
        dx += vdx
        px += vpx
    return dx, px


def _admission_texts(draw: _Draw, dx: list[int], px: list[int], v: int, sex: str,
                     counts: _Counts) -> tuple[str, str]:
    """(DS text, AD text or ""): some codes' evidence moved to an addendum, sometimes a distractor's phrase added."""
    rng = draw.rng
    codes = dx + px
    ad_codes: set[int] = set()
    if codes and rng.random() < _P_ADDENDUM:
        ad_codes = set(rng.sample(codes, rng.randint(1, max(1, len(codes) // 2))))
    distractor = None
    if rng.random() < _P_DISTRACTOR:
        distractor = rng.choice(draw.same_version[9 if v == _BOTH else v])
        if distractor in codes:
            distractor = None
    counts.distractor_notes += distractor is not None
    return discharge_texts(rng, draw.cat, dx, px, ad_codes, distractor, sex)


def _write_chunk(chunk: _Chunk, handles: dict, writers: dict, *, padder: Padder4 | None,
                 discharge_chars: int | None, counts: _Counts) -> None:
    """CHUNK's rows into the four tables, its discharge texts padded first when asked."""
    texts = chunk.texts
    if padder is not None and texts:
        texts = pad_discharge(padder, texts, chunk.is_ad, discharge_chars)
    counts.discharge_text_chars += sum(map(len, texts))
    counts.discharge_texts += len(texts)
    fields = [_csv_field(t) for t in texts]
    handles["discharge"].write("".join(f"{p},{fields[i] if i >= 0 else ''}\n" for p, i in chunk.note_rows))
    handles["radiology"].write("".join(chunk.rad_lines))
    writers["diagnoses_icd"].writerows(chunk.dx_rows)
    writers["procedures_icd"].writerows(chunk.px_rows)
    counts.diagnoses_icd += len(chunk.dx_rows)
    counts.procedures_icd += len(chunk.px_rows)
    counts.discharge += len(chunk.note_rows)
    counts.radiology += len(chunk.rad_lines)


def _summary(draw: _Draw, counts: _Counts, title_rows: dict[str, int], files: dict[str, Path], *, seed: int,
             n_admissions: int, n_tail_codes: int, discharge_chars: int | None) -> dict:
    """What `_write_demo_mimic4` returns (its docstring lists the keys)."""
    cat, version = draw.cat, draw.adm.version
    n_tail = {v: sum(1 for c in cat if c.version == v and not c.top) for v in (9, 10)}
    return {
        "out_dir": None,
        "synthetic": True,
        "seed": seed,
        "n_admissions": len(version),
        "n_listed": len(version) - n_admissions,
        "n_extra": n_admissions,
        "admissions_by_version": {9: int((version == 9).sum()), 10: int((version == 10).sum()),
                                  "both": int((version == _BOTH).sum())},
        "rows": {"diagnoses_icd": counts.diagnoses_icd, "procedures_icd": counts.procedures_icd,
                 "d_icd_diagnoses": title_rows["d_icd_diagnoses"], "d_icd_procedures": title_rows["d_icd_procedures"],
                 "discharge": counts.discharge, "radiology": counts.radiology},
        "traps": {k: getattr(counts, k) for k in (
            "duplicate_code_rows", "addenda", "addenda_before_report", "duplicate_note_rows", "empty_text_rows",
            "distractor_notes", "admissions_codes_without_note", "admissions_note_without_codes",
            "radiology_without_hadm")},
        "n_tail_codes": n_tail,
        "n_tail_codes_requested": n_tail_codes,
        "tail_capped": any(n < n_tail_codes for n in n_tail.values()),
        "discharge_chars": discharge_chars,
        "mean_discharge_chars": round(counts.discharge_text_chars / max(1, counts.discharge_texts), 1),
        "bytes": sum(p.stat().st_size for p in files.values()),
        "files": {name: str(p) for name, p in files.items()},
    }


@dataclass(frozen=True)
class _Admissions:
    """Every admission's id, ICD version, kind, subject and radiology counts; `order` sorts them as the tables are."""

    hadm: np.ndarray
    version: np.ndarray
    kind: np.ndarray
    is_listed: np.ndarray
    subject: np.ndarray
    order: np.ndarray
    rad_with: np.ndarray
    rad_without: np.ndarray

    @classmethod
    def draw(cls, nrng: np.random.Generator, listed: dict[int, int], n_admissions: int,
             n_radiology: int | None) -> "_Admissions":
        n_total = len(listed) + n_admissions
        listed_ids = np.fromiter(listed, dtype=np.int64, count=len(listed))
        listed_ver = np.fromiter(listed.values(), dtype=np.int64, count=len(listed))
        taken = set(listed)
        extra: list[int] = []
        while len(extra) < n_admissions:
            for h in (nrng.integers(20_000_000, 30_000_000, size=n_admissions - len(extra) + 16)).tolist():
                if h not in taken and len(extra) < n_admissions:
                    taken.add(h)
                    extra.append(h)
        hadm = np.concatenate([listed_ids, np.asarray(extra, dtype=np.int64)])
        version = np.concatenate([listed_ver, np.where(nrng.random(n_admissions) < _P_ICD9, 9, 10)])
        p_kind = _KIND_P_WITH_LISTS if listed else _KIND_P
        kind = np.concatenate([np.zeros(len(listed), dtype=np.int64),
                               nrng.choice(len(_KINDS), size=n_admissions, p=p_kind)])
        is_listed = np.arange(n_total) < len(listed)
        n_subjects = max(1, int(round(n_total * 0.8)))  # some patients have several admissions
        subject_ids = np.sort(nrng.choice(10_000_000, size=n_subjects, replace=False) + 10_000_000)
        subject = subject_ids[nrng.integers(0, n_subjects, size=n_total)]
        order = np.lexsort((hadm, subject))
        n_rad = 2 * n_total if n_radiology is None else n_radiology
        rad_adm = nrng.integers(0, n_total, size=n_rad)
        rad_no_hadm = nrng.random(n_rad) < _P_RAD_NO_HADM
        rad_with = np.bincount(rad_adm[~rad_no_hadm], minlength=n_total)
        rad_without = np.bincount(rad_adm[rad_no_hadm], minlength=n_total)
        return cls(hadm, version, kind, is_listed, subject, order, rad_with, rad_without)


def _write_title_table4(path: Path, cat: tuple[CodeInfo, ...], *, diagnoses: bool, gzip: bool) -> int:
    """d_icd_diagnoses or d_icd_procedures: every catalogue code of that table, sorted like MIMIC-IV's (code,
    version); returns its rows."""
    rows = sorted((c.code, c.version, c.title) for c in cat if c.is_diagnosis == diagnoses)
    with _open_text4(path, gzip=gzip) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(TITLES_HEADER)
        w.writerows(rows)
    return len(rows)

