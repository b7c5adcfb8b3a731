"""An asyncio transport with no socket behind it, to drive a server's protocol (uvicorn's, or the
cell's `LimitedProtocol`) in one process: by the wire-cost bench and the wire-limit tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any


class MemoryTransport(asyncio.Transport):
    """What the protocol wrote (kept in `written` when `keep`), and whether it closed or
    half-closed the connection; the peer's address is `peer`."""

    def __init__(self, peer: str = "127.0.0.2", keep: bool = True) -> None:
        super().__init__()
        self.peer, self.keep = peer, keep
        self.written, self.closed, self.eof = b"", False, False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": (self.peer, 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: Any) -> None:
        if self.keep:
            self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def status(self) -> int:
        """The status code of the first answer written."""
        return int(self.written.split(b" ", 2)[1])

    def error(self) -> dict[str, str]:
        """The first entry of the `detail` list of the answer's JSON body."""
        return json.loads(self.written.split(b"\r\n\r\n", 1)[1])["detail"][0]
