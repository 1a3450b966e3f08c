"""Each model's characters per token, learnt from what the provider reported.

A round cut short (a Stop, a reload that ran out of grace, a lost process)
never gets the provider's usage, so it is estimated from its characters. A
fixed 4 characters per token fits English on OpenAI's tokenizers and is
15-30% off for Portuguese, for code, or for Llama's and Claude's tokenizers.
So every whole round that reported usage is a sample: its characters next
to the tokens counted for them, prompt and output apart. A model's ratio is
a moving average of its samples, kept within sane bounds.

Estimates read the ratios from memory, never the database (they are made in
async code, per round). Samples are applied here at once and queued; the
queue is merged into the model's `Calibration` row every FLUSH_SECONDS, so
every process learns from every other, and a process reloads a model's row
when it starts a turn for it, at most every RELOAD_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from django.db import transaction

from billing.models import Calibration
from billing.tokens import CHARS_PER_TOKEN, Sample

logger = logging.getLogger("kookee.billing")

# Below this many samples the default holds: one odd round decides nothing.
MIN_SAMPLES = 2
# Every tokenizer in use lies between these: CJK text nears 1 character per
# token, code and English 3-5. A sample outside them is clamped, not trusted.
BOUNDS = (0.8, 8.0)
# Prompts below this many tokens, or outputs, are mostly framing: skipped.
MIN_TOKENS = 16
# The average's memory: the mean of the first WINDOW samples, then each new
# one weighs 1/WINDOW (an exponential moving average).
WINDOW = 20
FLUSH_SECONDS = 10.0
RELOAD_SECONDS = 60.0
MAX_QUEUED = 1000  # per model, should the database be away for long


@dataclass
class Ratio:
    chars_per_token: float = CHARS_PER_TOKEN
    samples: int = 0

    def add(self, chars: int, tokens: int) -> None:
        if tokens < MIN_TOKENS or chars <= 0:
            return
        value = min(max(chars / tokens, BOUNDS[0]), BOUNDS[1])
        self.samples += 1
        self.chars_per_token += (value - self.chars_per_token) / min(self.samples, WINDOW)

    @property
    def in_use(self) -> float:
        """The ratio estimates use: the default until there are enough samples."""
        return self.chars_per_token if self.samples >= MIN_SAMPLES else CHARS_PER_TOKEN


@dataclass
class _Model:
    input: Ratio = field(default_factory=Ratio)
    output: Ratio = field(default_factory=Ratio)
    loaded_at: float | None = None
    queued: list[Sample] = field(default_factory=list)
    version: int = 0  # bumped whenever a row is taken in

    def add(self, sample: Sample) -> None:
        self.input.add(sample.prompt_chars, sample.prompt_tokens)
        self.output.add(sample.output_chars, sample.output_tokens)


_models: dict[str, _Model] = {}
# Estimates and samples come from the event loop; loads and flushes from the
# database thread.
_lock = threading.Lock()
_flushed_at = time.monotonic()


def ratios(model: str) -> tuple[float, float]:
    """Characters per token for the model's prompts and output. Memory only."""
    with _lock:
        state = _models.get(model)
        if state is None:
            return CHARS_PER_TOKEN, CHARS_PER_TOKEN
        return state.input.in_use, state.output.in_use


def observe(model: str, prompt_chars: int, prompt_tokens: int, output_chars: int, output_tokens: int) -> None:
    """Learns from a whole round (its characters and the tokens the provider
    counted for them, framing left out): here at once, in the database at
    the next flush."""
    sample = Sample(prompt_chars, prompt_tokens, output_chars, output_tokens)
    with _lock:
        state = _models.setdefault(model, _Model())
        state.add(sample)
        if len(state.queued) < MAX_QUEUED:
            state.queued.append(sample)


def load(model: str) -> None:
    """Reads the model's row, unless read in the last RELOAD_SECONDS. Sync."""
    with _lock:
        state = _models.setdefault(model, _Model())
        if state.loaded_at is not None and time.monotonic() - state.loaded_at < RELOAD_SECONDS:
            return
        version = state.version
    row = Calibration.objects.filter(model=model).first()
    with _lock:
        state.loaded_at = time.monotonic()
        if row is not None and state.version == version:  # else a flush took in a newer row meanwhile
            _take(state, row)
            for sample in state.queued:  # learnt here, not in the row yet
                state.add(sample)


def flush_due() -> bool:
    return time.monotonic() - _flushed_at >= FLUSH_SECONDS and any(s.queued for s in list(_models.values()))


def flush() -> None:
    """Merges the queued samples into each model's row, one short transaction
    per model. Sync. A sample that could not be written stays queued."""
    global _flushed_at
    _flushed_at = time.monotonic()
    with _lock:
        work = {model: state.queued for model, state in _models.items() if state.queued}
        for state in _models.values():
            state.queued = []
    for model, samples in work.items():
        try:
            row = _merge(model, samples)
        except Exception:
            logger.exception("calibration of model=%s not saved", model)
            with _lock:
                state = _models.setdefault(model, _Model())
                state.queued = (samples + state.queued)[:MAX_QUEUED]
            continue
        with _lock:
            state = _models.setdefault(model, _Model())
            _take(state, row)
            # Samples that came in meanwhile are in memory but not in the row.
            for sample in state.queued:
                state.add(sample)
            state.loaded_at = time.monotonic()


def _merge(model: str, samples: list[Sample]) -> Calibration:
    Calibration.objects.get_or_create(model=model)
    with transaction.atomic():
        # Locked: two processes merging at once must not lose each other's samples.
        row = Calibration.objects.select_for_update().get(model=model)
        state = _Model()
        _take(state, row)
        for sample in samples:
            state.add(sample)
        row.input_chars_per_token, row.input_samples = state.input.chars_per_token, state.input.samples
        row.output_chars_per_token, row.output_samples = state.output.chars_per_token, state.output.samples
        row.save()
    return row


def _take(state: _Model, row: Calibration) -> None:
    state.input = Ratio(row.input_chars_per_token, row.input_samples)
    state.output = Ratio(row.output_chars_per_token, row.output_samples)
    state.version += 1


def forget() -> None:
    """Drops what this process learnt and queued (tests)."""
    with _lock:
        _models.clear()
