"""The web app: Starlette routes over `queries`, rendered with Jinja2, served by uvicorn in this
process (so stopping `capsem view` by its pid stops the server: there is no child process).

Every failure a user can cause (unknown session, damaged or half-written database, unknown
call) is a page that says what is wrong, never a traceback.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from assembler.sessiondb import (
    MainDbMissing,
    SessionDbError,
    SessionNotFound,
    db_file,
    main_row,
    open_path,
    resolve,
)
from assembler.view import charts, queries
from assembler.view.approvals import ApprovalRoutes
from capsem.store.reading import decompress

HERE = Path(__file__).parent
STATIC = HERE / "static"
LIVE_STATUSES = ("running",)
MAX_EXPORTED_CALLS = 200
"""`--html` includes the pages of the last this many calls (the session page lists them all)."""


class Urls:
    """Links between pages: served paths, or anchors inside one exported file."""

    exported = False

    def home(self) -> str:
        return "/"

    def session(self, sid: str, page: int = 1) -> str:
        return f"/s/{quote(sid)}" + (f"?page={page}" if page > 1 else "")

    def call(self, sid: str, cid: int) -> str:
        return f"/s/{quote(sid)}/call/{cid}"

    def raw(self, sid: str, cid: int, direction: str) -> str | None:
        return f"/s/{quote(sid)}/call/{cid}/{direction}"

    def state(self, sid: str) -> str:
        return f"/s/{quote(sid)}/state.json"

    def search(self, q: str = "") -> str:
        return "/search" + (f"?{urlencode({'q': q})}" if q else "")

    def diff(self, a: str, b: str) -> str:
        return f"/diff/{quote(a)}/{quote(b)}"


class ExportUrls(Urls):
    exported = True

    def session(self, sid: str, page: int = 1) -> str:
        return "#session"

    def call(self, sid: str, cid: int) -> str:
        return f"#call-{cid}"

    def raw(self, sid: str, cid: int, direction: str) -> str | None:
        return None


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)  # fmt: skip
    env.filters["money"] = charts.money
    env.filters["num"] = lambda v: "—" if v is None else f"{v:,}"
    env.filters["ms"] = _ms
    env.filters["secs"] = lambda s: f"{s:,.1f}s" if s < 600 else f"{s / 60:,.1f}m"
    env.filters["short"] = lambda ts: (ts or "")[:19].replace("T", " ")
    env.filters["day_time"] = lambda ts: (ts or "")[5:16].replace("T", " ")  # `11-25 19:23`, as list-sessions
    env.globals.update(
        stacked=charts.stacked,
        part_colors=charts.PART_COLORS,
        part_labels=charts.PART_LABELS,
        break_sentence=queries.break_sentence,
    )
    return env


def _ms(value: int | None) -> str:
    if value is None:
        return "—"
    return f"{value:,} ms" if value < 10_000 else f"{value / 1000:,.1f} s"


class SessionFiles:
    """Opens sessions read-only; a gzipped one is decompressed once (kept while its .gz is unchanged)."""

    def __init__(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="capsem-view-"))
        self._plain: dict[Path, tuple[float, Path]] = {}
        self._lock = threading.Lock()

    def path(self, session_id: str) -> Path:
        found = db_file(session_id)
        if found is None:
            raise SessionNotFound(f"session {session_id!r} has no session.db or session.db.gz on disk")
        if not found.name.endswith(".gz"):
            return found
        mtime = found.stat().st_mtime
        with self._lock:
            cached = self._plain.get(found)
            if cached is not None and cached[0] == mtime and cached[1].exists():
                return cached[1]
            target = self._tmp / f"{session_id}-{len(self._plain)}.db"
            decompress(found, target)
            self._plain[found] = (mtime, target)
            return target

    @contextmanager
    def open(self, session_id: str) -> Iterator[sqlite3.Connection]:
        with open_path(self.path(session_id)) as conn:
            yield conn

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)


@dataclass(frozen=True)
class Problem:
    status: int
    title: str
    detail: str


def problem_for(exc: BaseException) -> Problem:
    """What to tell the user about an error, in one page."""
    if isinstance(exc, SessionNotFound):
        return Problem(404, "No such session", str(exc))
    if isinstance(exc, MainDbMissing):
        return Problem(404, "Nothing recorded yet", f"{exc}. Record a session with `capsem run -- AGENT`.")
    if isinstance(exc, queries.IncompleteDatabase):
        return Problem(422, "This session cannot be shown", str(exc))
    if isinstance(exc, SessionDbError):
        return Problem(422, "This session's database cannot be read", str(exc))
    if isinstance(exc, sqlite3.DatabaseError):
        return Problem(422, "This session's database cannot be read",
                       f"SQLite says: {exc}. It may be damaged or cut short (a crash while it was written); "
                       "`capsem doctor` and `capsem vacuum` can help.")  # fmt: skip
    if isinstance(exc, HTTPException):
        return Problem(
            exc.status_code, "Not found" if exc.status_code == 404 else "Bad request", str(exc.detail)
        )
    return Problem(500, "Something went wrong", f"{type(exc).__name__}: {exc}")


class View:
    """The pages, rendered by `render` for the server and for the single exported file."""

    def __init__(self, files: SessionFiles | None = None) -> None:
        self.env = environment()
        self.files = files or SessionFiles()

    def render(self, template: str, urls: Urls, **context: Any) -> str:
        return self.env.get_template(template).render(urls=urls, **context)

    def sessions_page(self, urls: Urls, params: dict[str, str]) -> str:
        from assembler.sessiondb import open_main
        from assembler.sessions import SessionFilters, list_sessions, projects

        filters = _filters(params)
        listing = list_sessions(SessionFilters(**filters))
        with open_main() as conn:
            models = queries.models_by_session(conn)
        anomalies = queries.anomaly_counts({r["id"]: r.get("db_file") for r in listing.sessions})
        rows = queries.summaries(listing.sessions, models, anomalies)
        everything = queries.summaries(
            list_sessions(SessionFilters(**{**filters, "limit": 0})).sessions, models
        )
        days = queries.cost_by_day(everything)
        total = sum(s.cost for s in everything)
        return self.render("sessions.html", urls, sessions=rows, matched=listing.matched, filters=filters,
                           chart=charts.cost_by_day(days), total=total, title="Sessions",
                           projects=projects())  # fmt: skip

    def session_page(self, urls: Urls, session_id: str, page: int = 1) -> str:
        from assembler.ledger.marks import shown, verdict

        main = session_row(session_id)
        with self.files.open(session_id) as conn:
            view = queries.session_view(conn, session_id, main, page)
            ledger = None if urls.exported else shown(verdict(conn, session_id, view.status))
        live = view.status in LIVE_STATUSES and not urls.exported
        chart = charts.cumulative(view.cumulative, view.span_s)
        from assembler.diff.page import compare_with

        return self.render("session.html", urls, s=view, live=live, live_url=urls.state(session_id), chart=chart,
                           title=f"Session {session_id}", compare=compare_with(session_id, main),
                           ledger=ledger)  # fmt: skip

    def diff_page(self, urls: Urls, a: str, b: str) -> str:
        """`/diff/A/B`: session B against session A, call by call (assembler/diff/)."""
        from assembler.diff.page import diff_context

        return self.render("diff.html", urls, **diff_context(self.files.open, a, b))

    def export_diff(self, a: str, b: str) -> str:
        """The `/diff/A/B` page as one self-contained HTML file (`capsem diff --html`)."""
        from datetime import UTC, datetime

        from assembler.diff.page import diff_context

        return self.render("diff.html", ExportUrls(), **diff_context(self.files.open, a, b),
                           inline_css=(STATIC / "view.css").read_text(encoding="utf-8"),
                           inline_js=(STATIC / "view.js").read_text(encoding="utf-8"),
                           exported_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))  # fmt: skip

    def call_page(self, urls: Urls, session_id: str, call_id: int) -> str:
        with self.files.open(session_id) as conn:
            call = queries.call_view(conn, session_id, call_id)
        if call is None:
            raise HTTPException(404, f"session {session_id} has no model call {call_id}")
        main = session_row(session_id) or {}
        return self.render("call.html", urls, c=call, live=main.get("status") in LIVE_STATUSES and not urls.exported,
                           live_url=urls.state(session_id),
                           title=f"Call {call_id} · {session_id}")  # fmt: skip

    def export(self, session_id: str, max_calls: int = MAX_EXPORTED_CALLS) -> str:
        """The session page (every call) and the page of each call, up to the last `max_calls`,
        in one HTML file (CSS and script inlined)."""
        from datetime import UTC, datetime

        urls = ExportUrls()
        main = session_row(session_id)
        with self.files.open(session_id) as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM model_calls ORDER BY id")]
            view = queries.session_view(conn, session_id, main, page=1, page_size=len(ids))
            kept = ids[-max_calls:] if max_calls else []
            calls = [c for c in (queries.call_view(conn, session_id, i) for i in kept) if c is not None]
        left_out = len(ids) - len(calls)
        return self.render("export.html", urls, s=view, calls=calls, live=False, title=f"Session {session_id}",
                           left_out=left_out,
                           chart=charts.cumulative(view.cumulative, view.span_s),
                           inline_css=(STATIC / "view.css").read_text(encoding="utf-8"),
                           inline_js=(STATIC / "view.js").read_text(encoding="utf-8"),
                           exported_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))  # fmt: skip

    def error_page(self, urls: Urls, problem: Problem, reload: bool = False) -> str:
        return self.render("error.html", urls, p=problem, title=problem.title, reload=reload)


def session_row(session_id: str) -> dict[str, Any] | None:
    """The session's main.db row; a `running` one whose process is gone is `crashed`, its capture
    `unknown` (as `list-sessions` shows it), so its pages do not poll forever."""
    from assembler.sessions import as_shown

    row = main_row(session_id)
    if row:
        as_shown(row)
        from assembler.sessiondb import open_main

        with open_main() as conn:
            row["tags"] = [r[0] for r in conn.execute(
                "SELECT tag FROM session_tags WHERE session_id = ? ORDER BY rowid", (session_id,))]  # fmt: skip
    return row or None


def starting(session_id: str, within_s: float = 300.0) -> bool:
    """A session id minted in the last few minutes (`capsem run --view` opens its page first)."""
    from datetime import UTC, datetime

    from capsem.ids import is_session_id

    if not is_session_id(session_id):
        return False
    minted = datetime.strptime(session_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    return 0 <= (datetime.now(UTC) - minted).total_seconds() < within_s


def _filters(params: dict[str, str]) -> dict[str, Any]:
    def flag(name: str) -> bool:
        return params.get(name, "") not in ("", "0", "false")

    try:
        limit = max(0, int(params.get("limit") or 50))
    except ValueError:
        limit = 50
    try:
        min_cost = float(params["min_cost"]) if params.get("min_cost") else None
    except ValueError:
        min_cost = None
    return {"limit": limit, "include_culled": flag("all"), "with_db": flag("with_db"), "with_model": flag("with_model"),
            "with_net": flag("with_net"), "with_mcp": flag("with_mcp"), "with_tools": flag("with_tools"),
            "min_cost": min_cost, "project": params.get("project") or None, "branch": params.get("branch") or None,
            "tag": params.get("tag") or None}  # fmt: skip


def call_id(request: Request) -> int:
    """The call id in the path (`{cid:int}` takes any number of digits; SQLite's integers end at
    2**63 - 1, and no call has a larger id).

    Raises:
        HTTPException: 404 for an id past that.
    """
    cid = int(request.path_params["cid"])
    if cid > MAX_ROW_ID:
        raise HTTPException(404, f"no model call {request.path_params['cid']}")
    return cid


MAX_ROW_ID = 2**63 - 1


# Long: every route beside its handler, each handler a line or two closed over the view and its urls.
def create_app(view: View | None = None, hosts: tuple[str, ...] = ()) -> Starlette:
    """The ASGI app serving every session under `$CAPSEM_HOME`; `hosts`: the loopback addresses it
    listens on, besides 127.0.0.1, ::1 and localhost (`view --host 127.0.0.2`)."""
    view = view or View()
    urls = Urls()
    # only requests addressed to loopback by name: a web page whose host name an attacker points at
    # 127.0.0.1 (DNS rebinding) must not read the sessions
    allowed = ["127.0.0.1", "localhost", "[::1]", "::1"] + [h for host in hosts for h in (host, f"[{host}]")]
    approvals = ApprovalRoutes(allowed)  # the banner of waiting requests and its guarded POST
    view.env.globals["approvals_token"] = approvals.token

    def html(request: Request, make) -> HTMLResponse:
        return _html(view, urls, request, make)

    async def home(request: Request) -> Response:
        return html(request, lambda: view.sessions_page(urls, dict(request.query_params)))

    async def session(request: Request) -> Response:
        try:
            page = int(request.query_params.get("page") or 1)
        except ValueError:
            page = 1
        return html(request, lambda: view.session_page(urls, _sid(request), page))

    async def call(request: Request) -> Response:
        return html(request, lambda: view.call_page(urls, _sid(request), call_id(request)))

    async def raw(request: Request) -> Response:
        return _raw_body(view, urls, request)

    async def state(request: Request) -> Response:
        return _live_state(view, request)

    async def search(request: Request) -> Response:
        from assembler.view.search import search as run_search

        q = request.query_params.get("q", "").strip()
        return html(request, lambda: view.render("search.html", urls, q=q, hits=run_search(q) if q else [],
                                                 title="Search"))  # fmt: skip

    async def diff(request: Request) -> Response:
        return _diff(view, urls, request)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error_page(view, urls, problem_for(exc))

    routes = [
        Route("/", home),
        Route("/search", search),
        Route("/diff", diff),
        Route("/diff/{a}/{b}", diff),
        Route("/s/{sid}", session),
        Route("/s/{sid}/state.json", state),
        Route("/s/{sid}/call/{cid:int}", call),
        Route("/s/{sid}/call/{cid:int}/{direction:str}", raw),
        *approvals.routes,
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        view.files.close()

    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed)]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found, Exception: not_found},
                     lifespan=lifespan, middleware=middleware)  # fmt: skip


def _sid(request: Request) -> str:
    """The session id the path names (any unique start of one)."""
    return resolve(request.path_params["sid"])


def _html(view: View, urls: Urls, request: Request, make: Callable[[], str]) -> HTMLResponse:
    """The page `make` renders, or its error page (one that reloads itself while a session starts)."""
    try:
        return HTMLResponse(make())
    except Exception as exc:
        problem = problem_for(exc)
        sid = request.path_params.get("sid", "")
        if isinstance(exc, SessionNotFound) and starting(sid):
            problem = Problem(404, "Waiting for the session to start",
                              f"Session {sid} has not written its database yet; this page reloads itself.")  # fmt: skip
            return HTMLResponse(view.error_page(urls, problem, reload=True), status_code=404)
        return HTMLResponse(view.error_page(urls, problem), status_code=problem.status)


def _diff(view: View, urls: Urls, request: Request) -> Response:
    """Two sessions compared (`/diff/A/B`); the "compare with…" form's `?a=&b=` redirects there."""
    params = request.path_params or request.query_params
    if not params.get("a") or not params.get("b"):
        problem = Problem(400, "Bad request", "compare needs two sessions: /diff/A/B")
        return HTMLResponse(view.error_page(urls, problem), status_code=400)
    if not request.path_params:  # the "compare with…" form
        return RedirectResponse(urls.diff(params["a"], params["b"]), status_code=303)
    return _html(
        view, urls, request, lambda: view.diff_page(urls, resolve(params["a"]), resolve(params["b"]))
    )


