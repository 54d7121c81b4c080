"""The AI message writer against a real OpenAI-compatible HTTP server on loopback: the
model's answer is used when it keeps the JSON contract, and every failure falls back to
the template with the reason recorded (docs/ai.md)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from cs_daemon.config import Settings
from cs_daemon.engine import messages
from cs_daemon.integrations.llm import MessageWriter
from tests.support.openai_server import OpenAIServer, Reply, model_answer

USER = {
    "id": "u-1", "name": "Ada Lovelace", "email": "ada@example.com", "company": "Analytical Engines",
    "lifecycle_stage": "onboarding", "health": 41.5, "activation_score": 25.0,
    "engagement_score": 30.0, "expansion_score": 5.0, "risk_level": "medium",
}
PLAYBOOK = {
    "name": "First dashboard nudge",
    "goal": "get the user to build a first dashboard",
    "hints": {"tone": "warm and concise", "cta_url": "https://acme.test/start", "priority": 5},
}
BRAND = {
    "product_description": "Acme Reports. Dashboards for busy teams.",
    "tone_guidelines": "Friendly, never pushy.",
    "things_to_mention": ["the new report builder"],
    "things_to_avoid": ["cheap", "free trial"],
}
REASONING = "Playbook 'First dashboard nudge' matched: activation_score < 50; highest priority."
TEMPLATE = "Hi Ada, your first dashboard takes two minutes: https://acme.test/start"
HINTS = {**PLAYBOOK["hints"], "goal": PLAYBOOK["goal"]}  # what the checks see
GOOD = "Hi Ada, the new report builder gets your first dashboard done in minutes: https://acme.test/start"


@pytest.fixture
def server():
    srv = OpenAIServer(model="acme-writer-1")
    yield srv
    srv.close()


def writer_for(server: OpenAIServer, **kw) -> MessageWriter:
    return MessageWriter(model=server.model, base_url=server.base_url, api_key="sk-test", **kw)


def write(writer: MessageWriter, channel: str = "email"):
    return writer.write(channel=channel, user=USER, playbook=PLAYBOOK, brand=BRAND,
                        decision_reasoning=REASONING, template_message=TEMPLATE)


def failed(draft) -> list[str]:
    return [c["check"] for c in draft.checks if not c["passed"]]


def test_a_good_answer_becomes_the_message_with_the_models_reasoning(server):
    server.script = [model_answer(GOOD, "Mentions the report builder and links to the start page.")]
    draft = write(writer_for(server))
    assert draft.source == "llm"
    assert draft.message == GOOD
    assert draft.reasoning == "Mentions the report builder and links to the start page."
    assert draft.fallback_reason is None
    assert draft.checks == messages.quality_checks(GOOD, channel="email", brand=BRAND, hints=HINTS)
    assert failed(draft) == [] and draft.passed_checks


def test_the_request_carries_the_model_the_brand_rules_the_goal_and_the_user(server):
    server.script = [model_answer(GOOD, "ok")]
    write(writer_for(server))
    [request] = server.completions
    body = request.body
    assert body["model"] == "acme-writer-1"
    assert body["response_format"] == {"type": "json_object"}
    assert request.headers["authorization"] == "Bearer sk-test"
    prompt = "\n".join(m["content"] for m in body["messages"])
    assert '"message"' in prompt and '"reasoning"' in prompt  # the JSON contract is asked for
    for phrase in ("cheap", "free trial", "the new report builder", "Friendly, never pushy.",
                   "get the user to build a first dashboard", "warm and concise",
                   "https://acme.test/start", "onboarding", "medium", "41.5", "Ada Lovelace",
                   REASONING, TEMPLATE, "5000"):
        assert phrase in prompt, phrase
    assert "ada@example.com" not in prompt  # the address is not needed to write


def test_a_fenced_json_answer_from_a_server_that_ignores_response_format_is_used(server):
    fenced = "```json\n" + json.dumps({"message": GOOD, "reasoning": "fenced"}) + "\n```"
    server.script = [Reply(content=fenced)]
    draft = write(writer_for(server))
    assert (draft.source, draft.message, draft.reasoning) == ("llm", GOOD, "fenced")


def assert_fell_back(draft, why: str):
    assert draft.source == "template"
    assert draft.message == TEMPLATE
    assert why in draft.fallback_reason
    assert draft.reasoning == f"{REASONING} (AI writer unavailable: {draft.fallback_reason}; template used)"
    assert draft.checks == messages.quality_checks(TEMPLATE, channel="email", brand=BRAND, hints=HINTS)


def test_malformed_json_falls_back_to_the_template(server):
    server.script = [Reply(content='Sure! {"message": "Hi Ada", "reasoning": ')]
    assert_fell_back(write(writer_for(server)), "answer was not valid JSON")


@pytest.mark.parametrize("answer, why", [
    ({"message": "Hi Ada"}, "answer had the wrong shape (reasoning: Field required)"),
    ({"message": "   ", "reasoning": "r"}, "answer had the wrong shape (message:"),
    ({"message": 42, "reasoning": "r"},
     "answer had the wrong shape (message: Input should be a valid string)"),
    (["Hi Ada", "r"], "answer was JSON but not an object"),
])
def test_an_answer_of_the_wrong_shape_falls_back(server, answer, why):
    server.script = [Reply(content=json.dumps(answer))]
    assert_fell_back(write(writer_for(server)), why)


def test_a_message_longer_than_the_channel_allows_falls_back(server):
    server.script = [model_answer("Hi Ada. " + "x" * 300, "too long for in_app")]
    draft = write(writer_for(server), channel="in_app")
    assert draft.source == "template" and draft.message == TEMPLATE
    assert draft.fallback_reason == "answer had the wrong shape (message: 308 characters, more than the channel's 280)"


def test_an_http_500_falls_back_to_the_template(server):
    server.script = [Reply(status=500)]
    assert_fell_back(write(writer_for(server)), "model server answered HTTP 500")
    assert len(server.completions) == 1  # no retry


def test_a_reply_that_is_not_a_chat_completion_falls_back(server):
    server.script = [Reply(raw=b'{"object": "list", "data": []}')]
    assert_fell_back(write(writer_for(server)), "answer was not a chat completion")


def test_a_reply_that_is_not_json_at_all_falls_back(server):
    server.script = [Reply(raw=b"<html>not json at all")]
    assert_fell_back(write(writer_for(server)), "answer was not a chat completion")


def test_a_slow_model_times_out_and_falls_back_within_the_client_timeout(server):
    server.script = [Reply(delay_s=3.0, content=json.dumps({"message": GOOD, "reasoning": "late"}))]
    start = time.monotonic()
    draft = write(writer_for(server, timeout=0.5))
    elapsed = time.monotonic() - start
    assert_fell_back(draft, "model timed out after 0.5 s")
    assert elapsed < 2.0
    assert len(server.completions) == 1  # max_retries=0


def test_an_unreachable_server_falls_back():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    writer = MessageWriter(model="m", base_url=f"http://127.0.0.1:{port}/v1", timeout=0.5)
    assert_fell_back(write(writer), "model server unreachable")


def test_a_model_message_with_a_thing_to_avoid_is_returned_with_that_check_failed(server):
    risky = "Hi Ada, upgrading is cheap and the report builder is waiting: https://acme.test/start"
    server.script = [model_answer(risky, "Stresses the price.")]
    draft = write(writer_for(server))
    assert draft.source == "llm" and draft.message == risky
    assert failed(draft) == ["things_to_avoid"]
    assert not draft.passed_checks
    [avoid] = [c for c in draft.checks if c["check"] == "things_to_avoid"]
    assert avoid["detail"] == "found: 'cheap'"


def test_without_a_model_the_template_is_returned_unchanged_and_nothing_is_called(server):
    writer = MessageWriter.from_settings(Settings(openai_model=None, openai_base_url=server.base_url,
                                                  openai_api_key=None, _env_file=None))
    assert not writer.enabled
    draft = write(writer)
    assert (draft.message, draft.reasoning, draft.source, draft.fallback_reason) == (
        TEMPLATE, REASONING, "template", None)
    assert [c["check"] for c in draft.checks] == ["things_to_avoid", "placeholders", "length", "tone"]
    assert server.requests == []


def test_from_settings_uses_the_configured_server_and_model(server):
    settings = Settings(openai_model="acme-writer-1", openai_base_url=server.base_url,
                        openai_api_key=None, _env_file=None)
    writer = MessageWriter.from_settings(settings)
    assert writer.enabled and writer.timeout == 8.0
    server.script = [model_answer(GOOD, "from settings")]
    assert write(writer).source == "llm"
    assert server.completions[0].body["model"] == "acme-writer-1"


def test_the_loopback_server_lists_its_model_like_an_openai_server(server):
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=2)
    assert [m.id for m in client.models.list()] == ["acme-writer-1"]
