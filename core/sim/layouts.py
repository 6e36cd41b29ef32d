"""Deployment layouts: where a simulation's servers stand and how each request travels through them.

A layout owns the servers, not the decisions: it builds every server's queue, runs each server's
event loop (core.sim.engine) under the policy class it is given, and reports when every token came
out and where. Each policy names the layout it needs (`Policy.layout`); `simulate()` looks it up
here, so a new layout is one registered class in this module, and `--policy disaggregated` keeps
meaning what it meant.

- colocated: every model copy prefills and decodes; a router (core.sim.routers) sends each arriving
  request to a copy: in turn (round robin), or by what the copies hold (prefix-aware), the copies
  then running on one clock.
- disaggregated: some copies only prefill, the rest only decode; each request's KV cache moves
  from its prefill copy to a decode copy over the devices' link, one transfer at a time per link.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from core.registry import Registry
from core.sim.engine import Server, ServerLog, run_server
from core.sim.policy import Policy, Seq, State
from core.sim.routers import get_router
from core.sim.steptime import StepTime
from core.sim.workload import Request


class Copies(Protocol):
    """What a layout reads of the settings (core.sim.simulate.SimConfig has it)."""

    instances: int
    request_overhead_s: float  # each request's cost in the copy's front end (HTTP, tokenizing): see FrontEnd
    prefix_cache: bool  # each copy keeps full KV blocks by content and reuses them (core.sim.prefix)
    router: str  # which copy an arriving request goes to (core.sim.routers)
    router_queue_bound: int
    turns: int  # turns per conversation (core.sim.sharing): above 1, later turns wait for earlier answers

    def prefill_count(self) -> int: ...


@dataclass
class Served:
    """What the servers did, per request (by its position in the request list) and per server."""

    token_s: list[list[float]]  # when each output token came out
    server_of: list[int]  # the server that produced its tokens (the decode one when split)
    preemptions_of: list[int]
    servers: list[tuple[str, ServerLog]] = field(default_factory=list)  # (role, log)
    transfers: list[tuple[int, float, float]] = field(default_factory=list)  # (request id, start, end)
    arrival_of: dict[int, float] = field(default_factory=dict)  # a conversation's later turns: when each was sent

    @classmethod
    def empty(cls, n: int) -> Served:
        return cls([[] for _ in range(n)], [0] * n, [0] * n)


@dataclass(frozen=True)
class Setting:
    """Everything a layout needs besides the requests: the shared pieces every server is built from."""

    config: Copies
    policy: type[Policy]
    step: StepTime
    blocks: int  # KV blocks per server
    state: State
    kv_bytes_per_token: float  # per device, for a hand-off over the link
    link: object | None  # core.hardware's interconnect (latency_s, bandwidth_bytes_per_s), or None
    should_stop: Callable[[], bool] | None = None
    keep_blocks: bool = False  # prefix caches log which request made each block findable (ServerLog.prefix_blocks_held)


class Layout(ABC):
    """How the copies of the model are arranged. `name` is its registry key."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def check(self, config: Copies) -> None:
        """ValueError, in words, for a number of copies this layout cannot use."""
        return None

    @abstractmethod
    def run(self, requests: Sequence[Request], setting: Setting) -> Served:
        """Every server's loop over `requests` (in arrival order; positions as in the request list)."""


_REGISTRY: Registry[Layout] = Registry("deployment layout")
LAYOUTS = _REGISTRY.entries
register = _REGISTRY.register
get_layout = _REGISTRY.get


def _positions(requests: Sequence[Request]) -> tuple[list[Request], dict[int, int]]:
    index = {r.id: k for k, r in enumerate(requests)}
    return sorted(requests, key=lambda r: (r.arrival_s, r.id)), index


class FrontEnd:
    """A copy's front end (HTTP, tokenizing): `cost_s` per request, one request at a time, in arrival
    order. A request reaches the scheduler `cost_s` after the one before it has, or after it arrived,
    whichever is later; a burst therefore queues here too, as it does in front of a real engine."""

    def __init__(self, cost_s: float) -> None:
        self.cost_s, self.ready = cost_s, float("-inf")

    def reached_s(self, arrival_s: float) -> float:
        """When a request arriving at `arrival_s` (the latest so far) reaches the scheduler."""
        if self.cost_s <= 0:
            return arrival_s
        self.ready = max(arrival_s, self.ready) + self.cost_s
        return self.ready


def front_end(seqs: list[Seq], cost_s: float) -> list[Seq]:
    """`seqs` (in arrival order) through one copy's FrontEnd: each one's available_s set."""
    door = FrontEnd(cost_s)
    for s in seqs:
        s.available_s = door.reached_s(s.request.arrival_s)
    return seqs


