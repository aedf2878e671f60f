"""Codes a checkpoint lacks, suggested from their titles found in the note and ranked with what the model knows.

`Suggester` (text and arithmetic, no torch): what `predict`, `serve`, the app and review show as `suggested`."""

from __future__ import annotations

import functools
import hashlib
import heapq
import logging
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from clinicode.codes.systems import LOCAL, CodeCheck, CodeSystem, check_code
from clinicode.errors import DataFormatError
from clinicode.matching import SUGGESTING, Matching, detect_language, fold, inflect, negated, stem

log = logging.getLogger(__name__)

WORD = re.compile(r"[^\W_]+")
STOPWORDS = frozenset("a an and as at by for from in into of on or other the to with without".split())
OPTIONAL = frozenset({"unspecified", "nos"})  # ICD's residual titles: the note rarely says them
TITLE_STOPWORDS_ES = frozenset("a al con de del el en la las los o para por sin u un una y".split())


# the words notes use for MeSH's and ICD's "neoplasm", and "vs" spelt out
SYNONYMS = {"tumor": "neoplasm", "cancer": "neoplasm", "vs": "versus"}


@functools.lru_cache(maxsize=1 << 17)  # titles and notes share a small vocabulary: each word is worked out once
def norm(word: str, language: str = "en", matching: Matching = SUGGESTING) -> str:
    """A word for comparing: lower case without accents ("Sjögren" is "sjogren"; `matching.fold`); in English, British
    spelling made American ("haemorrhage", "tumour", "oedema", "leucocyte"), a regular plural made singular
    ("diseases" -> "disease", "injuries" -> "injury", "metastases" -> "metastasis"; "-ss", "-us", "-is" endings kept:
    "abscess", "hepatitis") and SYNONYMS; in Spanish, plural endings off ("tumores" is "tumor",
    `matching.inflection` "plural"); with `matching.inflection` "snowball", its Snowball stem in LANGUAGE."""
    w = fold(word) if matching.fold else word.lower()
    if language == "en":
        w = w.replace("aem", "em").replace("leuco", "leuko").replace("hoea", "hea")
        if w.startswith("oe"):
            w = "e" + w[2:]
        w = inflect(w, language)
        if len(w) > 5 and w.endswith("our"):
            w = w[:-3] + "or"
        w = SYNONYMS.get(w, w)
    elif matching.inflection in ("plural", "gender"):
        w = inflect(w, language, gender=matching.inflection == "gender")
    return stem(w, language) if matching.inflection == "snowball" else w


def _title_words(text: str, language: str, matching: Matching) -> list[str]:
    """A title's (or a title part's) words for comparing: "'s" left out, stop words and optional words dropped."""
    skip = STOPWORDS if language == "en" else TITLE_STOPWORDS_ES
    return [norm(w, language, matching) for w in WORD.findall(text)
            if fold(w) != "s" and fold(w) not in skip and fold(w) not in OPTIONAL]


def _phrases(title: str, language: str = "en", matching: Matching = SUGGESTING) -> list[tuple[str, ...]]:
    """The word sequences a title is found as: as written and with its comma-separated parts turned round (MeSH and
    ICD write the head first: "Death, Sudden, Cardiac" is said "sudden cardiac death"); optional words dropped."""
    skip = OPTIONAL
    parts = [[norm(w, language, matching) for w in WORD.findall(p) if fold(w) != "s" and fold(w) not in skip]
             for p in title.split(",")]
    parts = [p for p in parts if p]
    if not parts:
        return []
    orders = [parts]
    if len(parts) > 1:
        orders += [parts[1:] + parts[:1], parts[:0:-1] + parts[:1]]
    out: list[tuple[str, ...]] = []
    for order in orders:
        seq = tuple(w for p in order for w in p)
        if seq not in out:
            out.append(seq)
    return out


