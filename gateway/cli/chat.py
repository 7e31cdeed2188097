"""`ba-agent chat`: the same agent, inbox and store, on a terminal."""

from __future__ import annotations

import asyncio
import getpass
import sys

from adapters.console.platform import ConsolePlatform, ConsoleSettings
from agent_core.messages import InboundMessage, ThreadKey, new_id
from gateway.config import Settings
from gateway.migrate import upgrade
from gateway.service.platforms import build_platforms
from gateway.service.runtime import Runtime, open_stores

PLATFORM = ConsolePlatform.name

EXIT_WORDS = {"exit", "quit", ":q"}


async def run_chat(settings: Settings) -> None:
    """Read lines from stdin and answer them until EOF or `exit`."""
    await asyncio.to_thread(upgrade, settings.effective_database_url)
    from adapters.console.responder import ConsoleResponder

    stores = open_stores(settings)
    platforms = build_platforms(stores, [ConsolePlatform(ConsoleSettings())])
    runtime = Runtime.build(stores, platforms.responders)
    responder = platforms.responders[PLATFORM]
    assert isinstance(responder, ConsoleResponder)  # for `answered`, which only the console has
    answering = runtime.start_answering(jobs=False)  # what is typed here, no scheduled jobs
    user = getpass.getuser()
    thread = ThreadKey(platform=PLATFORM, workspace="local", channel=user, root="main")
    if answering.agent is None:
        print("note: no model configured (set ANTHROPIC_API_KEY); answers will say so.")
    print("BA-Agent chat. Type your question; 'new' starts a fresh conversation, 'exit' quits.")
    try:
        while True:
            try:
                line = await asyncio.to_thread(input, "you> ")
            except EOFError:
                break
            if line.strip().lower() in EXIT_WORDS:
                break
            if not line.strip():
                continue
            msg = InboundMessage(
                platform=PLATFORM,
                event_id=new_id(),
                message_id=new_id(),
                workspace="local",
                channel=user,
                thread=thread,
                reply_in_thread=None,
                user=user,
                text=line.strip(),
                is_dm=True,
            )
            await runtime.inbox.accept(msg)
            await responder.answered(msg).wait()
    finally:
        await platforms.close()
        await answering.close()
        await runtime.close()
        sys.stdout.flush()
