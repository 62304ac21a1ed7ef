"""The Ray pool: items queued ahead in each actor, a slow item's queue taken back for an idle actor, a killed actor
losing only its running item, a failed setup, the cores each actor asks for, the run's phases.

The feeding rules are tested without Ray (fake actors); the rest on the shared local cluster (conftest.py).
"""

import time

import pytest

from solkit.scale import Call, Item, open_pool
from solkit.scale.dispatch import Dispatch
from solkit.scale.ray_pool import RayPool, cpu_share


def _node(cpu, gpu=0, alive=True):
    return {"Alive": alive, "Resources": {"CPU": float(cpu), **({"GPU": float(gpu)} if gpu else {})}}


@pytest.mark.parametrize(
    "nodes, kind, count, share",
    [
        ([_node(16, 1)], "cuda", 1, 16),  # one H200 host: the actor takes the host's cores, as a local worker does
        ([_node(16, 8), _node(12, 4)], "cuda", 12, 2),  # the fewest cores per GPU of any node
        ([_node(1, 2)], "cuda", 2, 1),
        ([_node(2)], "cpu", 1, 2),
        ([_node(2)], "cpu", 2, 1),
        ([_node(3), _node(3)], "cpu", 3, 1),  # 2 cores each would fit only 2 actors on two 3-core nodes
        ([_node(4), _node(4), _node(64, alive=False)], "cpu", 2, 4),
    ],
)
def test_cpu_share_fits_every_actor(nodes, kind, count, share):
    assert cpu_share(nodes, kind, count) == share


class _Method:
    def __init__(self, log, actor):
        self.log, self.actor = log, actor

    def remote(self, fn, kwargs, *args):
        ref = f"ref{len(self.log)}"
        self.log.append((self.actor, args[0]))
        return ref


class _Actor:
    def __init__(self, log, i):
        self.run = _Method(log, i)


def _fake_pool(n_actors, depth=2):
    pool = RayPool.__new__(RayPool)  # the feeding rules alone: no cluster
    pool.depth, pool.marks, pool.stolen = depth, {}, set()
    pool.keys = [f"ray#{i}" for i in range(n_actors)]
    pool.queues = [__import__("collections").deque() for _ in range(n_actors)]
    pool.flight, pool.info = {}, [{"identity": {"uuid": "x"}} for _ in range(n_actors)]
    pool.failures = [0] * n_actors
    log = []
    pool.actors = [_Actor(log, i) for i in range(n_actors)]
    return pool, log


@pytest.mark.parametrize("n_items, n_actors, queued", [(1, 1, [1]), (5, 1, [2]), (4, 2, [2, 2]), (3, 2, [2, 1]),
                                                       (2, 2, [1, 1]), (7, 3, [2, 2, 2])])  # fmt: skip
def test_feed_queues_the_next_item_only_when_no_actor_would_idle(n_items, n_actors, queued):
    pool, log = _fake_pool(n_actors)
    items = [Item((str(i),), Call(abs, (i,))) for i in range(n_items)]
    d = Dispatch(items)
    pool._feed(d, items, list(range(n_actors)), {})
    assert [len(q) for q in pool.queues] == queued
    assert sorted(idx for _, idx in log) == sorted(idx for q in pool.queues for _, idx in q)
    assert len(d.waiting) == n_items - sum(queued)


def test_steal_takes_back_the_last_queued_item_for_an_idle_actor():
    pool, _ = _fake_pool(2)
    cancelled = []
    pool.ray = type("R", (), {"cancel": staticmethod(cancelled.append)})
    d = Dispatch([Item((str(i),), Call(abs, (i,))) for i in range(2)])
    for idx, ref in ((0, "slow"), (1, "next")):
        assert d.take("ray#0", True) == idx
        pool.flight[ref] = (0, idx)
        pool.queues[0].append((ref, idx))
    pool.info[1] = {}  # an actor still starting is not idle: nothing is taken back for it
    pool._steal(d, [0, 1])
    assert cancelled == [] and not d.waiting
    pool.info[1] = {"identity": {"uuid": "x"}}
    pool._steal(d, [0, 1])
    assert cancelled == ["next"] and pool.stolen == {"next"} and list(d.waiting) == [1] and d.attempts[1] == 0
    assert [r for r, _ in pool.queues[0]] == ["slow"] and "next" in pool.flight  # still read when it comes back
    pool._feed(d, d.items, [0, 1], {})
    assert [idx for _, idx in pool.queues[1]] == [1] and len(pool.queues[0]) == 1  # the idle actor took it
    d.reclaim(1)  # the cancelled copy ran all the same and came back first: it is not run again
    assert not d.waiting


def test_ray_pool_queues_ahead_steals_back_and_reports_phases(ray_cluster):
    # The setup takes 0.5 s: the first items are asked for before the actors are ready (no hello round trip).
    items = [Item(("slow",), Call(time.sleep, (1.5,)))] + [Item((str(i),), Call(time.sleep, (0.01,))) for i in range(6)]
    with open_pool(devices="cpu:2", ray="auto", setup=Call(time.sleep, (0.5,))) as pool:
        outs = list(pool.map_unordered(items))
        phases = pool.phases()
    assert sorted(o.index for o in outs) == list(range(7)) and all(o.ok and o.attempts == 1 for o in outs)
    slow = next(o for o in outs if o.index == 0)
    assert all(o.worker != slow.worker for o in outs if o.index)  # the item queued behind the slow one moved
    assert outs[-1].index == 0
    actors = phases["actors"]
    assert len(actors) == 2 and all(a["born"] <= a["ready"] <= a["hello_read"] for a in actors.values())
    assert phases["connected"] <= phases["actors_asked"] <= phases["first_item_asked"]
    assert phases["first_item_asked"] < min(a["ready"] for a in actors.values())
    assert phases["idle_between_items"]["gaps"] == 5  # 7 items on 2 actors


def test_ray_actor_killed_loses_only_its_running_item(ray_cluster, monkeypatch):
    # ray#1 dies (SIGKILL-like os._exit) as its 2nd item starts; the item queued behind it never started.
    monkeypatch.setenv("SOLKIT_SCALE_TEST_KILL", "ray#1:2")
    items = [Item((str(i),), Call(time.sleep, (0.05,))) for i in range(8)]
    with open_pool(devices="cpu:2", ray="auto") as pool:
        outs = list(pool.map_unordered(items))
        labels = pool.labels
    assert sorted(o.index for o in outs) == list(range(8)) and all(o.ok for o in outs)
    retried = [o for o in outs if o.attempts == 2]
    # its running item, and on a loaded machine (CI's other test worker) also the one already handed to it, are
    # tried again on the other actor; nothing else is lost
    assert 1 <= len(retried) <= 2 and all(o.worker == labels[0] for o in retried)


def test_ray_setup_failure_fails_the_items_with_its_reason(ray_cluster):
    with open_pool(devices="cpu:1", ray="auto", setup=Call(int, ("nope",))) as pool:
        outs = list(pool.map_unordered([Item(("a",), Call(abs, (1,))), Item(("b",), Call(abs, (2,)))]))
    assert len(outs) == 2 and not any(o.ok for o in outs)
    assert all("setup failed" in o.error and "invalid literal" in o.error for o in outs)
    assert all(o.attempts == 0 for o in outs)  # never started anywhere
