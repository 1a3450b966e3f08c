"""Actions from a customer's OpenAPI 3.0 or 3.1 document: each operation with an operationId becomes a tool.

What calling the API relies on is checked at import, so that a bad document is refused with its place named
rather than becoming actions that fail in a conversation. Pure Python, no Django."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

from chat.vocabulary import TOOL_NAMES


class BadDocument(Exception):
    """The document cannot be imported; the message names where
    (e.g. 'paths./orders/{id}.get.parameters[1]: no name')."""


VISITOR_FIELDS = ("id", "email", "name")  # plus "attributes.KEY"

MAX_BYTES = 2 * 1024 * 1024
MAX_OPERATIONS = 500
MAX_REF_DEPTH = 32
MAX_NODES = 1_000_000  # values once YAML aliases are expanded (a few kilobytes of aliases can make billions)
MAX_SCHEMA_NODES = 250_000  # likewise once the tools' schemas' $refs are
MAX_TEXT = 1000

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
LOCATIONS = ("path", "query", "header")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TEMPLATE = re.compile(r"\{([^{}]*)\}")
_JSON = re.compile(r"application/json|[^;]*\+json", re.IGNORECASE)  # the media type before any ';'
_IGNORED_HEADERS = ("accept", "content-type", "authorization")  # OpenAPI: such parameters SHALL be ignored

# Schema keywords by what their value holds, so that a property named "example" (say) is not taken for one.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"})
_DROPPED = frozenset({"example", "xml", "discriminator", "externalDocs"})  # OpenAPI's, not JSON Schema's
# An object body becomes arguments only when these are all it says: anything more would be lost.
_FLAT = frozenset({"type", "properties", "required", "title", "description", "deprecated"} | _DROPPED)


class _Loader(yaml.SafeLoader):
    """YAML as JSON has it: not YAML 1.1's booleans `on`, `no`, `yes` or its dates, which no JSON API means."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if not tag.endswith((":bool", ":timestamp"))]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF")


@dataclass(frozen=True)
class Param:
    name: str  # the argument's name the model sends (for body fields, the property name)
    location: str  # "path" | "query" | "header" | "body"
    required: bool
    schema: dict[str, Any]  # JSON Schema (refs resolved, 3.0 'nullable' converted), with its description
    visitor: str = ""  # "" or "id" | "email" | "name" | "attributes.KEY" (from x-kookee-visitor)


