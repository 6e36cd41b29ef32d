"""`python -m core ...`: the engine's command line."""

import sys

from core.cli import main

sys.exit(main())
