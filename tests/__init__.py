"""The test suite: a package, so conftest.py is imported once, as tests.conftest, by pytest and by the
test modules alike (as a loose file it was loaded twice, and each copy kept its own list of running
servers: a failure kept the stacks of only some of them)."""