@dataclass(frozen=True)
class Operation:
    name: str  # operationId
    method: str  # upper-case
    path: str  # the path template, e.g. "/orders/{order_id}"
    base_url: str  # the first server's URL, variables at their defaults, no trailing "/"; "" when none
    summary: str
    description: str
    params: tuple[Param, ...]  # path, query, header parameters, then body fields
    body: str  # "" (no JSON body), "fields" (its properties are params) or "whole" (one param named "body")
    body_required: bool
    security: tuple[tuple[str, ...], ...]  # alternatives, each the schemes that all apply; () means none
    fields: tuple[str, ...]  # JSON pointers of the response the model may see; () = all
    confirm: bool  # the visitor confirms before the call

    @property
    def needs_identity(self) -> bool:
        return any(param.visitor for param in self.params)

    def tool_parameters(self) -> dict[str, Any]:
        """The tool's JSON Schema as the model sees it: without the params the visitor's identity fills."""
        shown = [param for param in self.params if not param.visitor]
        return {
            "type": "object",
            "properties": {param.name: copy.deepcopy(param.schema) for param in shown},
            "required": [param.name for param in shown if param.required],
            "additionalProperties": False,
        }

    def fingerprint(self) -> str:
        """A hash of everything above, so that a re-import can tell which operations changed."""
        text = json.dumps(asdict(self), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Scheme:
    name: str  # its key in components.securitySchemes
    kind: str  # "bearer" | "basic" | "header" | "query"
    param: str  # the header or query parameter name for apiKey kinds ("" otherwise)


@dataclass(frozen=True)
class Document:
    title: str
    version: str
    operations: tuple[Operation, ...]
    schemes: tuple[Scheme, ...]  # the supported ones defined, used or not
    skipped: tuple[str, ...] = ()  # operations that are not actions: "GET /health", with why when not obvious


def load(path: str | Path) -> Document:
    """The document in a file (UTF-8, JSON or YAML)."""
    try:
        return parse(Path(path).read_bytes().decode("utf-8-sig"))  # a byte order mark is not JSON
    except (OSError, UnicodeDecodeError) as error:
        raise BadDocument(f"{path}: cannot read: {error}") from None


def parse(text: str) -> Document:
    """The document in JSON or YAML text."""
    size = len(text.encode("utf-8", "surrogatepass"))
    _check(size <= MAX_BYTES, "the document", f"{size} bytes; at most {MAX_BYTES} (2 MB) can be imported")
    try:
        try:
            data = json.loads(text)
        except ValueError:  # not JSON; tried first because PyYAML cannot read all JSON (e.g. "\/")
            try:
                data = _plain(yaml.load(text, Loader=_Loader), [0])  # _Loader is a SafeLoader
            except yaml.YAMLError as error:
                raise BadDocument(f"the document is neither JSON nor YAML: {error}") from None
        return _Reader(data).document()
    except RecursionError:
        raise BadDocument("the document is nested too deeply") from None


def _check(ok: object, where: str, message: str) -> None:
    if not ok:
        raise BadDocument(f"{where}: {message}")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    _check(isinstance(value, dict), where, "must be a mapping")
    return value  # type: ignore[no-any-return]


def _plain(node: Any, count: list[int]) -> Any:
    """Loaded YAML as JSON values: keys as strings, aliases expanded (and counted), nothing else."""
    count[0] += 1
    _check(count[0] <= MAX_NODES, "the document", "too many values once YAML aliases are expanded")
    if isinstance(node, dict):
        return {k if isinstance(k, str) else json.dumps(_plain(k, count)): _plain(v, count) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(value, count) for value in node]
    _check(node is None or isinstance(node, str | int | float), "the document", f"{node!r:.60} is not JSON")
    return node


def _text(value: Any, where: str) -> str:
    """Text for the model: stripped and limited, so that one long text cannot crowd out the rest."""
    _check(value is None or isinstance(value, str), where, "must be a string")
    return (value or "").strip()[:MAX_TEXT]


def _visitor(value: Any, where: str) -> str:
    key = value.removeprefix("attributes.") if isinstance(value, str) else ""
    ok = value is None or value in VISITOR_FIELDS or (key != value and _KEY.fullmatch(key))
    _check(ok, where, f"{value!r} is not one of id, email, name or attributes.KEY")
    return value or ""


class _Reader:
    def __init__(self, doc: Any) -> None:
        _check(isinstance(doc, dict), "the document", "the top level must be a mapping")
        version = doc.get("openapi")
        if version is None and "swagger" in doc:
            raise BadDocument(f"swagger: Swagger {doc['swagger']} is not supported; convert to OpenAPI 3.0 or 3.1")
        found = "missing" if version is None else f"{version!r} found"
        ok = isinstance(version, str) and version.startswith(("3.0", "3.1"))
        _check(ok, "openapi", f"a version string starting with 3.0 or 3.1 is needed; {found}")
        self.doc: dict[str, Any] = doc
        self.v30 = version.startswith("3.0")
        self.nodes = 0  # schema values produced, bounded by MAX_SCHEMA_NODES
        self.schemes = self._schemes()

    def document(self) -> Document:
        info = self.doc["info"] if isinstance(self.doc.get("info"), dict) else {}
        title, version = ("" if info.get(key) is None else str(info[key]) for key in ("title", "version"))
        operations: list[Operation] = []
        skipped: list[str] = []
        seen: dict[str, str] = {}  # operationId: where
        for path, node in _mapping(self.doc.get("paths", {}), "paths").items():
            if path.startswith("x-"):
                continue
            _check(path.startswith("/"), f"paths.{path}", "a path must start with '/'")
            item, where = self._deref(node, f"paths.{path}")
            for method in (method for method in METHODS if method in _mapping(item, where)):
                operation = self._operation(path, method, item, where)
                if isinstance(operation, str):
                    skipped.append(operation)
                    continue
                place, other = f"{where}.{method}.operationId", seen.get(operation.name)
                _check(other is None, place, f"{operation.name!r} is used already at {other}")
                seen[operation.name] = place
                operations.append(operation)
        _check(len(operations) <= MAX_OPERATIONS, "paths", f"{len(operations)} operations; at most {MAX_OPERATIONS}")
        supported = tuple(scheme for scheme in self.schemes.values() if isinstance(scheme, Scheme))
        return Document(title, version, tuple(operations), supported, tuple(skipped))

    def _operation(self, path: str, method: str, item: dict[str, Any], item_where: str) -> Operation | str:
        """The action, or the operation skipped (with why when not obvious)."""
        where = f"{item_where}.{method}"
        op = _mapping(item[method], where)
        label, name = f"{method.upper()} {path}", op.get("operationId")
        if name is None or method == "trace":
            return label if name is None else f"{label} (TRACE is not supported)"
        body = self._json_body(op["requestBody"], where) if "requestBody" in op else None
        if isinstance(body, str):
            return f"{label} ({body} body)"
        # Checked only now: an operation skipped anyway need not follow the rules for tool names.
        valid = isinstance(name, str) and _NAME.fullmatch(name)
        _check(valid, f"{where}.operationId", f"{name!r} must be 1 to 64 letters, digits, '_' or '-'")
        _check(name not in TOOL_NAMES, f"{where}.operationId", f"{name!r} is the name of a built-in tool")
        lists = [(item.get("parameters"), f"{item_where}.parameters"), (op.get("parameters"), f"{where}.parameters")]
        params = self._parameters(path, where, lists)
        kind, body_params = self._body_params(body, {param.name for param in params}) if body else ("", [])
        fields = op.get("x-kookee-fields", [])
        ok = isinstance(fields, list) and all(isinstance(field, str) and field.startswith("/") for field in fields)
        _check(ok, f"{where}.x-kookee-fields", "must be a list of JSON pointers such as '/status'")
        opt_in = op.get("x-kookee-confirm", False)
        _check(isinstance(opt_in, bool), f"{where}.x-kookee-confirm", "must be true or false")
        servers = (self._server(op, f"{where}."), self._server(item, f"{item_where}."), self._server(self.doc, ""))
        return Operation(
            name=name,
            method=method.upper(),
            path=path,
            base_url=next((url for url in servers if url is not None), ""),
            summary=_text(op.get("summary"), f"{where}.summary"),
            description=_text(op.get("description"), f"{where}.description"),
            params=(*params, *body_params),
            body=kind,
            body_required=body is not None and body[2],
            security=self._security(op, where),
            fields=tuple(fields),
            confirm=method not in ("get", "head") or opt_in,
        )

    def _parameters(self, path: str, where: str, lists: list[tuple[Any, str]]) -> list[Param]:
        """The path item's parameters and the operation's (in lists), which win on the same name and place."""
        merged: dict[tuple[str, str], Param] = {}
        for nodes, place in lists:
            _check(isinstance(nodes, list | None), place, "must be a list")
            for index, node in enumerate(nodes or []):
                if param := self._parameter(node, f"{place}[{index}]"):
                    merged[(param.name, param.location)] = param
        params = sorted(merged.values(), key=lambda param: LOCATIONS.index(param.location))
        for name in (names := [param.name for param in params]):  # the model's arguments are named, not placed
            _check(names.count(name) == 1, f"{where}.parameters", f"more than one parameter is named {name!r}")
        in_template, in_path = _TEMPLATE.findall(path), [param.name for param in params if param.location == "path"]
        for name in in_template:
            _check(name in in_path, where, f"the path parameter {name!r} is not defined")
        for name in in_path:
            _check(name in in_template, where, f"the path parameter {name!r} is not in the path")
        return params

    def _parameter(self, node: Any, where: str) -> Param | None:
        node, where = self._deref(node, where)
        name, location = _mapping(node, where).get("name"), node.get("in")
        _check(isinstance(name, str) and name, where, "no name")
        _check(location != "cookie", where, f"cookie parameters such as {name!r} are not supported")
        _check(location in LOCATIONS, where, f"{name!r} is 'in' {location!r}; path, query or header is needed")
        if location == "header" and str(name).lower() in _IGNORED_HEADERS:
            return None
        schema: Any = {"type": "string"}
        if "schema" in node:
            schema = self._top_schema(node["schema"], f"{where}.schema")
        elif "content" in node:
            _check(isinstance(node["content"], dict) and node["content"], f"{where}.content", "no media type")
            media_type, media = next(iter(node["content"].items()))
            place = f"{where}.content.{media_type}"
            schema = self._top_schema(_mapping(media, place).get("schema", schema), f"{place}.schema")
        if description := _text(node.get("description"), f"{where}.description"):
            schema["description"] = description
        visitor = _visitor(node.get("x-kookee-visitor"), f"{where}.x-kookee-visitor")
        return Param(str(name), str(location), location == "path" or node.get("required") is True, schema, visitor)

    def _json_body(self, node: Any, where: str) -> tuple[Any, str, bool, str] | str | None:
        """The JSON body's (schema, description, required, the schema's place); else its media types; None for none."""
        node, where = self._deref(node, f"{where}.requestBody")
        content = _mapping(_mapping(node, where).get("content") or {}, f"{where}.content")
        json_types = sorted((t for t in content if _JSON.fullmatch(t.split(";")[0].strip())), key=lambda t: "+" in t)
        if not json_types:
            return ", ".join(content) or None
        place = f"{where}.content.{json_types[0]}"
        schema = _mapping(content[json_types[0]], place).get("schema", {})
        description = _text(node.get("description"), f"{where}.description")
        return schema, description, node.get("required") is True, f"{place}.schema"

    def _body_params(self, body: tuple[Any, str, bool, str], taken: set[str]) -> tuple[str, list[Param]]:
        """How the body is sent ("fields" or "whole") and its params."""
        raw, description, required, where = body
        node, node_where = self._deref(raw, where)
        node = node if isinstance(node, dict) else {"?": None}
        keys = set(node) | (set(raw) - {"$ref", "description"} if not self.v30 and isinstance(raw, dict) else set())
        properties = node.get("properties")  # (3.1 applies what is next to a $ref too, above)
        flat = all(key in _FLAT or key.startswith("x-") for key in keys) and node.get("type", "object") == "object"
        if flat and isinstance(properties, dict) and properties and not taken & set(properties):
            needed = node.get("required", [])
            _check(isinstance(needed, list), f"{node_where}.required", "must be a list")
            params = []
            for name, prop in properties.items():
                place = f"{node_where}.properties.{name}"
                marked = prop.get("x-kookee-visitor") if isinstance(prop, dict) else None
                visitor = _visitor(marked, f"{place}.x-kookee-visitor")
                prop = {k: v for k, v in prop.items() if k != "x-kookee-visitor"} if isinstance(prop, dict) else prop
                params.append(Param(name, "body", required and name in needed, self._top_schema(prop, place), visitor))
            return "fields", params
        _check("body" not in taken, where, "the body is sent as the argument 'body', a parameter's name already")
        schema = self._top_schema(raw, where)
        if description:
            schema["description"] = description
        return "whole", [Param("body", "body", required, schema)]

    def _top_schema(self, node: Any, where: str) -> dict[str, Any]:
        """A param's schema: always a mapping (3.1's boolean schemas written out), to hold a description."""
        schema = self._schema(node, where, ())
        return schema if isinstance(schema, dict) else {} if schema else {"not": {}}

    def _schema(self, node: Any, where: str, refs: tuple[str, ...]) -> Any:
        """The schema as JSON Schema 2020-12: refs resolved, OpenAPI's own keywords dropped, 3.0's converted."""
        self.nodes += 1
        _check(self.nodes <= MAX_SCHEMA_NODES, where, "the schemas are too large once their $refs are expanded")
        if isinstance(node, bool) and not self.v30:
            return node
        if "$ref" in _mapping(node, where):
            ref = node["$ref"]
            _check(ref not in refs, where, f"recursive schema at {ref}")
            _check(len(refs) < MAX_REF_DEPTH, where, f"$refs nested deeper than {MAX_REF_DEPTH}")
            schema = self._schema(*self._resolve(ref, where), (*refs, ref))
            rest = {key: value for key, value in node.items() if key != "$ref"}
            if self.v30 or not rest:  # 3.0 ignores whatever is next to a $ref
                return schema
            extra = self._schema(rest, where, refs)  # 3.1: a description there describes; the rest applies too
            describes = isinstance(schema, dict) and set(extra) <= {"description", "title"}
            return {**schema, **extra} if describes else {"allOf": [schema], **extra}
        out: dict[str, Any] = {}
        for key, value in node.items():
            ok = key != "x-kookee-visitor"
            _check(ok, where, "x-kookee-visitor is read only on a parameter or a property of a flattened request body")
            if key.startswith("x-") or key in _DROPPED:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {name: self._schema(item, f"{where}.{key}.{name}", refs) for name, item in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self._schema(item, f"{where}.{key}[{i}]", refs) for i, item in enumerate(value)]
            elif key in _SCHEMA_ONE and isinstance(value, dict):
                out[key] = self._schema(value, f"{where}.{key}", refs)
            else:
                self.nodes += len(value) if isinstance(value, list | dict) else 0  # e.g. an enum, serialized per use
                out[key] = value
        if self.v30:
            # JSON Schema has a type list for 'nullable', which works only next to a type (OpenAPI 3.0.3).
            if out.pop("nullable", False) is True and "type" in out:
                types = out["type"] if isinstance(out["type"], list) else [out["type"]]
                out["type"] = types if "null" in types else [*types, "null"]
            for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                if isinstance(out.get(bound), bool) and out.pop(bound) and limit in out:
                    out[bound] = out.pop(limit)  # 3.0's flag is the bound itself in JSON Schema
        return out

    def _resolve(self, ref: Any, where: str) -> tuple[Any, str]:
        """What a local $ref points at, and that place for messages."""
        ok = isinstance(ref, str) and ref.startswith("#/")
        _check(ok, where, f"$ref {ref!r} is not supported; only refs within the document (#/...) are")
        node: Any = self.doc
        parts = [unquote(part).replace("~1", "/").replace("~0", "~") for part in ref[2:].split("/")]
        for part in parts:
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                _check(isinstance(node, dict) and part in node, where, f"$ref {ref!r} points to nothing")
                node = node[part]
        return node, ".".join(parts)

    def _deref(self, node: Any, where: str) -> tuple[Any, str]:
        """The object a (chain of) $ref leads to, for objects other than schemas."""
        seen: list[Any] = []
        while isinstance(node, dict) and "$ref" in node:
            _check(node["$ref"] not in seen and len(seen) < MAX_REF_DEPTH, where, f"$ref {node['$ref']!r} loops")
            seen.append(node["$ref"])
            node, where = self._resolve(node["$ref"], where)
        return node, where

    def _server(self, node: dict[str, Any], prefix: str) -> str | None:
        """The URL of the first of a node's servers, with variables at their defaults; None for none."""
        servers, where = node.get("servers"), f"{prefix}servers[0]"
        if not servers:
            return None
        ok = isinstance(servers, list) and isinstance(servers[0], dict) and isinstance(servers[0].get("url"), str)
        _check(ok, where, "must be a server with a url")
        url, variables = servers[0]["url"], servers[0].get("variables") or {}
        for name in _TEMPLATE.findall(url):
            variable = variables.get(name) if isinstance(variables, dict) else None
            _check(isinstance(variable, dict) and "default" in variable, where, f"{name!r} has no default")
            url = url.replace(f"{{{name}}}", str(variable["default"]))  # type: ignore[index]
        return url.rstrip("/") or url  # type: ignore[no-any-return]  # the path is appended; "/" stays

    def _schemes(self) -> dict[str, Scheme | str]:
        """The security schemes by name, or why one is not supported (which matters only where it is used)."""
        components = _mapping(self.doc.get("components") or {}, "components")
        schemes: dict[str, Scheme | str] = {}
        for name, raw in _mapping(components.get("securitySchemes") or {}, "components.securitySchemes").items():
            node, where = self._deref(raw, f"components.securitySchemes.{name}")
            node = node if isinstance(node, dict) else {}
            kind, scheme, place, key = (node.get(field) for field in ("type", "scheme", "in", "name"))
            if kind == "http" and str(scheme).lower() in ("bearer", "basic"):
                schemes[name] = Scheme(name, str(scheme).lower(), "")
            elif kind == "apiKey" and place in ("header", "query") and isinstance(key, str) and key:
                schemes[name] = Scheme(name, place, key)
            else:
                found = {"http": f"http {scheme}", "apiKey": f"apiKey in {place}"}.get(str(kind), f"type {kind}")
                schemes[name] = f"{where}: {found} is not supported (only http bearer/basic, apiKey in header/query)"
        return schemes

    def _security(self, op: dict[str, Any], where: str) -> tuple[tuple[str, ...], ...]:
        """The alternatives of scheme names; the operation's own override the document's."""
        own = "security" in op
        raw, place = (op["security"], f"{where}.security") if own else (self.doc.get("security"), "security")
        _check(isinstance(raw, list | None), place, "must be a list")
        for index, requirement in enumerate(raw or []):
            for name in _mapping(requirement, f"{place}[{index}]"):
                scheme, undefined = self.schemes.get(name), f"scheme {name!r} is not in components.securitySchemes"
                _check(scheme is not None, f"{place}[{index}]", undefined)
                if isinstance(scheme, str):
                    raise BadDocument(f"{scheme}; used at {place}[{index}]")
        return tuple(tuple(requirement) for requirement in raw or [])
