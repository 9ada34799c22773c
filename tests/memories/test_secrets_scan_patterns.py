"""The secret scanner (secrets_scan.py): each known form redacted with its kind, the detect-secrets
plugins beside the extra patterns, credential assignments, and what must come back untouched."""

from __future__ import annotations

import pytest

from apps.memories import secrets_scan

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
ANTHROPIC_KEY = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8" * 3
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234567890abcdef\n-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "kind", "secret"),
    [
        (f"export AWS_ACCESS_KEY_ID={AWS_KEY} before deploying", "aws_access_key", AWS_KEY),
        (f"clone with {GITHUB_TOKEN} as the password", "github_token", GITHUB_TOKEN),
        (f"the client reads {ANTHROPIC_KEY} from env", "anthropic_key", ANTHROPIC_KEY),
        ("connect to postgres://app:hunter22@db.internal/app", "url_credentials", "hunter22"),
        ("set password=Tr0ub4dor3xyz in the fixture", "password_assignment", "Tr0ub4dor3xyz"),
    ],
)
def test_scan_replaces_each_known_secret_with_its_kind(text, kind, secret):
    result = secrets_scan.scan(text)
    assert secret not in result.text
    assert f"[REDACTED:{kind}]" in result.text
    assert result.kinds == [kind] and result.found


def test_scan_replaces_a_whole_private_key_block_and_keeps_the_rest():
    result = secrets_scan.scan(f"Deploy key:\n{PRIVATE_KEY}\nrotate it yearly")
    assert result.text == "Deploy key:\n[REDACTED:private_key]\nrotate it yearly"
    assert result.kinds == ["private_key"]


def test_the_anthropic_key_is_named_as_such_not_as_an_openai_key():
    assert secrets_scan.scan(ANTHROPIC_KEY).kinds == ["anthropic_key"]


@pytest.mark.parametrize(
    "text",
    [
        "Use select_for_update() only inside atomic().",
        "verifyJwt in auth/tokens.ts rejects tokens with clock skew over 30 seconds.",
        "The password field is validated by the form, see accounts/forms.py.",
        "",
    ],
)
def test_clean_text_comes_back_untouched(text):
    result = secrets_scan.scan(text)
    assert result.text == text and result.kinds == [] and not result.found


def test_the_detect_secrets_plugins_find_what_the_extra_patterns_do_not():
    hex_secret = "3f2a9c8e7d6b5a4f3e2d1c0b9a8f7e6d5c4b3a29"
    twilio = "SK" + "0123456789abcdef" * 2
    texts = [f'signing = "{hex_secret}"', f"twilio sid {twilio}", "nothing here"]
    found = secrets_scan.plugin_findings(texts)
    assert ("hex_high_entropy_string", hex_secret) in found
    assert ("twilio_key", twilio) in found
    signing = secrets_scan.scan(texts[0], found=found)
    assert signing.text == 'signing = "[REDACTED:hex_high_entropy_string]"'
    assert signing.kinds == ["hex_high_entropy_string"]
    assert secrets_scan.scan(texts[2], found=found).text == "nothing here"


def test_the_plugins_see_aws_keys_and_private_key_headers_too():
    kinds = {kind for kind, _ in secrets_scan.plugin_findings([f"key {AWS_KEY}", PRIVATE_KEY])}
    assert {"private_key"} <= kinds
    assert any(value == AWS_KEY for _, value in secrets_scan.plugin_findings([f"key {AWS_KEY}"]))


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("export DB_PASSWORD=s3cr3tP4ss before migrating", "s3cr3tP4ss"),
        ("POSTGRES_PASSWORD: 'pg-Pass-2024'", "pg-Pass-2024"),
        ("db_passwd=abc12345", "abc12345"),
        ("API_SECRET=9f8e7d6c5b4a", "9f8e7d6c5b4a"),
        ('"client_secret": "cs_live_xyz"', "cs_live_xyz"),
        ("AUTH_TOKEN=tok_12345678 in .env", "tok_12345678"),
        ("Server=db;Uid=sa;Pwd=P4ssw0rd!;", "P4ssw0rd!"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("REDIS_URL=redis://:p4ssw0rdXYZ@cache:6379/0", "p4ssw0rdXYZ"),
        ("curl -H 'Authorization: Bearer zq8Xk2pL9mN4vR7tYw3' https://api.internal/v1", "zq8Xk2pL9mN4vR7tYw3"),
        ("Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"),
        ("password=abcd,efgh1234", "efgh1234"),  # a word-like head does not save the rest
        ("password=Ab12,efgh99 for staging", "efgh99"),
        ("token=abcd.efgh1234", "abcd.efgh1234"),  # dotted, but no name: it has digits
        ("password=s3cr3t.P4ss", "s3cr3t.P4ss"),
    ],
)  # fmt: skip
def test_common_credential_forms_are_redacted(text, secret):
    result = secrets_scan.scan(text)
    assert secret not in result.text and result.found


