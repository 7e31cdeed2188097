"""Token accounting: offline estimates, model prices, per-thread usage and cost, budgets.

Ground truth first. The Messages API reports, for every request, how many tokens the model
read (``input + cache read + cache write``): that number is exact for the request it belongs
to. Between two requests only the messages stored since are unknown, so the context estimate
for the next request is

    last reported context tokens + offline estimates of the messages stored since

and each message is estimated once (cached by message id). The cost of counting therefore
grows with new content, not with the length of the conversation.

* `estimate`: offline Claude-token estimates of text, messages and requests (cl100k based);
* `prices`: context windows and list prices per model, the cost of a request, budget tokens;
* `usage`: one request's reported usage added to a thread's totals, and the totals as text;
* `budget`: per-conversation and per-user daily token budgets, checked before a model call.
"""
