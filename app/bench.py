"""`python -m app.bench --json`: the page benchmark's documented command (it lives in app.devtools.bench)."""

import sys

from app.devtools.bench import main

if __name__ == "__main__":
    sys.exit(main())
