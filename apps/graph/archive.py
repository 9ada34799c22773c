"""Unpacking an uploaded repository archive safely.

Refused outright (the whole archive, with the offending entries named): absolute paths, `..`
components, symlinks and hard links, device files and FIFOs; and, as the files are unpacked,
one the filesystem cannot hold, an encrypted or a damaged entry. Skipped and counted: vendored
directories, files over the per-file ceiling, paths longer than indexing keeps. The unpacked
total is capped too, counted as the tar is read (a zip or gzip bomb is a 413, not a full disk nor
minutes of decompression), and so is the number of entries.
"""

from __future__ import annotations

import lzma
import os
import posixpath
import stat
import tarfile
import zipfile
import zlib
from typing import IO

from django.conf import settings

from apps.graph.services import MAX_FILE_BYTES, MAX_PATH, VENDORED_DIRS
from memorysaas.kernel.errors import ApiError, Invalid

# Entries an archive may hold: each header costs a parse (and, in a compressed tar, the data
# before it a decompression), whatever is then skipped.
MAX_MEMBERS = 100_000
# What a compressed stream raises on data its decompressor refuses or that ends early (gzip and
# bzip2 raise OSError; zlib and lzma their own errors, unwrapped by tarfile).
_STREAM_DAMAGE = (OSError, EOFError, zlib.error, lzma.LZMAError)
# What zipfile raises on a directory or an entry it cannot read: besides BadZipFile and a damaged
# stream, a name flagged UTF-8 that is not (UnicodeDecodeError, a ValueError), a version or method
# it does not implement, an offset before the file's start (ValueError).
_ZIP_DAMAGE = (zipfile.BadZipFile, ValueError, NotImplementedError, *_STREAM_DAMAGE)


def _unsafe(name: str) -> bool:
    normalized = name.replace("\\", "/")
    return (
        not normalized.strip("/.")  # an empty name (zipfile's is_dir fails on it), "/", "."
        or normalized.startswith("/")
        or (len(normalized) > 1 and normalized[1] == ":")
        or ".." in normalized.split("/")
    )


def _root_dir(member: tarfile.TarInfo) -> bool:
    """The archive's own root, "." or "./": `tar czf repo.tgz -C repo .` writes it first. Only
    files are unpacked, so it makes nothing; "/" and "" stay refused."""
    return member.isdir() and member.name.replace("\\", "/").rstrip("/") == "."


def _vendored(name: str) -> bool:
    return any(part in VENDORED_DIRS for part in name.split("/")[:-1])


def _target(dest: str, name: str) -> str:
    path = os.path.normpath(os.path.join(dest, posixpath.normpath(name)))
    if not path.startswith(os.path.abspath(dest) + os.sep):
        raise Invalid("The archive has an entry outside its root.", details={"entries": [name]})
    return path


def _too_long(name: str) -> bool:
    """A path longer than indexing keeps (MAX_PATH; it also bounds the directories to make):
    skipped as a long path, as the indexer would skip it, before anything is made for it."""
    return len(posixpath.normpath(name)) > MAX_PATH


