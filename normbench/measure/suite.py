"""The old name of :mod:`normbench.measure.kernel_suite`, the very same module (ASV's suite, ``suites/asv/``, imports
``normbench.measure.suite``, and ASV runs today's suite against older commits, which have only this name)."""

import sys

from normbench.measure import kernel_suite

sys.modules[__name__] = kernel_suite
