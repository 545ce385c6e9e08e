"""``python -m core.cli``: the ``agentqmix`` command (the lab starts its jobs this way)."""

from core.cli import main

main()
