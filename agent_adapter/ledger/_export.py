"""The exported ledger: one JSON line per stored record, and reading such a line back.

A line is the record's payload (the event's JSON object, ``"type"`` first) with the chain
fields put in after the tag: ``{"type": ..., "seq": ..., "prev": ..., "hash": ..., <the
payload's other fields, in their stored order>}``. It is written from the stored bytes,
not from a decoded event, so a field or an event type this version does not know is
exported too. Reading a line back removes ``seq``, ``prev`` and ``hash`` and encodes the
rest again: for a line as ``export`` wrote it, that gives the stored payload byte for
byte (msgspec's JSON encoding of a decoded value is the encoding it was decoded from),
so ``check_chain`` recomputes every hash exactly, keyed (with the key) or not. Any
change to a value, a key, or the order of keys changes those bytes and is found at its
seq; whitespace is not part of the check.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._chain import Record

__all__ = ["export_line", "parse_export_line"]

_CHAIN_FIELDS = ("seq", "prev", "hash")
_encode = msgspec.json.encode
_decode = msgspec.json.decode


def export_line(record: Record) -> bytes:
    """The export line of one stored record (no newline).

    Raises ``ValueError`` naming the seq when the payload is not a JSON object with a
    ``"type"`` (a corrupt record: nothing faithful can be written for it).
    """
    try:
        data = _decode(record.payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"the payload of seq {record.seq} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError(f"the payload of seq {record.seq} is not an event (no type)")
    line: dict[str, Any] = {
        "type": data.pop("type"),
        "seq": record.seq,
        "prev": record.prev,
        "hash": record.hash,
    }
    for name in _CHAIN_FIELDS:
        # Stored payloads leave the chain fields out; one that has them (tampered) keeps
        # them in the check under another name rather than being overwritten silently.
        if name in data:
            data[f"payload.{name}"] = data.pop(name)
    line.update(data)
    return _encode(line)


def parse_export_line(line: bytes | str) -> Record:
    """The stored record an export line stands for: chain fields and payload bytes.

    Raises ``ValueError`` with what is wrong ("is not JSON ...", "has no \\"seq\\" ...")
    for a line that is not one ``export_line`` could have written; the caller names
    the line. The event itself is not decoded here: ``decode_event(record.payload)``.
    """
    if not line.strip():
        raise ValueError("is empty")
    try:
        data = _decode(line)
    except msgspec.DecodeError as exc:
        raise ValueError(f"is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("is not a JSON object")
    tag = data.get("type")
    if not isinstance(tag, str):
        raise ValueError('has no "type" (a string)')
    seq = data.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError('has no "seq" (an integer)')
    for name in ("prev", "hash"):
        if not isinstance(data.get(name), str):
            raise ValueError(f'has no "{name}" (a string)')
    prev, stored = data.pop("prev"), data.pop("hash")
    del data["seq"]
    for name in _CHAIN_FIELDS:
        if f"payload.{name}" in data:
            data[name] = data.pop(f"payload.{name}")
    # "type" is the first key of every payload; the others keep the line's order.
    payload = _encode({"type": data.pop("type"), **data})
    return Record(
        seq=seq,
        type=tag,
        run_id=_text(data.get("run_id")),
        call_id=_text(data.get("call_id")),
        tool=_text(data.get("tool")),
        ts=data["ts"] if isinstance(data.get("ts"), float) else 0.0,
        payload=payload,
        prev=prev,
        hash=stored,
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
