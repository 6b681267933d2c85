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
:mod:`.replay` (log rows to wire events, reset detection), :mod:`.follow` (reading a session's
events without a gap), :mod:`.sse` (the stream), :mod:`.snapshot` (the transcript); what the
routes take and answer as pydantic models — :mod:`.wire` (their base: strict JSON, a refusal in
one sentence), :mod:`.api_models`, :mod:`.chat_request`, :mod:`.responses_request` — read by
:mod:`.bodies`, and the schema at ``/openapi.json`` built from them by :mod:`.openapi` along the
route table of :mod:`.operations`; the front doors of other protocols, over the same events:
:mod:`.doors` (what they share), :mod:`.ai_sdk` and :mod:`.ai_sdk_routes` (the AI SDK's UI
message stream), :mod:`.responses_api`, :mod:`.responses_input` and :mod:`.responses_routes`
(OpenAI-style responses, through which agent frameworks take drover as their model). With
several processes on one
PostgreSQL journal, what a process adds is the :mod:`drover.cluster` package's (other processes'
live events, interrupts and permission answers carried to the process running the turn, turns of
dead processes ended and resumed by a live one).

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
  An empty JSON body is ``{}``; so is no body at all (no ``Content-Type``, no byte) on a
  route that takes none (an interrupt, a cancel), as HTTP clients send it — a page's carries
  its ``Origin``.

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
"if_busy"?, "webhook"?}``                              by ``if_busy``: ``reject`` (default) 409
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
                                                       another process runs is stopped there
                                                       first, its queue kept for after this
                                                       message; 409 when it has not ended
                                                       within 30 s); 409 ``session_busy``
                                                       without a ``turn_id`` while a rewind or
                                                       a message replacing the turn holds the
                                                       session (``enqueue`` queues it); 422
                                                       ``webhook_refused`` when ``webhook`` is
                                                       not under an origin the server allows
                                                       (below)
``DELETE /v1/sessions/{id}/queue/{message_id}``        200 ``{"message_id", "cancelled": true}``;
                                                       404 when it is not queued (ran, or was
                                                       cancelled): the journal keeps it, marked
``POST /v1/sessions/{id}/interrupt`` ``{}``            202 ``{"turn_id"}`` (the turn being
                                                       stopped); 409 ``no_running_turn``
