"""LabelSet: the ordered codes (the model's output index) with descriptions, multi-hot encoding and JSON I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from clinicode.codes.systems import CodeSystem, as_registered, code_system, family_of
from clinicode.errors import DataFormatError
from clinicode.files import write_json_atomic


@dataclass(frozen=True)
class LabelSet:
    """Ordered label codes; index i of every score vector is `codes[i]`.

    Args:
        codes: distinct label strings (dotted ICD-9 codes for MIMIC) in output order.
        descriptions: human-readable titles, same length as `codes` ("" when unknown).
        code_system: the codes' CodeSystem (a family for a mixed set), or None when not yet known; when given, every
            code must be one of its codes. Saved as each entry's "system" (its member's name) in labels.json.
    """

    codes: tuple[str, ...]
    descriptions: tuple[str, ...]
    code_system: CodeSystem | None = field(default=None, compare=False)
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.codes) != len(self.descriptions):
            raise DataFormatError(
                f"LabelSet: {len(self.codes)} codes but {len(self.descriptions)} descriptions; give "
                "one description per code."
            )
        if len(set(self.codes)) != len(self.codes):
            dup = sorted({c for c in self.codes if self.codes.count(c) > 1})
            raise DataFormatError(f"LabelSet: duplicate codes {dup[:5]}; each code must appear once.")
        if not self.codes:
            raise DataFormatError("LabelSet: no labels; a dataset needs at least one label.")
        if self.code_system is not None:
            bad = [c for c in self.codes if not self.code_system.is_valid(c)]
            if bad:
                raise DataFormatError(f"LabelSet: {len(bad)} code(s) are not {self.code_system.name} codes, e.g. "
                                      f"{bad[0][:40]!r}; name the right code system or fix the codes.")
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(self.codes)})

    @classmethod
    def from_codes(cls, codes: Sequence[str], descriptions: dict[str, str] | None = None, *,
                   code_system: CodeSystem | None = None) -> "LabelSet":
        descriptions = descriptions or {}
        return cls(tuple(codes), tuple(descriptions.get(c, "") for c in codes), code_system)

    def with_code_system(self, code_system: CodeSystem) -> "LabelSet":
        """The same codes and descriptions with CODE_SYSTEM recorded."""
        return LabelSet(self.codes, self.descriptions, code_system)

    def __len__(self) -> int:
        return len(self.codes)

    def __contains__(self, code: object) -> bool:
        return code in self._index

    def index(self, code: str) -> int:
        return self._index[code]

    def description(self, code: str) -> str:
        return self.descriptions[self._index[code]]

    def multi_hot(self, label_lists: Iterable[Iterable[str]], dtype: Any = np.float32) -> np.ndarray:
        """[n_docs, n_labels] 0/1 matrix, float32 unless DTYPE says otherwise; codes outside the set are ignored."""
        rows = list(label_lists)
        y = np.zeros((len(rows), len(self.codes)), dtype=dtype)
        for i, labels in enumerate(rows):
            for code in labels:
                j = self._index.get(code)
                if j is not None:
                    y[i, j] = 1.0
        return y

    def counts(self, label_lists: Iterable[Iterable[str]]) -> np.ndarray:
        """[n_labels] int64: in how many of the lists each code appears (duplicates within a list count once)."""
        out = np.zeros(len(self.codes), dtype=np.int64)
        for labels in label_lists:
            for j in {self._index[c] for c in labels if c in self._index}:
                out[j] += 1
        return out

    def to_json(self) -> list[dict[str, str]]:
        """One {"code", "description"} per code, plus its "system" (the member's name) when the system is known."""
        if self.code_system is None:
            return [{"code": c, "description": d} for c, d in zip(self.codes, self.descriptions)]
        return [{"code": c, "description": d, "system": self.code_system.member(c).name}  # type: ignore[union-attr]
                for c, d in zip(self.codes, self.descriptions)]

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> "LabelSet":
        """Read a labels.json: a list of {"code", "description"} objects (or plain code strings).

        An entry may name its code's system ({"code": "02HV33Z", "system": "ICD-10-PCS"}, a name of `CODE_SYSTEMS`);
        when every entry does, the set's `code_system` is the family of those systems (`family_of`) and each code
        must be one of its system's. Otherwise `code_system` is None and the reader infers it once
        (`infer_code_system`).
        """
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except (OSError, json.JSONDecodeError) as err:
            raise DataFormatError(f"{path}: cannot read labels ({err}); expected a JSON list of "
                                  f"{{'code', 'description'}}.") from err
        if not isinstance(raw, list):
            raise DataFormatError(f"{path}: expected a JSON list of {{'code', 'description'}} objects, "
                                  f"got {type(raw).__name__}.")
        codes, descs, systems = [], [], []
        for i, item in enumerate(raw):
            if isinstance(item, str):
                codes.append(item)
                descs.append("")
                systems.append(None)
            elif isinstance(item, dict) and isinstance(item.get("code"), str):
                codes.append(item["code"])
                descs.append(str(item.get("description") or ""))
                systems.append(item.get("system"))
            else:
                raise DataFormatError(f"{path}: entry {i} has no string 'code'; expected "
                                      f"{{'code': ..., 'description': ...}}.")
        named = [s for s in systems if s is not None]
        if len(named) != len(systems):  # a set that names none (or a hand-edited one naming some): inferred later
            return cls(tuple(codes), tuple(descs))
        try:
            members = {name: code_system(name) for name in set(named)}
        except DataFormatError as err:
            raise DataFormatError(f"{path}: {err}") from None
        for i, (c, name) in enumerate(zip(codes, systems)):
            if not members[name].is_valid(c):
                raise DataFormatError(f"{path}: entry {i} says {c[:40]!r} is a {name} code, which it is not; fix "
                                      "the code or its 'system'.")
        return cls(tuple(codes), tuple(descs), as_registered(family_of(members.values()), codes))


PARTLY_CODED = "partly_coded"   # a dataset manifest's {"codes": [...], "notes": [ids]}: codes known only on the notes


@dataclass(frozen=True)
class PartlyCoded:
    """Codes whose absence means something only on some training notes: codes coders added in review, which the
    older notes were never read for (`review retrain`'s data names them in its manifest, `PARTLY_CODED`). Training
    learns them from the notes that were read (`known`) and leaves the others out of their loss and fit.

    Args:
        columns: [C] the codes' indices in the label set.
        known: [N] True for the training notes read for them (the reviewed ones).
    """

    columns: np.ndarray
    known: np.ndarray

    @classmethod
    def of(cls, manifest: dict[str, Any], labels: LabelSet, ids: Iterable[Any]) -> PartlyCoded | None:
        """MANIFEST's partly coded codes among LABELS, over the training notes IDS (in order); None: it names none."""
        entry = manifest.get(PARTLY_CODED) or {}
        columns = [labels.index(c) for c in entry.get("codes", ()) if c in labels]
        if not columns:
            return None
        read = {str(i) for i in entry.get("notes", ())}
        return cls(np.asarray(columns, dtype=np.int64), np.asarray([str(i) in read for i in ids], dtype=bool))

    def then_unread(self, n: int) -> PartlyCoded:
        """The same codes over these notes followed by N more never read for them (`--fit-on train+dev`: dev's)."""
        return PartlyCoded(self.columns, np.concatenate([self.known, np.zeros(n, dtype=bool)]))

    def rows(self, y: np.ndarray, column: int) -> np.ndarray:
        """[N] True for the notes whose code COLUMN (one of `columns`) is known in Y ([N, K] 0/1): the notes read for
        it, and any note that carries it."""
        return self.known | (np.asarray(y[:, column]) > 0)


def coded_columns(partly: PartlyCoded | None, n_codes: int) -> np.ndarray:
    """[N_CODES] True for the codes dev's and test's notes were coded for: all but PARTLY's (never read for them), so
    only those tune a threshold, choose an epoch or count in a metric."""
    read = np.ones(n_codes, dtype=bool)
    if partly is not None:
        read[partly.columns] = False
    return read
