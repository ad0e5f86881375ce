"""`python -m mcc.observer`: see `mcc.observer`."""

import sys

from mcc.observer import main

sys.exit(main())
