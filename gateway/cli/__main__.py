"""`python -m gateway.cli`: the `ba-agent` command, as the worker processes start it."""

import sys

from gateway.cli.main import main

sys.exit(main())
