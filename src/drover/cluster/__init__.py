"""What several server processes on one journal share: claims on turns, live events, takeover.

- :mod:`~drover.cluster.claims`: the public protocol a shared journal (PostgreSQL) offers the
  processes beyond the store's — which process runs a session's turn, and control messages
  between processes (:class:`~drover.cluster.claims.ClusterJournal`);
- :mod:`~drover.cluster.relay`: other processes' live events for this process's clients (Redis
  Streams, or the journal's log without Redis), and interrupts and permission answers carried
  to the process that runs the turn;
- :mod:`~drover.cluster.signing`: the seal on what one process sends another (control messages,
  live events), with the cluster's key, so that reaching Redis is not enough to drive a turn;
- :mod:`~drover.cluster.takeover`: turns whose process died, ended by a live one and resumed;
- :mod:`~drover.cluster.shared`: the wiring of one server process among several.

The server (:mod:`drover.server`) serves the HTTP API over these; the journal's leases
themselves are the store's (:class:`~drover.journal.protocol.TurnLeases`).
"""
