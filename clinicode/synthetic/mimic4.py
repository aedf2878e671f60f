"""Synthetic, MIMIC-IV-shaped tables (hosp/ codes and titles, note/ discharge and radiology) for tests and benchmarks.

Invented text and public ICD titles only, with real MIMIC-IV's traps; never reads or imitates real patient text.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import gzip as gzip_module
import io
import logging
import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from clinicode.config import DEMO
from clinicode.data.splits import read_id_list, read_split_file
from clinicode.errors import ConfigError, DataFormatError
from clinicode.synthetic.code_tables import (
    CODE_INFO,
    ICD9_DX_TAIL,
    ICD9_PX_TAIL,
    ICD9_TOP_EXTRA,
    ICD10_CM_TAIL_FIRST,
    ICD10_PCS,
    ICD10_TOP_PHRASES,
    TOP50_ICD9,
    TOP50_ICD10,
    TOP_ICD9_PROCEDURES,
)
from clinicode.synthetic.mimic3 import _csv_field, _insert_padding, _Padder

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

# The code tables (top-50 lists, titles, phrases, tails) are data files: synthetic/tables/mimic4_codes.json.


@dataclass(frozen=True)
class CodeInfo:
    """One code of the synthetic label space.

    Attributes:
        version: 9 or 10 (the `icd_version` column).
        code: as stored in MIMIC-IV, without a dot (`4019`, `0389`, `J189`, `02HV33Z`).
        is_diagnosis: True for diagnoses_icd, False for procedures_icd.
        title: public long title (d_icd_* tables).
        phrases: invented clinical phrases; at least one is written into every admission coded with it.
        top: True for the 50 codes of Nguyen et al.'s top-50 list of this version.
    """

    version: int
    code: str
    is_diagnosis: bool
    title: str
    phrases: tuple[str, ...]
    top: bool


_STOPWORDS = frozenset(
    "a an and as at by for from in into of on or other the to with without unspecified specified elsewhere "
    "classified not nos site type part due via mention stated".split())
_QUALIFIERS = ("known", "findings of", "evidence of", "treated for", "noted")


def _title_phrases(code: str, title: str) -> tuple[str, ...]:
    """1-2 phrases related to but not identical with `title`: stopwords dropped, words dropped and swapped.

    Seeded by the code only, so a code's phrases never depend on the seed or on n_tail_codes.
    """
    rng = random.Random(f"phrase:{code}")
    words = re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", re.sub(r"\[[^\]]*\]", " ", title).lower())
    content = list(dict.fromkeys(w for w in words if w not in _STOPWORDS)) or words
    flat = " ".join(words)
    phrases: list[str] = []
    for _ in range(rng.choice((1, 2, 2))):
        keep = [w for w in content if rng.random() < 0.8] if len(content) > 2 else list(content)
        if len(keep) < min(2, len(content)):
            keep = content[:2]
        keep = keep[:6]
        if len(keep) >= 3 and rng.random() < 0.5:  # reorder: clinicians rarely write a title's word order
            i = rng.randrange(len(keep) - 1)
            keep[i], keep[i + 1] = keep[i + 1], keep[i]
        phrase = " ".join(keep)
        if phrase == flat or phrase in phrases or len(keep) < 3:  # short ones ("pain") would be too generic
            phrase = f"{rng.choice(_QUALIFIERS)} {phrase}"
        if phrase not in phrases:
            phrases.append(phrase)
    return tuple(phrases)


def _icd10_cm():
    try:
        with warnings.catch_warnings():  # its data loading uses deprecated importlib.resources calls
            warnings.simplefilter("ignore", DeprecationWarning)
            import simple_icd_10_cm as cm  # ~2 s to import: only when ICD-10 titles are needed
    except ImportError:
        raise ConfigError("write_demo_mimic4 needs the package simple-icd-10-cm for ICD-10-CM titles; "
                          "install it with `pip install simple-icd-10-cm`.") from None
    return cm


@functools.lru_cache(maxsize=8)
def code_catalogue(n_tail_codes: int = 200) -> tuple[CodeInfo, ...]:
    """The label space: both top-50 lists plus up to `n_tail_codes` tail codes per version.

    Tail codes are a fixed list (independent of the seed); a larger `n_tail_codes` extends it, keeping the
    first codes. ICD-9 tail codes are capped at the embedded list (dx + px); ICD-10 takes its CM tail from
    simple_icd_10_cm's billable codes and ~1/5 of the tail from embedded ICD-10-PCS codes.

    Args:
        n_tail_codes: tail codes wanted per ICD version (>= 0).
    Returns:
        CodeInfo tuples: ICD-9 top, ICD-9 tail (by decreasing frequency), ICD-10 top, ICD-10 tail.
    Raises:
        ConfigError: n_tail_codes is negative, or simple-icd-10-cm is missing.
    """
    if not isinstance(n_tail_codes, int) or isinstance(n_tail_codes, bool) or n_tail_codes < 0:
        raise ConfigError(f"n_tail_codes must be a non-negative integer, got {n_tail_codes!r}.")
    cm = _icd10_cm()
    caml = {c: (title, phrases) for c, _, title, phrases in CODE_INFO}
    out: list[CodeInfo] = []

    def icd9(dotted: str, is_dx: bool, title: str, top: bool) -> CodeInfo:
        if dotted in caml:
            title, phrases = caml[dotted][0], caml[dotted][1]
        elif dotted in ICD9_TOP_EXTRA:
            title, phrases = ICD9_TOP_EXTRA[dotted]
        else:
            phrases = _title_phrases(dotted, title)
        return CodeInfo(9, dotted.replace(".", ""), is_dx, title, phrases, top)

    out.extend(icd9(c, c not in TOP_ICD9_PROCEDURES, "", True) for c in TOP50_ICD9)
    n_px = min(len(ICD9_PX_TAIL), n_tail_codes // 5)
    n_dx = min(len(ICD9_DX_TAIL), n_tail_codes - n_px)
    n_px = min(len(ICD9_PX_TAIL), n_tail_codes - n_dx)
    out.extend(icd9(c, True, t, False) for c, t in ICD9_DX_TAIL[:n_dx])
    out.extend(icd9(c, False, t, False) for c, t in ICD9_PX_TAIL[:n_px])

    pcs = dict(ICD10_PCS)
    for code in TOP50_ICD10:
        title = pcs[code] if code in pcs else cm.get_description(code)
        out.append(CodeInfo(10, code, code not in pcs, title, ICD10_TOP_PHRASES[code], True))
    pcs_tail = [(c, t) for c, t in ICD10_PCS if c not in TOP50_ICD10]
    n_px = min(len(pcs_tail), n_tail_codes // 5)
    n_dx = n_tail_codes - n_px
    if n_dx:
        # (cm.remove_dot is a linear search per call: strip dots by hand.)
        taken = {c.replace(".", "") for c in ICD10_CM_TAIL_FIRST} | set(TOP50_ICD10)
        # Sorted then shuffled with a fixed generator: the same tail on every machine with the same package data.
        leaves = sorted({c for c in cm.get_all_codes(with_dots=True)
                         if cm.is_leaf(c) and c.replace(".", "") not in taken})
        random.Random(0x1CD10).shuffle(leaves)
        for dotted in (list(ICD10_CM_TAIL_FIRST) + leaves)[:n_dx]:
            code, title = dotted.replace(".", ""), cm.get_description(dotted)
            out.append(CodeInfo(10, code, True, title, _title_phrases(code, title), False))
    out.extend(CodeInfo(10, c, False, t, _title_phrases(c, t), False) for c, t in pcs_tail[:n_px])
    return tuple(out)


# --- invented text --------------------------------------------------------------------------------------
# MIMIC-IV-Note layout (section headers, ___ for de-identified spans); every sentence below is invented.
_SEP = "\n \n"
_COURSE_HEAD, _MEDS_HEAD = f"{_SEP}Brief Hospital Course:", f"{_SEP}Discharge Medications:"
_FILLER4 = (
    "Patient was seen and examined with the team on morning rounds.", "Vitals stable overnight, afebrile.",
    "Labs reviewed, electrolytes repleted as needed.", "Physical therapy saw the patient and cleared for home.",
    "Tolerating a regular diet, ambulating in the hallway.", "Pain controlled on oral medications.",
    "Discussed the plan with ___ (daughter) by phone on ___.", "Social work met with the family.",
    "Medications reconciled with the outpatient list.", "Transferred from ___ for further management.",
    "Full code, confirmed with the patient.", "Seen by Dr. ___ from the consult service.",
    "Exam: alert, oriented x3, lungs with faint crackles, abdomen soft and non-tender.",
    "Patient said \"I want to go home\" on ___.", "Home with VNA services arranged for ___.",
    "BP 126/78, HR 84, RR 16, SpO2 95% on room air.", "Repeat labs at the follow-up visit.",
    "Procedure tolerated well, no immediate complications.", "Continued home regimen, with doses adjusted.",
    "Weight today ___ kg, down from admission.", "Case management involved, discharge planned for ___.",
)
_CHIEF = ("shortness of breath", "chest pain", "fever, weakness", "confusion", "abdominal pain", "fall at home",
          "leg swelling", "dizziness", "cough, fatigue")
_ALLERGIES = ("NKDA", "Penicillins (hives)", "Sulfa drugs (rash)", "lisinopril (cough) / codeine (nausea)",
              "iodinated contrast", "none on file")
_MEDS4 = ("Aspirin 81 mg PO DAILY", "Metoprolol Succinate XL 50 mg PO DAILY", "Atorvastatin 40 mg PO QPM",
          "Furosemide 40 mg PO DAILY", "Pantoprazole 40 mg PO Q24H", "Senna 8.6 mg PO BID:PRN constipation",
          "Acetaminophen 650 mg PO Q6H:PRN pain or fever", "Polyethylene Glycol 17 g PO DAILY",
          "Amlodipine 5 mg PO DAILY", "Levetiracetam 500 mg PO BID")
_SERVICES4 = ("MEDICINE", "CARDIOTHORACIC", "SURGERY", "NEUROLOGY", "CARDIOLOGY", "ORTHOPAEDICS", "OMED")
_DISPO = ("Home", "Home With Service", "Extended Care", "Expired")
_INSTRUCTIONS = (
    "Please take your medications as prescribed and keep your follow-up appointments.",
    "Call your doctor or return to the emergency room if you have \"red flag\" symptoms, such as fever, chest pain, "
    "or trouble breathing.",
    "Weigh yourself every morning, and call if your weight goes up by more than 3 lbs.",
    "It was a pleasure taking care of you at ___.", "Do not drive until cleared by your doctor.",
)
# Radiology: code-like findings, so a prepare step that wrongly read note/radiology would change documents.
_RAD_EXAMS = (
    ("CHEST (PA AND LAT)", ("pneumonia", "pleural effusion", "pulmonary edema", "atelectasis", "cardiomegaly",
                            "no pneumothorax", "consolidation concerning for pneumonia",
                            "small left pleural effusion")),
    ("CHEST (PORTABLE AP)", ("pleural effusion", "pneumonia", "endotracheal tube in place", "picc line tip in the svc",
                             "interstitial edema", "bibasilar atelectasis")),
    ("CT HEAD W/O CONTRAST", ("no acute intracranial hemorrhage", "chronic small vessel ischemic disease",
                              "subdural hematoma", "old infarct")),
    ("CT ABD & PELVIS WITH CONTRAST", ("diverticulitis", "small bowel obstruction", "ascites", "hydronephrosis",
                                       "cholelithiasis")),
    ("BILAT LOWER EXT VEINS", ("deep vein thrombosis", "no deep vein thrombosis")),
    ("RENAL U.S.", ("hydronephrosis", "echogenic kidneys consistent with chronic kidney disease")),
)
_RAD_OTHER = ("Osseous structures intact.", "Unchanged lines.", "No free air.", "Limited by patient motion.")
README4 = """SYNTHETIC DATA - NOT MIMIC-IV. ALL NOTES ARE INVENTED (SEED {seed}).

