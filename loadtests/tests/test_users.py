"""The Locust users' task sets: the documented weights, and submit-only means only submissions."""

from __future__ import annotations

from loadtests.users import ControlPlaneUser, SubmitOnlyUser, small_job


def names(user: type) -> list[str]:
    return [t.__name__ for t in user.tasks]


def test_submit_only_user_does_nothing_else() -> None:
    assert set(names(SubmitOnlyUser)) == {"submit"}


def test_control_plane_weights_add_up_to_the_documented_mix() -> None:
    counts: dict[str, int] = {}
    for name in names(ControlPlaneUser):
        counts[name] = counts.get(name, 0) + 1
    assert sum(counts.values()) == 100
    writes = counts["submit"] + counts["kill"]
    assert writes == 20  # reads 80%, writes 20%, as the module docstring says


def test_small_job_stays_pending_by_construction() -> None:
    job = small_job("u", "j")
    assert job["task_count"] == 1
    assert job["constraints"] == [{"attr": "rack", "op": "eq", "value": "none-loadtest"}]
