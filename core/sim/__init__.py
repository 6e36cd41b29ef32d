"""A discrete-event simulation of one serving machine, for scheduling questions a single run cannot answer.

Requests arrive (workload), a policy picks which of them share each iteration (policy), and the
clock advances by that iteration's time. Every iteration is priced by the one cost function,
core.cost.forward_cost, through core.predictor: there is no second cost model here, so what the
simulator says about batching and queueing stays consistent with the single-run views and with
the predictor's measured error. metrics holds the latency definitions the results are reported in.
"""
