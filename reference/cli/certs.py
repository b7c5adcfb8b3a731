"""`minborg cell certs [list|renew]`: the expiry of a local cell's certificates, and their renewal (as `kubeadm certs check-expiration` and `kubeadm certs renew`).

The certificates are those of the cell's CA in `<state dir>/pki` (reference/pki.py): etcd's
members and clients, and each master's, borglet's and Sigma's `<process>-https`. `list` exits 1
when any expires within pki.RENEW_BEFORE or is not signed by the CA; `renew` issues those again
(all of them with --all) from the same CA for the same names. Resume and `cell restart` renew
by themselves; on a running cell `renew` writes the files and a restart loads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reference import pki
from reference.cli.common import EXIT_FAILED, JsonOpt, StateDirOpt, examples, fail, handles_errors
from reference.cli.plain import color_on, paint, render
from reference.cli.render import console, errors, print_json
from reference.client import CELL_FILE, state_dir_path
from reference.launcher import tls as cell_tls
from reference.launcher.cellfile import CellInfo

certs_app = typer.Typer(
    help="Certificates: when each expires (list, the default), their renewal (renew).",
    invoke_without_command=True,
)
SUFFIXES = ("-https", "-server", "-peer")  # a process's certificate; etcd0-server and -peer: member etcd0
AllOpt = Annotated[
    bool, typer.Option("--all", help="Renew every certificate, not only those within the renewal window.")
]


def process_of(state: pki.CertState) -> str:
    """Who presents the certificate: the CA, a process (master0, machine1, etcd0) or the store's clients."""
    if state.is_ca:
        return "(the CA)"
    if state.name == "store-client":
        return "(etcd's clients)"
    for suffix in SUFFIXES:
        if state.name.endswith(suffix):
            return state.name[: -len(suffix)]
    return state.name


def _pki_dir(state_dir: str | None) -> Path:
    directory = state_dir_path(state_dir) / cell_tls.PKI_DIR
    if not pki.ca_pair(directory).cert.is_file():
        raise fail(f"no cell CA in {directory}: start a cell there with `minborg cell up`, or name its --state-dir")
    return directory


def _inventory(state_dir: str | None) -> list[pki.CertState]:
    try:
        return pki.inventory(_pki_dir(state_dir))
    except pki.PKIError as err:
        raise fail(f"{err}; `minborg cell up --fresh` makes a new CA (and a new cell)") from None


def show(state_dir: str | None, as_json: bool) -> None:
    states = _inventory(state_dir)
    bad = [s for s in states if s.problem]
    if as_json:
        print_json({"renew_before_days": pki.RENEW_BEFORE.days, "certificates": [s.to_json() | {"process": process_of(s)} for s in states],
                    "problems": len(bad)})  # fmt: skip
    else:
        color = color_on()
        rows = [
            [
                s.name, process_of(s), f"{s.not_after:%Y-%m-%d %H:%M}" if s.not_after else "-",
                str(s.days_left) if s.days_left is not None else "-",
                "self" if s.is_ca and s.signed_by_ca else ("yes" if s.signed_by_ca else paint("no", "red", color)),
                paint(s.problem, "red", color) if s.problem else "ok",
            ]  # fmt: skip
            for s in states
        ]
        print(render(["NAME", "PROCESS", "NOT AFTER (UTC)", "DAYS LEFT", "SIGNED BY CA", "STATE"], rows, color=color))
        for s in bad:
            errors.print(f"{s.name}: {s.problem}: {_advice(s, states[0])}", markup=False, soft_wrap=True)
    if bad:
        raise typer.Exit(EXIT_FAILED)


def _advice(state: pki.CertState, ca: pki.CertState) -> str:
    if state.is_ca:
        return "the CA is never renewed in place; `minborg cell up --fresh` starts a new cell with a new CA"
    if state.not_after is None:
        return "its process issues it again when it starts (`minborg cell restart`)"
    if state.signed_by_ca and ca.not_after is not None and state.not_after >= ca.not_after:
        return "it ends with the CA, and no certificate outlives its CA: `minborg cell up --fresh`"
    return "`minborg cell certs renew` on the stopped cell, or `minborg cell restart`"


@certs_app.callback()
def certs(ctx: typer.Context, state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """Each certificate of the cell's CA: its process, its end, days left, whether the CA signed
    it. Exits 1 when any expires within the renewal window or is not the CA's."""
    if ctx.invoked_subcommand is None:
        handles_errors(show)(state_dir, as_json)
    else:  # `cell certs --state-dir D renew`: the subcommand takes what was given before it
        ctx.obj = {"state_dir": state_dir, "as_json": as_json}


def _given(ctx: typer.Context, state_dir: str | None, as_json: bool) -> tuple[str | None, bool]:
    before = ctx.obj if isinstance(ctx.obj, dict) else {}
    return state_dir or before.get("state_dir"), as_json or bool(before.get("as_json"))


@certs_app.command("list", epilog=examples("minborg cell certs list", "minborg cell certs --json"))
@handles_errors
def certs_list(ctx: typer.Context, state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """Each certificate of the cell's CA: its process, its end, days left, whether the CA signed
    it. Exits 1 when any expires within the renewal window or is not the CA's."""
    show(*_given(ctx, state_dir, as_json))


@certs_app.command("renew", epilog=examples("minborg cell certs renew", "minborg cell certs renew --all"))
@handles_errors
def certs_renew(
    ctx: typer.Context, everything: AllOpt = False, state_dir: StateDirOpt = None, as_json: JsonOpt = False
) -> None:
    """Issue again, from the cell's CA, for the same names and addresses, each certificate within
    the renewal window or not signed by the CA (--all: every one), with a new key. The CA is never
    renewed. A running cell's processes load the new files when restarted: `minborg cell restart`."""
    state_dir, as_json = _given(ctx, state_dir, as_json)
    directory = _pki_dir(state_dir)
    running = _running(state_dir)
    try:
        done = pki.renew(directory, everything=everything)
    except pki.PKIError as err:
        raise fail(f"{err}; `minborg cell up --fresh` makes a new CA (and a new cell)") from None
    ca_problem = pki.ca_problem(directory)
    if as_json:
        print_json({"renewed": done.renewed, "kept": done.kept, "skipped": [{"name": n, "why": w} for n, w in done.skipped],
                    "ca_problem": ca_problem, "running": running})  # fmt: skip
        return
    if done.renewed:
        console.print(f"renewed {len(done.renewed)} certificate(s) from the cell's CA, each for {pki.LEAF_DAYS} days "
                      f"(or to the CA's end, if sooner): {', '.join(done.renewed)}", markup=False, soft_wrap=True)  # fmt: skip
    else:
        console.print(f"no certificate expires within {pki.RENEW_BEFORE.days} days: none renewed (--all renews every one)")
    if done.kept and done.renewed:
        console.print(f"kept {len(done.kept)}, far from their end", markup=False)
    for name, why in done.skipped:
        console.print(f"{name}: {why}: left as it is", markup=False, soft_wrap=True)
    if ca_problem:
        console.print(f"warning: {ca_problem}", markup=False, soft_wrap=True)
    if done.renewed and running:
        console.print("the cell is running: its processes still serve the certificates they started with; "
                      "`minborg cell restart` loads the new ones")  # fmt: skip


def _running(state_dir: str | None) -> bool:
    if not (state_dir_path(state_dir) / CELL_FILE).exists():
        return False
    return bool(CellInfo.load(state_dir).running())


def register(cell_app: typer.Typer) -> None:
    cell_app.add_typer(certs_app, name="certs")
