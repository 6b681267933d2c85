"""The OpenAPI document as built from the route table and the routes' models, in process: it
names every route the application serves with its methods, and its references all resolve to
components it keeps (none left unused). That the server keeps to it is ``test_fuzz``'s."""

from __future__ import annotations

from typing import Any, cast

from starlette.routing import Route

from drover.server.app import create_app
from drover.server.config import ServerSettings
from drover.server.openapi import schema

#: Routes the application serves that are not the API's: the web page and the schema itself.
_NOT_THE_API = {"/", "/openapi.json"}


def test_the_route_table_is_what_the_application_serves() -> None:
    app = create_app(cast(Any, None), ServerSettings())  # (no request is served)
    served = {
        route.path: (route.methods or set()) - {"HEAD"}
        for route in app.routes
        if isinstance(route, Route) and route.path not in _NOT_THE_API
    }
    described = {
        path: {method.upper() for method in operations}
        for path, operations in schema()["paths"].items()
    }
    assert described == served


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        own = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        return own.union(*(_refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value))
    return set()


def test_every_reference_resolves_and_every_component_is_used() -> None:
    doc = schema()
    components = doc["components"]["schemas"]
    refs = _refs(doc)
    assert refs == {f"#/components/schemas/{name}" for name in components}
    # (pydantic titles every schema with its class's or field's name: noise the keys carry.)
    assert not _titled(doc["paths"]) and not _titled(components)


def _titled(value: Any) -> bool:
    """Whether a schema in ``value`` has a title (a property named title is a schema)."""
    if isinstance(value, dict):
        return isinstance(value.get("title"), str) or any(_titled(v) for v in value.values())
    if isinstance(value, list):
        return any(_titled(v) for v in value)
    return False
