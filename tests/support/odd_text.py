"""Files whose text is not what an encoder expects, made in the test: a PDF whose font maps a
code to half a surrogate pair (pypdf then gives a lone surrogate, as it does for docling's
Korean PDFs `skipped_1page.pdf` and `skipped_2pages.pdf`)."""

from __future__ import annotations

import io

LONE = "\ud800"


def surrogate_pdf(sentence: str = "The lamp runs for ten hours") -> bytes:
    """A one-page PDF showing `sentence` then "AB", its font's ToUnicode map sending "B" to
    <D800>: pypdf reads `sentence + " A\\ud800"`."""
    cmap = (b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
            b"/CMapName /Half def 1 begincodespacerange <00> <FF> endcodespacerange\n"
            b"2 beginbfchar <41> <0041> <42> <D800> endbfchar\n"
            b"endcmap CMapName currentdict /CMap defineresource pop end end\n")
    content = b"BT /F1 12 Tf 72 720 Td (%s AB) Tj ET" % sentence.encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
         b"/Contents 4 0 R >>"),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(cmap), cmap),
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()
