"""Published MIMIC coding protocols, recognised by the SHA-256 of their split files: what `prepare` must reproduce.

Identifiers and published counts only, no MIMIC data; docs/domain.md section 12 compares the protocols."""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Protocol:
    """One published benchmark: its split files, the options that reproduce it, and its counts
    under clinicode's rules."""

    name: str
    source: str
    mimic: str                      # "mimic3" or "mimic4"
    icd_version: int
    label_set: str                  # "caml50", "top50" (its pinned top50_codes.txt) or "full"
    min_code_count: int             # codes seen in fewer admissions are dropped (1: none)
    counts: dict[str, int]          # documents per split clinicode must produce
    files: frozenset[str]           # SHA-256 of the split files (and of a pinned top50_codes.txt)
    n_labels: int | None = None     # the label count the authors report (a check, not a rule)
    note: str = ""


_CAML_50 = frozenset({"aee261aa45a2d89368e4da275c6c0a601b8bfc2c22e3af915d89adbc068716d2",
                      "bcd69c3be3f4d8a7d29252ac8b5b99f197875b639ab12cf3ab324ee11612ea9e",
                      "cc3d3c22cbf0c68b62508712d4fc27baf5a5cb9705c1c8f8b6fc1618332c49b2"})
_CAML_FULL = frozenset({"abc4601d2cb798c7f26d35a4aa38b84b0050af03e102e455ab70651d654cb964",
                        "5bc77377a675b17631844f6253ecec5c0b2b39c294aebe34aebbd2c733d8efb4",
                        "2861293b9057a3aa20b21b397590e4f148aceebdaa705622acf748ccb1b7216c"})

PROTOCOLS: tuple[Protocol, ...] = (
    Protocol("caml-mimic3-top50", "CAML (Mullenbach et al. 2018), caml-mimic 44a4745", "mimic3", 9, "caml50", 1,
             {"train": 8066, "dev": 1573, "test": 1729}, _CAML_50, 50,
             "CAML's pinned 50 codes; papers quote one more per split (a counted CSV header)."),
    Protocol("caml-mimic3-full", "CAML (Mullenbach et al. 2018), caml-mimic 44a4745", "mimic3", 9, "full", 1,
             {"train": 47719, "dev": 1631, "test": 3372}, _CAML_FULL, None,
             "CAML's lists hold 47,723 training admissions; 4 have only empty discharge notes, which clinicode drops "
             "(as Edin et al. did, giving their 47,719)."),
    Protocol("edin-mimic3-full", "Edin et al. 2023, medical-coding-reproducibility c0e1d42", "mimic3", 9, "full", 1,
             {"train": 47719, "dev": 1631, "test": 3372},
             frozenset({"67596129dc03ad3095ad7f24a6c7cde3522bb97f338720644e7e70deaf4301d1"}), None,
             "CAML's full split without the 4 empty-note admissions."),
    Protocol("edin-mimic3-clean", "Edin et al. 2023, medical-coding-reproducibility c0e1d42", "mimic3", 9, "full", 10,
             {"train": 38401, "dev": 5577, "test": 8734},
             frozenset({"c8e2c421df27322aa9f27c571bcb1afb5100212aa2293312fb646748870a26c5"}), None,
             "their patient-level re-split of MIMIC-III, codes in at least 10 admissions."),
    Protocol("edin-mimic4-icd9", "Edin et al. 2023, medical-coding-reproducibility c0e1d42", "mimic4", 9, "full", 10,
             {"train": 154542, "dev": 21980, "test": 32804},
             frozenset({"4861581ff3b8d480eab413588373ebbd1e567d3edd66d0eafeaaafd96959a166"}), 6150),
    Protocol("edin-mimic4-icd10", "Edin et al. 2023, medical-coding-reproducibility c0e1d42", "mimic4", 10, "full", 10,
             {"train": 89099, "dev": 13378, "test": 19802},
             frozenset({"e594c2c24650ed7a36f8e8f175c45a90e9f240261121d09c85b811313aa917f0"}), 7942),
    Protocol("nguyen-mimic4-icd9-top50", "Nguyen et al. 2023 (MIMIC-IV-ICD), 076ac16", "mimic4", 9, "top50", 1,
             {"train": 170664, "dev": 6406, "test": 12405},
             frozenset({"b180a597c755f67d4884d3a60df5e95b63d677c38dea93dd36b54f74664b30e2",
                        "4a242d35e63985112fbaa9b63c5102e292330336963f132ab9425c3c9342ec1c",
                        "0b3b162102fa3da880a9ec2deace50f07e6cc01a9820a63533880d7999d76cbb",
                        "07fb74972d2fa85b27a32227600fd9198de979eb0c42921daef83288da5083ea"}), 50),
    Protocol("nguyen-mimic4-icd9-full", "Nguyen et al. 2023 (MIMIC-IV-ICD), 076ac16", "mimic4", 9, "full", 1,
             {"train": 188533, "dev": 7110, "test": 13709},
             frozenset({"a518a3e8e4b2422ad62c06dc07c2f694350e5350bf1b3999d3a7392b923732b4",
                        "7a83c833a04301ae6d8bc6ba69e672af8e525c07a4861b275bd0444d8d3da8ef",
                        "863372df77f3e7ad2dc2ed0a33ec85ba5d8fcf17b87b1b622085114c813eff75"}), 11523),
    Protocol("nguyen-mimic4-icd10-top50", "Nguyen et al. 2023 (MIMIC-IV-ICD), 076ac16", "mimic4", 10, "top50", 1,
             {"train": 104077, "dev": 3805, "test": 7368},
             frozenset({"cef80bc2a9fb43ffd688b3a0235144d65384171551e0e95197faf3fc31ca8aa9",
                        "b76bed490086be25a24cc5cb2d254845c4d5b63a7aaf3a04f94e954e53f18c67",
                        "17e7e420750e68f800d9e3b23863106c4ef78471a869db84124c5457fe4a5a90",
                        "bd1d313760f60184a4bb50e61ca847c287daf344a64dff1a128a5d62ab9e8aee"}), 50),
    Protocol("nguyen-mimic4-icd10-full", "Nguyen et al. 2023 (MIMIC-IV-ICD), 076ac16", "mimic4", 10, "full", 1,
             {"train": 110442, "dev": 4017, "test": 7851},
             frozenset({"a23d2fa7bea7fe29edd603b8cfc83d74e94e3e84b2df45850ed52b0023ec2964",
                        "ad34bf32a05c9deb50d3b67fd177da34e03ab8c237ffc0e26fa57cabcbf92f6c",
                        "b6d2428f0b2a740c41ea8c4feb6fe472304f50c980e23b67b1484bb657ade6fe"}), 26096),
)


def _sha256(path: Path) -> str:
    """SHA-256 of a file's content; of the decompressed content for a `.gz` (the packaged lists are gzipped)."""
    h = hashlib.sha256()
    with (gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")) as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def find_protocol(files: list[Path]) -> Protocol | None:
    """The published protocol whose split files (and pinned code list) these are, byte for byte; None otherwise."""
    digests = frozenset(_sha256(p) for p in files if Path(p).is_file())
    return next((p for p in PROTOCOLS if digests and digests == p.files), None)


def by_name(name: str) -> Protocol:
    """The protocol called NAME (for pipelines and tests)."""
    return next(p for p in PROTOCOLS if p.name == name)
