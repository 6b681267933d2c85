"""The one owner of a turn's life in a process: the runner (turns over the journal, recovery,
leases, grants), the turns running here, the queue of messages that run after them, session
holds, coordinator workers, and the hub that fans a session's events out to its live readers."""