This folder was generated by clinicode (clinicode.synthetic.mimic4.write_demo_mimic4, seed={seed}).
It only imitates the column layout of MIMIC-IV v2.2 (hosp/diagnoses_icd, hosp/procedures_icd,
hosp/d_icd_diagnoses, hosp/d_icd_procedures) and MIMIC-IV-Note v2.2 (note/discharge, note/radiology).
Every note is invented from templates; no patient data is inside. ICD titles are public (CMS ICD-9-CM
and ICD-10-PCS long titles, ICD-10-CM via simple-icd-10-cm). Results on this folder are not comparable
with published MIMIC-IV results.
"""

# Trap rates (per admission unless said otherwise).
_P_ICD9 = 0.6                 # extra admissions coded in ICD-9; the rest ICD-10
_KINDS, _KIND_P = "LNC", (0.75, 0.18, 0.07)  # L codes+note, N codes without discharge note, C note without codes
# With split lists, the listed ids are the coded admissions with a note; the extra ones then stand mostly for
# MIMIC-IV's ~100k admissions without a discharge note.
_KIND_P_WITH_LISTS = (0.10, 0.85, 0.05)
_P_TAIL = 0.35                # per code slot: drawn from the tail instead of the top 50
_P_DUP_CODE = 0.025           # per code row: written twice
_P_ADDENDUM = 0.05            # an AD row carrying part of the evidence
_P_AD_FIRST = 0.5             # ... stored before its DS row
_P_DUP_NOTE = 0.02            # an exactly repeated note row
_P_EMPTY = 0.02               # an extra row with empty text
_P_DISTRACTOR = 0.1           # a phrase of a code the admission does not have
_P_RAD_NO_HADM = 0.15         # radiology rows without hadm_id
_ADDENDUM_SHARE4 = 0.2        # an addendum is ~1/5 as long as a report (padding)
_CHUNK = 2000                 # admissions per written chunk: bounds memory at full size
_BOTH = 19                    # version mark of a listed admission coded in both ICD-9 and ICD-10


class _Padder4(_Padder):
    """synthetic._Padder's label-free corpus in MIMIC-IV dress: `___` for de-id brackets, ' \\n' section breaks."""

    def __init__(self, seed: int):
        super().__init__(seed)
        bounds = self.starts.tolist()
        deid = re.compile(r"\[\*\*.*?\*\*\]")
        units = [deid.sub("___", self.corpus[a:b]).replace("\n\n", _SEP) for a, b in zip(bounds[:-1], bounds[1:])]
        self.corpus = "".join(units)
        self.starts = np.concatenate([[0], np.cumsum([len(u) for u in units])]).astype(np.int64)


