"""`python -m trainqd`."""

import sys

from trainqd.main import main

sys.exit(main())
