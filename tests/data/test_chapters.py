"""ICD chapters for grouping codes: every classification clinicode prepares, by its clinicode spelling."""

import pytest

from clinicode.codes.chapters import OTHER, chapter


@pytest.mark.parametrize("code,want", [
    ("001.0", "ICD-9 dx: Infectious and parasitic diseases"), ("139.8", "ICD-9 dx: Infectious and parasitic diseases"),
    ("140.1", "ICD-9 dx: Neoplasms"), ("401.9", "ICD-9 dx: Circulatory system"), ("486",
                                                                                  "ICD-9 dx: Respiratory system"),
    ("459.9", "ICD-9 dx: Circulatory system"), ("460", "ICD-9 dx: Respiratory system"),
    ("999.9", "ICD-9 dx: Injury and poisoning"), ("V58.61",
                                                  "ICD-9 dx: Supplementary V codes (factors "
                                                  "influencing health status)"),
    ("E849.7", "ICD-9 dx: Supplementary E codes (external causes of injury)"),
    ("96.04", "ICD-9 px: Miscellaneous diagnostic and therapeutic procedures"),
    ("00.40", "ICD-9 px: Procedures and interventions, not elsewhere classified"),
    ("38.93", "ICD-9 px: Operations on the cardiovascular system"), ("17.1",
                                                                     "ICD-9 px: Other miscellaneous diagnostic "
                                                                     "and therapeutic procedures"),
    ("I10", "ICD-10-CM: Circulatory system"), ("E11.65", "ICD-10-CM: Endocrine, nutritional and metabolic"),
    ("D49.9", "ICD-10-CM: Neoplasms"), ("D50.0", "ICD-10-CM: Blood, blood-forming organs and immune mechanism"),
    ("H59.0", "ICD-10-CM: Eye and adnexa"), ("H60.0", "ICD-10-CM: Ear and mastoid process"),
    ("O9A.211", "ICD-10-CM: Pregnancy, childbirth and the puerperium"), ("T88.7",
                                                                         "ICD-10-CM: Injury, poisoning and other "
                                                                         "external-cause consequences"),
    ("U07.1", "ICD-10-CM: Codes for special purposes"), ("Y92.9", "ICD-10-CM: External causes of morbidity"),
    ("Z79.4", "ICD-10-CM: Factors influencing health status and contact with services"),
    ("02HV33Z", "ICD-10-PCS: Medical and surgical"), ("B2111ZZ", "ICD-10-PCS: Imaging"), ("XW033E5",
                                                                                          "ICD-10-PCS: New technology"),
    ("not a code", OTHER), ("", OTHER), ("12", OTHER),
])
def test_chapter(code, want):
    assert chapter(code) == want
