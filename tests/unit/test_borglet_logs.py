"""Task logs on the borglet: stdout and stderr apart, tails across rotation, follow through a truncation."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reference.borglet import logs


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


def test_streams_are_opened_apart_and_in_append_mode(tmp_path: Path) -> None:
    out, err = logs.open_streams(str(tmp_path / "tasks" / "k"))
    import os

    os.write(out, b"to stdout\n")
    os.write(err, b"to stderr\n")
    os.close(out)
    os.close(err)
    assert logs.tail(str(tmp_path), "k", "stdout", 10) == b"to stdout\n"
    assert logs.tail(str(tmp_path), "k", "stderr", 10) == b"to stderr\n"


def test_tail_gives_the_last_lines_and_none_for_a_task_that_never_ran(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "k" / "stdout", "".join(f"line {i}\n" for i in range(100)))
    assert logs.tail(str(tmp_path), "k", "stdout", 3) == b"line 97\nline 98\nline 99\n"
    assert logs.tail(str(tmp_path), "k", "stdout", 0) == b""
    assert logs.tail(str(tmp_path), "other", "stdout", 3) is None


def test_rotation_keeps_the_newest_part_and_tail_reaches_into_it(tmp_path: Path) -> None:
    path = tmp_path / "tasks" / "k" / "stdout"
    write(path, "".join(f"old {i}\n" for i in range(10)))  # 60 bytes
    assert not logs.rotate_if_large(str(path), max_bytes=100)
    write(path, "".join(f"old {i}\n" for i in range(10, 20)))  # 130 bytes > 100
    assert logs.rotate_if_large(str(path), max_bytes=100)
    assert path.stat().st_size == 0 and (path.parent / "stdout.1").stat().st_size == 130
    write(path, "new 0\nnew 1\n")
    # 2 lines in the current file, 2 more from the rotated one.
    assert logs.tail(str(tmp_path), "k", "stdout", 4) == b"old 18\nold 19\nnew 0\nnew 1\n"


def test_rotator_bounds_every_live_stream(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "a" / "stdout", "x" * 300)
    write(tmp_path / "tasks" / "a" / "stderr", "y" * 50)
    rotator = logs.Rotator(str(tmp_path), lambda: ["a", "gone"], max_bytes=100)
    assert rotator.pass_once() == 1 and rotator.rotations == 1


def test_follow_reads_what_is_written_next_across_a_truncation_until_the_task_ends(tmp_path: Path) -> None:
    path = tmp_path / "tasks" / "k" / "stdout"
    write(path, "before\n")
    script = iter(
        [
            lambda: write(path, "one\n"),
            lambda: logs.rotate_if_large(str(path), max_bytes=1),  # rotated: starts anew
            lambda: write(path, "two\n"),
            lambda: None,
        ]
    )
    ended = {"now": False}

    async def sleep(_: float) -> None:
        step = next(script, None)
        if step is None:
            ended["now"] = True
        else:
            step()

    async def collect() -> list[bytes]:
        return [
            c
            async for c in logs.follow(
                str(tmp_path), "k", "stdout", ended=lambda: ended["now"], max_s=60, clock=lambda: 0.0, sleep=sleep
            )
        ]

    assert b"".join(asyncio.run(collect())) == b"one\ntwo\n"


def test_follow_stops_at_its_time_bound(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "k" / "stdout", "x\n")
    now = [0.0]

    async def sleep(_: float) -> None:
        now[0] += 1.0

    async def collect() -> list[bytes]:
        return [
            c
            async for c in logs.follow(
                str(tmp_path), "k", "stdout", ended=lambda: False, max_s=5, clock=lambda: now[0], sleep=sleep
            )
        ]

    assert asyncio.run(collect()) == [] and now[0] == 5.0
