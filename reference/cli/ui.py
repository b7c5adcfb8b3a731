"""`minborg ui`: where the cell's dashboard, Sigma, is, and how to sign in to it; with --open, the page opened in a browser, signed in."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from reference.cellfile import ADMIN_TOKEN_FILE, find_token, state_dir_path
from reference.cli.common import MasterOpt, StateDirOpt, examples, handles_errors
from reference.cli.http import cell_urls
from reference.cli.render import console

HELP = "Print the URL of Sigma, the cell's dashboard; --open opens it in a browser, signed in."


def sigma_url(master_url: str) -> str:
    return master_url.rstrip("/") + "/ui"


def sign_in_hint(state_dir: str | None) -> str:
    """Where a person finds a token to paste into Sigma's sign-in page."""
    return (
        "sign in with a token: a user's, printed once by `minborg user add NAME` (run by the admin), "
        f"or the cell's admin token in {state_dir_path(state_dir) / ADMIN_TOKEN_FILE}"
    )


def open_in_browser(url: str) -> bool:
    """Open `url` in this machine's browser; False when there is none to open. The browser is
    given a page of a directory only its user may enter (0700, the page 0600) that sends it on
    to `url`, never `url` itself: a browser's arguments are every local user's to read (`ps`),
    and `url` holds the token in its fragment."""
    import json
    import tempfile
    import webbrowser
    from pathlib import Path

    page = Path(tempfile.mkdtemp(prefix="minborg-ui-")) / "open.html"
    target = json.dumps(url).replace("<", "\\u003c")  # no `</script>` from the URL ends the script
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"<!doctype html><meta charset=utf-8><script>location.replace({target});</script>\n")
    try:
        return webbrowser.get().open(page.as_uri())
    except webbrowser.Error:
        return False


@handles_errors
def ui(
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    open_page: Annotated[
        bool,
        typer.Option("--open", help="Open Sigma in this machine's browser, signed in with the token this command uses."),
    ] = False,
    token: Annotated[
        str | None, typer.Option("--token", help="The token to sign in with. Default: as every command finds it.")
    ] = None,
) -> None:
    """Print the URL of Sigma, the cell's dashboard; --open opens it in a browser, signed in.

    Every master replica serves Sigma; the first one the cell lists is printed, the others are
    in `minborg cell status`. The token goes in the URL's fragment, which the browser never
    sends to a server; the page keeps it for its tab."""
    urls = cell_urls(master, state_dir)
    url = sigma_url(urls[0])
    print(url)
    if not open_page:
        console.print(sign_in_hint(state_dir), soft_wrap=True, markup=False, style="dim")
        return
    given = find_token(token, state_dir)
    target = f"{url}#token={given}" if given else url
    if open_in_browser(target):
        console.print("opened in the browser" + ("" if given else "; " + sign_in_hint(state_dir)), markup=False)
        return
    console.print(f"no browser to open here: open {url} where you have one; {sign_in_hint(state_dir)}",
                  soft_wrap=True, markup=False)  # fmt: skip


EXAMPLES = examples("minborg ui", "minborg ui --open", "minborg ui --master http://10.0.0.5:7001")
