"""``python -m solkit``: the same entry point as the ``solkit`` command."""

import sys

from solkit.cli import main

sys.exit(main())
