"""MkDocs hooks of drover's site: the references rendered from the code at every build.

A page asks for a generated part with a marker line, replaced before the page is rendered:

==============================  ==================================================================
``<!-- drover:cli -->``         every parser of the command line (``drover.cli.main``): usage,
                                arguments, options, choices and defaults, as ``--help`` has them
``<!-- drover:http -->``        every route of the OpenAPI schema (``drover.server.openapi``,
                                built from the routes' models)
``<!-- drover:http-contract -->``  the HTTP contract, from the server package's docstring
``<!-- drover:event-stream -->``  the event stream and its replay, from the same docstring
``<!-- drover:library -->``     a mkdocstrings block for each name ``drover.__all__`` exports,
                                grouped by the module that defines it
``<!-- drover:modules -->``     every module of the package with the first line of its docstring
==============================  ==================================================================

The schema is also published as ``reference/openapi.json``, and the one file of mermaid the
diagrams need (``.cache/docs/mermaid.min.js``, which ``scripts/ci-deps`` fetches, or
``$DROVER_MERMAID_JS``) is served from the site, never from a CDN: the site works offline.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

sys.path.insert(0, str(Path(__file__).parent))
from rst import to_markdown  # (a sibling module; hooks are loaded by path)

ROOT = Path(__file__).resolve().parents[2]
MERMAID = "assets/javascripts/mermaid.min.js"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from drover.server.openapi import schema

    mermaid = Path(os.environ.get("DROVER_MERMAID_JS") or ROOT / ".cache/docs/mermaid.min.js")
    if not mermaid.is_file():
        raise PluginError(
            f"{mermaid} is missing: run scripts/ci-deps (it fetches the pinned mermaid release)"
        )
    files.append(File.generated(config, MERMAID, abs_src_path=str(mermaid)))
    body = json.dumps(schema(), indent=2) + "\n"
    files.append(File.generated(config, "reference/openapi.json", content=body))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    parts = {
        "<!-- drover:cli -->": _cli,
        "<!-- drover:http -->": _http,
        "<!-- drover:http-contract -->": _http_contract,
        "<!-- drover:event-stream -->": _event_stream,
        "<!-- drover:library -->": _library,
        "<!-- drover:modules -->": _modules,
    }
    for marker, render in parts.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


# -- the command line -------------------------------------------------------------------------


def _cli() -> str:
    from drover.cli import main

    out = [_parser(main.build_parser(), "drover", level=2)]
    for name in main.SUBCOMMANDS:
        out.append(_parser(main.build_subparser(name), f"drover {name}", level=2))
    return "\n".join(out)


def _parser(parser: argparse.ArgumentParser, title: str, *, level: int) -> str:
    formatter = parser._get_formatter()
    usage = parser.format_usage().removeprefix("usage: ").strip()
    out = [f"{'#' * level} `{title}`", ""]
    if parser.description:
        out += [parser.description, ""]
    out += ["```text", usage, "```", ""]
    rows: list[str] = []
    nested: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested.append(_parser(sub, f"{title} {name}", level=level + 1))
            continue
        invocation = formatter._format_action_invocation(action)
        rows.append(f"| `{invocation}` | {_describe(action)} |")
    if rows:
        out += ["| argument | meaning |", "| --- | --- |", *rows, ""]
    if parser.epilog:
        out += [parser.epilog, ""]
    return "\n".join([*out, *nested])


def _describe(action: argparse.Action) -> str:
    text = (action.help or "").replace("%(default)s", str(action.default))
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(f'`{c}`' for c in action.choices)})"
    default = action.default
    shown = default not in (None, False, argparse.SUPPRESS) and not isinstance(
        action, argparse._VersionAction
    )
    if shown and str(default) not in text:
        text += f" (default: `{default}`)"
    if action.required and action.option_strings:
        text += " (required)"
    return text.replace("|", "\\|").replace("\n", " ")


# -- the HTTP API -----------------------------------------------------------------------------


def _shape(schema: dict[str, Any]) -> str:
    """A schema in a line: a ``$ref`` as a link, an object as ``{field, optional?}``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        required = set(schema.get("required", []))
        fields = [f"{name}{'' if name in required else '?'}" for name in schema["properties"]]
        return "`{" + ", ".join(fields) + "}`"
    if kind == "array" and "items" in schema:
        return f"array of {_shape(schema['items'])}"
    if isinstance(kind, list):
        return " or ".join(f"`{k}`" for k in kind)
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(_shape(s) for s in schema.get("oneOf", schema.get("anyOf", [])))
    return f"`{kind}`" if kind else "any JSON"


