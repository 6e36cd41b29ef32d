"""The engine lab's prose: what the experiment is, what its numbers mean, how to start an engine.

Kept apart from the page so the live and the recorded views say the same thing in the same words.
"""

from __future__ import annotations

INTRO = """A **serving engine** is the program that answers many people's prompts on one machine at
once. Here it is [vLLM](https://docs.vllm.ai) (its build for ordinary CPUs) serving the same small model as
the live page, SmolLM2-135M. The experiment is short. A few **short streams** start: each sends a
32-token prompt and asks for 96 tokens, and the engine decodes them together, one token for each
stream per iteration, so every stream ticks along steadily. Then, 0.8 s in, a **long prompt** of
1,536 tokens arrives.

The engine's **token budget** says how many tokens one iteration may process. With **2,048**, the
whole 1,536-token prompt fits, so it is prefilled in one big iteration, and every stream's next
token waits until that iteration ends: a gap in every row of ticks, the **stall**. With **256**, the
prompt is cut into chunks that ride along with the decode steps: the streams keep ticking, a little
slower, and the long prompt's prefill is spread over several iterations instead: the same work,
shared out differently, and the rows below measure who waits for what. The
[serving page](./serving) simulates the whole scheduling story for big models on big GPUs; here the
same simulator is held against a real engine, tick for tick."""

DEFINITIONS = """**What the numbers mean.** Times run from the moment each request was sent.
- **TTFT** (time to first token): from sending a request to its first output token; for a prompt it
  is mostly the prefill, plus any wait in the engine's queue.
- **TPOT** (time per output token): a request's (E2E − TTFT) / (n − 1) for n output tokens, where
  E2E runs from sending to the last token: its average gap after the first token. **ITL**
  (inter-token latency) is each single gap; the simulator's ITL error below compares each request's
  average gap, its TPOT.
- **The stall**: for each short stream, its longest gap between two tokens while the long prompt
  was in the engine (from its sending to its first token); the figure given is the median over
  the short streams.

**Measured** means timed by this page's client as the tokens arrived (or, where it says *engine's
metrics*, reported by the engine itself); **simulated** means predicted by the serving simulator,
fitted to this engine by a short probe of its prefills and decode steps; **computed** means
worked out from those two, like an error."""

HOW_TO_START = """**Run it live.** On a server with this project checked out, `make engine` starts vLLM
three times (budgets of 2,048 and 256 tokens per iteration, and 256 with its prefix cache on) and
llama-server, on 127.0.0.1 ports 8601-8604.
The first time, it also installs vLLM's CPU build and builds llama-server, which takes several
minutes more. vLLM itself takes 2-3 minutes to start; this page finds the engines by itself once
they answer. An operator can list other OpenAI-compatible engines in the `PDLAB_ENGINES` setting."""

LIVE_HOW = """Press **Start the run** to play the experiment on the engine you picked. Rows of ticks
appear as the tokens arrive, one row per stream. The long prompt is sent 0.8 s in, unless you choose
to send it yourself: then the streams run four times longer and a button **Inject the long prompt**
appears while they play. When the run ends, the simulator replays the same requests and its
timeline is drawn underneath."""

ERROR_CAPTION = ("Error (computed) is |simulated − measured| / measured. A run of a handful of requests is noisy: "
                 "run it again and the measured numbers move.")
