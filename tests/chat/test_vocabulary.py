"""The product's words are defined once (chat/vocabulary.py): the models,
the error catalogue and the metrics read them there."""

from chat import errors, vocabulary
from chat.models import Turn
from chat.ops import metrics


def test_every_error_code_has_its_message_or_comes_with_one():
    # The consumer explains a frame it could not read itself; every other
    # code reads from the catalogue, in the visitor's language.
    assert set(errors.MESSAGES) == set(vocabulary.Code) - vocabulary.FRAME_CODES
    assert all(errors.message(code) for code in errors.MESSAGES)


def test_the_turn_model_takes_its_statuses_and_reasons_from_the_vocabulary():
    assert set(Turn.Status.values) == set(vocabulary.Status)
    assert set(Turn.StopReason.values) == set(vocabulary.StopReason)
    assert vocabulary.ENDINGS == set(vocabulary.Status) - {vocabulary.Status.STREAMING}


def test_the_words_are_plain_strings_wherever_they_go():
    assert vocabulary.Code.BUSY == "busy" and f"{vocabulary.Code.BUSY}" == "busy"
    assert vocabulary.PROVIDER_FAULTS < set(vocabulary.Code)
    assert metrics.PROVIDER_FAULTS is vocabulary.PROVIDER_FAULTS
