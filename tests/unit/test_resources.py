"""Table tests of the resource quantities: one meaning for CPU (a bare number is cores, 'm' is
milli-CPU), bytes with units, counts, capacity lists, and the forms a person reads."""

import pytest

from reference import resources
from reference.jobspec import parse_request_value
from reference.master.machines import parse_capacity as machine_capacity

# --- one meaning for a CPU figure, whoever reads it -----------------------------------------


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("4000m", 4000),
        ("4", 4000),  # cores -> milli-CPU: 4 * 1000
        ("0.5", 500),  # 0.5 * 1000
        ("250m", 250),
        (" 2 ", 2000),
        (1500, 1_500_000),  # an int is cores too: 1500 * 1000
        (4, 4000),
        (1.5, 1500),  # a float is cores
        (0, 0),
        (".5", 500),  # the forms the job file read with float() stay accepted
        ("5.", 5000),
        ("+2", 2000),
        ("1e3", 1_000_000),
        ("1.5m", 2),  # round(1.5) = 2 milli-CPU
    ],
)
def test_parse_cpu(text, milli):
    assert resources.parse_cpu(text) == milli


@pytest.mark.parametrize(
    "text", ["", "4 cores", "4k", "m", "-1", True, -1, -0.5, "nan", "inf", float("nan"), float("inf"), "1e400", "1_0", None]
)
def test_parse_cpu_rejects(text):
    with pytest.raises(ValueError):
        resources.parse_cpu(text)


@pytest.mark.parametrize(
    ("given", "milli"),
    [
        # The same figure means the same CPU on every path: the job file, a --capacity or
        # --default-quota list, the machines API's string capacity.
        (4, 4000),
        ("4", 4000),
        (0.25, 250),
        ("0.25", 250),
        ("250m", 250),
    ],
)
def test_a_bare_cpu_number_is_cores_everywhere(given, milli):
    assert resources.parse_cpu(given) == milli
    assert parse_request_value("cpu", given) == milli
    assert resources.parse_capacity(f"cpu={given},ram=1GiB")["cpu"] == milli
    assert machine_capacity(f"cpu={given},ram=1GiB")["cpu"] == milli


def test_a_figure_already_in_milli_cpu_is_named_so():
    # A borglet reports its capacity in milli-CPU; the machines API's mapping form takes
    # a number there as it is (cpu_from_milli), while a string is read as written.
    assert resources.cpu_from_milli(1500) == 1500
    assert resources.capacity_from_mapping({"cpu": 4000, "ram": 2**30}) == {"cpu": 4000, "ram": 2**30}
    assert machine_capacity({"cpu": 4000, "ram": "1GiB"})["cpu"] == 4000
    assert machine_capacity({"cpu": "4", "ram": "1GiB"})["cpu"] == 4000  # a string: cores
    assert machine_capacity({"cpu": "0.5", "ram": "1GiB"})["cpu"] == 500
    assert machine_capacity({"cpu": "4000m", "ram": "1GiB"})["cpu"] == 4000


def test_a_capacity_mapping_takes_a_whole_number_written_as_a_float():
    # JSON Schema's integer includes 4000.0: the same figure as 4000, milli-CPU and bytes.
    assert resources.capacity_from_mapping({"cpu": 4000.0, "ram": 1024.0, "gpu": 2.0}) == {"cpu": 4000, "ram": 1024, "gpu": 2}


@pytest.mark.parametrize(
    ("mapping", "error"),
    [
        ({"cpu": 0.5, "ram": 1}, 'cpu: a number here is milli-CPU and must be whole, not 0.5; write 0.5 cores as the string "0.5" or "500m"'),
        ({"cpu": 4000, "ram": 1.5}, 'ram: a number here is bytes and must be whole, not 1.5; write a fraction of a unit as a string, like "1.5GiB"'),
        ({"cpu": 4000, "ram": 1, "gpu": 0.5}, "gpu: a number here is a count and must be whole, not 0.5"),
        ({"cpu": -1, "ram": 1}, "cpu: must not be negative, not -1"),
        ({"cpu": 4000, "ram": -1.0}, "ram: must not be negative, not -1.0"),
        ({"cpu": True, "ram": 1}, "cpu: invalid CPU quantity True"),
    ],
)  # fmt: skip
def test_a_capacity_mapping_refuses_a_fraction_or_a_negative_number(mapping, error):
    with pytest.raises(ValueError) as caught:
        resources.capacity_from_mapping(mapping)
    assert str(caught.value) == error


