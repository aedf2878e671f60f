"""`clinicode serve` as a user runs it: a real uvicorn process on a free loopback port, with a bearer token.
Concurrent clients are all answered, bad input gets 4xx answers, and the process's logs never hold note text."""

import os
import signal
import threading

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from tests.helpers import SECRET, serve_process  # noqa: E402

pytestmark = pytest.mark.slow
TOKEN = "e2e-" + "k" * 40


@pytest.fixture(scope="module")
def server(tiny_run, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    tok = tmp / "token"
    tok.write_text(TOKEN)
    os.chmod(tok, 0o600)
    with serve_process(tiny_run, tmp, "--token-file", str(tok), stop=signal.SIGINT) as srv:
        yield srv


def test_real_process_scores_concurrent_clients_and_never_logs_note_text(server):
    base, auth = server["base"], {"Authorization": f"Bearer {TOKEN}"}
    note = f"Patient with {SECRET} chest pain, hypertension and atrial fibrillation; cardiac catheterization done."
    results, errors = [], []

    def client(i):
        with httpx.Client(base_url=base, headers=auth, timeout=60) as c:
            for j in range(3):
                try:
                    r = c.post("/v1/predict", json={"notes": [{"id": f"c{i}-{j}", "text": note}], "explain": 2})
                    results.append((r.status_code, r.json()["results"][0]["id"]))
                except Exception as err:
                    errors.append(repr(err))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 24 and all(s == 200 for s, _ in results)
    assert sorted(rid for _, rid in results) == sorted(f"c{i}-{j}" for i in range(8) for j in range(3))

    fhir = httpx.post(base + "/v1/predict?format=fhir", headers=auth, json={"notes": [{"text": note,
                                                                                       "subject": "Patient/3"}]})
    assert fhir.status_code == 200 and fhir.json()["resourceType"] == "Bundle"
    assert httpx.post(base + "/v1/predict", json={"notes": [{"text": note}]}).status_code == 401  # no token
    bad = httpx.post(base + "/v1/predict", headers={**auth, "content-type": "application/json"},
                     content=b'{"notes": [{"text": "' + SECRET.encode())
    assert bad.status_code == 400 and SECRET not in bad.text
    wrong_type = httpx.post(base + "/v1/predict", headers=auth, json={"notes": [{"text": {"t": SECRET}}]})
    assert wrong_type.status_code == 422 and SECRET not in wrong_type.text
    health = httpx.get(base + "/health").json()
    assert health["status"] == "ok" and health["notes_scored"] >= 25
    assert health["batches"] < health["notes_scored"]  # concurrent one-note requests were batched

    proc = server["proc"]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    logs = server["log"].read_text(encoding="utf-8", errors="replace")
    assert "POST /v1/predict" in logs and " 401" in logs and " 400" in logs  # the access log is on ...
    assert SECRET not in logs                                                # ... and holds no note text
    assert "bearer token required" in logs
