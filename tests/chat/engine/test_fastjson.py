"""chat.engine.fastjson: orjson on the hot path, the standard library for what
orjson will not take, so that anything json read or wrote still works."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.engine import fastjson

CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "Grüße, 你好, مرحبا 🙂👍🏽"}, "finish_reason": None}],
    "usage": None,
}


# --- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        CHUNK,
        {"type": "delta", "turn_id": 7, "text": 'Ünïcödé and emoji 🎉🇫🇷 and a\nnewline\tand "quotes" \\'},
        ["", "\x00", "\u2028\u2029", "\U0010ffff", "\ufeff"],
        {"nested": {"list": [1, -2, 3.5, True, False, None, {"deep": []}]}},
        2**64 - 1,
        -(2**63),
        0.1,
        -0.0,
        1e308,
        "",
        None,
    ],
    ids=lambda v: type(v).__name__,
)
def test_round_trips(value):
    encoded = fastjson.dumps(value)
    assert isinstance(encoded, str)
    assert fastjson.loads(encoded) == value
    assert json.loads(encoded) == value  # what it writes is JSON any reader takes
    assert fastjson.loads(json.dumps(value)) == value  # and it reads what json wrote
    assert fastjson.loads(encoded.encode()) == value  # from bytes too


def test_non_ascii_is_written_as_is():
    assert fastjson.dumps({"text": "é🙂"}) == '{"text":"é🙂"}'


def test_escaped_non_ascii_and_surrogate_pairs_are_read():
    assert fastjson.loads('"\\u00e9\\ud83d\\ude00"') == "é\U0001f600"


def test_a_chunk_from_the_wire_is_read_as_the_standard_library_reads_it():
    raw = json.dumps(CHUNK).encode()  # as a provider sends it, ASCII-escaped
    assert fastjson.loads(raw) == json.loads(raw) == CHUNK


# --- what orjson refuses: the standard library's answer -----------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"\\ud800"', "\ud800"),
        ('"a\\udfffb"', "a\udfffb"),
        ('{"choices": [{"delta": {"content": "half \\ud83d"}}]}', {"choices": [{"delta": {"content": "half \ud83d"}}]}),
    ],
)
def test_lone_surrogate_escapes_are_read(text, expected):
    assert fastjson.loads(text) == expected
    assert fastjson.loads(text.encode()) == expected


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("NaN", math.isnan),
        ("Infinity", lambda v: v == math.inf),
        ("-Infinity", lambda v: v == -math.inf),
        ("1e400", lambda v: v == math.inf),
        ('{"score": NaN}', lambda v: math.isnan(v["score"])),
    ],
)
def test_nan_and_infinity_are_read(text, check):
    assert check(fastjson.loads(text))


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**40])
def test_integers_beyond_64_bits_are_read_as_floats(number):
    # Documented in chat/engine/fastjson.py: orjson reads them as floats, and nothing
    # on this path (token counts, turn ids) comes near 2**63.
    value = fastjson.loads(str(number))
    assert type(value) is float
    assert value == float(number)


@pytest.mark.parametrize("value", ["\ud800", {"text": "half \udbff"}, ["\udc00", "ok"]])
def test_lone_surrogates_are_written(value):
    encoded = fastjson.dumps(value)
    assert isinstance(encoded, str)
    assert json.loads(encoded) == value
    assert fastjson.loads(encoded) == value
    encoded.encode("utf-8")  # the text itself is sendable (the surrogate is escaped)


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**40, -(10**40)])
def test_integers_beyond_64_bits_are_written(number):
    encoded = fastjson.dumps({"n": number})
    assert isinstance(encoded, str)
    assert json.loads(encoded) == {"n": number}


def test_non_string_keys_are_written_as_json_writes_them():
    assert json.loads(fastjson.dumps({1: "a", None: "b"})) == {"1": "a", "null": "b"}


def test_nan_and_infinity_are_written_as_null():
    """orjson writes them as null (strict JSON, which a browser's JSON.parse
    takes) where the standard library would write NaN; either way no error."""
    assert fastjson.dumps([math.nan, math.inf, -math.inf]) == "[null,null,null]"


def test_what_no_json_can_hold_still_raises_type_error():
    with pytest.raises(TypeError):
        fastjson.dumps({"x": object()})
    with pytest.raises(TypeError):
        fastjson.dumps({"x": {1, 2}})


# --- what is not JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "{oops", "[1, 2", "data: {}", "{'single': 'quotes'}", '{"a": 1,}', "nan", "[1] [2]", b"\xff\xfe", b""],
)
def test_what_is_not_json_raises_value_error(text):
    with pytest.raises(ValueError):
        fastjson.loads(text)


def test_the_error_is_the_standard_librarys():
    with pytest.raises(json.JSONDecodeError):
        fastjson.loads("{oops")


# --- a property: whatever json can round-trip, fastjson can, both ways ---------------------------

# Any code point, lone surrogates included; integers and floats as orjson holds them.
texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=20)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_property_round_trip_agrees_with_the_standard_library(value):
    encoded = fastjson.dumps(value)
    assert isinstance(encoded, str)
    assert fastjson.loads(encoded) == value
    assert json.loads(encoded) == value
    assert fastjson.loads(json.dumps(value)) == value
