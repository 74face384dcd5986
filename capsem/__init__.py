"""capsem."""
