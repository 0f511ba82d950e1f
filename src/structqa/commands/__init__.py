"""Subcommands of `structqa` that live in their own modules (cli.py registers them)."""
