"""What two or more pages share: the model service and its job queue, run context, palette, text and link helpers, recorded experiment results, session helpers. Never imports a page."""