@pytest.mark.parametrize(
    "text",
    [
        "pwd = os.getcwd()",
        "The secret: keep the fixtures small.",
        "api_key = settings.API_KEY.",
        'password = os.environ["DB_PASSWORD"]',
        "SECRET_KEY = env('SECRET_KEY')",
        "csrf_token = get_token(request)",
        "token: str | None = None",
        "password=password, user=user",
        "password: changeme",
        "DB_PASSWORD=<password>",
        "PASSWORD=*** in the logs",
        "password: ${DB_PASSWORD}",
        'token = ""',
        "max_tokens = 4096",
        "Send a Bearer token in the header: Authorization: Bearer <token>.",
    ],
)
def test_code_and_placeholders_in_credential_assignments_are_kept(text):
    result = secrets_scan.scan(text)
    assert result.text == text and not result.found


def test_a_value_under_a_credential_key_is_redacted_whatever_it_looks_like():
    """Structured arguments (a tool call's env, a request's headers) say in the key what the value
    is; the value alone ("Xy9$kLm2pQ") matches no pattern."""
    value = {
        "env": {
            "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "DB_PASSWORD": "Xy9$kLm2pQ",
            "apiKey": "k-2f9a7c",
            "DB_PASSWORD_FILE": "/run/secrets/db",  # names a file, not a credential
            "password": "${DB_PASSWORD}",  # a reference
            "max_tokens": "4096",
            "tokenizer": "cl100k",
        },
        "headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA==", "Accept": "application/json"},
        "secret": "kept in the vault, see the runbook",  # prose
        "vault": {"token": ["Xy9$kLm2pQ", ["k-2f9a7c"], "${DB_PASSWORD}"]},  # a list under the key
        "gpg_passphrase": "correct horse battery staple",  # a passphrase is words
    }
    kinds: set[str] = set()
    found = secrets_scan.plugin_findings(list(secrets_scan.strings(value)))
    clean = secrets_scan.redact(value, found, kinds)
    assert clean["env"] == {
        "AWS_SECRET_ACCESS_KEY": "[REDACTED:password_assignment]",
        "DB_PASSWORD": "[REDACTED:password_assignment]",
        "apiKey": "[REDACTED:password_assignment]",
        "DB_PASSWORD_FILE": "/run/secrets/db",
        "password": "${DB_PASSWORD}",
        "max_tokens": "4096",
        "tokenizer": "cl100k",
    }
    assert clean["headers"] == {
        "Authorization": "Basic [REDACTED:authorization_token]",
        "Accept": "application/json",
    }
    assert clean["secret"] == value["secret"]
    assert clean["vault"] == {
        "token": ["[REDACTED:password_assignment]", ["[REDACTED:password_assignment]"], "${DB_PASSWORD}"]
    }
    assert clean["gpg_passphrase"] == "[REDACTED:password_assignment]"
    assert kinds == {"password_assignment", "authorization_token"}


def test_only_the_value_of_an_assignment_is_replaced():
    result = secrets_scan.scan('set password="Tr0ub4dor3xyz", then (api_key=abc123def456). Done.')
    assert result.text == (
        'set password="[REDACTED:password_assignment]", then (api_key=[REDACTED:password_assignment]). Done.'
    )


def test_a_token_is_replaced_whole_and_plugin_kinds_read_well():
    gitlab = "glsoat-" + "a1B2c3D4e5F6g7H8i9J0"
    assert secrets_scan.scan(f"use {gitlab} for CI").text == "use [REDACTED:gitlab_token] for CI"
    assert secrets_scan.scan(f"clone with {GITHUB_TOKEN}x").text == "clone with [REDACTED:github_token]"
    assert ("aws_key", AWS_KEY) in secrets_scan.plugin_findings([f"key {AWS_KEY}"])


