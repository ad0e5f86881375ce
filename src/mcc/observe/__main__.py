"""`python -m mcc.observe`, the command line that deployed units still run: it execs
``python -m mcc.observer`` with the same arguments. A process, not an import: the observer is a
mission client above `mcc.orchestrate`, which this package sits below."""

import os
import sys

os.execv(sys.executable, [sys.executable, "-m", "mcc.observer", *sys.argv[1:]])
