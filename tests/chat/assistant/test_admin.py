"""The Assistant page (chat/admin/assistant.py), Support's: the draft's form,
Save draft and Publish, what the draft changes, the versions and Restore,
the guidance's length and cost rendered by the server; who may open it; and
Finance's one line on the ledger, what the live guidance costs."""

import re
from html import unescape

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from billing.models import Calibration
from chat.assistant import versions
from chat.models import AssistantVersion
from chat.roles import ensure_roles

pytestmark = pytest.mark.django_db

PAGE = "/admin/chat/assistantversion/"
LEDGER = "/admin/billing/ledgerentry/"
GUIDANCE = "Call paid plans memberships.\nNever promise a refund: offer a person."
SECRET = "SECRET-GUIDANCE-WORDING "


def login(django_user_model, role: str | None, username: str | None = None) -> tuple[Client, object]:
    ensure_roles()
    user = django_user_model.objects.create_user(username=username or (role or "nobody").lower(), is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def support(django_user_model):
    return login(django_user_model, "Support", "sam")


@pytest.fixture
def finance(django_user_model):
    return login(django_user_model, "Finance", "fay")[0]


def form(do: str = "save", **values) -> dict:
    """The form as the page posts it, by its Save draft or its Publish button."""
    empty = {name: "" for name in versions.FIELDS}
    return {**empty, f"_{do}": "the button's label", **values}


def text_of(response) -> str:
    """The page's words, as a reader sees them (tags out, entities read)."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", response.content.decode())))


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


# --- Save draft --------------------------------------------------------------------------------


def test_support_saves_a_draft(support):
    client, sam = support
    page = client.get(PAGE)
    assert page.status_code == 200
    assert 'name="guidance"' in page.content.decode() and "Save draft" in page.content.decode()

    response = client.post(
        PAGE,
        form(guidance=GUIDANCE, name_en="Ana", starters_en="How do I cancel?\r\n\r\nWhere is my order?\r\n"),
        follow=True,
    )

    assert response.redirect_chain == [(PAGE, 302)]
    assert messages_of(response) == ["Draft saved."]
    version = AssistantVersion.objects.get()
    assert (version.created_by, version.created_by_name) == (sam, "sam")
    assert (version.guidance, version.name_en) == (GUIDANCE, "Ana")
    assert version.starters_en == ["How do I cancel?", "Where is my order?"]
    assert versions.draft() == version and versions.live().guidance == ""  # a draft, not live
    # The page now shows the draft.
    assert GUIDANCE in unescape(response.content.decode())
    assert f"The form shows the draft, version #{version.pk}" in text_of(response)


def test_saving_the_same_values_again_makes_no_version(support):
    client, _sam = support
    client.post(PAGE, form(guidance=GUIDANCE), follow=True)  # its message read
    response = client.post(PAGE, form(guidance=GUIDANCE), follow=True)
    assert messages_of(response) == ["Nothing changed: nothing was saved."]
    assert AssistantVersion.objects.count() == 1


@pytest.mark.parametrize(
    ("values", "field", "error"),
    [
        ({"guidance": "x" * 4001}, "guidance", "The guidance is limited to 4000 characters (it has 4001)."),
        ({"starters_en": "1?\n2?\n3?\n4?\n5?"}, "starters_en", "At most 4 starter questions."),
        ({"starters_pt_br": "x" * 121}, "starters_pt_br", "A starter question is at most 120 characters."),
        ({"name_en": "n" * 61}, "name_en", "Ensure this value has at most 60 characters (it has 61)."),
    ],
    ids=["guidance over the cap", "five starters", "a long starter", "a long name"],
)
def test_errors_change_nothing(support, values, field, error):
    client, sam = support
    published = versions.publish(versions.save_draft({"guidance": "Be brief."}, sam), sam)

    for do in ("save", "publish"):
        response = client.post(PAGE, form(do, **{"guidance": "Be warm.", **values}))

        assert response.status_code == 200  # the form again, with its errors
        assert response.context["form"].errors[field] == [error]
        assert "Nothing was saved: see the fields below." in text_of(response)
        assert list(AssistantVersion.objects.all()) == [published]
        assert versions.live().guidance == "Be brief."
        # What was typed is kept, to be corrected.
        assert response.context["form"]["guidance"].value() == values.get("guidance", "Be warm.")


# --- Publish -----------------------------------------------------------------------------------


def test_publish_saves_the_form_as_a_draft_and_makes_it_live(support):
    client, sam = support
    response = client.post(PAGE, form(guidance=GUIDANCE, greeting_en="Hi!", do="publish"), follow=True)

    assert messages_of(response) == ["Published: visitors meet it from their next message."]
    version = AssistantVersion.objects.get()
    assert versions.live().guidance == GUIDANCE and versions.live().version_id == version.pk
    assert versions.live().face("en").greeting == "Hi!"
    assert (version.created_by, version.published_by_name) == (sam, "sam")
    assert versions.draft() is None


def test_publish_of_an_unchanged_draft_publishes_that_draft(support):
    client, sam = support
    draft = versions.save_draft({"guidance": GUIDANCE}, sam)
    client.post(PAGE, form(guidance=GUIDANCE, do="publish"))
    assert list(AssistantVersion.objects.all()) == [draft]
    assert versions.live_version() == draft


def test_publish_makes_what_the_form_holds_live_not_the_draft_before_it(support):
    client, sam = support
    earlier = versions.save_draft({"guidance": "An earlier draft."}, sam)
    client.post(PAGE, form("publish", guidance=GUIDANCE))
    live = versions.live_version()
    assert live.pk != earlier.pk and live.guidance == GUIDANCE
    assert AssistantVersion.objects.get(pk=earlier.pk).published_at is None


def test_publishing_what_is_live_already_changes_nothing(support):
    client, sam = support
    live = versions.publish(versions.save_draft({"guidance": GUIDANCE}, sam), sam)
    response = client.post(PAGE, form(guidance=GUIDANCE, do="publish"), follow=True)
    assert messages_of(response) == ["Nothing to publish: visitors meet this version already."]
    assert AssistantVersion.objects.get().published_at == live.published_at


# --- what the draft changes, the versions, Restore -------------------------------------------


def test_the_changes_since_the_published_version(support):
    client, sam = support
    assert client.get(PAGE).context["changes"] is None  # no draft: no table
    versions.publish(versions.save_draft({"guidance": "Old rule.", "name_en": "Ana"}, sam), sam)
    assert client.get(PAGE).context["changes"] is None
    versions.save_draft({"guidance": "New rule.", "name_en": "Ana", "starters_pt_br": ["Oi?", "Tudo bem?"]}, sam)

    page = client.get(PAGE)

    assert page.context["changes"] == [
        ("Guidance", "Old rule.", "New rule."),
        ("Starter questions (Brazilian Portuguese)", "", "Oi?\nTudo bem?"),
    ]
    table = page.content.decode().split('id="kk-changes"')[1].split("</table>")[0]
    assert "Old rule." in table and "New rule." in table and "Oi?<br>Tudo bem?" in table
    assert "Name (English)" not in table  # unchanged
    # The form shows the draft, not what is live.
    assert page.context["form"]["guidance"].value() == "New rule."


def test_the_versions_list(support, django_user_model):
    client, sam = support
    first = versions.publish(versions.save_draft({"guidance": "One."}, sam), sam)
    second = versions.publish(versions.save_draft({"guidance": "Two."}, "manage.py set_guidance"), "ops")
    restored = versions.restore(first, sam)

    page = client.get(PAGE)
    rows = {
        int(number): text
        for number, text in re.findall(r'<tr id="kk-version-(\d+)">(.*?)</tr>', page.content.decode(), re.S)
    }

    assert list(rows) == [restored.pk, second.pk, first.pk]  # newest first
    words = {pk: re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", row))).strip() for pk, row in rows.items()}
    assert words[restored.pk].startswith(f"#{restored.pk} ") and "sam draft" in words[restored.pk]
    assert f"#{first.pk}" in words[restored.pk].split("draft")[1]  # restored from #1
    assert "manage.py set_guidance" in words[second.pk] and "by ops live" in words[second.pk]
    assert "by sam" in words[first.pk] and "live" not in words[first.pk]
    # Restore on each but the draft the form shows.
    assert "/restore/" not in rows[restored.pk]
    assert f"/admin/chat/assistantversion/{second.pk}/restore/" in rows[second.pk]
    assert f"Restore version #{first.pk}" in rows[first.pk]


def test_the_list_shows_twenty_a_page(support):
    client, sam = support
    for number in range(23):
        versions.save_draft({"guidance": f"Rule {number}."}, sam)
    newest = list(AssistantVersion.objects.values_list("pk", flat=True))

    def listed(page) -> list[int]:
        return [int(pk) for pk in re.findall(r'<tr id="kk-version-(\d+)">', page.content.decode())]

    first = client.get(PAGE)
    assert listed(first) == newest[:20]
    assert "23 assistant versions" in text_of(first) and 'href="?p=2"' in first.content.decode()
    second = client.get(PAGE, {"p": "2"})
    assert listed(second) == newest[20:]
    assert second.context["form"]["guidance"].value() == "Rule 22."  # the draft, on every page
    assert client.get(PAGE, {"p": "9"})["Location"] == PAGE  # past the last: the first
    # As every list: a parameter the page does not offer is refused.
    assert client.get(PAGE, {"guidance__startswith": "R"}).status_code == 400


def test_restore_makes_an_old_version_the_draft(support):
    client, sam = support
    old = versions.publish(versions.save_draft({"guidance": "Old words.", "name_en": "Ana"}, sam), sam)
    versions.publish(versions.save_draft({"guidance": "New words."}, sam), sam)

    response = client.post(f"{PAGE}{old.pk}/restore/", follow=True)

    assert messages_of(response) == [f"Version #{old.pk} is back as the draft: publish it to make it live."]
    draft = versions.draft()
    assert (draft.guidance, draft.name_en, draft.restored_from, draft.created_by) == ("Old words.", "Ana", old, sam)
    assert versions.live().guidance == "New words."  # until published
    assert response.context["form"]["guidance"].value() == "Old words."
    # The draft itself is not restored again.
    again = client.post(f"{PAGE}{draft.pk}/restore/", follow=True)
    assert messages_of(again) == [f"Version #{draft.pk} is the draft already."]
    assert AssistantVersion.objects.count() == 3


def test_restore_is_a_post(support):
    client, sam = support
    old = versions.save_draft({"guidance": "Old words."}, sam)
    versions.save_draft({"guidance": "New words."}, sam)
    assert client.get(f"{PAGE}{old.pk}/restore/").status_code == 405
    assert client.post(f"{PAGE}999/restore/").status_code == 404
    assert AssistantVersion.objects.count() == 2


# --- the guidance's length and cost, rendered by the server ---------------------------------


def test_the_count_and_cost_are_rendered_on_load(support):
    client, sam = support
    versions.save_draft({"guidance": "x" * 1234}, sam)

    page = client.get(PAGE)

    words = text_of(page)
    assert "1,234 / 4,000 characters" in words
    assert "≈ 309 input tokens per model call (a help question makes two)" in words  # 1234 / 4
    html = page.content.decode()
    assert 'data-chars-per-token="4.0"' in html and 'data-limit="4000"' in html
    assert 'src="/static/chat/assistant_admin.js"' in html and "<script>" not in html  # no inline script


def test_the_cost_uses_the_models_learnt_ratio(support, settings):
    client, sam = support
    Calibration.objects.create(model=settings.OPENAI_MODEL, input_chars_per_token=2.5, input_samples=30)
    versions.save_draft({"guidance": "x" * 1234}, sam)

    page = client.get(PAGE)

    assert "≈ 494 input tokens per model call" in text_of(page)  # ceil(1234 / 2.5)
    assert 'data-chars-per-token="2.5"' in page.content.decode()


def test_the_figures_follow_what_was_typed_and_the_cap(support, settings):
    client, _sam = support
    settings.KOOKEE_GUIDANCE_CHARS = 10
    response = client.post(PAGE, form(guidance="y" * 11))
    words = text_of(response)
    assert "11 / 10 characters: too long to save" in words
    assert "≈ 3 input tokens per model call" in words
    empty = text_of(client.get(PAGE))
    assert "0 / 10 characters" in empty and "No guidance: it adds nothing to model calls." in empty


def test_the_page_in_portuguese_keeps_the_ratio_a_number(support):
    client, sam = support
    Calibration.objects.create(model="gpt-4o-mini", input_chars_per_token=3.5, input_samples=30)
    versions.save_draft({"guidance": "x" * 1234}, sam)
    html = client.get(PAGE, headers={"accept-language": "pt-BR"}).content.decode()
    assert 'lang="pt-br"' in html
    assert 'data-chars-per-token="3.5"' in html  # not 3,5: the script parses it
    assert 'data-thousands="."' in html


# --- who may open it ---------------------------------------------------------------------------


def test_finance_may_not_open_it(finance):
    versions.save_draft({"guidance": SECRET}, "test")
    draft = versions.draft()
    for response in (
        finance.get(PAGE),
        finance.post(PAGE, form(guidance="Finance's words.")),
        finance.post(f"{PAGE}{draft.pk}/restore/"),
    ):
        assert response.status_code == 403
        assert SECRET not in response.content.decode()
    assert list(AssistantVersion.objects.all()) == [draft]
    assert "/admin/chat/" not in finance.get("/admin/").content.decode()


def test_anonymous_visitors_are_sent_to_log_in(client):
    for response in (client.get(PAGE), client.post(PAGE, form(guidance="x")), client.post(f"{PAGE}1/restore/")):
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert AssistantVersion.objects.count() == 0


def test_superusers_may_edit_it(admin_client, admin_user):
    assert admin_client.get(PAGE).status_code == 200
    admin_client.post(PAGE, form(guidance=GUIDANCE, do="publish"))
    assert versions.live().guidance == GUIDANCE
    assert AssistantVersion.objects.get().created_by == admin_user


def test_the_view_permission_alone_reads_it_and_changes_nothing(django_user_model):
    client, user = login(django_user_model, None, "reader")
    user.user_permissions.add(Permission.objects.get(codename="view_assistantversion"))
    old = versions.save_draft({"guidance": "Old words."}, "test")
    versions.save_draft({"guidance": GUIDANCE}, "test")

    page = client.get(PAGE)

    assert page.status_code == 200
    assert page.context["form"]["guidance"].value() == GUIDANCE
    assert "Save draft" not in page.content.decode() and "/restore/" not in page.content.decode()
    assert 'name="guidance" cols="40" rows="14" class="vLargeTextField"' in page.content.decode()
    assert "disabled" in page.content.decode().split('name="guidance"')[1].split(">")[0]
    assert client.post(PAGE, form(guidance="Mine.")).status_code == 403
    assert client.post(f"{PAGE}{old.pk}/restore/").status_code == 403
    assert AssistantVersion.objects.count() == 2


def test_the_page_is_the_models_only_one(support):
    client, sam = support
    version = versions.save_draft({"guidance": GUIDANCE}, sam)
    for url in (f"{PAGE}add/", f"{PAGE}{version.pk}/change/", f"{PAGE}{version.pk}/delete/"):
        assert client.get(url).status_code == 404, url


# --- Finance's readout on the ledger --------------------------------------------------------


def test_finance_reads_what_the_live_guidance_costs_and_never_its_words(finance):
    versions.publish(versions.save_draft({"guidance": SECRET * 50}, "test"), "test")  # 1,200 characters
    versions.save_draft({"guidance": "A draft's words, not live yet."}, "test")

    page = finance.get(LEDGER)

    assert page.status_code == 200
    assert "The team's guidance adds ≈ 300 input tokens to every model call." in text_of(page)
    assert "SECRET" not in page.content.decode() and "draft's words" not in page.content.decode()


def test_finance_reads_that_there_is_no_guidance(finance):
    versions.save_draft({"guidance": "A draft's words, not live yet."}, "test")
    page = finance.get(LEDGER)
    assert "The assistant has no team guidance." in text_of(page)
    assert "guidance adds" not in text_of(page) and "draft's words" not in page.content.decode()


def test_the_readout_uses_the_models_learnt_ratio(finance, settings):
    Calibration.objects.create(model=settings.OPENAI_MODEL, input_chars_per_token=2.0, input_samples=30)
    versions.publish(versions.save_draft({"guidance": "x" * 1001}, "test"), "test")
    assert "adds ≈ 501 input tokens to every model call." in text_of(finance.get(LEDGER))
