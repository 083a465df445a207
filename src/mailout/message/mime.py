"""A small, fast MIME builder for transactional messages.

The stdlib's ``email.message`` / ``headerregistry`` machinery costs milliseconds
per message, most of it parsing back the headers it is given. Here every header
is formatted once, straight to wire bytes:

* Unstructured values (Subject, the idempotency key, extras) stay as they are
  when they are printable ASCII, folded before whitespace at 78 characters;
  anything else (non-ASCII, controls, text that a reader would take for an
  RFC 2047 encoded-word) becomes base64 encoded-words of at most 76 characters
  per line, split only between characters.
* Mailboxes keep their address as is; a display name is written as atoms, as a
  quoted-string, or as encoded-words, whichever is the first that is exact.
* Bodies are UTF-8 with canonical CRLF line ends, quoted-printable (or base64
  when that is shorter), so no line passes 76 octets and no server needs
  8BITMIME. Two bodies make a multipart/alternative, text first.
* Inline parts (images referenced as ``cid:`` from the HTML) join the HTML in a
  multipart/related; attachments make the whole a multipart/mixed. Their bytes
  are base64, encoded in chunks straight into the output, so a large file is
  copied once, not once per layer. Filenames that are not short printable ASCII
  are written per RFC 2231 (``filename*=utf-8''...``, continued when long).

Callers check values for line breaks and control characters first: this module
formats, it does not validate.
"""

from __future__ import annotations

import base64
import binascii
import random
import re
from collections.abc import Iterable, Iterator, Sequence

from mailout.models import Attachment

CRLF = "\r\n"
FOLD_AT = 78  # RFC 5322 recommended line length, CRLF excluded
ENCODED_LINE = 76  # RFC 2047: a line holding encoded-words
MAX_LINE = 998  # RFC 5322 hard limit, CRLF excluded
_B64_LINE = 76  # base64 body line length (RFC 2045)
_QP_LINE = 76  # quoted-printable line length (RFC 2045)
# Bytes quoted-printable may carry as they are (RFC 2045 6.7): printable ASCII but
# "=", and tab; plus the line end itself.
_QP_LITERAL = bytes(range(0x20, 0x7F)).replace(b"=", b"") + b"\t\n"
_TRAILING_WHITESPACE = (b"=20", b"=09")  # a space or tab before a line break, escaped
_ESCAPED_WHITESPACE = {0x20: b"=20", 0x09: b"=09"}
_FEW_LINES = 16  # up to this many lines, trailing whitespace is looked for line by line

