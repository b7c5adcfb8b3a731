"""The exec and terminal bodies' schemas say what the master enforces: no item of a command,
the program included, holds a NUL byte (a schema that allowed one in the program had a
schema-valid request refused with 422)."""

from __future__ import annotations

import re

import pytest

from reference.master.contract import ExecBody
from reference.master.terminal import TerminalBody


@pytest.mark.parametrize("model", [ExecBody, TerminalBody])
def test_every_command_item_is_declared_free_of_nul(model: type) -> None:
    command = model.model_json_schema()["properties"]["command"]
    for item in (*command["prefixItems"], command["items"]):
        assert re.search(item["pattern"], "a\x00b") is None
        assert re.search(item["pattern"], "/bin/sh") is not None
