"""``python -m verbspec.refimpl.cli``: the ``verbspec`` command."""

import sys

from verbspec.refimpl.cli.main import main

sys.exit(main())
