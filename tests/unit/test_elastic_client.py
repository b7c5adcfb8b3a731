"""The client-side balancer survives a task leaving: a refused connection is retried on another endpoint."""

from __future__ import annotations

import httpx

from reference.client import CellClient, RoundRobin

ENDPOINTS = [{"index": i, "bns": f"{i}.web.demo.local.minborg", "host": "127.0.0.1", "port": 9000 + i} for i in (0, 1)]


def test_a_refused_connection_is_retried_on_another_endpoint() -> None:
    def master(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"endpoints": ENDPOINTS, "revision": 1})

    calls: list[int] = []

    def tasks(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.port or 0)
        if request.url.port == 9000:  # task 0 was stopped: nothing listens there
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, text="hello")

    client = CellClient(["http://m0"], transport=httpx.MockTransport(master))
    balancer = RoundRobin(client, "demo/web", transport=httpx.MockTransport(tasks))
    for _ in range(4):
        endpoint, response = balancer.get("/")
        assert response.status_code == 200 and endpoint.port == 9001
    assert calls == [9000, 9001, 9001, 9001, 9001]  # one refusal, then task 0 is skipped
    balancer.close()
