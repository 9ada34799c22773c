"""The secret scanner on the forms it once missed: a bare AWS secret access key, and a password
stated in prose; and the code talk that must come back untouched."""

from __future__ import annotations

import base64
import random

import pytest

from apps.memories import secrets_scan

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    "text",
    [
        AWS_SECRET,
        f"$ cat ~/.aws/prod-key\n{AWS_SECRET}\n$ ls",
        f"The secret access key is {AWS_SECRET}.",
        f"AKIA key above, secret: {AWS_SECRET}",
        f"env:\n  - '{AWS_SECRET}'",
    ],
)
def test_a_bare_aws_secret_access_key_is_redacted(text):
    result = secrets_scan.scan(text)
    assert AWS_SECRET not in result.text
    assert "[REDACTED:" in result.text and result.found


def test_a_bare_key_standing_alone_is_named_for_what_it_is():
    result = secrets_scan.scan(f"Here it is:\n{AWS_SECRET}\nkeep it safe")
    assert result.text == "Here it is:\n[REDACTED:aws_secret_access_key]\nkeep it safe"
    assert result.kinds == ["aws_secret_access_key"]


def test_random_secret_access_keys_are_found_whatever_their_letters():
    """Real keys are 30 random bytes in base64. A few in a thousand fall under the entropy limit
    and hold a run of six lower-case letters, and are missed; no more."""
    rng = random.Random(30)
    keys = [base64.b64encode(rng.randbytes(30)).decode() for _ in range(1000)]
    found = {value for kind, value in secrets_scan.plugin_findings(keys) if kind == "aws_secret_access_key"}
    assert len(set(keys) - found) <= 5


@pytest.mark.parametrize(
    "text",
    [
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",  # a git sha on its own line
        "commit 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b\nAuthor: Ann <ann@shop.test>",
        "3F2A9C8E7D6B5A4F3E2D1C0B9A8F7E6D5C4B3A29",  # hex, upper case
        "sha1 3f2a9c8e7d6b5a4f3e2d1c0b9a8f7e6d5c4b3a29 matches",
        "class V1OrganizationExternalKeysPostRequestGcp(BaseModel):",
        "cudaResViewFormatSignedBlockCompressed6H",
        "def test_a_batch_whose_commit_failed_is_taken_when():",
        "Wav2Vec2ConformerPositionalConvEmbedding is the layer that moved",
        "see select2/dropdown/minimumResultsForSearch in the bundle",
        "https://docs.google.com/document/d/1aGWtgxV3HppuxQAdddyPrs74",
        "AbstractSingletonProxyFactoryBeanManager",
    ],
)
def test_forty_character_code_tokens_are_not_taken_for_keys(text):
    result = secrets_scan.scan(text)
    assert result.text == text and not result.found


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("the db password is ufUxbvJDCT9!", "ufUxbvJDCT9!"),
        ("The password was P@ssw0rd, rotate it", "P@ssw0rd"),
        ("password for staging is Kx8#mQ2vLp", "Kx8#mQ2vLp"),
        ("my pw is s3cr3t!x", "s3cr3t!x"),
        ("the password is now Tr0ub4dor3xyz", "Tr0ub4dor3xyz"),
        ("Password is: Summer2024!", "Summer2024!"),
        ("the admin password was set to 'hunter2'", "hunter2"),
        ("pw: ufUxbvJDCT9!", "ufUxbvJDCT9"),
        ("passwd = ufUxbvJDCT9!", "ufUxbvJDCT9"),
        ("DB_PW=Zq8pW3nLx7", "Zq8pW3nLx7"),
    ],
)
def test_a_password_stated_in_prose_or_after_pw_is_redacted(text, secret):
    result = secrets_scan.scan(text)
    assert secret not in result.text and result.found


def test_a_stated_password_is_replaced_alone():
    result = secrets_scan.scan("the db password is ufUxbvJDCT9! (rotated monthly)")
    assert result.text == "the db password is [REDACTED:password_in_prose] (rotated monthly)"
    assert result.kinds == ["password_in_prose"]


@pytest.mark.parametrize(
    "text",
    [
        "the password field is required",
        "password is hashed with bcrypt",
        "pw: see the vault",
        "pw: ask ops",
        "the password is sha256-hashed before it is stored",
        "password is SHA-256 hashed",
        "the password is Argon2id, see settings.PASSWORD_HASHERS",
        "the password is base64-encoded in the fixture",
        "password is required!",
        "the password was changed yesterday",
        "the password is stored in ~/.pgpass",
        "password is $DB_PASSWORD",
        "the password is <password>",
        "password is None when the user signs in with SSO",
        "the pw is empty",
        "pwd is /home/me/shop",
        "password_reset_token is generated per request",
    ],
)
def test_code_talk_about_passwords_is_kept(text):
    result = secrets_scan.scan(text)
    assert result.text == text and not result.found


def test_a_value_held_under_a_pw_key_is_redacted():
    found = secrets_scan.plugin_findings(["Xy9$kLm2pQ"])
    kinds: set[str] = set()
    clean = secrets_scan.redact({"env": {"DB_PW": "Xy9$kLm2pQ", "npw": "keep"}}, found, kinds)
    assert clean == {"env": {"DB_PW": "[REDACTED:password_assignment]", "npw": "keep"}}
    assert kinds == {"password_assignment"}
