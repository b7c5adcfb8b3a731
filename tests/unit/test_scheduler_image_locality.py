"""Image locality: a machine whose engine holds a job's container image (as its borglet reports)
holds the job's package, so package locality prefers it (scheduler/terms.package_holders)."""

import pytest

from reference.jobspec import parse_job
from reference.master.cell import MachineInfo, machine_images
from reference.scheduler import SchedulerConfig, plan_for
from reference.scheduler.adapter import snapshot_from_state
from reference.scheduler.terms import package_holders
from spec.fmap import FMap
from spec.model import CellState, Job, Resources, Task, TaskId, TaskState
from tests.unit.scheduler_cells import machine


@pytest.mark.parametrize(
    ("placed", "images", "held"),
    [
        ({}, {}, {}),  # nothing runs, no engine reported anything
        ({"a": {"web-v1"}}, {}, {"a": {"web-v1"}}),  # a job's task runs on a: its package is there
        ({}, {"b": ["minborg/hello_world"]}, {"b": {"minborg/hello_world"}}),  # b's engine holds the image
        # both sources on one machine are one set; a machine with neither is left out
        ({"a": {"p"}}, {"a": ["i"], "c": []}, {"a": {"p", "i"}}),
    ],
)
def test_package_holders(placed, images, held):
    assert package_holders(placed, images) == {m: frozenset(p) for m, p in held.items()}


def test_a_jobs_image_is_its_package_unless_it_names_one():
    doc = {"name": "web", "user": "u", "command": ["serve"], "image": "minborg/hello_world"}
    assert parse_job(doc).to_spec_job().package == "minborg/hello_world"
    assert parse_job({**doc, "package": "web-v2"}).to_spec_job().package == "web-v2"
    assert parse_job({k: v for k, v in doc.items() if k != "image"}).to_spec_job().package == ""


def test_machine_images_keeps_the_machines_that_reported_some():
    infos = {"a": MachineInfo(images=("minborg/base",)), "b": MachineInfo()}
    assert machine_images(infos) == {"a": ("minborg/base",)}


def test_the_scheduler_prefers_the_machine_holding_the_image():
    # worst_fit, three empty machines: every one scores the same, 100 * mean leftover; the
    # locality weight (5 points) on c, whose engine holds the image, decides.
    job = Job("u", "web", 100, 1, Resources.of(cpu=100), package="minborg/hello_world")
    task = Task(TaskId("u/web", 0), TaskState.PENDING, None, 100, Resources.of(cpu=100))
    machines = FMap({m: machine(m) for m in ("a", "b", "c")})
    state = CellState(machines=machines, jobs=FMap({job.key: job}), tasks=FMap({task.id: task}))
    images = {"c": ("minborg/hello_world",), "a": ("minborg/base",)}
    assert snapshot_from_state(state, images=images).packages["c"] == frozenset({"minborg/hello_world"})
    cfg = SchedulerConfig(policy="worst_fit", spread_weight=0.0)
    (placement,) = plan_for(state, cfg, images=images).placements
    assert placement.machine == "c"


def test_a_machines_images_survive_its_record_in_etcd():
    from reference.master import codec

    info = MachineInfo(address="http://m", images=("minborg/base", "minborg/hello_world"))
    assert codec.decode_machine(codec.encode_machine(machine("m"), info))[1] == info
    plain = MachineInfo(address="http://m")
    assert b"images" not in codec.encode_machine(machine("m"), plain)  # no field for a process-runtime machine
    assert codec.decode_machine(codec.encode_machine(machine("m"), plain))[1] == plain
