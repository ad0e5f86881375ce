"""`python -m mcc.observe`: see `mcc.observe.observer`."""

import sys

from mcc.observe.observer import main

sys.exit(main())
