"""Synthetic, MIMIC-III-shaped tables (invented text, real public ICD-9 titles) for tests, demos and benchmarks.

Writes the five tables clinicode reads, with real MIMIC's traps; never reads or imitates real patient text.
"""

from __future__ import annotations

import csv
import gzip as gzip_module
import logging
import random
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from clinicode.config import DEMO
from clinicode.constants import CAML_TOP50, SPLITS
from clinicode.data.splits import read_splits
from clinicode.errors import ConfigError

log = logging.getLogger(__name__)

NOTE_HEADER = ("ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME", "CATEGORY",
               "DESCRIPTION", "CGID", "ISERROR", "TEXT")
CODE_HEADER = ("ROW_ID", "SUBJECT_ID", "HADM_ID", "SEQ_NUM", "ICD9_CODE")
TITLE_HEADER = ("ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE")

# Public ICD-9-CM long titles (as in CAML's ICD9_descriptions) and clinical phrases that signal each code.
# (dotted code, is_diagnosis, long title, phrases)
CODE_INFO: tuple[tuple[str, bool, str, tuple[str, ...]], ...] = (
    ("401.9", True, "Unspecified essential hypertension", ("essential hypertension", "htn", "elevated blood pressure")),
    ("38.93", False, "Venous catheterization, not elsewhere classified", ("central venous catheter placed", "right internal jugular line", "venous catheterization")),
    ("428.0", True, "Congestive heart failure, unspecified", ("congestive heart failure", "chf exacerbation", "volume overload diuresed with lasix")),
    ("427.31", True, "Atrial fibrillation", ("atrial fibrillation", "afib with rapid ventricular response", "irregularly irregular rhythm")),
    ("414.01", True, "Coronary atherosclerosis of native coronary artery", ("coronary artery disease", "coronary atherosclerosis", "cad with prior stenting")),
    ("96.04", False, "Insertion of endotracheal tube", ("intubated for airway protection", "endotracheal tube placed", "insertion of endotracheal tube")),
    ("96.6", False, "Enteral infusion of concentrated nutritional substances", ("tube feeds via ngt", "enteral nutrition started", "enteral infusion of feeds")),
    ("584.9", True, "Acute renal failure, unspecified", ("acute kidney injury", "acute renal failure", "creatinine rose from baseline")),
    ("250.00", True, "Diabetes mellitus type II without mention of complication, not stated as uncontrolled", ("type 2 diabetes mellitus", "dm2 on metformin", "diabetes without complication")),
    ("96.71", False, "Continuous mechanical ventilation for less than 96 consecutive hours", ("mechanical ventilation less than 96 hours", "extubated on day two", "briefly ventilated")),
    ("272.4", True, "Other and unspecified hyperlipidemia", ("hyperlipidemia", "hld on statin", "elevated lipids")),
    ("518.81", True, "Acute respiratory failure", ("acute respiratory failure", "hypoxic respiratory failure", "respiratory distress requiring support")),
    ("99.04", False, "Transfusion of packed cells", ("transfusion of packed red cells", "transfused prbc", "received two units of blood")),
    ("39.61", False, "Extracorporeal circulation auxiliary to open heart surgery", ("cardiopulmonary bypass", "extracorporeal circulation", "pump run during surgery")),
    ("599.0", True, "Urinary tract infection, site not specified", ("urinary tract infection", "uti", "positive urine culture")),
    ("530.81", True, "Esophageal reflux", ("gastroesophageal reflux", "gerd", "esophageal reflux on ppi")),
    ("96.72", False, "Continuous mechanical ventilation for 96 consecutive hours or more", ("prolonged mechanical ventilation", "ventilated more than 96 hours", "failed multiple extubation trials")),
    ("272.0", True, "Pure hypercholesterolemia", ("hypercholesterolemia", "high cholesterol", "elevated ldl")),
    ("285.9", True, "Anemia, unspecified", ("anemia unspecified", "low hematocrit", "chronic anemia")),
    ("88.56", False, "Coronary arteriography using two catheters", ("coronary arteriography", "coronary angiogram with two catheters", "angiography of coronaries")),
    ("244.9", True, "Unspecified hypothyroidism", ("hypothyroidism", "on levothyroxine", "elevated tsh")),
    ("486", True, "Pneumonia, organism unspecified", ("pneumonia", "right lower lobe infiltrate", "community acquired pneumonia")),
    ("38.91", False, "Arterial catheterization", ("arterial line placed", "arterial catheterization", "radial a line")),
    ("285.1", True, "Acute posthemorrhagic anemia", ("acute blood loss anemia", "posthemorrhagic anemia", "hematocrit drop after bleeding")),
    ("36.15", False, "Single internal mammary-coronary artery bypass", ("lima to lad graft", "internal mammary artery bypass", "cabg with lima")),
    ("276.2", True, "Acidosis", ("metabolic acidosis", "acidosis", "low bicarbonate with anion gap")),
    ("496", True, "Chronic airway obstruction, not elsewhere classified", ("copd", "chronic obstructive pulmonary disease", "chronic airway obstruction")),
    ("99.15", False, "Parenteral infusion of concentrated nutritional substances", ("tpn started", "parenteral nutrition", "total parenteral nutrition via picc")),
    ("995.92", True, "Severe sepsis", ("severe sepsis", "septic shock requiring pressors", "sepsis with organ dysfunction")),
    ("V58.61", True, "Encounter for long-term (current) use of anticoagulants", ("long term anticoagulation", "on coumadin", "chronic warfarin therapy")),
    ("507.0", True, "Pneumonitis due to inhalation of food or vomitus", ("aspiration pneumonitis", "aspiration pneumonia", "inhalation of food or vomitus")),
    ("038.9", True, "Unspecified septicemia", ("septicemia", "bacteremia", "blood cultures positive")),
    ("88.72", False, "Diagnostic ultrasound of heart", ("transthoracic echocardiogram", "echo showed", "diagnostic ultrasound of heart")),
    ("585.9", True, "Chronic kidney disease, unspecified", ("chronic kidney disease", "ckd", "chronic renal insufficiency")),
    ("403.90", True, "Hypertensive chronic kidney disease, unspecified, without mention of renal failure", ("hypertensive kidney disease", "hypertensive nephropathy", "renal disease due to hypertension")),
    ("311", True, "Depressive disorder, not elsewhere classified", ("depression", "depressive disorder", "on sertraline for mood")),
    ("305.1", True, "Tobacco use disorder", ("tobacco use", "current smoker", "smokes one pack per day")),
    ("37.22", False, "Left heart cardiac catheterization", ("left heart catheterization", "left heart cath", "lv gram")),
    ("412", True, "Old myocardial infarction", ("old myocardial infarction", "prior mi", "history of heart attack")),
    ("33.24", False, "Closed [endoscopic] biopsy of bronchus", ("bronchoscopy with biopsy", "endobronchial biopsy", "bronchial biopsy")),
    ("39.95", False, "Hemodialysis", ("hemodialysis", "hd session", "dialysis via tunneled catheter")),
    ("287.5", True, "Thrombocytopenia, unspecified", ("thrombocytopenia", "low platelets", "platelet count decreased")),
    ("410.71", True, "Acute myocardial infarction, subendocardial infarction, initial episode of care", ("nstemi", "subendocardial infarction", "non st elevation myocardial infarction")),
    ("276.1", True, "Hyposmolality and/or hyponatremia", ("hyponatremia", "low sodium", "hyposmolality")),
    ("V45.81", True, "Postsurgical aortocoronary bypass status", ("status post cabg", "aortocoronary bypass status", "prior bypass surgery")),
    ("424.0", True, "Mitral valve disorders", ("mitral regurgitation", "mitral valve disorder", "mitral stenosis")),
    ("45.13", False, "Other endoscopy of small intestine", ("egd", "upper endoscopy", "endoscopy of small intestine")),
    ("V15.82", True, "History of tobacco use", ("former smoker", "history of tobacco use", "quit smoking years ago")),
    ("511.9", True, "Unspecified pleural effusion", ("pleural effusion", "effusion on chest x ray", "blunting of costophrenic angle")),
    ("37.23", False, "Combined right and left heart cardiac catheterization", ("right and left heart catheterization", "combined heart cath", "swan ganz and coronary study")),
)
# Codes outside the top 50: E and V codes, a procedure with leading zeros (0040 -> 00.40), etc.
EXTRA_CODE_INFO: tuple[tuple[str, bool, str, tuple[str, ...]], ...] = (
    ("250.60", True, "Diabetes mellitus type II with neurological manifestations, not stated as uncontrolled", ("diabetic neuropathy",)),
    ("707.03", True, "Decubitus ulcer, lower back", ("sacral decubitus ulcer",)),
    ("278.00", True, "Obesity, unspecified", ("obesity",)),
    ("345.90", True, "Epilepsy, unspecified, without mention of intractable epilepsy", ("seizure disorder",)),
    ("493.90", True, "Asthma, unspecified type, without mention of status asthmaticus", ("asthma",)),
    ("562.10", True, "Diverticulosis of colon (without mention of hemorrhage)", ("diverticulosis",)),
    ("E849.7", True, "Accidents occurring in residential institution", ("fall at nursing home",)),
    ("E878.8", True, "Other specified surgical operations and procedures causing abnormal patient reaction", ("postoperative complication",)),
    ("E934.2", True, "Anticoagulants causing adverse effects in therapeutic use", ("supratherapeutic inr",)),
    ("V58.67", True, "Encounter for long-term (current) use of insulin", ("insulin dependent",)),
    ("V45.82", True, "Percutaneous transluminal coronary angioplasty status", ("prior ptca",)),
    ("V10.46", True, "Personal history of malignant neoplasm of prostate", ("history of prostate cancer",)),
    ("00.40", False, "Adjunct vascular system procedure on single vessel", ("single vessel intervention",)),
    ("00.66", False, "Percutaneous transluminal coronary angioplasty [PTCA] or coronary atherectomy", ("ptca performed",)),
    ("00.45", False, "Adjunct vascular system procedure, insertion of one vascular stent", ("one stent deployed",)),
    ("93.90", False, "Continuous positive airway pressure [CPAP]", ("cpap overnight",)),
    ("54.91", False, "Percutaneous abdominal drainage", ("paracentesis",)),
    ("87.44", False, "Routine chest x-ray, so described", ("routine chest film",)),
)
assert tuple(c for c, *_ in CODE_INFO) == CAML_TOP50

