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

Speed: plain JSON values (dict, list, str, int within 64 bits, float, bool, None) are
encoded with orjson, 1.4-2x faster than msgspec here, whose output is byte-for-byte the
pinned form except one spelling: a positive float exponent, ``1e+16``, which is rewritten
``1e16``. Anything orjson does not encode natively (Structs, dataclasses, datetimes, str/int
subclasses, ints over 64 bits, ...) takes the msgspec path itself. The fast path is used
only if it reproduces the pinned bytes of a set of probe values when this module is
imported (a future orjson that spells something differently falls back, never drifts);
``tests/test_digest.py`` checks the two paths agree on random values and every code point.
One input is outside the rule: an ``orjson.Fragment`` (pre-encoded JSON), which orjson
embeds as written where msgspec refuses it; validation refuses it in arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from hashlib import sha256
from typing import Any

import msgspec

__all__ = ["canonical", "digest"]

_msgspec_encode = msgspec.json.Encoder(order="sorted").encode

# In the encoded bytes, outside strings: a negative zero (msgspec and orjson write -0.0 as
# "-0.0"), or the "+" of a positive float exponent (orjson writes 1e16 as "1e+16"). JSON
# strings are matched whole so that text inside them is never touched.
_FIXUPS = re.compile(rb'"(?:[^"\\]|\\.)*"|-0\.0(?![0-9eE])|(?<=[0-9])e\+')

# The gate before the substitution: re's literal search scans ~2x faster than
# ``b"-0.0" in data`` here (0.27 vs 0.55 ns/byte).
_MAY_HAVE_NEG_ZERO = re.compile(rb"-0\.0").search


def _fixup(match: re.Match[bytes]) -> bytes:
    token = match.group()
    if token == b"-0.0":
        return b"0.0"
    if token == b"e+":
        return b"e"
    return token


def _reference(args: Any) -> bytes:
    """The pinned form through msgspec alone (the definition the fast path must match)."""
    data = _msgspec_encode(args)
    if _MAY_HAVE_NEG_ZERO(data):
        data = _FIXUPS.sub(_fixup, data)
    return data


def _orjson() -> tuple[Callable[..., bytes], int] | None:
    """orjson's ``dumps`` and options, if installed and it reproduces the pinned bytes."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency; msgspec still works
        return None
    # Subclasses, datetimes and dataclasses go to ``default`` (none: orjson raises) and
    # then to msgspec, whose spelling of them is the pinned one.
    option = (
        orjson.OPT_SORT_KEYS
        | orjson.OPT_PASSTHROUGH_SUBCLASS
        | orjson.OPT_PASSTHROUGH_DATETIME
        | orjson.OPT_PASSTHROUGH_DATACLASS
    )
    probes: list[Any] = [
        {"b": 1e16, "a": 1.5e-7, "c": -0.0, "d": 1e300, "e": 5e-324, "f": 0.1, "g": 1e-5},
        {"é": "Zoë 東京 🚀", "a": 'q"\\\n\t\b\f\r\x00\x1f\x7f\u2028', "\U0001f600": 1, "\uffff": 2},
        {"n": [None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.0, -2.5e-300]},
        {"nested": {"z": [{"b": 2, "a": 1}], "a": "-0.0 e+5 1e+5"}, "": float("inf")},
    ]
    try:
        agrees = all(_fixed(orjson.dumps(p, option=option)) == _reference(p) for p in probes)
    except Exception:  # pragma: no cover - an orjson that cannot encode the probes
        agrees = False
    return (orjson.dumps, option) if agrees else None


def _fixed(data: bytes) -> bytes:
    if 43 in data or (45 in data and _MAY_HAVE_NEG_ZERO(data)):
        data = _FIXUPS.sub(_fixup, data)
    return data


_FAST = _orjson()


if _FAST is not None:
    _dumps, _OPTION = _FAST

    def canonical(args: Any) -> bytes:
        """The canonical bytes of ``args`` (what :func:`digest` hashes)."""
        try:
            data = _dumps(args, None, _OPTION)
        except TypeError:  # orjson.JSONEncodeError is one: not plain JSON, use msgspec
            return _reference(args)
        # 43 is "+" and 45 is "-": ``int in bytes`` is one memchr (~20 ns), ``b"+" in
        # bytes`` ~160 ns. Rare: the substitution runs only when it may apply.
        if 43 in data or (45 in data and _MAY_HAVE_NEG_ZERO(data)):
            data = _FIXUPS.sub(_fixup, data)
        return data

else:  # pragma: no cover - without a usable orjson
    canonical = _reference


def digest(args: Any) -> str:
    """SHA-256 hex of the canonical encoding: equal values give equal digests, key order aside."""
    return sha256(canonical(args)).hexdigest()
