"""Cursors over the change feed. Pure: no Django.

A cursor is the (transaction id, sequence) of the last change a device has applied, encoded
as an opaque string. Changes are read in (xid, seq) order and only from transactions older
than every transaction still running in the database (selectors.HORIZON), so everything after a
cursor is either already visible or will commit with a larger xid — a cursor never skips a change.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

PREFIX = "c1."


class BadCursor(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Cursor:
    xid: int = 0
    seq: int = 0

    def encode(self) -> str:
        raw = f"{self.xid}:{self.seq}".encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        if not text.startswith(PREFIX):
            raise BadCursor("not a sync cursor")
        body = text[len(PREFIX) :]
        try:
            xid, seq = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode().split(":")
            cursor = cls(int(xid), int(seq))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise BadCursor("not a sync cursor") from None
        if cursor.xid < 0 or cursor.seq < 0 or cursor.xid >= 2**63:
            raise BadCursor("not a sync cursor")
        return cursor