``POST /v1/sessions/{id}/fork`` ``{"turn_id"?}``       201 ``{"id", "forked_from",
                                                       "forked_turn"}``: a new session (the
                                                       same token's) whose history is a copy of
                                                       this one's up to and including
                                                       ``turn_id`` (default: every turn not
                                                       running); 404 for a turn not of the
                                                       session; 409 ``session_busy`` when
                                                       ``turn_id`` is running
``POST /v1/sessions/{id}/rewind`` ``{"turn_id",        200 ``{"session_id", "turn_id",
"files"?, "force"?, "dry_run"?}``                      "rewound": [turn id], "restored": [path],
                                                       "unrestorable": [path], "not_rewindable":
                                                       [what]}`` (below); 404 for a turn not of
                                                       the session; 409 ``session_busy``,
                                                       ``rewind_conflict`` (with ``paths``),
                                                       ``already_rewound``
``POST /v1/sessions/{id}/permissions/{request_id}``    200 ``{"request_id", "decision"}``; 404
``{"decision": "allow"|"always"|"deny"}``              when unknown or already answered
``GET /v1/sessions/{id}/permissions``                  200 ``{"mode", "rules": [{"kind":
                                                       "allow"|"deny", "rule", "source"}],
                                                       "grants": [{"rule", "created_at"}]}``:
                                                       the config file's and flags' rules, and
                                                       the session's "always" answers, kept in
                                                       the journal
``DELETE /v1/sessions/{id}/permissions[?rule=R]``      200 ``{"revoked": [rule]}``: withdraw all
                                                       grants, or the one named
``GET /v1/sessions/{id}/events[?after=N]``             ``text/event-stream`` (below)
``POST /api/chat`` ``{"id", "messages", "trigger"?,    ``text/event-stream``: the AI SDK's UI
"messageId"?}``                                        message stream (below); 409
                                                       ``history_mismatch``, ``session_busy``
                                                       or ``no_approval``
``GET /api/chat/{id}/stream``                          the chat's running answer from its
                                                       start; 204 when none runs
``POST /v1/responses`` ``{"model", "input",            the ``Response`` once it ended (JSON),
"background"?, "stream"?, "store"?,                    as it starts with ``"background":
"conversation"? | "previous_response_id"?,             true``, or with ``"stream": true`` its
the API's other fields with no-op values}``            events (below); 409 ``session_busy``,
                                                       ``not_latest``, ``history_mismatch`` or
                                                       ``no_new_message``
``GET /v1/responses/{id}[?stream=true                  the ``Response``, or its events after
&starting_after=N]``                                   ``N``
``GET /v1/responses/{id}/input_items``                 ``{"object": "list", "data", "first_id",
``[?limit&order&after]``                               "last_id", "has_more"}``: its user
                                                       message
``POST /v1/responses/{id}/cancel`` ``{}``              the ``Response``, ``cancelled``; 409
                                                       ``not_running`` when it ended otherwise
``DELETE /v1/responses/{id}``                          ``{"id", "object", "deleted": true}``: its
                                                       turns rewound (kept, marked); 409
                                                       ``not_latest`` or ``session_busy``
``GET /metrics``                                       the process's metrics, Prometheus text
                                                       format (behind the token when one is set;
                                                       see :mod:`drover.telemetry.metrics`)
``GET /openapi.json``                                  the OpenAPI 3.1 schema
``GET /``                                              the web page (``static/index.html``)
=====================================================  =========================================

With traces on (``--otel`` or the ``OTEL_*`` variables, :mod:`drover.telemetry`), the W3C
``traceparent`` header of ``POST /v1/sessions/{id}/messages`` is the parent of the turn's span.

``SessionSummary``: ``{"id", "title", "model", "created_at", "updated_at", "running_turn_id"}``
(times are Unix seconds; ``title`` and ``running_turn_id`` may be null).

``Snapshot``: ``{"id", "title", "model", "created_at", "updated_at", "running_turn_id",
"forked_from", "forked_turn", "last_event_id", "turns": [Turn], "pending_permissions":
[PermissionRequest data], "queued": [{"message_id", "content", "created_at"}]}``
(``forked_from``/``forked_turn``: for a fork, the source session and the last turn copied from
it, else null; ``queued``: the messages waiting, in run order) where
``last_event_id`` is the sequence number the snapshot is current to, exactly: it holds what
every event up to that number did (a step still streaming shows its text up to the end of a
delta, never part of one) and nothing of a later one, so streaming from there with ``?after=``
gives everything else once; and ``Turn`` is ``{"id", "seq", "status", "reason", "error",
"discarded", "rewound", "created_at", "ended_at", "usage": Usage|null, "user_message":
Message|null, "messages": [{"seq", "partial", "message": Message}], "tool_calls":
[ToolCall]}`` (``Usage`` as in the
terminal events; while the turn runs, what it used so far with ``"partial": true``, or null
before its first model call reported; ``discarded``: the user dropped the turn's unfinished
work; ``rewound``: a rewind undid the turn — it stays, and is discarded too);
``status`` is ``running|completed|incomplete|failed|interrupted``.
``Message`` is ``{"role", "content": [Block]}`` with blocks ``{"type": "text", "text",
"partial"?}``, ``{"type": "thinking", …}``, ``{"type": "tool_use", "id", "name", "input"}``,
``{"type": "tool_result", "tool_use_id", "content", "is_error"}`` (``drover.core.messages``).
``ToolCall`` is ``{"call_id", "step", "call_index", "name", "state", "input", "output",
"is_error", "outcome_unknown"}``; ``state`` is ``input-streaming|input-available|
awaiting-permission|running|output-available|output-error|denied|interrupted``.

Webhooks
--------
With ``--webhook URL`` every turn's end is POSTed to URL; a message's ``webhook`` replaces it
for that turn (a queued message keeps it in the journal, for whichever process runs it), but
only under an origin the operator allowed (``--webhook-origin``, and the ``--webhook`` URL's
own): a client never makes the server call another address. The body is
``{"id", "type": "turn.ended", "session_id", "turn_id", "status", "reason", "error", "usage":
Usage|null, "ended_at"}``; ``X-Drover-Signature: sha256=<hex>`` is HMAC-SHA256 of the exact
body bytes with the server's secret (``--webhook-secret`` or ``DROVER_WEBHOOK_SECRET``,
required), ``X-Drover-Delivery`` the ``id``. A 2xx answer delivers it; anything else is
retried with exponential backoff (2 s doubling, at most 10 min; given up after 16 attempts);
an attempt is bounded as a whole (10 s). Different receivers are sent to side by side, one
receiver one delivery at a time: a slow one never delays another's. The announcement is
written to the journal's outbox in the transaction that ends the turn (whatever ends it: the
turn, shutdown, or another server's takeover), so a crash or restart does not lose it:
delivery is at least once, and a receiver drops a repeat by its ``id``.
See :mod:`drover.server.webhooks`.

Fork and rewind
---------------
A fork copies the source's turns (messages, tool calls, the file images
below) into the new session; its event log starts empty — its snapshot shows the copied
history, its stream only what happens in the fork. A rewind of ``turn_id`` undoes it and every
later turn not rewound yet: they stay in the journal, marked ``rewound``, and the next message
goes on from the turns before. ``write_file`` and ``edit_file`` record a file's content before
each write (kept once per SHA-256; content over 4 MiB is not kept, and the tool's result says
a rewind cannot restore it); with ``files`` (default true) the rewind puts back each file those
turns wrote as it was before the first of their writes (deleting a file they created). It is
refused (``rewind_conflict``, ``paths`` naming them) when a file holds neither what drover's
last write left nor its content before — it changed outside drover — unless ``force``, which
overwrites it. ``not_rewindable`` names what the turns did that a rewind cannot undo (``bash:
COMMAND`` for each command, the name of any other tool with side effects); ``unrestorable`` the
files whose content before was not kept, or which now lie behind a symbolic link (a rewind
touches nothing outside the working directory, nor through a link). With ``dry_run`` nothing
is done and the answer is ``{"session_id", "turn_id", "dry_run": true, "turns", "prompt",
"files": [{"path", "action", "conflict"}], "diff", "unrestorable", "not_rewindable"}``:
``action`` is ``restore|delete|unchanged|unrestorable|unreachable``, ``diff`` a unified diff
from the files now to what
the rewind would put back, ``prompt`` the user message of ``turn_id``. The rewind is logged in
the session's event stream as ``turns_rewound`` (in the same transaction), so a client
following the session sees it live where a replay serves it.

