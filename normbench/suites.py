"""The old name of :mod:`normbench.accuracy_suite`, the very same module (ASV's suite, ``suites/asv/accuracy.py``,
imports ``normbench.suites``, and ASV runs today's suite against older commits, which have only this name)."""

import sys

from normbench import accuracy_suite

sys.modules[__name__] = accuracy_suite
