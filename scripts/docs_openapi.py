"""A MkDocs hook: the HTTP reference page from the OpenAPI document the app generates.

The document is not kept in the repository, so it cannot drift: at every build the app
(``ledgerflow.web.create_app``) is made over a throwaway journal and asked for its document,
which is rendered into ``reference/http.md`` (in place of the ``<!-- openapi -->`` line) and
written beside it as ``reference/openapi.json``.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

MARKER = "<!-- openapi -->"
PAGE = "reference/http.md"
DOCUMENT = "reference/openapi.json"
_document: dict[str, Any] | None = None


def _openapi() -> dict[str, Any]:
    global _document
    if _document is None:
        from ledgerflow.web import create_app

        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            app = create_app(f"sqlite:///{Path(folder) / 'docs.db'}", insecure_no_auth=True)
            _document = app.openapi()
    return _document


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[-1]}`"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list of {_schema_name(schema.get('items', {}))}"
    return f"`{schema.get('type', 'any')}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    summary = op.get("summary") or op.get("operationId", "")
    lines += [f"**{_cell(summary)}** (role: `{op.get('x-required-role', 'none')}`)", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    if op.get("deprecated"):
        lines += ['!!! warning "Deprecated"', "", ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            flag = " (deprecated)" if p.get("deprecated") else ""
            lines.append(
                f"| `{p['name']}`{flag} | {p['in']} | {_schema_name(p.get('schema', {}))} "
                f"| {'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        lines += [f"Request body ({media}): {_schema_name(content.get('schema', {}))}", ""]
    lines += ["| status | meaning | body |", "|---|---|---|"]
    for status, answer in sorted(op.get("responses", {}).items()):
        content = answer.get("content", {})
        shapes = ", ".join(_schema_name(c.get("schema", {})) for c in content.values()) or "-"
        lines.append(f"| {status} | {_cell(answer.get('description', ''))} | {shapes} |")
    return [*lines, ""]


def _schemas(document: dict[str, Any]) -> list[str]:
    lines = ["## Schemas", ""]
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        lines += [f"### `{name}`", ""]
        if schema.get("description"):
            lines += [_cell(schema["description"]), ""]
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            lines += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, spec in properties.items():
                lines.append(
                    f"| `{field}` | {_schema_name(spec)} | {'yes' if field in required else 'no'}"
                    f" | {_cell(spec.get('description', spec.get('title', '')))} |"
                )
            lines.append("")
        elif "enum" in schema:
            lines += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    return lines


def render(document: dict[str, Any]) -> str:
    lines = [
        f"OpenAPI {document['openapi']}, {document['info']['title']} "
        f"{document['info']['version']}.",
        "",
        "## Operations",
        "",
    ]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            lines += _operation(method, path, op)
    return "\n".join(lines + _schemas(document))


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} has no {MARKER} line for the rendered OpenAPI document")
    return markdown.replace(MARKER, render(_openapi()))


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    text = json.dumps(_openapi(), indent=2, sort_keys=True) + "\n"
    files.append(File.generated(config, DOCUMENT, content=text))
    return files
