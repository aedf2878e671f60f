"""The in-process service the hostile rounds share: the tests' tiny checkpoint behind `create_app`, one per module."""

import pandas as pd
import pytest

LOCAL = "http://127.0.0.1:8000"   # a Host the service accepts (it is bound to loopback)


@pytest.fixture(scope="module")
def predictor(tiny_run):
    from clinicode.predict import Predictor

    return Predictor.from_checkpoint(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def note(demo_data):
    return str(pd.read_parquet(demo_data / "test.parquet")["text"].iloc[0])


@pytest.fixture(scope="module")
def client(predictor):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from clinicode.config import ServeConfig
    from clinicode.serve import create_app

    with TestClient(create_app(predictor, limits=ServeConfig(batch_wait_ms=1)), base_url=LOCAL) as c:
        yield c
