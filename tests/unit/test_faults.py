"""The fault catalogue names every fault the harness and the chaos experiments inject, and only spec actions that exist.

chaos/ is read as source (its modules need the campaigns extra to import): the functions of
chaos/actions.py, the soak's kinds, the experiments' providers and the recorded fault kinds.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest
from hypothesis.stateful import RULE_MARKER

from harness.coverage import Coverage
from harness.faults import CATALOGUE, CHAOS, FAULTS, HARNESS, RECORDED_AS, STEPS, injected_by
from harness.machine import CellMachine
from spec.actions import ACTIONS as CELL_ACTIONS
from spec.protocol_actions import ACTIONS as PROTOCOL_ACTIONS

ROOT = Path(__file__).resolve().parents[2]
CHAOS_DIR = ROOT / "chaos"
# The harness's rules that drive the API (jobs and waits), not faults.
# Drains are an admin's maintenance, judged by the spec's drain actions, not faults.
OPERATION_RULES = {"submit", "burst", "change_jobs", "squeeze", "wait", "settle", "alloc_set", "delete_alloc_set",
                   "new_environments", "new_commands", "drain_machine", "uncordon_machine"}
# chaos/actions.py functions that run an experiment rather than inject or undo a fault.
CHAOS_PLUMBING = {"start_load", "stop_load", "mark", "heal"}


def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _assigned(path: Path, name: str) -> object:
    for node in _module(path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and len(value.args) == 1:  # frozenset({...})
                value = value.args[0]
            return ast.literal_eval(value)
    raise AssertionError(f"{path.name} assigns no {name}")


def _experiment_providers() -> list[tuple[str, str, dict]]:
    """(module, func, arguments) of every python provider of chaos/experiments/*.json."""
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "python":
                found.append((node["module"], node["func"], node.get("arguments", {})))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted((CHAOS_DIR / "experiments").glob("*.json")):
        walk(json.loads(path.read_text()))
    return found


def test_every_fault_names_spec_actions_that_exist() -> None:
    known = set(CELL_ACTIONS) | set(PROTOCOL_ACTIONS)
    for fault in CATALOGUE:
        assert fault.spec, f"{fault.name} exercises no spec action"
        assert set(fault.spec) <= known, f"{fault.name}: {set(fault.spec) - known} are not spec actions"
        assert fault.description.endswith(".") and fault.by


def test_names_are_unique_and_undos_are_not_faults() -> None:
    assert len(FAULTS) == len(CATALOGUE)
    undos = [step for f in CATALOGUE for step in f.undo]
    assert len(set(undos)) == len(undos) and not set(undos) & set(FAULTS)
    assert STEPS == set(FAULTS) | set(undos)


def test_every_harness_fault_rule_is_a_catalogue_fault() -> None:
    rules = {name for name, f in inspect.getmembers(CellMachine) if getattr(f, RULE_MARKER, None) is not None}
    assert OPERATION_RULES <= rules
    assert rules - OPERATION_RULES == {f.name for f in injected_by(HARNESS)}


def test_every_chaos_action_is_a_catalogue_fault_or_its_undo() -> None:
    functions = {n.name for n in _module(CHAOS_DIR / "actions.py").body if isinstance(n, ast.FunctionDef)}
    faults = injected_by(CHAOS)
    steps = {f.name for f in faults} | {step for f in faults for step in f.undo}
    assert functions - CHAOS_PLUMBING == steps


def test_the_soak_draws_catalogue_faults() -> None:
    kinds = _assigned(CHAOS_DIR / "soak.py", "KINDS")
    assert set(kinds) == {f.name for f in injected_by(CHAOS)}


def test_the_experiments_call_chaos_functions_that_exist() -> None:
    defined = {
        module: {n.name for n in _module(CHAOS_DIR / f"{module.split('.')[1]}.py").body if isinstance(n, ast.FunctionDef)}
        for module in ("chaos.actions", "chaos.probes")
    }
    for module, func, _ in _experiment_providers():
        if module in defined:
            assert func in defined[module], f"{module}.{func} is not defined"


def test_chaos_records_and_names_each_fault_by_its_catalogue_name() -> None:
    """One name from the catalogue to events.jsonl and the experiment files: every `fault=` chaos
    records and every fault an experiment marks is a catalogue name, each experiment step that
    injects a fault is named as it, and earlier runs' names are left to the alias table."""
    recorded: set[str] = set()
    kebab: set[str] = set()
    for path in CHAOS_DIR.glob("*.py"):
        for node in ast.walk(_module(path)):
            if isinstance(node, ast.keyword) and node.arg == "fault" and isinstance(node.value, ast.Constant):
                recorded.add(node.value.value)
            if path.name != "events.py" and isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[a-z]+(-[a-z]+)+", node.value):
                kebab.add(node.value)
    recorded |= {args["fault"] for _, _, args in _experiment_providers() if "fault" in args}
    assert recorded and recorded <= set(FAULTS)
    assert not kebab & set(RECORDED_AS), "an earlier run's fault name is written outside chaos/events.py"
    for path in sorted((CHAOS_DIR / "experiments").glob("*.json")):
        for step in json.loads(path.read_text())["method"]:
            func = step.get("provider", {}).get("func")
            if step["type"] == "action" and func in FAULTS:
                assert step["name"] == func, f"{path.name}: the step injecting {func} is named {step['name']!r}"
    failover = [n for n in ast.walk(_module(CHAOS_DIR / "analysis.py")) if isinstance(n, ast.Set)][0]
    assert {e.value for e in failover.elts if isinstance(e, ast.Constant)} <= set(FAULTS)


def test_an_earlier_runs_fault_names_still_load() -> None:
    """events.jsonl of a run recorded before the faults were recorded by name (reports/chaos,
    judged again by `soak --report-only`) reads as the catalogue's names."""
    from chaos import events

    old = [
        {"t": 1.0, "event": "fault-start", "fault": "leader-kill", "master": "master0"},
        {"t": 2.0, "event": "fault-end", "fault": "leader-kill"},
        {"t": 3.0, "event": "fault-start", "fault": "etcd-majority", "members": [1, 2]},
        {"t": 4.0, "event": "fault-end", "fault": "etcd-majority"},
        {"t": 5.0, "event": "fault-start", "fault": "etcd-minority", "members": [1]},
        {"t": 6.0, "event": "fault-start", "fault": "borglet-cut", "machine": "m0"},
    ]
    new = [
        {"t": 1.0, "event": "fault-start", "fault": "kill_leader", "master": "master0"},
        {"t": 2.0, "event": "fault-end", "fault": "kill_leader"},
        {"t": 3.0, "event": "fault-start", "fault": "kill_etcd_members", "members": [1, 2], "majority": True},
        {"t": 4.0, "event": "fault-end", "fault": "kill_etcd_members"},
        {"t": 5.0, "event": "fault-start", "fault": "kill_etcd_members", "members": [1], "majority": False},
        {"t": 6.0, "event": "fault-start", "fault": "cut_borglet", "machine": "m0"},
    ]
    for log in (old, new):
        assert events.fault_windows(log) == [
            ("kill_leader", 1.0, 2.0), (events.ETCD_MAJORITY, 3.0, 4.0),
            ("kill_etcd_members", 5.0, 6.0), ("cut_borglet", 6.0, 6.0),
        ]  # fmt: skip
        assert sorted(events.open_faults(log)) == ["cut_borglet", "kill_etcd_members"]
        assert events.last_start(log, "cut_borglet") == log[-1]
    assert set(RECORDED_AS.values()) <= set(FAULTS)


def test_coverage_counts_only_catalogue_names() -> None:
    c = Coverage()
    c.injected("crash_borglet")
    c.injected("restart_borglet")
    assert c.faults == {"crash_borglet": 1, "restart_borglet": 1}
    with pytest.raises(ValueError, match="harness/faults.py"):
        c.injected("borglet_kill")
