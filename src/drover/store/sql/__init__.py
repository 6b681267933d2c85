"""The SQL shared by the journal's backends: statements as plans of a dialect, one module per
part of the journal (sessions, turns, the event log, streamed text, files, the queue, the outbox,
holds, garbage collection), and :class:`~drover.store.sql.store.SqlStore` over them."""
