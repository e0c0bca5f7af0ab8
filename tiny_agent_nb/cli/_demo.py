"""`tiny-agent-nb demo`: the crash-and-resume notebook, headless."""

from __future__ import annotations

import argparse
from pathlib import Path


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the notebook runs and its session file is kept (default: a new temp dir)",
    )


def run_demo(args: argparse.Namespace) -> int:
    # Imported here: the other subcommands must not need a Jupyter kernel client.
    from ..demo import main as demo_main  # noqa: PLC0415

    return demo_main(args.dir)