@dataclass(frozen=True)
class Suggestion:
    """A code the checkpoint lacks, suggested from its title.

    Attributes:
        code, title: the candidate.
        score: the suggestion's rank score (not a probability); shown when at or above the suggester's bar.
        spans: where its title stands in the note, (start, end) character offsets: the phrase, else its words.
        reason: one line saying why ("title in the note 2 times", "...; trained D009 under it scored 0.04").
    """

    code: str
    title: str
    score: float
    spans: tuple[tuple[int, int], ...]
    reason: str

    def to_dict(self) -> dict:
        return {"code": self.code, "title": self.title, "score": round(self.score, 4),
                "spans": [{"start": a, "end": b} for a, b in self.spans], "source": "title", "reason": self.reason}


# The rank score's weights and bar, chosen on BC5CDR dev (the most unseen gold found with >= 70% right, <= 1 a note)
# with every MeSH disease descriptor as candidates and an every-code tfidf-lr checkpoint
# (benchmarks/bench_suggestions.py); test only reports.
PHRASE = 1.0        # the title stands in the note as a phrase (not inside a longer title found there)
SPECIFIC = 0.1      # per unit of the title's rarest word's inverse frequency over the titles
BROAD = 0.25        # per doubling of (1 + the number of titles narrower than this one)
TRAINED_BELOW = 4.0  # times the best score of a trained code under the candidate
BAR = 0.0           # suggested at or above this score; a title found only as scattered words is never suggested
LIMIT = 3           # suggestions per note at most
SPANS = 5           # spans shown per suggestion at most (the first in the note)


