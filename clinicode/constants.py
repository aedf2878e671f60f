"""Names shared by every stage: columns, artefact files, special tokens, the pinned CAML top-50 codes."""

SCHEMA_VERSION = 1

ID, SUBJECT_ID, TEXT, LABELS = "id", "subject_id", "text", "labels"
EVIDENCE = "evidence"  # optional: the gold mention of each code, a list of {code, start, end} (text[start:end])
SPLITS = ("train", "dev", "test")

PAD_TOKEN, UNK_TOKEN = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1

LABELS_FILE = "labels.json"
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
MODEL_CONFIG_FILE = "model_config.json"
TRAIN_CONFIG_FILE = "train_config.json"
THRESHOLD_FILE = "threshold.json"
METRICS_DEV_FILE = "metrics_dev.json"
METRICS_TEST_FILE = "metrics_test.json"
HISTORY_FILE = "history.jsonl"
SCORES_TEST_FILE = "scores_test.npz"  # RUN/scores_test.npz: ids, gold and scores of the test split
CHECKPOINT_DIR = "checkpoint"      # RUN/checkpoint
RUN_DATA_DIR = "data"              # RUN/data: the prepared dataset of `train --mimic-dir` and the pipelines
RUN_FILE = "run.json"              # marks a run folder (RUN/) from the moment `train` starts

DEFAULT_MAX_LEN = 2500

# CAML's pinned top-50 ICD-9 codes in CAML's frequency order (docs/domain.md section 5). Do not recompute.
CAML_TOP50 = (
    "401.9", "38.93", "428.0", "427.31", "414.01", "96.04", "96.6", "584.9", "250.00", "96.71",
    "272.4", "518.81", "99.04", "39.61", "599.0", "530.81", "96.72", "272.0", "285.9", "88.56",
    "244.9", "486", "38.91", "285.1", "36.15", "276.2", "496", "99.15", "995.92", "V58.61",
    "507.0", "038.9", "88.72", "585.9", "403.90", "311", "305.1", "37.22", "412", "33.24",
    "39.95", "287.5", "410.71", "276.1", "V45.81", "424.0", "45.13", "V15.82", "511.9", "37.23",
)

# Expected document counts with CAML's *_50_hadm_ids.csv on MIMIC-III v1.4 (docs/domain.md section 5).
CAML50_SPLIT_COUNTS = {"train": 8066, "dev": 1573, "test": 1729}
RETRAIN_EPOCHS = 30  # `review retrain --epochs`: a warm start's cap (its own patience ends it first)
