"""What two or more pages share, or a page to come will: the model service and its job queue, the run
types (a live generation, a replayed trace), RunContext, palette, text and link helpers, recorded
experiment results, this server's measured points, session helpers. Never imports a page."""