class Suggester:
    """Candidates (code -> title) and what ranks them; `suggest(text, scores)` gives one note's suggestions.

    Every code of the code system the checkpoint lacks is a candidate, suggested when its title stands in the note;
    its score is a rank (no probability) that one dev-chosen bar cuts, from three signals:

    - **the note's words.** The title as a phrase (in order, or with its comma-inverted parts turned round: "Diabetes
      Insipidus, Nephrogenic" is found as "nephrogenic diabetes insipidus"), plural or singular, with "unspecified"
      and "NOS" optional ("Chest pain, unspecified" is found as "chest pain"). A phrase inside a longer title found in
      the same place (a candidate's or one of the checkpoint's own codes': "Syndrome" inside "neuroleptic malignant
      syndrome") does not count. Every title word present in any order counts less. Words are compared folded and
      made singular in the titles' language (`norm`: "Sjögren" is found as "Sjogren", "fractures" as "fracture"); an
      occurrence inside a negated finding ("denies chest pain", "no se observan metástasis") does not count.
    - **specificity.** A title that many other titles narrow ("Syndrome", "Hepatitis", "Body Weight": every title
      holding all its words is narrower) loses; the rarest title word's inverse frequency over the titles adds a little.
    - **what the model knows.** A candidate under which the checkpoint has a trained code (ICD: a longer code of the
      same stem; MeSH: a tree number below one of its own, when the tree is given) loses by that code's score: the
      model already scores the specific concept. (Trained parents and siblings scoring high were measured: no gain.)

    Args:
        titles: code -> title of the code system (the candidates); titles without a word are left out.
        own: the checkpoint's codes -> titles: never suggested, and their titles found in a note cover shorter ones.
        tree: code -> tree numbers (MeSH), for parents and siblings; None: ICD's categories from the codes.
        bar, limit: the score at or above which a candidate is suggested, and suggestions per note at most.
        language: the titles' and the notes' ("en", "es"; the plural rules and the negation triggers); None:
            detected from the titles (`clinicode.matching.detect_language`).
        matching: which matching mechanisms apply (`clinicode.matching.Matching`; the benchmark's ablations).
    """

    def __init__(self, titles: Mapping[str, str], *, own: Mapping[str, str] | None = None,
                 tree: Mapping[str, Sequence[str]] | None = None, bar: float = BAR, limit: int = LIMIT,
                 language: str | None = None, matching: Matching = SUGGESTING) -> None:
        own = dict(own or {})
        self.bar, self.limit = bar, limit
        self.matching = matching
        self.language = language or detect_language(titles.values(), notes=5000, chars=200)
        req = {c: self._required(t) for c, t in titles.items() if c not in own}
        self._req = {c: r for c, r in req.items() if r}
        self.titles = {c: titles[c].strip() for c in self._req}
        self._phr: dict[str, list[tuple[str, ...]]] = {}  # worked out when a candidate is first found in a note
        self._own_phr = {c: _phrases(t, self.language, matching) for c, t in own.items() if t and t.strip()}
        df = Counter(w for ws in self._req.values() for w in ws)
        n = len(self._req)
        self._idf = {w: math.log((n + 1) / (k + 1)) + 1.0 for w, k in df.items()}
        self._by_word: dict[str, list[str]] = {}
        for c, ws in self._req.items():
            self._by_word.setdefault(min(ws, key=lambda w: (df[w], w)), []).append(c)
        self._own_seqs = {s for seqs in self._own_phr.values() for s in seqs}
        self._own_prefixes = {s[:n] for s in self._own_seqs for n in range(1, len(s) + 1)}
        # the checkpoint's codes under each candidate (its descendants in the hierarchy), and how broad a title is
        self._tree = None if tree is None else {c: tuple(v) for c, v in tree.items()}
        self._below = self._trained_below(list(own))
        self._every = list(self._req.values()) + [r for r in (self._required(t) for t in own.values() if t) if r]
        self._postings: dict[str, list[int]] = {}
        for i, ws in enumerate(self._every):
            for w in ws:
                self._postings.setdefault(w, []).append(i)
        self._narrower: dict[str, int] = {}  # worked out when a candidate is first found in a note
        digest = hashlib.sha256()
        for c in sorted(self.titles):
            digest.update(f"{c}\t{self.titles[c]}\n".encode("utf-8"))
        if tree is not None:
            digest.update(repr(sorted(self._tree.items())).encode("utf-8"))  # type: ignore[union-attr]
        digest.update(f"{self.language}\t{matching}".encode("utf-8"))
        self.fingerprint = digest.hexdigest()

    def _required(self, title: str) -> frozenset[str]:
        return frozenset(_title_words(title, self.language, self.matching))

    def _trained_below(self, own: list[str]) -> dict[str, tuple[str, ...]]:
        """candidate -> the checkpoint's codes below it: MeSH tree numbers under one of its own, else (ICD) longer
        codes of its stem ('I21' above 'I21.4')."""
        out: dict[str, tuple[str, ...]] = {}
        if self._tree is not None:
            own_nodes = [(n, k) for k in own for n in self._tree.get(k, ())]
            for c in self.titles:
                mine = tuple(n + "." for n in self._tree.get(c, ()))
                below = {k for n, k in own_nodes if mine and n.startswith(mine)}
                if below:
                    out[c] = tuple(sorted(below))
            return out
        stems: dict[str, list[str]] = {}
        for k in own:
            bare = k.replace(".", "")
            for n in range(3, len(bare)):
                stems.setdefault(bare[:n], []).append(k)
        for c in self.titles:
            below = stems.get(c.replace(".", ""))
            if below:
                out[c] = tuple(sorted(below))
        return out

    def narrower(self, code: str) -> int:
        """How many titles (candidates' and the checkpoint's) hold every required word of CODE's title and more."""
        n = self._narrower.get(code)
        if n is None:
            ws = self._req[code]
            rarest = min(ws, key=lambda w: len(self._postings[w]))
            n = self._narrower[code] = sum(1 for i in self._postings[rarest] if ws < self._every[i])
        return n

    def _phrases_of(self, code: str) -> list[tuple[str, ...]]:
        p = self._phr.get(code)
        if p is None:
            p = self._phr[code] = _phrases(self.titles[code], self.language, self.matching)
        return p

    def __len__(self) -> int:
        return len(self.titles)

    def trained_below(self, code: str) -> tuple[str, ...]:
        """The checkpoint's codes under CODE in the hierarchy."""
        return self._below.get(code, ())

    def candidates(self, text: str) -> list[dict]:
        """Every candidate with each title word in the note, with its features (for ranking and for the benchmark):
        code, phrase (uncovered phrase occurrences), covered (phrases inside a longer title), own_covered (inside one
        of the checkpoint's titles), specificity, spans.

        Linear in the note's words: one pass finds every phrase (at most the longest title's words from each word),
        and whether a phrase lies inside a longer one is read from running maxima, not by comparing occurrences."""
        toks = [(m.group(), m.start(), m.end()) for m in WORD.finditer(text) if m.group() not in ("s", "S")]
        forms = {w: (norm(w, self.language, self.matching), fold(w)) for w in {t[0] for t in toks}}  # once a word
        words = [forms[w][0] for w, _, _ in toks]
        held = (negated(text, [(forms[w][1], a, b) for w, a, b in toks], self.language) if self.matching.negation
                else [False] * len(toks))
        present = set(words)
        at: dict[str, list[int]] = {}
        for i, w in enumerate(words):
            at.setdefault(w, []).append(i)
        found = [c for w in present for c in self._by_word.get(w, ()) if self._req[c] <= present]
        seqs: dict[tuple[str, ...], list[str]] = {}
        for c in found:
            for s in self._phrases_of(c):
                seqs.setdefault(s, []).append(c)
        prefixes = {s[:n] for s in seqs for n in range(1, len(s) + 1)}
        occ: dict[str, set[tuple[int, int]]] = {c: set() for c in found}
        own_occ: list[tuple[int, int]] = []
        n_words = len(words)
        for i in range(n_words):
            if held[i]:
                continue  # a negated finding is no occurrence
            for table, pre, sink in ((seqs, prefixes, "cand"), (self._own_seqs, self._own_prefixes, "own")):
                for j in range(i + 1, n_words + 1):
                    key = tuple(words[i:j])
                    if key not in pre:
                        break
                    if key in table:
                        if sink == "own":
                            own_occ.append((i, j))
                        else:
                            for c in seqs[key]:
                                occ[c].add((i, j))
        inside_own = _inside([], own_occ, n_words)
        inside_any = _inside([o for c in found for o in occ[c]], [], n_words)
        rows = []
        for c in found:
            free, by_own, by_other = [], 0, 0
            for a, b in occ[c]:
                if inside_own(a, b):
                    by_own += 1
                elif inside_any(a, b):
                    by_other += 1
                else:
                    free.append((a, b))
            if free:
                spans = tuple(sorted((toks[a][1], toks[b - 1][2]) for a, b in free))[:SPANS]
            else:
                spans = self._scattered(self._req[c], at, toks)
            rows.append({"code": c, "phrase": len(free), "covered": by_other, "own_covered": by_own,
                         "specificity": max(self._idf[w] for w in self._req[c]), "narrower": self.narrower(c),
                         "spans": spans})
        return rows

    @staticmethod
    def _scattered(req: frozenset[str], at: Mapping[str, list[int]],
                   toks: Sequence[tuple[str, int, int]]) -> tuple[tuple[int, int], ...]:
        """The first SPANS runs of neighbouring title words (a title found only as scattered words), read from the
        words' positions in order and left as soon as SPANS runs are closed."""
        runs: list[list[int]] = []
        for i in heapq.merge(*(at[w] for w in req)):
            if runs and i <= runs[-1][1] + 1:
                runs[-1][1] = max(runs[-1][1], i)
            elif len(runs) == SPANS:
                break
            else:
                runs.append([i, i])
        return tuple((toks[a][1], toks[b][2]) for a, b in runs)

    def score(self, row: dict, below: float) -> float | None:
        """The rank score of one candidate row (`candidates`) given the best score of a trained code under it; None
        when its title is not in the note as a phrase (scattered words: 6% right on BC5CDR dev)."""
        if not row["phrase"]:
            return None
        return (PHRASE + SPECIFIC * row["specificity"] - BROAD * math.log2(1 + row["narrower"])
                - TRAINED_BELOW * below)

    def suggest(self, text: str, scores: Mapping[str, float] | None = None) -> list[Suggestion]:
        """One note's suggestions, best first: candidates scoring at or above the bar, at most `limit`.

        Args:
            text: the note.
            scores: the checkpoint's scores of its own codes for this note (what the model knows); None: none.
        """
        out = []
        for row in self.candidates(text):
            c = row["code"]
            below = [(scores.get(k, 0.0), k) for k in self.trained_below(c)] if scores else []
            best, who = max(below) if below else (0.0, None)
            s = self.score(row, best)
            if s is None or s < self.bar:
                continue
            why = "title in the note" + (f" {row['phrase']} times" if row["phrase"] > 1 else "")
            if who is not None:
                why += f"; trained {who} under it scored {best:.2f}"
            out.append(Suggestion(c, self.titles[c], s, row["spans"], why))
        out.sort(key=lambda x: (-x.score, x.code))
        return out[: self.limit]


