"""Property: however a provider fragments and interleaves real tool calls,
the assembler rebuilds exactly those calls, in the order they started."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from chat.engine.assembler import ToolCallAssembler

arguments = st.dictionaries(
    st.text(min_size=1, max_size=8), st.one_of(st.text(max_size=20), st.integers(), st.booleans()), max_size=4
).map(json.dumps)
calls = st.lists(
    st.tuples(st.sampled_from(["search_help_center", "lookup", "ping"]), arguments), min_size=1, max_size=4
)


@st.composite
def streams(draw):
    """Real calls, each cut into pieces, interleaved, in one of several styles."""
    wanted = draw(calls)
    first_index = draw(st.integers(min_value=0, max_value=3))
    style = draw(st.sampled_from(["openai", "repeat_id_name", "empty_strings", "no_index"]))
    queues = []
    for number, (name, args) in enumerate(wanted):
        cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=5)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        call_id = f"call_{number}"
        fragments = []
        for position, piece in enumerate(pieces):
            fragment = {"function": {"arguments": piece}}
            if style != "no_index":
                fragment["index"] = first_index + number
            if position == 0 or style in ("repeat_id_name", "no_index"):
                fragment["id"] = call_id
                fragment["function"]["name"] = name
            elif style == "empty_strings":
                fragment["id"] = ""
                fragment["function"]["name"] = ""
            fragments.append(fragment)
        queues.append(fragments)
    # Interleave: every call's first fragment comes in call order; the rest anywhere after.
    order = []
    pending = [list(q) for q in queues]
    started = 0
    while any(pending):
        choices = [i for i in range(started) if pending[i]]
        if started < len(pending):
            choices.append(started)
        pick = draw(st.sampled_from(choices))
        if pick == started:
            started += 1
        order.append(pending[pick].pop(0))
    return wanted, order


@settings(max_examples=300, deadline=None)
@given(streams())
def test_assembler_rebuilds_any_fragmentation(case):
    wanted, fragments = case
    assembler = ToolCallAssembler()
    for fragment in fragments:
        assembler.add(fragment)
    rebuilt = [(c.call_id, c.name, json.loads(c.arguments)) for c in assembler.calls]
    assert rebuilt == [(f"call_{n}", name, json.loads(args)) for n, (name, args) in enumerate(wanted)]
