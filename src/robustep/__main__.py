"""``python -m robustep`` runs the command line (see :mod:`robustep.cli`)."""

import sys

from robustep.cli import main

if __name__ == "__main__":
    sys.exit(main())
