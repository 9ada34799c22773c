"""The secret scanner that runs before any memory text is stored: a secret is never written.

detect-secrets' plugins find what they know (AWS, GitHub, Slack, Stripe, JWTs, private keys,
keyword assignments, high-entropy strings, …), with one plugin of ours beside them (a bare AWS
secret access key); the patterns below cover what they lack, such as Anthropic and OpenAI project
keys and passwords stated in prose. Every hit is replaced by `[REDACTED:<kind>]`. Pure: no Django.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.keyword import DENYLIST
from detect_secrets.settings import default_settings

# An assignment to a credential-named variable: DB_PASSWORD=…, "client_secret": "…",
# aws_secret_access_key = …; its value is a redaction candidate (see `_is_literal_credential`).
# The match starts at the credential word: whatever prefixes it (`DB_`, `aws_`) changes nothing
# in what is replaced, and matching it too made the engine try every word of the text.
_CREDENTIAL_NAME = (
    r"(?:password|passwd|pwd|(?<![A-Za-z])pw|secret|token|api[_-]?key|private[_-]?key)"
    r"(?:[_-]?(?:access[_-]?)?key)?[\"']?[ \t]*(?::=|=>|[:=])[ \t]*"
)
# A value runs to whitespace or a quote (greedy: a lazy value before a lookahead was quadratic
# on runs of punctuation); `replace` keeps an unquoted value's trailing punctuation out of it.
_VALUE = r"(?P<quote>[\"'`]?)(?!\[REDACTED)(?P<value>[^\s\"'`]{4,})(?P=quote)"
_TRAILING = ".,;:!?)]}>"
_TRAILING_IN_PROSE = ".,;:?)]}>"  # ("… is ufUxbvJDCT9!": prose leaves the `!` to the password)
# A password stated in prose: "the db password is ufUxbvJDCT9!", "pw for staging was …". (Not
# `pwd`: "pwd is /home/me/shop" is the shell's working directory.)
_PASSWORD_STATED = (
    r"(?<![A-Za-z])(?:password|passwd|pw)(?:[ \t]+(?:for|of|on)[ \t]+[\w.@\-]+)?"
    r"[ \t]+(?:(?:is|was)(?:[ \t]+now)?|(?:(?:is|was|been)[ \t]+)?(?:set|changed)[ \t]+to):?[ \t]+"
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


# What prose says a password *is* besides itself: a hashing or encoding scheme, a word in one
# case and a number (`sha256`, `SHA-256`, `Argon2id`, `pbkdf2_sha256`, `base64-encoded`,
# `utf-8`), or a path. (`ufUxbvJDCT9` mixes the cases inside its letters: no scheme is written so.)
_SCHEME = re.compile(r"(?:[a-z]*|[A-Z]*|[A-Z][a-z]+)[-_]?\d+(?:[a-z]*|[A-Z]*)(?:[-_][A-Za-z0-9]+)*")


def _is_stated_password(value: str, *, quoted: bool) -> bool:
    """Whether what follows "password is" is one, rather than what the code does with it
    ("password is hashed!", "… is sha256-hashed", "… is in ~/.pgpass"). Stricter than an
    assignment's test: prose that names a scheme reads like a value, so a letters-and-a-number
    password stated in prose ("hunter2") is kept, while `password=hunter2` is not."""
    if not _is_literal_credential(value.rstrip("!"), quoted=quoted):
        return False
    return quoted or not (value.startswith(("/", "~", ".")) or _SCHEME.fullmatch(value))


# Patterns detect-secrets does not ship (or ships only in narrower forms). Each names the
# lower-case literals one of which every match holds: text holding none skips the pattern, so a
# long tool output costs a few substring searches instead of fifteen regex walks. A pattern with
# a `value` group replaces only that, and only when `literal(value, quoted=…)` says it is one.
@dataclass(frozen=True)
class Pattern:
    kind: str
    hints: tuple[str, ...]
    regex: re.Pattern[str]
    literal: Callable[..., bool] | None = None
    trailing: str = _TRAILING


_GITLAB_PREFIXES = ("glpat", "gldt", "glft", "glsoat", "glrt", "glcbt", "glimt", "glptt", "glagent", "gloas")
EXTRA_PATTERNS: tuple[Pattern, ...] = (
    Pattern("anthropic_key", ("sk-ant-",), re.compile(r"sk-ant-[A-Za-z0-9_\-]{20,}")),
    Pattern("openai_key", ("sk-",), re.compile(r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}")),
    Pattern(
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{30,}\b"),
    ),
    Pattern("github_pat", ("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    Pattern(
        "gitlab_token",
        (*(f"{prefix}-" for prefix in _GITLAB_PREFIXES), "gr1348941"),
        re.compile(rf"\b(?:(?:{'|'.join(_GITLAB_PREFIXES)})-|GR1348941)[\w\-]{{20,}}"),
    ),
    Pattern("google_api_key", ("aiza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    Pattern("aws_access_key", ("akia", "asia"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    Pattern("slack_token", ("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    Pattern("stripe_key", ("_live_", "_test_"), re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}\b")),
    Pattern("memorysaas_key", ("msk_",), re.compile(r"\bmsk_[a-z0-9]{8}_[A-Za-z0-9]{40}\b")),
    Pattern(
        "jwt", ("eyj",), re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")
    ),
    Pattern(
        "private_key",
        ("-----begin",),
        re.compile(
            r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----"
            r"[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|$)"
        ),
    ),
    Pattern("url_credentials", ("://",), re.compile(r"(?<=://)[^\s/:@]*:[^\s/@]+(?=@)")),
    Pattern(
        "authorization_token",
        ("bearer", "authorization"),
        re.compile(
            r"(?i)(?:\bbearer|\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:basic|token))[ \t]+"
            r"(?!\[REDACTED)(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)"
        ),
    ),
    # Every credential name holds one of these (`pw`, `passwd`, `api_key`, `client_secret`, …).
    Pattern(
        "password_assignment",
        ("pass", "pw", "secret", "token", "key"),
        re.compile(rf"(?i){_CREDENTIAL_NAME}{_VALUE}"),
    ),
    Pattern(
        "password_in_prose",
        ("pass", "pw"),
        re.compile(rf"(?i){_PASSWORD_STATED}{_VALUE}"),
        literal=_is_stated_password,
        trailing=_TRAILING_IN_PROSE,
    ),
)
# Any pattern's hint: most strings (paths, short outputs) hold none and skip the patterns at once.
_ANY_HINT = re.compile("|".join(re.escape(hint) for pattern in EXTRA_PATTERNS for hint in pattern.hints))
# Letters that case-insensitive matching (the `(?i)` patterns, detect-secrets' keyword rules) takes
# for ASCII ones but `str.lower` keeps apart: `paſſword`, `AUTHORİZATİON` (`İ`.lower() is `i̇`).
_ASCII_FOLDS = str.maketrans({"ſ": "s", "ı": "i", "İ": "i", "K": "k"})


def _folded(text: str) -> str:
    """`text` lower-cased as the hints are written, with the letters above folded to ASCII."""
    if text.isascii() or not any(letter in text for letter in "ſıİK"):
        return text.lower()
    return text.translate(_ASCII_FOLDS).lower()


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


class AWSSecretAccessKeyDetector(Base64HighEntropyString):
    """A bare AWS secret access key: 40 base64 characters standing alone (on a line of their
    own, in prose, after `=` or `:`). detect-secrets' AWS plugin finds one only after an
    `aws…key` name and in quotes, its high-entropy plugin only in quotes.

    The key holds upper and lower case and a digit (a git sha or a hex digest has one case) and
    passes the high-entropy plugin's limit; or, a little under it, holds no run of six lower-case
    letters: identifiers and paths are made of words (`Organization`, `minimumResults`), a random
    key hardly ever is."""

    secret_type = "AWS Secret Access Key"
    _TOKEN = re.compile(r"(?:^|(?<=[\s\"'`=:(\[{,]))([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
    _WORD = re.compile(r"[a-z]{6}")
    _WORDLESS_LIMIT = 4.0

    def analyze_string(self, string: str) -> Iterator[str]:
        for token in self._TOKEN.findall(string):
            if self._is_key(token):
                yield token

    def _is_key(self, token: str) -> bool:
        if token.isupper() or token.islower() or not any(c.isdigit() for c in token):
            return False
        entropy = self.calculate_shannon_entropy(token)
        return entropy > self.entropy_limit or (
            entropy > self._WORDLESS_LIMIT and not self._WORD.search(token)
        )

    def analyze_line(self, filename: str, line: str, line_number: int = 0, context=None, **kwargs):
        # (the high-entropy plugin's own filter would drop the keys under its limit again)
        return BasePlugin.analyze_line(
            self, filename=filename, line=line, line_number=line_number, context=context
        )


@cache
def _detect_secrets_plugins() -> tuple:
    plugins: list[BasePlugin] = [AWSSecretAccessKeyDetector()]
    for cls in get_mapping_from_secret_type_to_class().values():
        if cls.__name__ in _SKIP_PLUGINS:
            continue
        try:
            plugins.append(cls())
        except TypeError:
            continue
    return tuple(plugins)


@cache
def _keyword_gate() -> re.Pattern[str]:
    """What a line needs for detect-secrets' KeywordDetector to find anything: one of its
    credential words (`api_?key`, `db_?pass`, `password`, `secret`, …), lower-cased. That plugin
    is the slowest, and code is full of other `key`s."""
    return re.compile("|".join(DENYLIST))


def _kind_name(plugin) -> str:
    """`AWSKeyDetector` → `aws_key`, `Base64HighEntropyString` → `base64_high_entropy_string`."""
    name = re.sub(r"(Detector|Plugin)$", "", type(plugin).__name__)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


# A line can only hold something the plugins find if it has a long token, a secret-ish word
# or credentials in a URL; the rest skip the plugins (they are slow: each pass enters their
# settings context, ~0.5 ms).
_MAYBE_SECRET = re.compile(
    r"[A-Za-z0-9+/=_\-.]{16,}|pass|pwd|secret|key|token|auth|cred|bearer|BEGIN|://[^/\s]+@", re.IGNORECASE
)
_KEYWORD_HINTS = ("key", "pass", "pwd", "secret", "contrase")

# Lines the plugins found nothing in, remembered by this process: an agent's session reads the
# same files and prints the same paths again and again. Only the plugins' verdict is kept (the
# extra patterns are cheap and always run), and only for lines of moderate length (≤ ~10 MB).
_CLEAN_LINES: dict[str, None] = {}
_CLEAN_LINES_MAX = 20_000
_CLEAN_LINE_LENGTH = 500


@dataclass
class Findings:
    """What the detect-secrets plugins found, line by line: a value is replaced only in the line
    it was found in (`postgres` as a password is not `docker/postgres/init.sql`)."""

    by_line: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def __iter__(self):
        """Every (kind, value) found."""
        for hits in self.by_line.values():
            yield from hits

    def cover(self, lines: Iterable[str]) -> None:
        """Look at the lines not seen yet (one settings context for all of them)."""
        fresh = [line for line in dict.fromkeys(lines) if line not in self.seen]
        self.seen.update(fresh)
        todo = [line for line in fresh if line not in _CLEAN_LINES and _MAYBE_SECRET.search(line)]
        plugins = _detect_secrets_plugins()
        if not plugins or not todo:
            return
        keyword_gate = _keyword_gate()
        with default_settings():
            for line in todo:
                folded = _folded(line)
                keywords = any(hint in folded for hint in _KEYWORD_HINTS) and keyword_gate.search(folded)
                hits = []
                for plugin in plugins:
                    if not keywords and type(plugin).__name__ == "KeywordDetector":
                        continue
                    try:
                        # analyze_line, not analyze_string: the high-entropy plugins apply their
                        # entropy limit there; analyze_string yields every quoted word.
                        found = plugin.analyze_line(filename="memory.txt", line=line)
                    except Exception:  # a plugin's bug must not block storing the memory
                        continue
                    # Some patterns take the delimiters around the token (Artifactory's `\s|=|:|"`).
                    values = [s.secret_value.strip(" \t\"'=:") for s in found if s.secret_value]
                    values = [value for value in values if len(value) >= 6 and "[REDACTED:" not in value]
                    hits.extend((_kind_name(plugin), value) for value in values)
                if hits:
                    self.by_line[line] = hits
                elif len(line) <= _CLEAN_LINE_LENGTH:
                    if len(_CLEAN_LINES) >= _CLEAN_LINES_MAX:
                        _CLEAN_LINES.clear()
                    _CLEAN_LINES[line] = None


def plugin_findings(texts: Iterable[str]) -> Findings:
    """The detect-secrets hits in all `texts` at once: pass them to `scan(found=)` when scanning
    many strings, since each plugin pass has a fixed cost."""
    findings = Findings()
    findings.cover(line for text in texts if text for line in text.splitlines())
    return findings


# Nothing shorter holds what the scanner replaces: an assignment is a name, `=` and 4 characters
# (`pwd=abcd`); a token, a header or a URL credential is longer; the plugins report 6 or more.
_SHORTEST_SECRET = 8


def _replace(match: re.Match[str], *, extra: Pattern, kinds: list[str]) -> str:
    """A match of `extra` replaced by its marker (noted in `kinds`), or left as it is."""
    if "value" not in extra.regex.groupindex:
        kinds.append(extra.kind)
        return f"[REDACTED:{extra.kind}]"
    # Assignments, stated passwords and Authorization headers: only the value goes, and only a
    # literal credential (backticks mark code in Markdown, not a string); an unquoted value's
    # trailing punctuation ends a sentence or a list, not the secret.
    quoted = match.groupdict().get("quote") in ('"', "'")
    value = match.group("value") if quoted else match.group("value").rstrip(extra.trailing)
    literal = extra.literal or _is_literal_credential
    if len(value) < 4 or not literal(value, quoted=quoted):
        return match.group(0)
    kinds.append(extra.kind)
    start = match.start("value") - match.start()
    whole = match.group(0)
    return whole[:start] + f"[REDACTED:{extra.kind}]" + whole[start + len(value) :]


def scan(text: str, found: Findings | None = None) -> ScanResult:
    """`text` with every secret replaced by `[REDACTED:<kind>]`, and the kinds found.
    `found`: plugin hits computed beforehand by `plugin_findings` over this text (and others);
    lines it has not seen (those the extra patterns changed) are looked at here."""
    if len(text or "") < _SHORTEST_SECRET:
        return ScanResult(text=text or "")
    kinds: list[str] = []
    lowered = _folded(text)
    for extra in EXTRA_PATTERNS if _ANY_HINT.search(lowered) else ():
        if not any(hint in lowered for hint in extra.hints):
            continue
        text = extra.regex.sub(partial(_replace, extra=extra, kinds=kinds), text)
    found = Findings() if found is None else found
    lines = text.splitlines()
    found.cover(lines)
    if any(line in found.by_line for line in lines):
        pieces = text.splitlines(keepends=True)  # the same lines, with their endings
        for i, line in enumerate(lines):
            for kind, value in sorted(found.by_line.get(line, ()), key=lambda hit: -len(hit[1])):
                redacted = _replace_outside_markers(pieces[i], value, f"[REDACTED:{kind}]")
                if redacted != pieces[i]:
                    pieces[i] = redacted
                    kinds.append(kind)
        text = "".join(pieces)
    return ScanResult(text=text, kinds=sorted(set(kinds)))


_MARKER_SPLIT = re.compile(r"(\[REDACTED:[A-Za-z0-9_]+\])")


def _replace_outside_markers(line: str, value: str, marker: str) -> str:
    parts = _MARKER_SPLIT.split(line)
    return "".join(part if i % 2 else part.replace(value, marker) for i, part in enumerate(parts))


_MARKER = re.compile(r"\[REDACTED:([A-Za-z0-9_]+)\]")


def markers(text: str) -> list[str]:
    """The kinds of the redaction markers `text` already holds: text redacted on its way in (a
    session note, scanned as it arrived) still carries a secret's place, and what is stored
    from it is marked as if the secret had been found there."""
    return sorted(set(_MARKER.findall(text or "")))


def strings(value: Any) -> Iterable[str]:
    """Every string in a JSON-like value, dict keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)


