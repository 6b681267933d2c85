"""Structured output: a final answer that must be JSON matching a pydantic model.

:class:`OutputSchema` wraps the model a caller gives as ``output_type=``. Its
:class:`~drover.core.model_stream.OutputSpec` goes with every model request of the turn, and each
provider asks for it the way its protocol does natively. The loop checks the final answer with
:meth:`OutputSchema.parse`; the first answer of a turn that does not validate is answered with
:meth:`OutputSchema.correction`, a follow-up message saying what was wrong, and a second invalid
answer ends the turn (reason ``invalid_output``).

A final answer is the whole text of the model's last message; one enclosing Markdown code
fence is tolerated (models asked by instruction often add one), nothing else around the JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pydantic

from drover.core.messages import Message, user_message
from drover.core.model_stream import OutputSpec

ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)

#: One enclosing code fence, with or without a language tag.
_FENCE = re.compile(r"\A\s*```[\w-]*[ \t]*\n(.*?)\n?```\s*\Z", re.S)
#: Characters the APIs allow in a format's name (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``).
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class InvalidOutput(ValueError):
    """A final answer that is not the output asked for; ``str()`` says what is wrong."""


def describe_validation_error(exc: pydantic.ValidationError, root: str = "value") -> str:
    """pydantic's errors on one line: ``where: message (got …)`` for each, ``;``-separated
    (``root`` names where an error about the whole value is)."""
    return "; ".join(_problem(error, root) for error in exc.errors(include_url=False))


def _problem(error: Mapping[str, Any], root: str) -> str:
    where = ".".join(str(part) for part in error["loc"]) or root
    text = f"{where}: {error['msg']}"
    if error["type"] not in ("missing", "extra_forbidden"):
        shown = json.dumps(error.get("input"), ensure_ascii=False, default=str)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        text += f" (got {shown})"
    return text


def unfenced(text: str) -> str:
    """``text`` without one code fence enclosing all of it."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


@dataclass(frozen=True, slots=True)
class OutputSchema(Generic[ModelT]):
    """The output a turn's final answer must be; see the module docstring."""

    model: type[ModelT]
    spec: OutputSpec

    @classmethod
    def of(cls, model: type[ModelT]) -> OutputSchema[ModelT]:
        """The schema of ``model``; ``TypeError`` for anything but a pydantic model class."""
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            raise TypeError(f"output_type must be a pydantic model class, not {model!r}")
        try:
            schema = model.model_json_schema()
        except pydantic.PydanticUserError as exc:
            first = str(exc).splitlines()[0]
            raise TypeError(f"output_type {model.__name__}: no JSON schema ({first})") from None
        name = _NAME_UNSAFE.sub("_", model.__name__)[:64] or "output"
        return cls(model=model, spec=OutputSpec(name=name, schema=schema))

    def parse(self, text: str) -> ModelT:
        """The validated output of a final answer; :class:`InvalidOutput` says what is wrong."""
        try:
            return self.model.model_validate_json(unfenced(text))
        except pydantic.ValidationError as exc:
            raise InvalidOutput(describe_validation_error(exc)) from None

    def correction(self, problem: str) -> Message:
        """The follow-up message asking the model to answer again, validly."""
        return user_message(
            f"Your final answer is not valid {self.spec.name} JSON: {problem}. Reply again "
            f"with only the corrected JSON value that matches the {self.spec.name} schema, "
            "with no other text."
        )

    def failure(self, problem: str) -> str:
        """Why a turn whose corrected answer was still invalid ended."""
        return f"the final answer was not valid {self.spec.name} JSON after a correction: {problem}"
