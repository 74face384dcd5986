"""`capsem replay`: run an agent again answered from a recorded session (see run.py)."""