def redact(value: Any, found: Findings, kinds: set[str], known: frozenset[str] = frozenset()) -> Any:
    """A JSON-like `value` with every string in it scanned (keys too: a payload or a tool call's
    arguments may take any). `found`: `plugin_findings` over `strings(value)` (and maybe more).
    `kinds` gains what was found, and the kinds of markers the text already held (text redacted
    on its way in: a session note) beyond `known`, those its record already holds (an edit that
    keeps an old marker finds nothing new)."""
    if isinstance(value, str):
        result = scan(value, found=found)
        kinds.update(result.kinds)
        if "[REDACTED:" in value:
            kinds.update(set(markers(value)) - known)
        return result.text
    if isinstance(value, list):
        return [redact(v, found, kinds, known) for v in value]
    if isinstance(value, dict):
        clean: dict[Any, Any] = {}
        for k, v in value.items():
            key = redact(k, found, kinds, known)
            if key != k and key in clean:  # two secrets, one marker: keep both entries
                key = next(f"{key} ({n})" for n in range(2, len(value) + 2) if f"{key} ({n})" not in clean)
            clean[key] = _redact_held(k, v, found, kinds, known)
        return clean
    return value


def _redact_held(key: Any, value: Any, found, kinds: set[str], known: set[str]) -> Any:
    """`value` redacted as held under `key`: a credential key's strings are credentials, and so
    are the strings of a list under it (`{"DB_PASSWORD": ["Xy9$kLm2pQ"]}`)."""
    if isinstance(key, str) and isinstance(value, str):
        held = _held_credential(key, value)
        if held is not None:
            kinds.add(held[1])
            return held[0]
    if isinstance(key, str) and isinstance(value, list):
        return [_redact_held(key, item, found, kinds, known) for item in value]
    return redact(value, found, kinds, known)


