"""A JSON-Schema problem in a file the user wrote -> one sentence naming what is wrong and what is allowed.

Every file kvproof reads against a schema (a card, ``timings.json``,
``targets.yaml``, the equivalence marks, ``configurations.yaml``) is checked
by :func:`problems`: one :class:`SchemaProblem` per way the document breaks
its schema, with the field's path (a tuple of keys and list indexes), the
value found there, the JSON Schema keyword that failed and a message saying
what is wrong and what is allowed (the schema's ``x-allowed`` when it has
one, the choices of an ``enum`` with the field's ``description``). A missing
field is one problem per missing key, its path ending in that key; an
unknown field is one problem per key, with the nearest allowed name when
the caller passes ``near`` (``harness.select.suggest.did_you_mean``). A key
the schema's ``propertyNames`` refuses is a problem of the object holding
it, its value the key.

The callers keep their framing: the file's name, the line (YAML files), how
a path and a value are spelled in the file's notation (``witnesses[0].test``
and a Python repr for YAML, ``$.cards["KV-T1"].honest_s`` and JSON for
``timings.json``, ``targets/NAME/known/0`` for ``targets.yaml``), and their
own problem and exception types. Nothing here imports the harness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Near = Callable[[str, Iterable[str]], str]  # (word, choices) -> " (did you mean `x`?)" or ""


@dataclass(frozen=True)
class SchemaProblem:
    """One way a document breaks its schema: which field, what it holds, what is wrong and allowed."""

    parts: tuple[Any, ...]  # the field's path from the document's top: keys and list indexes; () for the document
    value: Any  # what the document holds there (None for a missing field: see ``missing``)
    message: str  # what is wrong and what is allowed, e.g. "not allowed; allowed: N, A, C, D (Kind of claim: ...)"
    validator: str  # the keyword that failed: "required", "additionalProperties", "type", "enum", "pattern", ...
    allowed: Any = None  # the keyword's value in the schema (the type(s), the choices, the limit, the pattern);
    # for an unknown field, the names allowed there

    @property
    def missing(self) -> bool:
        """The field is not there (its path ends in the missing key); there is no value to show."""
        return self.validator == "required"

    @property
    def unknown(self) -> bool:
        """The field is one the schema does not allow (its path ends in the unknown key)."""
        return self.validator == "additionalProperties"


def problems(
    data: Any, schema: Mapping[str, Any], *, near: Near | None = None, field_form: str = "`{}:`"
) -> list[SchemaProblem]:
    """Every way ``data`` breaks ``schema`` (JSON Schema draft 2020-12), in the order the validator finds them.

    ``field_form``: how a missing field is written in the file's notation ("`{}:`" for YAML, '`"{}":`' for JSON).
    """
    import jsonschema  # only when there is a file to check: importing the harness stays light

    found: list[SchemaProblem] = []
    absent: set[tuple[Any, ...]] = set()  # jsonschema gives one `required` error per missing key, each naming all
    for err in jsonschema.Draft202012Validator(schema).iter_errors(data):
        for p in _problems(err, near or _no_suggestion, field_form):
            if p.missing:
                if p.parts in absent:
                    continue
                absent.add(p.parts)
            found.append(p)
    return found


def _no_suggestion(word: str, choices: Iterable[str]) -> str:
    return ""


def _problems(err: Any, near: Near, field_form: str) -> list[SchemaProblem]:
    parts, sch, kind = tuple(err.absolute_path), _schema(err), err.validator
    if kind == "required" and isinstance(err.instance, dict):
        fields = sch.get("properties", {})
        return [
            SchemaProblem(parts + (key,), None, _missing(key, fields.get(key), field_form), kind, err.validator_value)
            for key in err.validator_value
            if key not in err.instance
        ]
    if kind == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted(sch.get("properties", {}))
        return [
            SchemaProblem(
                parts + (key,),
                err.instance[key],
                f"unknown field{near(str(key), allowed)}; allowed: {', '.join(allowed)}",
                kind,
                allowed,
            )
            for key in sorted(set(err.instance) - set(allowed), key=str)
        ]
    return [SchemaProblem(parts, err.instance, _message(err, near), kind, err.validator_value)]


def _schema(err: Any) -> Mapping[str, Any]:
    return err.schema if isinstance(err.schema, dict) else {}


def _missing(key: Any, field: Any, field_form: str) -> str:
    hint = field.get("description", "") if isinstance(field, dict) else ""
    return f"missing required field; add {field_form.format(key)}" + (f" ({hint})" if hint else "")


def _message(err: Any, near: Near) -> str:
    """One jsonschema error as a sentence: what is wrong, what is allowed (a key's own error says it is the key)."""
    kind, allowed, sch, value = err.validator, err.validator_value, _schema(err), err.instance
    if kind == "type":
        expected = " or ".join(allowed) if isinstance(allowed, list) else allowed
        msg = f"wrong type {_json_type(value)}; expected {expected}"
    elif kind in ("enum", "const"):
        choices = [str(v) for v in (allowed if kind == "enum" else [allowed])]
        msg = f"not allowed{near(str(value), choices)}; allowed: {', '.join(choices)}"
        msg += f" ({sch['description']})" if sch.get("description") else ""
    elif kind == "pattern":
        msg = f"does not match; expected {sch.get('x-allowed', 'pattern ' + str(allowed))}"
    elif kind in ("maximum", "exclusiveMaximum"):
        msg = f"too large; must be {'<=' if kind == 'maximum' else '<'} {allowed:g}"
    elif kind in ("minimum", "exclusiveMinimum"):
        msg = f"too small; must be {'>=' if kind == 'minimum' else '>'} {allowed}"
    elif kind == "minLength":
        msg = "must not be empty" if allowed == 1 else f"too short; needs at least {allowed} characters"
    elif kind == "minItems":
        msg = f"needs at least {allowed} item(s)"
    elif kind == "minProperties":
        msg = "must not be empty; give at least one entry" + (f": {sch['x-allowed']}" if sch.get("x-allowed") else "")
    elif kind == "uniqueItems":
        msg = "has duplicate items; list each once"
    else:
        msg = err.message
    return msg + (" (the key, not its value)" if _is_key(err.relative_schema_path) else "")


def _is_key(schema_path: Sequence[Any]) -> bool:
    """The error is about a key (the schema's ``propertyNames``), not about a value."""
    path = list(schema_path)
    return any(p == "propertyNames" and (i == 0 or path[i - 1] != "properties") for i, p in enumerate(path))


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _json_type(value: Any) -> str:
    """The JSON Schema name of ``value``'s type (``string``, ``object``, ...): the words ``expected`` uses."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return _JSON_TYPES.get(type(value), type(value).__name__)


__all__ = ["Near", "SchemaProblem", "problems"]
