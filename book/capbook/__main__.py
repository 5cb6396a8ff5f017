"""``python -m capbook``: the book's command line (:func:`capbook.cli.main`)."""

import sys

from capbook.cli import main

sys.exit(main())