def _write(dest: str, name: str, data: bytes) -> None:
    path = _target(dest, name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
    except OSError:  # a file and a directory of one name, a name the filesystem refuses
        raise Invalid(
            "The archive has an entry that cannot be unpacked: a file and a directory of the same "
            "name, or a name too long.",
            details={"entries": [name]},
        ) from None


def extract_archive(stream: IO[bytes], filename: str, dest: str) -> dict[str, int]:
    """Unpack a .tar.gz/.tgz/.tar or .zip into `dest`; returns what was skipped, by reason."""
    os.makedirs(dest, exist_ok=True)
    dest = os.path.abspath(dest)
    if filename.endswith(".zip") or zipfile.is_zipfile(stream):
        stream.seek(0)
        return _unzip(stream, dest)
    stream.seek(0)
    try:
        archive = tarfile.open(fileobj=stream, mode="r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, *_STREAM_DAMAGE):
        raise Invalid(
            "Send the repository as a .tar.gz or .zip archive.", details={"field": "archive"}
        ) from None
    with archive:
        return _untar(archive, dest)


def _budget() -> int:
    return int(getattr(settings, "MAX_UNPACKED_BYTES", 5 * settings.MAX_UPLOAD_BYTES))


def _too_large() -> ApiError:
    return ApiError(413, "The archive unpacks to more than the allowed size.", code="too_large")


def _members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The tar's entries, header by header, stopping (413) once what reading them decompresses
    passes the budget: `getmembers` decompressed it all first, skipped members too (a gzip of
    an 8 GiB member of zeros held a worker for minutes and was then skipped as too large)."""
    members: list[tarfile.TarInfo] = []
    total = 0
    try:
        while (member := archive.next()) is not None:
            total += member.size
            if total > _budget() or len(members) >= MAX_MEMBERS:
                raise _too_large()
            members.append(member)
    except (tarfile.TarError, *_STREAM_DAMAGE):
        raise Invalid("The archive is damaged.", details={"field": "archive"}) from None
    return members


def _untar(archive: tarfile.TarFile, dest: str) -> dict[str, int]:
    members = _members(archive)
    refused = [
        m.name
        for m in members
        if not _root_dir(m)
        and (_unsafe(m.name) or m.issym() or m.islnk() or m.isdev() or m.ischr() or m.isblk() or m.isfifo())
    ]
    if refused:
        raise Invalid(
            "The archive has unsafe entries (absolute, .., links or devices).",
            details={"entries": refused[:20]},
        )
    skipped = {"binary": 0, "vendored": 0, "huge": 0, "long_path": 0}
    for member in members:
        if not member.isfile():
            continue
        if _vendored(member.name):
            skipped["vendored"] += 1
            continue
        if member.size > MAX_FILE_BYTES:
            skipped["huge"] += 1
            continue
        if _too_long(member.name):
            skipped["long_path"] += 1
            continue
        source = archive.extractfile(member)
        if source is None:
            continue
        try:
            data = source.read()
        except (tarfile.TarError, *_STREAM_DAMAGE):
            raise Invalid("The archive is damaged.", details={"entries": [member.name]}) from None
        _write(dest, member.name, data)
    return skipped


def _unzip(stream: IO[bytes], dest: str) -> dict[str, int]:
    try:
        archive = zipfile.ZipFile(stream)
    except _ZIP_DAMAGE:
        raise Invalid("The archive is damaged.", details={"field": "archive"}) from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise _too_large()
        refused = [
            i.filename
            for i in infos
            if _unsafe(i.filename) or stat.S_ISLNK(i.external_attr >> 16) or stat.S_ISCHR(i.external_attr >> 16)
            or stat.S_ISBLK(i.external_attr >> 16) or stat.S_ISFIFO(i.external_attr >> 16)
        ]  # fmt: skip
        if refused:
            raise Invalid(
                "The archive has unsafe entries (absolute, .., links or devices).",
                details={"entries": refused[:20]},
            )
        skipped = {"binary": 0, "vendored": 0, "huge": 0, "long_path": 0}
        total = 0
        for info in infos:
            if info.is_dir():
                continue
            if _vendored(info.filename):
                skipped["vendored"] += 1
                continue
            if info.file_size > MAX_FILE_BYTES:
                skipped["huge"] += 1
                continue
            if _too_long(info.filename):
                skipped["long_path"] += 1
                continue
            total += info.file_size
            if total > _budget():
                raise _too_large()
            if info.flag_bits & 0x1:  # zipfile would ask for the password (a RuntimeError)
                raise Invalid(
                    "The archive has an encrypted entry: send it without a password.",
                    details={"entries": [info.filename]},
                )
            try:
                data = archive.read(info)
            except _ZIP_DAMAGE:
                raise Invalid("The archive is damaged.", details={"entries": [info.filename]}) from None
            _write(dest, info.filename, data)
    return skipped
