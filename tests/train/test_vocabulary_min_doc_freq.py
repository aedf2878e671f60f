"""A checkpoint keeps no word of fewer training notes than --min-doc-freq (3 by default), in every vocabulary it
holds: the tokenizer's and the tfidf-lr part's, alone or in the default (fused) model (#51; docs/data-safety.md). The
tfidf-lr part once kept words of 2 notes (on bc5cdr, 1,077 of its 3,416 words: drug and gene names)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from clinicode.config import TrainConfig
from clinicode.data.text import tokenize
from clinicode.train import train

from conftest import TINY_MODEL

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}


@pytest.fixture(scope="module")
def doc_freq(demo_data) -> Counter:
    """Each word's number of training notes."""
    texts = pd.read_parquet(demo_data / "train.parquet")["text"].tolist()
    return Counter(w for t in texts for w in set(tokenize(t)))


@pytest.fixture(scope="module")
def doc_freq_all(demo_data) -> Counter:
    """Each word's number of train and dev notes: what the default model's tfidf-lr part learns from in the end
    (`--fit-on train+dev`)."""
    texts = [t for split in ("train", "dev") for t in pd.read_parquet(demo_data / f"{split}.parquet")["text"]]
    return Counter(w for t in texts for w in set(tokenize(t)))


def _vocabularies(run: Path) -> dict[str, list[str]]:
    ck = run / "checkpoint"
    out = {"tfidf-lr": json.loads((ck / "tfidf_lr.json").read_text(encoding="utf-8"))["vocabulary"]}
    if (ck / "tokenizer.json").is_file():
        from clinicode.tokenizer import ClinicalTokenizer

        tok = ClinicalTokenizer.load(ck / "tokenizer.json")
        out["tokenizer"] = [w for w, i in tok.vocab().items() if i > 1]  # not PAD or UNK
    return out


@pytest.mark.parametrize("model, min_doc_freq", [("fused", None), ("tfidf-lr", None), ("tfidf-lr", 5)])
def test_no_vocabulary_keeps_a_word_of_fewer_training_notes_than_min_doc_freq(demo_data, doc_freq, doc_freq_all,
                                                                               tmp_path, model, min_doc_freq):
    want = min_doc_freq or TrainConfig.min_doc_freq
    assert any(n == want - 1 for n in doc_freq.values())  # words the rule must leave out are there
    extra = {} if min_doc_freq is None else {"min_doc_freq": min_doc_freq}
    cfg = TrainConfig(model=model, epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, seed=7, device="cpu", **extra)
    train(out_dir=tmp_path / "run", config=cfg, data_dir=demo_data, progress=False,
          model_options=SIZES if model == "fused" else None)
    vocabularies = _vocabularies(tmp_path / "run")
    assert set(vocabularies) == ({"tfidf-lr", "tokenizer"} if model == "fused" else {"tfidf-lr"})
    for name, words in vocabularies.items():
        counts = doc_freq_all if (model, name) == ("fused", "tfidf-lr") else doc_freq   # the notes it learnt from
        rare = [w for w in words if counts[w] < want]
        assert words and not rare, (name, len(rare), len(words))
        # and every word the rule allows is kept (the cap of 200,000 words is far away)
        assert len(words) == sum(1 for n in counts.values() if n >= want), name
