"""Container images for the docker runtime: the base image (images/base.sh) and each images/<name>/Dockerfile on it.

Images are named `minborg/<name>` after their directory; a job names one in its `image`
field. images/build.sh builds them all (CI runs it too); this module runs it for
`minborg image build` and says which images it made.
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


def image_names(root: Path) -> list[str]:
    """The base image, then one image per images/<name>/Dockerfile under `root`, by name."""
    return [BASE, *(PREFIX + path.parent.name for path in sorted((root / "images").glob("*/Dockerfile")))]


def build_all(root: Path | None = None, say: Callable[[str], None] = print) -> list[str]:
    """Build every image (the base one only when missing: debootstrap takes minutes); returns
    their names. Raises RuntimeError, with the build's last lines, when it fails."""
    root = root or repository_root()
    names = image_names(root)
    say(f"building {', '.join(names)} (the base image only when missing)")
    try:
        done = subprocess.run(
            ["sh", str(root / "images" / "build.sh")], cwd=root, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as err:
        raise RuntimeError(f"sh is not installed: {err}") from err
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise RuntimeError(f"images/build.sh failed (exit {done.returncode}):\n{tail}")
    return names
