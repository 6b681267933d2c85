"""Automatic compaction: the model summarises the older history so the next request fits.

Runs before a model call whose request would pass the compaction threshold, which also covers
the moment right after a large tool result. The summary is written by the same provider, from
the messages that will be replaced; the cut never separates a tool call from its result.
A failed compaction is reported and the turn goes on with the full history.
"""

from __future__ import annotations

import contextlib
import logging

from drover.core.accumulate import Accumulator
from drover.core.conversation import ConversationManager, safe_cut
from drover.core.events import Compacted
from drover.core.messages import user_message
from drover.core.model_stream import ModelRequest, RetryNotice
from drover.core.sinks import EventSink
from drover.errors import ProviderError
from drover.providers.base import Provider

log = logging.getLogger(__name__)

SUMMARY_SYSTEM = (
    "You write concise, factual summaries of a coding agent's conversation so the work can "
    "continue after the older messages are removed."
)
SUMMARY_REQUEST = (
    "Summarise the conversation above for your own later use: the user's goals, decisions "
    "made, files read or changed and what was found, commands run and their outcomes, and "
    "what remains to do. Be specific (paths, names, values). Reply with the summary only."
)


async def compact_history(
    provider: Provider, convo: ConversationManager, keep_tail: int, sink: EventSink
) -> bool:
    """Summarise all but the last ``keep_tail`` committed messages; True if it compacted."""
    messages = convo.messages()
    cut = safe_cut(messages, keep_tail)
    if cut == 0:
        return False
    request = ModelRequest(
        system=SUMMARY_SYSTEM,
        messages=[*messages[:cut], user_message(SUMMARY_REQUEST)],
        max_tokens=4096,
    )
    acc = Accumulator()
    try:
        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                if not isinstance(event, RetryNotice):
                    acc.apply(event)
    except ProviderError as exc:
        log.warning("compaction failed, continuing with the full history: %s", exc)
        return False
    summary = acc.message().text.strip()
    if not summary:
        log.warning("compaction produced an empty summary; history kept")
        return False
    before = len(convo)
    if not convo.summarise(summary, len(messages) - cut):
        return False
    await sink.send(Compacted(messages_before=before, messages_after=len(convo)))
    return True