# Keys whose string value is a credential whatever it looks like: the key says what it holds
# (`{"DB_PASSWORD": "Xy9$kLm2pQ"}`, `{"env": {"AWS_SECRET_ACCESS_KEY": …}}`), and the value
# alone matches no pattern. Matched at the key's end, lower-cased: `max_tokens` and
# `tokenizer` hold no credential, `csrf_token` and `apiKey` do.
_CREDENTIAL_KEY = re.compile(
    r"(?:password|passwd|pwd|(?<![a-z])pw|passphrase|secret|token|api[_-]?key|private[_-]?key|"
    r"access[_-]?key|credentials?)$"
)
_PASSPHRASE_KEY = re.compile(r"passphrase$")
_AUTHORIZATION_KEY = re.compile(r"authorization$")
# An Authorization header's value: its scheme (kept) and credentials.
_AUTHORIZATION_VALUE = re.compile(r"(?P<scheme>[A-Za-z][\w-]*[ \t]+)?(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)")


def _held_credential(key: str, value: str) -> tuple[str, str] | None:
    """(the value redacted, its kind) when `key` names a credential and `value` is one, or None."""
    if "[REDACTED:" in value:
        return None
    name = _folded(key.strip())
    if _AUTHORIZATION_KEY.search(name):
        header = _AUTHORIZATION_VALUE.fullmatch(value.strip())
        if header is None:
            return None
        return f"{header.group('scheme') or ''}[REDACTED:authorization_token]", "authorization_token"
    if not _CREDENTIAL_KEY.search(name) or len(value) < 4:
        return None
    if any(c.isspace() for c in value.strip()) and not _PASSPHRASE_KEY.search(name):
        return None  # prose ("use the one in the vault"); a passphrase is words, though
    if not _is_literal_credential(value, quoted=True):
        return None  # a placeholder or a reference: "<password>", "${DB_PASSWORD}"
    return "[REDACTED:password_assignment]", "password_assignment"


def scan_many(values: list[str]) -> tuple[list[str], list[str]]:
    """Scan a list of strings (tags, file paths); returns the cleaned list and the kinds found."""
    cleaned, kinds = [], set()
    for value in values:
        result = scan(value)
        cleaned.append(result.text)
        kinds.update(result.kinds)
    return cleaned, sorted(kinds)
