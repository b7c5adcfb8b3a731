"""The leader's book of who reaches each machine: every shard's last word on it, the shards
heard from and when, and the machines handed over since when; `reach.judge` reads it.

No I/O and no clock of its own: the poller holds it under its lock and passes the time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from reference.master import reach

SWEEP_EVERY_S = 30.0  # how often the words of removed machines and gone replicas are forgotten


class Sightings:
    def __init__(self, *, down_after: int, vouch_s: float, grace_s: float) -> None:
        self.down_after = down_after
        # A shard heard from within `vouch_s` vouches for what it last said (it sends a
        # heartbeat every poll interval); a replica handed a machine has `grace_s` to say
        # anything of it before it is not waited for.
        self.vouch_s, self.grace_s = vouch_s, grace_s
        self.said: dict[str, dict[str, reach.Sighting]] = {}  # machine -> shard -> its last word
        self.heard: dict[str, float] = {}  # shard -> when its last batch came
        self.handed: dict[str, float] = {}  # machine -> since when it is handed over
        self._swept_at = float("-inf")

    def answered(self, machine: str, shard: str) -> None:
        self.said.setdefault(machine, {})[shard] = reach.Sighting(True)

    def judge(
        self,
        shard: str,
        missed: dict[str, int],
        refused: Mapping[str, str],
        *,
        machines: Collection[str],
        replicas: Collection[str],
        now: float,
        leader: str | None = None,
    ) -> dict[str, reach.Verdict]:
        """Take a shard's misses and refusals (name -> why) and judge the machines missed,
        refused or handed over (`reach.judge`: down only when no replica that can vouch reaches
        it; a refusal hands the machine over but never takes it down). `machines` are the
        cell's, `replicas` the registered ones."""
        if shard:
            self.heard[shard] = now
        for name, misses in missed.items():
            self.said.setdefault(name, {})[shard] = reach.Sighting(False, misses)
        for name, why in refused.items():
            self.said.setdefault(name, {})[shard] = reach.Sighting(False, 0, why or "refused")
        vouching = self.vouching(now, replicas, shard)
        verdicts: dict[str, reach.Verdict] = {}
        for name in {n for n in (*missed, *refused, *self.handed) if n in machines}:
            verdict = reach.judge(
                name, vouching, self.said.get(name, {}), self.down_after,
                handed_at=self.handed.get(name), now=now, grace_s=self.grace_s, leader=leader,
            )  # fmt: skip
            verdicts[name] = verdict
            if len(verdict.pollers) > 1:
                self.handed.setdefault(name, now)
            else:
                self.handed.pop(name, None)
        for name in [n for n in self.handed if n not in machines]:
            self.handed.pop(name, None)
        if now - self._swept_at >= SWEEP_EVERY_S:
            # What removed machines and gone replicas said is no one's word any more.
            self._swept_at = now
            for name in [n for n in self.said if n not in machines]:
                del self.said[name]
            for r in [r for r in self.heard if r not in replicas and now - self.heard[r] > self.vouch_s]:
                del self.heard[r]
                for said in self.said.values():
                    said.pop(r, None)
        return verdicts

    def vouching(self, now: float, replicas: Collection[str], shard: str = "") -> list[str]:
        """The registered replicas heard from lately (and `shard`, the one speaking now, before
        its registration shows)."""
        out = [r for r, at in self.heard.items() if now - at <= self.vouch_s and r in replicas]
        if shard and shard not in out:
            out.append(shard)
        return out

    def refused_by_all(self, machine: str, vouching: Collection[str]) -> str:
        """Why `machine`'s borglet refuses, when every replica of `vouching` that said anything
        of it last said it was refused, and they are at least two (or the only one there is):
        a second replica's signature was tried too. "" otherwise."""
        said = [s for r, s in self.said.get(machine, {}).items() if r in vouching]
        if not said or any(not s.refused for s in said) or len(said) < min(2, len(vouching)):
            return ""
        return said[-1].refused

    def carrier(self, machine: str, owner: str, now: float, leader: str | None = None) -> str:
        """The replica whose shard carries syncs to `machine`: its owner, unless the owner
        cannot reach it and another replica heard from lately can (a machine handed over)."""
        if machine not in self.handed:
            return owner
        said = self.said.get(machine, {})
        if (own := said.get(owner)) is None or own.answered:
            return owner
        for r in reach.ranked(machine, [r for r, at in self.heard.items() if now - at <= self.vouch_s], leader):
            if (s := said.get(r)) is not None and s.answered:
                return r
        return owner
