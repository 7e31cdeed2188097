"""`ba-agent feedback`: 👍/👎 on answers and what people said was wrong; `ba-agent examples
review`: the examples a 👍 proposed, to approve or reject (operators, beside the data owners'
DM buttons).

The database layer is imported inside the commands, so registering them costs the others nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Any

from gateway.config import load_settings


def register(commands: Any) -> None:
    """Add the `feedback` and `examples` commands to the CLI's subparsers."""
    feedback = commands.add_parser("feedback", help="👍/👎 on answers and the comments, newest last")
    feedback.add_argument("--limit", type=int, default=50, help="the latest N rated answers (default 50)")
    feedback.set_defaults(func=_feedback)

    examples = commands.add_parser("examples", help="verified examples learned from 👍")
    example_commands = examples.add_subparsers(dest="examples_command", required=True)
    review = example_commands.add_parser("review", help="list proposed examples, or approve / reject one")
    review.add_argument("--approve", type=int, metavar="ID", help="confirm proposal ID: search_schema returns it")
    review.add_argument("--reject", type=int, metavar="ID", help="reject proposal ID")
    review.add_argument("--all", action="store_true", help="also list approved and rejected ones")
    review.set_defaults(func=_review)


def _feedback(args: argparse.Namespace) -> int:
    if args.limit < 1:
        print("ba-agent: --limit must be at least 1", file=sys.stderr)
        return 2
    return asyncio.run(_show_feedback(load_settings().effective_database_url, args.limit))


async def _show_feedback(database_url: str, limit: int) -> int:
    from agent_core.store.db import create_engine
    from gateway.service.feedback import FeedbackStore

    engine = create_engine(database_url)
    try:
        store = FeedbackStore(engine)
        totals = await store.totals()
        summaries = await store.summaries(limit)
    finally:
        await engine.dispose()
    print(f"👍 {totals['helpful']}  👎 {totals['not_helpful']}")
    for s in summaries:
        print(f"{s.updated_at}Z  answer {s.answer_id}  👍 {s.helpful}  👎 {s.not_helpful}  thread {s.thread_key}")
        for comment in s.comments:
            print(f"    what was wrong: {comment}")
    if not summaries:
        print("(no feedback yet)")
    return 0


def _review(args: argparse.Namespace) -> int:
    if args.approve is not None and args.reject is not None:
        print("ba-agent: give --approve or --reject, not both", file=sys.stderr)
        return 2
    return asyncio.run(_run_review(load_settings().effective_database_url, args))


async def _run_review(database_url: str, args: argparse.Namespace) -> int:
    from agent_core.catalog.learned import LearnedExamples, ProposalStatus
    from agent_core.store.db import create_engine, session_factory

    engine = create_engine(database_url)
    try:
        learned = LearnedExamples(session_factory(engine))
        chosen = args.approve if args.approve is not None else args.reject
        if chosen is not None:
            decided = await learned.decide(chosen, args.approve is not None, f"cli:{getpass.getuser()}")
            if decided is None:
                print(f"ba-agent: no proposed example {chosen}", file=sys.stderr)
                return 1
            print(f"example {decided.id}: {decided.status.value} by {decided.decided_by}")
            return 0
        statuses = list(ProposalStatus) if args.all else [ProposalStatus.PENDING]
        proposals = await learned.listed(statuses)
    finally:
        await engine.dispose()
    for p in proposals:
        by = f" by {p.decided_by}" if p.decided_by else ""
        print(f"[{p.id}] {p.status.value}{by}  source {p.source}  proposed by {p.proposed_by}  answer {p.answer_id}")
        print(f"    question: {p.question}")
        print("    " + "\n    ".join(p.sql.splitlines()))
    if not proposals:
        print("(no examples waiting for review)" if not args.all else "(no examples proposed)")
    return 0
