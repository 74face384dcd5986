"""Proving the record: `capsem verify` (`check.py`, `cli.py`) and `capsem export attestation`
(`attestation.py`). The chain and its keys are `capsem/store/`'s."""
