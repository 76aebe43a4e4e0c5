"""`python -m ptx_passes ...`: see ptx_passes.cli."""
import sys

from .cli import main

sys.exit(main())