_FILLER = (
    "Patient was seen and examined on the floor.", "Vital signs were stable, afebrile overnight.",
    "Labs were reviewed with the team, including a CBC, chem 7 and coags.", "Physical therapy evaluated the patient.",
    "She tolerated a regular diet.", "He was ambulating with a walker by discharge.",
    "Pain was controlled with oral medications.", "Family meeting held on [**2150-1-3**] with the daughter.",
    "Social work was consulted for discharge planning.", "Medications were reconciled, see list below.",
    "The patient was transferred from [**Hospital1 18**] for further care.", "Code status: full code.",
    "Follow up with PCP Dr. [**First Name (STitle) 2343**] in 1-2 weeks.", "Creatinine 1.2, potassium 4.1, glucose 112.",
    "Exam: alert, oriented x3, lungs with scattered crackles, abdomen soft, non-tender.",
    "Patient stated \"I feel better today\" on morning rounds.", "Discharged to home with services, VNA to follow.",
    "Blood pressure 128/76, heart rate 82, O2 sat 96% on RA.", "Repeat labs in 1 week, call with results.",
    "Tolerated procedure well, no complications noted.", "Continue home medications, as tolerated.",
)
_MEDS = ("Aspirin 81 mg PO DAILY", "Metoprolol tartrate 25 mg PO BID", "Atorvastatin 40 mg PO DAILY",
         "Furosemide 20 mg PO DAILY", "Pantoprazole 40 mg PO Q24H", "Docusate sodium 100 mg PO BID",
         "Acetaminophen 650 mg PO Q6H:PRN pain", "Heparin 5000 unit SC TID")
