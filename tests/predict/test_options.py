"""The user's predict options parsed once (`PredictConfig.from_user`) for the CLI and the service, and
`Prediction.at(threshold)`: the same record at another threshold through the one predicted-codes rule."""

import math

import pytest

from clinicode.config import PREDICT, PredictConfig, ServeConfig
from clinicode.errors import ConfigError
from clinicode.predict import CodeScore, Prediction, Predictor, Span
from tests.helpers import fails

# ------------------------------------------------------------------------------------------ from_user


def test_nothing_given_is_the_defaults():
    assert PredictConfig.from_user() == PREDICT
    assert PredictConfig.from_user(source="json") == PREDICT and PREDICT.threshold is None


@pytest.mark.parametrize("source,top_k,want", [
    ("cli", "all", None), ("query", "all", None), ("json", "all", None),
    ("cli", "5", 5), ("query", "5", 5), ("json", 5, 5), ("cli", 3, 3),
])
def test_top_k_is_normalised(source, top_k, want):
    assert PredictConfig.from_user(top_k=top_k, source=source).top_k == want


@pytest.mark.parametrize("source,message", [
    ("cli", "--top-k must be a positive integer or 'all', got 0; e.g. --top-k 5, or --top-k all for every code's "
            "score."),
    ("query", 'top_k must be a positive integer or "all", got 0; e.g. ?top_k=5, or ?top_k=all for every code\'s '
              "score."),
    ("json", 'top_k must be a positive integer or "all", got 0; e.g. "top_k": 5, or "top_k": "all" for every '
             "code's score."),
])
def test_top_k_0_is_refused_on_every_face_in_its_own_words(source, message):
    for zero in (0, "0"):
        if source == "json" and zero == "0":
            continue  # a JSON string is no number at all (next test)
        with pytest.raises(ConfigError) as err:
            PredictConfig.from_user(top_k=zero, source=source)
        assert str(err.value) == message
    with pytest.raises(ConfigError, match="must be a positive integer"):
        PredictConfig(top_k=0)  # the library's config holds the same rule


@pytest.mark.parametrize("source,kw,words", [
    ("json", {"top_k": "5"}, 'top_k must be a positive integer or "all", got a string'),
    ("json", {"top_k": True}, "got a boolean"),
    ("json", {"top_k": 2.0}, "got 2.0"),
    ("cli", {"top_k": "many"}, "--top-k must be a positive integer or 'all', got 'many'"),
    ("query", {"top_k": "x" * 50}, "got '" + "x" * 20 + "';"),  # text is cut to 20 characters
    ("json", {"explain": 21}, "explain must be an integer from 0 to 20, got 21; e.g. \"explain\": 3"),
    ("cli", {"explain": -1}, "--explain must be an integer >= 0, got -1; e.g. --explain 3"),
    ("query", {"explain": "two"}, "explain must be an integer from 0 to 20, got 'two'"),
    ("json", {"threshold": 1.5}, "threshold must be a number in [0, 1], got 1.5; leave it out to use the "
                                 "checkpoint's tuned threshold."),
    ("query", {"threshold": "nan"}, "threshold must be a number in [0, 1], got nan"),
    ("json", {"threshold": False}, "threshold must be a number in [0, 1], got a boolean"),
    ("cli", {"threshold": -0.1}, "--threshold must be a number in [0, 1], got -0.1"),
])
def test_bad_options_give_one_line_naming_what_was_given(source, kw, words):
    with pytest.raises(ConfigError) as err:
        PredictConfig.from_user(**kw, max_explain=None if source == "cli" else 20, source=source)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_explain_and_threshold_are_normalised():
    cfg = PredictConfig.from_user(explain="3", threshold="0.25", source="query", memory_mb=128)
    assert (cfg.explain, cfg.threshold, cfg.memory_mb) == (3, 0.25, 128)
    one = PredictConfig.from_user(threshold=1, explain=20, max_explain=20, source="json")
    assert one.threshold == 1.0 and isinstance(one.threshold, float) and one.explain == 20


@pytest.mark.parametrize("value", [-3, 0, 1, 7, "all", 2.5])
def test_every_face_takes_or_refuses_the_same_top_k(value):
    """The CLI's text, the query's text and the JSON value of one top_k: accepted alike, to the same value."""
    def verdict(v, source):
        try:
            return PredictConfig.from_user(top_k=v, source=source).top_k
        except ConfigError:
            return "refused"
    text = value if isinstance(value, str) else str(value)
    assert verdict(text, "cli") == verdict(text, "query") == verdict(value, "json")