_EW_PREFIX = "=?utf-8?b?"
_EW_OVERHEAD = len(_EW_PREFIX) + len("?=")
_TOKEN = re.compile(r"[ \t]*[^ \t]+|[ \t]+$")
# Display names made only of atoms separated by single spaces can go out bare.
_ATOMS = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?: [A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
_QUOTED_SPECIALS = re.compile(r'(["\\])')
_QUOTABLE = re.compile(r"[ -~\t]*")  # printable ASCII and tab fit in a quoted-string


# -- headers -------------------------------------------------------------------


def raw(name: str, value: str) -> str:
    """``name: value`` exactly as given (Message-ID, Date, MIME-Version)."""
    return f"{name}: {value}{CRLF}"


def _plain(value: str) -> bool:
    """Whether ``value`` can go out as it is (folded, but not encoded)."""
    # "=?" would be read back as the start of an RFC 2047 encoded-word, and
    # leading whitespace is dropped by parsers as part of the field separator.
    return value.isascii() and value.isprintable() and "=?" not in value and value[:1] != " "


def _plain_tokens(name: str, value: str) -> list[str] | None:
    """The fold tokens of ``value`` if it can go out as it is, else None."""
    if not _plain(value):
        return None
    tokens = _TOKEN.findall(value)
    # A line may hold a whole token past the fold point: keep it under 998.
    longest = max(map(len, tokens), default=0)
    return tokens if len(name) + 2 + FOLD_AT + longest <= MAX_LINE else None


def unstructured(name: str, value: str) -> str:
    """An unstructured header, folded, ending in CRLF, that decodes back to ``value``."""
    if len(name) + 2 + len(value) <= FOLD_AT and _plain(value):
        return f"{name}: {value}{CRLF}"  # one line: what folding would give, sooner
    tokens = _plain_tokens(name, value)
    if tokens is not None:
        return _fold_plain(name, tokens)
    first = max(ENCODED_LINE - len(name) - 2, _EW_OVERHEAD + 8)  # 8: one 4-byte character
    words = encoded_words(value, first_room=first)
    # Decoders drop the whitespace between adjacent encoded-words, so the folds
    # add nothing to the value.
    return f"{name}: " + f"{CRLF} ".join(words) + CRLF


def _fold_plain(name: str, tokens: list[str]) -> str:
    """Fold before whitespace only, so unfolding restores the value exactly."""
    lines: list[str] = []
    line = f"{name}: " + (tokens[0] if tokens else "")
    for piece in tokens[1:]:
        # Never leave a whitespace-only continuation line (it would end the header
        # block for some readers and lose the whitespace for others).
        if len(line) + len(piece) > FOLD_AT and piece[0] in " \t" and piece.strip():
            lines.append(line)
            line = piece
        else:
            line += piece
    lines.append(line)
    return CRLF.join(lines) + CRLF


def encoded_words(value: str, *, first_room: int = ENCODED_LINE - 1) -> list[str]:
    """``value`` as base64 encoded-words: the first at most ``first_room`` long,
    the others at most 75 (so each fits on a continuation line after one space).

    Words split only between characters, so each decodes on its own.
    """
    data = value.encode("utf-8")
    words: list[str] = []
    room = first_room
    start = 0
    while True:
        # Whole base64 quads: 3 bytes per 4 characters of room.
        size = max((room - _EW_OVERHEAD) // 4 * 3, 4)
        end = start + size
        if end < len(data):
            while data[end] & 0xC0 == 0x80:  # inside a UTF-8 sequence: back up
                end -= 1
        chunk = data[start:end]
        words.append(_EW_PREFIX + base64.b64encode(chunk).decode("ascii") + "?=")
        start = end
        room = ENCODED_LINE - 1
        if start >= len(data):
            return words


def display_name(name: str, *, first_room: int) -> list[str]:
    """The tokens of an RFC 5322 phrase that decodes back to ``name`` exactly."""
    # A very long name would make a line past 998 unless it folds as encoded-words.
    if name.isascii() and "=?" not in name and len(name) < MAX_LINE - 200:
        if _ATOMS.fullmatch(name):
            return name.split(" ")
        if _QUOTABLE.fullmatch(name):
            return ['"' + _QUOTED_SPECIALS.sub(r"\\\1", name) + '"']
    # Note: Python's own parser (3.11) puts a space between adjacent encoded-words
    # of a display name, against RFC 2047 6.2; a name that needs several words
    # reads back with extra spaces there, in Python only.
    return encoded_words(name, first_room=first_room)


def address(name: str, mailboxes: Sequence[tuple[str, str]]) -> str:
    """An address header (From, To, Reply-To) for ``(display name, addr-spec)`` pairs.

    The addr-specs must be ASCII (no SMTPUTF8); display names may be anything.
    """
    tokens: list[str] = []
    for i, (display, addr_spec) in enumerate(mailboxes):
        if display:
            room = ENCODED_LINE - len(name) - 2 if not tokens else ENCODED_LINE - 1
            tokens += display_name(display, first_room=room)
            tokens.append(f"<{addr_spec}>")
        else:
            tokens.append(addr_spec)
        if i < len(mailboxes) - 1:
            tokens[-1] += ","
    return _fold_tokens(name, tokens)


def _fold_tokens(name: str, tokens: Iterable[str]) -> str:
    """Tokens joined by single spaces, folding before a token that would pass 76."""
    lines: list[str] = []
    line = f"{name}:"
    first = True
    for token in tokens:
        if not first and len(line) + 1 + len(token) > ENCODED_LINE:
            lines.append(line)
            line = ""
        line += " " + token
        first = False
    lines.append(line)
    return CRLF.join(lines) + CRLF


# -- bodies --------------------------------------------------------------------


def encode_body(content: str) -> tuple[str, bytes]:
    """(Content-Transfer-Encoding, body) for ``content`` as UTF-8 text.

    Line ends become CRLF (a lone CR or LF is a line end too) and the body ends
    with one, as the stdlib does. Quoted-printable keeps ASCII text readable;
    base64 wins for mostly non-Latin text, where quoted-printable triples it.
    Raises UnicodeEncodeError for lone surrogates.
    """
    text = content.replace("\r\n", "\n").replace("\r", "\n")
    if not text.endswith("\n"):
        text += "\n"
    data = text.encode("utf-8")
    qp = _quoted_printable(data)
    b64_size = -(-len(data) // 3) * 4
    if len(qp) <= b64_size + b64_size // _B64_LINE * 2:
        return "quoted-printable", qp
    # base64 encodes the canonical (CRLF) form, as RFC 2045 requires for text.
    encoded = base64.b64encode(text.replace("\n", "\r\n").encode("utf-8"))
    lines = [encoded[i : i + _B64_LINE] for i in range(0, len(encoded), _B64_LINE)]
    return "base64", b"\r\n".join(lines) + b"\r\n"


def _quoted_printable(data: bytes) -> bytes:
    """Quoted-printable with CRLF line ends and no line over 76 octets."""
    if not data.translate(None, _QP_LITERAL):
        # Printable ASCII but "=" (text with one takes the b2a_qp path below), tabs
        # and line ends: the common case for generated text and HTML. Only whitespace
        # at a line end needs escaping (RFC 2045 6.7).
        escaped = data
        if escaped.count(b"\n") < _FEW_LINES:
            # A look at each line's last octet: cheaper than two searches of the whole
            # text for " \n" and "\t\n" (slow where spaces are frequent, as in text).
            lines = [line[:-1] + _ESCAPED_WHITESPACE[line[-1]]
                     if line and line[-1] in _ESCAPED_WHITESPACE else line
                     for line in escaped.split(b"\n")]
        else:
            escaped = escaped.replace(b" \n", b"=20\n").replace(b"\t\n", b"=09\n")
            lines = escaped.split(b"\n")
    else:
        # istext: "\n" stays a hard line break; with only "\n" in the input every
        # break comes out as "\n" (soft ones as "=\n").
        lines = binascii.b2a_qp(data, istext=True).split(b"\n")
    # Long lines: all of them on the first path; on the second, b2a_qp lets a line
    # grow to 78 when it ends in whitespace (written "=20").
    if max(map(len, lines)) > _QP_LINE:
        lines = [_soft_break(line) if len(line) > _QP_LINE else line for line in lines]
    return b"\r\n".join(lines)


def _soft_break(line: bytes) -> bytes:
    """``line`` in pieces of at most 75 octets joined by soft line breaks ("=" CRLF).

    Whitespace may end a piece: the "=" follows it on that line (RFC 2045 6.7). The
    last piece may be 76 octets long (it ends in the hard line break, not in "=").
    """
    step = _QP_LINE - 1
    body, tail = line, b""
    if line[-3:] in _TRAILING_WHITESPACE:  # the escaped whitespace that ends a line
        body, tail = line[:-3], line[-3:]
    if b"=" not in body:
        # No escape to keep whole: plain slices (the common long line of ASCII text).
        pieces = [body[i : i + step] for i in range(0, len(body), step)]
        if tail and len(pieces[-1]) + len(tail) <= _QP_LINE:
            pieces[-1] += tail
        elif tail:
            pieces.append(tail)
        return b"=\r\n".join(pieces)
    pieces = []
    start = 0
    end = len(line)
    while end - start > _QP_LINE:
        cut = start + step
        # Never cut an "=XX" escape in two: one starting in the last two octets moves
        # to the next piece (two "=" cannot both be there: an escape is three long).
        escape = line.rfind(b"=", cut - 2, cut)
        if escape != -1:
            cut = escape
        pieces.append(line[start:cut])
        start = cut
    pieces.append(line[start:])
    return b"=\r\n".join(pieces)


def _part(subtype: str, content: str) -> bytes:
    cte, body = encode_body(content)
    head = (
        f'Content-Type: text/{subtype}; charset="utf-8"{CRLF}'
        f"Content-Transfer-Encoding: {cte}{CRLF}{CRLF}"
    )
    return head.encode("ascii") + body


def new_boundary() -> str:
    # "=_" never occurs in quoted-printable or base64 text, so no body can contain
    # the boundary; the random part keeps nested or forwarded copies apart. It
    # needs no secrecy, so no system call (os.urandom costs more than the rest).
    return f"=_{random.getrandbits(96):024x}"


def build(headers: Sequence[str] | bytes, text: str | None, html: str | None,
          attachments: Sequence[Attachment] = ()) -> bytes:
    """The whole message: ``headers`` (formatted lines, e.g. from :func:`unstructured`,
    or those lines already joined and encoded), then the body: text/plain, text/html,
    or multipart/alternative with both; with ``attachments``, wrapped in
    multipart/related (inline parts, when there is HTML) and multipart/mixed.

    At least one of ``text`` and ``html`` must be given.
    """
    head = headers if isinstance(headers, bytes) else "".join(headers).encode("ascii")
    if text is None and html is None:
        raise ValueError("a message needs a text or an html body")
    if not attachments:
        return head + _body(text, html)  # the plain message: no extra layer, no list
    chunks: list[bytes] = [head]
    inline = [a for a in attachments if a.inline] if html is not None else []
    attached = [a for a in attachments if not (a.inline and html is not None)]
    mixed = new_boundary() if attached else None
    if mixed is not None:
        chunks.append(_multipart_head("mixed", mixed))
    if inline:
        related = new_boundary()
        chunks.append(_multipart_head("related", related, 'type="text/html"' if text is None
                                      else 'type="multipart/alternative"'))
        chunks.append(_body(text, html))
        for part in inline:
            chunks += _delimited(related, part)
        chunks.append(f"{CRLF}--{related}--{CRLF}".encode("ascii"))
    else:
        chunks.append(_body(text, html))
    if mixed is not None:
        for part in attached:
            chunks += _delimited(mixed, part)
        chunks.append(f"{CRLF}--{mixed}--{CRLF}".encode("ascii"))
    # Nested parts begin with their own delimiter: the first one of each multipart
    # follows its Content-Type header directly (see _multipart_head).
    return b"".join(chunks)


def _body(text: str | None, html: str | None) -> bytes:
    """text/plain, text/html, or a multipart/alternative of both, with its headers."""
    if text is not None and html is not None:
        boundary = new_boundary()
        delimiter = f"--{boundary}{CRLF}".encode("ascii")
        content_type = f'Content-Type: multipart/alternative; boundary="{boundary}"{CRLF}{CRLF}'
        # Each part's body ends in CRLF; the CRLF before "--boundary" belongs to
        # the delimiter, so the part keeps its final line break when parsed.
        return b"".join((
            content_type.encode("ascii"),
            delimiter,
            _part("plain", text),
            b"\r\n",
            delimiter,
            _part("html", html),
            f"{CRLF}--{boundary}--{CRLF}".encode("ascii"),
        ))
    if text is not None:
        return _part("plain", text)
    assert html is not None  # build() checked
    return _part("html", html)


def _multipart_head(subtype: str, boundary: str, extra: str = "") -> bytes:
    """The Content-Type header of a multipart, and the delimiter of its first part."""
    tokens = [f"multipart/{subtype};", f'boundary="{boundary}"' + (";" if extra else "")]
    if extra:
        tokens.append(extra)
    return (_fold_tokens("Content-Type", tokens) + f"{CRLF}--{boundary}{CRLF}").encode("ascii")


def _delimited(boundary: str, attachment: Attachment) -> Iterator[bytes]:
    """The delimiter before ``attachment`` (the previous part ends in CRLF), then it."""
    yield f"{CRLF}--{boundary}{CRLF}".encode("ascii")
    yield from attachment_part(attachment)


def attachment_part(attachment: Attachment) -> Iterator[bytes]:
    """One attachment or inline part: its headers, then its bytes as base64 lines.

    ``content_type``, ``filename`` and ``cid`` must already be checked (no line
    breaks or control characters; a cid of printable ASCII without ``<>``).
    """
    disposition = "inline" if attachment.inline else "attachment"
    head = [
        _parameterized("Content-Type", attachment.content_type, "name", attachment.filename),
        "Content-Transfer-Encoding: base64" + CRLF,
        _parameterized("Content-Disposition", disposition, "filename", attachment.filename),
    ]
    if attachment.cid:
        head.append(raw("Content-ID", f"<{attachment.cid}>"))
    yield ("".join(head) + CRLF).encode("ascii")
    yield from base64_lines(attachment.content)


_B64_BLOCK = 57 * 1024  # input bytes per chunk: 1,024 whole lines of 76 characters


def base64_lines(data: bytes) -> Iterator[bytes]:
    """``data`` as base64 in lines of 76 characters, each ending in CRLF, in chunks
    of 1,024 lines: never a second whole copy of ``data`` besides the output."""
    view = memoryview(data)
    for start in range(0, len(data), _B64_BLOCK):
        encoded = binascii.b2a_base64(view[start:start + _B64_BLOCK], newline=False)
        yield b"\r\n".join([encoded[i:i + _B64_LINE]
                             for i in range(0, len(encoded), _B64_LINE)]) + b"\r\n"


def base64_size(size: int) -> int:
    """How many octets :func:`base64_lines` writes for ``size`` bytes of content."""
    chars = -(-size // 3) * 4
    return chars + -(-chars // _B64_LINE) * 2


# RFC 2231 attribute-char: any printable ASCII but space, "*", "'", "%" and tspecials.
_ATTRIBUTE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789!#$&+-.^_`|~")
_SHORT_PARAM = 60  # a value this long or shorter may go out as a quoted-string
_SEGMENT = 60  # characters per RFC 2231 continuation segment


def _parameterized(name: str, value: str, param: str, param_value: str) -> str:
    """``name: value; param="..."``, folded between parameters; ``param_value`` as a
    quoted-string when it is short printable ASCII, else per RFC 2231."""
    tokens = [value + ";"]
    tokens += _rfc2231(param, param_value)
    return _fold_tokens(name, tokens)


def _rfc2231(param: str, value: str) -> list[str]:
    """The tokens of one parameter, e.g. ``filename="a.pdf"`` or, RFC 2231 encoded
    and continued, ``filename*0*=utf-8''%E2%82%AC;`` ``filename*1*=...``."""
    if value.isascii() and value.isprintable() and len(value) <= _SHORT_PARAM:
        quoted = _QUOTED_SPECIALS.sub(r"\\\1", value)
        return [f'{param}="{quoted}"']
    pieces: list[str] = []
    current = ""
    for char in value:
        encoded = char if char in _ATTRIBUTE_CHARS else "".join(
            f"%{b:02X}" for b in char.encode("utf-8"))
        if len(current) + len(encoded) > _SEGMENT:
            pieces.append(current)
            current = ""
        current += encoded
    pieces.append(current)
    if len(pieces) == 1:
        return [f"{param}*=utf-8''{pieces[0]}"]
    charset = "utf-8''"  # RFC 2231: charset, empty language, then the value
    tokens = [f"{param}*{i}*={charset if i == 0 else ''}{piece};"
              for i, piece in enumerate(pieces)]
    tokens[-1] = tokens[-1][:-1]
    return tokens
