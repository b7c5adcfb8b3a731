"""The direct-poll mode is gone (issue 40): `--link-shards` is refused with a message that says
why and what to do, not argparse's bare "unrecognized arguments", and before anything starts."""

from __future__ import annotations

import pytest

from reference.master import cli


@pytest.mark.parametrize("value", ["off", "on"])
def test_link_shards_is_refused_with_what_to_do(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--cell", "c", "--name", "m0", "--listen", "127.0.0.1:1", "--etcd", "http://127.0.0.1:9",
                  "--link-shards", value])  # fmt: skip
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--link-shards is gone" in err and "remove the option" in err


def test_the_option_is_not_offered_in_the_help() -> None:
    assert "--link-shards" not in cli.build_parser().format_help()
