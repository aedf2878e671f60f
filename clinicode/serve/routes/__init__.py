"""The service's routes, one module a group: `health` (/health, /ready, /metrics), `scoring` (/v1/predict) and `fhir`
(DocumentReference $analyze). Each module's `add_routes(router)` puts its group on an APIRouter (the app's own)."""
