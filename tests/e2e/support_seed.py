"""A week of a help center's support data, for the admin's pages in Chromium
(tests/e2e/test_admin_pages.py) and their screenshots: run in the served
app's database with `manage.py shell -c "import tests.e2e.support_seed as s; s.seed()"`."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from billing.services import bill_once
from chat.models import Conversation, Feedback, Generation, Handoff, Message, Search, ToolCall, Turn
from chat.roles import ensure_roles
from helpcenter import search

# (question, answer, status, rating, comment, searched for, matched, handoff)
TURNS = [
    (
        "How do I install the feedback widget on my website?",
        "Paste the snippet before `</body>`: see "
        "[Installing the feedback widget on your website](/help/install-feedback-widget/).",
        "completed",
        "up",
        "",
        "install feedback widget",
        True,
        None,
    ),
    (
        "Can I pay with bitcoin?",
        "The help center doesn't cover that, as far as I can find.",
        "completed",
        "down",
        "I just want to know which cards you take.",
        "pay with bitcoin",
        False,
        ("assistant", "Payment by bitcoin"),
    ),
    (
        "can i pay in bitcoins or other crypto?",
        "The help center doesn't cover that.",
        "completed",
        None,
        "",
        "pay in bitcoins",
        False,
        None,
    ),
    (
        "Is Kookee HIPAA compliant? We are a clinic and need a BAA before we can sign up for the Business plan.",
        "The help center doesn't cover HIPAA.",
        "completed",
        "down",
        "",
        "HIPAA compliant",
        False,
        ("visitor", "We need a BAA signed this week."),
    ),
    (
        "How do I export all my posts and votes as CSV?",
        "Go to **Settings → Export**: see [Exporting your data](/help/export-your-data/).",
        "completed",
        "up",
        "",
        "export posts votes CSV",
        True,
        None,
    ),
    (
        "What happens to my bill if I downgrade mid-month?",
        "You get a prorated credit",
        "interrupted",
        None,
        "",
        "downgrade proration",
        True,
        None,
    ),
    ("Do you have a desktop app for Windows?", "", "failed", None, "", "desktop app windows", False, ("visitor", "")),
    ("hi", "Hi! I'm Kookee's help-center assistant.", "completed", "up", "", None, None, None),
]
SOURCES = ["", "https://www.acme-store.example/pricing", "https://app.acme.example/settings/billing"]


def seed() -> None:
    ensure_roles()
    users = get_user_model().objects
    if not users.filter(username="root").exists():
        users.create_superuser("root", "root@example.com", "kookee-admin")
        support = users.create_user("sam", "sam@example.com", "kookee-support", is_staff=True)
        support.groups.add(Group.objects.get(name="Support"))
    now = timezone.now()
    for number, (question, answer, status, rating, comment, query, matched, handoff) in enumerate(TURNS):
        started = now - timedelta(days=number % 6, hours=number, seconds=17 * number)
        conversation = Conversation.objects.create(visitor_hash=f"seed{number}", source_url=SOURCES[number % 3])
        turn = Turn.objects.create(
            conversation=conversation,
            user_text=question,
            assistant_text=answer,
            status=status,
            interrupted=status == "interrupted",
            stop_reason="stopped" if status == "interrupted" else "",
            error="provider_unavailable" if status == "failed" else "",
            model="gpt-4o-mini",
            ended_at=started + timedelta(seconds=4),
        )
        Turn.objects.filter(pk=turn.pk).update(started_at=started)
        rounds = 2 if query else 1
        for round_number in range(1, rounds + 1):
            begun = started + timedelta(milliseconds=50 + 1500 * (round_number - 1))
            generation = Generation.objects.create(
                turn=turn,
                round=round_number,
                finish_reason="tool_calls" if round_number < rounds else ("stop" if status == "completed" else ""),
                input_tokens=900 + 150 * round_number,
                output_tokens=40 * round_number,
                started_at=begun,
                first_delta_at=begun + timedelta(milliseconds=380 + 40 * number),
                ended_at=begun + timedelta(seconds=1),
            )
            if query and round_number == 1:
                result = (
                    {"articles": [], "no_good_match": True, "top_score": 0.41}
                    if not matched
                    else {
                        "articles": [{"id": 1, "title": "An article", "url": "/help/an-article/", "score": 2.1}],
                        "top_score": 2.1,
                    }
                )
                ToolCall.objects.create(
                    generation=generation,
                    call_id=f"call_{number}",
                    name="search_help_center",
                    arguments=json.dumps({"query": query}),
                    result=json.dumps(result),
                )
                Search.objects.create(
                    turn=turn,
                    query=query,
                    terms=search.normalised(query),
                    top_score=result["top_score"],
                    matched=matched,
                    article_ids=[1] if matched else [],
                    cited=matched,
                    created_at=started,
                )
        bill_once(turn.id, model="gpt-4o-mini", input_tokens=1000 * rounds, output_tokens=60, estimated=False)
        if rating:
            Feedback.objects.create(turn=turn, rating=rating, comment=comment)
        if handoff:
            source, reason = handoff
            request = Handoff.objects.create(
                conversation=conversation,
                turn=turn,
                source=source,
                reason=reason,
                email="ana@example.com" if source == "visitor" else "",
                status="open" if number % 2 else "claimed",
                claimed_by=None if number % 2 else users.get(username="sam"),
                agent_name="" if number % 2 else "Sam Reyes",
                created_at=started + timedelta(seconds=30),
                email_status="sent",
            )
            if request.status == "claimed":
                # Sam answered in the conversation; the visitor wrote back; a note for the team.
                for minutes, kind, text in (
                    (4, "agent", "Hi, I'm Sam from Support. I've read the conversation: let me look into it."),
                    (6, "visitor", "Thank you! Will I get an email when it's done?"),
                    (7, "note", "Asked billing to check the account first."),
                ):
                    Message.objects.create(
                        conversation=conversation,
                        handoff=request,
                        kind=kind,
                        text=text,
                        author="Sam Reyes" if kind != "visitor" else "",
                        created_at=started + timedelta(minutes=minutes),
                        seen_at=started + timedelta(minutes=minutes) if kind == "agent" else None,
                    )
