"""Chat's models, one module per concern; imported from here."""

from chat.models.actions import Action, ActionCall, ActionScheme
from chat.models.assistant import AssistantVersion
from chat.models.conversations import FINISH_REASONS, Conversation, Generation, ToolCall, Turn
from chat.models.support import Feedback, Handoff, Message, Search, SupportReport, UnansweredQuestion
from chat.models.visitors import DayBudget, RevokedKey

__all__ = [
    "FINISH_REASONS",
    "Action",
    "ActionCall",
    "ActionScheme",
    "AssistantVersion",
    "Conversation",
    "DayBudget",
    "Feedback",
    "Generation",
    "Handoff",
    "Message",
    "RevokedKey",
    "Search",
    "SupportReport",
    "ToolCall",
    "Turn",
    "UnansweredQuestion",
]
