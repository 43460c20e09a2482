"""`python -m vlagym` runs the command line."""

import sys

from vlagym.cli import main

sys.exit(main())
