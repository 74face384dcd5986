"""Debug bundles: one self-contained SQLite file assembled from what capsem and the agent left
behind (capsem sessions, logs, session snapshots, process diagnostics, workspace zips), to hand
to a colleague and explore with Datasette or SQL.

`DebugBundle` is the Python API; `capsem bundle create|serve|info|query|export` the CLI over it.

Warnings are logged under `assembler.bundle` (a library: no output unless the application
configures logging; the CLI prints the build report's warnings itself, once).
"""

import logging

from assembler.bundle.api import BundleStatistics, DebugBundle
from assembler.bundle.build import BuildReport, build_bundle
from assembler.bundle.errors import BundleError, BundleVersionError, NotABundle
from assembler.bundle.schema import SCHEMA_VERSION
from assembler.bundle.sources import Limits

__all__ = ["SCHEMA_VERSION", "BuildReport", "BundleError", "BundleStatistics", "BundleVersionError", "DebugBundle",
           "Limits", "NotABundle", "build_bundle"]  # fmt: skip

logging.getLogger(__name__).addHandler(logging.NullHandler())