def _inside(every: Sequence[tuple[int, int]], own: Sequence[tuple[int, int]], n: int):
    """A test of whether a word interval [a, b) lies inside a longer interval of EVERY + OWN ([x, y) with x <= a and
    b <= y, not [a, b) itself), from two running maxima over the n word positions (linear, not pairwise)."""
    at = [-1] * (n + 1)        # the farthest end of an interval starting at each word
    for x, y in list(every) + list(own):
        at[x] = max(at[x], y)
    before = [-1] * (n + 1)    # the farthest end of an interval starting before each word
    for i in range(1, n + 1):
        before[i] = max(before[i - 1], at[i - 1])
    return lambda a, b: before[a] >= b or at[a] > b


def read_tree(path) -> dict[str, tuple[str, ...]]:
    """code<TAB>tree numbers (';'-joined, as MeSH's mesh_tree.tsv) -> {code: (number, ...)}."""
    from clinicode.codes.icd9 import load_descriptions_tsv  # the same bounded, UTF-8, .gz-aware reader

    return {c: tuple(n.strip() for n in v.split(";") if n.strip()) for c, v in load_descriptions_tsv(path).items()}


def system_titles(system) -> dict[str, str]:
    """The candidates a code system ships: every billable ICD-10-CM code's title (the CMS tables in
    `simple-icd-10-cm`, 74,736 codes) for a system holding ICD-10-CM; {} for the others (ICD-9-CM, ICD-10-PCS, MeSH and
    a checkpoint's own labels ship no titles: give them as a file)."""
    from clinicode.codes.icd10 import icd10_cm_billable_titles
    from clinicode.codes.systems import ICD10_CM

    if system is None or ICD10_CM not in system.leaves:
        return {}
    return dict(icd10_cm_billable_titles())