@dataclass
class _Pool:
    """Code indices into the catalogue with cumulative Zipf-like weights, for one version and table."""

    codes: list[int]
    cum: list[float]

    @classmethod
    def of(cls, codes: list[int], offset: float, power: float) -> "_Pool":
        w = 1.0 / (np.arange(len(codes)) + offset) ** power
        return cls(codes, np.cumsum(w).tolist())

    def draw(self, rng: random.Random, k: int) -> list[int]:
        return rng.choices(self.codes, cum_weights=self.cum, k=k) if self.codes and k > 0 else []


def _draw_codes(rng: random.Random, pools: dict, version: int) -> tuple[list[int], list[int]]:
    """(diagnoses, procedures) of one admission in one version: ~11 diagnoses and ~1.5 procedures on average."""
    n_dx = min(39, 1 + int(rng.gammavariate(3.0, 4.0)))
    n_tail = sum(rng.random() < _P_TAIL for _ in range(n_dx))
    dx = list(dict.fromkeys(pools[version, True, True].draw(rng, n_dx - n_tail)
                            + pools[version, True, False].draw(rng, n_tail)))
    px: list[int] = []
    if rng.random() < 0.65:
        n_px = 1 + int(rng.gammavariate(1.3, 1.4))
        n_tail = sum(rng.random() < 0.5 for _ in range(n_px))
        px = list(dict.fromkeys(pools[version, False, True].draw(rng, n_px - n_tail)
                                + pools[version, False, False].draw(rng, n_tail)))
    return dx or pools[version, True, True].draw(rng, 1), px


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
                     f"{_csv_field(_radiology_text(rng, sex))}\n")
    counts.radiology_without_hadm += n_without
    return lines


