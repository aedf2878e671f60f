"""Code systems as values (ICD-9-CM, ICD-10-CM/PCS, MeSH, ICD-O-3): name, FHIR URI, which strings are codes, their
spelling, shipped titles, group (chapter or concept kind), diagnosis or procedure, asked rather than guessed. Pure
rules over `icd9`, `icd10` and `chapters`; nothing here reads data folders."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Container, Iterable, Mapping, Sequence

from clinicode.codes import chapters
from clinicode.codes.icd9 import format_diagnosis, format_procedure, is_icd9_diagnosis, is_icd9_procedure
from clinicode.codes.icd10 import (
    PCS_NO_TITLE,
    PCS_SECTIONS,
    format_icd10_cm,
    icd10_cm_catalogue,
    icd10_cm_titles,
    is_icd10_cm,
    is_icd10_pcs,
)
from clinicode.errors import DataFormatError

DIAGNOSIS, PROCEDURE = "diagnosis", "procedure"


@dataclass(frozen=True, eq=False)
class CodeSystem:
    """One code system, or a family of them that a single label set may mix.

    A label set may hold codes of more than one classification: MIMIC's ICD-9 sets hold diagnoses and procedures
    (one classification, ICD-9-CM, with one FHIR URI: its kind is decided per code), MIMIC-IV's ICD-10 sets hold
    ICD-10-CM diagnoses and ICD-10-PCS procedures (two classifications, two URIs), and the NCBI disease corpus holds
    MeSH and OMIM ids. Such a set's system is a *family*: a CodeSystem whose `parts` are the single systems, tried
    in order; `member(code)` classifies one code and every per-code question (`kind`, `uri_of`, `group`,
    `normalise`) is answered by that member. A family is what a label set records and what the review queue
    accepts codes from, so a coder on an ICD-10 model may add an ICD-10-PCS procedure even when the model's own
    labels are all diagnoses. In labels.json each code names its member (`"system": "ICD-10-PCS"`, as FHIR's
    Coding.system does) and `family_of` turns those names back into the set's family.

    Args:
        name: the registry name ("ICD-9-CM", "ICD-10-CM/PCS", ...).
        uri: the FHIR system URI of a single system; "" for a family and for `LOCAL` (a checkpoint's own labels).
        parts: a family's member systems, in the order a code is tried; () for a single system.
        example: one valid code, for error messages.
    """

    name: str
    uri: str = ""
    parts: tuple["CodeSystem", ...] = ()
    example: str = ""
    _valid: Callable[[str], bool] = field(default=lambda c: False, repr=False)
    _normalise: Callable[[str], str] = field(default=str.strip, repr=False)
    _kind: Callable[[str], str] = field(default=lambda c: DIAGNOSIS, repr=False)
    _group: Callable[[str], str] = field(default=lambda c: chapters.OTHER, repr=False)
    _titles: Callable[[list[str]], dict[str, str]] = field(default=lambda codes: {}, repr=False)
    # () -> every (code, title) the system's shipped tables list, for search; None: it ships no tables
    _catalogue: "Callable[[], Sequence[tuple[str, str]]] | None" = field(default=None, repr=False)
    # (system, stripped code, kind or None) -> the code's spelling in this single system, or None
    _spell: Callable[["CodeSystem", str, "str | None"], "str | None"] = field(
        default=lambda s, c, kind: s._normalise(c) if s._valid(c) and kind in (None, s._kind(c)) else None, repr=False)

    @property
    def is_family(self) -> bool:
        return bool(self.parts)

    @property
    def leaves(self) -> tuple["CodeSystem", ...]:
        """The single systems of a family (itself for a single system)."""
        return self.parts or (self,)

    def member(self, code: str) -> "CodeSystem | None":
        """The single system CODE belongs to (dotted or not, any case), or None when it is no code of this one."""
        if not isinstance(code, str) or not code.strip():
            return None
        for part in self.leaves:
            if part._valid(code.strip()):
                return part
        return None

    def is_valid(self, code: str) -> bool:
        """True when CODE (dotted or not, any case) is a code of this system."""
        return self.member(code) is not None

    def canonical(self, code: str, known: Container[str] = (), *, kind: str | None = None) -> str | None:
        """CODE in this system's one spelling, or None when it is no code of it: THE rule for matching a code however
        it was written (a coder's `review decide --add`, a `--titles` file, MIMIC's undotted tables) against the
        checkpoint's codes. Upper case, dotted as the classification dots; the spelling decides what the code is:

        - ICD-10-CM/PCS: 'S72001A' and 's72.001a' are 'S72.001A' (a PCS code never starts with S). An undotted
          7-character code that both shapes allow (first character a PCS section letter B C D F G H X, then a digit:
          'H401131', 'X000XXA', 'B2111ZZ') is the ICD-10-CM code when the CMS tables know it, else the PCS code.
          'ZZZZZZZ' is neither.
        - ICD-9-CM: dotted after 2 characters is a procedure ('00.40'); undotted digits are a diagnosis ('0040' is
          '004.0', as MIMIC's diagnosis tables spell them). Pass kind=PROCEDURE for codes from a procedures table
          ('0040' -> '00.40').
        - MeSH/OMIM: 'd009369' -> 'D009369', 'omim:312080' -> 'OMIM:312080', 'MESH:C535662' kept with its prefix.
        - local (a checkpoint's own labels): any non-blank string, stripped.

        KNOWN (a label set, e.g. the checkpoint's codes): a spelling in it wins, so an undotted ICD-9 digit string that
        is a procedure of the set ('3893' with 38.93 known) is read as that procedure.

        Args:
            code: as written (surrounding blanks are ignored).
            known: codes in this system's spelling whose reading of CODE is preferred; () for none.
            kind: DIAGNOSIS or PROCEDURE when the source says which (a d_icd_procedures table); None: the rules above.
        Returns:
            The spelling, or None for a blank string, a non-string or a string that is no code of this system
            (callers keeping such an entry use `canonical(c, known) or c.strip()`).
        """
        if not isinstance(code, str) or not code.strip():
            return None
        c = code.strip()
        if c in known:
            return c
        found = [(part, spelled) for part in self.leaves
                 if (spelled := part._spell(part, c, kind)) is not None]
        if kind is None and ICD9_CM in self.leaves and "." not in c and c.isdigit() and len(c) >= 3 \
                and is_icd9_procedure(c):
            found.append((ICD9_CM, format_procedure(c)))  # undotted digits: a diagnosis, or a procedure KNOWN holds
        if not found:
            return None
        chosen = next((spelled for _, spelled in found if spelled in known), None)
        if chosen is not None:
            return chosen
        if len(found) > 1 and {ICD10_PCS, ICD10_CM} <= {part for part, _ in found}:  # 'H401131': CM or PCS?
            cm = next(spelled for part, spelled in found if part is ICD10_CM)
            return cm if _cms_knows(cm) else next(spelled for part, spelled in found if part is ICD10_PCS)
        return found[0][1]

    def normalise(self, code: str) -> str:
        """`canonical(code)`, raising when CODE is no code of this system.

        Raises:
            DataFormatError: CODE is no code of this system (the message names the system and gives an example).
        """
        spelled = self.canonical(code)
        if spelled is None:
            shown = code.strip()[:40] if isinstance(code, str) else type(code).__name__
            raise DataFormatError(f"{shown!r} is not a {self.name} code; expected a code such as {self.example!r} "
                                  "(dotted or not, any case).")
        return spelled

    def kind(self, code: str) -> str:
        """DIAGNOSIS or PROCEDURE; a code of no member (and every code of LOCAL, MeSH or OMIM) is a diagnosis."""
        part = self.member(code)
        return part._kind(code.strip()) if part is not None else DIAGNOSIS

    def uri_of(self, code: str) -> str:
        """The FHIR system URI of CODE's member; "" for a code of no standard system."""
        part = self.member(code)
        return part.uri if part is not None else ""

    def group(self, code: str) -> str:
        """The chapter (ICD) or concept kind (MeSH, OMIM) of CODE, for grouping many codes; "Other codes" if none."""
        part = self.member(code)
        return part._group(code.strip()) if part is not None else chapters.OTHER

    @property
    def ships_tables(self) -> bool:
        """True when this single system ships the tables of its codes (ICD-10-CM): a code given from outside must then
        be in them (`check_code`), and the tables are searched (`catalogue`)."""
        return self._catalogue is not None

    def catalogue(self) -> tuple[tuple[str, str, "CodeSystem"], ...]:
        """(code, title, member) for every code the tables of this system's members list (a member that ships none
        adds nothing), in the members' order: what a coder's search looks through beyond a model's codes."""
        return tuple((c, t, part) for part in self.leaves if part._catalogue is not None
                     for c, t in part._catalogue())

    def titles(self, codes: Iterable[str]) -> dict[str, str]:
        """{code: title} for the CODES whose title this system ships (no network); codes it cannot name are left out.

        Only ICD-10-CM ships titles (the CMS tables in `simple-icd-10-cm`); ICD-9-CM, ICD-10-PCS and MeSH titles
        come from the data (`--descriptions`, MIMIC's d_icd tables, the corpus's descriptions.tsv).
        """
        by_part: dict[CodeSystem, list[str]] = {}
        for c in codes:
            part = self.member(c)
            if part is not None:
                by_part.setdefault(part, []).append(c)
        out: dict[str, str] = {}
        for part, wanted in by_part.items():
            out.update(part._titles(wanted))
        return out

    def display_titles(self, codes: Iterable[str], titles: Iterable[str]) -> tuple[str, ...]:
        """The titles to show: each title as given, or PCS_NO_TITLE for a code of this system's ICD-10-PCS member
        that has none (clinicode ships no PCS titles). Other codes without a title, a MeSH id included however
        PCS-like its shape, stay blank."""
        return tuple(t if t.strip() or not (self.member(c) is ICD10_PCS and c.strip()[:1].upper() in PCS_SECTIONS)
                     else PCS_NO_TITLE for c, t in zip(codes, titles))

    def __repr__(self) -> str:
        return f"CodeSystem({self.name!r})"


# ------------------------------------------------------------------ single systems
def _icd9_valid(c: str) -> bool:
    bare = c.replace(".", "")
    return is_icd9_diagnosis(c) or (len(bare) >= 3 and is_icd9_procedure(c))


def _icd9_is_procedure(c: str) -> bool:
    # Dotted after 2 characters: a procedure ('38.93'). Undotted digits could be either; taken as a diagnosis.
    return "." in c and len(c.partition(".")[0]) == 2 and is_icd9_procedure(c)


def _icd9_normalise(c: str) -> str:
    return format_procedure(c) if _icd9_is_procedure(c) or not is_icd9_diagnosis(c) else format_diagnosis(c)


def _icd9_spell(system: CodeSystem, c: str, kind: str | None) -> str | None:
    if kind is None:
        return _icd9_normalise(c) if _icd9_valid(c) else None
    if kind == PROCEDURE:  # dotted after 2 characters, or 3-4 undotted digits from a procedures table
        ok = _icd9_is_procedure(c) or ("." not in c and len(c) >= 3 and is_icd9_procedure(c))
        return format_procedure(c) if ok else None
    return format_diagnosis(c) if kind == DIAGNOSIS and is_icd9_diagnosis(c) else None


def _pcs_valid(c: str) -> bool:
    # 7 characters of PCS's alphabet, never dotted, led by one of its sections ('S72001A' is ICD-10-CM's S72.001A)
    return "." not in c and is_icd10_pcs(c) and c[:1].upper() in PCS_SECTIONS


def _cms_knows(dotted: str) -> bool:
    """True when the CMS ICD-10-CM tables list DOTTED (loads them once, ~3 s: asked only for an undotted 7-character
    code that both ICD-10 shapes allow)."""
    return bool(icd10_cm_titles([dotted]))


# Descriptors D000544 / D000069279, supplementary concepts C537666; the NCBI disease corpus once writes 'MESH:C535662'
# (kept as written: it is that set's label).
_MESH = re.compile(r"(?:MESH:)?[DC][0-9]{6}(?:[0-9]{3})?")
_OMIM = re.compile(r"OMIM:[0-9]{6}")              # as the NCBI disease corpus writes them


def _mesh_group(c: str) -> str:
    return "MeSH: descriptors" if c.upper().removeprefix("MESH:").startswith("D") else "MeSH: supplementary concepts"


ICD9_CM = CodeSystem(
    "ICD-9-CM", "http://hl7.org/fhir/sid/icd-9-cm", example="401.9",  # HL7's URI covers all three volumes
    _valid=_icd9_valid, _normalise=_icd9_normalise, _spell=_icd9_spell,
    _kind=lambda c: PROCEDURE if _icd9_is_procedure(c) else DIAGNOSIS, _group=chapters.icd9_chapter)
ICD10_CM = CodeSystem(
    "ICD-10-CM", "http://hl7.org/fhir/sid/icd-10-cm", example="J18.9",
    _valid=is_icd10_cm, _normalise=format_icd10_cm, _group=chapters.icd10_cm_chapter, _titles=icd10_cm_titles,
    _catalogue=icd10_cm_catalogue)
ICD10_PCS = CodeSystem(
    "ICD-10-PCS", "http://www.cms.gov/Medicare/Coding/ICD10", example="02HV33Z",
    _valid=_pcs_valid, _normalise=str.upper,
    _kind=lambda c: PROCEDURE, _group=chapters.icd10_pcs_section)
MESH = CodeSystem(
    "MeSH", "https://www.nlm.nih.gov/mesh", example="D009369",
    _valid=lambda c: _MESH.fullmatch(c.upper()) is not None, _normalise=str.upper, _group=_mesh_group)
OMIM = CodeSystem(
    "OMIM", "https://omim.org", example="OMIM:312080",
    _valid=lambda c: _OMIM.fullmatch(c.upper()) is not None, _normalise=str.upper, _group=lambda c: "OMIM")
# ICD-O-3 morphology: 4 digits (8000-9989), a slash, the behaviour (0 benign, 1 uncertain, 2 in situ, 3 malignant, 6
# metastatic, 9 uncertain whether primary or metastatic) and an optional grade or differentiation digit ('8070/34');
# Spain's eCIE-O-3.1, as CANTEMIST writes it, marks a term finer than its code with '/H' ('8140/3/H').
_ICDO3 = re.compile(r"[89][0-9]{3}/[012369][1-9]?(?:/H)?")
ICDO3 = CodeSystem(
    "ICD-O-3", "http://terminology.hl7.org/CodeSystem/icd-o-3", example="8140/3",
    _valid=lambda c: _ICDO3.fullmatch(c.upper()) is not None, _normalise=str.upper,
    _group=lambda c: f"ICD-O-3 morphology {c[:3]}x")
LOCAL = CodeSystem(  # a checkpoint's own labels, no standard classification: any non-blank string, kept as written
    "local", example="my-label", _valid=lambda c: bool(c) and c == c.strip())

# ------------------------------------------------------------------ families
ICD10 = CodeSystem("ICD-10-CM/PCS", parts=(ICD10_PCS, ICD10_CM), example="J18.9")  # PCS first: never dotted
MESH_OMIM = CodeSystem("MeSH/OMIM", parts=(MESH, OMIM), example="D009369")

# ------------------------------------------------------------------ the registry
# THE one ordered list of code systems: what a label set may be of, and the order in which every question of which
# system a code or a set belongs to asks them (`infer_code_system`, `family_of`, `check_code`, MIXED, so FHIR, the
# review queue and search). The first that takes a code wins where shapes overlap: ICD-9-CM before ICD-10 (a set of
# V codes alone fits both and is ICD-9-CM), MeSH/OMIM before ICD-10 (MeSH's 'D009369' also has the shape of an
# undotted ICD-10-PCS code). A new system is its value above and one line here (docs/architecture.md), placed before
# any system whose shapes overlap its own and should lose; `conformance.check_code_system` checks it.
REGISTRY: list[CodeSystem] = [
    ICD9_CM,
    MESH_OMIM,
    ICD10,
    ICDO3,
]


class _EveryRegistered(CodeSystem):
    """MIXED: every registered system's members in the registry's order, then LOCAL, asked when the registry is."""

    @property
    def is_family(self) -> bool:
        return True

    @property
    def leaves(self) -> tuple[CodeSystem, ...]:
        return (*(leaf for s in REGISTRY for leaf in s.leaves), LOCAL)


# Codes that show no one system (or a code from outside a checkpoint's set): each is classified alone, by the first
# registered system that takes it, as clinicode's FHIR output always did for such sets.
MIXED = _EveryRegistered("mixed", example="401.9")


class _Names(Mapping[str, CodeSystem]):
    """CODE_SYSTEMS: by name, every registered system and its members, LOCAL and MIXED, read from the registry."""

    def _all(self) -> dict[str, CodeSystem]:
        out: dict[str, CodeSystem] = {}
        for s in (*REGISTRY, LOCAL, MIXED):
            for one in (*(s.parts if s is not MIXED else ()), s):
                out.setdefault(one.name, one)
        return out

    def __getitem__(self, name: str) -> CodeSystem:
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


CODE_SYSTEMS: Mapping[str, CodeSystem] = _Names()


def code_system(name: str) -> CodeSystem:
    """The registered CodeSystem called NAME ('ICD-9-CM', 'ICD-10-CM', 'ICD-10-PCS', 'ICD-10-CM/PCS', 'MeSH', ...).

    Raises:
        DataFormatError: an unknown name (the message lists the known ones).
    """
    try:
        return CODE_SYSTEMS[name]
    except (KeyError, TypeError):
        raise DataFormatError(f"unknown code system {str(name)[:40]!r}; known: {', '.join(CODE_SYSTEMS)}.") from None


def family_of(members: Iterable[CodeSystem]) -> CodeSystem:
    """The system of a label set whose codes belong to MEMBERS: the first registered system holding them all
    (ICD-10-CM/PCS for any ICD-10 mix, so an ICD-10 set may receive either kind; MeSH/OMIM for MeSH or OMIM), else
    LOCAL when all are local, otherwise MIXED."""
    leaves = {leaf for m in members for leaf in m.leaves}
    for fam in (*REGISTRY, LOCAL):
        if leaves and leaves <= set(fam.leaves):
            return fam
    return MIXED


def infer_code_system(codes: Iterable[str]) -> CodeSystem:
    """The family that the codes of a label set show, for a label set that does not name one (older checkpoints and
    folders): asked once, where the set is loaded, and then recorded.

    The first registered system (`REGISTRY`: ICD-9-CM, MeSH/OMIM, ICD-10-CM/PCS) that holds every code wins (a set of
    V codes alone fits both ICD versions and is taken as ICD-9-CM, as before; a MeSH id such as 'D009369' also has
    the shape of an undotted ICD-10-PCS code and is MeSH); a set with no code of any registered system is LOCAL;
    anything else is MIXED (each code classified alone).
    """
    codes = list(codes)
    for fam in REGISTRY:
        if codes and all(fam.is_valid(c) for c in codes):
            return fam
    if not any(s.is_valid(c) for s in REGISTRY for c in codes):
        return LOCAL
    return MIXED


def as_registered(system: CodeSystem, codes: Iterable[str]) -> CodeSystem:
    """SYSTEM, as recorded for a label set of CODES; but a set recorded as local whose codes are all of one registered
    system is that system's: it was recorded before clinicode knew the system (CANTEMIST's ICD-O-3 codes, local until
    ICD-O-3 was registered), and a checkpoint, its data and its review queue must keep agreeing on one system."""
    if system is not LOCAL:
        return system
    found = infer_code_system(codes)
    return found if found is not MIXED else LOCAL


@dataclass(frozen=True)
class CodeCheck:
    """What `check_code` found of a code given from outside a checkpoint."""

    code: str | None                  # the code in the system's one spelling; None: it is no code of the system
    other: CodeSystem | None = None   # then, the standard system it is a code of instead (a member), if any
    not_in_tables: bool = False       # then, a shape of a system that ships tables (ICD-10-CM) they do not know


def check_code(system: CodeSystem, code: str) -> CodeCheck:
    """Whether CODE, given from outside a checkpoint, is a code of its SYSTEM: THE check for every input of a code
    system (a coder's `review decide --add`, a `--titles` file's lines). Spelled as `canonical` spells it; a code of
    a system that ships tables must be in them (ICD-10-CM's CMS tables; ICD-9-CM, ICD-10-PCS and MeSH ship none, so
    their shape is checked); a string only LOCAL takes (any string) is no code of a standard system, and of LOCAL
    none is.

    Returns:
        CodeCheck(spelling) for a code of SYSTEM; else CodeCheck(None, the standard system it belongs to, if
        another: the first in `REGISTRY` order) or CodeCheck(None, not_in_tables=True).
    """
    spelled = system.canonical(code)
    member = system.member(spelled) if spelled is not None else None
    if member is None or member is LOCAL:
        other = next((s.member(spelling) for s in REGISTRY  # in the registry's order: 'D009369' is MeSH's, not PCS's
                      if s is not system and (spelling := s.canonical(code)) is not None), None)
        return CodeCheck(None, other=other)
    if member.ships_tables and not member.titles([spelled]):
        return CodeCheck(None, not_in_tables=True)
    return CodeCheck(spelled)


def spelling(codes: Sequence[str], system: CodeSystem | None = None) -> Callable[[str], str]:
    """A function giving any spelling of one of CODES as CODES spell it ('4280' -> '428.0', 'R52' -> 'r52'), by the
    codes' system (SYSTEM, else `infer_code_system`); a code outside CODES comes back stripped, as given."""
    system = system or infer_code_system(codes)
    known = set(codes)
    by_form = {}
    for c in codes:
        by_form.setdefault(system.canonical(c) or c, c)

    def spell(code: str) -> str:
        code = str(code).strip()
        if code in known:
            return code
        return by_form.get(system.canonical(code) or code, code)

    return spell


__all__ = ["CODE_SYSTEMS", "CodeCheck", "CodeSystem", "DIAGNOSIS", "ICD10", "ICD10_CM", "ICD10_PCS", "ICD9_CM", "ICDO3",
           "LOCAL", "MESH", "MESH_OMIM", "MIXED", "OMIM", "PROCEDURE", "REGISTRY", "as_registered", "check_code",
           "code_system", "family_of", "infer_code_system", "spelling"]
