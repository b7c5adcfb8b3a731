"""A job or alloc file's text as a document: JSON when the whole text is JSON, else YAML.

One reader for both command lines (the full one's `jobspec.load_job_file` and the fast path's
`cli/fastjobs.read_job_file`), so a file means the same on either. A JSON file skips YAML's
import (16 ms of a fast command's 70) and reads as JSON says: `1e3` is the number 1000.0 there,
where YAML 1.1 reads the string "1e3". A YAML file of the common shape is read by
reference/plainyaml.py, which gives what PyYAML's safe load gives without its import (20 ms);
every other file is PyYAML's safe load, which also words every error.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start
    from typing import Any


class NotParsed(ValueError):
    """The text is neither JSON nor YAML; the message is the YAML reader's."""


def parse(text: str) -> Any:
    """The document `text` holds; NotParsed when YAML cannot read it either."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass  # YAML's flow style ({name: x}) starts the same way
    from reference import plainyaml

    document = plainyaml.parse(text)
    if document is not plainyaml.UNREAD:
        return document
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as err:
        raise NotParsed(str(err)) from None
