"""The serving page: the discrete-event simulator (core.sim), two policies side by side.
`view.render()` draws it; settings, link schema, figures, jobs and session keys beside it."""
