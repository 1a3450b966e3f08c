"""Brazilian Portuguese beside English: every string a visitor or a staff
member reads has a translation, and the language follows the browser's
Accept-Language, on pages and on the chat's socket alike."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.utils import translation

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["manage.py", "kookee", "base", "chat", "billing", "helpcenter", "templates", "static", "locale"]
MAKEMESSAGES = ["manage.py", "makemessages", "-l", "pt_BR", "--add-location=file", "--no-obsolete"]
IGNORED = ["-i", "locale", "-i", "staticfiles"]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> dict[str, Path]:
    """The .po files as `make messages` would leave them now: the committed
    translations, plus every string the code, templates and scripts mark
    today. Made in a copy of the sources, so the checkout is not touched."""
    if shutil.which("xgettext") is None:
        pytest.fail("GNU gettext is needed (make gettext, or apt-get install gettext)")
    copy = tmp_path_factory.mktemp("sources")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
        else:
            shutil.copy(source, copy / name)
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "kookee.settings",
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "translations-test-" + "x" * 50,
        "DATABASE_URL": f"sqlite:///{copy}/db.sqlite3",
    }
    for domain in ("django", "djangojs"):
        subprocess.run(
            [sys.executable, *MAKEMESSAGES, "-d", domain, *IGNORED], cwd=copy, env=env, check=True, capture_output=True
        )
    folder = copy / "locale" / "pt_BR" / "LC_MESSAGES"
    return {domain: folder / f"{domain}.po" for domain in ("django", "djangojs")}


def msgids(output: str) -> list[str]:
    return [m for m in re.findall(r'^msgid "(.*)"$', output, re.MULTILINE) if m]


@pytest.mark.parametrize("domain", ["django", "djangojs"])
def test_every_string_has_a_portuguese_translation(extracted, domain):
    po = extracted[domain]
    untranslated = subprocess.run(["msgattrib", "--untranslated", str(po)], capture_output=True, text=True, check=True)
    fuzzy = subprocess.run(["msgattrib", "--only-fuzzy", str(po)], capture_output=True, text=True, check=True)
    assert msgids(untranslated.stdout) == [], f"untranslated in {domain}.po: run `make messages` and translate them"
    assert msgids(fuzzy.stdout) == [], f"fuzzy (unchecked) translations in {domain}.po"


@pytest.mark.parametrize("domain", ["django", "djangojs"])
def test_the_translations_keep_their_placeholders(extracted, domain):
    # msgfmt checks that %(name)s and friends match between msgid and msgstr.
    checked = subprocess.run(
        ["msgfmt", "--check-format", "-o", "/dev/null", str(extracted[domain])], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("domain", ["django", "djangojs"])
def test_the_committed_translations_are_built_from_their_po(tmp_path, domain):
    # `make run` reads the committed .mo (no gettext needed): each must be
    # what its .po compiles to.
    folder = ROOT / "locale" / "pt_BR" / "LC_MESSAGES"
    built = tmp_path / f"{domain}.mo"
    subprocess.run(["msgfmt", "-o", str(built), str(folder / f"{domain}.po")], check=True)
    assert (folder / f"{domain}.mo").read_bytes() == built.read_bytes(), "run make compilemessages"


def test_there_is_something_to_translate(extracted):
    # The extraction itself works: a string from each layer is in.
    django = extracted["django"].read_text()
    javascript = extracted["djangojs"].read_text()
    assert 'msgid "Talk to a person"' in django  # a template
    assert 'msgid "The assistant ran into an error. Please try again."' in django  # Python
    assert 'msgid "Searching the help center…"' in javascript  # the chat's script
    assert 'msgid "Help"' in javascript  # the widget's own


def test_the_widgets_words_are_the_catalogs():
    """static/chat/widget.js runs on the customer's page, where Django's
    catalog is not: it carries its few words, which must be the catalog's."""
    script = (ROOT / "static" / "chat" / "widget.js").read_text()
    english = dict(re.findall(r'(\w+): gettext_noop\("([^"]+)"\)', script))
    portuguese = dict(re.findall(r'(\w+): "([^"]+)"', script.split('"pt-br":')[1].split("}")[0]))
    assert english and english.keys() == portuguese.keys()
    catalog = translation.trans_real.DjangoTranslation("pt-br", domain="djangojs")
    assert {key: catalog.gettext(text) for key, text in english.items()} == portuguese


@pytest.mark.django_db
def test_the_chat_page_speaks_the_browsers_language():
    client = Client()
    portuguese = client.get("/", HTTP_ACCEPT_LANGUAGE="pt-BR,pt;q=0.9,en;q=0.5").content.decode()
    english = client.get("/", HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9").content.decode()
    assert '<html lang="pt-br">' in portuguese and "Falar com uma pessoa" in portuguese
    assert '<html lang="en">' in english and "Talk to a person" in english
    # Unknown languages get English.
    assert "Talk to a person" in client.get("/", HTTP_ACCEPT_LANGUAGE="de-DE").content.decode()


@pytest.mark.django_db
def test_the_scripts_catalog_follows_the_browser():
    catalog = Client().get("/jsi18n/", HTTP_ACCEPT_LANGUAGE="pt-BR").content.decode()
    assert "Procurando na central de ajuda" in catalog
