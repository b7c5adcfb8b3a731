"""What the load ran on: cores, memory, CPU model and load average, read just before a run."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import psutil


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as src:
            for line in src:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe() -> dict[str, Any]:
    """A JSON-able description of this machine now."""
    memory = psutil.virtual_memory()
    load1, load5, load15 = os.getloadavg()
    return {
        "at": time.time(),
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_total_gib": round(memory.total / 2**30, 1),
        "memory_available_gib": round(memory.available / 2**30, 1),
        "load_average": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }


def one_line(info: dict[str, Any]) -> str:
    load = ", ".join(f"{x:g}" for x in info["load_average"])
    return (
        f"{info['logical_cores']} logical cores ({info['cpu_model']}), "
        f"{info['memory_total_gib']} GiB RAM ({info['memory_available_gib']} GiB free), "
        f"load average {load} (1/5/15 min) before the run"
    )
