"""PromptGrid: a round ends soon after its last reply, never after its timeout, and
uses no reply that came too late. Time is virtual (the module's clock and sleep are
replaced), so nothing here waits."""

from __future__ import annotations

import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.server import grid as grid_module
from ldpfda.server.grid import PromptGrid


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


class StoreGrid:
    """Push/pull only, as a SuperLink offers: message ``i`` is answered at virtual
    time ``arrivals[i]`` (None: never); ``refused`` messages get no id on push."""

    def __init__(self, clock: Clock, arrivals, refused=(), pull_cost=0.0) -> None:
        self.clock, self.arrivals, self.refused = clock, list(arrivals), set(refused)
        self.pull_cost = pull_cost
        self.replies: dict[str, tuple[float, Message]] = {}
        self.pulls: list[set[str]] = []

    def push_messages(self, messages):
        ids = []
        for i, message in enumerate(messages):
            if i in self.refused:
                ids.append(None)
                continue
            message.metadata.__dict__["_message_id"] = f"m{i}"
            if self.arrivals[i] is not None:
                reply = Message(
                    RecordDict({"r": ConfigRecord({"i": i})}), reply_to=message
                )
                self.replies[f"m{i}"] = (self.arrivals[i], reply)
            ids.append(f"m{i}")
        return ids

    def pull_messages(self, message_ids):
        asked = set(message_ids)
        self.pulls.append(asked)
        self.clock.now += self.pull_cost
        ready = [
            key
            for key in asked
            if key in self.replies and self.replies[key][0] <= self.clock.now
        ]
        return [self.replies.pop(key)[1] for key in ready]

    def get_node_ids(self):
        return [1, 2, 3]


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(grid_module.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(grid_module.time, "sleep", clock.sleep)
    return clock


def _messages(n: int) -> list[Message]:
    # Messages take their run and source ids from the task's identity, which Flower
    # sets in a ServerApp process.
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1
    return [Message(RecordDict(), 1 + i, "query.x") for i in range(n)]


def _answered(replies) -> list[int]:
    return sorted(int(m.content["r"]["i"]) for m in replies)


def test_the_round_ends_within_one_longest_wait_of_its_last_reply(clock):
    # Replies spread over 20 s, the last at 19.3 s: Flower's 3 s pulls could end the
    # round at up to 22.3 s; this grid at most 1 s after the last reply.
    arrivals = [0.02, 0.4, 2.5, 7.0, 19.3]
    store = StoreGrid(clock, arrivals)
    grid = PromptGrid(store, first=0.05, longest=1.0)
    replies = grid.send_and_receive(_messages(5), timeout=300.0)
    assert _answered(replies) == [0, 1, 2, 3, 4]
    assert 19.3 <= clock.now <= 19.3 + 1.0
    assert max(clock.sleeps) <= 1.0
    # Every pull asks only for what is still missing.
    assert store.pulls[0] == {f"m{i}" for i in range(5)}
    assert store.pulls[-1] == {"m4"}


def test_a_reply_after_the_timeout_is_not_used_and_the_round_ends_at_the_timeout(clock):
    store = StoreGrid(clock, [0.1, None, 12.0])
    grid = PromptGrid(store)
    replies = grid.send_and_receive(_messages(3), timeout=10.0)
    assert _answered(replies) == [0]
    assert clock.now == pytest.approx(10.0)


def test_a_message_the_superlink_did_not_take_is_not_waited_for(clock):
    store = StoreGrid(clock, [0.3, 0.5, 0.2], refused={1})
    replies = PromptGrid(store).send_and_receive(_messages(3), timeout=60.0)
    assert _answered(replies) == [0, 2]
    assert clock.now < 1.0


def test_without_a_timeout_it_waits_for_every_reply(clock):
    store = StoreGrid(clock, [500.0, 0.1])
    replies = PromptGrid(store).send_and_receive(_messages(2), timeout=None)
    assert _answered(replies) == [0, 1]
    assert 500.0 <= clock.now <= 501.0


def test_a_zero_timeout_pulls_once(clock):
    store = StoreGrid(clock, [0.0, 1.0])
    replies = PromptGrid(store).send_and_receive(_messages(2), timeout=0.0)
    assert _answered(replies) == [0]
    assert len(store.pulls) == 1 and clock.now == 0.0


def test_slow_pulls_are_spaced_out(clock):
    # Each pull takes 0.3 s (many nodes): at least 0.6 s between two pulls, so the
    # SuperLink spends at most a third of the round answering them.
    arrivals = [0.1 * i for i in range(40)]
    store = StoreGrid(clock, arrivals, pull_cost=0.3)
    replies = PromptGrid(store, first=0.05).send_and_receive(
        _messages(40), timeout=300.0
    )
    assert len(replies) == 40
    assert min(clock.sleeps[1:]) >= 0.6 - 1e-12
    busy = 0.3 * len(store.pulls)
    assert busy <= clock.now / 3 + 0.3


def test_everything_else_is_the_wrapped_grids(clock):  # noqa: ARG001
    store = StoreGrid(Clock(), [])
    assert list(PromptGrid(store).get_node_ids()) == [1, 2, 3]
