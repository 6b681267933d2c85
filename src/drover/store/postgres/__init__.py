"""The PostgreSQL backend of the journal: a connection pool, the dialect, and what the
processes of a cluster share through the database (running turns, ``NOTIFY``)."""
