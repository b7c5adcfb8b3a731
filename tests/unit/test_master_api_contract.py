"""The master's API contract, on an app whose replica never started: undeclared query parameters are refused, and /openapi.json says every body and status exactly."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from reference.master.access import AccessConfig, hash_token
from reference.master.api import make_app
from reference.master.leader import LeaderConfig
from reference.master.machines import MachineBody
from reference.master.replica import Replica

with warnings.catch_warnings():  # starlette's TestClient warns about its httpx
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


ADMIN_TOKEN = "mbt_contract-test-admin"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # Never started: no etcd, no leader. Reads need allow_stale; writes answer 503 once validated.
    replica = Replica(
        name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
        config=LeaderConfig(cell_name="c", master_name="m0"),
    )  # fmt: skip
    app = make_app(replica, AccessConfig(admin_hash=hash_token(ADMIN_TOKEN)))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        yield c


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/healthz?verbose=1"),
        ("GET", "/metrics?verbose=1"),
        ("GET", "/v1/jobs?allow_stale=1&verbose=1"),
        ("GET", "/v1/jobs/alice/web/tasks/0/logs?allow_stale=1&verbose=1"),
        ("POST", "/v1/jobs?verbose=1"),
        ("DELETE", "/v1/machines/m1?verbose=1"),
        ("GET", "/ui?verbose=1"),
    ],
)
def test_an_undeclared_query_parameter_is_refused_by_name(client: TestClient, method: str, path: str) -> None:
    r = client.request(method, path)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["field"] == "query.verbose"
    assert error["error"].startswith("unknown query parameter; this operation takes: ")


def test_the_refusal_lists_what_the_operation_takes(client: TestClient) -> None:
    r = client.get("/v1/jobs", params={"usr": "alice", "allow_stale": "1"})
    assert r.json()["detail"] == [
        {
            "field": "query.usr",
            "error": "unknown query parameter; this operation takes: allow_stale, min_revision, since, timeout_s, user, watch",
        }
    ]


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/machines", "/v1/jobs/alice/web/tasks"])
@pytest.mark.parametrize(("timeout_s", "refused"), [("0", True), ("3600", False), ("3601", True), ("30", False)])
def test_a_timeout_outside_its_bound_is_refused_whether_or_not_the_read_watches(
    client: TestClient, path: str, timeout_s: str, refused: bool
) -> None:
    r = client.get(path, params={"allow_stale": "1", "timeout_s": timeout_s})
    if refused:
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == [{"field": "timeout_s", "error": "must be above 0 and at most 3600"}]
    else:
        assert r.status_code != 422, r.text


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/machines", "/v1/jobs/alice/web/tasks", "/v1/events"])
def test_a_negative_since_is_refused_whether_or_not_the_read_watches(client: TestClient, path: str) -> None:
    r = client.get(path, params={"allow_stale": "1", "since": "-1"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [{"field": "since", "error": "must be 0 or more"}]


@pytest.mark.parametrize(
    ("capacity", "field", "error"),
    [
        ({"cpu": 0.5, "ram": "1GiB"}, "capacity.cpu",
         'a number here is milli-CPU and must be whole, not 0.5; write 0.5 cores as the string "0.5" or "500m"'),
        ({"cpu": 4000, "ram": -1}, "capacity.ram", "must not be negative, not -1"),
        ({"cpu": 4000}, "capacity", "capacity lacks ram: cpu and ram are required"),
    ],
)  # fmt: skip
def test_a_capacity_refused_names_its_figure(client: TestClient, capacity: dict[str, Any], field: str, error: str) -> None:
    r = client.post("/v1/machines", json={"name": "m1", "address": "http://127.0.0.1:1", "capacity": capacity})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [{"field": field, "error": error}]


def test_a_capacity_cpu_written_as_a_whole_float_is_milli_cpu(client: TestClient) -> None:
    r = client.post("/v1/machines", json={"name": "m1", "address": "http://127.0.0.1:1", "capacity": {"cpu": 4000.0, "ram": 1024}})
    assert r.status_code == 503, r.text  # read, then no leader to write it


@pytest.mark.parametrize("address", ["http://127.0.0.1:7001", "https://m1.example:443/", "http://[::1]:80", "http://10.0.0.1:80/m17"])
def test_a_machine_address_is_a_url(address: str) -> None:
    assert MachineBody(name="m1", address=address, capacity="cpu=4,ram=1GiB").address == address
    assert urlsplit(address).hostname  # urlsplit raises for an address no client could read


@pytest.mark.parametrize("address", ["http://[&", "http://[:]:80", "http://[1.2]", "http://a:0", "http://a:65536", "http://u@host:80"])
def test_a_machine_address_that_is_no_url_is_refused(client: TestClient, address: str) -> None:
    r = client.post("/v1/machines", json={"name": "m1", "address": address, "capacity": "cpu=4,ram=1GiB"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == "address"


@pytest.mark.parametrize("body", [{}, {"name": "alice\n"}, {"name": "alice", "admin": True}])
def test_a_user_body_outside_its_schema_is_refused(client: TestClient, body: dict[str, Any]) -> None:
    assert client.post("/v1/users", json=body).status_code == 422


@pytest.mark.parametrize(
    "path",
    [
        "/healthz",
        "/v1/jobs?allow_stale=true&user=alice",
        "/v1/jobs?allow_stale=1&min_revision=",  # ReadGate reads an empty floor as none
        "/v1/cell?allow_stale=yes",
        "/v1/machines?allow_stale=on",
        "/v1/quotas?allow_stale=1",
    ],
)
def test_declared_parameters_and_the_freshness_controls_are_taken(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200, client.get(path).text


def test_a_write_with_only_declared_parameters_reaches_the_forwarder(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"name": "web"})
    assert r.status_code == 503  # no leader in a cell that never started


# --- the OpenAPI document -------------------------------------------------------------------

ERROR = {"$ref": "#/components/schemas/ErrorBody"}


@pytest.fixture(scope="module")
def doc(client: TestClient) -> dict[str, Any]:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method, path, op


def test_every_422_is_the_field_error_body_and_fastapis_own_is_gone(doc: dict[str, Any]) -> None:
    for method, path, op in operations(doc):
        assert op["responses"]["422"]["content"] == {"application/json": {"schema": ERROR}}, (method, path)
    assert doc["components"]["schemas"]["ErrorBody"]["properties"]["detail"]["items"] == {
        "$ref": "#/components/schemas/FieldError"
    }
    assert set(doc["components"]["schemas"]["FieldError"]["required"]) == {"field", "error"}
    assert not {"HTTPValidationError", "ValidationError"} & set(doc["components"]["schemas"])


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("post", "/v1/jobs", {"200", "201", "401", "403", "404", "409", "413", "422", "429", "503"}),
        ("patch", "/v1/jobs/{user}/{name}", {"200", "401", "403", "404", "413", "422", "429", "503"}),
        ("delete", "/v1/jobs/{user}/{name}", {"200", "401", "403", "404", "422", "429", "503"}),
        ("delete", "/v1/jobs/{user}/{name}/tasks/{index}", {"200", "401", "403", "404", "409", "422", "429", "503"}),
        ("get", "/v1/jobs/{user}/{name}", {"200", "401", "404", "422", "429", "503"}),
        ("get", "/v1/jobs", {"200", "401", "410", "422", "429", "503"}),
        ("get", "/v1/jobs/{user}/{name}/tasks/{index}/logs", {"200", "401", "404", "422", "429", "502", "503"}),
        ("post", "/v1/machines", {"201", "401", "403", "409", "413", "422", "429", "503"}),
        ("delete", "/v1/machines/{name}", {"200", "401", "403", "404", "409", "422", "429", "503"}),
        ("get", "/v1/bns/{bns_name}", {"200", "401", "404", "422", "429", "503"}),
        ("get", "/v1/quotas/{user}/{band}", {"200", "401", "404", "422", "429", "503"}),
        ("put", "/v1/quotas/{user}/{band}", {"200", "401", "403", "413", "422", "429", "503"}),
        ("delete", "/v1/quotas/{user}/{band}", {"200", "401", "403", "404", "422", "429", "503"}),
        ("get", "/readyz", {"200", "422", "503"}),
        ("get", "/v1/whatif", {"200", "401", "404", "422", "429", "503"}),
    ],
)
def test_every_status_an_operation_answers_is_declared(
    doc: dict[str, Any], method: str, path: str, statuses: set[str]
) -> None:
    responses = doc["paths"][path][method]["responses"]
    assert set(responses) == statuses
    for status in statuses - {"200", "201"}:
        (media_type,) = responses[status]["content"]
        assert media_type == "application/json"
    for status in {"503", "429"} & statuses:
        assert "Retry-After" in responses[status]["headers"]
    if "401" in statuses:
        assert "WWW-Authenticate" in responses["401"]["headers"]
        assert doc["paths"][path][method]["security"] == [{"bearer": []}]


def test_every_read_declares_the_freshness_controls_and_503(doc: dict[str, Any]) -> None:
    for method, path, op in operations(doc):
        if method == "get" and path.startswith("/v1/"):
            names = {p["name"] for p in op["parameters"] if p["in"] == "query"}
            assert {"min_revision", "allow_stale"} <= names, path
            assert "503" in op["responses"], path


def test_a_watch_gone_too_far_back_says_the_floor(doc: dict[str, Any]) -> None:
    gone = doc["paths"]["/v1/events"]["get"]["responses"]["410"]["content"]["application/json"]["schema"]
    assert gone == {"$ref": "#/components/schemas/GoneBody"}
    assert "floor" in doc["components"]["schemas"]["GoneBody"]["required"]


def test_text_answers_are_declared_as_text(doc: dict[str, Any]) -> None:
    def ok(path: str) -> set[str]:
        return set(doc["paths"][path]["get"]["responses"]["200"]["content"])

    assert ok("/metrics") == {"text/plain"}
    assert ok("/v1/jobs/{user}/{name}/tasks/{index}/logs") == {"text/plain"}
    assert ok("/v1/events") == {"text/event-stream"}
    assert ok("/v1/jobs") == ok("/v1/machines") == {"application/json", "text/event-stream"}
    assert ok("/ui") == {"text/html"}


@pytest.mark.parametrize(
    ("method", "path", "model"),
    [("post", "/v1/jobs", "JobSpec"), ("patch", "/v1/jobs/{user}/{name}", "JobUpdate"), ("post", "/v1/machines", "MachineBody"),
     ("post", "/v1/users", "UserBody")],
)  # fmt: skip
def test_request_bodies_are_typed(doc: dict[str, Any], method: str, path: str, model: str) -> None:
    body = doc["paths"][path][method]["requestBody"]
    assert body == {"required": True, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}}}
    schema = doc["components"]["schemas"][model]
    assert schema["type"] == "object" and schema["additionalProperties"] is False


def test_the_job_body_describes_quantities_as_written(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    job = schemas["JobSpec"]
    assert set(job["required"]) == {"name", "user", "command"}
    cpu = job["properties"]["request"]["properties"]["cpu"]["anyOf"]
    assert {"type": "number", "minimum": 0, "maximum": 1024} in cpu  # cores, at most the bound
    assert any(alt.get("type") == "string" for alt in cpu)  # "250m"
    assert {"type": "string", "enum": ["best_effort", "batch", "production", "monitoring"]} in job["properties"]["priority"]["anyOf"]
    # Every reference in the document resolves inside it (no pydantic "#/$defs/...").
    refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(doc))
    assert refs and all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)


def test_the_quota_body_and_path_are_the_handlers_rules(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/v1/quotas/{user}/{band}"]["put"]
    assert op["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/QuotaBody"}
    body = doc["components"]["schemas"]["QuotaBody"]
    assert body["type"] == "object" and body["propertyNames"] == {"pattern": "^[a-z][a-z0-9_]*$"}
    # A quota spans the cell: 100,000 machines of 1,024 cores each.
    assert {"type": "number", "minimum": 0, "maximum": 102_400_000} in body["properties"]["cpu"]["anyOf"]
    params = {p["name"]: p["schema"] for p in op["parameters"]}
    assert params["band"]["enum"] == ["batch", "production", "monitoring"]  # best effort is never limited
    assert re.fullmatch(params["user"]["pattern"], "*") and not re.fullmatch(params["user"]["pattern"], "a*")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [("/v1/quotas/alice/best_effort", {"cpu": 1}, "band"), ("/v1/quotas/alice/gold", {"cpu": 1}, "band"),
     ("/v1/quotas/al%21ce/batch", {"cpu": 1}, "user"), ("/v1/quotas/alice/batch", {"cpu": "lots"}, "cpu"),
     ("/v1/quotas/alice/batch", {"ram": -1}, "ram"), ("/v1/quotas/alice/batch", ["cpu"], "")],
)  # fmt: skip
def test_a_quota_refused_names_its_field_before_any_write(client: TestClient, path: str, body: Any, field: str) -> None:
    r = client.put(path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field


def test_a_valid_quota_reaches_the_writer(client: TestClient) -> None:
    assert client.put("/v1/quotas/*/batch", json={"cpu": "100", "ram": "512GiB"}).status_code == 503  # no leader
    assert client.delete("/v1/quotas/alice/batch").status_code == 503


# --- Starlette's own refusals in the API's shape ----------------------------------------------


def test_a_body_that_is_not_json_at_all_is_422(client: TestClient) -> None:
    r = client.post("/v1/jobs", content=b"\xff\xfe]", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["error"].startswith("the body cannot be read as JSON")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("OPTIONS", "/v1/jobs", "GET, POST"), ("POST", "/v1/jobs/a/b", "DELETE, GET, PATCH, PUT"), ("POST", "/v1/machines/m1", "DELETE")],
)
def test_a_405_names_every_method_of_the_path(client: TestClient, method: str, path: str, allow: str) -> None:
    r = client.request(method, path)
    assert r.status_code == 405
    assert r.headers["allow"] == allow
    assert r.json() == {"detail": [{"field": "", "error": "Method Not Allowed"}]}


@pytest.mark.parametrize("floor", ["+5", "1_000", "\u0661", "x"])
def test_a_revision_floor_is_plain_digits(client: TestClient, floor: str) -> None:
    r = client.get("/v1/jobs", params={"min_revision": floor, "allow_stale": "1"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "min_revision"
