"""Cursors over the change feed. Pure: no Django.

A cursor is the (transaction id, sequence) of the last change a device has applied, encoded
as an opaque string. Changes are read in (xid, seq) order and only from transactions older
than every transaction still running in the database (selectors.HORIZON), so everything after a
cursor is either already visible or will commit with a larger xid — a cursor never skips a change.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

# `c2.<xid>.<seq>`: every string of this shape is a position in the feed (18 digits stay under
# 2**63), so the API's schema can say exactly which cursors it takes. Devices keep their cursor,
# so the base64 `c1.` form an earlier version gave out is still read.
PREFIX = "c2."
CURSOR_PATTERN = r"^c2\.[0-9]{1,18}\.[0-9]{1,18}$"
_CURSOR = re.compile(CURSOR_PATTERN)
_OLD_PREFIX = "c1."


class BadCursor(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Cursor:
    xid: int = 0
    seq: int = 0

    def encode(self) -> str:
        return f"{PREFIX}{self.xid}.{self.seq}"

    @classmethod
    def decode(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        if _CURSOR.fullmatch(text):
            xid, seq = text[len(PREFIX) :].split(".")
            return cls(int(xid), int(seq))
        if not text.startswith(_OLD_PREFIX):
            raise BadCursor("not a sync cursor")
        body = text[len(_OLD_PREFIX) :]
        try:
            xid, seq = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode().split(":")
            cursor = cls(int(xid), int(seq))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise BadCursor("not a sync cursor") from None
        if cursor.xid < 0 or cursor.seq < 0 or cursor.xid >= 2**63:
            raise BadCursor("not a sync cursor")
        return cursor
