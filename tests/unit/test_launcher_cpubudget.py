"""A CPU budget per replica: the CFS quota arithmetic, the group paths, and what the cell file and `cell status` keep of it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from reference.cli.render import cpu_cell
from reference.launcher import cpubudget
from reference.launcher.cellfile import CellInfo


@pytest.mark.parametrize(
    ("cores", "period_us", "want"),
    [
        (0.5, 100_000, 50_000),  # 0.5 * 100,000 us
        (0.2, 100_000, 20_000),  # 0.2 * 100,000 us
        (1.5, 100_000, 150_000),  # more than a core: a quota above the period
        (0.5, 250_000, 125_000),  # the group's own period, not the default
        (0.004, 100_000, 1_000),  # 400 us is under the kernel's 1 ms: raised to it
    ],
)
def test_quota_is_cores_times_the_period(cores, period_us, want) -> None:
    assert cpubudget.quota_us(cores, period_us) == want


@pytest.mark.parametrize("cores", [0, -1, math.nan, math.inf, 0.005])
def test_a_budget_that_is_no_budget_is_named(cores) -> None:
    assert cpubudget.budget_problem(cores) is not None


def test_budgets_from_a_hundredth_of_a_core() -> None:
    assert cpubudget.budget_problem(0.01) is None
    assert cpubudget.budget_problem(0.5) is None


def test_group_names_are_per_cell_and_state_dir() -> None:
    a = cpubudget.process_group("local", "/tmp/a", "master0")
    assert a.startswith("minborg/local-") and a.endswith("/master0")
    assert a.rpartition("/")[0] == cpubudget.cell_group("local", "/tmp/a")
    # Two cells both named "local" in different state dirs never share a group.
    assert cpubudget.cell_group("local", "/tmp/b") != cpubudget.cell_group("local", "/tmp/a")
    assert len(cpubudget.cell_group("local", "/tmp/a")) == len("minborg/local-") + 8


def test_group_dirs_are_under_the_launchers_own_group_in_each_hierarchy() -> None:
    own = "9:name=systemd:/\n2:cpuacct:/jobs/x\n1:cpu:/jobs/x\n0::/"
    dirs = cpubudget.group_dirs("minborg/local-1/master0", Path("/cg"), self_cgroup=own)
    assert dirs == {
        "cpu": Path("/cg/cpu/jobs/x/minborg/local-1/master0"),
        "cpuacct": Path("/cg/cpuacct/jobs/x/minborg/local-1/master0"),
    }
    at_root = cpubudget.group_dirs("g", Path("/cg"), self_cgroup="1:cpu:/\n2:cpuacct:/")
    assert at_root["cpu"] == Path("/cg/cpu/g")


def fake_tree(root: Path, group: str, period_us: int = 100_000) -> dict[str, Path]:
    """A group's directories as the kernel would have made them, with the files read."""
    dirs = cpubudget.group_dirs(group, root)
    for path in dirs.values():
        path.mkdir(parents=True)
    (dirs["cpu"] / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    return dirs


def test_limit_cpu_writes_the_quota_and_moves_the_process(tmp_path: Path) -> None:
    group = "minborg/local-1/master0"
    dirs = fake_tree(tmp_path, group)
    assert cpubudget.limit_cpu(4242, group, 0.5, root=tmp_path) == dirs
    assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "50000"
    assert (dirs["cpu"] / "cgroup.procs").read_text() == "4242"
    assert (dirs["cpuacct"] / "cgroup.procs").read_text() == "4242"
    assert cpubudget.quota_of(group, root=tmp_path) == 0.5
    (dirs["cpuacct"] / "cpuacct.usage").write_text("2500000000\n")
    assert cpubudget.cpu_used_s(group, root=tmp_path) == 2.5


def test_no_group_means_no_figures(tmp_path: Path) -> None:
    assert cpubudget.cpu_used_s("minborg/none/master0", root=tmp_path) is None
    assert cpubudget.quota_of("minborg/none/master0", root=tmp_path) is None


def test_remove_groups_removes_the_cell_and_leaves_the_others(tmp_path: Path) -> None:
    for name in ("master0", "master1"):
        cpubudget.group_dirs(f"minborg/a-1/{name}", tmp_path)["cpu"].mkdir(parents=True)
    other = cpubudget.group_dirs("minborg/b-2/master0", tmp_path)["cpu"]
    other.mkdir(parents=True)
    assert cpubudget.remove_groups("minborg/a-1", root=tmp_path) == []
    assert not cpubudget.group_dirs("minborg/a-1", tmp_path)["cpu"].exists()
    assert other.is_dir()


def test_unusable_without_the_controllers(tmp_path: Path) -> None:
    problem = cpubudget.unusable(root=tmp_path)
    assert problem is not None and ("not mounted" in problem or "root" in problem)


def test_the_cell_file_keeps_the_budget_only_when_there_is_one(tmp_path: Path) -> None:
    info = CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {})
    assert "replica_cpu" not in info.to_json()
    budgeted = CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {}, replica_cpu=0.5)
    assert budgeted.to_json()["replica_cpu"] == 0.5
    assert CellInfo.from_json(budgeted.to_json()).replica_cpu == 0.5
    assert CellInfo.from_json(info.to_json()).replica_cpu is None


def test_cpu_cell() -> None:
    assert cpu_cell(12.34, None) == "12.3s"
    assert cpu_cell(1.0, 0.5) == "1.0s (0.5 cores)"
    assert cpu_cell(None, None) == "-"
