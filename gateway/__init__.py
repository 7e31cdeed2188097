"""The aiohttp service: routes, durable inbox, dispatcher, outbound ledger, scheduler, CLI."""