_OTHER_CATEGORIES = (("Nursing/other", "Report"), ("Radiology", "CHEST (PORTABLE AP)"), ("ECG", "Report"),
                     ("Nursing", "Nursing Progress Note"), ("Physician ", "Physician Resident Progress Note"),
                     ("Echo", "Report"), ("Respiratory ", "Respiratory Care Shift Note"), ("Nutrition", "Nutrition Note"))
_OTHER_TEXTS = (
    "Sinus rhythm. Normal ECG. Rate {a}.", "Pt resting comfortably, VSS, HR {a}, will cont to monitor.",
    "PORTABLE CHEST: lines and tubes in place, no pneumothorax. [**Hospital1 18**]",
    "Resp: on {b}L NC, sats {c}%, lungs clear, suctioned for thick secretions.",
    "Nutrition: TF at goal {a} mL/hr, tolerating, \"no residuals\", monitor lytes.",
    "Echo: LVEF {c}%, mild MR, no effusion.",
)
_SERVICES = ("MEDICINE", "CARDIOTHORACIC", "SURGERY", "NEUROLOGY", "CARDIOLOGY")
README = """SYNTHETIC DATA - NOT MIMIC-III.

This folder was generated by clinicode (clinicode.synthetic.mimic3.write_demo_mimic, seed={seed}).
It only imitates the column layout of MIMIC-III v1.4 (NOTEEVENTS, DIAGNOSES_ICD, PROCEDURES_ICD,
D_ICD_DIAGNOSES, D_ICD_PROCEDURES). Every note is invented from templates; no patient data is inside.
ICD-9 titles are the public ICD-9-CM long titles. Results on this folder are not comparable with
published MIMIC-III results.
"""


def _raw(code: str) -> str:
    return code.replace(".", "")


def _open_text(path: Path, *, gzip: bool):
    if gzip:
        return gzip_module.open(path, "wt", newline="", encoding="utf-8", compresslevel=1)
    return open(path, "w", newline="", encoding="utf-8")


@contextmanager
def _csv_writer(path: Path, *, gzip: bool) -> Iterator["csv._writer"]:
    with _open_text(path, gzip=gzip) as f:
        # MIMIC quotes text fields; minimal quoting still quotes any field with a comma, quote or newline.
        yield csv.writer(f, lineterminator="\n")


def _csv_field(value) -> str:
    """One field exactly as csv.writer (QUOTE_MINIMAL, '"' doubled) writes it; for the fast padded-notes path."""
    if value is None:
        return ""
    text = str(value)
    if "\n" in text or '"' in text or "," in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def _discharge_text(rng: random.Random, codes: list[str], phrases: dict[str, tuple[str, ...]], all_codes: list[str],
                    date: str, part: str) -> str:
    """An invented discharge summary (or addendum) mentioning phrases of `codes` amid shared filler."""
    mentions = []
    for code in codes:
        if rng.random() < 0.93:  # a few codes stay implicit, as in real notes
            mentions.extend(rng.sample(phrases[code], k=min(len(phrases[code]), rng.randint(1, 2))))
    if rng.random() < 0.15:  # distractor: a phrase of a code the admission does not have
        mentions.append(rng.choice(phrases[rng.choice(all_codes)]))
    rng.shuffle(mentions)
    filler = lambda k: " ".join(rng.choices(_FILLER, k=k))  # noqa: E731
    if part == "Addendum":
        return (f"Addendum dated [**{date}**]:\n{filler(1)} Additional findings: {', '.join(mentions) or 'none'}.\n"
                f"{filler(1)}\n[**First Name11 (Name Pattern1) 123**] MD")
    half = len(mentions) // 2
    meds = "\n".join(f"{i}. {m}" for i, m in enumerate(rng.sample(_MEDS, k=rng.randint(2, 5)), 1))
    return (
        f"Admission Date:  [**{date}**]              Discharge Date:   [**{date}**]\n\n"
        f"Date of Birth:  [**2080-{rng.randint(1, 12)}-{rng.randint(1, 28)}**]             Sex:   {rng.choice('MF')}\n\n"
        f"Service: {rng.choice(_SERVICES)}\n\nChief Complaint:\n{rng.choice(['dyspnea', 'chest pain', 'fever, weakness', 'altered mental status'])}\n\n"
        f"History of Present Illness:\n{rng.randint(40, 90)} yo with history of {', '.join(mentions[:half]) or 'no significant illness'}, "
        f"presenting from [**Hospital1 18**]. {filler(2)}\n\n"
        f"Brief Hospital Course:\n{filler(3)} Hospital course notable for {', '.join(mentions[half:]) or 'an uneventful stay'}. {filler(2)}\n\n"
        f"Discharge Medications:\n{meds}\n\nDischarge Diagnosis:\n{'; '.join(mentions) or 'see above'}\n\n"
        f"Discharge Condition:\nstable, {rng.randint(1, 3)} day follow up, \"ambulatory\".\n"
    )


