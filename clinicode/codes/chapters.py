"""The chapter of an ICD code, for grouping thousands of codes into a few dozen readable groups (pure functions).

Codes are told by their clinicode spelling (docs/domain.md sections 4 and 12); anything else is "Other codes"."""

from __future__ import annotations

import re

from clinicode.codes.icd9 import is_icd9_diagnosis, is_icd9_procedure
from clinicode.codes.icd10 import is_icd10_cm, is_icd10_pcs

OTHER = "Other codes"
_ICD9_CATEGORY = re.compile(r"[0-9]{3}|V[0-9]{2}|E[0-9]{3}")  # a diagnosis category without decimals ('486', 'V10')

# ICD-9-CM diagnoses: (first code of the chapter, title), numeric part of the 3-digit category.
_ICD9_DX = (
    (1, "Infectious and parasitic diseases"), (140, "Neoplasms"),
    (240, "Endocrine, nutritional, metabolic, immunity"), (280, "Blood and blood-forming organs"),
    (290, "Mental disorders"), (320, "Nervous system and sense organs"), (390, "Circulatory system"),
    (460, "Respiratory system"), (520, "Digestive system"), (580, "Genitourinary system"),
    (630, "Pregnancy, childbirth and the puerperium"), (680, "Skin and subcutaneous tissue"),
    (710, "Musculoskeletal system and connective tissue"), (740, "Congenital anomalies"),
    (760, "Perinatal conditions"), (780, "Symptoms, signs and ill-defined conditions"), (800, "Injury and poisoning"),
)
# ICD-9-CM procedures (volume 3): first two digits.
_ICD9_PX = (
    (0, "Procedures and interventions, not elsewhere classified"), (1, "Operations on the nervous system"),
    (6, "Operations on the endocrine system"), (8, "Operations on the eye"),
    (17, "Other miscellaneous diagnostic and therapeutic procedures"), (18, "Operations on the ear"),
    (21, "Operations on the nose, mouth and pharynx"), (30, "Operations on the respiratory system"),
    (35, "Operations on the cardiovascular system"), (40, "Operations on the hemic and lymphatic system"),
    (42, "Operations on the digestive system"), (55, "Operations on the urinary system"),
    (60, "Operations on the male genital organs"), (65, "Operations on the female genital organs"),
    (72, "Obstetrical procedures"), (76, "Operations on the musculoskeletal system"),
    (85, "Operations on the integumentary system"), (87, "Miscellaneous diagnostic and therapeutic procedures"),
)
# ICD-10-CM: (first category, title), compared on the 3-character category ("O9A" sorts after "O99").
_ICD10_CM = (
    ("A00", "Infectious and parasitic diseases"), ("C00", "Neoplasms"),
    ("D50", "Blood, blood-forming organs and immune mechanism"), ("E00", "Endocrine, nutritional and metabolic"),
    ("F01", "Mental, behavioural and neurodevelopmental disorders"), ("G00", "Nervous system"),
    ("H00", "Eye and adnexa"), ("H60", "Ear and mastoid process"), ("I00", "Circulatory system"),
    ("J00", "Respiratory system"), ("K00", "Digestive system"), ("L00", "Skin and subcutaneous tissue"),
    ("M00", "Musculoskeletal system and connective tissue"), ("N00", "Genitourinary system"),
    ("O00", "Pregnancy, childbirth and the puerperium"), ("P00", "Perinatal conditions"),
    ("Q00", "Congenital malformations and chromosomal abnormalities"), ("R00", "Symptoms, signs and abnormal findings"),
    ("S00", "Injury, poisoning and other external-cause consequences"), ("U00", "Codes for special purposes"),
    ("V00", "External causes of morbidity"), ("Z00", "Factors influencing health status and contact with services"),
)
# ICD-10-PCS: the section is the first character.
_ICD10_PCS = {
    "0": "Medical and surgical", "1": "Obstetrics", "2": "Placement", "3": "Administration",
    "4": "Measurement and monitoring", "5": "Extracorporeal or systemic assistance and performance",
    "6": "Extracorporeal or systemic therapies", "7": "Osteopathic", "8": "Other procedures", "9": "Chiropractic",
    "B": "Imaging", "C": "Nuclear medicine", "D": "Radiation therapy",
    "F": "Physical rehabilitation and diagnostic audiology", "G": "Mental health", "H": "Substance abuse treatment",
    "X": "New technology",
}


def _last_at_or_below(table, key) -> str:
    title = table[0][1]
    for start, name in table:
        if key < start:
            break
        title = name
    return title


def icd9_chapter(code: str) -> str:
    """'ICD-9 dx: Circulatory system' or 'ICD-9 px: Operations on the eye' for an ICD-9-CM code (dotted; procedures
    dotted after 2 characters)."""
    c = str(code).strip().upper()
    if "." in c and len(c.partition(".")[0]) == 2 and is_icd9_procedure(c):
        return "ICD-9 px: " + _last_at_or_below(_ICD9_PX, int(c[:2]))
    if c.startswith("V"):
        return "ICD-9 dx: Supplementary V codes (factors influencing health status)"
    if c.startswith("E"):
        return "ICD-9 dx: Supplementary E codes (external causes of injury)"
    return "ICD-9 dx: " + _last_at_or_below(_ICD9_DX, int(c[:3])) if c[:3].isdigit() else OTHER


def icd10_cm_chapter(code: str) -> str:
    """'ICD-10-CM: Respiratory system' for an ICD-10-CM code."""
    return "ICD-10-CM: " + _last_at_or_below(_ICD10_CM, str(code).strip().upper()[:3])


def icd10_pcs_section(code: str) -> str:
    """'ICD-10-PCS: Imaging' for an ICD-10-PCS code (its first character)."""
    return "ICD-10-PCS: " + _ICD10_PCS.get(str(code).strip().upper()[:1], "Other sections")


def chapter(code: str) -> str:
    """'ICD-9 dx: Circulatory system', 'ICD-10-PCS: Imaging', ... or "Other codes" for anything unrecognised, telling
    the ICD version by the code's shape alone (a label set's `CodeSystem.group` knows it instead)."""
    c = str(code).strip().upper()
    if _ICD9_CATEGORY.fullmatch(c) or ("." in c and is_icd9_diagnosis(c)):
        return icd9_chapter(c)
    if "." in c and is_icd9_procedure(c):
        return icd9_chapter(c)
    if "." not in c and is_icd10_pcs(c):
        return icd10_pcs_section(c)
    if is_icd10_cm(c):
        return icd10_cm_chapter(c)
    return OTHER
