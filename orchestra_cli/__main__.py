"""`python -m orchestra_cli`: the same as the `orchestra` command."""

import sys

from orchestra_cli.main import main

sys.exit(main())
