"""`python -m k3ops.cli`: the `k3ops` command."""

import sys

from . import main

sys.exit(main())
