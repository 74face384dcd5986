"""The bundle's user-facing exceptions (one small tree under `BundleError`)."""

from __future__ import annotations


class BundleError(Exception):
    """A bundle cannot be built, opened, queried or served; the message says why and what to do."""


class BundleVersionError(BundleError):
    """The bundle was written by a newer capsem (its schema version is higher than ours)."""


class NotABundle(BundleError):
    """The file is not a capsem bundle (no readable `bundle_meta`)."""
