"""The request's path as the span names it: the matched route's template, or excluded.

The template comes from the route objects alone (mounts included), so no path
parameter's value ever becomes part of the span's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import asynctrace
from asynctrace_contrib._http import names_option

from ._asgi import Host, Match, Mount, Scope

__all__ = ["excluded_pattern", "route_template"]


def route_template(scope: Scope, root: str, app: Any) -> str | None:
    """The matched route's template, from the route objects alone.

    *root* is the ``root_path`` the request came with (the server's prefix, or
    the app's own ``root_path``), *app* the application it entered. A mount
    routing passed through (``app.mount("/tenants/{tenant}", sub)``) adds the
    matched path, as sent, to ``root_path``: its template stands in for it, so
    no path parameter's value ever becomes part of the name. ``None`` when no
    route matched, or the mounts cannot be told.
    """
    route = scope.get("route")
    path = getattr(route, "path", None)
    state = scope.get("fastapi")
    if state.__class__ is dict:
        path = _included_path(state, route) or path
    routed = scope.get("root_path") or ""
    if routed == root:  # no mount with a path of its own: the common case
        return root + path if isinstance(path, str) else None
    mounts = _mount_templates(scope, root, routed, app)
    if mounts is None:
        return None
    # A mount answering itself (an app that routes nothing, or a 404 inside it) is the
    # route; FastAPI's router sets no route for a mount at all.
    if route is None or isinstance(route, Mount):
        return root + mounts or None
    return root + mounts + path if isinstance(path, str) else None


def _included_path(state: dict[str, Any], route: object) -> str | None:
    """The template of *route* with the prefixes it was included under, when FastAPI
    keeps them apart: from 0.16x a router's routes are included as they are, so the
    route matched has its router's path only, and ``include_router(prefix=...)``'s
    part is in the request's route context."""
    context = state.get("effective_route_context")
    if getattr(context, "original_route", None) is not route:
        return None
    path = getattr(getattr(context, "starlette_route", None), "path", None)
    if not isinstance(path, str) or not path:
        path = getattr(context, "path", None)
    return path if isinstance(path, str) and path else None


def _mount_templates(scope: Scope, root: str, routed: Any, app: Any) -> str | None:
    """The templates of the mounts that took the request from ``root_path`` *root* to
    *routed*, joined, by routing the matched prefix again through *app*'s routes.

    ``None`` when the routing cannot be retraced (routes that are not Starlette's
    ``Mount`` or ``Host``, a path that no longer matches): the caller names the
    span by its method then.
    """
    if not isinstance(routed, str) or not routed.startswith(root):
        return None
    routes = getattr(app, "routes", None)
    if routes is None:
        routes = getattr(scope.get("router"), "routes", None)  # the outermost router
    probe: dict[str, Any] = {
        "type": scope.get("type"),
        "path": routed + "/",  # the prefix alone: a mount matches it as it matched the path
        "root_path": root,
        "headers": scope.get("headers") or [],
    }
    templates: list[str] = []
    for _ in range(8):  # mounts inside mounts, as deep as native_tracing looks
        if probe["root_path"] == routed:
            return "".join(templates)
        for route in routes or ():
            if isinstance(route, (Mount, Host)):
                try:
                    match, child = route.matches(probe)
                except Exception:  # a convertor that refuses the prefix alone: untold
                    return None
                if match is Match.FULL:
                    break
        else:
            return None
        if isinstance(route, Mount):
            templates.append(route.path)
        probe.update(child)
        routes = route.routes
    return None


def excluded_pattern(excluded_urls: str | Iterable[str] | None) -> re.Pattern[str] | None:
    """One pattern for *excluded_urls*, or :class:`asynctrace.ConfigurationError`."""
    if excluded_urls is None:
        return None
    if isinstance(excluded_urls, str):
        excluded_urls = [u.strip() for u in excluded_urls.split(",") if u.strip()]
    patterns = names_option("excluded_urls", excluded_urls, "regular expressions")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise asynctrace.ConfigurationError(
                f"excluded_urls: {pattern!r} is not a regular expression ({exc}); expected "
                "regular expressions (re syntax) matched against the path, or one "
                "comma-separated string of them"
            ) from None
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
