"""The engines a lab page may talk to: the operator's list, never a reader's.

A page that sent requests to any URL a reader typed would be an open proxy into whatever network
the server sits in, so the list is fixed by the operator: the four engines `make engine` serves on
127.0.0.1 (core.engines.launch.MAKE_ENGINE_PORTS) plus any named in the environment variable
PDLAB_ENGINES, a JSON list of objects {"name", "url", "model", optional "budget", "max_seqs",
"engine", "label", "kv_events"}. An entry that cannot be used is skipped and named in a message the
page shows to operators (never a traceback). PDLAB_MAKE_ENGINE_PORTS=off drops the make-engine four
(a test that must not see a developer's running engine), and a number moves them to that port and
the three after it.

`kv_events` (an operator's vLLM started with `--kv-events-config`): the `ipc://` address it publishes
its KV cache events on, so the page can draw its blocks; only the operator names it, never a reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from core import settings
from core.engines.kinds import KINDS, SERVED_NAME, kind_of
from core.engines.kinds.vllm import kv_events_endpoint
from core.engines.launch import MAKE_ENGINE_PORTS, SETTINGS, EngineSetting

ENGINES_ENV = "PDLAB_ENGINES"
PORTS_ENV = "PDLAB_MAKE_ENGINE_PORTS"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")
IPC = re.compile(r"^ipc:///[\w./-]{1,192}$")
MAX_ENTRIES = 16
MAX_BUDGET = 1_000_000
DEFAULT_MAX_SEQS = 128  # vLLM's default --max-num-seqs, for an operator's engine that does not say


@dataclass(frozen=True)
class Endpoint:
    """One engine the page may run against. `setting` names a make-engine setting (None for the
    operator's own); `budget` is its tokens per iteration when known; `name` is also the name the
    simulator's fit to it is saved under."""

    name: str
    label: str
    base_url: str
    model: str
    setting: str | None = None
    budget: int | None = None
    max_seqs: int = DEFAULT_MAX_SEQS
    engine: str = "openai"  # "vllm", "llama-server", or any other OpenAI-compatible server
    kv_events: str | None = None  # the ipc:// address its KV cache events are published on, if any

    @property
    def operator(self) -> bool:
        return self.setting is None

    @property
    def where(self) -> str:
        """Where it is, fit to show a reader: host and port of a loopback engine, else only its name
        (an operator's URL may name a host inside their network)."""
        parts = urlsplit(self.base_url)
        if parts.hostname in ("127.0.0.1", "localhost", "::1"):
            return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname
        return "configured by the operator"

    def engine_setting(self) -> EngineSetting:
        """The core.engines setting the runs and the fit are recorded under (a made-up one, named
        after the entry, for an operator's engine; its budget 2,048, vLLM's default, when unknown)."""
        if self.setting in SETTINGS:
            return SETTINGS[self.setting]
        return EngineSetting(self.name, self.engine, self.budget or 2048, self.max_seqs)


def make_engine_endpoints(environ: Mapping[str, str]) -> tuple[list[Endpoint], list[str]]:
    """The settings `make engine` serves, on their fixed ports (or as PDLAB_MAKE_ENGINE_PORTS says)."""
    raw = environ.get(PORTS_ENV, "").strip().lower()
    if raw in ("off", "none", "0", "no"):
        return [], []
    shift, problems = 0, []
    if raw:
        try:
            base = int(raw)
            if not 1024 <= base <= 65532:
                raise ValueError
            shift = base - min(MAKE_ENGINE_PORTS.values())
        except ValueError:
            problems.append(f"{PORTS_ENV}={raw[:40]!r} is neither 'off' nor a port from 1024 to 65532; "
                            "the usual ports are used")
    out = []
    for name, port in MAKE_ENGINE_PORTS.items():
        s = SETTINGS[name]
        events = kv_events_endpoint(port + shift, make_folder=False) if s.kv_events else None
        label = s.label + (", prefix cache on" if s.prefix_cache else "")
        out.append(Endpoint(name, label, f"http://127.0.0.1:{port + shift}", SERVED_NAME, name, s.budget,
                            s.max_seqs, s.engine, events))
    return out, problems


def _entry(item: object, taken: set[str]) -> Endpoint:
    """One operator entry checked field by field; ValueError says what is wrong with it."""
    if not isinstance(item, dict):
        raise ValueError("it is not a JSON object")
    name, url, model = item.get("name"), item.get("url"), item.get("model")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError("'name' must be 1-40 lower-case letters, digits, '.', '_' or '-'")
    if name in taken:
        raise ValueError(f"the name {name!r} is already taken")
    from core.hardware import HOST, list_presets

    if name in list_presets() or name == HOST:
        raise ValueError(f"{name!r} names a machine the simulator already knows; it would price that one instead")
    if not isinstance(url, str) or len(url) > 300:
        raise ValueError("'url' must be a string of at most 300 characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("'url' must be an http:// or https:// address with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("'url' must not hold a user name, password, query or fragment")
    if not isinstance(model, str) or not 0 < len(model) <= 200:
        raise ValueError("'model' must be the served model's name")
    budget, max_seqs = item.get("budget"), item.get("max_seqs", DEFAULT_MAX_SEQS)
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                               or not 1 <= budget <= MAX_BUDGET):
        raise ValueError(f"'budget' must be a whole number of tokens from 1 to {MAX_BUDGET:,}")
    if isinstance(max_seqs, bool) or not isinstance(max_seqs, int) or not 1 <= max_seqs <= 4096:
        raise ValueError("'max_seqs' must be a whole number from 1 to 4,096")
    engine = item.get("engine", "openai")
    if engine not in KINDS:
        raise ValueError("'engine' must be " + " or ".join(f"'{name}'" for name in KINDS))
    label = item.get("label") or name
    if not isinstance(label, str):
        raise ValueError("'label' must be a string")
    clean = re.sub(r"[^\w .,:()+/-]", "", label)[:80] or name  # shown on the page: plain characters only
    events = item.get("kv_events")
    if events is not None and (not isinstance(events, str) or not IPC.match(events)):
        raise ValueError("'kv_events' must be an ipc:// address of at most 200 characters (the engine's "
                         "--kv-events-config endpoint)")
    return Endpoint(name, clean, url.rstrip("/"), model, None, budget, max_seqs, engine, events)


def operator_endpoints(environ: Mapping[str, str], taken: set[str]) -> tuple[list[Endpoint], list[str]]:
    raw = environ.get(ENGINES_ENV, "").strip()
    if not raw:
        return [], []
    try:
        items = json.loads(raw)
    except ValueError as exc:
        return [], [f"{ENGINES_ENV} is not JSON ({exc.msg} at character {exc.pos}); no engine was read from it"]
    if not isinstance(items, list):
        return [], [f"{ENGINES_ENV} must be a JSON list of objects; no engine was read from it"]
    out, problems = [], []
    for k, item in enumerate(items):
        if k >= MAX_ENTRIES:
            problems.append(f"{ENGINES_ENV} lists {len(items)} engines; only the first {MAX_ENTRIES} are used")
            break
        try:
            endpoint = _entry(item, taken)
        except ValueError as exc:
            problems.append(f"{ENGINES_ENV} entry {k + 1} is skipped: {exc}.")
            continue
        taken.add(endpoint.name)
        out.append(endpoint)
    return out, problems


def read_config(environ: Mapping[str, str] | None = None) -> tuple[list[Endpoint], list[str]]:
    """Every configured endpoint, and a message for each entry that could not be used."""
    env = settings.engine_lab_environment() if environ is None else environ
    made, problems = make_engine_endpoints(env)
    theirs, more = operator_endpoints(env, {e.name for e in made} | set(SETTINGS))
    return made + theirs, problems + more


def configured(environ: Mapping[str, str] | None = None) -> list[Endpoint]:
    """The endpoints a page may offer (read_config without the messages)."""
    return read_config(environ)[0]


def version_of(endpoint: Endpoint, timeout_s: float = 2.0) -> str:
    """The engine's version as the run will record it: vLLM answers `/version`; a make-engine
    llama-server is asked on its command line; anything else says it is unknown."""
    import httpx

    try:
        r = httpx.get(endpoint.base_url + "/version", timeout=timeout_s, trust_env=False)
        found = r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        found = None
    kind = kind_of(endpoint.engine)
    if isinstance(found, str) and found:
        return kind.version_label(found[:40], started_here=endpoint.setting is not None)
    if endpoint.setting:
        return kind.version()
    return f"{endpoint.engine} (version unknown)"
