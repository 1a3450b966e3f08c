"""JSON on the hot path: every chunk the provider streams is decoded here and
every frame the visitor gets is encoded here, so it uses orjson, several
times faster than the standard library. orjson is strict where the standard
library is not (lone surrogates, NaN); those rare values fall back to it, so
nothing that decoded or encoded before fails now. Two differences remain, on
values this path never carries: integers beyond 64 bits are read as floats,
and NaN is written as null."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # raises the standard error if it is not JSON at all


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, an integer beyond 64 bits
        return json.dumps(value)