def _error_page(view: View, urls: Urls, problem: Problem) -> HTMLResponse:
    return HTMLResponse(view.error_page(urls, problem), status_code=problem.status)


def _raw_body(view: View, urls: Urls, request: Request) -> Response:
    """A call's stored request or response body, as a download named after the session and call."""
    from capsem.store.bodies import read_body

    direction = request.path_params["direction"]
    if direction not in ("request", "response"):
        return _error_page(view, urls, problem_for(HTTPException(404, f"no page {request.url.path}")))
    try:
        sid = _sid(request)
        with view.files.open(sid) as conn:
            found = read_body(conn, call_id(request), direction)
    except Exception as exc:
        return _error_page(view, urls, problem_for(exc))
    if found is None:
        problem = Problem(
            404, "No stored body", f"call {request.path_params['cid']} has no stored {direction} body"
        )
        return HTMLResponse(view.error_page(urls, problem), status_code=404)
    name = f"{sid}-call{request.path_params['cid']}-{direction}.{_extension(found[1].get('content_type'))}"
    return Response(found[0], media_type="application/octet-stream",
                    headers={"content-disposition": f'attachment; filename="{name}"'})  # fmt: skip


def _live_state(view: View, request: Request) -> Response:
    """The session page's live numbers (`state.json`), never cached; an error as `{"error": ...}`."""
    try:
        sid = _sid(request)
        with view.files.open(sid) as conn:
            found = queries.live_state(conn)
        found["status"] = (session_row(sid) or {}).get("status")
    except Exception as exc:
        return JSONResponse({"error": problem_for(exc).detail}, status_code=problem_for(exc).status)
    return JSONResponse(found, headers={"cache-control": "no-store"})


def _extension(content_type: str | None) -> str:
    if content_type and "json" in content_type:
        return "json"
    if content_type and "event-stream" in content_type:
        return "sse"
    return "bin"
