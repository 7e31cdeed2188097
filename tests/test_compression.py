"""Context compression: pair-safe cutoffs, keep window, summary placement and contract, the
history file, pruning, overflow retry and prefix stability -- through the real loop and SDK."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core.config import CompressionConfig
from agent_core.context.cutoff import (
    carried_verbatim,
    choose_cutoff,
    cut_points,
    keep_rounds,
    round_starts,
    skills_to_forget,
)
from agent_core.context.history_file import (
    append_history,
    history_file,
    history_virtual_path,
    messages_in_file,
    render_message,
)
from agent_core.context.pruning import ContextRenderer
from agent_core.context.summarizer import SUMMARY_SECTIONS, ensure_sections
from agent_core.messages import (
    Role,
    StandardMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agent_core.model import ModelUnavailable, api_body, is_context_overflow, overflow_sizes
from agent_core.request import ModelRequest, api_messages, build_request
from agent_core.run_context import RunContext
from agent_core.skills.activation import ActivationFrame
from agent_core.state import ContextState, ThreadState, Todo
from agent_core.tokens.estimate import TokenCounter
from tests.context_harness import SUMMARY_MARK, rig, summary_reply
from tests.fakes.anthropic_api import HttpError, Reply, text, tool_use

THREAD = "t1"
_ids = iter(range(10**9))


def user(words: str) -> StandardMessage:
    return StandardMessage(thread_id=THREAD, role=Role.USER, content=[TextBlock(text=words)])


def answer(words: str) -> StandardMessage:
    return StandardMessage(thread_id=THREAD, role=Role.ASSISTANT, content=[TextBlock(text=words)])


def calls(*names: str, inputs: dict[str, Any] | None = None, thinking: bool = False) -> StandardMessage:
    blocks: list[Any] = [ThinkingBlock(thinking="hmm", signature="sig")] if thinking else []
    blocks += [
        ToolUseBlock(id=f"toolu_{next(_ids)}", name=n, input=inputs or {"query": "select 1"}) for n in names
    ]
    return StandardMessage(thread_id=THREAD, role=Role.ASSISTANT, content=blocks)


def results(call: StandardMessage, content: str = "ok", error: bool = False) -> StandardMessage:
    blocks = [ToolResultBlock(tool_use_id=c.id, content=content, is_error=error) for c in call.tool_uses()]
    return StandardMessage(thread_id=THREAD, role=Role.USER, content=blocks)


def step(*names: str, content: str = "ok", error: bool = False) -> list[StandardMessage]:
    call = calls(*names)
    return [call, results(call, content, error)]


def assert_api_valid(messages: list[dict[str, Any]]) -> None:
    """What the Messages API requires of a conversation (roles alternate, first is user,
    every tool_use answered in the next message, every tool_result answering the previous)."""
    assert messages and messages[0]["role"] == "user"
    for i, message in enumerate(messages):
        if i:
            assert message["role"] != messages[i - 1]["role"], f"roles repeat at {i}"
        previous_uses = (
            {b["id"] for b in messages[i - 1]["content"] if b["type"] == "tool_use"} if i else set()
        )
        result_ids = {b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"}
        assert result_ids <= previous_uses, f"orphan tool_result at {i}"
        uses = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
        if uses and i + 1 < len(messages):
            answered = {b["tool_use_id"] for b in messages[i + 1]["content"] if b["type"] == "tool_result"}
            assert uses <= answered, f"unanswered tool_use at {i}"


# --------------------------------------------------------------------------- pair safety (property)


@st.composite
def conversations(draw: st.DrawFn) -> list[StandardMessage]:
    """Valid stored histories: requests, answers, tool steps of 1-3 parallel calls (some
    failing), skills, and a dangling call closed by the crash patch."""
    history = [user(draw(st.text(min_size=1, max_size=20)))]
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["step", "step", "answer_then_request", "request_merge"]))
        if history[-1].role is Role.ASSISTANT:
            history.append(user("next question"))
        if kind == "step":
            names = draw(
                st.lists(st.sampled_from(["run_sql", "todo", "activate_skill"]), min_size=1, max_size=3)
            )
            history += step(*names, content="x" * draw(st.integers(1, 3000)), error=draw(st.booleans()))
        elif kind == "answer_then_request":
            history += [answer("done"), user("and then?")]
        else:
            # A request stored right after tool results (two user messages in a row).
            history += [*step("run_sql"), user("also this")]
    if history[-1].role is Role.ASSISTANT:
        history.append(user("last"))
    return history


@given(conversations())
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_every_cut_point_keeps_tool_pairs_together(history: list[StandardMessage]) -> None:
    assert_api_valid(api_messages(history))
    renderer = ContextRenderer(CompressionConfig())
    for cut in cut_points(history):
        dropped_uses = {c.id for m in history[:cut] for c in m.tool_uses()}
        kept_results = {b.tool_use_id for m in history[cut:] for b in m.tool_results()}
        assert not dropped_uses & kept_results
        context = ContextState(
            summary="<conversation_summary>…</conversation_summary>", summary_through=cut, pruned_before=cut
        )
        assert_api_valid(renderer.messages(history, context))


@given(conversations(), st.integers(0, 40), st.booleans(), st.integers(0, 3), st.integers(2_000, 60_000))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_chosen_cutoffs_are_round_starts_and_keep_the_newest_round(
    history: list[StandardMessage], floor_pick: int, todos: bool, depth: int, window: int
) -> None:
    state = ThreadState()
    starts = round_starts(history)
    if starts and floor_pick < len(starts):
        state.context.summary_through = starts[floor_pick]
    if todos:
        state.todos = [Todo(id=1, content="x")]
    state.skills.frames = [ActivationFrame(name=f"s{i}") for i in range(depth)]
    counter = TokenCounter()
    config = CompressionConfig()
    for force in (False, True):
        cut = choose_cutoff(history, state, counter, config, window, force=force)
        if cut is None:
            continue
        assert cut in starts and cut > state.context.summary_through
        kept_rounds = len([s for s in starts if s >= cut])
        assert kept_rounds >= (1 if force else config.min_keep_rounds)
        assert cut < len(history)


def test_cut_points_skip_open_tool_calls_and_result_messages() -> None:
    first = calls("run_sql", "run_sql")
    history = [user("q"), first, results(first), answer("a"), user("q2")]
    assert cut_points(history) == [1, 3, 4]
    assert round_starts(history) == [3, 4]  # the request belongs with the step answering it


# --------------------------------------------------------------------------- keep window


def rounds_of(n: int) -> list[StandardMessage]:
    history: list[StandardMessage] = []
    for i in range(n):
        history += [user(f"q{i}"), *step("run_sql"), answer(f"a{i}")]
    return history


def test_keep_window_grows_with_work_in_flight() -> None:
    config = CompressionConfig()
    idle = rounds_of(10)
    assert keep_rounds(idle, ThreadState(), config) == 5
    chain = [*idle, user("deep dive"), *step("run_sql"), *step("run_sql"), *step("run_sql")]
    assert keep_rounds(chain, ThreadState(), config) == 8  # three steps into a tool chain
    busy = ThreadState(todos=[Todo(id=1, content="segment by region")])
    busy.skills.frames = [ActivationFrame(name="attribution")]
    assert keep_rounds(chain, busy, config) == 8 + 2 + 2
    failing = [*chain, *step("run_sql", error=True)]
    busy.skills.frames.append(ActivationFrame(name="report"))
    assert keep_rounds(failing, busy, config) == 15  # clamped
    assert keep_rounds(idle, ThreadState(), CompressionConfig(base_keep_rounds=1)) == 3  # floor


def test_cutoff_keeps_the_window_shrinks_for_big_rounds_and_reaches_back_to_the_request() -> None:
    counter = TokenCounter()
    config = CompressionConfig()
    history = rounds_of(10)
    starts = round_starts(history)
    assert choose_cutoff(history, ThreadState(), counter, config, 1_000_000) == starts[-5]
    # Same shape, but every tool result is huge: only the minimum of 3 rounds stays.
    big = []
    for i in range(10):
        big += [user(f"q{i}"), *step("run_sql", content="row,1,2\n" * 4000), answer(f"a{i}")]
    cut = choose_cutoff(big, ThreadState(), counter, config, 100_000)
    assert cut == round_starts(big)[-3]
    # A tool chain: the window would start mid-chain, the request itself fits: keep it.
    chain = [*rounds_of(3), user("the big question")] + [m for name in "abcdefghijkl" for m in step(name)]
    chain_starts = round_starts(chain)
    request = len(rounds_of(3))
    wanted = keep_rounds(chain, ThreadState(), config)
    assert chain_starts[-wanted] > request  # the plain window would cut the request off
    assert choose_cutoff(chain, ThreadState(), counter, config, 1_000_000) == request
    # Nothing to do when everything is inside the keep window.
    assert choose_cutoff(rounds_of(2), ThreadState(), counter, config, 1_000_000) is None


# --------------------------------------------------------------------------- carried verbatim


def test_summary_carries_requests_errors_and_active_skill_instructions() -> None:
    activate = calls("activate_skill", inputs={"name": "attribution"})
    other = calls("activate_skill", inputs={"name": "charts"})
    history = [
        user("Why did GMV drop in May? Use net GMV (after refunds)."),
        activate,
        results(activate, "# Attribution\n\nSplit the change by region, then category."),
        other,
        results(other, "# Charts\n\nUse bar charts."),
        *step(
            "run_sql",
            content=json.dumps({"error": {"message": "column gmv_net does not exist", "code": "SQL_ERROR"}}),
            error=True,
        ),
        answer("It fell 4%."),
        user("break it down by channel"),
    ]
    state = ThreadState()
    state.skills.frames = [ActivationFrame(name="attribution")]
    state.skills.injected = ["attribution", "charts"]
    carried = carried_verbatim(history, 7, state, CompressionConfig())
    assert "1. Why did GMV drop in May? Use net GMV (after refunds)." in carried
    assert "run_sql: column gmv_net does not exist (SQL_ERROR)" in carried
    assert (
        "Instructions of the active skill attribution (verbatim)\n# Attribution\n\nSplit the change"
        in carried
    )
    assert "Use bar charts" not in carried  # not active: it is forgotten instead
    assert skills_to_forget(history, 7, state) == ["charts"]


def test_missing_summary_sections_are_added() -> None:
    fixed = ensure_sections("## User intent\n- why GMV fell\n\n## Next steps\n- split by channel")
    for section in SUMMARY_SECTIONS:
        assert f"## {section}" in fixed
    assert fixed.count("## User intent") == 1


# --------------------------------------------------------------------------- through the real loop


def strip_markers(value: Any) -> Any:
    """Request JSON without cache breakpoints and refocus reminders (both vary per request)."""
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [
            strip_markers(v)
            for v in value
            if not (
                isinstance(v, dict)
                and v.get("type") == "text"
                and v.get("text", "").startswith("<system-reminder>")
            )
        ]
    return value


async def test_summary_replaces_old_messages_and_meets_the_contract(tmp_path: Path) -> None:
    async with rig(tmp_path, window=8_000) as r:
        thread = await r.thread()
        questions = [f"Question {i}: why did GMV move in week {i}?" for i in range(24)]
        for q in questions:
            await r.say(thread, q)
        state = await r.store.load_state(thread)
        history = await r.store.history(thread)
        assert state.usage.compression_events >= 2
        assert len(history) == 24 * 4  # stored messages are never removed
        context = state.context
        assert context.summary_through_id == history[context.summary_through - 1].id

        last = r.main_requests()[-1]
        first = last["messages"][0]
        summary = first["content"][0]["text"]
        assert first["role"] == "user" and summary == context.summary
        assert summary.startswith("<conversation_summary>") and summary.endswith("</conversation_summary>")
        for section in SUMMARY_SECTIONS:
            assert f"## {section}" in summary
        assert history_virtual_path(thread) in summary
        summarized_requests = [
            m.text for m in history[: context.summary_through] if m.role is Role.USER and m.text
        ]
        for q in summarized_requests:
            assert q in summary  # the user's requests survive word for word
        # After the summary come the stored messages from the cutoff on, exactly as stored.
        expected = api_messages(history[context.summary_through :])
        sent = strip_markers(last["messages"])
        if expected[0]["role"] == "user":  # merged into the summary message
            assert sent[0]["content"][1:] == expected[0]["content"]
            assert sent[1:] == expected[1 : len(sent)]
        else:
            assert sent[1:] == expected[: len(sent) - 1]

        # The summarizer got the contract, the numbered transcript, and (the second time)
        # the previous summary to fold in.
        calls_made = r.summary_requests()
        assert len(calls_made) == state.usage.compression_events
        system = calls_made[0]["system"]
        assert all(f"## {s}" in system for s in SUMMARY_SECTIONS)
        prompt = calls_made[0]["messages"][0]["content"][0]["text"]
        assert "#1 user: Question 0" in prompt and "(none: this is the start" in prompt
        assert (
            "## User intent"
            in calls_made[1]["messages"][0]["content"][0]["text"].split("</previous_summary>")[0]
        )
        # Summaries are accounted: more requests than main calls.
        assert state.usage.requests == len(r.main_requests()) + len(calls_made)


async def test_history_file_holds_the_summarized_messages_verbatim(tmp_path: Path) -> None:
    async with rig(tmp_path, window=8_000, rows=30) as r:
        thread = await r.thread()
        for i in range(12):
            await r.say(thread, f"Question {i} about `refunds` and ```code```")
        state = await r.store.load_state(thread)
        history = await r.store.history(thread)
        path = history_file(r.data_dir, thread)
        assert path.parent.name == "conversation_history" and path.parent.parent.parent.name == "workspaces"
        content = path.read_text()
        assert messages_in_file(path) == state.context.summary_through
        for message in history[: state.context.summary_through]:
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    assert block.content.strip() in content  # complete, not excerpted
                if isinstance(block, ToolUseBlock):
                    assert block.id in content
            if message.text:
                assert message.text in content
        # Fences are longer than any run of backticks inside, so content cannot close them.
        tricky = results(calls("run_sql"), "a ```fenced``` result")
        rendered = render_message(7, tricky)
        assert "````\na ```fenced``` result\n````" in rendered and "### 7 · tool results" in rendered
        # Appending again is a no-op; appending further adds only the new messages.
        before = path.read_text()
        await append_history(r.data_dir, thread, history, 0, state.context.summary_through)
        assert path.read_text() == before
        await append_history(r.data_dir, thread, history, 0, state.context.summary_through + 2)
        assert messages_in_file(path) == state.context.summary_through + 2
        assert path.read_text().count("### 1 · user") == 1


def full_level_analyst(body: dict[str, Any]) -> Reply:
    """Asks for complete data, so every result names its data file."""
    if SUMMARY_MARK in json.dumps(body.get("system")):
        return summary_reply(body)
    last = body["messages"][-1]["content"]
    if any(block.get("type") == "tool_result" for block in last):
        return Reply([text("Done: see the table.")])
    return Reply(
        [tool_use("run_sql", {"query": "SELECT * FROM daily " + "WHERE x " * 120, "output_level": "full"})]
    )


async def test_old_results_are_pruned_only_once_the_cache_expired(tmp_path: Path) -> None:
    config = CompressionConfig(cold_prune_fill=0.3)
    async with rig(tmp_path, window=20_000, responder=full_level_analyst, compression=config, rows=40) as r:
        thread = await r.thread()
        for i in range(9):
            await r.say(thread, f"Daily table {i}")
            r.clock.advance(seconds=30)
        state = await r.store.load_state(thread)
        assert state.usage.fill > 0.3 and state.context.pruned_before == 0  # warm cache: untouched
        requests_before = len(r.main_requests())

        r.clock.advance(minutes=6)  # the prompt cache has expired
        await r.say(thread, "Daily table again")
        state = await r.store.load_state(thread)
        assert state.context.pruned_before > 0 and state.context.summary is None
        sent = r.main_requests()[requests_before]
        flat = json.dumps(sent["messages"])
        assert "pruned from the context to save space" in flat
        placeholders = [
            b["content"]
            for m in sent["messages"]
            for b in m["content"]
            if b["type"] == "tool_result" and "pruned" in b["content"]
        ]
        assert placeholders and all("Complete data: /data/" in p for p in placeholders)
        # Old long inputs are shortened; recent rounds stay verbatim.
        old_inputs = [b["input"]["query"] for b in sent["messages"][1]["content"] if b["type"] == "tool_use"]
        assert old_inputs and "characters shortened" in old_inputs[0]
        history = await r.store.history(thread)
        newest = api_messages(history[state.context.pruned_before : -3])  # as of that request
        assert strip_markers(sent["messages"])[-len(newest) :] == newest
        # The next request renders the pruned messages byte for byte the same.
        following = r.main_requests()[requests_before + 1]
        n = len(sent["messages"]) - 1
        assert strip_markers(following["messages"][:n]) == strip_markers(sent["messages"][:n])


def test_pruning_leaves_signed_assistant_turns_and_small_results_alone() -> None:
    long_input = {"query": "SELECT " + "x, " * 400}
    signed = calls("run_sql", inputs=long_input, thinking=True)
    plain = calls("run_sql", inputs=long_input)
    history = [
        user("q"),
        signed,
        results(signed, "small"),
        plain,
        results(plain, "big table /data/abc.csv\n" + "1,2,3\n" * 1000),
        answer("a"),
        user("q2"),
    ]
    renderer = ContextRenderer(CompressionConfig())
    sent = renderer.messages(history, ContextState(pruned_before=6))
    assert sent[1] == signed.to_api()  # thinking: signed as a whole, left intact
    assert sent[2]["content"][0]["content"] == "small"
    assert "characters shortened" in sent[3]["content"][0]["input"]["query"]
    placeholder = sent[4]["content"][0]["content"]
    assert "Older result of run_sql" in placeholder and "Complete data: /data/abc.csv." in placeholder
    assert_api_valid(sent)


async def test_context_overflow_compresses_and_the_retry_fits(tmp_path: Path) -> None:
    """The hook side of the overflow path, driven as the loop will drive it."""
    async with rig(tmp_path, window=200_000) as r:
        thread = await r.thread()
        for i in range(8):
            await r.say(thread, f"Question {i}")
        history = await r.store.history(thread)
        ctx = RunContext(thread_id=thread, data_dir=r.data_dir, channel="C1", user="U1")
        ctx.turn.thread = await r.store.load_state(thread)
        await r.store.append(thread, [user("And now everything at once?")])
        history = await r.store.history(thread)

        async def prepared() -> ModelRequest:
            request = build_request(r.loop.system_prompt, r.loop.tools.specs(), api_messages(history))
            for hook in r.loop.hooks:
                request = await hook.before_model(request, history, ctx)
            return request

        r.fake.script(
            HttpError(
                400,
                "invalid_request_error",
                "prompt is too long: 250123 tokens > 200000 maximum",
                should_retry=False,
            )
        )
        first = await prepared()
        with pytest.raises(ModelUnavailable) as failure:
            await r.model.complete(first)
        cause = failure.value.__cause__
        assert is_context_overflow(cause) and overflow_sizes(cause) == (250123, 200000)

        assert await r.compression.on_context_overflow(history, ctx, *overflow_sizes(cause))
        retry = await prepared()
        response = await r.model.complete(retry)
        assert response.stop_reason == "tool_use"
        sent = api_body(retry, r.model.model, r.model.max_tokens)
        assert sent["messages"][0]["content"][0]["text"].startswith("<conversation_summary>")
        assert len(json.dumps(sent)) < len(json.dumps(api_body(first, r.model.model, r.model.max_tokens))) / 2
        assert_api_valid(strip_markers(sent["messages"]))
        assert (await r.store.load_state(thread)).context.summary is not None  # saved at once


async def test_a_lower_limit_reported_by_the_api_is_remembered(tmp_path: Path) -> None:
    async with rig(tmp_path, window=1_000_000) as r:
        thread = await r.thread()
        for i in range(10):
            await r.say(thread, f"Question {i}")
        ctx = RunContext(thread_id=thread, data_dir=r.data_dir)
        ctx.turn.thread = await r.store.load_state(thread)
        assert await r.compression.on_context_overflow(await r.store.history(thread), ctx, 9_000, 8_000)
        assert r.compression.window("claude-sonnet-5-5") == 8_000
        assert r.compression.window("claude-opus-5") == 1_000_000  # other models keep theirs


async def test_overflow_with_nothing_left_to_summarize_gives_up(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        thread = await r.thread()
        await r.store.append(thread, [user("one huge question " * 100)])
        ctx = RunContext(thread_id=thread, data_dir=r.data_dir)
        assert not await r.compression.on_context_overflow(await r.store.history(thread), ctx, 300_000)


def test_only_prompt_too_long_counts_as_overflow() -> None:
    request = httpx.Request("POST", "http://x")

    def error(status: int, kind: str, message: str) -> anthropic.APIStatusError:
        response = httpx.Response(status, request=request)
        return anthropic.APIStatusError(
            message, response=response, body={"type": "error", "error": {"type": kind, "message": message}}
        )

    too_long = error(400, "invalid_request_error", "prompt is too long: 201,000 tokens > 200,000 maximum")
    assert is_context_overflow(too_long)
    assert overflow_sizes(too_long) == (201_000, 200_000)
    assert overflow_sizes(error(400, "invalid_request_error", "prompt is too long")) == (None, None)
    assert not is_context_overflow(
        error(400, "invalid_request_error", "messages.3: `tool_use` ids were found without `tool_result`")
    )
    assert not is_context_overflow(error(529, "overloaded_error", "Overloaded"))
    assert not is_context_overflow(ValueError("prompt is too long"))


async def test_prefix_is_byte_stable_between_compressions(tmp_path: Path) -> None:
    async with rig(tmp_path, window=10_000) as r:
        thread = await r.thread()
        versions = []
        for i in range(30):
            await r.say(thread, f"Question {i}: GMV by region for week {i}?")
            versions.append((await r.store.load_state(thread)).context.version)
        requests = r.main_requests()
        assert (await r.store.load_state(thread)).usage.compression_events >= 2
        changed = 0
        for previous, current in itertools.pairwise(requests):
            assert current["system"] == previous["system"] and current["tools"] == previous["tools"]
            before = strip_markers(previous["messages"])
            after = strip_markers(current["messages"])[: len(before)]
            if json.dumps(after) != json.dumps(before):
                changed += 1  # only where a compression moved a mark
                assert before[0] != after[0]
        assert 0 < changed <= versions[-1]
        usage = (await r.store.load_state(thread)).usage
        read_share = usage.cache_read_tokens / (
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        )
        assert read_share > 0.6