# --- optional padding to real note sizes ------------------------------------------------------------
# Real MIMIC-III v1.4: NOTEEVENTS.csv is ~4 GB for 2,083,180 rows; ~60k discharge summaries average ~10 KB of
# text, the other notes ~1.7 KB. write_demo_mimic(discharge_chars=..., other_chars=...) pads to such sizes.
REAL_DISCHARGE_CHARS = 10_000
REAL_OTHER_CHARS = 1_700
_PAD_CORPUS_CHARS = 4_000_000  # one shared corpus; each padded note is a slice of whole sentences of it
_ADDENDUM_SHARE = 0.2  # an addendum is ~1/5 as long as a report
_PAD_SIGMA_DISCHARGE, _PAD_SIGMA_OTHER = 0.5, 0.9  # lognormal spread of note lengths
_PAD_MAX_DISCHARGE, _PAD_MAX_OTHER = 80_000, 30_000
# Relative length per _OTHER_CATEGORIES entry (ECGs are short, physician notes long); normalised to mean 1.
_OTHER_LENGTH_WEIGHTS = np.array([1.0, 1.0, 0.15, 1.3, 2.5, 1.3, 0.8, 1.0])
_OTHER_LENGTH_WEIGHTS = _OTHER_LENGTH_WEIGHTS / _OTHER_LENGTH_WEIGHTS.mean()
_PAD_SECTIONS = ("Past Medical History:", "Social History:", "Family History:", "Physical Exam:",
                 "Pertinent Results:", "Imaging:", "Microbiology:", "Procedures this admission:", "Consults:",
                 "Assessment and Plan:", "Hospital Course by System:", "Transitional Issues:", "Neuro:", "CV:",
                 "Resp:", "GI/GU:", "Skin:", "Plan:")
# Generic sentences only: none may contain a code phrase of CODE_INFO/EXTRA_CODE_INFO (padding carries no label signal).
_PAD_SENTENCES = _FILLER + (
    "Lives with wife, independent in ADLs at baseline.", "No alcohol or illicit drug use reported.",
    "Family history noncontributory.", "General: NAD, lying in bed, pleasant and cooperative.",
    "HEENT: NCAT, PERRL, EOMI, MMM, oropharynx clear.", "Neck: supple, JVP not elevated, no LAD.",
    "Ext: warm, well perfused, 1+ pitting edema bilaterally.", "Neuro: CN II-XII intact, strength 5/5 throughout.",
    "Skin: intact, no rashes noted.", "Abd: soft, NT/ND, normoactive bowel sounds.",
    "Alert and oriented, follows commands, MAE.", "NSR 70s-80s, no ectopy noted.", "Voiding via foley, clear yellow urine.",
    "Tolerating clears, advance diet as tolerated.", "Lung sounds clear upper lobes, diminished at the bases.",
    "Will continue to monitor and update the team with any changes.", "Electrolytes repleted per sliding scale.",
    "Seen and discussed with the attending, agree with the plan as outlined above.", "No acute events overnight.",
    "Wound clean, dry and intact, dressing changed.", "Out of bed to chair with assist of two.",
    "Daughter called and was updated on the plan of care.", "PT/OT recommend rehab on discharge.",
    "Antibiotics were narrowed per ID recommendations.", "Incentive spirometry encouraged.",
    "Bowel regimen continued.", "Glucose managed with an insulin sliding scale.",
    "Pending at discharge: final read of imaging.", "Case management aware of the discharge plan.",
)
_PAD_TEMPLATES = (
    "[**{d}**] {h:02d}:{mi:02d}AM BLOOD WBC-{f1:.1f} RBC-{f2:.2f} Hgb-{f3:.1f} Hct-{f4:.1f} MCV-{n1} Plt Ct-{n2}",
    "[**{d}**] {h:02d}:{mi:02d}AM BLOOD Glucose-{n2} UreaN-{n3} Creat-{f1:.1f} Na-{n4} K-{f2:.1f} Cl-{n1} HCO3-{n3} AnGap-{n5}",
    "[**{d}**] {h:02d}:{mi:02d}PM BLOOD PT-{f3:.1f} PTT-{n3}.{n5} INR(PT)-{f2:.1f}",
    "VS: T {t:.1f} HR {n1} BP {n2}/{n3} RR {n5} O2 sat {s}% on {l}L NC.",
    "I/O: {n2}0 in, {n1}0 out over the last 24 hours.",
    "Seen by Dr. [**Last Name (STitle) {n4}**] from [**Hospital Unit Name {n5}**].",
    "Transferred to [**Location (un) {n4}**] on hospital day {n5}.",
    "Contact [**Telephone/Fax (1) {n4}{n3}**] with questions.",
    "CXR [**{d}**]: lines and tubes unchanged, no new consolidation.",
    "Weight {n2} lbs, down {f1:.1f} lbs from admission.",
)


