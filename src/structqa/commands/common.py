"""What the training subcommands share: their config from the command line, and the exit
status of a run that stopped before finishing."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# exit status of a run stopped by SIGINT/SIGTERM (the shell's 128 + SIGINT): the stop is
# clean and resumable, but `train ... && evaluate ...` must not go on as if it had finished
INTERRUPTED = 130


def config_from_args(
    args: argparse.Namespace, extra: list[str], base: list[str] | None = None
) -> Any:
    """``structqa train``'s config: defaults <- ``base`` <- the YAML file <- overrides."""
    from structqa.config import load_config

    overrides = list(base or []) + list(extra)
    if getattr(args, "data", None):
        overrides.append(f"data.dir={args.data}")
    return load_config(getattr(args, "config", None), overrides)


def stopped(output_dir: str | Path) -> bool:
    """Whether the run in ``output_dir`` stopped before finishing (its last/ says so)."""
    state = Path(output_dir) / "last" / "train_state.json"
    if not state.is_file():
        return False
    if json.loads(state.read_text()).get("finished"):
        return False
    print(
        f"structqa: the run in {output_dir} stopped before finishing; continue it with --resume",
        file=sys.stderr,
    )
    return True
