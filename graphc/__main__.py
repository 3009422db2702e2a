"""``python -m graphc``: the same command as the ``graphc`` console script."""

import sys

from .tools.cli import main

sys.exit(main())
