"""The bookkeeping both pools share: which items wait, how often each was tried, where it must not go again.

Work stealing without a scheduler: the waiting items form one queue and every idle worker takes the next
one, so a slow item holds up only the worker running it. An item whose worker died is tried once more on
another worker (the same one only when no other is left), then reported failed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from solkit.scale.work import Item, Outcome

#: How many times an item may be started: once, and once more after its worker died under it.
MAX_ATTEMPTS = 2


class Dispatch:
    """Waiting items, attempts per item and the worker each retried item avoids."""

    def __init__(self, items: Sequence[Item], max_attempts: int = MAX_ATTEMPTS) -> None:
        self.items = list(items)
        self.waiting: deque[int] = deque(range(len(self.items)))
        self.attempts = [0] * len(self.items)
        self.avoid: dict[int, str] = {}
        self.settled: set[int] = set()
        self.max_attempts = max_attempts

    def finished(self) -> bool:
        return len(self.settled) == len(self.items)

    def take(self, worker: str, others_alive: bool) -> int | None:
        """The next item for ``worker``: the first waiting one it need not avoid (when another worker lives)."""
        for pos, idx in enumerate(self.waiting):
            if not others_alive or self.avoid.get(idx) != worker:
                del self.waiting[pos]
                self.attempts[idx] += 1
                return idx
        return None

    def give_back(self, idx: int) -> None:
        """``idx`` never reached its worker (the pipe broke first): it waits again, the attempt not counted."""
        self.attempts[idx] -= 1
        self.waiting.appendleft(idx)

    def reclaim(self, idx: int) -> None:
        """``idx`` came back from a copy that was taken back from its worker: it no longer waits to be run."""
        if idx in self.waiting:
            self.waiting.remove(idx)
            self.attempts[idx] += 1

    def settle(self, outcome: Outcome) -> Outcome:
        outcome.attempts = self.attempts[outcome.index]
        self.settled.add(outcome.index)
        return outcome

    def lost(self, idx: int, worker: str, why: str) -> Outcome | None:
        """The worker running ``idx`` died: the item waits again (avoiding that worker), or, already retried,
        becomes a failed outcome."""
        if self.attempts[idx] >= self.max_attempts:
            return self.settle(Outcome(idx, self.items[idx].key, ok=False, worker=worker,
                                       error=f"failed {self.attempts[idx]} times, each time its worker died "
                                       f"(last: {worker}: {why})"))  # fmt: skip
        self.avoid[idx] = worker
        self.waiting.appendleft(idx)
        return None

    def fail_waiting(self, why: str) -> list[Outcome]:
        """Every waiting item fails with ``why`` (no worker is left to run it)."""
        out = [self.settle(Outcome(idx, self.items[idx].key, ok=False, error=why)) for idx in self.waiting]
        self.waiting.clear()
        return out
