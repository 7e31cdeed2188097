"""The bot's custom menu (机器人自定义菜单): `application.bot.menu_v6` events as messages.

The operator adds menu items in the Feishu developer console (Bot → custom menu), each of type
"push event" with one of the keys in `MENU_KEYS`, and subscribes to the event
`application.bot.menu_v6`. A click arrives like a message event (webhook or long connection),
with the clicking user's open_id and name and the item's key, but without a chat: the answer is
sent to the user (by open_id, into their chat with the bot). The event carries no locale
either: a name written in Chinese characters is answered in Chinese, any other in English.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError

from adapters.feishu.events import PLATFORM, Ignored, MalformedEvent
from agent_core.i18n import Language, language_of_text
from agent_core.messages import InboundMessage, ThreadKey

BOT_MENU = "application.bot.menu_v6"
MENU_KEYS = ("new_analysis", "my_monitors", "my_reports")
MENU_ROOT = "menu"  # the conversation key's root of menu clicks: they open no conversation


class _OperatorId(BaseModel):
    open_id: str | None = None
    user_id: str | None = None
    union_id: str | None = None


class _Operator(BaseModel):
    operator_name: str | None = None
    operator_id: _OperatorId = Field(default_factory=_OperatorId)


class _MenuEvent(BaseModel):
    """lark-oapi's P2ApplicationBotMenuV6Data: who clicked which item, when."""

    operator: _Operator = Field(default_factory=_Operator)
    event_key: str
    timestamp: int | None = None


def parse_menu(event_id: str, tenant_key: str | None, event: Any) -> InboundMessage | Ignored:
    """The menu click ``event`` as a message for the gateway to answer, or why not."""
    try:
        menu = _MenuEvent.model_validate(event)
    except ValidationError as exc:
        raise MalformedEvent(f"bad {BOT_MENU} event: {exc.error_count()} errors") from None
    open_id = menu.operator.operator_id.open_id
    if not open_id:
        return Ignored("menu click without the user's open_id")
    if menu.event_key not in MENU_KEYS:
        return Ignored(f"menu key {menu.event_key!r} is not one of {', '.join(MENU_KEYS)}")
    workspace = tenant_key or "default"
    name = menu.operator.operator_name
    chinese = name is not None and language_of_text(name) is Language.ZH_HANS
    return InboundMessage(
        platform=PLATFORM,
        event_id=event_id,
        message_id=f"menu:{event_id}",
        workspace=workspace,
        channel=open_id,  # no chat in the event: answered to the user (FeishuResponder)
        thread=ThreadKey(platform=PLATFORM, workspace=workspace, channel=open_id, root=MENU_ROOT),
        reply_in_thread=None,
        user=open_id,
        user_name=name,
        locale="zh-CN" if chinese else "en-US",
        text="",
        is_dm=True,
        menu=menu.event_key,
    )