def _discharge_texts(rng: random.Random, cat: tuple[CodeInfo, ...], dx: list[int], px: list[int], ad_codes: set[int],
                     distractor: int | None, sex: str) -> tuple[str, str]:
    """(DS text, AD text or ""): every code's phrase once in history/course/procedures, diagnoses in the list too.

    Codes in `ad_codes` are mentioned only in the addendum.
    """
    hx, course, procs, diag, ad = [], [], [], [], []
    for i in dx:
        ph = cat[i].phrases
        first = rng.choice(ph)
        if i in ad_codes:
            ad.append(first)
            continue
        (hx if rng.random() < 0.5 else course).append(first)
        diag.append(rng.choice(ph))
    for i in px:
        ph = cat[i].phrases
        if i in ad_codes:
            ad.append(rng.choice(ph))
            continue
        procs.append(rng.choice(ph))
        if rng.random() < 0.5:
            course.append(rng.choice(ph))
    if distractor is not None:
        course.append(rng.choice(cat[distractor].phrases))
    rng.shuffle(hx)
    rng.shuffle(course)
    fill = lambda k: " ".join(rng.sample(_FILLER4, k))  # noqa: E731
    title, noun = ("Ms.", "woman") if sex == "F" else ("Mr.", "man")
    age = "___" if rng.random() < 0.7 else str(rng.randint(19, 89))
    cc = rng.choice(_CHIEF)
    meds = "\n".join(f"{k}. {m}" for k, m in enumerate(rng.sample(_MEDS4, rng.randint(2, 6)), 1))
    diag_text = f"PRIMARY:\n{diag[0]}\n\nSECONDARY:\n" + "\n".join(diag[1:]) if diag else "see hospital course"
    instructions = " ".join(rng.sample(_INSTRUCTIONS, 2))
    ds = (
        " \nName:  ___                     Unit No:   ___\n \nAdmission Date:  ___            "
        "  Discharge Date:   ___\n"
        f" \nDate of Birth:  ___             Sex:   {sex}\n \nService: {rng.choice(_SERVICES4)}\n \nAllergies: \n"
        f"{rng.choice(_ALLERGIES)}\n \nAttending: ___.\n \nChief Complaint:\n{cc}\n"
        f" \nMajor Surgical or Invasive Procedure:\n{chr(10).join(procs) or 'None'}\n"
        f" \nHistory of Present Illness:\n{title} ___ is a {age} year old {noun} with a history of "
        f"{', '.join(hx) or 'no major medical problems'}, who presents from ___ with {cc}. {fill(2)}\n"
        f" \nPhysical Exam:\n{fill(1)}"
        f"{_COURSE_HEAD}\n{fill(2)} Hospital course notable for {', '.join(course) or 'an uneventful stay'}. "
        f"{fill(2)}\n"
        f" \nMedications on Admission:\nPer the outpatient list, confirmed with ___."
        f"{_MEDS_HEAD}\n{meds}\n \nDischarge Disposition:\n{rng.choice(_DISPO)}\n"
        f" \nDischarge Diagnosis:\n{diag_text}\n \nDischarge Condition:\nstable, alert, walking with a walker.\n"
        f" \nDischarge Instructions:\nDear {title} ___,\n\n{instructions}\n\nSincerely,\nYour ___ Team\n"
        f" \nFollowup Instructions:\n___\n"
    )
    if not ad:
        return ds, ""
    rng.shuffle(ad)
    return ds, (f"ADDENDUM to discharge summary of ___:\n{fill(1)} Additional diagnoses after review: "
                f"{', '.join(ad)}.\n{fill(1)}\n___ MD")


