"""Schemathesis, every check, against the OpenAPI document of a 1-replica local cell's master; exits non-zero on any failure.

`tox -e contract` runs it. The cell has one machine and nothing else; schemathesis submits,
updates and deletes jobs and machines through the API as it likes, and any answer the
document does not allow (an undeclared status, a body of another shape, a 5xx, valid input
refused or invalid input accepted) is a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from reference.launcher.testcell import REPO, LocalCell

# The largest write the API takes, a job of 10,000 tasks submitted, resized or killed (or a
# machine holding thousands of them removed), commits 10,000 task keys: 5 s for 5,000 and 20 s
# for 10,000 on the shared 2-core development machine. A request times out only past this, and
# schemathesis.toml's max_response_time is the same figure.
REQUEST_TIMEOUT_S = 60
# One replica: no failover to exercise, and a 2 s lease on a starved host expires between two
# refreshes, turning writes into the 503 a deposed leader answers by design.
LEASE_TTL_S = 10.0


def command(url: str, token: str, *, max_examples: int, max_time_s: int, seed: int, report: Path) -> list[str]:
    """The schemathesis command line for the master at `url`, as the cell's admin."""
    binary = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    return [
        binary, "--config-file", str(Path(__file__).with_name("schemathesis.toml")), "run", f"{url}/openapi.json", "--checks", "all", "--max-examples", str(max_examples),
        "--header", f"Authorization: Bearer {token}",
        "--max-time", str(max_time_s), "--seed", str(seed), "--workers", "1", "--request-timeout", str(REQUEST_TIMEOUT_S),
        "--generation-database", "none", "--no-color", "--report", "junit", "--report-junit-path", str(report),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.contract.run", description=__doc__.splitlines()[0])
    p.add_argument("--max-examples", type=int, default=20, help="test cases per operation")
    p.add_argument("--max-time", type=int, default=150, help="seconds of generated cases")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--report", type=Path, default=Path("contract-junit.xml"), help="JUnit XML of the run")
    p.add_argument("--keep", type=Path, default=None, help="keep the cell's files and logs in this folder")
    args = p.parse_args(argv)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.contract.hooks", "PYTHONPATH": str(REPO)}
    with (
        contextlib.nullcontext(str(args.keep)) if args.keep else tempfile.TemporaryDirectory(prefix="minborg-contract-")
    ) as workdir, LocalCell(Path(workdir), masters=1, borglets=1, lease_ttl=LEASE_TTL_S) as cell:
        leader = cell.wait_leader()
        argv_ = command(leader.url, cell.admin_token, max_examples=args.max_examples, max_time_s=args.max_time, seed=args.seed,
                        report=args.report.resolve())  # fmt: skip
        return subprocess.run(argv_, cwd=workdir, env=env, check=False).returncode  # its caches stay out of the tree


if __name__ == "__main__":
    sys.exit(main())
