"""The chat in Brazilian Portuguese, for a browser that asks for it
(Accept-Language: pt-BR): the page, the script's words, the server's
messages, the offline model's greeting, the widget's bubble."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.test_widget import customer_sites, kookee  # noqa: F401 (fixtures)


@pytest.fixture
def portuguese(browser):
    context = browser.new_context(locale="pt-BR", viewport={"width": 1024, "height": 760})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page
    context.close()
    assert errors == []


def test_the_chat_page_speaks_portuguese(offline_app, portuguese):
    page = portuguese
    page.goto(offline_app.url)
    expect(page.locator("html")).to_have_attribute("lang", "pt-br")
    expect(page.get_by_role("heading", name="Ajuda da Kookee")).to_be_visible()
    send = page.get_by_role("button", name="Enviar sua pergunta")
    expect(send).to_be_enabled()
    expect(page.get_by_role("button", name="Falar com uma pessoa")).to_be_visible()

    page.get_by_role("textbox", name="Sua pergunta").fill("Oi!")
    page.get_by_role("textbox", name="Sua pergunta").press("Enter")
    answer = page.locator(".message--assistant").last
    expect(answer).to_have_attribute("data-status", "completed")
    # The offline model answers a Portuguese greeting in Portuguese; the
    # page's own words are the catalog's.
    expect(answer.locator(".message__text")).to_contain_text("Olá! Sou o assistente")
    expect(answer).to_contain_text("Isso ajudou?")
    answer.get_by_role("button", name="Não ajudou").click()
    expect(answer.locator(".message__rating-status")).to_have_text("Obrigado por nos contar.")


def test_the_servers_messages_are_portuguese_too(offline_app, portuguese):
    page = portuguese
    page.goto(offline_app.url)
    expect(page.get_by_role("button", name="Falar com uma pessoa")).to_be_enabled()
    page.get_by_role("button", name="Falar com uma pessoa").click()
    dialog = page.get_by_role("dialog", name="Falar com uma pessoa")
    page.evaluate("document.getElementById('ask-person-form').noValidate = true")
    dialog.locator("#ask-person-email").fill("errado@")
    dialog.get_by_role("button", name="Chamar uma pessoa").click()
    expect(dialog.locator("#ask-person-error")).to_have_text("Esse endereço de e-mail não é válido.")


def test_the_widget_bubble_speaks_portuguese(kookee, customer_sites, portuguese):  # noqa: F811
    page = portuguese
    page.goto(customer_sites[0])
    page.get_by_role("button", name="Ajuda", exact=True).click()
    frame = page.frame_locator("iframe[title='Chat de ajuda da Kookee']")
    expect(frame.get_by_role("button", name="Falar com uma pessoa")).to_be_visible()
    # Connected (the server has answered its history) before the test ends.
    expect(frame.get_by_role("button", name="Falar com uma pessoa")).to_be_enabled()
    expect(frame.get_by_role("button", name="Enviar sua pergunta")).to_be_enabled()


def test_the_widget_says_in_portuguese_that_it_may_not_show_here(kookee, customer_sites, portuguese):  # noqa: F811
    page = portuguese
    page.goto(customer_sites[1])  # not allowed to embed it
    page.get_by_role("button", name="Ajuda", exact=True).click()
    notice = page.locator("#kookee-chat .notice")
    expect(notice).to_contain_text("O chat de ajuda não está disponível neste site.")
    expect(notice).to_contain_text("KOOKEE_EMBED_ORIGINS")
