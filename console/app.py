"""The console's pages and forms: server-rendered HTML with a little JavaScript for charts,
filtering and sorting.

``extension(context)`` is what ``kcoord serve`` adds to the broker's HTTP surface: the
routes below and the commit-rate sampler. Each page asks the broker what it shows over
the Kafka protocol (``console.data``) in a worker thread, a few at a time, so the broker's
event loop only ever serves the Kafka requests those threads send, like any other client's.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from admin.client import AdminClient, CommittedOffset
from admin.errors import AdminError, GroupStateError, UnreachableError, UsageError
from admin.inputs import format_time
from broker.http import HttpContext, HttpExtension
from console import actions, data
from console.access import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Clients,
    Credentials,
    Sessions,
    broker_sasl_mechanisms,
    connector,
    csrf_ok,
    new_csrf_token,
    policy,
)
from console.history import HistoryCache
from console.rates import CommitRate

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
#: Worker threads the pages may use at once: one, so the console never crowds the broker's
#: event loop out of the interpreter (threads take turns holding it).
WORKERS = 1
GROUP_SORTS = ("group", "state", "group_type", "members", "lag")


def quote(value: object) -> str:
    """A path segment: a group id may hold any character, ``/`` included."""
    return urllib.parse.quote(str(value), safe="")


class Console:
    """The console of one broker: its policy, sessions, clients, caches and routes."""

    def __init__(self, context: HttpContext,
                 connect: Callable[[str, Credentials | None], AdminClient] | None = None) -> None:
        self.context = context
        self.policy = policy(context.http_host, broker_sasl_mechanisms(context.config, context.security_protocol))
        if connect is None:
            connect = connector(context.security_protocol, context.config)
        self.clients = Clients(context.bootstrap, connect)
        self.sessions = Sessions()
        self.history = HistoryCache(context.data_dir)
        self.rate = CommitRate(context.offsets_committed)
        self.limiter = trio.CapacityLimiter(WORKERS)
        self.templates = Jinja2Templates(directory=str(TEMPLATES))
        env = self.templates.env
        env.filters["q"] = quote
        env.filters["time"] = format_time
        env.filters["tojson_script"] = lambda value: json.dumps(value).replace("<", "\\u003c")
        env.globals["strategies"] = actions.STRATEGIES

    # ------------------------------------------------------------------ plumbing

    def principal(self, request: Request) -> Credentials | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    def can_change(self, request: Request) -> bool:
        if self.policy.login_required:
            return self.principal(request) is not None
        return self.policy.read_only_reason is None

    async def call(self, request: Request, work: Callable[[AdminClient], T]) -> T:
        """Blocking admin work in a worker thread, as the request's principal."""
        run = partial(self.clients.run, self.principal(request), work)
        return await trio.to_thread.run_sync(run, limiter=self.limiter)

    def page(self, request: Request, name: str, status: int = 200, **values: Any) -> Response:
        token = request.cookies.get(CSRF_COOKIE) or new_csrf_token()
        values.update(
            request=request, csrf=token, can_change=self.can_change(request), policy=self.policy,
            user=(p.username if (p := self.principal(request)) else None),
            notice=request.query_params.get("notice"),
        )
        response = self.templates.TemplateResponse(request, name, values, status_code=status)
        if request.cookies.get(CSRF_COOKIE) != token:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict")
        return response

    def failed(self, request: Request, error: AdminError) -> Response:
        status = 409 if isinstance(error, GroupStateError) else 400 if isinstance(error, UsageError) else 502
        return self.page(request, "error.html", status, message=error.message,
                         unreachable=isinstance(error, UnreachableError))

    async def form(self, request: Request) -> FormData | Response:
        """The posted form, once the principal may change things and its token checks out."""
        form = await request.form()
        if not csrf_ok(request.cookies.get(CSRF_COOKIE), str(form.get("csrf") or "")):
            return self.page(request, "error.html", 403,
                             message="The form's token did not match: reload the page and try again.")
        if not self.can_change(request):
            return self.page(request, "error.html", 403,
                             message=self.policy.read_only_reason or "Log in to change anything.")
        return form

    def login_redirect(self, request: Request) -> Response | None:
        if self.policy.login_required and self.principal(request) is None:
            target = urllib.parse.quote(request.url.path, safe="/")
            return RedirectResponse(f"/login?next={target}", status_code=303)
        return None

    # ------------------------------------------------------------------ pages

    async def overview(self, request: Request) -> Response:
        if (redirect := self.login_redirect(request)) is not None:
            return redirect
        try:
            found = await self.call(request, data.overview)
        except AdminError as exc:
            return self.failed(request, exc)
        return self.page(request, "overview.html", overview=found,
                         chart={"rate": self.rate.points()}, bootstrap=self.context.bootstrap)

    async def groups(self, request: Request) -> Response:
        if (redirect := self.login_redirect(request)) is not None:
            return redirect
        try:
            rows = await self.call(request, data.group_summaries)
        except AdminError as exc:
            return self.failed(request, exc)
        search = request.query_params.get("q", "").strip()
        if search:
            rows = [r for r in rows if search.lower() in r.group.lower()]
        state = request.query_params.get("state", "").strip()
        if state:
            rows = [r for r in rows if r.state.lower() == state.lower()]
        sort = request.query_params.get("sort", "group")
        sort = sort if sort in GROUP_SORTS else "group"
        descending = request.query_params.get("dir") == "desc"
        rows.sort(key=lambda r: _sort_key(getattr(r, sort)), reverse=descending)
        return self.page(request, "groups.html", groups=rows, search=search, state=state, sort=sort,
                         descending=descending)

    async def group(self, request: Request) -> Response:
        if (redirect := self.login_redirect(request)) is not None:
            return redirect
        name = request.path_params["group"]
        try:
            detail = await self.call(request, lambda c: data.group_detail(c, name))
        except AdminError as exc:
            return self.failed(request, exc)
        if not detail.exists:
            return self.page(request, "error.html", 404, message=f"There is no group {name!r}.")
        history = await trio.to_thread.run_sync(self.history.get, name, limiter=self.limiter)
        return self.page(request, "group.html", group=detail, history=history, chart=history.chart_data())

    async def topics(self, request: Request) -> Response:
        if (redirect := self.login_redirect(request)) is not None:
            return redirect
        try:
            found = await self.call(request, data.overview)
        except AdminError as exc:
            return self.failed(request, exc)
        return self.page(request, "topics.html", topics=found.topics)

    async def topic(self, request: Request) -> Response:
        if (redirect := self.login_redirect(request)) is not None:
            return redirect
        name = request.path_params["topic"]
        try:
            detail = await self.call(request, lambda c: data.topic_detail(c, name))
        except AdminError as exc:
            return self.failed(request, exc)
        if detail is None:
            return self.page(request, "error.html", 404, message=f"There is no topic {name!r}.")
        return self.page(request, "topic.html", topic=detail)

    # ------------------------------------------------------------------ reset

    async def reset_form(self, request: Request) -> Response:
        if (redirect := self.login_redirect(request)) is not None:
            return redirect
        name = request.path_params["group"]
        try:
            detail = await self.call(request, lambda c: data.group_detail(c, name))
        except AdminError as exc:
            return self.failed(request, exc)
        topics = sorted({p.topic for p in detail.partitions})
        return self.page(request, "reset.html", group=detail, topics=topics, chosen=set(topics),
                         strategy="to-earliest", value="", error=None)

    async def reset_preview(self, request: Request) -> Response:
        form = await self.form(request)
        if isinstance(form, Response):
            return form
        name = request.path_params["group"]
        strategy_name = str(form.get("strategy") or "")
        value = str(form.get("value") or "")
        chosen = [str(t) for t in form.getlist("topic")]
        try:
            detail = await self.call(request, lambda c: data.group_detail(c, name))
            topics = sorted({p.topic for p in detail.partitions})
            try:
                strategy, action = actions.parse_strategy(strategy_name, value)
                if not chosen:
                    raise UsageError("choose at least one topic")
                found = await self.call(request, lambda c: actions.plan(
                    c, name, strategy, action, None if set(chosen) == set(topics) else chosen,
                    self.context.data_dir))
            except UsageError as exc:
                return self.page(request, "reset.html", 400, group=detail, topics=topics, chosen=set(chosen),
                                 strategy=strategy_name, value=value, error=exc.message)
        except AdminError as exc:
            return self.failed(request, exc)
        offsets = [{"topic": r.topic, "partition": r.partition, "offset": r.new, "leader_epoch": r.leader_epoch,
                    "metadata": r.metadata} for r in found.changes]
        return self.page(request, "preview.html", plan=found, offsets=json.dumps(offsets))

    async def reset_commit(self, request: Request) -> Response:
        form = await self.form(request)
        if isinstance(form, Response):
            return form
        name = request.path_params["group"]
        try:
            offsets = _offsets_field(str(form.get("offsets") or "[]"))
            await self.call(request, lambda c: actions.commit_plan(c, name, offsets))
        except AdminError as exc:
            return self.failed(request, exc)
        self.history.forget(name)
        notice = f"Committed {len(offsets)} offset{'s' if len(offsets) != 1 else ''} ({form.get('action')})."
        return _back_to(f"/groups/{quote(name)}", notice)

    # ------------------------------------------------------------------ deletes

    async def delete_offsets(self, request: Request) -> Response:
        name = request.path_params["group"]
        if request.method == "GET":
            if (redirect := self.login_redirect(request)) is not None:
                return redirect
            try:
                detail = await self.call(request, lambda c: data.group_detail(c, name))
            except AdminError as exc:
                return self.failed(request, exc)
            topics = sorted({p.topic for p in detail.partitions if p.committed is not None})
            return self.page(request, "delete_offsets.html", group=detail, topics=topics, confirm=False,
                             chosen=[])
        form = await self.form(request)
        if isinstance(form, Response):
            return form
        chosen = sorted({str(t) for t in form.getlist("topic")})
        try:
            detail = await self.call(request, lambda c: data.group_detail(c, name))
            if not chosen:
                raise UsageError("choose at least one topic whose offsets to delete")
            partitions = sorted((p.topic, p.partition) for p in detail.partitions
                                if p.topic in chosen and p.committed is not None)
            if form.get("step") != "delete":
                return self.page(request, "delete_offsets.html", group=detail, topics=chosen, confirm=True,
                                 chosen=chosen, partitions=partitions)
            await self.call(request, lambda c: c.delete_offsets(name, partitions))
        except AdminError as exc:
            return self.failed(request, exc)
        self.history.forget(name)
        return _back_to(f"/groups/{quote(name)}", f"Deleted the offsets of {len(partitions)} partition"
                                                 f"{'s' if len(partitions) != 1 else ''} ({', '.join(chosen)}).")

    async def delete_group(self, request: Request) -> Response:
        name = request.path_params["group"]
        if request.method == "GET":
            if (redirect := self.login_redirect(request)) is not None:
                return redirect
            try:
                detail = await self.call(request, lambda c: data.group_detail(c, name))
            except AdminError as exc:
                return self.failed(request, exc)
            return self.page(request, "delete_group.html", group=detail, error=None)
        form = await self.form(request)
        if isinstance(form, Response):
            return form
        if form.get("confirm_name") != name:
            try:
                detail = await self.call(request, lambda c: data.group_detail(c, name))
            except AdminError as exc:
                return self.failed(request, exc)
            return self.page(request, "delete_group.html", 400, group=detail,
                             error="Type the group's name exactly to confirm.")
        try:
            await self.call(request, lambda c: c.delete_group(name))
        except AdminError as exc:
            return self.failed(request, exc)
        self.history.forget(name)
        return _back_to("/groups", f"Deleted group {name!r} and its offsets.")

    # ------------------------------------------------------------------ login

    async def login(self, request: Request) -> Response:
        target = request.query_params.get("next", "/")
        target = target if target.startswith("/") and not target.startswith("//") else "/"
        if not self.policy.login_required:
            return RedirectResponse(target, status_code=303)
        if request.method == "GET":
            return self.page(request, "login.html", target=target, error=None)
        form = await request.form()
        if not csrf_ok(request.cookies.get(CSRF_COOKIE), str(form.get("csrf") or "")):
            return self.page(request, "login.html", 403, target=target, error="Reload the page and try again.")
        mechanism = str(form.get("mechanism") or self.policy.mechanisms[0])
        credentials = Credentials(mechanism, str(form.get("username") or ""), str(form.get("password") or ""))
        if mechanism not in self.policy.mechanisms or not credentials.username:
            return self.page(request, "login.html", 400, target=target, error="Give a user name and a mechanism.")
        try:
            await trio.to_thread.run_sync(
                partial(self.clients.run, credentials, lambda c: c.metadata([])), limiter=self.limiter)
        except AdminError as exc:
            return self.page(request, "login.html", 401, target=target, error=exc.message)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(SESSION_COOKIE, self.sessions.create(credentials), httponly=True, samesite="strict")
        return response

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        if csrf_ok(request.cookies.get(CSRF_COOKIE), str(form.get("csrf") or "")):
            self.sessions.drop(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    # ------------------------------------------------------------------ routes

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.overview, methods=["GET"]),
            Route("/groups", self.groups, methods=["GET"]),
            Route("/groups/{group:path}/reset/preview", self.reset_preview, methods=["POST"]),
            Route("/groups/{group:path}/reset/commit", self.reset_commit, methods=["POST"]),
            Route("/groups/{group:path}/reset", self.reset_form, methods=["GET"]),
            Route("/groups/{group:path}/delete-offsets", self.delete_offsets, methods=["GET", "POST"]),
            Route("/groups/{group:path}/delete", self.delete_group, methods=["GET", "POST"]),
            Route("/groups/{group:path}", self.group, methods=["GET"]),
            Route("/topics", self.topics, methods=["GET"]),
            Route("/topics/{topic}", self.topic, methods=["GET"]),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ]


def _sort_key(value: object) -> tuple[bool, object]:
    """None (no lag known) sorts first; strings without case."""
    if isinstance(value, str):
        return (value is not None, value.lower())
    return (value is not None, value if value is not None else 0)


def _offsets_field(text: str) -> dict[tuple[str, int], CommittedOffset]:
    """The preview's offsets, exactly as shown, back from the confirm form."""
    try:
        rows = json.loads(text)
        return {(str(r["topic"]), int(r["partition"])): CommittedOffset(int(r["offset"]), int(r["leader_epoch"]),
                                                                       str(r["metadata"] or ""))
                for r in rows}
    except (ValueError, KeyError, TypeError):
        raise UsageError("the confirmed plan could not be read: preview the reset again") from None


def _back_to(path: str, notice: str) -> Response:
    return RedirectResponse(f"{path}?notice={urllib.parse.quote(notice)}", status_code=303)


def extension(context: HttpContext) -> HttpExtension:
    """The console as ``kcoord serve`` adds it to the broker's HTTP surface."""
    console = Console(context)
    return HttpExtension(console.routes(), console.rate.run)


