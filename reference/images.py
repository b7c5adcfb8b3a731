"""Container images for the docker runtime: the base image (images/base.sh) and each images/<name>/Dockerfile on it.

Images are named `minborg/<name>` after their directory; a job names one in its `image`
field. The build context is the repository root (.dockerignore lets only examples/ in), so a
Dockerfile copies the example its tasks run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

PREFIX = "minborg/"
BASE = PREFIX + "base"


def repository_root() -> Path:
    """The directory that holds images/ and examples/."""
    return Path(__file__).resolve().parent.parent


def dockerfiles(root: Path) -> dict[str, Path]:
    """Image name -> its Dockerfile, for every images/<name>/Dockerfile under `root`, by name."""
    return {
        PREFIX + path.parent.name: path
        for path in sorted((root / "images").glob("*/Dockerfile"))
    }


def build_all(root: Path | None = None, say: Callable[[str], None] = print) -> list[str]:
    """Build the base image (skipped when present) and every Dockerfile's image on it; returns
    the names built. Raises RuntimeError, with the tool's last lines, on a failed build."""
    root = root or repository_root()
    say(f"{BASE}: building from Debian with debootstrap (skipped when present)")
    _run(["sh", str(root / "images" / "base.sh"), BASE], root)
    built = [BASE]
    for name, dockerfile in dockerfiles(root).items():
        say(f"{name}: building from {dockerfile.relative_to(root)}")
        _run(["docker", "build", "-q", "-t", name, "-f", str(dockerfile), str(root)], root)
        built.append(name)
    return built


def _run(argv: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as err:
        raise RuntimeError(f"{argv[0]} is not installed: {err}") from err
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise RuntimeError(f"{' '.join(argv[:3])} failed (exit {done.returncode}):\n{tail}")
