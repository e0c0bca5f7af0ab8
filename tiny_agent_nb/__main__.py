"""`python -m tiny_agent_nb ...` runs the `tiny-agent-nb` command line."""

from tiny_agent_nb.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
