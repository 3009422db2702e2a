"""``python -m graphc``: the same command as the ``graphc`` console script."""
import sys

from .cli import main

sys.exit(main())
