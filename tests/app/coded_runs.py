"""Synthetic ICD-10 runs with a chosen number of codes (real ICD-10-CM codes with their CMS titles, two ICD-10-PCS
codes without one), for looking at the app at 50, 300 and 2,000+ codes. No real notes: the text is made-up words plus
the words of each note's code titles, so a tiny LEAM learns a little in one or two epochs."""

from __future__ import annotations

import json
import random
from pathlib import Path

PCS = ("BW40ZZZ", "0TJB8ZZ")  # no title in the data: the app must say "ICD-10-PCS, no title"


def icd10_codes(n: int) -> list[str]:
    """n real ICD-10-CM leaf codes spread over the whole tabular list (every chapter), plus the two PCS codes."""
    import simple_icd_10_cm as cm

    leaves = [c for c in cm.get_all_codes(True) if cm.is_leaf(c)]
    step = max(1, len(leaves) // (n - len(PCS)))
    return sorted(leaves[::step][: n - len(PCS)]) + list(PCS)


def write_coded_notes(folder: Path, n_codes: int, *, n_train: int, seed: int = 0) -> list[str]:
    """train/dev/test.jsonl and labels.json (codes without titles: train fills ICD-10-CM ones from the CMS tables)."""
    import simple_icd_10_cm as cm

    rng = random.Random(seed)
    codes = icd10_codes(n_codes)
    words = {c: (cm.get_description(c) if cm.is_valid_item(c) else "abdominal ultrasound cystoscopy").lower().split()
             for c in codes}
    weights = [1.0 / (1 + r) ** 0.9 for r in range(len(codes))]  # Zipf-like: every frequency band gets codes
    order = codes[:]
    rng.shuffle(order)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", max(60, n_train // 4)), ("test", max(60, n_train // 4))):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                labels = sorted(set(rng.choices(order, weights=weights, k=rng.randint(3, 12))))
                text = []
                for c in labels:
                    text += words[c] + [f"filler{rng.randint(0, 400)}" for _ in range(rng.randint(5, 20))]
                f.write(json.dumps({"id": f"{split}{i}", "text": " ".join(text), "labels": labels}) + "\n")
    (folder / "labels.json").write_text(json.dumps([{"code": c, "description": ""} for c in codes]))
    return codes


def build_coded_run(root: Path, n_codes: int, *, n_train: int = 400, epochs: int = 2) -> Path:
    """ROOT/data-N (the notes) and ROOT/runs-N/icd10-N (a tiny LEAM trained on them); returns the runs folder."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    data = root / f"data-{n_codes}"
    write_coded_notes(data, n_codes, n_train=n_train)
    runs = root / f"runs-{n_codes}"  # one run per folder: the app opens on it
    cfg = TrainConfig(model="leam", epochs=epochs, batch_size=16,
                      lr=2e-2, embeddings="random", patience=3, seed=7, device="cpu",
                      max_len=400)
    train(out_dir=runs / f"icd10-{n_codes}", config=cfg, data_dir=data, progress=False,
          model_options=dict(embed_dim=32, radius=3, hidden_dim=64, dropout=0.2))
    return runs
