"""`python -m trainscale ...`: the same as the `trainscale` command."""

import sys

from .cli import main

sys.exit(main())
