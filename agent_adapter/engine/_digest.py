"""The canonical digest of validated arguments.

Canonical encoding, pinned (the golden-digest tests hold it): msgspec JSON with
``order="sorted"`` (object keys and Struct/dataclass fields sorted by name), no
whitespace, non-ASCII text as raw UTF-8 (never ``\\u`` escapes), floats in msgspec's
shortest round-trip form (``1.0``, ``1e16``, ``1.5e-07`` is written ``1.5e-7``), enums by
value, tuples as arrays, and negative zero written ``0.0`` (``-0.0 == 0.0``: equal values get
one encoding, as in RFC 8785). The digest is the SHA-256 of those bytes, in hex: SHA-256
because it binds approvals (a non-cryptographic hash would let a collision carry an
approval to other arguments), and because on this hardware it beats BLAKE2 and BLAKE3
at the sizes tool arguments have.
"""

from __future__ import annotations

import re
from hashlib import sha256
from typing import Any

import msgspec

__all__ = ["canonical", "digest"]

_encode = msgspec.json.Encoder(order="sorted").encode

# A JSON string, or a negative zero outside strings (msgspec writes -0.0 as "-0.0").
_NEG_ZERO = re.compile(rb'"(?:[^"\\]|\\.)*"|-0\.0(?![0-9eE])')


# The gate before the substitution: re's literal search scans ~2x faster than
# ``b"-0.0" in data`` here (0.27 vs 0.55 ns/byte), and it runs on every digest.
_MAY_HAVE_NEG_ZERO = re.compile(rb"-0\.0").search


def _zero(match: re.Match[bytes]) -> bytes:
    token = match.group()
    return b"0.0" if token == b"-0.0" else token


def canonical(args: Any) -> bytes:
    """The canonical bytes of ``args`` (what :func:`digest` hashes)."""
    data = _encode(args)
    if _MAY_HAVE_NEG_ZERO(data):  # rare: the substitution runs only when it may apply
        data = _NEG_ZERO.sub(_zero, data)
    return data


def digest(args: Any) -> str:
    """SHA-256 hex of the canonical encoding: equal values give equal digests, key order aside."""
    data = _encode(args)
    if _MAY_HAVE_NEG_ZERO(data):
        data = _NEG_ZERO.sub(_zero, data)
    return sha256(data).hexdigest()
