"""The neutral core: content blocks and messages, typed events, the stream reducer, the
conversation manager, structured output, event sinks, permission rules and the shell parse they
match on, and text made safe to show. No I/O; every other package builds on it."""
