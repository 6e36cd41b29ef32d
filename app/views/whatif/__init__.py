"""The what-if page: any model, GPU, dtype, batch and parallelism, priced by core.whatif.
`view.render()` draws it; settings, link schema, figures and session keys beside it."""
