"""The secret scanner that runs before any memory text is stored (V5 §16).

detect-secrets' plugins find what they know (AWS, GitHub, Slack, Stripe, JWTs, private keys,
keyword assignments, high-entropy strings, …); the patterns below cover what they lack, such as
Anthropic and OpenAI project keys. Every hit is replaced by `[REDACTED:<kind>]`. Pure: no Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

# An assignment to a credential-named variable: DB_PASSWORD=…, "client_secret": "…",
# aws_secret_access_key = …; its value is a redaction candidate (see `_is_literal_credential`).
_CREDENTIAL_NAME = (
    r"(?<![A-Za-z0-9_])[A-Za-z0-9_]*?(?:password|passwd|pwd|secret|token|api[_-]?key|private[_-]?key)"
    r"(?:[_-]?(?:access[_-]?)?key)?[\"']?[ \t]*(?::=|=>|[:=])[ \t]*"
)
# A value runs to whitespace or a quote (greedy: a lazy value before a lookahead was quadratic
# on runs of punctuation); `replace` keeps an unquoted value's trailing punctuation out of it.
_VALUE = r"(?P<quote>[\"'`]?)(?!\[REDACTED)(?P<value>[^\s\"'`]{4,})(?P=quote)"
_TRAILING = ".,;:!?)]}>"

# Patterns detect-secrets does not ship (or ships only in narrower forms).
EXTRA_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("anthropic_key", re.compile(r"sk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}")),
    ("github_token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{30,}\b")),
    ("github_pat", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    (
        "gitlab_token",
        re.compile(
            r"\b(?:(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-|GR1348941)[\w\-]{20,}"
        ),
    ),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}\b")),
    ("memorysaas_key", re.compile(r"\bmsk_[a-z0-9]{8}_[A-Za-z0-9]{40}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----"
            r"[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|$)"
        ),
    ),
    ("url_credentials", re.compile(r"(?<=://)[^\s/:@]*:[^\s/@]+(?=@)")),
    (
        "authorization_token",
        re.compile(
            r"(?i)(?:\bbearer|\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:basic|token))[ \t]+"
            r"(?!\[REDACTED)(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)"
        ),
    ),
    ("password_assignment", re.compile(rf"(?i){_CREDENTIAL_NAME}{_VALUE}")),
)
# A word (`keep`, `None`, `user_password`) or a dotted name without digits (`settings.API_KEY`,
# `request.user.auth_token`; `s3cr3t.P4ss` is no name).
_WORD_OR_NAME = re.compile(r"[A-Za-z_\-]+|[A-Za-z_]+(?:\.[A-Za-z_]+)+")


def _is_literal_credential(value: str, *, quoted: bool) -> bool:
    """Whether an assigned value looks like a credential rather than code or prose."""
    if value.startswith(("<", "$", "{", "%")) or not any(c.isalnum() for c in value):
        return False  # a placeholder or a reference: <password>, ***, ${DB_PASSWORD}, {token}, %(pw)s
    if quoted:
        return True
    # Unquoted: not a call or subscript (`os.getcwd()`, `os.environ[`), a word (`keep`, `None`)
    # or a name (`user_password`, `settings.API_KEY`).
    return not (any(c in "([{" for c in value) or _WORD_OR_NAME.fullmatch(value))


_SKIP_PLUGINS = {
    # Too noisy on code prose: flags ordinary quoted identifiers and commit SHAs.
    "IPPublicDetector",
    # Their patterns capture only the prefix (`ghp`, `glpat`); EXTRA_PATTERNS has the whole token.
    "GitHubTokenDetector",
    "GitLabTokenDetector",
}


@dataclass
class ScanResult:
    text: str
    kinds: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.kinds)


@cache
def _detect_secrets_plugins() -> tuple:
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ImportError:  # the extra patterns still run
        return ()
    plugins = []
    for cls in get_mapping_from_secret_type_to_class().values():
        if cls.__name__ in _SKIP_PLUGINS:
            continue
        try:
            plugins.append(cls())
        except TypeError:
            continue
    return tuple(plugins)


def _kind_name(plugin) -> str:
    """`AWSKeyDetector` → `aws_key`, `Base64HighEntropyString` → `base64_high_entropy_string`."""
    name = re.sub(r"(Detector|Plugin)$", "", type(plugin).__name__)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


# A line can only hold something the plugins find if it has a long token, a secret-ish word
# or credentials in a URL; the rest skip the plugins (they are slow: each scan resets their
# settings caches).
_MAYBE_SECRET = re.compile(
    r"[A-Za-z0-9+/=_\-.]{16,}|pass|pwd|secret|key|token|auth|cred|bearer|BEGIN|://[^/\s]+@", re.IGNORECASE
)


def _plugin_hits(text: str) -> list[tuple[str, str]]:
    plugins = _detect_secrets_plugins()
    lines = [line for line in text.splitlines() if _MAYBE_SECRET.search(line)]
    if not plugins or not lines:
        return []
    from detect_secrets.settings import default_settings

    hits: list[tuple[str, str]] = []
    with default_settings():
        for line in lines:
            for plugin in plugins:
                try:
                    # analyze_line, not analyze_string: the high-entropy plugins apply their
                    # entropy limit there; analyze_string yields every quoted word.
                    found = plugin.analyze_line(filename="memory.txt", line=line)
                except Exception:  # a plugin's bug must not block storing the memory
                    continue
                # Some patterns take the delimiters around the token (Artifactory's `\s|=|:|"`).
                values = [s.secret_value.strip(" \t\"'=:") for s in found if s.secret_value]
                hits.extend((_kind_name(plugin), value) for value in values if len(value) >= 6)
    return hits


def plugin_findings(texts: list[str]) -> list[tuple[str, str]]:
    """The detect-secrets hits (kind, value) in all `texts` at once: pass them to `scan(found=)`
    when scanning many strings, since each plugin pass has a fixed cost."""
    return _plugin_hits("\n".join(t for t in texts if t))


def scan(text: str, found: list[tuple[str, str]] | None = None) -> ScanResult:
    """`text` with every secret replaced by `[REDACTED:<kind>]`, and the kinds found.
    `found`: plugin hits computed beforehand by `plugin_findings` over this text (and others)."""
    if not text:
        return ScanResult(text=text or "")
    kinds: list[str] = []
    for kind, pattern in EXTRA_PATTERNS:

        def replace(match: re.Match[str], kind: str = kind, pattern: re.Pattern[str] = pattern) -> str:
            if "value" not in pattern.groupindex:
                kinds.append(kind)
                return f"[REDACTED:{kind}]"
            # Assignments and Authorization headers: only the value goes, and only a literal
            # credential (backticks mark code in Markdown, not a string); an unquoted value's
            # trailing punctuation ends a sentence or a list, not the secret.
            quoted = match.groupdict().get("quote") in ('"', "'")
            value = match.group("value") if quoted else match.group("value").rstrip(_TRAILING)
            if len(value) < 4 or not _is_literal_credential(value, quoted=quoted):
                return match.group(0)
            kinds.append(kind)
            start = match.start("value") - match.start()
            whole = match.group(0)
            return whole[:start] + f"[REDACTED:{kind}]" + whole[start + len(value) :]

        text = pattern.sub(replace, text)
    for kind, value in _plugin_hits(text) if found is None else found:
        if "[REDACTED:" in value or value not in text:
            continue
        text = text.replace(value, f"[REDACTED:{kind}]")
        kinds.append(kind)
    return ScanResult(text=text, kinds=sorted(set(kinds)))


_MARKER = re.compile(r"\[REDACTED:([A-Za-z0-9_]+)\]")


def markers(text: str) -> list[str]:
    """The kinds of the redaction markers `text` already holds: text redacted on its way in (a
    session note, scanned as it arrived) still carries a secret's place, and what is stored
    from it is marked as if the secret had been found there."""
    return sorted(set(_MARKER.findall(text or "")))


def scan_many(values: list[str]) -> tuple[list[str], list[str]]:
    """Scan a list of strings (tags, file paths); returns the cleaned list and the kinds found."""
    cleaned, kinds = [], set()
    for value in values:
        result = scan(value)
        cleaned.append(result.text)
        kinds.update(result.kinds)
    return cleaned, sorted(kinds)
