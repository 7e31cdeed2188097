"""A local terminal 'platform', for trying the agent without a chat platform
(`ba-agent chat`): `platform.ConsolePlatform` is its plugin, `responder.ConsoleResponder` prints
progress and answers."""
