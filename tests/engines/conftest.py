"""Real engines for the engine tests: each started once per session on a free loopback port and
stopped with its whole process group at the end (or by the test that kills it).

vLLM's CPU build is set up by `make test` (make engine-setup builds llama-server too); a test of
an engine that is not set up fails and says which make target sets it up, except llama-server's,
which `make test` does not build (5 minutes of both cores): those skip with that reason.
"""

from __future__ import annotations

import pytest

from core.engines.launch import SETTINGS
from core.engines.session import installed, started
from tests.early_engine import early


def _start(name: str, required: bool):
    setting = SETTINGS[name]
    if not installed(setting.engine):
        message = f"{setting.engine} is not set up here: run `make engine-setup`"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    return started(setting, progress=None, timeout_s=900)


@pytest.fixture(scope="session")
def vllm():
    """Started in the background when the tests were collected (tests/early_engine.py), so its start
    overlapped the other tests; started here only when it was not."""
    engine = early("vllm-b2048")
    if engine is None:
        with _start("vllm-b2048", required=True) as live:
            yield live
        return
    try:
        yield engine.take()
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def vllm_prefix():
    """vLLM at a budget of 256 with its prefix cache on (vllm-b256-pc): started only for the tests that
    measure the cache, which run after the other engine tests (marker prefix_engine), so its start
    never shares the cores with a measurement."""
    with _start("vllm-b256-pc", required=True) as live:
        yield live


@pytest.fixture(scope="session")
def llama():
    with _start("llama-b2048", required=False) as live:
        yield live


PROBE_REPEATS = 2  # as the page's and the CLI's calibration (core.engines.experiments.calibrate)


@pytest.fixture(scope="session")
def vllm_probe(vllm) -> tuple:
    """The engine's probe (core.engines.experiments.probe: its forwards and its concurrent prompts),
    measured once per session while no page or browser shares the cores with it, and fitted by each
    test under the name it needs (experiments.fit_samples): probing takes about a minute a time."""
    from core.engines import experiments

    return experiments.probe(vllm, repeats=PROBE_REPEATS)
