"""Uploads the unpacking cannot read or hold answer 422 with the error envelope, not a 500.

Each bad zip is a valid one built here with its headers patched: a zip's entry has a local
header before its data and a record in the central directory at the end, which is what zipfile
reads first (so a patch there alone is seen on opening the archive)."""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
import zlib

import pytest

from apps.graph.models import IndexJob

LOCAL, CENTRAL, END = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
NAME = "ab.py"


@pytest.fixture(autouse=True)
def _uploads(settings, tmp_path):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384
    settings.GRAPH_UPLOAD_DIR = str(tmp_path / "uploads")


def _zip(data: bytes = b"x = 1\n" * 50, compression: int = zipfile.ZIP_STORED) -> bytearray:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as out:
        out.writestr(NAME, data)
    return bytearray(buffer.getvalue())


def _patch(raw: bytearray, signature: bytes, offset: int, change, fmt: str = "<H") -> bytearray:
    """Rewrite the field `offset` bytes into every header that starts with `signature`."""
    at = raw.find(signature)
    while at != -1:
        (value,) = struct.unpack_from(fmt, raw, at + offset)
        struct.pack_into(fmt, raw, at + offset, change(value))
        at = raw.find(signature, at + 1)
    return raw


def _deflated(stream: bytes, claimed_size: int | None = None) -> bytearray:
    """An entry whose data is `stream` as it stands, marked as deflated (and, with
    `claimed_size`, claiming that many bytes compressed and unpacked)."""
    raw = _zip(stream)
    _patch(raw, LOCAL, 8, lambda _: zipfile.ZIP_DEFLATED)
    _patch(raw, CENTRAL, 10, lambda _: zipfile.ZIP_DEFLATED)
    if claimed_size is not None:
        for signature, sizes in ((LOCAL, 18), (CENTRAL, 20)):
            for offset in (sizes, sizes + 4):  # compressed size, then uncompressed size
                _patch(raw, signature, offset, lambda _: claimed_size, "<I")
    return raw


def _post(alice, api_client, body: bytes, name: str = "repo.zip"):
    client = api_client(alice.key)
    upload = io.BytesIO(body)
    upload.name = name
    return client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index", {"archive": upload}, **client.headers
    )


def _refused(response) -> dict:
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert not IndexJob.objects.exists()
    return error


def _utf8_flag_on_undecodable_name() -> bytes:
    raw = bytearray(bytes(_zip()).replace(NAME.encode(), b"\xff\xfe.py"))
    return bytes(_patch(raw, CENTRAL, 8, lambda flags: flags | 0x800))  # UnicodeDecodeError


def _unknown_zip_version() -> bytes:
    return bytes(_patch(_zip(), CENTRAL, 6, lambda _: 201))  # NotImplementedError: version 20.1


@pytest.mark.parametrize("build", [_utf8_flag_on_undecodable_name, _unknown_zip_version])
def test_a_zip_whose_directory_cannot_be_parsed_is_refused(alice, api_client, build):
    error = _refused(_post(alice, api_client, build()))
    assert error["message"] == "The archive is damaged." and error["details"] == {"field": "archive"}


def _corrupt_lzma() -> bytes:
    raw = _zip(compression=zipfile.ZIP_LZMA)
    data = 30 + len(NAME) + 4 + 5  # local header, name, LZMA's version and size, its properties
    raw[data : data + 20] = b"\xff" * 20
    return bytes(raw)  # lzma.LZMAError


def _deflate_reaching_before_its_start() -> bytes:
    compressor = zlib.compressobj(wbits=-15, zdict=b"x = 1\n" * 10)
    stream = compressor.compress(b"x = 1\n" * 10) + compressor.flush()
    return bytes(_deflated(stream))  # zlib.error: invalid distance too far back (into the zdict)


def _deflate_cut_short() -> bytes:
    # A stored deflate block of 65,535 bytes that has 6: the file ends first (EOFError).
    return bytes(_deflated(b"\x01\xff\xff\x00\x00x = 1\n", claimed_size=65_535))


