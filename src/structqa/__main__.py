"""``python -m structqa``: the same as the ``structqa`` command."""

from structqa.cli import main

raise SystemExit(main())
