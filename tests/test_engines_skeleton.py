"""core.engines' interface before any client exists: the registry and the request/arrival records."""

from __future__ import annotations

import pytest

from core.engines.base import ENGINES, EngineClient, EngineRequest, Health, TokenArrival, get_engine, register


@pytest.fixture
def clean_registry():
    saved = dict(ENGINES)
    yield
    ENGINES.clear()
    ENGINES.update(saved)


def test_registry_finds_a_registered_client_and_refuses_unknown_names(clean_registry):
    @register
    class Echo(EngineClient):
        """Streams the prompt's words back, one per 10 ms: the shape a real client has."""

        name = "test-echo"

        def health(self) -> Health:
            return Health(ok=True)

        def stream(self, request):
            for i, word in enumerate(request.prompt.split()[:request.max_new_tokens]):
                yield TokenArrival(index=i, text=word, t_s=0.01 * (i + 1))

    client = get_engine("test-echo")()
    assert client.health() == Health(ok=True)
    arrivals = list(client.stream(EngineRequest(prompt="a b c", max_new_tokens=2)))
    assert [a.text for a in arrivals] == ["a", "b"] and [a.index for a in arrivals] == [0, 1]
    with pytest.raises(ValueError, match="test-echo"):
        get_engine("vllm-that-is-not-here")


def test_registry_refuses_unnamed_clients(clean_registry):
    class Unnamed(EngineClient):
        def health(self):
            return Health(ok=False, detail="never up")

        def stream(self, request):
            return iter(())

    with pytest.raises(ValueError, match="name"):
        register(Unnamed)
    with pytest.raises(TypeError):
        EngineClient()  # type: ignore[abstract]


@pytest.mark.parametrize("kwargs", [{"prompt": ""}, {"max_new_tokens": 0}, {"max_new_tokens": True},
                                    {"temperature": -1.0}, {"temperature": float("nan")}])
def test_request_validates(kwargs):
    good = {"prompt": "hi", "max_new_tokens": 4}
    assert EngineRequest(**good).temperature == 0.0
    with pytest.raises(ValueError):
        EngineRequest(**{**good, **kwargs})


@pytest.mark.parametrize("kwargs", [{"index": -1}, {"t_s": -0.1}, {"t_s": float("inf")}])
def test_token_arrival_validates(kwargs):
    good = {"index": 0, "text": "x", "t_s": 0.05}
    assert TokenArrival(**good).token_id is None
    with pytest.raises(ValueError):
        TokenArrival(**{**good, **kwargs})
