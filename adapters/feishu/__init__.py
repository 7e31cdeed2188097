"""Feishu / Lark adapter: webhook or long-connection events in, cards and messages out.

- `platform.FeishuPlatform`: the plugin the gateway registers.
- `config.FeishuConfig`: its settings, from the FEISHU_* env vars.
- `app.FeishuAdapter(config, services)`: everything assembled — `.platform`, `.responder`
  (the `adapters.base.Responder`), `.handle` for POST /feishu/events, `await .start()` (opens
  the long connection in websocket mode), `.status()` for /readyz, `await .stop()`.
- The parts, for other wiring: `client.FeishuClient`, `responder.FeishuResponder`,
  `webhook.make_feishu_handler`, `longconn.FeishuLongConnection`; approval cards are drawn by
  `approval_card` and their button clicks read by `card_actions`.

Import the modules themselves: this package imports nothing, so reading the settings costs a
deployment without Feishu neither lark-oapi nor aiohttp.
"""
