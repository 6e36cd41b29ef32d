"""The live page: a real model generating, its KV cache drawn from the real tensors, measured beside
predicted. `view.render()` draws it; the other modules are its settings, link, figures, lesson text,
jobs (the compare and batching experiments), runs and session keys."""
