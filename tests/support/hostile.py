"""Hostile files for the reader tests, made small on disk and generated in the test: zip bombs,
a PDF that takes minutes to read, a sparse file. Nothing large is kept in the repository."""

from __future__ import annotations

import bz2
import functools
import io
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

MB = 1024 * 1024
WORD = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


@functools.lru_cache(maxsize=1)
def bzip2_zeros(megabytes: int = 64) -> bytes:
    """A bzip2 stream of `megabytes` of zeros, ~100 bytes long (made once: it takes seconds)."""
    compressor = bz2.BZ2Compressor(9)
    piece = bytes(MB)
    return b"".join(compressor.compress(piece) for _ in range(megabytes)) + compressor.flush()


def bzip2_bomb(path: Path, member: str, others: dict[str, bytes] | None = None) -> Path:
    """A zip whose last member, `member`, is bzip2 that unpacks to 64 MB of zeros while its
    headers claim 1,000 bytes (and the CRC of 1,000 zeros): the claim passes a size check."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in (others or {}).items():
            archive.writestr(name, data, zipfile.ZIP_DEFLATED)
        archive.writestr(member, bytes(1000), zipfile.ZIP_BZIP2)
    raw = bytearray(path.read_bytes())
    # zipfile writes true sizes; a bomb writes what it likes: its data swapped in by hand.
    payload = bzip2_zeros()
    central = raw.index(b"PK\x01\x02")
    local = raw.rfind(b"PK\x03\x04", 0, central)
    data_start = local + 30 + int.from_bytes(raw[local + 26:local + 28], "little") + int.from_bytes(
        raw[local + 28:local + 30], "little")
    shift = len(payload) - (central - data_start)
    raw[data_start:central] = payload
    raw[local + 18:local + 22] = len(payload).to_bytes(4, "little")  # compressed size
    end = raw.index(b"PK\x05\x06")
    entry = raw.rfind(b"PK\x01\x02", 0, end)  # the last member's central entry
    raw[entry + 20:entry + 24] = len(payload).to_bytes(4, "little")
    offset = int.from_bytes(raw[end + 16:end + 20], "little") + shift
    raw[end + 16:end + 20] = offset.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    return path


def deflated(path: Path, members: dict[str, bytes | Iterator[bytes]]) -> Path:
    """A zip of deflated members; an iterator member is streamed in, never held whole."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, data in members.items():
            if isinstance(data, bytes):
                archive.writestr(name, data)
                continue
            with archive.open(name, "w", force_zip64=True) as member:
                for piece in data:
                    member.write(piece)
    return path


def repeated(unit: bytes, megabytes: int, head: bytes = b"", tail: bytes = b"") -> Iterator[bytes]:
    """`head`, then `unit` repeated to about `megabytes` MB, then `tail`, a megabyte at a time."""
    yield head
    piece = unit * (MB // len(unit))
    for _ in range(megabytes):
        yield piece
    yield tail


def empty_paragraphs(megabytes: int) -> Iterator[bytes]:
    """A Word body of nothing but empty paragraphs."""
    head = f'<?xml version="1.0"?><w:document {WORD}><w:body>'.encode()
    return repeated(b"<w:p/>", megabytes, head, b"</w:body></w:document>")


def docx_bytes(paragraphs: list[str]) -> bytes:
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    xml = f'<?xml version="1.0"?><w:document {WORD}><w:body>{body}</w:body></w:document>'
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", xml)
    return buffer.getvalue()


CONTAINER = (b'<?xml version="1.0"?><container xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             b'<rootfiles><rootfile full-path="book.opf"/></rootfiles></container>')


def epub_members(chapters: dict[str, bytes | Iterator[bytes]]) -> dict[str, bytes | Iterator[bytes]]:
    items = "".join(f'<item id="c{n}" href="{name}" media-type="application/xhtml+xml"/>'
                    for n, name in enumerate(chapters))
    spine = "".join(f'<itemref idref="c{n}"/>' for n in range(len(chapters)))
    opf = (f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf"><manifest>{items}'
           f"</manifest><spine>{spine}</spine></package>").encode()
    return {"META-INF/container.xml": CONTAINER, "book.opf": opf, **chapters}


def slow_pdf(operators: int = 900_000) -> bytes:
    """A one-page PDF of a few KB whose content stream is `operators` text-showing operators
    (1.8 million tokens, under pypdf's own limit of 2 million a stream): pypdf reads some
    40,000 tokens a second, so this one takes a minute or more."""
    stream = zlib.compress(b"BT " + b"(a) Tj " * operators + b"ET", 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
         b"/Resources << /Font << /F1 5 0 R >> >> >>"),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.writelines(b"%010d 00000 n \n" % offset for offset in offsets)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()
