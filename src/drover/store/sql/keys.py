"""How the log, the messages and the tool calls name their session and turn: by number.

A session and a turn have a 32-character id, which every interface uses, and a small number
(``num``), unique in the database, which only the store's own tables use: a log row names its
session and its turn by number, a message and a tool call their turn. The statements below look
a number up from an id inside the statement that needs it (one seek of a unique index), so every
plan still speaks in ids.
"""

from __future__ import annotations

#: A session's number, given its id (one parameter).
SESSION_NUM = "(SELECT num FROM sessions WHERE id = ?)"
#: A turn's number, given its id (one parameter; NULL given NULL or an id with no turn).
TURN_NUM = "(SELECT num FROM turns WHERE id = ?::text)"
