"""``python -m hindsight_adapters.cli``: the ``hindsight`` command."""

import sys

from . import main

sys.argv[0] = "hindsight"  # usage lines read as the installed command
main()
