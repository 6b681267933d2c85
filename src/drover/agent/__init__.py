"""The public surface: :class:`~drover.agent.agent.Agent`, its
:class:`~drover.agent.session.Session` handles, a turn's stream and result, what an open agent
holds, rewind, project instructions and images in prompts. Front doors (the command line, the
server, a program) use only this."""