@register
class Colocated(Layout):
    name = "colocated"
    description = "every model copy prefills and decodes; requests dealt to the copies in turn"

    def run(self, requests: Sequence[Request], setting: Setting) -> Served:
        ordered, index = _positions(requests)
        config = setting.config
        out, n = Served.empty(len(requests)), config.instances
        names: dict[int, list[int]] = {}  # block names, worked out once for every copy
        servers = [Server(setting.policy(), setting.step, setting.blocks, setting.state,
                          should_stop=setting.should_stop, prefix_cache=config.prefix_cache, names=names,
                          keep_blocks=setting.keep_blocks)
                   for _ in range(n)]
        router = get_router(config.router)(config.router_queue_bound)
        doors = [FrontEnd(config.request_overhead_s) for _ in range(n)]
        placed: list[tuple[int, Seq]] = []

        def place(r: Request, at: float) -> None:
            k = router.pick(r, servers)
            seq = Seq(r, doors[k].reached_s(at), r.prompt_tokens)
            servers[k].offer(seq)
            placed.append((k, seq))

        if any(r.follows is not None for r in ordered):
            _closed_loop(ordered, servers, place, out)
        else:
            for r in ordered:
                if router.needs_state:
                    for server in servers:
                        server.run(until=r.arrival_s)
                place(r, r.arrival_s)
        for server in servers:
            out.servers.append(("both", server.run()))
        for k, s in placed:
            i = index[s.request.id]
            out.token_s[i], out.server_of[i], out.preemptions_of[i] = s.token_s, k, s.preemptions
        return out


def _closed_loop(ordered: list[Request], servers: list[Server], place: Callable[[Request, float], None],
                 out: Served) -> None:
    """Conversations: a later turn is sent `think_s` after its previous turn's last token, so arrivals
    are decided while simulating. The copies advance pass by pass, the one with the earliest next
    event first; an arrival due no later than that is placed first (the router sees every copy as
    it stands then)."""
    later = {r.follows: r for r in ordered if r.follows is not None}
    due = [(r.arrival_s, r.id, r) for r in ordered if r.follows is None]
    heapq.heapify(due)
    for server in servers:
        server.finished = []
    while True:
        server = min(servers, key=Server.next_event_s)
        t = server.next_event_s()
        if due and due[0][0] <= t:
            at, _, r = heapq.heappop(due)
            if r.follows is not None:
                out.arrival_of[r.id] = at
            place(r, at)
            continue
        if t == float("inf"):
            break
        server.step()
        for seq in server.finished:
            turn = later.get(seq.request.id)
            if turn is not None and seq.token_s:
                heapq.heappush(due, (seq.token_s[-1] + turn.think_s, turn.id, turn))
        server.finished.clear()
    if due or any(s.pending or s.waiting or s.running for s in servers):
        raise RuntimeError("the conversation loop ended with requests still to serve")


@register
class Disaggregated(Layout):
    name = "disaggregated"
    description = "prefill copies and decode copies apart, each request's KV cache sent over the link"

    def check(self, config: Copies) -> None:
        if config.turns > 1:
            raise ValueError("conversations are simulated on colocated copies (a later turn waits for the "
                             "answer before it; a split deployment's hand-offs are not modelled with that)")
        if config.router != "round-robin":
            raise ValueError(f"the {config.router} router places requests on colocated copies; disaggregated "
                             "serving deals them to its prefill copies in turn (round robin)")
        p = config.prefill_count()
        if config.instances < 2 or not 1 <= p < config.instances:
            raise ValueError("disaggregated serving needs at least two model copies, at least one for prefill "
                             f"and one for decode (instances {config.instances}, prefill {p})")

    def run(self, requests: Sequence[Request], setting: Setting) -> Served:
        ordered, index = _positions(requests)
        out, config = Served.empty(len(requests)), setting.config
        n_pre, link = config.prefill_count(), setting.link
        handoffs = []
        for k in range(n_pre):
            seqs = front_end([Seq(r, r.arrival_s, r.prompt_tokens) for r in ordered[k::n_pre]], config.request_overhead_s)
            out.servers.append(("prefill", run_server(seqs, setting.policy("prefill"), setting.step, setting.blocks,
                                                      setting.state, hand_off=True, should_stop=setting.should_stop,
                                                      prefix_cache=config.prefix_cache,
                                                      keep_blocks=setting.keep_blocks)))
            link_free = 0.0
            for s in sorted(seqs, key=lambda s: s.token_s[0] if s.token_s else float("inf")):
                i = index[s.request.id]
                out.token_s[i], out.server_of[i], out.preemptions_of[i] = s.token_s, k, s.preemptions
                if s.request.output_tokens > 1 and s.token_s:
                    begin = max(s.token_s[0], link_free)
                    end = begin + (link.latency_s + s.request.prompt_tokens * setting.kv_bytes_per_token
                                   / link.bandwidth_bytes_per_s if link else 0.0)
                    link_free = end
                    out.transfers.append((s.request.id, begin, end))
                    handoffs.append((end, s))
        handoffs.sort(key=lambda h: (h[0], h[1].request.id))
        n_dec = config.instances - n_pre
        for k in range(n_dec):
            seqs = [Seq(s.request, end, s.request.prompt_tokens, prefilled=s.request.prompt_tokens, generated=1,
                        preemptions=s.preemptions, token_s=list(s.token_s)) for end, s in handoffs[k::n_dec]]
            out.servers.append(("decode", run_server(seqs, setting.policy("decode"), setting.step, setting.blocks,
                                                     setting.state, should_stop=setting.should_stop)))
            for s in seqs:
                i = index[s.request.id]
                out.token_s[i], out.server_of[i], out.preemptions_of[i] = s.token_s, n_pre + k, s.preemptions
        return out
