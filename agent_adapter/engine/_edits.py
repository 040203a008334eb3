"""A reviewer's edits checked against a tool's JSON Schema, without the tool's registry.

A deferred request records the tool's schema (``approval.pending``), so whoever answers it
(``DeferredApproval.answer``, the CLI, a web inbox) can refuse an edit that does not fit
before it is recorded: a recorded answer is final, and an edit that does not validate
would only fail the call later. The executor still validates the edit with the tool's
own validator when the call comes back; this check is the same JSON Schema, read strictly
(an ``integer`` is never ``1.0``, as for a signature's ``int``; a schema tool's own
validator would take ``1.0``), so what it accepts the executor accepts in all but rare
cases (a ``format`` such as ``date-time`` is checked only by the executor).

Where an edit leaves a redacted value as shown (``"[redacted]"``), the executor puts the
requested value back: such a placeholder is never refused here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ._redaction import REDACTED

__all__ = ["EditProblem", "edit_problem"]


class EditProblem(NamedTuple):
    """Why edits do not fit a schema: ``field`` (a dotted path, ``""`` for the arguments as
    a whole, e.g. a missing one) and the validator's ``message``."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def edit_problem(
    schema: Mapping[str, Any], edits: Any, redact: Iterable[str] = ()
) -> EditProblem | None:
    """The most relevant way ``edits`` do not fit ``schema``, or None when they fit.

    A schema that is not valid JSON Schema gives None: nothing can be checked here, and
    the executor validates the edit when the call runs.
    """
    import jsonschema

    validator = _validator(schema)
    if validator is None:
        return None
    paths = frozenset(redact)
    try:
        errors = [
            e
            for e in validator.iter_errors(edits)
            if not _placeholder(edits, e.absolute_path, paths)
        ]
    except Exception:  # a well-formed schema can still fail here (a $ref to nowhere)
        return None
    error = jsonschema.exceptions.best_match(errors)
    if error is None:
        return None
    return EditProblem(_dotted(error.absolute_path), error.message)


def _validator(schema: Mapping[str, Any]) -> Any:
    import jsonschema

    if not isinstance(schema, Mapping):
        return None
    schema = dict(schema)
    try:
        base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        base.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return None
    return _strict(base)(schema)


@functools.cache
def _strict(base: Any) -> Any:
    """``base`` with ``integer`` meaning an int (msgspec's strict validation refuses 1.0)."""
    import jsonschema

    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=checker)


def _placeholder(edits: Any, at: Iterable[Any], paths: frozenset[str]) -> bool:
    """True when ``at`` reaches a ``"[redacted]"`` at one of the redaction ``paths``."""
    if not paths:
        return False
    value = edits
    names = []
    for step in at:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return False
        if isinstance(step, str):
            names.append(step)  # list positions are not part of a redaction path
    return value == REDACTED and ".".join(names) in paths


def _dotted(at: Iterable[Any]) -> str:
    field = ""
    for step in at:
        field += f"[{step}]" if isinstance(step, int) else (f".{step}" if field else str(step))
    return field
