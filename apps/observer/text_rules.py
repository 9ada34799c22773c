"""Text rules the observer applies to what agents send: private spans, error fingerprints,
path and pattern normalisation, self-correction and dead-end language, explicit memories,
and the trust checks on candidate text. Pure functions, no Django.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

PRIVATE_SPAN = re.compile(r"<private>.*?(?:</private>|$)", re.DOTALL | re.IGNORECASE)

# Self-correction language, including the phrasings agents actually use.
SELF_CORRECTION = [
    (re.compile(r"I was wrong about (.+?)[.—–-] ?(.+)", re.IGNORECASE), "factual"),
    (re.compile(r"I initially thought (.+?) but (.+)", re.IGNORECASE), "factual"),
    (re.compile(r"\bActually,? (.+?) (?:not|instead of|rather than) (.+)", re.IGNORECASE), "approach"),
    (re.compile(r"\bCorrection: (.+)", re.IGNORECASE), "factual"),
    (re.compile(r"\bI see[,.]? (.+?) is (.+?) not (.+)", re.IGNORECASE), "factual"),
    (re.compile(r"\bLet me reconsider[.:]? (.+)", re.IGNORECASE), "approach"),
    (
        re.compile(
            r"\bWait[,.] (.+?\b(?:is|are|was|needs?|must|uses?|lives?|has to|have to|should|can't|cannot"
            r"|doesn't|don't|isn't|aren't)\b .+)",
            re.IGNORECASE,
        ),
        "factual",
    ),
    # discoveries phrased as such: "It turns out …", "Ah, I see — …"
    (
        re.compile(r"(?:\bit |^\s*|[.!?]\s+)turns out,? (?:that )?(.+)", re.IGNORECASE | re.MULTILINE),
        "factual",
    ),
    (re.compile(r"\b(?:ah|oh),? I see[,.:;]?\s*(?:[—–-]\s*)?(.+)", re.IGNORECASE), "factual"),
]

# The build gate: explicit abandonment language marks a genuine dead end.
DEAD_END = re.compile(
    r"(this approach (?:won't|will not|doesn't|does not|can't|cannot) work"
    r"|let me try a different approach|dead end|abandon(?:ing)? this approach"
    r"|that approach failed|giving up on (?:this|that) approach|this is a dead end"
    r"|reverting (?:this|that|my) (?:change|approach))",
    re.IGNORECASE,
)

# Dex: `MEMORY:<type>:<text>` lines in reasoning are explicit memories.
MEMORY_LINE = re.compile(r"^[^\S\n]*MEMORY:([a-z_]+):[^\S\n]*(\S.*?)[^\S\n]*$", re.MULTILINE)

_USER_PATH = re.compile(r"(?:/(?:Users|home)/[^/\s]+|[A-Za-z]:\\Users\\[^\\\s]+)")
_ABS_PATH = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)+")
_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)*(?:[-+][\w.]+)?\b")
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b")
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b", re.IGNORECASE)
_LINE_NO = re.compile(r"\bline \d+\b|:\d+(?::\d+)?\b")
_NUMBER = re.compile(r"\b\d+\b")
# durations and sizes, which differ on every run: "734ms", "1.21s", "12MB"
_MEASURE = re.compile(
    r"\b\d+(?:\.\d+)?(?=(?:ns|µs|us|ms|s|sec|m|min|h|b|kb|mb|gb|kib|mib|gib)\b)", re.IGNORECASE
)
# In a long tool output, the line that names the error (test runners print summaries after it).
_ERROR_LINE = re.compile(
    r"^\s*(?:\S+\s*)?(?:[\w.]*(?:Error|Exception)\b|error\b|fatal\b|panic:|E[A-Z]{3,}\b|\S+\(\d+,\d+\): error)",
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ERROR_TYPE = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Failure)|E[A-Z]{3,}|error TS\d+)\b")

CONFIG_NAMES = {
    "package.json": "package_json",
    "tsconfig.json": "tsconfig",
    "pyproject.toml": "pyproject",
    "setup.cfg": "setup_cfg",
    "setup.py": "setup_py",
    "requirements.txt": "requirements",
    "settings.py": "settings",
    "go.mod": "go_mod",
    "cargo.toml": "cargo",
    "dockerfile": "docker",
    "docker-compose.yml": "docker",
    "makefile": "make",
    "tox.ini": "tox",
    "pytest.ini": "pytest",
    "biome.json": "biome",
}

TEST_RUN = re.compile(
    r"\b(pytest|manage\.py test|npm (?:run )?test|yarn test|pnpm test|vitest|jest|go test|cargo test|mvn test|tox)\b"
)


def strip_private(text: str) -> str:
    if "<private" not in text.lower():
        return text
    return PRIVATE_SPAN.sub("[private]", text)


def error_line(message: str) -> str:
    """What to fingerprint: a short message whole; of a long output (a test run, a build), the
    first line that names an error, else its last line."""
    text = message.strip()
    if len(text) < 400:
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if _ERROR_LINE.match(line)), lines[-1])


def normalize_error(message: str) -> str:
    """The error with what differs between machines and runs taken out (the error-retry signal's fingerprint)."""
    text = _USER_PATH.sub("~", error_line(message)[:2000])
    text = _TIMESTAMP.sub("<ts>", text)
    text = _ABS_PATH.sub("/…/", text)
    text = _HEX.sub("<hex>", text)
    text = _VERSION.sub("<v>", text)
    text = _LINE_NO.sub("", text)
    text = _MEASURE.sub("<n>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:300]


def error_fingerprint(tool: str, message: str) -> tuple[str, str]:
    """(fingerprint, normalised message): a hash of the error type and normalised context."""
    normalized = normalize_error(message)
    match = _ERROR_TYPE.search(message)
    kind = match.group(1) if match else "error"
    digest = hashlib.blake2b(f"{tool}|{kind}|{normalized}".encode(), digest_size=8).hexdigest()
    return digest, normalized


_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_:-]*$")
_SHELL_BREAKS = frozenset({"|", "||", "&&", ";", ">", ">>", "<", "2>&1"})


def command_key(command: str) -> str:
    """A shell command reduced to what it runs: the program, its first argument, and a
    subcommand after them (`npx prisma migrate`, `python manage.py migrate`, `docker compose up`);
    leading variable assignments, flags, what follows them and what follows a pipe are dropped."""
    words: list[str] = []
    for word in command.split():
        if word.startswith("-") or word in _SHELL_BREAKS:
            break
        if words or "=" not in word:
            words.append(word)
    key = words[:2]
    if len(words) > 2 and _SUBCOMMAND.match(words[2]):
        key.append(words[2])
    return " ".join(key)


def normalize_pattern(pattern: str) -> str:
    return _SPACE.sub(" ", pattern.strip().lower())[:200]


def printable_path(path: str) -> str:
    """A path with its control characters replaced (U+FFFD): a tab is what joins the two paths
    of a pair's key, and a newline what ends a line of a log."""
    return _CONTROL.sub("\ufffd", path)


MODULE_LENGTH = 300  # the module columns, and each of a memory's related_modules


def module_of(path: str) -> str:
    """The module a file belongs to: its first two directories ("shop/orders"), "." at the root."""
    parts = path.split("/")[:-1]
    return "/".join(parts[:2])[:MODULE_LENGTH] if parts else "."


def modules_of(paths, limit: int | None = None) -> list[str]:
    """The modules of `paths`, each once, in the order first seen (the first `limit` of them)."""
    return list(dict.fromkeys(module_of(p) for p in paths))[:limit]


def config_kind(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1].lower()
    if name in CONFIG_NAMES:
        return CONFIG_NAMES[name]
    if name.startswith(".env") or name.startswith("vite.config") or name.startswith("tailwind.config"):
        return name.split(".")[1] if name.startswith(".") else name.split(".")[0]
    if name.endswith((".ini", ".cfg")) or name in {".eslintrc", ".eslintrc.json", ".prettierrc"}:
        return "other"
    return None


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return (
        name.startswith("test_")
        or name.endswith(("_test.py", "_test.go", "Test.java"))
        or ".test." in name
        or ".spec." in name
        or "/tests/" in f"/{path}"
        or "/__tests__/" in f"/{path}"
    )


def self_correction(text: str) -> tuple[str, str] | None:
    """(correction type, the sentence) when the agent corrects itself."""
    if len(text) > 20_000:
        text = text[:20_000]
    for pattern, kind in SELF_CORRECTION:
        match = pattern.search(text)
        if match:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            sentence = text[start : end if end != -1 else len(text)].strip()
            return kind, sentence[:500]
    return None


def dead_end_sentence(text: str) -> str | None:
    match = DEAD_END.search(text[:20_000])
    if not match:
        return None
    start = max(text.rfind(".", 0, match.start()) + 1, text.rfind("\n", 0, match.start()) + 1)
    end = text.find("\n", match.end())
    return text[start : end if end != -1 else len(text)].strip()[:500]


# ---------------------------------------------------------------- trust checks on candidates

_INSTRUCTION = re.compile(
    r"(ignore (?:all |any )?(?:previous|prior|above) instructions|disregard (?:the )?(?:previous|above)"
    r"|you must (?:now |always )?(?:run|execute|send|post|upload)|always (?:run|execute) `?(?:curl|wget|bash)"
    r"|system prompt|do not tell the user|\|\s*(?:sh|bash)\b)",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s)>\]\"']+", re.IGNORECASE)
_EXFIL_HOSTS = re.compile(
    r"(ngrok|requestbin|pipedream|webhook\.site|burpcollaborator|interact\.sh|pastebin|transfer\.sh|oast\.)",
    re.IGNORECASE,
)
_EXFIL_QUERY = re.compile(r"[?&](?:data|d|q|token|key|secret|env|payload|c)=[^&\s]{16,}", re.IGNORECASE)
_HIDDEN = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\U000e0000-\U000e007f]")


def suspicious(text: str) -> list[str]:
    """Why a candidate's text must not be trusted: instruction-like text, exfiltration-shaped
    URLs, hidden Unicode. Empty when none."""
    reasons = []
    if _INSTRUCTION.search(text):
        reasons.append("instruction_like")
    for url in _URL.findall(text):
        if _EXFIL_HOSTS.search(url) or _EXFIL_QUERY.search(url):
            reasons.append("exfiltration_url")
            break
    if _HIDDEN.search(text) or any(unicodedata.category(ch) == "Cf" for ch in text if ord(ch) > 127):
        reasons.append("hidden_unicode")
    return reasons
