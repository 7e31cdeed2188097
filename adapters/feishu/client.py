"""The Feishu Open API calls the adapter makes: messages, reactions, CardKit cards, files.

Typed requests are built with lark-oapi and sent by its client; retries, the tenant token and
pacing are transport.py's. lark-oapi's calls block (requests), so each runs in this client's own
thread pool. The SDK is given our token with each call (`enable_set_token`, `RequestOption`), so
it never fetches or caches one itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import lark_oapi as lark
import requests
from lark_oapi.api.cardkit.v1 import (
    Card,
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
    UpdateCardRequest,
    UpdateCardRequestBody,
)
from lark_oapi.api.im.v1 import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateImageRequest,
    CreateImageRequestBody,
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetMessageRequest,
    ListMessageRequest,
    Message,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)

from adapters.download import AttachmentError
from adapters.feishu.config import FeishuConfig
from adapters.feishu.transport import (
    Attempt,
    FeishuApiError,
    FeishuTransport,
    Outcome,
    stream_to_file,
    too_large,
)

SdkCall = Callable[[lark.RequestOption], Any]


@dataclass(frozen=True)
class BotInfo:
    open_id: str
    name: str = ""


class FeishuClient:
    """Async Feishu Open API client for the adapter (one per app)."""

    def __init__(
        self,
        config: FeishuConfig,
        *,
        max_attempts: int = 4,
        backoff_base_s: float = 0.5,
        max_backoff_s: float = 60.0,
        timeout_s: float = 30.0,
        workers: int = 8,
    ) -> None:
        self._config = config
        self._lark = (
            lark.Client.builder()
            .app_id(config.app_id)
            .domain(config.domain)
            .timeout(timeout_s)
            # Every call carries the transport's token; without the app secret the SDK could
            # not fetch one of its own even by mistake.
            .enable_set_token(True)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self._transport = FeishuTransport(
            config,
            max_attempts=max_attempts,
            backoff_base_s=backoff_base_s,
            max_backoff_s=max_backoff_s,
            timeout_s=timeout_s,
            transient_errors=(requests.RequestException,),
        )
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="feishu-api")
        self._bot: BotInfo | None = None
        self._bot_lock = asyncio.Lock()

    async def aclose(self) -> None:
        """Release the thread pool and the HTTP session."""
        await self._transport.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def tenant_token(self) -> str:
        """The app's tenant_access_token (cached, fetched when due); raises FeishuApiError."""
        return await self._transport.token.get()

    # --- bot -------------------------------------------------------------------------------

    async def bot_info(self) -> BotInfo:
        """The bot's identity, fetched once from /open-apis/bot/v3/info."""
        if self._bot is None:
            async with self._bot_lock:
                if self._bot is None:
                    self._bot = await self._fetch_bot_info()
        return self._bot

    async def bot_open_id(self) -> str:
        """The bot's open_id (tells its mention apart; drops its own messages)."""
        return (await self.bot_info()).open_id

    async def _fetch_bot_info(self) -> BotInfo:
        # lark-oapi has no typed bot/v3 API: a raw request, still built and sent by the SDK.
        def call(option: lark.RequestOption) -> lark.BaseResponse:
            request = (
                lark.BaseRequest.builder()
                .http_method(lark.HttpMethod.GET)
                .uri("/open-apis/bot/v3/info")
                .token_types({lark.AccessTokenType.TENANT})
                .build()
            )
            return self._lark.request(request, option)

        response = await self._transport.call("bot.info", self._sdk(call))
        bot = json.loads(response.raw.content).get("bot") or {}
        if not bot.get("open_id"):
            raise FeishuApiError(
                "bot.info", -1, "response has no bot.open_id (is the bot enabled?)"
            )
        return BotInfo(open_id=bot["open_id"], name=bot.get("app_name", ""))

    # --- messages ----------------------------------------------------------------------------

    async def send_message(
        self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str | None = None, to: str = "chat_id"
    ) -> str:
        """Post a message to a chat (or, with ``to="open_id"``, to a user: their chat with the
        bot); returns its message_id. Same `uuid` within 1 h → sent once."""

        def call(option: lark.RequestOption) -> Any:
            body = (
                CreateMessageRequestBody.builder()
                .receive_id(chat_id)
                .msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False))
                .uuid(uuid)
                .build()
            )
            request = (
                CreateMessageRequest.builder().receive_id_type(to).request_body(body).build()
            )
            return self._lark.im.v1.message.create(request, option)

        response = await self._transport.call("im.message.create", self._sdk(call), pace_key=chat_id)
        return response.data.message_id

    async def get_message(self, message_id: str) -> tuple[str, dict[str, Any]]:
        """A message's type and content (e.g. `("file", {"file_key": …, "file_name": …})`)."""

        def call(option: lark.RequestOption) -> Any:
            return self._lark.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build(), option)

        response = await self._transport.call("im.message.get", self._sdk(call))
        items = response.data.items or []
        if not items:
            raise FeishuApiError("im.message.get", 230001, f"message {message_id} not found")
        item = items[0]
        try:
            content = json.loads(item.body.content if item.body is not None else "{}")
        except json.JSONDecodeError:
            content = {}
        return item.msg_type or "", content if isinstance(content, dict) else {}

    async def message(self, message_id: str) -> Message:
        """One message as im.v1.message.get returns it (sender, thread, body)."""

        def call(option: lark.RequestOption) -> Any:
            return self._lark.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build(), option)

        response = await self._transport.call("im.message.get", self._sdk(call))
        items = response.data.items or []
        if not items:
            raise FeishuApiError("im.message.get", 230001, f"message {message_id} not found")
        return items[0]

    async def thread_messages(self, thread_id: str, *, page_size: int = 50, max_pages: int = 4) -> tuple[list[Message], bool]:
        """The newest messages of a topic (im.v1.message.list by thread), oldest first, and
        whether older ones were left unread."""
        found: list[Message] = []
        token: str | None = None
        for _ in range(max_pages):

            def call(option: lark.RequestOption, token: str | None = token) -> Any:
                builder = (
                    ListMessageRequest.builder()
                    .container_id_type("thread")
                    .container_id(thread_id)
                    .sort_type("ByCreateTimeDesc")
                    .page_size(page_size)
                )
                if token:
                    builder = builder.page_token(token)
                return self._lark.im.v1.message.list(builder.build(), option)

            response = await self._transport.call("im.message.list", self._sdk(call))
            found += response.data.items or []
            token = response.data.page_token if response.data.has_more else None
            if token is None:
                break
        return list(reversed(found)), token is not None

    async def reply_message(
        self,
        message_id: str,
        msg_type: str,
        content: dict[str, Any],
        *,
        chat_id: str,
        reply_in_thread: bool = False,
        uuid: str | None = None,
    ) -> str:
        """Reply to a message (as a topic reply if `reply_in_thread`); returns the new message_id.

        `chat_id` is the message's chat, for pacing. Same `uuid` within 1 h → sent once.
        """

        def call(option: lark.RequestOption) -> Any:
            body = (
                ReplyMessageRequestBody.builder()
                .msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False))
                .reply_in_thread(reply_in_thread)
                .uuid(uuid)
                .build()
            )
            request = (
                ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
            )
            return self._lark.im.v1.message.reply(request, option)

        response = await self._transport.call("im.message.reply", self._sdk(call), pace_key=chat_id)
        return response.data.message_id

    async def update_card_message(self, message_id: str, card: dict[str, Any]) -> None:
        """Replace the card of an interactive message the bot sent (for everyone in the chat:
        the card must be shared, `config.update_multi`)."""

        def call(option: lark.RequestOption) -> Any:
            body = PatchMessageRequestBody.builder().content(json.dumps(card, ensure_ascii=False)).build()
            request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
            return self._lark.im.v1.message.patch(request, option)

        await self._transport.call("im.message.patch", self._sdk(call))

    async def add_reaction(self, message_id: str, emoji_type: str) -> str:
        """React to a message; returns the reaction_id."""

        def call(option: lark.RequestOption) -> Any:
            body = (
                CreateMessageReactionRequestBody.builder()
                .reaction_type(Emoji.builder().emoji_type(emoji_type).build())
                .build()
            )
            request = (
                CreateMessageReactionRequest.builder()
                .message_id(message_id)
                .request_body(body)
                .build()
            )
            return self._lark.im.v1.message_reaction.create(request, option)

        response = await self._transport.call("im.message_reaction.create", self._sdk(call))
        return response.data.reaction_id

    async def remove_reaction(self, message_id: str, reaction_id: str) -> None:
        """Remove a reaction the bot added."""

        def call(option: lark.RequestOption) -> Any:
            request = (
                DeleteMessageReactionRequest.builder()
                .message_id(message_id)
                .reaction_id(reaction_id)
                .build()
            )
            return self._lark.im.v1.message_reaction.delete(request, option)

        await self._transport.call("im.message_reaction.delete", self._sdk(call))

    # --- CardKit -----------------------------------------------------------------------------

    async def create_card(self, card: dict[str, Any]) -> str:
        """Create a card entity from card JSON 2.0; returns its card_id."""

        def call(option: lark.RequestOption) -> Any:
            body = (
                CreateCardRequestBody.builder()
                .type("card_json")
                .data(json.dumps(card, ensure_ascii=False))
                .build()
            )
            return self._lark.cardkit.v1.card.create(
                CreateCardRequest.builder().request_body(body).build(), option
            )

        response = await self._transport.call("cardkit.card.create", self._sdk(call))
        return response.data.card_id

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, sequence: int
    ) -> None:
        """Set a Markdown element's full text (typewriter effect in streaming mode).

        `sequence` must increase strictly per card; the uuid derived from it makes a retried
        request idempotent.
        """

        def call(option: lark.RequestOption) -> Any:
            body = (
                ContentCardElementRequestBody.builder()
                .content(text)
                .sequence(sequence)
                .uuid(f"{card_id}-{sequence}")
                .build()
            )
            request = (
                ContentCardElementRequest.builder()
                .card_id(card_id)
                .element_id(element_id)
                .request_body(body)
                .build()
            )
            return self._lark.cardkit.v1.card_element.content(request, option)

        await self._transport.call("cardkit.card_element.content", self._sdk(call))

    async def set_card_streaming(self, card_id: str, streaming: bool, sequence: int) -> None:
        """Turn a card's streaming mode on or off."""

        def call(option: lark.RequestOption) -> Any:
            settings = json.dumps({"config": {"streaming_mode": streaming}})
            body = (
                SettingsCardRequestBody.builder()
                .settings(settings)
                .sequence(sequence)
                .uuid(f"{card_id}-{sequence}")
                .build()
            )
            request = SettingsCardRequest.builder().card_id(card_id).request_body(body).build()
            return self._lark.cardkit.v1.card.settings(request, option)

        await self._transport.call("cardkit.card.settings", self._sdk(call))

    async def update_card(self, card_id: str, card: dict[str, Any], sequence: int) -> None:
        """Replace a card entity's whole content (works in and out of streaming mode)."""

        def call(option: lark.RequestOption) -> Any:
            data = json.dumps(card, ensure_ascii=False)
            body = (
                UpdateCardRequestBody.builder()
                .card(Card.builder().type("card_json").data(data).build())
                .sequence(sequence)
                .uuid(f"{card_id}-{sequence}")
                .build()
            )
            request = UpdateCardRequest.builder().card_id(card_id).request_body(body).build()
            return self._lark.cardkit.v1.card.update(request, option)

        await self._transport.call("cardkit.card.update", self._sdk(call))

    # --- files -------------------------------------------------------------------------------

    async def upload_image(self, path: Path) -> str:
        """Upload an image for sending in messages; returns its image_key."""

        def call(option: lark.RequestOption) -> Any:
            # A fresh file object per attempt: the SDK consumes it into a multipart body.
            with path.open("rb") as image:
                body = CreateImageRequestBody.builder().image_type("message").image(image).build()
                request = CreateImageRequest.builder().request_body(body).build()
                return self._lark.im.v1.image.create(request, option)

        response = await self._transport.call("im.image.create", self._sdk(call))
        return response.data.image_key

    async def upload_file(self, path: Path, file_type: str, file_name: str) -> str:
        """Upload a file (file_type: opus, mp4, pdf, doc, xls, ppt or stream); returns file_key."""

        def call(option: lark.RequestOption) -> Any:
            with path.open("rb") as data:
                body = (
                    CreateFileRequestBody.builder()
                    .file_type(file_type)
                    .file_name(file_name)
                    .file(data)
                    .build()
                )
                return self._lark.im.v1.file.create(
                    CreateFileRequest.builder().request_body(body).build(), option
                )

        response = await self._transport.call("im.file.create", self._sdk(call))
        return response.data.file_key

    async def download_resource(
        self, message_id: str, file_key: str, kind: str, dest: Path, *, max_bytes: int
    ) -> Path:
        """Download a message's image or file (`kind`: "image" or "file") to `dest`, atomically.

        Raises AttachmentError past `max_bytes`. The SDK's typed call buffers the whole body in
        memory, so this streams to disk itself, with the transport's tenant token.
        """
        url = (
            f"{self._config.domain}/open-apis/im/v1/messages/{quote(message_id, safe='')}"
            f"/resources/{quote(file_key, safe='')}"
        )

        async def attempt(token: str) -> Outcome:
            headers = {"Authorization": f"Bearer {token}"}
            session = self._transport.session()
            async with session.get(url, params={"type": kind}, headers=headers) as response:
                lower = {k.lower(): v for k, v in response.headers.items()}
                if response.status >= 400 or response.content_type == "application/json":
                    body = await response.json(content_type=None)
                    return Outcome(body.get("code", -1), body.get("msg", ""), response.status, lower)
                if (response.content_length or 0) > max_bytes:
                    raise AttachmentError(too_large(max_bytes))
                await stream_to_file(response.content, dest, max_bytes)
                return Outcome(0, "", response.status, lower, dest)

        return await self._transport.call("im.message_resource.get", attempt)

    # --- plumbing ----------------------------------------------------------------------------

    def _sdk(self, fn: SdkCall) -> Attempt:
        """An attempt that runs one blocking SDK call in the pool and reads its outcome."""

        async def attempt(token: str) -> Outcome:
            option = lark.RequestOption.builder().tenant_access_token(token).build()
            response = await asyncio.get_running_loop().run_in_executor(self._executor, fn, option)
            raw = response.raw
            return Outcome(
                code=response.code if response.code is not None else -1,
                msg=response.msg or "",
                status=raw.status_code if raw is not None else None,
                headers={k.lower(): v for k, v in (raw.headers if raw is not None else {}).items()},
                value=response,
            )

        return attempt
