"""A terminology for `train --terminology`: the codes of a code system that a label set lacks, with their titles, and
the phrases a title is said as. Text only (no model): the fused model scores these codes from their words."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Sequence

from clinicode.codes.systems import CodeSystem
from clinicode.errors import ConfigError, DataFormatError

AUTO = "auto"   # the code system's own titles (ICD-10-CM's billable codes, packaged)
OPTION = "--terminology"
_WORD = re.compile(r"[^\W_]+")
_NOTE = re.compile(r"\[[^\]]*\]")              # "[/H: término más granular que el código]": a note, not the title
OPTIONAL = frozenset({"unspecified", "nos", "sai"})   # "not otherwise specified" (en, es): a note rarely says it


def terminology_titles(table: Mapping[str, str], codes: Sequence[str]) -> dict[str, str]:
    """code -> title of every code of a terminology's TABLE (as `read_terminology` read it) that CODES (a label set)
    lack, in TABLE's order; titles without a word are left out."""
    known = set(codes)
    return {c: t for c, t in table.items() if c not in known and title_phrases(t)}


def read_terminology(spec: str, codes: Sequence[str], system: CodeSystem) -> dict[str, str]:
    """code -> title of every code of the terminology SPEC, in the spelling of the label set CODES (its code system
    SYSTEM), sorted by code.

    Args:
        spec: a code<TAB>title file (a `--descriptions` file, MeSH's titles ...), or "auto": the titles SYSTEM ships.
        codes: the label set's codes (never terminology codes: the model learns them from notes).
        system: the label set's code system; a file most of whose codes are another system's is refused.
    Raises:
        DataFormatError: a missing or unreadable file, another code system's codes, one code twice with two titles.
        ConfigError: "auto" for a code system that ships no titles.
    """
    from clinicode.codes.icd9 import load_descriptions_tsv
    from clinicode.codes.suggest import checkpoint_titles, system_titles

    if spec == AUTO:
        titles = system_titles(system)
        if not titles:
            raise ConfigError(f"{OPTION} auto: the label set's code system, {system.name}, ships no titles; give a "
                              "code<TAB>title file instead (such as a --descriptions file).")
    else:
        path = Path(spec)
        if not path.is_file():
            raise DataFormatError(f"{OPTION} {spec}: no such file; give a code<TAB>title file (such as a "
                                  "--descriptions file) or 'auto' (the code system's own titles).")
        titles = load_descriptions_tsv(path)
        if not titles:
            raise DataFormatError(f"{OPTION} {spec}: holds no code<TAB>title line; give a code<TAB>title file.")
    spelled, _ = checkpoint_titles(titles, system, codes, option=f"{OPTION} {spec}")
    return {c: spelled[c].strip() for c in sorted(spelled)}


def title_phrases(title: str) -> list[tuple[str, ...]]:
    """The word sequences a title is said as: its words in order, and with its comma-separated head moved last
    ("Sarcoma sinovial, tipo bifásico" is also "tipo bifásico sarcoma sinovial"; ICD and MeSH write the head first);
    a bracketed note and "unspecified", "NOS", "SAI" left out. Words as written (the matching folds them)."""
    parts = [[w for w in _WORD.findall(p) if w.lower() not in OPTIONAL and w not in ("s", "S")]
             for p in re.split(r"[,;]| - ", _NOTE.sub(" ", title))]
    parts = [p for p in parts if p]
    out: list[tuple[str, ...]] = []
    for order in ([parts, parts[1:] + parts[:1]] if len(parts) > 1 else [parts]):
        seq = tuple(w for p in order for w in p)
        if seq and seq not in out:
            out.append(seq)
    return out
