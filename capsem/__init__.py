"""capsem: a flight recorder for AI agents.

This package is the core shared by both halves: paths, session ids, settings, the database
schemas and the main.db rollup. Capture lives in `addons`, prices in `pricing`, everything
offline in `assembler`.
"""

__version__ = "0.1.0"
