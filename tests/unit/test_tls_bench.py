"""bench.tlscost's figures: the order of the sides and each side's median and ratio to plain."""

from __future__ import annotations

from bench import tlscost


def test_sides_alternate_so_a_drift_weighs_on_all_alike() -> None:
    assert tlscost.order(1) == ["plain", "tls", "tls-unsigned"]
    assert tlscost.order(2) == ["plain", "tls", "tls-unsigned", "tls-unsigned", "tls", "plain"]


def test_each_figure_is_a_sides_median_and_its_ratio_to_plain() -> None:
    def run(side: str, us: float | None, read: float) -> dict[str, object]:
        return {"side": side, "master_us_per_poll": us, "read_p50_ms": read}

    runs = [run("plain", 100.0, 2.0), run("plain", 120.0, 4.0), run("tls", 130.0, 9.0), run("tls", 110.0, 7.0),
            run("tls-unsigned", None, 8.0)]  # fmt: skip
    summary = tlscost.summary(runs)
    assert summary["master_us_per_poll"] == {"plain": 110.0, "tls": 120.0, "tls-unsigned": None, "tls/plain": 1.09}
    assert summary["read_p50_ms"]["tls/plain"] == 2.67 and summary["read_p50_ms"]["tls-unsigned/plain"] == 2.67
    assert summary["write_p50_ms"] == {"plain": None, "tls": None, "tls-unsigned": None}  # not measured: no ratio
    table = tlscost.table(summary)
    assert "| master_us_per_poll | 110 | 120 | - | 1.09 | - |" in table.splitlines()
