"""Measure what authenticating the master-borglet channel costs: HMAC signing against mutual TLS.

    python -m bench.channel [--requests 300]

Prints the median and p99, in microseconds, of: signing and checking a sync body of 10 and of
100 tasks (reference/channel.py); one POST of a 100-task sync over a kept-alive loopback
connection to a uvicorn server, plain, signed, and over mutual TLS; and one such request on a
new mutual-TLS connection (handshake included), as a master pays after every reconnect.
The TLS certificates (a cell CA, a server and a client certificate, P-256) are made with the
`cryptography` package.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

from bench.stats import percentile
from reference import channel
from reference.ports import free_port

MACHINE = "machine0"


def sync_body(tasks: int) -> bytes:
    """A sync of `tasks` tasks as the poller sends it."""
    spec = {
        "job": "alice/web", "index": 0, "incarnation": 0, "bns": "0.web.alice.local.minborg",
        "command": ["python", "-m", "examples.hello_world.server"], "env": {"MODE": "prod"},
        "port": 31000, "request": {"cpu": 100, "ram": 67108864}, "priority": 200,
        "restart_policy": "always", "health_check": {"path": "/healthz", "interval_s": 1.0},
    }  # fmt: skip
    listed = [{**spec, "task_id": f"alice/web/{i}#0", "index": i} for i in range(tasks)]
    body = {"master": "master0", "epoch": 7, "seq": 1234, "revision": 99, "tasks": listed}
    return json.dumps(body, separators=(",", ":")).encode()


def timed(step: Callable[[], object], n: int) -> list[float]:
    """Microseconds per call of `step`, n calls after a few to warm up."""
    for _ in range(min(20, n)):
        step()
    out = []
    for _ in range(n):
        began = time.perf_counter()
        step()
        out.append((time.perf_counter() - began) * 1e6)
    return out


def sign_and_verify(key: bytes, body: bytes) -> None:
    target = b"/v1/sync"
    headers = channel.sign(key, "POST", target, body, MACHINE, time.time())
    assert channel.verify(key, "POST", target, headers, body, MACHINE, time.time()) is None


def make_certs(directory: Path) -> dict[str, str]:
    """A CA, and a server and a client certificate it signed, as PEM files in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def write(stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        (directory / f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(name("cell CA")).issuer_name(name("cell CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    write("ca", ca_key, ca)
    for stem, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder().subject_name(name(stem)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )  # fmt: skip
        write(stem, key, cert)
    return {stem: str(directory / stem) for stem in ("ca", "server", "client")}


def serve(app: object, port: int, **ssl_args: object) -> uvicorn.Server:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **ssl_args
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.05)
    raise RuntimeError(f"the server on {port} did not start")


def app() -> FastAPI:
    made = FastAPI()

    @made.post("/v1/sync")
    async def sync(request: Request) -> Response:
        await request.body()
        return Response(content=b"{}", media_type="application/json")

    return made


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args(argv)
    n = args.requests
    key = bytes(range(32))
    results: dict[str, list[float]] = {}
    for tasks in (10, 100):
        body = sync_body(tasks)
        results[f"sign+verify, {tasks} tasks ({len(body)} B)"] = timed(
            lambda b=body: sign_and_verify(key, b), 2000
        )
    body = sync_body(100)
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp))
        plain_port, signed_port, tls_port = free_port(), free_port(), free_port()
        servers = [
            serve(app(), plain_port),
            serve(channel.Verifier(app(), key, MACHINE), signed_port),
            serve(
                app(), tls_port, ssl_keyfile=certs["server"] + ".key", ssl_certfile=certs["server"] + ".pem",
                ssl_ca_certs=certs["ca"] + ".pem", ssl_cert_reqs=ssl.CERT_REQUIRED,
            ),
        ]  # fmt: skip
        tls = ssl.create_default_context(cafile=certs["ca"] + ".pem")
        tls.load_cert_chain(certs["client"] + ".pem", certs["client"] + ".key")
        headers = {"content-type": "application/json"}
        with (
            httpx.Client() as plain,
            httpx.Client(auth=channel.ClientAuth(key)) as signed,
            httpx.Client(verify=tls) as mtls,
        ):

            def post(client: httpx.Client, url: str, extra: dict[str, str]) -> None:
                assert (
                    client.post(url, content=body, headers={**headers, **extra}).status_code == 200
                )

            results["kept-alive POST, plain HTTP"] = timed(
                lambda: post(plain, f"http://127.0.0.1:{plain_port}/v1/sync", {}), n
            )
            results["kept-alive POST, signed"] = timed(
                lambda: post(
                    signed, f"http://127.0.0.1:{signed_port}/v1/sync", channel.to_machine(MACHINE)
                ),
                n,
            )
            results["kept-alive POST, mutual TLS"] = timed(
                lambda: post(mtls, f"https://localhost:{tls_port}/v1/sync", {}), n
            )

            def fresh() -> None:
                with httpx.Client(verify=tls) as client:
                    post(client, f"https://localhost:{tls_port}/v1/sync", {})

            def fresh_signed() -> None:
                # No TLS context to build: the plain client's default one loads a CA bundle (~40 ms).
                with httpx.Client(auth=channel.ClientAuth(key), verify=False) as client:
                    post(
                        client,
                        f"http://127.0.0.1:{signed_port}/v1/sync",
                        channel.to_machine(MACHINE),
                    )

            results["new connection + POST, signed"] = timed(fresh_signed, n)
            results["new connection + POST, mutual TLS (handshake)"] = timed(fresh, n)
        for server in servers:
            server.should_exit = True
    for what, figures in results.items():
        print(
            f"{what:55s} p50 {percentile(figures, 0.5):9.1f} us   p99 {percentile(figures, 0.99):9.1f} us"
        )


if __name__ == "__main__":
    main()
