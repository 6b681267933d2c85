"""The one error tree of drover.

    DroverError
    ├── ConfigError            bad flags, unknown provider, missing API key
    ├── BlankPromptError       a prompt with nothing to send (also a ``ValueError``)
    ├── ProviderError          anything that went wrong talking to a model
    │   ├── ProviderHTTPError      an HTTP error status before the stream began (429, 5xx, 400…)
    │   │   └── ContextOverflowError   the request does not fit the model's context window
    │   ├── ProviderConnectionError the server could not be reached / the connection dropped
    │   ├── StreamError            an error event or malformed data in the middle of a stream
    │   └── EmptyResponseError     the model returned no content at all
    ├── ToolError              a tool failed; becomes an ``is_error`` tool result, never fatal
    │   └── PathEscapeError        a path from the model points outside the working directory
    ├── TurnLimitError         the turn used all its model calls (a resumable pause)
    ├── SessionBusyError       another live process (or task) is running a turn on the session
    │   └── SessionHeldError       none runs, but a rewind (or a message replacing one) holds it
    ├── QueueChangedError      the queued message to run next is no longer next (taken, cancelled)
    └── StoreError             the journal could not be opened or written
        └── LeaseLostError         another process took over the turn this one was running

SDK exceptions are translated into this tree inside ``providers/``; nothing above them sees an
SDK type. The CLI prints ``str(error)`` on one line and exits non-zero.
"""

from __future__ import annotations


class DroverError(Exception):
    """Base of every error drover raises on purpose."""


class ConfigError(DroverError):
    """The configuration, a flag or the environment is unusable."""


class BlankPromptError(DroverError, ValueError):
    """A prompt is empty or white space only (and has no image): there is nothing to send.
    A ``ValueError`` too, as a library caller's bad argument; a ``DroverError``, so that
    the command line and the REPL say it on one line."""

    def __init__(self) -> None:
        super().__init__("the prompt is blank (empty or only white space): nothing to send")


class PromptTextError(DroverError, ValueError):
    """A prompt's text holds half of a UTF-16 surrogate pair (U+D800–U+DFFF without its
    partner): not text, which no journal can write and no API takes. A ``ValueError`` as a
    library caller's bad argument, as :class:`BlankPromptError`."""

    def __init__(self) -> None:
        super().__init__(
            "the prompt holds half of a UTF-16 surrogate pair (a code point in U+D800–U+DFFF "
            "without its partner), which is not text: nothing was sent"
        )


def retryable_status(status: int) -> bool:
    """Whether an HTTP status says a new attempt may succeed: 408, 409, 429 or any 5xx (529,
    Anthropic's overload, included)."""
    return status in (408, 409, 429) or status >= 500


class ProviderError(DroverError):
    """Talking to a model failed."""

    #: Whether a new attempt of the same request may succeed (429, 5xx, 529, dropped connection).
    retryable: bool = False


class ProviderHTTPError(ProviderError):
    def __init__(self, status: int, message: str, *, error_type: str | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.error_type = error_type
        self.retryable = retryable_status(status)


class ContextOverflowError(ProviderHTTPError):
    """The API refused the request because it does not fit the model's context window
    (Anthropic "prompt is too long", OpenAI ``context_length_exceeded``). Compacting the
    history and sending it again may succeed; sending it unchanged cannot."""


class ProviderConnectionError(ProviderError):
    retryable = True


class StreamError(ProviderError):
    """The stream failed after it started (an ``error`` event, a dropped connection)."""

    #: Error types that say the request itself is wrong: another attempt cannot help.
    FATAL_TYPES = frozenset(
        {"invalid_request_error", "authentication_error", "permission_error", "not_found_error"}
    )

    def __init__(
        self, message: str, *, error_type: str | None = None, retryable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.retryable = error_type not in self.FATAL_TYPES if retryable is None else retryable


class EmptyResponseError(ProviderError):
    def __init__(self, message: str = "the model returned an empty response") -> None:
        super().__init__(message)


class ToolError(DroverError):
    """A tool could not do what was asked; the model sees the message as an error result."""


class PathEscapeError(ToolError):
    """A path resolves outside the working directory."""


class TurnLimitError(DroverError):
    def __init__(self, max_turns: int) -> None:
        super().__init__(f"turn limit reached ({max_turns} model calls)")
        self.max_turns = max_turns


class SessionBusyError(DroverError):
    """A turn of the session is running in a live process: a second one is refused."""

    def __init__(self, session_id: str, turn_id: str) -> None:
        super().__init__(
            f"session {session_id} is busy: its turn {turn_id} is still running "
            "(wait for it to end, or interrupt it)"
        )
        self.session_id = session_id
        self.turn_id = turn_id


class SessionHeldError(SessionBusyError):
    """No turn of the session runs, but it is held for a moment by a rewind (from its plan to
    its marks) or by a message that stops the running turn to go next: a turn is refused."""

    def __init__(self, session_id: str) -> None:
        DroverError.__init__(
            self,
            f"session {session_id} is busy: a rewind, or a message replacing its turn, holds it "
            "for a moment (send again once it is done, or queue the message)",
        )
        self.session_id = session_id
        #: No turn runs (the hold is not a turn).
        self.turn_id = ""


class QueueChangedError(DroverError):
    """The queued message a turn was to start with is no longer the session's next one (another
    process ran it, or it was cancelled): the turn did not start."""


class StoreError(DroverError):
    """The journal could not be opened, migrated or written."""


class LeaseLostError(StoreError):
    """The turn is no longer this process's to write: its lease expired and another process
    recovered or took it over."""
