"""Finding the cell and wording its errors: the parts of the API client that need only the standard library.

The `minborg` command's fast path (cli_fast.py) reads the cell through these without importing
httpx, and reference/client.py re-exports them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

CELL_FILE = "cell.json"
DEFAULT_STATE_DIR = ".minborg"
STATE_DIR_ENV = "MINBORG_STATE_DIR"
MASTER_ENV = "MINBORG_MASTER"
TOKEN_ENV = "MINBORG_TOKEN"
# The cell's admin token, written by `minborg cell up` (mode 0600) and read by its masters.
ADMIN_TOKEN_FILE = "admin.token"

# Status used by ClientError when no replica answered at all (there is no HTTP status).
NO_ANSWER = 0



class ClientError(Exception):
    """A request the cell refused (status >= 400) or that no replica answered (status 0)."""

    def __init__(self, status: int, detail: Any, url: str | None = None) -> None:
        super().__init__(status, detail)
        self.status = status
        self.detail = detail
        self.url = url

    def __str__(self) -> str:
        head = "no answer from the cell" if self.status == NO_ANSWER else f"HTTP {self.status}"
        return f"{head}: {format_detail(self.detail)}"


def format_detail(detail: Any) -> str:
    """An API error body's `detail` as readable text: one `field: error` line per problem."""
    if isinstance(detail, list):
        lines = [_format_item(item) for item in detail]
        return lines[0] if len(lines) == 1 else "\n" + "\n".join(f"  {line}" for line in lines)
    if isinstance(detail, dict):
        return _format_item(detail)
    return str(detail)


def _format_item(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    # The API's own shape is {"field", "error"}; FastAPI's default is {"loc", "msg"}.
    field = item.get("field")
    if field is None and "loc" in item:
        field = ".".join(str(part) for part in item["loc"] if part != "body")
    error = item.get("error", item.get("msg", item.get("message")))
    if error is None:
        return json.dumps(item, sort_keys=True)
    return f"{field}: {error}" if field else str(error)


# --- finding the cell ------------------------------------------------------------------


def state_dir_path(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """The local cell's state dir: the argument, else $MINBORG_STATE_DIR, else ./.minborg."""
    chosen = state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR
    return Path(chosen).expanduser().resolve()


def check_trusted(root: Path) -> None:
    """ClientError unless state dir `root` is absent, or owned by this user or root and not
    writable by others: another user could have put its cell file and CA there (./.minborg run
    from a shared directory), and a command would send its token to their masters."""
    try:
        st = os.stat(root)
    except OSError:
        return
    why = ""
    if st.st_uid not in (os.geteuid(), 0):
        why = f"it belongs to uid {st.st_uid}"
    elif st.st_mode & 0o002:
        why = "other users may write it"
    if why:
        raise ClientError(NO_ANSWER, f"the state dir {root} is not to be trusted: {why}, so its cell file and CA "
                          "could be theirs; give your own with --state-dir or $MINBORG_STATE_DIR")  # fmt: skip


def read_cell_file(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The cell file written by `minborg cell up`, as a dict; ClientError when absent."""
    check_trusted(state_dir_path(state_dir))
    path = state_dir_path(state_dir) / CELL_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ClientError(
            NO_ANSWER,
            f"no cell found: {path} does not exist. Start one with `minborg cell up`, "
            f"or point at a running cell with --master URL or ${MASTER_ENV}",
        ) from None
    except ValueError as err:
        raise ClientError(NO_ANSWER, f"unreadable cell file {path}: {err}") from None


def split_urls(text: str) -> list[str]:
    """'http://a:1, b:2' -> ['http://a:1', 'http://b:2'] (a bare host:port means http)."""
    urls = []
    for part in text.split(","):
        part = part.strip().rstrip("/")
        if part:
            urls.append(part if "://" in part else f"http://{part}")
    return urls


def master_urls(
    master: str | None = None, state_dir: str | os.PathLike[str] | None = None
) -> list[str]:
    """Master URLs from --master, else $MINBORG_MASTER, else the local cell file. A plain http
    URL (a bare host:port is one) of an address the local cell file lists as an https master is
    refused, naming the https URL: asked so, the state dir's admin token would cross in clear,
    to whatever listens on the port, and the master would answer it nothing."""
    for name, source in (("--master", master), (f"${MASTER_ENV}", os.environ.get(MASTER_ENV))):
        if source and (urls := split_urls(source)):
            for url in urls:
                _refuse_plain(name, url, state_dir)
            return urls
    urls = list(read_cell_file(state_dir).get("master_urls") or [])
    if not urls:
        raise ClientError(
            NO_ANSWER, f"the cell file in {state_dir_path(state_dir)} lists no master"
        )
    return urls


LOOPBACK = ("127.0.0.1", "localhost")


def _refuse_plain(name: str, url: str, state_dir: str | os.PathLike[str] | None) -> None:
    """ClientError when `url` is plain http to an address (host:port; 127.0.0.1 and localhost
    alike) that the local cell file lists among its https masters."""
    if not url.startswith("http://"):
        return
    address = url[len("http://"):].split("/", 1)[0]
    try:
        local = read_cell_file(state_dir).get("master_urls") or []
    except (ClientError, AttributeError):
        return
    host, _, port = address.rpartition(":")
    tls = {f"{h}:{port}" for h in (LOOPBACK if host in LOOPBACK else (host,))}
    if any(str(u).startswith("https://") and str(u)[8:].split("/", 1)[0] in tls for u in local):
        raise ClientError(NO_ANSWER, f"{name} {url}: the cell there serves https only (its state dir "
                          f"{state_dir_path(state_dir)} says so), and plain http would send its token in "
                          f"clear: give https://{url[len('http://'):]}")  # fmt: skip


def admin_token_path(state_dir: str | os.PathLike[str] | None = None) -> Path:
    return state_dir_path(state_dir) / ADMIN_TOKEN_FILE


def read_admin_token(state_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The local cell's admin token from its state dir, None if there is none to read."""
    try:
        return admin_token_path(state_dir).read_text().strip() or None
    except OSError:
        return None


def find_token(token: str | None = None, state_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The bearer token to send: --token, else $MINBORG_TOKEN, else the local cell's admin token."""
    return token or os.environ.get(TOKEN_ENV) or read_admin_token(state_dir)


def auth_headers(token: str | None) -> dict[str, str]:
    """The Authorization header of `token` (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def client_error_message(err: ClientError) -> str:
    """A ClientError as one or more lines a person can act on."""
    hints = {
        404: "not found",
        409: "conflict",
        401: "no valid token: pass --token, set $MINBORG_TOKEN, or use the cell's state dir",
        403: "refused",
        429: "rate limited; retry in a moment",
        410: "gone: list again",
        422: "invalid request",
        503: "no leader right now; retry in a few seconds",
    }
    if err.status == 0:
        return str(err)
    hint = hints.get(err.status)
    prefix = f"HTTP {err.status}" + (f" ({hint})" if hint else "")
    return f"{prefix}: {format_detail(err.detail)}"
