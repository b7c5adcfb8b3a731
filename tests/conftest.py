"""Marks the real-process test modules whose figures or deadlines need the host to themselves.

The integration env runs the other integration and security tests on two workers, then these,
one at a time (tox.ini): each asserts a latency, a rate or a deadline measured on the host (a
flood's p99, a rate limit's burst, a failover inside a lease, a partition's window, back-off
counts in a time), or drives a browser or the container engine, and another cell on a second
worker would move what it measures rather than what it tests.
"""

from __future__ import annotations

import pytest

SERIAL_MODULES = frozenset(
    {
        "tests/security/test_wire_limits.py",
        "tests/integration/test_access.py",
        "tests/integration/test_borglet_clock_skew.py",
        "tests/integration/test_channel.py",
        "tests/integration/test_crash_loops.py",
        "tests/integration/test_docker_runtime.py",
        "tests/integration/test_elastic.py",
        "tests/integration/test_introspection.py",
        "tests/integration/test_link_shards.py",
        "tests/integration/test_master.py",
        "tests/integration/test_master_freshness.py",
        "tests/integration/test_nemesis.py",
        "tests/integration/test_netns.py",
        "tests/integration/test_no_double_running.py",
        "tests/integration/test_overload.py",
        "tests/integration/test_replica_cpu.py",
        "tests/integration/test_replica_cut_from_borglets.py",
        "tests/integration/test_sigma.py",
        "tests/integration/test_store.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::", 1)[0] in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
