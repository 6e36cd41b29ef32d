"""The simulator's registries are the way in: a policy or a deployment layout added in one place
reaches the command line, the serving page's options and the simulation, with nothing else edited.

Each test registers a throwaway class, checks every place that lists or runs it, and removes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pytest

from core.cli import build_parser
from core.sim.layouts import LAYOUTS, Colocated, Served, Setting
from core.sim.layouts import register as register_layout
from core.sim.policies import POLICIES, get_policy
from core.sim.policy import Policy, Row, Seq, State, register
from core.sim.simulate import SimConfig, simulate
from core.sim.workload import Request


@contextlib.contextmanager
def registered(table: dict, cls: type) -> Iterator[type]:
    try:
        yield cls
    finally:
        table.pop(cls.name, None)


def _cli_choices() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return next(a for a in sub.choices["simulate"]._actions if a.dest == "policy").choices


def test_the_five_policies_are_registered_in_teaching_order_each_with_a_line():
    """The five the lesson teaches come first, in its order; a policy added later follows them."""
    assert list(POLICIES)[:5] == ["static", "prefill-first", "decode-first", "chunked", "disaggregated"]
    assert all(cls.description and cls.label for cls in POLICIES.values())
    assert {"colocated", "disaggregated"} <= {cls.layout for cls in POLICIES.values()} <= set(LAYOUTS)


def test_a_policy_registered_in_one_place_reaches_the_cli_the_page_and_the_simulator():
    from app.views.serving.link import policy_choices
    from app.views.serving.text import policy_sentence

    class OldestOnly(Policy):
        name = "oldest-only"
        label = "Oldest only"
        description = "one request at a time, start to finish"

        def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
            if running:
                return self.decode_rows(running)[:1] or [Row(running[0], running[0].remaining_prefill)]
            return self.whole_prefills(waiting, running, state)[:1]

    with registered(POLICIES, register(OldestOnly)):
        assert get_policy("oldest-only") is OldestOnly
        assert "oldest-only" in _cli_choices()
        assert "oldest-only" in policy_choices()
        assert policy_sentence("oldest-only") == "**Oldest only**: one request at a time, start to finish."
        one = simulate(SimConfig(policy="oldest-only", requests=20, instances=1))
        assert all(len(t) == r.output_tokens for t, r in zip(one.token_s, one.requests, strict=True))
        assert max(len(log.iterations) for _, log in one.servers) > 0
    assert "oldest-only" not in _cli_choices() and "oldest-only" not in policy_choices()


def test_a_layout_registered_in_one_place_is_the_one_its_policy_runs_in():
    runs: list[int] = []

    class Counted(Colocated):
        """Colocated, counting its runs: proof that simulate() asked the registry, not a name test."""

        name = "counted"
        description = "colocated, counted"

        def run(self, requests: Sequence[Request], setting: Setting) -> Served:
            runs.append(len(requests))
            return super().run(requests, setting)

    class ChunkedCounted(get_policy("chunked")):
        name = "chunked-counted"
        layout = "counted"

    with registered(LAYOUTS, register_layout(Counted)), registered(POLICIES, register(ChunkedCounted)):
        counted = simulate(SimConfig(policy="chunked-counted", requests=50))
        plain = simulate(SimConfig(policy="chunked", requests=50))
    assert runs == [50]
    assert counted.token_s == plain.token_s and counted.metrics == plain.metrics


def test_disaggregated_keeps_its_checks_and_its_hand_offs():
    with pytest.raises(ValueError, match="at least two model copies"):
        SimConfig(policy="disaggregated", instances=1).checked()
    split = simulate(SimConfig(policy="disaggregated", requests=50, instances=2))
    assert [role for role, _ in split.servers] == ["prefill", "decode"]
    assert split.transfers and all(end >= begin for _, begin, end in split.transfers)


def test_a_router_registered_in_one_place_reaches_the_command_line_and_the_simulation():
    from core.sim.routers import ROUTERS, Router
    from core.sim.routers import register as register_router

    class LastCopy(Router):
        name = "last-copy"
        label = "Last copy"
        description = "every request to the last copy"

        def pick(self, request, servers) -> int:
            return len(servers) - 1

    def choices() -> list[str]:
        sub = next(a for a in build_parser()._actions if a.dest == "command")
        return next(a for a in sub.choices["simulate"]._actions if a.dest == "router").choices

    with registered(ROUTERS, register_router(LastCopy)):
        assert "last-copy" in choices()
        result = simulate(SimConfig(router="last-copy", requests=30, instances=3))
        assert set(result.server_of) == {2} and all(len(t) == r.output_tokens
                                                    for t, r in zip(result.token_s, result.requests, strict=True))
    assert "last-copy" not in choices()