def _entry_before_the_file() -> bytes:
    # The directory says it starts 1,000 bytes later than it does: so do the entries
    # (ValueError: negative seek value).
    return bytes(_patch(_zip(), END, 16, lambda offset: offset + 1_000, "<I"))


@pytest.mark.parametrize(
    "build", [_corrupt_lzma, _deflate_reaching_before_its_start, _deflate_cut_short, _entry_before_the_file]
)
def test_a_zip_entry_that_cannot_be_read_refuses_the_archive(alice, api_client, build):
    error = _refused(_post(alice, api_client, build()))
    assert error["message"] == "The archive is damaged." and error["details"] == {"entries": [NAME]}


def test_an_encrypted_zip_entry_is_refused_by_name(alice, api_client):
    raw = _patch(_zip(), LOCAL, 6, lambda flags: flags | 1)
    _patch(raw, CENTRAL, 8, lambda flags: flags | 1)  # RuntimeError: password required
    error = _refused(_post(alice, api_client, bytes(raw)))
    assert "encrypted" in error["message"] and error["details"] == {"entries": [NAME]}


def _zip_of(name: str) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        out.writestr(name, "x = 1\n")
        out.writestr("ok.py", "y = 1\n")
    return buffer.getvalue(), "repo.zip"


def _tar_of(name: str) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as out:
        for path, data in ((name, b"x = 1\n"), ("ok.py", b"y = 1\n")):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), "repo.tar.gz"


@pytest.mark.parametrize("pack", [_zip_of, _tar_of])
@pytest.mark.parametrize(
    "name", ["d/" * 250 + "a.py", "d/" * 1_000 + "a.py", ("x" * 250 + "/") * 20 + "a.py"]
)
def test_an_entry_nested_deeper_than_indexing_keeps_is_skipped_as_a_long_path(alice, api_client, pack, name):
    """os.makedirs recursed once a directory: near 1,000 deep a RecursionError (a 500), and a
    long but shallow path refused the archive (ENAMETOOLONG). Such a path is longer than indexing
    keeps (MAX_PATH), so it is skipped before anything is made."""
    response = _post(alice, api_client, *pack(name))
    assert response.status_code == 202, response.content
    job = IndexJob.objects.get()
    assert job.status == "done" and job.files == 1  # ok.py
    assert job.skipped_detail["long_path"] == 1


@pytest.mark.parametrize("pack", [_zip_of, _tar_of])
@pytest.mark.parametrize("name", ["d/" * 248 + "a.py", "node_modules/" + "d/" * 1_000 + "a.py"])
def test_deep_entries_within_the_limit_or_skipped_are_unpacked_as_before(alice, api_client, pack, name):
    response = _post(alice, api_client, *pack(name))
    assert response.status_code == 202, response.content
    assert IndexJob.objects.get().status == "done"


def test_a_tar_of_a_directory_with_its_root_entry_is_indexed(alice, api_client, tmp_path):
    """`tar czf repo.tgz -C ~/src/myrepo .` (the README's command) writes the root as a "."
    directory entry before "./app/models.py": the archive was refused whole as unsafe."""
    repo = tmp_path / "myrepo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "models.py").write_text("class Order:\n    pass\n")
    (repo / "app" / "views.py").write_text("from app.models import Order\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as out:
        out.add(repo, arcname=".")
    with tarfile.open(fileobj=io.BytesIO(buffer.getvalue())) as written:
        assert written.getnames()[0] == "."
    response = _post(alice, api_client, buffer.getvalue(), "repo.tgz")
    assert response.status_code == 202, response.content
    job = IndexJob.objects.get()
    assert job.status == "done" and job.files == 2


@pytest.mark.parametrize("name", ["/", "", "./.."])
def test_a_nameless_or_escaping_tar_directory_is_still_refused(alice, api_client, name):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as out:
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        out.addfile(info)
        data = b"x = 1\n"
        info = tarfile.TarInfo("ok.py")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
    _refused(_post(alice, api_client, buffer.getvalue(), "repo.tar.gz"))