# ------------------------------------------------------------------------------------------ both faces
def test_cli_review_queue_checks_explain_with_its_own_bound(tiny_run, tmp_path):
    # the queue stores evidence for the coder, so its bound is >= 1 (#42: '-1' once said '>= 0', then 0 was refused)
    src = tmp_path / "n.jsonl"
    src.write_text('{"id": "a", "text": "hypertension"}\n')
    fails(["review", "queue", "--checkpoint", tiny_run, "--input", src, "--db", tmp_path / "r.db", "--explain", "-1"],
          "--explain must be an integer >= 1 (evidence phrases stored per suggested code), got -1; e.g. --explain 5")
    assert not (tmp_path / "r.db").exists()


@pytest.fixture(scope="module")
def predictor(tiny_run):
    return Predictor.from_checkpoint(tiny_run, device="cpu")


def test_service_answers_a_bad_option_with_the_rules_message(predictor):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from clinicode.serve import create_app

    body = {"notes": [{"text": "chest pain"}]}
    with TestClient(create_app(predictor, limits=ServeConfig()), base_url="http://127.0.0.1:8000") as c:
        def refused(r):
            assert r.status_code == 422, r.text
            return r.json()["error"]["message"]

        assert refused(c.post("/v1/predict?top_k=0", json=body)).startswith(
            'top_k must be a positive integer or "all", got 0; e.g. ?top_k=5,')
        assert "got 'abc'" in refused(c.post("/v1/predict?top_k=abc", json=body))
        assert 'got 0; e.g. "top_k": 5,' in refused(c.post("/v1/predict", json={**body, "top_k": 0}))
        r = c.post("/v1/predict?top_k=all", json=body)
        assert r.status_code == 200 and len(r.json()["results"][0]["scores"]) == len(predictor.codes)


# ------------------------------------------------------------------------------------------ Prediction.at
def _pred():
    return Prediction("n1", predicted=[CodeScore("401.9", "HTN", 0.9), CodeScore("428.0", "CHF", 0.4)],
                      scores={"401.9": 0.9, "428.0": 0.4, "584.9": 0.1}, n_tokens=12, evidence=[Span(0, 5, 0.3)],
                      code_phrases={"401.9": [Span(0, 5, 0.8)], "428.0": [Span(6, 9, 0.2)]})


def test_at_recomputes_predicted_and_keeps_the_rest():
    p = _pred()
    hi = p.at(0.5)
    assert [(c.code, c.description, c.score) for c in hi.predicted] == [("401.9", "HTN", 0.9)]
    assert set(hi.code_phrases) == {"401.9"} and hi.evidence == p.evidence and hi.n_tokens == 12
    assert hi.scores == p.scores and hi.scores is not p.scores
    lo = p.at(0.05, descriptions={"584.9": "ARF"})
    assert [(c.code, c.description) for c in lo.predicted] == [("401.9", "HTN"), ("428.0", "CHF"), ("584.9", "ARF")]
    assert set(lo.code_phrases) == {"401.9", "428.0"}       # a newly predicted code has no evidence yet
    assert p.at(0.4).predicted == hi.predicted                # strictly above the threshold, as everywhere
    assert [c.code for c in p.predicted] == ["401.9", "428.0"] and set(p.code_phrases) == {"401.9", "428.0"}


def test_at_single_label_and_bad_thresholds():
    tied = Prediction("n", scores={"V45.81": 0.4, "038.9": 0.4, "401.9": 0.2})
    assert [c.code for c in tied.at(0.9, single_label=True).predicted] == ["V45.81"]  # ties: label order
    assert tied.at(0.9).predicted == []
    for bad in (1.5, -0.1, math.nan):
        with pytest.raises(ConfigError, match=r"--threshold must be a number in \[0, 1\]"):
            tied.at(bad)
    err = Prediction("x", error="note 'x': empty")
    assert err.at(0.1) == err and err.at(0.1) is not err


def test_at_gives_what_predict_gives_at_that_threshold(predictor, demo_data):
    import pandas as pd

    texts = pd.read_parquet(demo_data / "test.parquet")["text"].head(4).tolist()
    titles = dict(zip(predictor.labels.codes, predictor.labels.descriptions))
    base = predictor.predict(texts, top_k=None, threshold=1.0)   # nothing predicted, every score kept
    for t in (0.0, 0.05, 0.2, 0.5, predictor.threshold):
        want = predictor.predict(texts, top_k=None, threshold=t)
        got = [b.at(t, single_label=predictor.single_label, descriptions=titles) for b in base]
        assert [g.predicted for g in got] == [w.predicted for w in want], t
    assert any(w.predicted for w in predictor.predict(texts, top_k=None, threshold=0.05))  # the test can fail
