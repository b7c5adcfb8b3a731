"""The free-port picker: distinct, bindable ports, none of those already promised."""

from __future__ import annotations

import socket

import pytest

from reference import ports


def test_free_ports_are_distinct_and_bindable() -> None:
    chosen = ports.free_ports(6)
    assert len(set(chosen)) == 6
    for port in chosen:
        with socket.socket() as s:
            s.bind((ports.HOST, port))


def test_taken_ports_are_never_chosen() -> None:
    taken = set(ports.free_ports(20))
    chosen = ports.free_ports(10, taken=taken)
    assert len(set(chosen)) == 10 and not taken & set(chosen)
    assert ports.free_port(taken) not in taken


def test_no_port_outside_taken_is_an_oserror() -> None:
    class Everything:
        def __contains__(self, port: object) -> bool:
            return True

        def __len__(self) -> int:
            return 65535

    with pytest.raises(OSError, match="no free port found"):
        ports.free_port(Everything())  # type: ignore[arg-type]
