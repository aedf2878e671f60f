"""On real MIMIC-III (only where CLINICODE_MIMIC_DIR names the v1.4 tables): CAML's split files give exactly the
published document counts, and every document carries at least one of the 50 codes (docs/domain.md section 5)."""

import os
from pathlib import Path

import pandas as pd
import pytest

from clinicode.constants import CAML50_SPLIT_COUNTS, CAML_TOP50

from conftest import MIMIC_ENV, SHARED_DATA


@pytest.mark.mimic
@pytest.mark.slow
def test_caml_top50_counts_on_real_mimic(tmp_path):
    from clinicode.data.prepare import prepare_mimic

    summary = prepare_mimic(Path(os.environ[MIMIC_ENV]), tmp_path / "mimic50",
                            splits_dir=SHARED_DATA / "caml-mimic-ids")
    assert summary["splits"] == CAML50_SPLIT_COUNTS and summary["comparable"] is True
    assert summary["labels_without_description"] == []
    for split, n in CAML50_SPLIT_COUNTS.items():
        df = pd.read_parquet(tmp_path / "mimic50" / f"{split}.parquet", columns=["id", "labels"])
        assert len(df) == n and df["id"].is_unique
        assert all(len(x) and set(x) <= set(CAML_TOP50) for x in df["labels"])
