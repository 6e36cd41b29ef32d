"""core.sim's interfaces before any policy exists: the registry, the request, the TPOT definition."""

from __future__ import annotations

import pytest

from core.sim import metrics
from core.sim.policy import POLICIES, Policy, Row, Seq, State, get_policy, register
from core.sim.workload import Request


@pytest.fixture
def clean_registry():
    saved = dict(POLICIES)
    yield
    POLICIES.clear()
    POLICIES.update(saved)


def test_registry_finds_a_registered_policy_and_refuses_unknown_names(clean_registry):
    @register
    class FirstComeOneAtATime(Policy):
        name = "test-fcfs-one"

        def next_iteration(self, waiting, running, state):
            if running:
                return [Row(running[0], 1)]
            return [Row(waiting[0], waiting[0].target)] if waiting else []

    assert get_policy("test-fcfs-one") is FirstComeOneAtATime
    policy = get_policy("test-fcfs-one")()
    req = Request(id=0, arrival_s=0.0, prompt_tokens=5, output_tokens=3)
    state = State(now_s=0.0, free_blocks=64)
    fresh = Seq(req, 0.0, 5)
    assert policy.next_iteration([fresh], [], state) == [Row(fresh, 5)]
    started = Seq(req, 0.0, 5, prefilled=5, generated=1)
    assert started.decoding and not fresh.decoding
    assert policy.next_iteration([], [started], state) == [Row(started, 1)]
    with pytest.raises(ValueError, match="test-fcfs-one") as info:
        get_policy("no-such-policy")
    assert "unknown policy 'no-such-policy'" in str(info.value)


def test_registry_refuses_unnamed_and_duplicate_policies(clean_registry):
    class Unnamed(Policy):
        def next_iteration(self, waiting, running, state):
            return []

    with pytest.raises(ValueError, match="name"):
        register(Unnamed)

    @register
    class One(Policy):
        name = "test-dup"

        def next_iteration(self, waiting, running, state):
            return []

    class Other(One):
        name = "test-dup"

    with pytest.raises(ValueError, match="already registered"):
        register(Other)
    assert register(One) is One  # registering the same class again is harmless


def test_policy_is_abstract():
    with pytest.raises(TypeError):
        Policy()  # type: ignore[abstract]


@pytest.mark.parametrize("kwargs", [
    {"id": -1}, {"id": True}, {"arrival_s": -0.5}, {"arrival_s": float("nan")}, {"arrival_s": float("inf")},
    {"prompt_tokens": 0}, {"output_tokens": 0}, {"prompt_tokens": 2.5}, {"output_tokens": True},
])
def test_request_validates(kwargs):
    good = {"id": 1, "arrival_s": 0.25, "prompt_tokens": 16, "output_tokens": 8}
    assert Request(**good).prompt_tokens == 16
    with pytest.raises(ValueError):
        Request(**{**good, **kwargs})


def test_tpot_is_the_mean_gap_after_the_first_token():
    # First token at 0.5 s, tenth (last) at 2.3 s: nine gaps of 0.2 s.
    assert metrics.tpot_s(2.3, 0.5, 10) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        metrics.tpot_s(1.0, 0.5, 1)
    with pytest.raises(ValueError):
        metrics.tpot_s(0.4, 0.5, 3)
