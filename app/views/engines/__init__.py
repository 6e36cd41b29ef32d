"""The engine lab: a real serving engine (vLLM's CPU build, llama-server) measured token by token
beside the simulator. `view.render()` draws it; the engine picker and health, the live run and its
jobs, the bundled recording, figures, numbers and text beside it."""
