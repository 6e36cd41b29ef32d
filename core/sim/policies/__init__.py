"""The scheduling policies the simulator compares, one small class per module.

Each answers one question, "what runs in the next iteration?", from the queue, the running
requests and the free KV blocks. Preemption, block accounting, pricing and the clock belong to
the loop (core.sim.engine), and where the servers stand (one pool, or prefill and decode apart)
to the deployment layout (core.sim.layouts), so a policy reads as the one rule it stands for.

Importing this package registers every policy below: it is the one place a new policy is listed
(add a module here with a `@register`ed Policy subclass, and one import line). The command line's
choices and the serving page's options are read from the registry, in this order.
"""

# The order here is the order the command line and the page list them in.
# isort: off
from core.sim.policies import static  # noqa: F401
from core.sim.policies import prefill_first  # noqa: F401
from core.sim.policies import decode_first  # noqa: F401
from core.sim.policies import chunked  # noqa: F401
from core.sim.policies import disaggregated  # noqa: F401
# isort: on
from core.sim.policy import POLICIES, get_policy

__all__ = ["POLICIES", "get_policy"]