def _body(content: dict[str, Any]) -> str:
    media, spec = next(iter(content.items()))
    shape = _shape(spec.get("schema", {}))
    return shape if media == "application/json" else f"`{media}` {shape}"


def _http() -> str:
    from drover.server.openapi import schema

    doc = schema()
    out: list[str] = []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            out += [f"### `{method.upper()} {path}`", "", op.get("summary", ""), ""]
            if op.get("description"):
                out += [op["description"], ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | type | meaning |", "| --- | --- | --- | --- |"]
                for p in params:
                    need = " (required)" if p.get("required") else ""
                    if "default" in p.get("schema", {}):
                        need += f" (default: `{json.dumps(p['schema']['default'])}`)"
                    text = (p.get("description") or "").replace("\n", " ")
                    row = f"| `{p['name']}` | {p['in']} | {_shape(p.get('schema', {}))} "
                    out.append(row + f"| {text}{need} |")
                out.append("")
            body = op.get("requestBody")
            if body:
                out += [f"Body: {_body(body['content'])}", ""]
                full = json.dumps(body["content"]["application/json"]["schema"], indent=2)
                out += ['??? note "Body schema"', "", "    ```json"]
                out += [f"    {line}" for line in full.splitlines()]
                out += ["    ```", ""]
            out += ["| status | meaning | body |", "| --- | --- | --- |"]
            for status, answer in op["responses"].items():
                content = answer.get("content")
                shape = _body(content) if content else ""
                out.append(f"| {status} | {answer.get('description', '')} | {shape} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, spec in doc["components"]["schemas"].items():
        out += [f"### {name} {{ #schema-{name.lower()} }}", "", "```json"]
        out += [json.dumps(spec, indent=2), "```", ""]
    return "\n".join(out)


def _server_doc() -> tuple[str, str]:
    """The server package's docstring from its HTTP contract on: (contract, event stream)."""
    import drover.server

    text = drover.server.__doc__ or ""
    contract = text[text.index("HTTP contract") :]
    split = contract.index("The event stream\n")
    return contract[:split], contract[split:]


def _http_contract() -> str:
    return to_markdown(_server_doc()[0])


def _event_stream() -> str:
    return to_markdown(_server_doc()[1])


# -- the library ------------------------------------------------------------------------------

#: Headings of the library reference, by the module that defines the names.
_GROUPS = {
    "drover.agent.agent": "The agent",
    "drover.agent.session": "Sessions and results",
    "drover.agent.result": "Sessions and results",
    "drover.agent.turn_stream": "Streaming a turn",
    "drover.tools.decorator": "Tools",
    "drover.tools.base": "Tools",
    "drover.core.events": "Events",
    "drover.core.messages": "Messages",
    "drover.errors": "Errors",
}


def _library() -> str:
    """Per group, each defining module's docstring and the names it exports."""
    import drover

    origins: dict[str, str] = drover._ORIGINS
    modules: dict[str, list[str]] = {}
    for name in drover.__all__:
        module = origins[name]
        if module not in _GROUPS:
            raise PluginError(f"drover.{name} comes from {module}: give it a group in reference.py")
        modules.setdefault(module, []).append(name)
    out: list[str] = []
    for heading in dict.fromkeys(_GROUPS.values()):
        out += [f"## {heading}", ""]
        for module in (m for m, h in _GROUPS.items() if h == heading and m in modules):
            out += [f"::: {module}", "    options:", "      show_root_heading: false"]
            out += ["      show_root_toc_entry: false", f"      members: {modules[module]}", ""]
    return "\n".join(out)


# -- the module index -------------------------------------------------------------------------


def _modules() -> str:
    """A table of every module under ``src/drover``, read without importing any."""
    package = ROOT / "src" / "drover"
    out = ["| module | what it owns |", "| --- | --- |"]
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        first = to_markdown(doc.strip().split("\n\n", 1)[0]).replace("\n", " ")
        escaped = first.replace("|", "\\|")
        out.append(f"| `{name}` | {escaped} |")
    return "\n".join(out)
