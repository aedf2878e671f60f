"""The synthetic MIMIC-IV label space: both top-50 lists, a Zipf-like tail per ICD version, and drawing codes from it.

Tail codes and their phrases depend on the code alone, never on the seed (`clinicode demo-data`: docs/cli.md)."""

from __future__ import annotations

import functools
import random
import re
import warnings
from dataclasses import dataclass

import numpy as np

from clinicode.errors import ConfigError
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

P_TAIL = 0.35  # per diagnosis slot: drawn from the tail instead of the top 50


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


@dataclass
class Pool:
    """Code indices into the catalogue with cumulative Zipf-like weights, for one version and table."""

    codes: list[int]
    cum: list[float]

    @classmethod
    def of(cls, codes: list[int], offset: float, power: float) -> "Pool":
        w = 1.0 / (np.arange(len(codes)) + offset) ** power
        return cls(codes, np.cumsum(w).tolist())

    def draw(self, rng: random.Random, k: int) -> list[int]:
        return rng.choices(self.codes, cum_weights=self.cum, k=k) if self.codes and k > 0 else []


def draw_codes(rng: random.Random, pools: dict, version: int) -> tuple[list[int], list[int]]:
    """(diagnoses, procedures) of one admission in one version: ~11 diagnoses and ~1.5 procedures on average."""
    n_dx = min(39, 1 + int(rng.gammavariate(3.0, 4.0)))
    n_tail = sum(rng.random() < P_TAIL for _ in range(n_dx))
    dx = list(dict.fromkeys(pools[version, True, True].draw(rng, n_dx - n_tail)
                            + pools[version, True, False].draw(rng, n_tail)))
    px: list[int] = []
    if rng.random() < 0.65:
        n_px = 1 + int(rng.gammavariate(1.3, 1.4))
        n_tail = sum(rng.random() < 0.5 for _ in range(n_px))
        px = list(dict.fromkeys(pools[version, False, True].draw(rng, n_px - n_tail)
                                + pools[version, False, False].draw(rng, n_tail)))
    return dx or pools[version, True, True].draw(rng, 1), px


def code_pools(cat: tuple[CodeInfo, ...]) -> tuple[dict[tuple[int, bool, bool], Pool], dict[int, list[int]]]:
    """Label pools per (version, is_diagnosis, top), rank-weighted; and every catalogue index per version."""
    pools: dict[tuple[int, bool, bool], Pool] = {}
    for ver in (9, 10):
        for is_dx in (True, False):
            top = [i for i, c in enumerate(cat) if c.version == ver and c.is_diagnosis == is_dx and c.top]
            tail = [i for i, c in enumerate(cat) if c.version == ver and c.is_diagnosis == is_dx and not c.top]
            pools[ver, is_dx, True] = Pool.of(top, 3.0, 0.9)
            pools[ver, is_dx, False] = Pool.of(tail, 1.0, 1.0)  # Zipf: rank 1 common, the last ones rare
    same_version = {v: [i for i, c in enumerate(cat) if c.version == v] for v in (9, 10)}
    return pools, same_version
