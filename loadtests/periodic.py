"""A thread that calls `tick()` every `every` seconds while its `with` block runs."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Self


class Periodic(ABC):
    """Subclasses define `tick()`; the loop stops when the `with` block ends (bounded by it)."""

    def __init__(self, every: float, name: str, join_timeout_s: float = 10.0) -> None:
        self.every = every
        self._join_timeout_s = join_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @abstractmethod
    def tick(self) -> None:
        """One round of the periodic work."""

    def close(self) -> None:  # noqa: B027 (an optional hook: most loops hold nothing to release)
        """Called once the loop has stopped: release what `tick` used."""

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self._join_timeout_s)
        self.close()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.tick()