def checkpoint_titles(titles: Mapping[str, str], system: CodeSystem,
                      codes: Sequence[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """TITLES keyed by a checkpoint's spelling of each code (`CodeSystem.canonical`: MIMIC's undotted 'I5020' is the
    checkpoint's 'I50.20'), so a code the checkpoint has is never suggested as one it lacks; every code is one of the
    checkpoint's code system SYSTEM (`check_code`, as `review decide --add` checks a coder's), bar for a checkpoint of
    its own labels (LOCAL), whose codes follow no rule. The others ('R07.9' for an ICD-9 model, 'not a code', CAML's
    chapter ranges '001-139.99') are left out, never suggested, and logged in one warning; a file most of whose codes
    are not the system's is another system's, and refused.

    Args:
        titles: code -> title, as a `--titles` file gives them.
        system: the checkpoint's code system.
        codes: the checkpoint's codes.
    Returns:
        (code -> title in the checkpoint's spelling, the codes of TITLES left out).
    Raises:
        DataFormatError: most codes are not of the checkpoint's system (one line counting them and naming the
            first); two spellings of one code ('4280' and '428.0') with different titles.
    """
    known = set(codes)
    out: dict[str, str] = {}
    given: dict[str, str] = {}
    foreign: list[tuple[str, CodeCheck]] = []
    for code, title in titles.items():
        key = system.canonical(code, known)
        if key not in known and system is not LOCAL:
            found = check_code(system, code)
            if found.code is None:
                foreign.append((code, found))
                continue
            key = found.code
        key = key or code.strip()  # LOCAL: as given
        if key in out and out[key] != title:
            raise DataFormatError(f"--titles: {given[key][:40]!r} and {code[:40]!r} are both code {key[:40]!r} "
                                  "with different titles; keep one code<TAB>title line per code.")
        out.setdefault(key, title)
        given.setdefault(key, code)
    if foreign:
        code, found = foreign[0]
        what = (f"a code of {found.other.name}" if found.other is not None else
                "not in the CMS tables" if found.not_in_tables else f"no {system.name} code")
        said = (f"{len(foreign):,} of {len(titles):,} codes are not of the checkpoint's code system, "
                f"{system.name} (the first, {code[:40]!r}, is {what})")
        if 2 * len(foreign) > len(titles):
            raise DataFormatError(f"--titles: {said}; give titles of {system.name} codes (such as "
                                  f"{system.example}).")
        log.warning("--titles: %s; they are left out, never suggested.", said)
    return out, tuple(c for c, _ in foreign)


class _RowScores:
    """One note's scores of the checkpoint's codes, read by code (what `Suggester.suggest` asks of the model)."""

    def __init__(self, index: Mapping[str, int], row: Any) -> None:
        self._index, self._row = index, row

    def __bool__(self) -> bool:
        return True

    def get(self, code: str, default: float = 0.0) -> float:
        i = self._index.get(code)
        return default if i is None else float(self._row[i])


class CheckpointSuggestions:
    """A checkpoint's title suggestions (`Prediction.suggested`): its candidates and one note's suggestions from them
    and the note's scores. Thread-safe (the suggester is built once, under a lock).

    The candidates are TITLES when given (checked and built now, so a bad titles file fails first: `checkpoint_titles`),
    else the titles the code system ships (`system_titles`: ICD-10-CM's 74,736, read and indexed the first time
    `suggester` is asked for, so evaluate and training's dev scoring never pay for them); `enabled=False`: none.

    Args:
        codes, descriptions: the checkpoint's codes and their titles (never suggested; their titles cover shorter ones).
        system: the checkpoint's code system.
        titles: code -> title candidates (a `--titles` file); None: the system's own.
        tree: code -> tree numbers (MeSH's), placing the candidates in the hierarchy.
        enabled: False: no suggestions.
    Raises:
        DataFormatError: TITLES are another system's, or spell one code twice with different titles.
    """

    def __init__(self, codes: Sequence[str], descriptions: Sequence[str], system: CodeSystem, *,
                 titles: Mapping[str, str] | None = None, tree: Mapping[str, Sequence[str]] | None = None,
                 enabled: bool = True) -> None:
        self._codes, self._descriptions, self._system = tuple(codes), tuple(descriptions), system
        self._index = {c: i for i, c in enumerate(self._codes)}
        self._lock = threading.Lock()
        self.left_out: tuple[str, ...] = ()  # codes of TITLES not of the checkpoint's system (never suggested)
        self._pending: tuple | None = (None, tree) if enabled and titles is None else None
        self._suggester = self._build(titles, tree) if enabled and titles is not None else None

    @property
    def suggester(self) -> Suggester | None:
        """The candidates' suggester, or None when there are none (disabled, or a code system shipping no titles)."""
        if self._pending is not None:
            with self._lock:
                if self._pending is not None:
                    self._suggester = self._build(*self._pending)
                    self._pending = None
        return self._suggester

    def _build(self, titles: Mapping[str, str] | None, tree: Mapping[str, Sequence[str]] | None) -> Suggester | None:
        if titles is None:
            titles = system_titles(self._system)
            if not titles:
                return None
        else:  # the checkpoint's spelling: its own codes are never candidates
            titles, self.left_out = checkpoint_titles(titles, self._system, self._codes)
        return Suggester(titles, own=dict(zip(self._codes, self._descriptions)), tree=tree)

    def suggest(self, text: str, row: Any) -> list[Suggestion]:
        """One note's suggestions (`Suggester.suggest`; [] without candidates), ranked with ROW, its [K] scores of the
        checkpoint's codes, in their order.

        Args:
            text: the part of the note the model read.
            row: [K] float scores.
        """
        suggester = self.suggester
        return [] if suggester is None else suggester.suggest(text, _RowScores(self._index, row))