EXTRA_SAMPLES = {
    "anthropic_key": ANTHROPIC_KEY,
    "openai_key": "sk-proj-" + "a1B2c3D4" * 5,
    "github_token": GITHUB_TOKEN,
    "github_pat": "github_pat_" + "A1b2C3d4E5" * 5,
    "gitlab_token": "GR1348941" + "a1B2c3D4e5F6g7H8i9J0",
    "google_api_key": "AIzaSyD" + "a1B2c3D4e5F6g7H8" * 2,
    "aws_access_key": AWS_KEY,
    "slack_token": "xoxb-1234567890-abcdefABCDEF",
    "stripe_key": "rk_live_" + "a1B2c3D4e5" * 3,
    "memorysaas_key": "msk_abcd1234_" + "A1b2C3d4" * 5,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "private_key": PRIVATE_KEY,
    "url_credentials": "postgres://app:hunter22@db",
    "authorization_token": "AUTHORIZATION: Basic dXNlcjpodW50ZXIyMg==",
    "password_assignment": "Db_PassWord=Tr0ub4dor3xyz",
    "password_in_prose": "the db PassWord is ufUxbvJDCT9!",
}


def test_every_extra_pattern_has_a_sample_its_hints_let_through(monkeypatch):
    """Each pattern runs only on text holding one of its hints: a pattern whose hints miss its
    own matches would never fire. Every pattern needs a sample here."""
    monkeypatch.setattr(secrets_scan, "_detect_secrets_plugins", lambda: ())  # the extra patterns alone
    assert {pattern.kind for pattern in secrets_scan.EXTRA_PATTERNS} == set(EXTRA_SAMPLES)
    for kind, sample in EXTRA_SAMPLES.items():
        result = secrets_scan.scan(f"see {sample} there")
        assert kind in result.kinds, kind
        assert "[REDACTED:" in result.text


def test_a_line_the_plugins_found_clean_is_remembered_and_one_with_a_secret_never_is():
    secret = 'signing = "4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d"'
    clean = "from shop.orders.serializers import OrderLineItemSerializer"
    for _ in range(2):
        found = secrets_scan.plugin_findings([secret, clean])
        assert list(found) == [("hex_high_entropy_string", "4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d")]
    assert clean in secrets_scan._CLEAN_LINES and secret not in secrets_scan._CLEAN_LINES


@pytest.mark.parametrize(
    "text",
    [
        "paſſword = 'hunter2xyz'",
        'client_ſecret: "zq8Lw2pVn4"',
        "AUTHORİZATİON: Basic dXNlcjpwYXNzd29yZA==",
        "Authorızation: token abcdefgh12345",
        'CLİENT_KEY = "s3cr3tvalue99"',
        'db_paſs = "qwerty987"',
    ],
)
def test_letters_that_match_ascii_case_insensitively_do_not_slip_past_the_hints(text):
    """`ſ`, `ı` and `İ` match `s` and `i` in a case-insensitive pattern but not after
    `str.lower()`: the hints fold them first."""
    assert secrets_scan.scan(text).found, text


def test_a_value_found_in_one_line_is_replaced_in_that_line_only_and_never_inside_a_marker():
    texts = ['POSTGRES_PASSWORD="postgres"', "/repo/docker/postgres/init.sql", "psql -U postgres"]
    found = secrets_scan.plugin_findings(texts)
    assert [secrets_scan.scan(t, found).text for t in texts] == [
        'POSTGRES_PASSWORD="[REDACTED:password_assignment]"',
        "/repo/docker/postgres/init.sql",
        "psql -U postgres",
    ]
    result = secrets_scan.scan('User(email="a@b.c", password="password")\nsee apps/auth/password_reset.py')
    assert (
        result.text
        == 'User(email="a@b.c", password="[REDACTED:password_assignment]")\nsee apps/auth/password_reset.py'
    )
    assert secrets_scan.markers(result.text) == ["password_assignment"]


def test_the_keyword_plugin_still_sees_credential_words_it_alone_knows():
    assert ("keyword", "Zq8pW3nLx7") in secrets_scan.plugin_findings(['DB_PASS: "Zq8pW3nLx7"'])


def test_scan_many_cleans_each_value_and_unions_the_kinds():
    cleaned, kinds = secrets_scan.scan_many(["auth", AWS_KEY, f"x {ANTHROPIC_KEY}"])
    assert cleaned == ["auth", "[REDACTED:aws_access_key]", "x [REDACTED:anthropic_key]"]
    assert kinds == ["anthropic_key", "aws_access_key"]
