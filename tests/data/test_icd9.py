"""ICD-9 dot placement (docs/domain.md section 4): the reformatting table, errors, idempotence."""

import pytest
from hypothesis import given, strategies as st

from clinicode.codes.icd9 import format_code, format_diagnosis, format_procedure, load_descriptions_tsv
from clinicode.errors import DataFormatError


@pytest.mark.parametrize(
    ("raw", "dotted"),
    [
        ("4019", "401.9"), ("25000", "250.00"), ("0389", "038.9"), ("V5861", "V58.61"), ("486", "486"),
        ("311", "311"), ("E8497", "E849.7"), ("E849", "E849"), ("e8497", "E849.7"), ("0010", "001.0"),
        (" 4280 ", "428.0"), ("V1582", "V15.82"), ("40390", "403.90"), ("42731", "427.31"),
    ],
)
def test_format_diagnosis_table(raw, dotted):
    assert format_diagnosis(raw) == dotted


@pytest.mark.parametrize(
    ("raw", "dotted"),
    [("3893", "38.93"), ("9604", "96.04"), ("966", "96.6"), ("0040", "00.40"), ("0010", "00.10"), ("3722", "37.22")],
)
def test_format_procedure_table(raw, dotted):
    assert format_procedure(raw) == dotted


def test_same_digits_differ_by_table():
    assert format_code("0010", is_diagnosis=True) == "001.0"
    assert format_code("0010", is_diagnosis=False) == "00.10"


@pytest.mark.parametrize("raw", ["40", "4", ""])
def test_short_procedure_code_is_a_data_error(raw):
    with pytest.raises(DataFormatError,
                       match=r"procedure code .* characters.*Read PROCEDURES_ICD.ICD9_CODE as strings"):
        format_procedure(raw)


_digits = st.text(alphabet="0123456789", min_size=3, max_size=5)
_dx = st.one_of(_digits, st.builds(lambda d: "V" + d, st.text(alphabet="0123456789", min_size=2, max_size=4)),
                st.builds(lambda d: "E" + d, st.text(alphabet="0123456789", min_size=3, max_size=4)))


@given(_dx)
def test_format_diagnosis_is_idempotent_and_keeps_characters(raw):
    once = format_diagnosis(raw)
    assert format_diagnosis(once) == once
    assert once.replace(".", "") == raw.upper()
    assert once.count(".") <= 1


@given(st.text(alphabet="0123456789", min_size=3, max_size=4))
def test_format_procedure_is_idempotent_and_keeps_leading_zeros(raw):
    once = format_procedure(raw)
    assert format_procedure(once) == once
    assert once.replace(".", "") == raw
    assert once.index(".") == 2


def test_load_descriptions_tsv(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("401.9\tUnspecified essential hypertension\n@\troot\n", encoding="utf-8")
    assert load_descriptions_tsv(p) == {"401.9": "Unspecified essential hypertension", "@": "root"}
    with pytest.raises(DataFormatError, match="cannot read code descriptions"):
        load_descriptions_tsv(tmp_path / "missing.tsv")