def _pad_corpus(seed: int) -> tuple[str, np.ndarray, np.ndarray]:
    """(corpus, unit start offsets incl. the end, offsets of units that open a section); deterministic per seed.

    Units are whole sentences, lab lines or section headers, recombined from the templates with fresh numbers
    and de-id brackets; slicing between two unit offsets never cuts a sentence.
    """
    rng = random.Random(seed * 7919 + 0x5CA1E)
    parts: list[str] = []
    starts: list[int] = []
    headers: list[int] = []
    pos = 0
    while pos < _PAD_CORPUS_CHARS:
        if not parts or rng.random() < 0.08:
            unit = f"\n\n{rng.choice(_PAD_SECTIONS)}\n"
            headers.append(len(starts))
        elif rng.random() < 0.3:
            unit = rng.choice(_PAD_TEMPLATES).format(
                d=f"{rng.randint(2100, 2199)}-{rng.randint(1, 12)}-{rng.randint(1, 28)}", h=rng.randint(1, 11),
                mi=rng.randint(0, 59), f1=rng.uniform(0.5, 15), f2=rng.uniform(2.5, 5.5), f3=rng.uniform(8, 16),
                f4=rng.uniform(24, 45), n1=rng.randint(60, 110), n2=rng.randint(100, 400), n3=rng.randint(10, 90),
                n4=rng.randint(100, 9999), n5=rng.randint(8, 22), t=rng.uniform(36.1, 38.4), s=rng.randint(90, 100),
                l=rng.randint(1, 6)) + rng.choice((" ", "\n"))
        else:
            unit = rng.choice(_PAD_SENTENCES) + rng.choice((" ", " ", " ", "\n"))
        starts.append(pos)
        parts.append(unit)
        pos += len(unit)
    starts.append(pos)
    return "".join(parts), np.asarray(starts, dtype=np.int64), np.asarray(headers, dtype=np.int64)


class _Padder:
    """Slices of the shared corpus, drawn in vectorised batches from a generator independent of the table RNGs."""

    def __init__(self, seed: int):
        self.corpus, self.starts, self.headers = _pad_corpus(seed)
        self.rng = np.random.default_rng([seed, 0x5CA1E])

    def lengths(self, mean: np.ndarray, sigma: float, cap: int) -> np.ndarray:
        """Lognormal note lengths with the given means (elementwise), capped."""
        z = self.rng.standard_normal(len(mean))
        return np.minimum(np.exp(np.log(np.maximum(mean, 1.0)) - sigma**2 / 2 + sigma * z), cap)

    def spans(self, n_chars: np.ndarray, *, at_header: bool) -> tuple[list[int], list[int]]:
        """Start/end offsets of slices of about n_chars each (snapped to the nearest unit boundary; 0 -> empty)."""
        n_chars = np.maximum(np.asarray(n_chars, dtype=np.float64), 0.0)
        limit = len(self.corpus) - int(n_chars.max(initial=0)) - 1000
        pool = self.headers if at_header else np.arange(len(self.starts) - 1)
        pool = pool[self.starts[pool] < limit]
        begin = self.starts[pool[self.rng.integers(0, len(pool), size=len(n_chars))]]
        want = begin + n_chars
        i = np.clip(np.searchsorted(self.starts, want), 1, len(self.starts) - 1)
        lo, hi = self.starts[i - 1], self.starts[i]
        end = np.where(want - lo < hi - want, lo, hi)
        end = np.where(n_chars > 0, np.maximum(end, begin), begin)
        return begin.tolist(), end.tolist()


def _padded_discharge(padder: _Padder, summaries: list[tuple], mean_chars: int) -> list[tuple[int, int, int, int]]:
    """Per summary: two corpus spans, inserted before Brief Hospital Course (70%) and Discharge Medications (30%).

    Report means are set so that reports and addenda together average `mean_chars`.
    """
    is_add = np.fromiter((s[3] == "Addendum" for s in summaries), dtype=bool, count=len(summaries))
    base = np.fromiter((len(s[4]) for s in summaries), dtype=np.float64, count=len(summaries))
    report_mean = mean_chars / (1 - (1 - _ADDENDUM_SHARE) * is_add.mean()) if len(summaries) else mean_chars
    total = padder.lengths(np.where(is_add, _ADDENDUM_SHARE * report_mean, report_mean), _PAD_SIGMA_DISCHARGE, _PAD_MAX_DISCHARGE)
    pad = np.maximum(total - base - 4, 0)
    b1, e1 = padder.spans(0.7 * pad, at_header=True)
    b2, e2 = padder.spans(0.3 * pad, at_header=False)
    return list(zip(b1, e1, b2, e2))


_COURSE, _MEDS_HEAD = "\n\nBrief Hospital Course:", "\n\nDischarge Medications:"


