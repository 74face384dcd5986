"""`capsem diff A B`: two recorded sessions lined up call by call and what changed between them.

`load` reads a session.db into typed data (`Run`), `compare` lines two runs up and says what
changed (`SessionDiff`, pure), `text` prints it for a terminal; the `/diff/A/B` page of `capsem
view` renders the same `SessionDiff`.
"""
