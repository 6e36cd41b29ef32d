"""One package per page (live, whatif, serving, engines), each drawn by its `view.render()`. A page
never imports another page; what two pages share lives in app.shared (tests/test_layers.py)."""
