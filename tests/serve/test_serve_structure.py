"""How `clinicode serve` is built (#45): routes are module functions, grouped by module, that reach the service through
a FastAPI dependency; no two serve modules import each other, and its units stay short."""

import ast
import inspect
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from clinicode.config import ServeConfig
from clinicode.serve import Service, create_app
from clinicode.serve.service import current

SERVE = Path(__file__).resolve().parents[2] / "clinicode" / "serve"
LOCAL = "http://127.0.0.1:8000"


def test_every_route_is_a_module_function_of_its_group_not_a_closure(predictor):
    routes = [r for r in create_app(predictor).routes if isinstance(r, APIRoute)]  # on the app's own router
    assert {r.path for r in routes} == {"/health", "/ready", "/metrics", "/v1/predict",
                                        "/fhir/DocumentReference/$analyze"}
    for r in routes:
        endpoint = inspect.unwrap(r.endpoint)
        assert endpoint.__module__.startswith("clinicode.serve.routes."), (r.path, endpoint.__module__)
        assert "<locals>" not in endpoint.__qualname__, (r.path, endpoint.__qualname__)


def test_routes_reach_the_service_through_the_dependency(predictor):
    """Overriding the dependency swaps the state every route sees: a closure over the app's own service would not."""
    app = create_app(predictor, limits=ServeConfig(batch_wait_ms=1))
    failed = Service(ServeConfig())
    failed.failed = RuntimeError("load failed")
    with TestClient(app, base_url=LOCAL) as c:
        assert c.get("/health").json()["status"] == "ok"
        app.dependency_overrides[current] = lambda: failed
        assert c.get("/health").json()["status"] == "failed to load"
        assert c.get("/ready").json() == {"status": "failed to load"}
        r = c.post("/v1/predict", json={"notes": [{"text": "chest pain"}]})
        assert r.status_code == 503 and "could not be loaded" in r.json()["error"]["message"]
        app.dependency_overrides.clear()
        assert c.post("/v1/predict", json={"notes": [{"text": "chest pain"}]}).status_code == 200


def test_no_two_serve_modules_import_each_other():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("clinicode")
    mods = sorted(m for m in graph.modules if m.startswith("clinicode.serve."))
    assert "clinicode.serve.service" in mods and "clinicode.serve.routes.scoring" in mods
    circles = [(a, b) for i, a in enumerate(mods) for b in mods[i + 1:]
               if graph.chain_exists(a, b) and graph.chain_exists(b, a)]
    assert circles == []  # was: serve.app <-> serve.gate (the front middleware named the app's Service)


def test_serve_units_are_short_and_their_docstrings_brief():
    for path in sorted(SERVE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        assert len(source.splitlines()) <= 600, path
        assert len((ast.get_docstring(tree, clean=False) or "").splitlines()) <= 3, path
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 80, f"{path.name}: {node.name}"


@pytest.mark.parametrize("parser", ["h11", "httptools"])
def test_the_timed_protocol_keeps_its_deadlines_over_either_parser(parser):
    pytest.importorskip(parser)
    from clinicode.serve.protocol import _protocol

    cls = _protocol(3.0, 7.0, parser)
    assert (cls.read_timeout, cls.write_timeout) == (3.0, 7.0)
    base = "HttpToolsProtocol" if parser == "httptools" else "H11Protocol"
    assert [k.__name__ for k in cls.__mro__].index(base) > [k.__name__ for k in cls.__mro__].index("_Timed")
    assert cls.send_400_response.__qualname__ == "_Timed.send_400_response"  # the JSON 400, not uvicorn's text
