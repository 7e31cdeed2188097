"""The shipped Slack manifests and the Feishu guide declare everything the adapters rely on.

What the code relies on is read from the code itself: the events the Slack adapter's bolt app
listens to, whether it has button listeners, and the Web API methods it calls (the slack-sdk
client methods it uses, resolved to the API methods they call). A new listener or call that
needs a subscription or a scope the manifests lack fails here, not in a user's workspace.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

from adapters.feishu import events as feishu_events
from adapters.slack import scopes as slack_scopes

ROOT = Path(__file__).resolve().parent.parent
SLACK_SOURCES = sorted((ROOT / "adapters" / "slack").glob("*.py"))
MANIFESTS = {
    "http": ROOT / "deploy" / "slack" / "manifest.yml",
    "socket": ROOT / "deploy" / "slack" / "manifest.socket-mode.yml",
}
# Client methods that are not Web API methods, and bolt's listeners named like events.
_CALLS_BY_NAME = ("api_call", "_best_effort")


def _calls() -> list[ast.Call]:
    calls: list[ast.Call] = []
    for path in SLACK_SOURCES:
        calls += [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]
    return calls


def _attribute(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def _first_string(call: ast.Call) -> str | None:
    """The first positional argument written as a string literal (`_best_effort(team, "x.y")`)."""
    strings = [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return strings[0] if strings else None


def listened_events() -> set[str]:
    """Event types the Slack adapter registers bolt listeners for: `app.event("…")`, and
    `app.event(re.compile("^(a|b)$"))` for several named types (not the catch-all)."""
    found: set[str] = set()
    for call in _calls():
        if _attribute(call) == "event" and (name := _first_string(call)) is not None:
            found.add(name)
        if _attribute(call) == "event":
            patterns = [_first_string(arg) for arg in call.args if isinstance(arg, ast.Call) and _attribute(arg) == "compile"]
            for named in (re.fullmatch(r"\^\(([\w|]+)\)\$", pattern or "") for pattern in patterns):
                found.update(named.group(1).split("|") if named else ())
        if _attribute(call) == "enable_token_revocation_listeners":
            found.update({"tokens_revoked", "app_uninstalled"})  # bolt's two listeners
    return found


def has_button_listeners() -> bool:
    return any(_attribute(call) == "action" for call in _calls())


def _client_method_api_calls(name: str, seen: set[str]) -> set[str]:
    """The Web API methods slack-sdk's `AsyncWebClient.<name>` calls, following the client
    methods and helper classes (the chat stream) it goes through."""
    if name in seen:
        return set()
    seen.add(name)
    source = inspect.getsource(getattr(AsyncWebClient, name))
    found = set(re.findall(r'api_call\(\s*"([^"]+)"', source))
    for other in re.findall(r"self\.(\w+)\(", source):
        if other != name and not other.startswith("_") and hasattr(AsyncWebClient, other):
            found |= _client_method_api_calls(other, seen)
    module = inspect.getmodule(getattr(AsyncWebClient, name))
    for helper in re.findall(r"\b(Async\w+)\(", source):
        helper_class = getattr(module, helper, None)
        if inspect.isclass(helper_class):
            for other in re.findall(r"_client\.(\w+)\(", inspect.getsource(helper_class)):
                found |= _client_method_api_calls(other, seen)
    return found


def called_api_methods() -> set[str]:
    """Web API methods the Slack adapter calls: through slack-sdk client methods
    (`client.chat_postMessage(…)`) or by name (`api_call("chat.update")`)."""
    found: set[str] = set()
    for call in _calls():
        attribute = _attribute(call)
        if attribute in _CALLS_BY_NAME and (method := _first_string(call)) is not None:
            found.add(method)
        elif attribute and not attribute.startswith("_") and callable(getattr(AsyncWebClient, attribute, None)):
            if attribute not in ("api_call", "close"):
                found |= _client_method_api_calls(attribute, set())
    return found


def manifest(variant: str) -> dict[str, Any]:
    return yaml.safe_load(MANIFESTS[variant].read_text())


def test_the_source_readers_see_what_the_adapter_does() -> None:
    """The readers find known listeners and calls, so the checks below are not vacuous."""
    assert {"app_mention", "message", "app_uninstalled", "tokens_revoked"} <= listened_events()
    assert has_button_listeners()
    assert {"chat.postMessage", "reactions.add", "users.info", "files.completeUploadExternal",
            "chat.startStream", "chat.postEphemeral"} <= called_api_methods()  # fmt: skip


def test_every_listened_event_and_called_method_has_a_known_requirement() -> None:
    events = listened_events()
    unknown_events = events - set(slack_scopes.EVENT_SUBSCRIPTIONS)
    assert not unknown_events, f"add to adapters/slack/scopes.py EVENT_SUBSCRIPTIONS: {unknown_events}"
    known = set(slack_scopes.METHOD_SCOPES) | set(slack_scopes.APP_TOKEN_METHODS)
    unknown_methods = called_api_methods() - known
    assert not unknown_methods, f"add to adapters/slack/scopes.py METHOD_SCOPES: {unknown_methods}"


@pytest.mark.parametrize("variant", sorted(MANIFESTS))
def test_manifest_subscribes_every_event_the_adapter_listens_to(variant: str) -> None:
    subscribed = set(manifest(variant)["settings"]["event_subscriptions"]["bot_events"])
    needed = {sub for event in listened_events() for sub in slack_scopes.EVENT_SUBSCRIPTIONS[event]}
    assert needed <= subscribed, f"{MANIFESTS[variant].name} lacks bot_events {needed - subscribed}"


@pytest.mark.parametrize("variant", sorted(MANIFESTS))
def test_manifest_grants_every_scope_the_called_methods_and_events_need(variant: str) -> None:
    granted = set(manifest(variant)["oauth_config"]["scopes"]["bot"])
    bot_methods = called_api_methods() - set(slack_scopes.APP_TOKEN_METHODS)
    needed = {scope for method in bot_methods for scope in slack_scopes.METHOD_SCOPES[method]}
    subscribed = manifest(variant)["settings"]["event_subscriptions"]["bot_events"]
    needed |= {scope for event in subscribed for scope in slack_scopes.EVENT_SCOPES[event]}
    needed |= set(slack_scopes.FILE_DOWNLOAD_SCOPES)  # users' files are fetched by url_private
    assert needed <= granted, f"{MANIFESTS[variant].name} lacks bot scopes {needed - granted}"
    # The OAuth install asks for exactly what the manifest grants.
    assert sorted(granted) == slack_scopes.bot_scopes()


@pytest.mark.parametrize("variant", sorted(MANIFESTS))
def test_manifest_enables_interactivity_for_the_buttons(variant: str) -> None:
    settings = manifest(variant)["settings"]
    assert has_button_listeners()
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["socket_mode_enabled"] is (variant == "socket")
    if variant == "http":
        # Events, clicks and the OAuth redirect all reach the gateway's routes.
        url = settings["event_subscriptions"]["request_url"]
        assert url.endswith("/slack/events")
        assert settings["interactivity"]["request_url"] == url
        base = url.removesuffix("/slack/events")
        assert manifest(variant)["oauth_config"]["redirect_urls"] == [f"{base}/slack/oauth_redirect"]
        assert settings["org_deploy_enabled"] is True
    else:
        assert "request_url" not in settings["event_subscriptions"]
        assert "request_url" not in settings["interactivity"]


# --- Feishu ------------------------------------------------------------------------------------

FEISHU_GUIDE = ROOT / "deploy" / "feishu" / "README.md"


def feishu_handled_events() -> set[str]:
    """Event types the Feishu adapter acts on: the module constants its parser dispatches on."""
    source = ast.parse(Path(feishu_events.__file__).read_text())
    handled: set[str] = set()
    for node in ast.walk(source):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "event_type":
            for comparator in node.comparators:
                if isinstance(comparator, ast.Name):
                    handled.add(getattr(feishu_events, comparator.id))
    return handled


def test_feishu_guide_subscribes_every_event_the_adapter_handles() -> None:
    handled = feishu_handled_events()
    assert {"im.message.receive_v1", "card.action.trigger"} <= handled
    guide = FEISHU_GUIDE.read_text()
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_0-9]+){2,})`", guide))
    assert handled <= named, f"deploy/feishu/README.md does not subscribe {handled - named}"
    # It says where card callbacks arrive in each mode.
    callbacks = " ".join(guide[guide.index("card.action.trigger") :].split())
    assert "/feishu/events" in callbacks and "long connection" in callbacks