@pytest.mark.parametrize("value", [True, 1.5, "4000", None])
def test_cpu_from_milli_takes_integers_only(value):
    with pytest.raises(ValueError):
        resources.cpu_from_milli(value)


@pytest.mark.parametrize(
    ("mapping", "missing"), [({"cpu": 4000}, "ram"), ({"ram": "1GiB"}, "cpu"), ({}, "cpu")]
)
def test_capacity_from_mapping_needs_cpu_and_ram(mapping, missing):
    with pytest.raises(ValueError, match=f"lacks {missing}"):
        resources.capacity_from_mapping(mapping)


# --- bytes, counts, lists -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8GiB", 8 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("1G", 1_000_000_000),
        ("1Gi", 1024**3),
        ("100k", 100_000),
        ("1.5KiB", 1536),
        ("268435456", 268435456),
        ("10gib", 10 * 1024**3),  # units are case-insensitive
        (4096, 4096),
    ],
)
def test_parse_bytes(text, size):
    assert resources.parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "8 parsecs", "1.2.3G", "-5", 1.5, "1e400GiB"])
def test_parse_bytes_rejects(text):
    with pytest.raises(ValueError):
        resources.parse_bytes(text)


@pytest.mark.parametrize(("name", "value", "canonical"), [("gpu", "2", 2), ("ports", 100, 100), ("ssd", "0", 0)])
def test_other_resources_are_counts(name, value, canonical):
    assert resources.parse_resource(name, value) == canonical


@pytest.mark.parametrize("value", ["x", "-1", "1.5", None])
def test_parse_count_rejects(value):
    with pytest.raises(ValueError):
        resources.parse_count(value)


def test_parse_capacity_canonical_units():
    assert resources.parse_capacity("cpu=4000m,ram=8GiB,gpu=1,disk=10GiB,ports=100") == {
        "cpu": 4000,
        "ram": 8 * 1024**3,
        "gpu": 1,
        "disk": 10 * 1024**3,
        "ports": 100,
    }


@pytest.mark.parametrize("text", ["ram=1GiB", "cpu=2", "cpu=2,ram=1GiB,gpu=x", "cpu=2,ram"])
def test_parse_capacity_rejects(text):
    with pytest.raises(ValueError):
        resources.parse_capacity(text)


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("", {}),
        ("rack=r1,arch=x86", {"rack": "r1", "arch": "x86"}),
        (" rack = r1 , ", {"rack": "r1"}),
        ("ssd=", {"ssd": ""}),
    ],
)
def test_parse_pairs(text, pairs):
    assert resources.parse_pairs(text) == pairs


def test_parse_pairs_rejects_missing_equals():
    with pytest.raises(ValueError, match="key=value"):
        resources.parse_pairs("rack")


# --- the forms a person reads ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (268435456, "256MiB"),
        (8 * 1024**3, "8GiB"),
        (1000, "1000"),  # under 1 KiB: plain bytes
        (0, "0"),
        (1536, "1.5KiB"),  # 1536 / 1024 = 1.5, not exact: one decimal
        (11_580_000, "11.0MiB"),  # 11580000 / 1048576 = 11.04
    ],
)
def test_format_bytes(size, text):
    assert resources.format_bytes(size) == text


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("cpu", 250, "250m"),
        ("cpu", 1500.0, "1500m"),
        ("ram", 2**30, "1GiB"),
        ("gpu", 2, "2"),
        ("cpu", "-", "-"),  # not a number: shown as it is
        ("cpu", True, "True"),
    ],
)
def test_format_quantity(name, value, text):
    assert resources.format_quantity(name, value) == text


@pytest.mark.parametrize(
    ("values", "text"),
    [
        ({"cpu": 4000, "ram": 8 * 2**30}, "cpu=4000m ram=8GiB"),
        ({"ram_bytes": 2**20, "cpu_milli": 20}, "cpu=20m ram=1MiB"),  # a borglet's usage names
        ({}, "-"),
        (None, "-"),
    ],
)
def test_format_resources(values, text):
    assert resources.format_resources(values) == text


@pytest.mark.parametrize("milli", [0, 250, 4000, 1_500_000])
def test_formatted_cpu_reads_back_as_the_same_milli_cpu(milli):
    assert resources.parse_cpu(resources.format_cpu(milli)) == milli
