"""Plain-data units of the memories app: secret scanning, code tokens, payloads, embedding text."""

from __future__ import annotations

import pytest

from apps.memories import secrets_scan
from apps.memories.embedding.contextual import memory_embedding_text, query_embedding_text
from apps.memories.kinds import normalize_type
from apps.memories.payloads import PayloadError, payload_text, validate_payload
from apps.memories.search import codetokens

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
ANTHROPIC_KEY = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8" * 3
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234567890abcdef\n-----END RSA PRIVATE KEY-----"
)


# ---------------------------------------------------------------- secrets_scan


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


# ---------------------------------------------------------------- codetokens


@pytest.mark.parametrize(
    ("token", "code_like"),
    [
        ("verifyJwt", True),
        ("verify_jwt", True),
        ("auth/tokens.ts", True),
        ("django.db.models", True),
        ("QuerySet", True),
        ("utf8", True),
        ("__init__", True),
        ("Hello", False),
        ("HTTP", False),
        ("well-known", False),
        ("tokens", False),
    ],
)
def test_is_code_like(token, code_like):
    assert codetokens.is_code_like(token) is code_like


@pytest.mark.parametrize(
    ("token", "parts"),
    [
        ("verifyJwt", ["verify", "jwt"]),
        ("verify_jwt", ["verify", "jwt"]),
        ("HTTPServer", ["http", "server"]),
        ("auth/tokens.ts", ["auth", "tokens", "ts"]),
        ("django/db/models/query.py", ["django", "db", "models", "query", "py"]),
        ("qs.select_for_update", ["qs", "select", "for", "update"]),
    ],
)
def test_split_parts(token, parts):
    assert codetokens.split_parts(token) == parts


def test_camel_and_snake_spellings_of_one_name_share_a_joined_lexeme():
    camel, snake = codetokens.analyze("verifyJwt"), codetokens.analyze("verify_jwt")
    assert camel.whole == ["verifyjwt"]
    assert snake.whole == ["verify_jwt", "verifyjwt"]
    assert camel.words == snake.words == "verify jwt"


def test_analyze_keeps_paths_and_dotted_names_whole_and_by_parts():
    terms = codetokens.analyze("Call verifyJwt in auth/tokens.ts before qs.select_for_update runs.")
    assert terms.whole == [
        "verifyjwt",
        "auth/tokens.ts",
        "authtokensts",
        "qs.select_for_update",
        "qsselectforupdate",
        "select_for_update",
    ]
    assert terms.words.split() == [
        "Call", "verify", "jwt", "in", "auth", "tokens", "ts", "before",
        "qs", "select", "for", "update", "runs", ".",
    ]  # fmt: skip


def test_plain_prose_yields_no_whole_lexemes():
    terms = codetokens.analyze("The well-known cache expires Hourly.")
    assert terms.whole == []
    assert terms.words.split() == ["The", "well", "known", "cache", "expires", "Hourly", "."]


def test_double_colon_paths_are_kept_whole_and_by_parts():
    terms = codetokens.analyze("use std::vector here")
    assert terms.whole == ["std::vector", "stdvector"]
    assert terms.words.split() == ["use", "std", "vector", "here"]


def test_cjk_runs_are_indexed_by_their_character_pairs():
    # written without spaces, a run was one word: a word inside it could not be matched
    assert codetokens.cjk_grams("缓存键在部署时 verifyJwt 鍵 キャッシュ 캐시") == [
        "缓存", "存键", "键在", "在部", "部署", "署时", "鍵", "キャ", "ャッ", "ッシ", "シュ", "캐시",
    ]  # fmt: skip
    terms = codetokens.analyze("verifyJwt 缓存键")
    assert terms.whole == ["verifyjwt", "缓存", "存键"]
    assert codetokens.analyze("Crème brûlée, naïve").whole == []  # accented Latin is not CJK


def test_paths_under_an_agents_repository_root_are_made_relative():
    from apps.memories.validation import clean_paths, clean_root

    assert clean_root("/") == "" and clean_root(" /home/ada/src/shop/ ") == "/home/ada/src/shop"
    shop = clean_root("/home/ada/src/shop")
    paths = ["/home/ada/src/shop/x.py", "/home/ada/src/shop2/y.py", "/home/ADA/src/shop/z.py", "./w.py"]
    assert clean_paths(paths, shop) == ["x.py", "/home/ada/src/shop2/y.py", "/home/ADA/src/shop/z.py", "w.py"]
    windows = clean_root("C:\\Users\\Ada\\shop\\")
    assert windows == "C:/Users/Ada/shop"  # a Windows path names the same file in any case
    assert clean_paths(["c:\\users\\ada\\shop\\a.py", "C:/Users/Ada/shop2/b.py"], windows) == [
        "a.py",
        "C:/Users/Ada/shop2/b.py",
    ]


def test_tsvector_literal_quotes_and_repeats_positions():
    literal = codetokens.tsvector_literal([("it's", "A"), ("x", "B"), ("x", "C"), ("y" * 201, "A")])
    assert literal == "'it''s':1A 'x':2B,3C"
    assert codetokens.tsquery_any(["a", "b", "a", ""]) == "'a' | 'b'"


# ---------------------------------------------------------------- payloads


