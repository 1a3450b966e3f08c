"""An action's HTTP request, built from the model's arguments, the verified
visitor's identity and the API's credentials; and the API's answer as the
model may read it. Django-free.

The model's arguments are checked against the operation's schema before
anything is built. Identity-filled parameters take the verified values
only: an argument the model sends under such a name is dropped. Path
values are percent-encoded whole (a "/" in a value cannot add a segment)
and "." and ".." are refused, so no value moves the path.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, quote_plus, urlencode

import jsonschema

from chat.actions import openapi


class Person(Protocol):
    """A verified visitor (chat/visitors/verified.py), as far as a request needs them."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def email(self) -> str: ...

    def attribute(self, key: str) -> Any: ...


MAX_ERRORS = 3  # schema errors told to the model at once


class BadArguments(Exception):
    """The model's arguments do not fit the operation: told to the model, nothing sent."""


class NeedsIdentity(Exception):
    """The operation needs a verified value the visitor does not have."""


@dataclass(frozen=True)
class Prepared:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    secret_values: tuple[str, ...]  # to mask wherever the request is shown (the admin's Test page)

    def shown(self) -> dict[str, Any]:
        """The request for people to read: credentials masked."""

        def mask(text: str) -> str:
            for secret in self.secret_values:
                if secret:
                    for form in (secret, quote(secret, safe=""), quote_plus(secret, safe="")):
                        text = text.replace(form, "••••")
            return text

        return {
            "method": self.method,
            "url": mask(self.url),
            "headers": {name: mask(value) for name, value in self.headers.items()},
            "body": mask(self.body.decode()) if self.body else "",
        }


