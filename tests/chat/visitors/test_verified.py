"""A verified visitor (chat/visitors/verified.py): a token the customer's
backend signed (an HS256 JWT with KOOKEE_IDENTITY_SECRET) proves a Person;
anything else proves nothing. Tokens are signed here with PyJWT, as a
customer's backend would, or crafted byte by byte where PyJWT would not
make them (NaN, another algorithm's header over our HMAC)."""

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest

from chat.visitors.verified import CLAIM_CHARS, TOKEN_CHARS, BadIdentity, Person, verify

SECRET = "a-test-identity-secret-" + "s" * 41  # 64 bytes: long enough for HS512 too
DAY = 86_400


@pytest.fixture(autouse=True)
def identity_settings(settings):
    settings.KOOKEE_IDENTITY_SECRET = SECRET
    settings.KOOKEE_IDENTITY_MAX_AGE_SECONDS = DAY


def in_an_hour() -> int:
    return int(time.time()) + 3600


def sign(claims: dict, secret: str = SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode(claims, secret, algorithm=algorithm)


def token(**claims) -> str:
    """A token for person 42, expiring in an hour, with these claims changed
    (a claim given as None is left out)."""
    made = {"sub": "42", "exp": in_an_hour(), **claims}
    return sign({name: value for name, value in made.items() if value is not None})


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def crafted(payload: str, header: str = '{"alg":"HS256","typ":"JWT"}', secret: str = SECRET) -> str:
    """A token built by hand: these exact JSON texts, signed with HMAC-SHA256."""
    signing_input = f"{b64url(header.encode())}.{b64url(payload.encode())}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def refused(value) -> str:
    """Why the token proves nothing (for the log); never the token itself."""
    with pytest.raises(BadIdentity) as bad:
        verify(value)
    if isinstance(value, str) and value:
        assert value not in str(bad.value)
    return str(bad.value)


# --- what a good token proves -------------------------------------------------------------------


def test_a_good_token_proves_a_person():
    person = verify(
        token(
            sub="user-42",
            name="Ana Souza",
            email="ana@example.com",
            attributes={"plan": "pro", "seats": 5, "ratio": 0.5, "trial": False, "team": None},
        )
    )

    assert person == Person(
        id="user-42",
        name="Ana Souza",
        email="ana@example.com",
        attributes=(("plan", "pro"), ("ratio", 0.5), ("seats", 5), ("team", None), ("trial", False)),
    )
    assert person.attribute("plan") == "pro"
    assert person.attribute("missing") is None
    hash(person)  # part of a frozen, hashable Visitor


def test_only_sub_and_exp_are_required():
    assert verify(token()) == Person(id="42", name="", email="", attributes=())


def test_optional_claims_may_be_null_and_text_is_trimmed():
    person = verify(token(sub="  42 ", name=" Ana ", email=None, attributes=None))

    assert (person.id, person.name, person.email, person.attributes) == ("42", "Ana", "", ())
    assert verify(sign({"sub": "42", "exp": in_an_hour(), "name": None, "attributes": None})).name == ""


def test_claims_at_their_limits_are_taken():
    longest = "x" * CLAIM_CHARS

    person = verify(token(sub=longest, name=longest, email=longest, attributes={longest: longest}))

    assert person.id == person.name == person.email == person.attribute(longest) == longest
    assert len(verify(token(attributes={f"k{n}": n for n in range(50)})).attributes) == 50


def test_a_token_expiring_just_within_the_max_age_is_taken(settings):
    settings.KOOKEE_IDENTITY_MAX_AGE_SECONDS = 600

    assert verify(token(exp=int(time.time()) + 590)).id == "42"


# --- what proves nothing ------------------------------------------------------------------------


def test_no_secret_set_verifies_nobody(settings):
    good = token()
    settings.KOOKEE_IDENTITY_SECRET = ""

    assert "KOOKEE_IDENTITY_SECRET" in refused(good)
    # Not even a token signed with the empty key.
    assert "KOOKEE_IDENTITY_SECRET" in refused(crafted(f'{{"sub":"42","exp":{in_an_hour()}}}', secret=""))


def test_a_token_signed_with_another_secret_is_refused():
    assert "Signature" in refused(sign({"sub": "42", "exp": in_an_hour()}, "another-secret-of-at-least-32-bytes!"))


def test_a_payload_changed_after_signing_is_refused():
    header, _payload, signature = token(sub="42").split(".")
    forged_payload = b64url(json.dumps({"sub": "1", "exp": in_an_hour()}).encode())

    assert "Signature" in refused(f"{header}.{forged_payload}.{signature}")


def test_another_algorithm_is_refused():
    assert "algorithm" in refused(sign({"sub": "42", "exp": in_an_hour()}, algorithm="HS512")).lower()


def test_an_unsigned_none_token_is_refused():
    unsigned = jwt.encode({"sub": "42", "exp": in_an_hour()}, None, algorithm="none")
    assert unsigned.endswith(".")  # no signature at all

    refused(unsigned)


@pytest.mark.parametrize("algorithm", ["none", "None", "RS256", "ES256", "HS384", "HS512"])
def test_another_algorithms_header_over_our_signature_is_refused(algorithm):
    # Our own HMAC, under a header that says there is none, or names another
    # algorithm (RS256 would read our secret as a public key).
    payload = f'{{"sub":"42","exp":{in_an_hour()}}}'
    assert verify(crafted(payload)).id == "42"  # the crafting itself is sound

    refused(crafted(payload, header=f'{{"alg":"{algorithm}","typ":"JWT"}}'))


def test_an_expired_token_is_refused():
    assert "expired" in refused(token(exp=int(time.time()) - 120)).lower()


def test_a_token_expiring_too_far_ahead_is_refused(settings):
    assert "too far ahead" in refused(token(exp=int(time.time()) + DAY + 120))
    settings.KOOKEE_IDENTITY_MAX_AGE_SECONDS = 600
    assert "too far ahead" in refused(token(exp=int(time.time()) + 900))
    assert "too far ahead" in refused(token(exp=10**30))


def test_a_token_not_valid_yet_is_refused():
    refused(token(nbf=int(time.time()) + 600))


@pytest.mark.parametrize("missing", ["sub", "exp"])
def test_a_missing_required_claim_is_refused(missing):
    claims = {"sub": "42", "exp": in_an_hour()}
    del claims[missing]

    assert missing in refused(sign(claims))


@pytest.mark.parametrize("sub", ["", "   "])
def test_an_empty_sub_is_refused(sub):
    refused(token(sub=sub))


@pytest.mark.parametrize("sub", [42, 4.2, True, ["42"], {"id": "42"}])
def test_a_sub_that_is_not_text_is_refused(sub):
    refused(token(sub=sub))


def test_a_null_sub_is_refused():
    refused(sign({"sub": None, "exp": in_an_hour()}))


@pytest.mark.parametrize("exp", ["tomorrow", [1], {"at": 1}])
def test_an_exp_that_is_not_a_time_is_refused(exp):
    refused(token(exp=exp))


@pytest.mark.parametrize("claim", ["name", "email"])
def test_a_name_or_email_too_long_is_refused(claim):
    assert claim in refused(token(**{claim: "x" * (CLAIM_CHARS + 1)}))


@pytest.mark.parametrize("claim", ["name", "email"])
@pytest.mark.parametrize("value", [42, True, ["Ana"], {"first": "Ana"}])
def test_a_name_or_email_that_is_not_text_is_refused(claim, value):
    assert claim in refused(token(**{claim: value}))


def test_a_sub_too_long_is_refused():
    refused(token(sub="x" * (CLAIM_CHARS + 1)))


@pytest.mark.parametrize("attributes", [["plan", "pro"], "plan=pro", 42, True])
def test_attributes_that_are_not_an_object_are_refused(attributes):
    assert "attributes" in refused(token(attributes=attributes))


@pytest.mark.parametrize(
    "value",
    [{"name": "pro"}, ["pro", "team"], [], {}, "x" * (CLAIM_CHARS + 1)],
    ids=["object", "list", "empty list", "empty object", "long string"],
)
def test_attributes_must_be_flat(value):
    assert "flat" in refused(token(attributes={"plan": value}))


def test_too_many_attributes_or_a_long_key_are_refused():
    assert "attributes" in refused(token(attributes={f"k{n}": n for n in range(51)}))
    assert "attributes" in refused(token(attributes={"k" * (CLAIM_CHARS + 1): 1}))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_an_attribute_that_is_not_a_finite_number_is_refused(number):
    # PyJWT reads JSON with Python's json, which takes NaN and Infinity (and
    # 1e400 becomes inf): signed, they pass its checks, and are refused here.
    good = crafted(f'{{"sub":"42","exp":{in_an_hour()},"attributes":{{"score":1.5}}}}')
    assert verify(good).attribute("score") == 1.5  # the crafting itself is sound

    assert "flat" in refused(crafted(f'{{"sub":"42","exp":{in_an_hour()},"attributes":{{"score":{number}}}}}'))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_an_exp_that_is_not_a_finite_number_is_refused(number):
    refused(crafted(f'{{"sub":"42","exp":{number}}}'))


def test_a_token_longer_than_8192_characters_is_refused():
    # A good token, padded with a claim nobody reads, to just within the limit, then just past it.
    pad = (TOKEN_CHARS - len(token(pad=""))) * 3 // 4 - 4  # base64url: 4 characters for 3 bytes
    while len(token(pad="x" * (pad + 1))) <= TOKEN_CHARS:
        pad += 1
    longest, too_long = token(pad="x" * pad), token(pad="x" * (pad + 1))
    assert len(longest) <= TOKEN_CHARS == 8192 < len(too_long)

    assert verify(longest).id == "42"
    assert refused(too_long) == "not a token"


def test_a_token_with_an_audience_is_refused():
    # No audience is expected: a token meant for another service proves nothing here.
    refused(token(aud="https://another-service.example"))


def test_with_an_audience_set_a_token_must_name_it(settings):
    settings.KOOKEE_IDENTITY_AUDIENCE = "chat.example.com"
    assert verify(token(aud="chat.example.com")).id == "42"
    assert verify(token(aud=["billing.example.com", "chat.example.com"])).id == "42"
    assert "aud" in refused(token())  # none: it may be meant for anyone
    assert "audience" in refused(token(aud="billing.example.com")).lower()
    assert "audience" in refused(token(aud=["billing.example.com"])).lower()


@pytest.mark.parametrize("value", [None, "", b"header.payload.signature", 42, "not-a-token", "a.b.c", "..", "a.b"])
def test_what_is_not_a_token_is_refused(value):
    refused(value)


def test_a_token_issued_by_a_clock_a_few_seconds_ahead_is_good(settings):
    # The customer's servers and ours never agree to the second: jsonwebtoken
    # (Node) sets `iat` by default, and a second ahead must not refuse it.
    settings.KOOKEE_IDENTITY_SECRET = SECRET
    now = int(time.time())
    ahead = jwt.encode({"sub": "user-42", "iat": now + 5, "nbf": now + 5, "exp": now + 600}, SECRET, "HS256")
    assert verify(ahead).id == "user-42"
