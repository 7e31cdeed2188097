"""The running service: the aiohttp app, the durable inbox, the dispatcher and its workers,
the outbound ledger, and the platforms they answer through."""
