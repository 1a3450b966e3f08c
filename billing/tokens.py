"""Characters and tokens: the default ratio, and what calibration learns a
model's ratios from. Django-free: the round loop estimates with them too."""

from __future__ import annotations

from typing import NamedTuple

# Without a tokenizer for every provider's model, a round cut short is
# estimated from its characters: ~4 per token (OpenAI's rule of thumb for
# English) until the model's own ratios are learnt (billing/calibration.py).
CHARS_PER_TOKEN = 4.0


class Sample(NamedTuple):
    """A whole round's characters next to the tokens the provider counted for
    them, framing left out: what calibration learns a model's ratios from."""

    prompt_chars: int
    prompt_tokens: int
    output_chars: int
    output_tokens: int
