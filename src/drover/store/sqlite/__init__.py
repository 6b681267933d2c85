"""The SQLite backend of the journal: a connection in WAL mode on its own thread."""