def _insert_padding(text: str, corpus: str, span: tuple[int, int, int, int],
                    heads: tuple[str, str] = (_COURSE, _MEDS_HEAD)) -> str:
    """Insert the two padding spans before the course and the medication headers (`heads`); addenda get them appended."""
    b1, e1, b2, e2 = span
    i, j = text.find(heads[0]), text.find(heads[1])
    if i < 0 or j < 0:  # addendum: append
        return f"{text}\n{corpus[b1:e1]}{corpus[b2:e2]}".rstrip() if e1 > b1 or e2 > b2 else text
    return f"{text[:i]}{corpus[b1:e1].rstrip()}{text[i:j]}\n{corpus[b2:e2].rstrip()}{text[j:]}"


SYNTHETIC_KIND = "synthetic-mimic"


def is_synthetic_folder(folder: Path) -> bool:
    """True for a folder written by `clinicode demo-data` (its manifest, or the README banner of older versions)."""
    from clinicode.artifacts import manifest_kind

    if manifest_kind(folder) == SYNTHETIC_KIND:
        return True
    try:
        with open(Path(folder) / "README.txt", encoding="utf-8") as f:
            return f.readline().startswith("SYNTHETIC DATA")
    except (OSError, UnicodeDecodeError):
        return False


def write_demo_mimic(
    out_dir: Path,
    *,
    n_admissions: int = DEMO.n_admissions,
    n_other_notes: int | None = None,
    seed: int = DEMO.seed,
    hadm_ids_from: Path | None = None,
    gzip: bool = False,
    discharge_chars: int | None = None,
    other_chars: int | None = None,
) -> dict:
    """Write a synthetic MIMIC-III-shaped folder atomically; the options are those of `_write_demo_mimic`.

    `out_dir` may be new, empty, or an earlier `demo-data` folder (replaced whole); anything else is refused.

    Raises:
        ConfigError: bad options, or an `out_dir` this command may not replace.
        DataFormatError: unreadable or overlapping split lists in `hadm_ids_from`.
    """
    from clinicode.artifacts import atomic_dir, check_output, make_manifest, write_manifest

    options = dict(n_admissions=n_admissions, n_other_notes=n_other_notes, seed=seed, hadm_ids_from=hadm_ids_from,
                   gzip=gzip, discharge_chars=discharge_chars, other_chars=other_chars)
    _check_options(n_admissions, n_other_notes, discharge_chars, other_chars)
    final = Path(out_dir)
    check_output(final, option="--out", command="demo-data", folder=True, recognise=is_synthetic_folder,
                 inputs={"--hadm-ids-from": hadm_ids_from})
    with atomic_dir(final, replaces=is_synthetic_folder) as tmp:
        summary = _write_demo_mimic(tmp, **options)
        summary["out_dir"] = str(final)
        summary["files"] = {k: str(final / Path(v).name) for k, v in summary["files"].items()}
        write_manifest(tmp, make_manifest(SYNTHETIC_KIND, format="mimic3",
                                          **{k: v for k, v in summary.items() if k not in ("out_dir", "files")}))
    return summary


