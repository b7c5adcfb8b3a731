"""How a listing or a shown object is printed for a program: JSON or YAML with one unit per quantity and ISO 8601 times, `-o name`, and `-o jsonpath=TEMPLATE` (kubectl's subset), with the standard library alone.

The API words a quantity in more than one way (a job's request says `"cpu": "100m"`, a
machine's capacity `"cpu": 4000` in milli-CPU, its usage `"cpu_milli"`) and times as epoch
seconds; the API keeps its shapes for its consumers (Sigma, the client, scripts), and the
command line's JSON states each quantity once, as a number with its unit in its name
(`cpu_milli`, `ram_bytes`, `disk_bytes`), and adds `<time>_iso` beside each epoch time.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

FORMATS = ("table", "wide", "json", "yaml", "name", "jsonpath=TEMPLATE")
EVENTS_TAIL = 200  # `minborg events` prints the newest this many of the events held (--tail; 0: all)
BYTE_KEYS = ("ram", "disk")  # resources.BYTE_RESOURCES: their figures are bytes
# Mappings whose keys are a user's own words (environment, attributes): never renamed.
OPAQUE = frozenset({"env", "attrs", "labels", "command", "constraints"})
EPOCH_FLOOR = 1e8  # 1973: a smaller figure under a time's key is a duration or a count, not a time


def valid(output: str) -> bool:
    """Whether `output` is a format the command line prints (a jsonpath template is checked when used)."""
    return output in ("table", "wide", "json", "yaml", "name") or output.startswith("jsonpath=")


def is_data(output: str) -> bool:
    """Whether `output` asks for data rather than a table."""
    return output in ("json", "yaml", "name") or output.startswith("jsonpath=")


# --- one unit per quantity, ISO 8601 beside epoch seconds -------------------------------------


def milli_cpu(value: Any) -> Any:
    """'100m' -> 100, '0.5' -> 500; a number is already milli-CPU (the API's canonical figure)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return round(float(text[:-1])) if text.endswith("m") else round(float(text) * 1000)
        except ValueError:
            return value
    return value


def iso(epoch: float) -> str:
    """1795829005.22 -> '2026-11-28T10:03:25.220Z' (UTC, milliseconds)."""
    whole = int(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((epoch - whole) * 1000):03d}Z"


def is_time_key(key: str) -> bool:
    return key == "at" or key.endswith("_at") or key in ("created", "updated", "since_epoch")


def one_unit(data: Any) -> Any:
    """`data` with each CPU figure as `cpu_milli` (a number), each byte figure as `<name>_bytes`,
    and `<key>_iso` beside each epoch time (`submitted_at`, `at`, ...)."""
    if isinstance(data, list):
        return [one_unit(item) for item in data]
    if not isinstance(data, Mapping):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        if key in OPAQUE:
            out[key] = value
        elif key == "cpu" and isinstance(value, int | float | str) and not isinstance(value, bool):
            out["cpu_milli"] = milli_cpu(value)
        elif key in BYTE_KEYS and isinstance(value, int) and not isinstance(value, bool):
            out[f"{key}_bytes"] = value
        else:
            out[key] = one_unit(value)
            if is_time_key(key) and isinstance(value, int | float) and not isinstance(value, bool) and value > EPOCH_FLOOR:
                out[f"{key}_iso"] = iso(float(value))
    return out


# --- -o name -----------------------------------------------------------------------------------


def name_of(item: Any) -> str:
    """What a command that takes one such thing names it by: a job's USER/NAME, a task's index
    (in its job: `minborg task show JOB INDEX`), a machine's or anything else's name."""
    if not isinstance(item, Mapping):
        return str(item)
    if isinstance(item.get("event"), str):  # one of the cell's events: its subject
        return str(item.get("task") or item.get("job") or item.get("machine") or "-")
    for wrapper in ("job", "task", "machine", "alloc_set", "user", "quota"):
        inner = item.get(wrapper)
        if isinstance(inner, Mapping):
            return name_of(inner)
    if item.get("key"):
        return str(item["key"])
    if "index" in item and isinstance(item.get("job"), str):
        return str(item["index"])
    for field in ("name", "task", "job", "machine"):
        if isinstance(item.get(field), str | int):
            return str(item[field])
    return "-"


# --- -o jsonpath=TEMPLATE ----------------------------------------------------------------------

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_\-]*)|\[(\*|-?\d+)\]|\.\[(\*|-?\d+)\]|\['([^']*)'\]")


