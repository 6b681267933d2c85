"""One turn: the agent loop (stream → accumulate → run tools → repeat), the model call in
progress, the tool batch with its permission round-trip and hooks, compaction, and the turn's
conversation state. A turn never touches the journal: it only emits events."""
