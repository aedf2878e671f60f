"""`clinicode serve`: an HTTP scoring service (FastAPI on uvicorn) with JSON and FHIR R4 output.

    GET  /health, /ready                    liveness (the model, counts) and readiness (200 once the model is loaded)
    GET  /metrics                           Prometheus text: requests by route and status, latency, notes scored
    POST /v1/predict[?format=fhir]          {"notes": [{"id", "text", "subject"?}], "top_k", "explain", "threshold"}
    POST /fhir/DocumentReference/$analyze   a DocumentReference (base64 text/plain attachment) -> a FHIR Bundle
    GET  /openapi.json, /docs               the API's description

The address is bound first, then the checkpoint loads in a thread. Requests are scored by one worker thread that
collects the notes of concurrent requests (up to `Limits.batch_notes` notes, waiting at most `Limits.batch_wait_ms`
for more) and scores them in one batch, so many clients sending one note each get close to batch throughput. Each
request's work is bounded by its limits (notes per request, characters per note, body bytes, read time), and at most
`Limits.max_pending` requests are admitted at once. Bad input gets a 4xx with a JSON body saying what was wrong and
how to fix it; note text is never logged and never echoed in a message. Host, Origin and Content-Type are checked
so web pages cannot reach the service. Security model, limits and operation: docs/serve.md.

Its modules, one topic each: `batcher` (micro-batching), `parsing` (request bodies, JSON, notes and options), `gate`
(Host, Origin, Content-Type, Accept, bearer token, the front middleware), `metrics` (Prometheus), `protocol` (the
timed h11 protocol), `app` (`Service`, `create_app` and its routes) and `server` (start-up checks and `run`).
"""

from clinicode.serve.app import Service, create_app
from clinicode.serve.batcher import Batcher, ShuttingDown
from clinicode.serve.gate import ANALYZE, FHIR_JSON, ROUTES, Gate, acceptable, check_content_type, host_name
from clinicode.serve.metrics import Metrics
from clinicode.serve.parsing import (
    BadRequest,
    ClientGone,
    Limits,
    merge_options,
    parse_json,
    parse_options,
    parse_predict,
    query_options,
    read_body,
)
from clinicode.serve.server import bind_socket, check_bind, is_loopback, read_token, run, url_of

__all__ = [
    "ANALYZE", "FHIR_JSON", "ROUTES", "BadRequest", "Batcher", "ClientGone", "Gate", "Limits", "Metrics", "Service",
    "ShuttingDown", "acceptable", "bind_socket", "check_bind", "check_content_type", "create_app", "host_name",
    "is_loopback", "merge_options", "parse_json", "parse_options", "parse_predict", "query_options", "read_body",
    "read_token", "run", "url_of",
]
