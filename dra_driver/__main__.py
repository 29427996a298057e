"""``python -m dra_driver`` runs the ``gpushare-dra`` command line."""

import sys

from dra_driver.cli.main import main

sys.exit(main())
