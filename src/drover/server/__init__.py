"""``drover serve``: the HTTP API, the resumable event stream and the web page.

A turn started over HTTP runs in the server's runner, not in a request: closing every client
neither slows nor stops it. Every event of a session — each text delta included — carries a
per-session sequence number, assigned by the journal as it emits the event, and a client that
reconnects with ``Last-Event-ID`` (or ``?after=N``) gets exactly the events after that number,
from memory for what the journal has not flushed yet and from the event log for the rest, even
when the number falls inside one coalesced flush of text.

Modules: :mod:`.app` (the ASGI app, auth, limits), :mod:`.guard` (what a web page may not
ask), :mod:`.routes` (handlers),
:mod:`.service` (turns, permissions, shutdown), :mod:`.hub` (live fan-out per session),
:mod:`.replay` (log rows to wire events, reset detection), :mod:`.sse` (the stream),
:mod:`.openapi` (the schema at ``/openapi.json``), :mod:`.snapshot` (the transcript). With
several processes on one PostgreSQL journal, what a process adds is the :mod:`drover.cluster`
package's (other processes' live events, interrupts and permission answers carried to the
process running the turn, turns of dead processes ended and resumed by a live one).

HTTP contract (JSON bodies, UTF-8; every error is ``{"error": {"code", "message"}}`` with a
4xx status, plus ``"turn_id"`` on ``session_busy``)
-----------------------------------------------------------------------------------------

Authentication: with a token (``--token`` / ``DROVER_TOKEN``; required when the server listens
beyond loopback) every ``/v1`` request needs ``Authorization: Bearer TOKEN`` — or, for the
browser's ``EventSource``, which cannot set headers, ``?token=TOKEN`` on the events route.
Sessions belong to the token that created them; another token gets 404 for them. Tokens are
compared in constant time, each against every accepted one. ``drover serve`` refuses to start
without a token beyond loopback, and also with ``--sandbox-network`` (or ``network = true`` in
the config file's ``[sandbox]``), since a command could then reach the server on loopback.

Requests a web page could make on a user's behalf are refused before any route runs, token
or not:

* ``Host`` must name the server: ``localhost``, a loopback address, the ``--host`` address or
  an ``--allowed-host`` name, with any port — else 421 ``misdirected_request``, on every route
  (``/`` and ``/static`` included). This stops DNS rebinding: a page whose own name resolves
  to 127.0.0.1 sends that name. ``--allowed-host`` is required beyond loopback.
* A request with an ``Origin`` that is neither the server's own (``http`` or ``https``, and
  the ``Host`` the request came to) nor a ``--cors-origin`` gets 403 ``forbidden_origin`` when
  its method is not GET, HEAD or OPTIONS, and on every path but ``/``, ``/static/…`` and
  ``/openapi.json`` whatever the method (so reads and event streams too). Without an
  ``Origin``, ``Sec-Fetch-Site: cross-site`` or ``same-site`` (another port of the same host
  is the same site) is refused the same way.
* Every route that takes a body (each POST, and PATCH) takes it only as ``Content-Type:
  application/json``, even an empty one — else 415 ``unsupported_media_type``: a form or a
  ``no-cors`` fetch, which a page may send anywhere without a CORS preflight, cannot set it.
  An empty JSON body is ``{}``.

=====================================================  =========================================
``POST /v1/sessions`` ``{}``                           201 ``{"id"}``
``GET /v1/sessions``                                   200 ``{"sessions": [SessionSummary]}``
``GET /v1/sessions/{id}``                              200 ``Snapshot`` (the durable transcript)
``PATCH /v1/sessions/{id}`` ``{"title"}``              200 ``SessionSummary``: the new title (one
                                                       line, 1-200 characters; later turns keep
                                                       it); 422 when empty or longer
``DELETE /v1/sessions/{id}``                           200 ``{"id", "deleted": true}``: the session
                                                       and everything it holds are gone (its
                                                       event streams end); 409 ``session_busy``
                                                       with the ``turn_id`` while a turn of it
                                                       runs in any process
``POST /v1/sessions/{id}/messages`` ``{"content",    202 ``{"turn_id"}``; while a turn runs,
"if_busy"?}``                                          by ``if_busy``: ``reject`` (default) 409
                                                       ``session_busy`` with the running
                                                       ``turn_id``; ``enqueue`` 202 ``{"queued":
                                                       true, "message_id"}`` (run after the turn,
                                                       in order, once — after a crash too);
                                                       ``interrupt`` the turn ends
                                                       ``interrupted``, work kept, and this
                                                       message's turn resumes it; ``rollback``
                                                       the turn stops and its work is discarded
                                                       (kept in the journal, marked) before
                                                       this message's turn (both answer
                                                       ``{"turn_id"}`` of the new turn; a turn
                                                       running in another process is refused
                                                       as with ``reject``)
``DELETE /v1/sessions/{id}/queue/{message_id}``        200 ``{"message_id", "cancelled": true}``;
                                                       404 when it is not queued (ran, or was
                                                       cancelled): the journal keeps it, marked
``POST /v1/sessions/{id}/interrupt`` ``{}``            202 ``{"turn_id"}`` (the turn being
                                                       stopped); 409 ``no_running_turn``
``POST /v1/sessions/{id}/permissions/{request_id}``    200 ``{"request_id", "decision"}``; 404
``{"decision": "allow"|"always"|"deny"}``              when unknown or already answered
``GET /v1/sessions/{id}/permissions``                  200 ``{"mode", "grants": [{"rule",
                                                       "created_at"}]}``: the session's "always"
                                                       answers, kept in the journal
``DELETE /v1/sessions/{id}/permissions[?rule=R]``      200 ``{"revoked": [rule]}``: withdraw all
                                                       grants, or the one named
``GET /v1/sessions/{id}/events[?after=N]``             ``text/event-stream`` (below)
``GET /openapi.json``                                  the OpenAPI 3.1 schema
``GET /``                                              the web page (``static/index.html``)
=====================================================  =========================================

``SessionSummary``: ``{"id", "title", "model", "created_at", "updated_at", "running_turn_id"}``
(times are Unix seconds; ``title`` and ``running_turn_id`` may be null).

``Snapshot``: ``{"id", "title", "model", "created_at", "updated_at", "running_turn_id",
"last_event_id", "turns": [Turn], "pending_permissions": [PermissionRequest data], "queued":
[{"message_id", "content", "created_at"}]}`` (``queued``: the messages waiting, in run order) where
``last_event_id`` is the sequence number the snapshot is current to (stream from there with
``?after=``) and ``Turn`` is ``{"id", "seq", "status", "reason", "error", "discarded",
"created_at", "ended_at", "usage": Usage|null, "user_message": Message|null, "messages":
[{"seq", "partial", "message": Message}], "tool_calls": [ToolCall]}`` (``Usage`` as in the
terminal events; while the turn runs, what it used so far with ``"partial": true``, or null
before its first model call reported; ``discarded``: the user dropped the turn's unfinished
work); ``status`` is ``running|completed|incomplete|failed|interrupted``.
``Message`` is ``{"role", "content": [Block]}`` with blocks ``{"type": "text", "text",
"partial"?}``, ``{"type": "thinking", …}``, ``{"type": "tool_use", "id", "name", "input"}``,
``{"type": "tool_result", "tool_use_id", "content", "is_error"}`` (``drover.messages``).
``ToolCall`` is ``{"call_id", "step", "call_index", "name", "state", "input", "output",
"is_error", "outcome_unknown"}``; ``state`` is ``input-streaming|input-available|
awaiting-permission|running|output-available|output-error|denied|interrupted``.

The event stream
----------------

Each replayable event is ``id: SEQ`` / ``event: TYPE`` / ``data: JSON`` where the JSON is the
event's dict (``drover.events.event_to_dict``: ``type`` first) plus ``"seq"``, ``"prev"`` and
``"turn_id"``. Sequence numbers increase; as a rule they run without gaps, but they jump
where a process died (what is logged after it is numbered after the numbers the dead process
reserved) or a turn's record failed. ``prev`` is the number of the event before this one in
the session's log (0 before the first), so a client can tell a gap on its own: an event whose
``prev`` is not the id it last applied means it missed events, or holds a number the log lost
— it reconnects with its last id and gets what it missed, or a ``reset``.
Live and replayed, a number always carries the same event: every numbered event a client
receives live is in the log under that number with the same type and data (``prev``
included), the one exception being redaction, below. Types and their data beyond
``type``/``seq``/``prev``/``turn_id``:

=======================  ======================================================================
``turn_started``         ``session_id``, ``user_message`` (Message or null)
``step_started``         ``step`` (model call within the turn, from 1)
``text_delta``           ``text``, ``index`` (content block), ``step`` — one per provider delta
``retry``                ``attempt``, ``delay``, ``error``, ``discard_partial`` (true: drop the
                         step's text shown so far, it is streamed anew)
``assistant_message``    ``message``, ``partial`` — replaces the step's text deltas
``tool_state``           ``call_id``, ``call_index``, ``name``, ``state``, ``input``?,
                         ``output``?, ``is_error``?, ``outcome_unknown``?
``tool_start``           ``call_index``, ``id``, ``name``, ``input_summary``
``tool_done``            ``call_index``, ``id``, ``name``, ``is_error``, ``output_summary``
``tool_results``         ``message`` (the results sent back to the model)
``permission_request``   ``request_id``, ``call_id``, ``tool_name``, ``input``, ``summary`` —
                         answer with the permissions route
``usage``                ``usage``, ``total_input``, ``total_output``
``compacted``            ``messages_before``, ``messages_after``
``worker``               ``worker``, ``parent_call_id``, ``event`` (an event of a worker the
                         ``task`` call ``parent_call_id`` runs; its text comes as one
                         ``text_delta`` per flush of the worker's text, as the log holds it)
``done``                 ``text``, ``usage`` — terminal (turn ``completed``)
``incomplete``           ``reason``, ``error``, ``usage``, ``retryable`` — terminal, work kept
``error``                ``reason``, ``error``, ``usage``, ``retryable`` — terminal
``message_queued``       ``message_id``, ``content`` — a message queued (``if_busy: enqueue``);
                         ``turn_id`` is the turn running when it was queued, or null
``message_cancelled``    ``message_id`` — a queued message cancelled
``message_started``      ``message_id``, ``turn_id`` — the queued message's turn starts (just
                         before its ``turn_started``)
``reset``                the client's id cannot be continued (older than what is kept, inside
                         a hole a crash left, or ahead of what survived): ``data`` is the
                         ``Snapshot``; its ``id`` is the snapshot's ``last_event_id`` and it
                         has no ``prev``. Replace the whole view with it and go on from there
                         (the next event's ``prev`` is that id).
=======================  ======================================================================

Every turn ends with exactly one of ``done``/``incomplete``/``error``. Thinking deltas are
not streamed. Redaction: a live ``text_delta`` carries the provider's text as it came (holding
each delta back until no key could still be arriving would delay the live text); what the
journal stores — and so what a replay from the log serves — is redacted (keys become
``[REDACTED]``). Where redaction changed a flush of text, the log cannot cut it back into its
deltas: a replay serves it as one ``text_delta`` under the number of the last delta it holds
(with the rest of that delta when the next flush holds it); the flush's other numbers are not
served, and a client holding one of them gets a ``reset``. The step's ``assistant_message``
is always the redacted, authoritative text.
Transient events have no ``id:`` and are never replayed: ``status``
(``{"type": "status", "transient": true, "running_turn_id", "last_event_id"}``, sent on
connect) and ``tool_progress`` (``{"type": "tool_progress", "call_id", "call_index", "name",
"progress", "total", "message", "transient": true, "turn_id"}``: a running tool call — an MCP
server's — reported progress; ``total`` and ``message`` may be null; a worker's comes as a
transient ``worker`` event carrying it; only clients connected to the process running the turn
get it, and a slow client may miss some). Heartbeats are SSE
comment lines (``: ping``) every ``heartbeat`` seconds.
"""
