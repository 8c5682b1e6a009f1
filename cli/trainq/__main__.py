"""`python -m trainq`: the same as the `trainq` command."""

import sys

from trainq.cli import main

if __name__ == "__main__":
    sys.exit(main())