def _radiology_text(rng: random.Random, sex: str) -> str:
    exam, findings = rng.choice(_RAD_EXAMS)
    found = rng.sample(findings, min(len(findings), rng.randint(1, 3)))
    return (f"EXAMINATION:  {exam}\n\nINDICATION:  ___ year old {'woman' if sex == 'F' else 'man'} with "
            f"{rng.choice(_CHIEF)}, evaluate for {found[0]}.\n\nTECHNIQUE:  Standard views.\n\nCOMPARISON:  ___\n\n"
            f"FINDINGS: \n\n{'. '.join(f.capitalize() for f in found)}. {rng.choice(_RAD_OTHER)}\n\n"
            f"IMPRESSION: \n\n{found[0].capitalize()}, correlate clinically.")


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

    pools, same_version = _pools(cat)

    adm = _Admissions.draw(nrng, listed, n_admissions, n_radiology)
    hadm, version, kind, subject = adm.hadm, adm.version, adm.kind, adm.subject

    ext = ".csv.gz" if gzip else ".csv"
    files = {name: out_dir / sub / f"{name}{ext}" for name, (sub, _) in TABLES.items()}
    padder = _Padder4(seed) if discharge_chars is not None else None
    counts = _Counts()
    handles = {name: _open_text4(files[name], gzip=gzip)
               for name in ("diagnoses_icd", "procedures_icd", "discharge", "radiology")}
    try:
        writers = {name: csv.writer(f, lineterminator="\n") for name, f in handles.items()}
        for name, f in handles.items():
            writers[name].writerow(TABLES[name][1])
        prev_subject = -1
        seqs = _Seqs()
        for lo in range(0, n_total, _CHUNK):
            dx_rows: list[tuple] = []
            px_rows: list[tuple] = []
            note_rows: list[tuple[str, int]] = []  # (csv prefix, index into texts or -1 for empty)
            texts: list[str] = []
            is_ad: list[bool] = []
            rad_lines: list[str] = []
            for a in adm.order[lo:lo + _CHUNK].tolist():
                h, s, v, k = int(hadm[a]), int(subject[a]), int(version[a]), _KINDS[kind[a]]
                if s != prev_subject:  # note_seq counts per subject, as in MIMIC-IV-Note
                    prev_subject, seqs.note, seqs.rad = s, rng.randint(1, 20), rng.randint(1, 30)
                sex = "F" if s % 2 else "M"
                admit = _FIRST_DAY + rng.randrange(36_500)
                disch = admit + 1 + int(rng.gammavariate(1.5, 3.0))
                dx: list[int] = []
                px: list[int] = []
                if k != "C":
                    # Listed in both an ICD-9 and an ICD-10 list (7 real ids are): coded in both versions.
                    for vv in ((9, 10) if v == _BOTH else (v,)):
                        vdx, vpx = _draw_codes(rng, pools, vv)
                        if adm.is_listed[a] and not any(cat[i].top for i in vdx + vpx):
                            vdx.insert(0, pools[vv, True, True].draw(rng, 1)[0])  # listed ids keep a top-50 code
                        dx += vdx
                        px += vpx
                dx_rows += _code_rows(rng, cat, dx, s, h, admit, disch, True, counts)
                px_rows += _code_rows(rng, cat, px, s, h, admit, disch, False, counts)
                if k == "N":
                    counts.admissions_codes_without_note += 1
                else:
                    counts.admissions_note_without_codes += k == "C"
                    codes = dx + px
                    ad_codes: set[int] = set()
                    if codes and rng.random() < _P_ADDENDUM:
                        ad_codes = set(rng.sample(codes, rng.randint(1, max(1, len(codes) // 2))))
                    distractor = None
                    if rng.random() < _P_DISTRACTOR:
                        distractor = rng.choice(same_version[9 if v == _BOTH else v])
                        if distractor in codes:
                            distractor = None
                    counts.distractor_notes += distractor is not None
                    ds, ad = _discharge_texts(rng, cat, dx, px, ad_codes, distractor, sex)
                    note_rows += _discharge_rows(rng, s, h, disch, ds, ad, seqs, counts, texts, is_ad)
                rad_lines += _radiology_rows(rng, s, h, int(adm.rad_with[a]), int(adm.rad_without[a]), admit, disch,
                                             sex, seqs, counts)

            if padder is not None and texts:
                texts = _pad_discharge(padder, texts, is_ad, discharge_chars)
            counts.discharge_text_chars += sum(map(len, texts))
            counts.discharge_texts += len(texts)
            fields = [_csv_field(t) for t in texts]
            handles["discharge"].write("".join(f"{p},{fields[i] if i >= 0 else ''}\n" for p, i in note_rows))
            handles["radiology"].write("".join(rad_lines))
            writers["diagnoses_icd"].writerows(dx_rows)
            writers["procedures_icd"].writerows(px_rows)
            counts.diagnoses_icd += len(dx_rows)
            counts.procedures_icd += len(px_rows)
            counts.discharge += len(note_rows)
            counts.radiology += len(rad_lines)
    finally:
        for f in handles.values():
            f.close()

    title_rows = {name: _write_title_table4(files[name], cat, diagnoses=want_dx, gzip=gzip)
                  for name, want_dx in (("d_icd_diagnoses", True), ("d_icd_procedures", False))}
    (out_dir / "README.txt").write_text(README4.format(seed=seed), encoding="utf-8")

    n_tail = {v: sum(1 for c in cat if c.version == v and not c.top) for v in (9, 10)}
    summary = {
        "out_dir": str(out_dir),
        "synthetic": True,
        "seed": seed,
        "n_admissions": n_total,
        "n_listed": len(listed),
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
    log.info("synthetic MIMIC-IV folder %s: %d admissions, %d discharge rows", out_dir, n_total, counts.discharge)
    return summary


def _pools(cat: tuple[CodeInfo, ...]) -> tuple[dict[tuple[int, bool, bool], "_Pool"], dict[int, list[int]]]:
    """Label pools per (version, is_diagnosis, top), rank-weighted; and every catalogue index per version."""
    pools: dict[tuple[int, bool, bool], _Pool] = {}
    for ver in (9, 10):
        for is_dx in (True, False):
            top = [i for i, c in enumerate(cat) if c.version == ver and c.is_diagnosis == is_dx and c.top]
            tail = [i for i, c in enumerate(cat) if c.version == ver and c.is_diagnosis == is_dx and not c.top]
            pools[ver, is_dx, True] = _Pool.of(top, 3.0, 0.9)
            pools[ver, is_dx, False] = _Pool.of(tail, 1.0, 1.0)  # Zipf: rank 1 common, the last ones rare
    same_version = {v: [i for i, c in enumerate(cat) if c.version == v] for v in (9, 10)}
    return pools, same_version


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


def _pad_discharge(padder: "_Padder4", texts: list[str], is_ad: list[bool], discharge_chars: int) -> list[str]:
    """DS and AD texts padded to a mean of `discharge_chars` with label-free filler (the padder's own generator, so
    ids, codes and phrases match the unpadded run)."""
    ad_arr = np.asarray(is_ad, dtype=bool)
    base = np.fromiter(map(len, texts), dtype=np.float64, count=len(texts))
    report_mean = discharge_chars / (1 - (1 - _ADDENDUM_SHARE4) * ad_arr.mean())
    total = padder.lengths(np.where(ad_arr, _ADDENDUM_SHARE4 * report_mean, report_mean), 0.5, 80_000)
    pad = np.maximum(total - base - 4, 0)
    b1, e1 = padder.spans(0.7 * pad, at_header=True)
    b2, e2 = padder.spans(0.3 * pad, at_header=False)
    corpus = padder.corpus
    return [_insert_padding(t, corpus, sp, heads=(_COURSE_HEAD, _MEDS_HEAD))
            for t, sp in zip(texts, zip(b1, e1, b2, e2))]


def _write_title_table4(path: Path, cat: tuple[CodeInfo, ...], *, diagnoses: bool, gzip: bool) -> int:
    """d_icd_diagnoses or d_icd_procedures: every catalogue code of that table, sorted like MIMIC-IV's (code,
    version); returns its rows."""
    rows = sorted((c.code, c.version, c.title) for c in cat if c.is_diagnosis == diagnoses)
    with _open_text4(path, gzip=gzip) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(TITLES_HEADER)
        w.writerows(rows)
    return len(rows)