def _check_options(n_admissions: int, n_other_notes: int | None, discharge_chars: int | None, other_chars: int | None) -> None:
    if not isinstance(n_admissions, int) or n_admissions < 1:
        raise ConfigError(f"n_admissions must be a positive integer, got {n_admissions!r}.")
    if n_other_notes is not None and (not isinstance(n_other_notes, int) or n_other_notes < 0):
        raise ConfigError(f"n_other_notes must be a non-negative integer, got {n_other_notes!r}.")
    for name, value in (("discharge_chars", discharge_chars), ("other_chars", other_chars)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{name} must be a positive integer or None, got {value!r}.")


def _write_demo_mimic(out_dir: Path, *, n_admissions: int, n_other_notes: int | None, seed: int, hadm_ids_from: Path | None,
                      gzip: bool, discharge_chars: int | None, other_chars: int | None) -> dict:
    """Write a synthetic MIMIC-III-shaped folder (clearly labelled as synthetic by a README.txt).

    Traps as in real data: undotted codes, leading zeros (0389, 0040), V and E codes, empty codes,
    duplicate code rows, addenda (some stored before their report), non-discharge categories, notes
    without HADM_ID, de-id brackets, numbers, quoted newlines/commas/quotes in TEXT, admissions without a
    discharge summary and admissions whose codes are all outside the top 50.

    Args:
        out_dir: folder to create (files inside are overwritten).
        n_admissions: admissions to invent. With `hadm_ids_from`, the listed ids are all used and
            n_admissions // 5 extra admissions (in no list) are added.
        n_other_notes: non-discharge notes (Nursing, Radiology, ECG, ...); default 3 per admission.
            Written in chunks, so millions are fine.
        seed: makes the output byte-identical for the same arguments.
        hadm_ids_from: CAML split folder; its *_50_hadm_ids.csv ids each get a discharge summary and at
            least one top-50 code, so preparing with that --splits-dir gives exactly the listed counts.
        gzip: write `.csv.gz` instead of `.csv`.
        discharge_chars: pad discharge summaries to this mean TEXT length in characters (reports and addenda
            together; REAL_DISCHARGE_CHARS = 10,000 is MIMIC-III's size). Padding is label-free filler (sections,
            recombined sentences, lab lines, numbers, de-id brackets) inserted before "Brief Hospital Course"
            and "Discharge Medications", lognormal lengths, deterministic per seed. None (default): the short
            template notes (~1 KB), byte-identical to earlier versions; codes, ids and signal phrases are the
            same with or without padding.
        other_chars: the same for all other notes (REAL_OTHER_CHARS = 1,700; ECGs short, physician notes
            long). With both REAL_* values and ~2M rows, NOTEEVENTS is ~4 GB like the real table.
    Returns:
        {"out_dir", "synthetic": True, "seed", "n_admissions", "n_labelled", "noteevents_rows",
        "discharge_summary_rows", "files"}.
    Raises:
        ConfigError: n_admissions < 1, n_other_notes < 0, or discharge_chars/other_chars < 1.
        DataFormatError: unreadable or overlapping split lists in `hadm_ids_from`.
    """
    _check_options(n_admissions, n_other_notes, discharge_chars, other_chars)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    ext = ".csv.gz" if gzip else ".csv"

    # --- admissions: ids, subjects, kinds ---------------------------------------------------------
    listed: list[int] = []
    if hadm_ids_from is not None:
        split_ids = read_splits(hadm_ids_from)
        listed = [h for s in SPLITS for h in split_ids[s]]
        n_extra = max(n_admissions // 5, 20)
    else:
        n_extra = n_admissions
    listed_set = set(listed)
    pool = np.setdiff1d(np.arange(100_001, 200_000), np.fromiter(listed_set, dtype=np.int64, count=len(listed_set)))
    extra = nrng.choice(pool, size=n_extra, replace=False).astype(int).tolist()
    # Kinds: L labelled (>=1 top-50 code), O other codes only, N no discharge summary, C no codes at all.
    if listed:
        extra_kinds = nrng.choice(list("LONC"), size=n_extra, p=[0.4, 0.25, 0.25, 0.1]).tolist()
    else:
        extra_kinds = nrng.choice(list("LONC"), size=n_extra, p=[0.88, 0.05, 0.05, 0.02]).tolist()
    hadm_ids = listed + extra
    kinds = ["L"] * len(listed) + extra_kinds
    order = nrng.permutation(len(hadm_ids))
    hadm_ids = [hadm_ids[i] for i in order]
    kinds = [kinds[i] for i in order]
    n_total = len(hadm_ids)
    n_subjects = max(1, int(n_total * 0.8))  # some patients have several admissions
    subjects = (nrng.integers(0, n_subjects, size=n_total) + 10_000).tolist()
    years = nrng.integers(2100, 2200, size=n_total).tolist()

    top = [c for c, *_ in CODE_INFO]
    extra_codes = [c for c, *_ in EXTRA_CODE_INFO]
    is_dx = {c: d for c, d, *_ in CODE_INFO + EXTRA_CODE_INFO}
    phrases = {c: p for c, _, _, p in CODE_INFO + EXTRA_CODE_INFO}
    # Frequency skewed like the real list order (rank 1 most common).
    weights = 1.0 / (np.arange(len(top)) + 3.0) ** 0.9
    weights /= weights.sum()
    n_codes_p = [0.15, 0.25, 0.25, 0.17, 0.1, 0.08]

    dx_rows: list[tuple] = []
    px_rows: list[tuple] = []
    summaries: list[tuple] = []  # (SUBJECT_ID, HADM_ID, CHARTDATE, DESCRIPTION, TEXT)
    for i, (hadm, subject, kind) in enumerate(zip(hadm_ids, subjects, kinds)):
        date = f"{years[i]}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if kind == "L":
            k = int(nrng.choice(6, p=n_codes_p)) + 1
            codes = nrng.choice(len(top), size=k, replace=False, p=weights)
            codes = [top[j] for j in sorted(codes)]
            if rng.random() < 0.3:
                codes.append(rng.choice(extra_codes))
        elif kind == "O":
            codes = rng.sample(extra_codes, k=rng.randint(1, 3))
        elif kind == "N":
            codes = [top[int(nrng.choice(len(top), p=weights))]]
        else:
            codes = []
        for seq, code in enumerate(codes, 1):
            rows = dx_rows if is_dx[code] else px_rows
            rows.append((subject, hadm, seq, _raw(code)))
            if rng.random() < 0.03:  # duplicate code row
                rows.append((subject, hadm, seq, _raw(code)))
        if rng.random() < 0.02:  # empty code
            dx_rows.append((subject, hadm, len(codes) + 1, ""))
        if kind == "N":
            continue
        text_codes = [c for c in codes]
        if rng.random() < 0.2:  # an addendum carrying some of the evidence
            cut = rng.randint(0, len(text_codes))
            report = (subject, hadm, date, "Report", _discharge_text(rng, text_codes[:cut], phrases, top, date, "Report"))
            addendum = (subject, hadm, date, "Addendum", _discharge_text(rng, text_codes[cut:], phrases, top, date, "Addendum"))
            # Half the addenda are stored before their report; clinicode still puts the report first.
            summaries.extend([addendum, report] if rng.random() < 0.5 else [report, addendum])
        else:
            summaries.append((subject, hadm, date, "Report", _discharge_text(rng, text_codes, phrases, top, date, "Report")))
    # Discharge summaries without HADM_ID cannot be placed in a split (dropped and counted by prepare).
    for _ in range(max(1, n_total // 500)):
        summaries.append((rng.choice(subjects), None, "2150-01-01", "Report",
                          _discharge_text(rng, [rng.choice(top)], phrases, top, "2150-01-01", "Report")))
    rng.shuffle(summaries)
    for rows in (dx_rows, px_rows):
        rng.shuffle(rows)

    # --- code tables ------------------------------------------------------------------------------
    files = {}
    for name, rows in (("DIAGNOSES_ICD", dx_rows), ("PROCEDURES_ICD", px_rows)):
        path = out_dir / f"{name}{ext}"
        with _csv_writer(path, gzip=gzip) as w:
            w.writerow(CODE_HEADER)
            w.writerows((row_id, *r) for row_id, r in enumerate(rows, 1))
        files[name] = str(path)
    for name, want_dx in (("D_ICD_DIAGNOSES", True), ("D_ICD_PROCEDURES", False)):
        path = out_dir / f"{name}{ext}"
        with _csv_writer(path, gzip=gzip) as w:
            w.writerow(TITLE_HEADER)
            info = [x for x in CODE_INFO + EXTRA_CODE_INFO if x[1] == want_dx]
            w.writerows((i, _raw(c), title[:24], title) for i, (c, _, title, _) in enumerate(info, 1))
        files[name] = str(path)

    # --- NOTEEVENTS, streamed in chunks ------------------------------------------------------------
    n_other = 3 * n_total if n_other_notes is None else n_other_notes
    chunk = 100_000
    n_chunks = max(1, -(-n_other // chunk))
    per_chunk = -(-len(summaries) // n_chunks)
    variants = [t.format(a=a, b=b, c=c) for t in _OTHER_TEXTS for a, b, c in zip(range(60, 110, 5), range(1, 11), range(88, 98))]
    hadm_arr = np.asarray(hadm_ids, dtype=np.int64)
    subj_arr = np.asarray(subjects, dtype=np.int64)
    # Padding draws from its own generator, so the unpadded tables (ids, codes, template text) stay the same.
    padder = _Padder(seed) if discharge_chars is not None or other_chars is not None else None
    corpus = padder.corpus if padder is not None else ""
    ds_spans = _padded_discharge(padder, summaries, discharge_chars) if padder is not None and discharge_chars else None
    heads = [f"{_csv_field(category)},{_csv_field(desc)}" for category, desc in _OTHER_CATEGORIES]
    row_id = 0
    path = out_dir / f"NOTEEVENTS{ext}"
    with _open_text(path, gzip=gzip) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(NOTE_HEADER)
        for ci in range(n_chunks):
            lo = ci * per_chunk
            for k, (subject, hadm, date, desc, text) in enumerate(summaries[lo:(ci + 1) * per_chunk], lo):
                row_id += 1
                if ds_spans is not None:
                    text = _insert_padding(text, corpus, ds_spans[k])
                w.writerow((row_id, subject, hadm, date, None, None, "Discharge summary", desc, None, None, text))
            m = min(chunk, n_other - ci * chunk)
            if m <= 0:
                continue
            adm = nrng.integers(0, n_total, size=m)
            cat = nrng.integers(0, len(_OTHER_CATEGORIES), size=m)
            txt = nrng.integers(0, len(variants), size=m)
            no_hadm = nrng.random(m) < 0.1  # e.g. outpatient ECGs and radiology have no admission
            hadm_col = np.where(no_hadm, -1, hadm_arr[adm]).tolist()
            subj_col = subj_arr[adm].tolist()
            cat_l, txt_l = cat.tolist(), txt.tolist()
            texts = [variants[t] for t in txt_l]
            if padder is not None and other_chars:
                base = np.fromiter((len(t) for t in texts), dtype=np.float64, count=m)
                total = padder.lengths(other_chars * _OTHER_LENGTH_WEIGHTS[cat], _PAD_SIGMA_OTHER, _PAD_MAX_OTHER)
                begin, end = padder.spans(total - base - 1, at_header=False)
                texts = [f"{t}\n{corpus[b:e]}".rstrip() if e > b else t for t, b, e in zip(texts, begin, end)]
            if padder is not None:
                # Fast path for GBs of text: the same bytes csv.writer would write, built with str.join.
                # Only TEXT can need quoting; the other fields are ints and fixed names without , " or newlines.
                for b0 in range(0, m, 10_000):
                    f.write("".join(
                        f"{row_id + j + 1},{subj_col[j]},{'' if hadm_col[j] < 0 else hadm_col[j]},2150-01-01,"
                        f"2150-01-01 08:00:00,2150-01-01 09:00:00,{heads[cat_l[j]]},{17000 + j % 500},,{_csv_field(texts[j])}\n"
                        for j in range(b0, min(m, b0 + 10_000))))
                row_id += m
                continue
            rows = []
            for j in range(m):
                row_id += 1
                category, desc = _OTHER_CATEGORIES[cat_l[j]]
                h = hadm_col[j]
                rows.append((row_id, subj_col[j], None if h < 0 else h, "2150-01-01", "2150-01-01 08:00:00",
                             "2150-01-01 09:00:00", category, desc, 17000 + j % 500, None, texts[j]))
            w.writerows(rows)
    files["NOTEEVENTS"] = str(path)
    (out_dir / "README.txt").write_text(README.format(seed=seed), encoding="utf-8")
    summary = {
        "out_dir": str(out_dir),
        "synthetic": True,
        "seed": seed,
        "n_admissions": n_total,
        "n_labelled": sum(k == "L" for k in kinds),
        "noteevents_rows": row_id,
        "discharge_summary_rows": len(summaries),
        "discharge_chars": discharge_chars,
        "other_chars": other_chars,
        "files": files,
    }
    log.info("synthetic MIMIC folder %s: %d admissions, %d notes", out_dir, n_total, row_id)
    return summary
