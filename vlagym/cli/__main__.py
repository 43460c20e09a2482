"""`python -m vlagym.cli` runs the command line."""

import sys

from vlagym.cli import main

sys.exit(main())
