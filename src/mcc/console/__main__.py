"""`python -m mcc.console` runs `mcc console` (see `mcc.console.commands.main`)."""

import sys

from mcc.console.commands import main

sys.exit(main())