class TemplateError(ValueError):
    """A jsonpath template outside the subset understood: the message says what is."""


def parse_path(expr: str) -> list[str | int | None]:
    """'.items[*].name' -> ['items', None, 'name'] (None: every element); '.' alone: the root."""
    expr = expr.strip()
    if expr in (".", "$", "@"):
        return []
    if expr.startswith(("$", "@")):
        expr = expr[1:]
    if not expr.startswith((".", "[")):
        raise TemplateError(f"{{{expr}}}: a path starts with '.', as {{.items[*].name}}")
    steps: list[str | int | None] = []
    pos = 0
    while pos < len(expr):
        match = _STEP.match(expr, pos)
        if match is None:
            raise TemplateError(
                f"{{{expr}}}: cannot read {expr[pos:]!r}; fields (.name), indices ([0], [-1]) and [*] only"
            )
        field, index = match.group(1) or match.group(4), match.group(2) or match.group(3)
        steps.append(field if field is not None else None if index == "*" else int(index))
        pos = match.end()
    return steps


def select(root: Any, steps: list[str | int | None]) -> list[Any]:
    """Every value the path reaches from `root` (none where a field or index is missing)."""
    found = [root]
    for step in steps:
        nxt: list[Any] = []
        for value in found:
            if step is None:
                if isinstance(value, list):
                    nxt.extend(value)
                elif isinstance(value, Mapping):
                    nxt.extend(value.values())
            elif isinstance(step, int):
                if isinstance(value, list) and -len(value) <= step < len(value):
                    nxt.append(value[step])
            elif isinstance(value, Mapping) and step in value:
                nxt.append(value[step])
        found = nxt
    return found


def scalar(value: Any) -> str:
    """A value as kubectl's jsonpath prints it: strings bare, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def jsonpath(data: Any, template: str) -> str:
    """Render kubectl's jsonpath subset: literal text, `{.a.b}`, `{.items[*].name}`, `{.x[0]}`,
    and `{"\\n"}`/`{"\\t"}`; several values of one expression are joined by a space."""
    out: list[str] = []
    pos = 0
    while pos < len(template):
        start = template.find("{", pos)
        if start < 0:
            out.append(template[pos:])
            break
        out.append(template[pos:start])
        end = template.find("}", start)
        if end < 0:
            raise TemplateError(f"{template[start:]!r}: an unclosed '{{'")
        expr = template[start + 1 : end].strip()
        if expr.startswith('"') and expr.endswith('"') and len(expr) >= 2:
            out.append(expr[1:-1].replace("\\n", "\n").replace("\\t", "\t"))
        elif expr.split(" ")[0] in ("range", "end"):
            raise TemplateError("{range}...{end} is not supported: use {.items[*].FIELD}, or -o json with jq")
        else:
            out.append(" ".join(scalar(v) for v in select(data, parse_path(expr))))
        pos = end + 1
    return "".join(out)


# --- printing ----------------------------------------------------------------------------------


def render(data: Any, output: str) -> str:
    """`data` (an API answer, or a list of items) as `output` asks: json, yaml, name or
    jsonpath=TEMPLATE. A list is `{"items": [...]}` to a template, as kubectl's lists are."""
    if output == "name":
        items = data if isinstance(data, list) else [data]
        return "\n".join(name_of(item) for item in items)
    shown = one_unit(data)
    if output.startswith("jsonpath="):
        return jsonpath({"items": shown} if isinstance(shown, list) else shown, output.partition("=")[2])
    if output == "yaml":
        import yaml

        return yaml.safe_dump(shown, sort_keys=True, default_flow_style=False).rstrip()
    return json.dumps(shown, indent=2, sort_keys=True, default=str)
