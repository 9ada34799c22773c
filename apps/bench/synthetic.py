"""A synthetic corpus of code memories for benchmarks: realistic sentences about identifiers,
files and failures in a made-up service, generated from a seed. Pure: no Django.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

VERBS = [
    "parse",
    "verify",
    "load",
    "cache",
    "retry",
    "flush",
    "render",
    "resolve",
    "encode",
    "decode",
    "fetch",
    "sync",
    "index",
    "merge",
    "validate",
    "schedule",
    "publish",
    "migrate",
    "refresh",
    "lock",
]
NOUNS = [
    "token",
    "session",
    "query",
    "payload",
    "invoice",
    "user",
    "webhook",
    "cursor",
    "batch",
    "tenant",
    "upload",
    "report",
    "config",
    "schema",
    "event",
    "order",
    "price",
    "index",
    "channel",
    "quota",
]
AREAS = ["api", "core", "billing", "auth", "search", "workers", "web", "storage", "notifications", "admin"]
ERRORS = [
    "TimeoutError",
    "IntegrityError",
    "KeyError",
    "ValidationError",
    "PermissionDenied",
    "ConnectionResetError",
    "DeadlockDetected",
    "JSONDecodeError",
    "RateLimitExceeded",
    "StaleDataError",
]
FACTS = [
    "must run inside a transaction or the row lock is released before the write",
    "is not idempotent, so a retried task creates a duplicate unless the key is checked first",
    "returns naive datetimes; convert to UTC before comparing with stored values",
    "silently truncates input longer than 255 characters on older databases",
    "caches the result per process, so tests that change settings must clear the cache",
    "holds the connection open while streaming, which exhausts the pool under load",
    "raises only after the third attempt because the client retries with backoff",
    "depends on the ordering of middleware; put it after authentication",
    "reads the whole file into memory; stream large uploads instead",
    "was replaced by the batch endpoint, which is ten times faster for bulk writes",
    "needs the feature flag enabled in staging before the migration runs",
    "ignores the timezone setting when called from a management command",
    "compares case-sensitively, so normalise emails before the lookup",
    "leaks a goroutine-like thread when the worker is cancelled mid-request",
    "uses the replica, so a read right after a write can miss the new row",
]  # fmt: skip
TEMPLATES = [
    "{ident} in {path} {fact}.",
    "When {ident2} fails with {error}, check {path}: {ident} {fact}.",
    "Do not call {ident} from {path2} directly; it {fact}.",
    "{error} from {ident} usually means the {noun} was {verb}ed twice; {ident2} {fact}.",
    "We decided that {path} owns {noun} {verb}ing; {ident} {fact}.",
]
TYPES = ["gotcha", "error_pattern", "module_insight", "pattern", "decision", "dead_end", "causal_dependency"]


def _camel(verb: str, noun: str) -> str:
    return verb + noun.capitalize()


@dataclass(frozen=True)
class SyntheticMemory:
    content: str
    type: str
    related_files: list[str]
    base: int  # which base sentence the memory varies (its vector is that sentence's, jittered)


class Corpus:
    def __init__(self, seed: int = 7) -> None:
        self.random = random.Random(seed)

    def _ident(self) -> str:
        verb, noun = self.random.choice(VERBS), self.random.choice(NOUNS)
        return _camel(verb, noun) if self.random.random() < 0.5 else f"{verb}_{noun}"

    def _path(self) -> str:
        area, noun, verb = self.random.choice(AREAS), self.random.choice(NOUNS), self.random.choice(VERBS)
        ext = self.random.choice(["py", "py", "ts"])
        return f"{area}/{noun}s/{verb}_{noun}.{ext}"

    def sentence(self) -> tuple[str, list[str]]:
        path, path2 = self._path(), self._path()
        text = self.random.choice(TEMPLATES).format(
            ident=self._ident(),
            ident2=self._ident(),
            path=path,
            path2=path2,
            fact=self.random.choice(FACTS),
            error=self.random.choice(ERRORS),
            noun=self.random.choice(NOUNS),
            verb=self.random.choice(VERBS),
        )
        return text, [path, path2] if path2 in text else [path]

    def bases(self, count: int) -> list[tuple[str, list[str]]]:
        return [self.sentence() for _ in range(count)]

    def memories(self, count: int, bases: list[tuple[str, list[str]]]) -> list[SyntheticMemory]:
        out = []
        for _ in range(count):
            index = self.random.randrange(len(bases))
            text, files = bases[index]
            suffix = f" Seen with {self._ident()} in {self._path()}."
            out.append(
                SyntheticMemory(
                    content=text + suffix, type=self.random.choice(TYPES), related_files=files, base=index
                )
            )
        return out

    def queries(self, count: int, bases: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
        """Half identifier-style (an identifier and an error), half prose; a third carry files."""
        out = []
        for n in range(count):
            text, files = bases[self.random.randrange(len(bases))]
            if n % 2:
                query = f"{self._ident()} {self.random.choice(ERRORS)}"
            else:
                query = " ".join(text.split()[: self.random.randint(6, 12)])
            out.append((query, files[:1] if n % 3 == 0 else []))
        return out