GOOD_PAYLOADS = {
    "workflow_recipe": {
        "task_pattern": "add an API endpoint",
        "steps": [{"order": 1, "description": "add the schema"}, {"order": 2, "description": "route it"}],
    },
    "dead_end": {"approach_tried": "raise the clock skew", "why_it_failed": "tokens were expired"},
    "task_calibration": {
        "module": "auth",
        "average_actual_steps": 14,
        "average_planned_steps": 10,
        "ratio": 1.4,
        "sample_count": 5,
    },
    "causal_dependency": {"trigger_file": "schema.sql", "dependent_files": ["models.py"], "weight": 0.7},
    "work_unit_outcome": {"outcome": "success", "steps": 12},
}


@pytest.mark.parametrize("memory_type", sorted(GOOD_PAYLOADS))
def test_a_well_formed_payload_is_accepted(memory_type):
    assert validate_payload(memory_type, GOOD_PAYLOADS[memory_type]) == {
        **_defaults(memory_type),
        **GOOD_PAYLOADS[memory_type],
    }


def _defaults(memory_type: str) -> dict:
    return {
        "workflow_recipe": {"success_count": 0},
        "dead_end": {"alternative_used": "", "task_context": ""},
        "task_calibration": {"methodology": "native"},
        "work_unit_outcome": {"summary": ""},
    }.get(memory_type, {})


def test_recipe_steps_keep_their_fields_and_drop_unset_ones():
    payload = validate_payload("workflow_recipe", GOOD_PAYLOADS["workflow_recipe"])
    assert payload["steps"][0] == {"order": 1, "description": "add the schema"}


@pytest.mark.parametrize(
    ("memory_type", "payload", "bad_loc"),
    [
        ("workflow_recipe", {"task_pattern": "add an endpoint"}, ["steps"]),
        ("workflow_recipe", {"task_pattern": "add an endpoint", "steps": []}, ["steps"]),
        ("workflow_recipe", {"task_pattern": "x", "steps": [{"order": 0, "description": "a"}]}, ["steps", "0", "order"]),
        ("workflow_recipe", {"task_pattern": "x", "steps": [{"order": 1}]}, ["steps", "0", "description"]),
        ("dead_end", {"approach_tried": "retry"}, ["why_it_failed"]),
        ("dead_end", {"approach_tried": "", "why_it_failed": "no"}, ["approach_tried"]),
        ("dead_end", {"approach_tried": "a", "why_it_failed": "b", "mood": "sad"}, ["mood"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "ratio": "fast"}, ["ratio"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "ratio": -1}, ["ratio"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "average_planned_steps": 0}, ["average_planned_steps"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "sample_count": 0}, ["sample_count"]),
        ("causal_dependency", {"trigger_file": "a.py", "dependent_files": ["b.py"], "weight": 2}, ["weight"]),
        ("work_unit_outcome", {"outcome": "meh"}, ["outcome"]),
    ],
)  # fmt: skip
def test_a_malformed_payload_is_rejected_with_where_it_is_wrong(memory_type, payload, bad_loc):
    with pytest.raises(PayloadError) as caught:
        validate_payload(memory_type, payload)
    assert bad_loc in [error["loc"] for error in caught.value.errors]


def test_empty_payloads_pass_and_schemaless_types_keep_any_object():
    assert validate_payload("workflow_recipe", {}) == {}
    assert validate_payload("dead_end", None) == {}
    assert validate_payload("gotcha", {"anything": [1, 2]}) == {"anything": [1, 2]}


def test_payload_text_gives_recipe_steps_and_dead_end_reasons():
    recipe = payload_text("workflow_recipe", GOOD_PAYLOADS["workflow_recipe"])
    assert recipe == "add an API endpoint add the schema route it"
    dead_end = payload_text("dead_end", {**GOOD_PAYLOADS["dead_end"], "alternative_used": "refresh"})
    assert dead_end == "raise the clock skew tokens were expired refresh"
    assert payload_text("task_calibration", GOOD_PAYLOADS["task_calibration"]) == ""


# ---------------------------------------------------------------- contextual


def test_memory_embedding_text_puts_files_module_and_type_before_the_content():
    text = memory_embedding_text(
        memory_type="gotcha",
        content="verifyJwt rejects skewed clocks.",
        related_files=["auth/tokens.ts", "auth/clock.ts"],
        related_modules=["auth", "core"],
    )
    assert (
        text
        == "Files: auth/tokens.ts, auth/clock.ts | Module: auth | Type: gotcha\n\nverifyJwt rejects skewed clocks."
    )


def test_memory_embedding_text_adds_the_context_prefix_first_and_extra_after_the_content():
    text = memory_embedding_text(
        memory_type="dead_end",
        content="Raising the skew did not help.",
        context_prefix="In the token service:",
        extra="raise the clock skew tokens were expired",
    )
    assert text == (
        "In the token service:\nType: dead_end\n\nRaising the skew did not help.\n"
        "raise the clock skew tokens were expired"
    )


def test_query_embedding_text_is_the_trimmed_query():
    assert query_embedding_text("  verifyJwt skew \n") == "verifyJwt skew"


# ---------------------------------------------------------------- kinds


# Dex (seed 002) type names and the V5 types they are stored as.
DEX_ALIASES = [
    ("architecture", "module_insight"),
    ("dependency", "module_insight"),
    ("constraint", "requirement"),
    ("convention", "preference"),
    ("pitfall", "gotcha"),
    ("fix", "error_pattern"),
]


@pytest.mark.parametrize(
    ("alias", "v5_type"), [*DEX_ALIASES, (" Pitfall ", "gotcha"), ("dead_end", "dead_end")]
)
def test_dex_aliases_map_to_v5_types(alias, v5_type):
    assert normalize_type(alias) == v5_type


def test_an_unknown_type_is_refused():
    with pytest.raises(ValueError):
        normalize_type("nonsense")