def split(operation: openapi.Operation, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The model's arguments without any for an identity-filled parameter,
    and the names of those dropped (to log)."""
    filled = {param.name for param in operation.params if param.visitor}
    kept = {name: value for name, value in arguments.items() if name not in filled}
    return kept, sorted(set(arguments) & filled)


def check(operation: openapi.Operation, arguments: Mapping[str, Any]) -> None:
    """Raises BadArguments unless the arguments fit the tool's schema."""
    validator = jsonschema.Draft202012Validator(operation.tool_parameters())
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if errors:
        told = "; ".join(_error_text(error) for error in errors[:MAX_ERRORS])
        raise BadArguments(f"the arguments do not fit {operation.name}: {told}")


def _error_text(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def identity(operation: openapi.Operation, person: Person | None) -> dict[str, Any]:
    """The verified values of the operation's identity-filled parameters."""
    values: dict[str, Any] = {}
    for param in operation.params:
        if not param.visitor:
            continue
        if person is None:
            raise NeedsIdentity("the visitor must sign in first: this action works only for a verified visitor")
        if param.visitor.startswith("attributes."):
            value = person.attribute(param.visitor.removeprefix("attributes."))
        else:
            value = getattr(person, param.visitor)
        if value in (None, ""):
            raise NeedsIdentity(f"the visitor's verified identity has no {param.visitor}")
        values[param.name] = value
    return values


def recorded(operation: openapi.Operation, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as a call's record keeps them: the model's, and each
    identity-filled one as "(verified id)" and the like, never its value."""
    kept = dict(arguments)
    for param in operation.params:
        if param.visitor:
            kept[param.name] = f"(verified {param.visitor.removeprefix('attributes.')})"
    return kept


def build(
    operation: openapi.Operation,
    arguments: Mapping[str, Any],
    filled: Mapping[str, Any],
    credentials: Mapping[str, tuple[openapi.Scheme, str]],
) -> Prepared:
    """The request. Raises BadArguments for a value that cannot go where
    its parameter says, NeedsIdentity never (identity is filled already)."""
    values = {**arguments, **filled}
    path = operation.path
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {"Accept": "application/json"}
    body_fields: dict[str, Any] = {}
    whole_body: Any = None
    for param in operation.params:
        if param.name not in values or values[param.name] is None:
            continue
        value = values[param.name]
        if param.location == "path":
            text = _scalar(value, param.name)
            if text in (".", ".."):
                raise BadArguments(f"{param.name} may not be {text!r}")
            path = path.replace("{" + param.name + "}", quote(text, safe=""))
        elif param.location == "query":
            items = value if isinstance(value, list) else [value]
            query.extend((param.name, _scalar(item, param.name)) for item in items)
        elif param.location == "header":
            headers[param.name] = _header(param.name, _scalar(value, param.name))
        elif operation.body == "whole":
            whole_body = value
        else:
            body_fields[param.name] = value
    secrets = _authorize(operation, credentials, headers, query)
    url = operation.base_url.rstrip("/") + path
    if query:
        url += ("&" if "?" in url else "?") + urlencode(query, quote_via=quote)
    body = None
    if operation.body:
        payload = whole_body if operation.body == "whole" else body_fields
        if payload is not None and (payload != {} or operation.body_required):
            body = json.dumps(payload, ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
    return Prepared(operation.method, url, headers, body, secrets)


def _scalar(value: Any, name: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list):
        return ",".join(_scalar(item, name) for item in value)  # OpenAPI's "simple" style
    return json.dumps(value, ensure_ascii=False)


def _header(name: str, value: str) -> str:
    if "\r" in value or "\n" in value or "\0" in value:
        raise BadArguments(f"the header {name} may not hold a line break")
    return value


class MissingCredentials(Exception):
    """The operation needs a credential that is not set (set_action_secret)."""


def _authorize(
    operation: openapi.Operation,
    credentials: Mapping[str, tuple[openapi.Scheme, str]],
    headers: dict[str, str],
    query: list[tuple[str, str]],
) -> tuple[str, ...]:
    """Adds the first alternative of the operation's security whose
    credentials are all set. Returns the secrets, for masking."""
    if not operation.security:
        return ()
    for alternative in operation.security:
        if all(name in credentials for name in alternative):
            break
    else:
        missing = sorted({name for alt in operation.security for name in alt} - set(credentials))
        raise MissingCredentials(f"no credential set for {', '.join(missing)} (manage.py set_action_secret)")
    secrets = []
    for name in alternative:
        scheme, secret = credentials[name]
        if scheme.kind == "bearer":
            headers["Authorization"] = _header("Authorization", f"Bearer {secret}")
        elif scheme.kind == "basic":
            encoded = base64.b64encode(secret.encode()).decode()
            headers["Authorization"] = f"Basic {encoded}"
            secrets.append(encoded)
        elif scheme.kind == "header":
            headers[scheme.param] = _header(scheme.param, secret)
        else:
            query.append((scheme.param, secret))
        secrets.append(secret)
    return tuple(secrets)


def shaped(operation: openapi.Operation, content_type: str, body: bytes, limit: int) -> tuple[Any, bool]:
    """The answer as the model may read it: JSON parsed and cut to the
    operation's x-kookee-fields (a "*" segment: every item of a list), or
    text; then at most `limit` characters. Returns it and whether it was cut."""
    text = body.decode("utf-8", errors="replace")
    data: Any = text
    if "json" in content_type.lower() or text.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except ValueError:
            data = text
    if operation.fields and not isinstance(data, str):
        data = keep(data, operation.fields)
    dumped = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    if len(dumped) <= limit:
        return data, False
    return dumped[:limit], True


def keep(data: Any, pointers: tuple[str, ...]) -> Any:
    """Only what the JSON pointers reach, each in its place (a list keeps
    the items reached, in order)."""
    mask: Mask | bool = {}
    for pointer in pointers:
        parts = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
        mask = _add(mask, parts)
    kept = _apply(data, mask)
    return {} if kept is _NOTHING else kept


Mask = dict[str, Any]  # a segment -> its mask below; True: all of it


def _add(mask: Mask | bool, parts: list[str]) -> Mask | bool:
    if mask is True or not parts:
        return True
    assert isinstance(mask, dict)
    mask[parts[0]] = _add(mask.get(parts[0], {}), parts[1:])
    return mask


def _join(a: Mask | bool | None, b: Mask | bool | None) -> Mask | bool | None:
    if a is None or b is None:
        return a if b is None else b
    if a is True or b is True:
        return True
    assert isinstance(a, dict) and isinstance(b, dict)
    joined = dict(a)
    for key, value in b.items():
        joined[key] = _join(joined.get(key), value)
    return joined


_NOTHING = object()  # what a pointer past a plain value reaches: left out, not null


def _apply(data: Any, mask: Mask | bool) -> Any:
    if mask is True:
        return data
    assert isinstance(mask, dict)
    if isinstance(data, dict):
        kept_items = ((key, _apply(value, mask[key])) for key, value in data.items() if key in mask)
        return {key: value for key, value in kept_items if value is not _NOTHING}
    if isinstance(data, list):
        kept = []
        for index, item in enumerate(data):
            item_mask = _join(mask.get("*"), mask.get(str(index)))
            if item_mask is not None:
                value = _apply(item, item_mask)
                if value is not _NOTHING:
                    kept.append(value)
        return kept
    return _NOTHING