The event stream
----------------

Each replayable event is ``id: SEQ`` / ``event: TYPE`` / ``data: JSON`` where the JSON is the
event's dict (``drover.core.events.event_to_dict``: ``type`` first) plus ``"seq"``, ``"prev"`` and
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
``hook``                 ``point`` (``pre_tool``/``post_tool``), ``call_id``, ``call_index``,
                         ``name``, ``hook`` (where it is configured), ``outcome`` (``passed``,
                         ``blocked``, ``failed``, ``timed_out``), ``exit_code``, ``message``
                         (its stderr) — a configured hook ran for the call
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
``turns_rewound``        ``turn_ids`` — a rewind undid these turns (marked ``rewound`` and
                         ``discarded`` in the snapshot); ``turn_id`` is null
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

Front doors of other protocols
------------------------------

Two doors translate the same numbered events for clients that already speak another protocol
(:mod:`.doors`). Each serves a *response*: the turn a message started, with the turns that
resumed it after its process died (a takeover's continuation, whose message is only the note
telling the model it was cut off). Every stream of a response, first or resumed, is its events
from its start, through the same follower as the SSE route — live from the hub, replayed from
the log, gap-free across a restart — so a resume needs no state but the journal's and works in
any process. Both doors share the guard, tokens (a session belongs to the token that made it;
another token's chats and responses are not found), the body limit and JSON rules.

*The AI SDK* (``useChat`` with ``DefaultChatTransport``, protocol v1, header
``x-vercel-ai-ui-message-stream: v1``; :mod:`.ai_sdk` lists the chunks). The chat id is the
session id (created for the token on its first message, in one step with its owner: of two
first messages at once only one starts the chat; the other is answered as if it came a moment
later — 409 from the same token, 404 from another). Only the last posted message is new:
a user message's text parts start a turn; an assistant message carrying ``approval-responded``
tool parts answers those permission questions of the chat's latest answer (``approvalId`` is
the request id) and continues it. The earlier messages must be the chat's own: its user
messages in order with the same text, assistant messages only where they answer, with the id
of that answer (the ``start`` chunk's ``messageId``, the response's first turn id); an answer
the client never got may be missing; assistant text is not compared. ``regenerate-message``,
system messages and non-text user parts are refused. A stream ends with ``finish`` then
``data: [DONE]``, or at a permission question still waiting (``finish`` with ``tool-calls``:
the client's approval continues the message). ``GET /api/chat/{id}/stream`` replays the
running answer from its start (the transport's ``resumeStreamIsReplay``); 204 when no answer
of the chat runs, when the chat does not exist, or is another token's. After a crash the
resumed stream is the journal's answer: the text of the cut-off call as far as it was kept,
its interrupted tool call as ``tool-output-error``, then the continuation's steps.

*OpenAI Responses* (:mod:`.responses_api` gives the item shapes, :mod:`.responses_request` what
a request may hold). A response id is ``resp_`` and its first turn's id, ``conversation.id``
the session id. A new response runs on a new session, on ``conversation`` (a session id, or
``{"id"}``), after ``previous_response_id`` (which must be its conversation's latest response:
409 ``not_latest``), or on the conversation its input's history names. ``input`` is a string or
a list of items ending with the new user message (string content or ``input_text`` parts); the
items before it are the history the client holds, which must be the conversation's own (409
``history_mismatch``): its user messages in order, all of them, and its answers' items
(assistant messages, ``mcp_call`` items) where they answer, named by their ids (``msg_TURN_…``,
``mcp_TURN_…``; an id-less one is taken where an answer is, and its text is not compared). A
turn runs in the background whatever the request says: the request answers at once
(``background``), with its events (``stream``), or with the ``Response`` once it ended, with a
space for each heartbeat before the JSON meanwhile; a dropped request stops nothing. ``model``
is any name (the agent runs the turn; the ``Response`` reports its model), ``store`` true if
given; the API's other fields are taken with values that change nothing — null, the
frameworks' defaults (``include: []``, ``tools: []``, ``tool_choice: "auto"``,
``parallel_tool_calls: true``), identifiers and hints — and refused by name otherwise (422).
Events come as ``event: TYPE`` / ``data: JSON`` and end with ``data: [DONE]``; each
``sequence_number`` is the drover event's number × 1,000,000 plus the event's position among
those it became, so numbers mean the same event in every replay and grow without being
consecutive. ``starting_after=N`` serves the events numbered above ``N``; when ``N`` names a
point the journal cannot continue from exactly (a number a crash lost, or inside text the log
holds redacted) the whole stream is served again from ``response.created``. A poll
(``GET /v1/responses/{id}``) is the ``Response`` those events build, from the journal;
``created_at`` is in whole seconds. Tools drover ran are ``mcp_call`` items (``server_label``
``drover``, ``output``, or ``error`` for a call that failed, was refused or cut off): calls the
server ran, which the client must not run. An ``incomplete`` turn ends
``response.incomplete`` (status ``cancelled`` after a cancel), a failed one
``response.failed``; ``drover_reason`` says why, and ``incomplete_details`` is
``{"reason": "max_output_tokens"}`` for a turn limit, null otherwise (the API has no name for
drover's other reasons). Permission questions wait on the permissions route of the
conversation's session; they are not output items. A response's input items are its user
message. ``DELETE`` takes the latest response of a conversation once it ended: its turns are
rewound (the journal keeps them, marked; files stay as they are), the conversation goes on
from before it, and the response is not found any more.
"""
