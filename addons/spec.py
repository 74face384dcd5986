"""The recorder's start-up spec: what mitmdump tells the recorder before the first message.

Shared by both sides of the process boundary, like `addons/messages.py`: the proxy side
(`addons/proxy/`) builds it from the settings it loaded, the recorder side (`addons/recorder/`)
reads it as the first frame on its stdin. Nothing here imports either side.
"""

from __future__ import annotations

from dataclasses import fields

import msgspec

from capsem.settings import CaptureSettings, ExportSettings, SecretRule


class RecorderSpec(msgspec.Struct, frozen=True):
    """What the recorder records: the session, where, and with which capture settings."""

    session_id: str
    db_path: str
    main_db_path: str
    mode: str
    capture: dict
    """`CaptureSettings` fields (frozensets as lists)."""
    track_spend: bool = False
    """Report this session's spend to mitmdump and keep its rows of main.db `spend` current (budgets)."""
    learn: tuple[str, ...] = ()
    """Values the scrubber knows before the first row: the brokered credentials' real values."""
    otlp: dict | None = None
    """`export.otlp` (endpoint, headers, content, profile) when live export is on."""
    team: bool = False
    """Push the session to the team's PostgreSQL (`team.url` or CAPSEM_TEAM_URL is set): the
    recorder starts the pusher (`addons/recorder/team_push.py`)."""
    restart: int = 0
    """0 for the session's first recorder; n for the n-th restarted after its predecessor died."""
    missed_flows: int = 0
    """Flows the dead predecessors were handed but never committed (stored in `session_meta`)."""
    emulated: bool = False
    """Its answers come from capsem's emulator or a replay (`capsem_emulated`): stored in
    `session_meta` (`emulated`), where `capsem.outcomes.NOT_EMULATED` looks for it."""

    def __repr__(self) -> str:  # `learn` (and the OTLP headers) hold secrets
        return f"RecorderSpec(session_id={self.session_id!r}, db_path={self.db_path!r})"


def capture_settings(spec: RecorderSpec) -> CaptureSettings:
    values = dict(spec.capture)
    for name in ("header_allowlist", "query_params", "disabled_rules"):
        values[name] = frozenset(values.get(name, ()))
    values["secret_rules"] = tuple(
        SecretRule(**{**rule, "keywords": tuple(rule.get("keywords", ()))})
        for rule in values.get("secret_rules", ())
    )
    return CaptureSettings(**values)


def spec_of(settings: CaptureSettings, **values: object) -> RecorderSpec:
    capture = {f.name: getattr(settings, f.name) for f in fields(settings)}
    capture = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in capture.items()}
    return RecorderSpec(capture=capture, **values)  # type: ignore[arg-type]


def otlp_of(settings: ExportSettings) -> dict | None:
    """The `RecorderSpec.otlp` of the export settings (None: no live export)."""
    if settings.otlp_endpoint is None:
        return None
    return {"endpoint": settings.otlp_endpoint, "headers": dict(settings.otlp_headers),
            "content": settings.otlp_content, "profile": settings.otlp_profile}  # fmt: skip


WS_TURN = "#ws"
"""Suffix of the key of a WebSocket's turns (`<flow key>#ws`, with the number of server messages
the recorder has handled: a turn ended by the n-th one is counted once n is)."""
