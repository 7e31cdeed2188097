"""What the Slack app must be granted for what the adapter does: the bot events it receives and
the bot token scopes each Web API method it calls needs.

The shipped manifests (`deploy/slack/`) and the OAuth install's default scopes (SLACK_SCOPES)
follow from these tables; `tests/test_deploy_manifests.py` reads the adapter's source for the
events it listens to and the methods it calls, and checks both against these tables and the
manifests. Scopes are as Slack's method and event reference pages state them
(https://docs.slack.dev/reference/methods/<method>, .../reference/events/<event>).
"""

from __future__ import annotations

# The bolt listener's event type → the manifest's `bot_events` that deliver it. `message` is
# subscribed per conversation type: the bot answers in channels, private channels, DMs and
# group DMs.
EVENT_SUBSCRIPTIONS: dict[str, tuple[str, ...]] = {
    "app_mention": ("app_mention",),
    "message": ("message.channels", "message.groups", "message.im", "message.mpim"),
    # Uninstalls (OAuth installs): the workspace's installation is deleted.
    "app_uninstalled": ("app_uninstalled",),
    "tokens_revoked": ("tokens_revoked",),
    # The agent surface: the messages tab opened (suggested prompts), Slack's native Stop.
    "assistant_thread_started": ("assistant_thread_started",),
    "agent_session_stopped": ("agent_session_stopped",),
}

# A subscribed bot event → the scope Slack requires for it (none for the uninstall events).
EVENT_SCOPES: dict[str, tuple[str, ...]] = {
    "app_mention": ("app_mentions:read",),
    "message.channels": ("channels:history",),
    "message.groups": ("groups:history",),
    "message.im": ("im:history",),
    "message.mpim": ("mpim:history",),
    "app_uninstalled": (),
    "tokens_revoked": (),
    "assistant_thread_started": ("assistant:write",),
    "agent_session_stopped": ("assistant:write",),
}

# Conversation types the bot reads history in: one scope each.
_HISTORY = ("channels:history", "groups:history", "im:history", "mpim:history")

# A Web API method the adapter calls with the bot token → the bot scopes it needs.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "oauth.v2.access": (),  # the install's code exchange: client id and secret, no token
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.delete": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "chat.startStream": ("chat:write",),
    "chat.appendStream": ("chat:write",),
    "chat.stopStream": ("chat:write",),
    "assistant.threads.setStatus": ("chat:write",),
    "assistant.threads.setSuggestedPrompts": ("assistant:write",),
    "assistant.threads.setTitle": ("assistant:write",),
    # Thread-based agent sessions need chat:write (the app declared as an agent has assistant:write).
    "agents.sessions.setStatus": ("chat:write",),
    "views.open": (),  # the "what was wrong?" modal: a click's trigger_id, no scope
    "reactions.add": ("reactions:write",),
    "reactions.remove": ("reactions:write",),
    "conversations.replies": _HISTORY,
    "conversations.history": _HISTORY,
    "users.info": ("users:read",),
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
}

# Called with the app-level token (xapp-…, scope connections:write), not the bot token.
APP_TOKEN_METHODS: dict[str, tuple[str, ...]] = {
    "apps.connections.open": ("connections:write",),
}

# Downloading a file a user shared (its url_private) needs this bot scope.
FILE_DOWNLOAD_SCOPES: tuple[str, ...] = ("files:read",)


def bot_scopes() -> list[str]:
    """Every bot scope the adapter needs, sorted: the OAuth install's default (SLACK_SCOPES)."""
    scopes = {s for event in EVENT_SCOPES.values() for s in event}
    scopes.update(s for method in METHOD_SCOPES.values() for s in method)
    scopes.update(FILE_DOWNLOAD_SCOPES)
    return sorted(scopes)
