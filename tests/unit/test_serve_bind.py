"""A server started on a port it had before waits for the port to be let go (serve.wait_bindable)."""

from __future__ import annotations

import socket
import threading
import time

from reference.serve import wait_bindable


def _held() -> tuple[socket.socket, int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_a_port_let_go_meanwhile_is_waited_for() -> None:
    holder, port = _held()
    threading.Timer(0.5, holder.close).start()
    began = time.monotonic()
    assert wait_bindable("127.0.0.1", port, wait_s=5.0)
    assert 0.4 < time.monotonic() - began < 5.0


def test_a_port_still_held_is_given_up_on_after_the_wait() -> None:
    holder, port = _held()
    try:
        began = time.monotonic()
        assert not wait_bindable("127.0.0.1", port, wait_s=0.5)
        assert time.monotonic() - began >= 0.5
    finally:
        holder.close()


def test_a_free_port_is_bindable_at_once() -> None:
    holder, port = _held()
    holder.close()
    began = time.monotonic()
    assert wait_bindable("127.0.0.1", port, wait_s=5.0)
    assert time.monotonic() - began < 0.3
