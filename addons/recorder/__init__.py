"""The recorder side of capsem: the process mitmdump starts (`python -m addons.recorder.main`).

It turns the messages of `addons/messages.py` into rows of session.db: one writer, one scrubber.
"""
