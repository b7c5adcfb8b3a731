"""The Locust users' task sets: the documented weights, and submit-only means only submissions."""

from __future__ import annotations

from loadtests.jobs import READ_JOBS_USER, read_job_keys
from loadtests.locustrun import LOCUSTFILES, REPO, Target
from loadtests.users import ControlPlaneUser, ReadOnlyUser, SubmitOnlyUser, small_job


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


def test_read_only_user_has_the_mix_reads_with_their_weights_and_no_writes() -> None:
    def counts(user: type) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in names(user):
            out[name] = out.get(name, 0) + 1
        return out

    mix = counts(ControlPlaneUser)
    reads = counts(ReadOnlyUser)
    assert reads == {k: v for k, v in mix.items() if k not in ("submit", "kill")}
    assert sum(reads.values()) == 80


def test_read_jobs_are_one_users() -> None:
    keys = read_job_keys(3)
    assert keys == [f"{READ_JOBS_USER}/r0", f"{READ_JOBS_USER}/r1", f"{READ_JOBS_USER}/r2"]


def test_every_target_has_a_locustfile() -> None:
    for target in Target:
        assert (REPO / LOCUSTFILES[target]).exists()
