"""The scripted model server, consumed by each provider's own official SDK over real HTTP.

If the server's streams were off by one field, these clients (the same parsers agent CLIs
are built on) would fail to assemble the tool call or the usage.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from pytest_maka.testing.model_server import Action, Script, model_server

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")

SCRIPT = Script(
    actions=[Action.write("/app/out.txt", "hello")], final_text="all done", input_tokens=11, output_tokens=7
)
WRITE_SCHEMA = {
    "type": "object",
    "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["file_path", "content"],
}
SHELL_SCHEMA = {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}


def test_anthropic_stream_assembles_a_write_tool_call_then_the_final_text() -> None:
    with model_server(SCRIPT) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0)
        tools = [{"name": "Write", "description": "write a file", "input_schema": WRITE_SCHEMA}]
        messages = [{"role": "user", "content": "make the file"}]
        with client.messages.stream(model="m-1", max_tokens=100, tools=tools, messages=messages) as stream:
            first = stream.get_final_message()
        assert first.stop_reason == "tool_use"
        call = first.content[0]
        assert (call.type, call.name, call.input) == (
            "tool_use",
            "Write",
            {"file_path": "/app/out.txt", "content": "hello"},
        )
        assert (first.usage.input_tokens, first.usage.output_tokens) == (11, 7)
        messages += [
            {"role": "assistant", "content": [c.model_dump() for c in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "ok"}]},
        ]
        second = client.messages.create(model="m-1", max_tokens=100, tools=tools, messages=messages)
        assert second.stop_reason == "end_turn"
        assert second.content[0].text == "all done"
        assert client.messages.count_tokens(model="m-1", messages=messages).input_tokens == 11
        headers = server.seen("anthropic")[0].headers  # newer SDKs send a bearer token, Claude Code x-api-key
        assert "sk-test" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


def test_chat_completions_stream_carries_the_tool_call_and_a_usage_chunk() -> None:
    with model_server(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
        tools = [{"type": "function", "function": {"name": "write_file", "parameters": WRITE_SCHEMA}}]
        messages: list[dict] = [{"role": "user", "content": "make the file"}]
        chunks = list(
            client.chat.completions.create(
                model="gpt-x", messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
            )
        )
        calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        call = calls[0][0]
        assert call.function.name == "write_file"
        assert json.loads(call.function.arguments) == {"file_path": "/app/out.txt", "content": "hello"}
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
        assert chunks[-1].usage.prompt_tokens == 11 and chunks[-1].usage.completion_tokens == 7
        messages += [
            {
                "role": "assistant",
                "tool_calls": [{"id": call.id, "type": "function", "function": call.function.model_dump()}],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "ok"},
        ]
        done = client.chat.completions.create(model="gpt-x", messages=messages, tools=tools)
        assert done.choices[0].message.content == "all done"
        assert done.choices[0].finish_reason == "stop"
        assert server.seen("openai-chat")[0].headers["authorization"] == "Bearer sk-test"


def test_chat_completions_without_tools_answers_an_aider_style_edit_block() -> None:
    with model_server(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        prompt = "Reply with *SEARCH/REPLACE* blocks for every change."
        reply = client.chat.completions.create(model="gpt-x", messages=[{"role": "system", "content": prompt}])
        text = reply.choices[0].message.content
        assert text.startswith("/app/out.txt\n```\n<<<<<<< SEARCH\n=======\nhello\n>>>>>>> REPLACE")


def test_responses_stream_gives_a_shell_call_in_array_form_when_no_write_tool_is_offered() -> None:
    with model_server(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        tools = [{"type": "function", "name": "shell", "parameters": SHELL_SCHEMA}]
        with client.responses.stream(model="codex-x", input="make the file", tools=tools) as stream:
            response = stream.get_final_response()
        item = response.output[0]
        assert (item.type, item.name) == ("function_call", "shell")
        command = json.loads(item.arguments)["command"]
        assert command[:2] == ["bash", "-lc"] and "hello" in command[2] and "/app/out.txt" in command[2]
        assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 7)
        follow = [
            {"type": "function_call", "call_id": item.call_id, "name": "shell", "arguments": item.arguments},
            {"type": "function_call_output", "call_id": item.call_id, "output": "ok"},
        ]
        with client.responses.stream(model="codex-x", input=follow, tools=tools) as stream:
            final = stream.get_final_response()
        assert final.output_text == "all done"


def test_gemini_stream_gives_a_function_call_then_text() -> None:
    from google.genai import types

    with model_server(SCRIPT) as server:
        client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=server.url))
        tool = types.Tool(
            function_declarations=[types.FunctionDeclaration(name="write_file", parameters_json_schema=WRITE_SCHEMA)]
        )
        config = types.GenerateContentConfig(tools=[tool])
        chunks = list(client.models.generate_content_stream(model="gemini-x", contents="make the file", config=config))
        call = chunks[0].candidates[0].content.parts[0].function_call
        assert (call.name, call.args) == ("write_file", {"file_path": "/app/out.txt", "content": "hello"})
        assert chunks[-1].usage_metadata.prompt_token_count == 11
        contents = [
            types.Content(role="user", parts=[types.Part(text="make the file")]),
            types.Content(role="model", parts=[types.Part(function_call=call)]),
            types.Content(
                role="user", parts=[types.Part.from_function_response(name="write_file", response={"ok": 1})]
            ),
        ]
        done = client.models.generate_content(model="gemini-x", contents=contents, config=config)
        assert done.text == "all done"
        assert "/models/gemini-x:streamGenerateContent" in server.seen("gemini")[0].path


def test_side_requests_do_not_advance_the_script() -> None:
    """A title request without tools between turns must not skip the write."""
    with model_server(SCRIPT) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
        title = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "title?"}])
        assert title.content[0].text == "all done"
        tools = [{"name": "Write", "input_schema": WRITE_SCHEMA}]
        reply = client.messages.create(
            model="m", max_tokens=5, tools=tools, messages=[{"role": "user", "content": "go"}]
        )
        assert reply.content[0].type == "tool_use"


def test_unknown_paths_and_bad_bodies_get_provider_style_errors() -> None:
    with model_server(SCRIPT) as server:
        request = urllib.request.Request(server.url + "/v1/nothing", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        assert err.value.code == 404
        request = urllib.request.Request(server.url + "/v1/messages", data=b"not json", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        assert err.value.code == 400
        head = urllib.request.Request(server.url + "/", method="HEAD")
        assert urllib.request.urlopen(head, timeout=5).status == 200


def test_a_repeating_script_never_lets_the_agent_finish_and_each_reply_has_its_own_id() -> None:
    looping = Script(actions=[Action.shell("true")], input_tokens=5, output_tokens=1, repeat=True)
    with model_server(looping) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
        schema = {"type": "object", "properties": {"command": {"type": "string"}}}
        tools = [{"name": "Bash", "description": "run", "input_schema": schema}]
        messages: list[dict] = [{"role": "user", "content": "go"}]
        ids = set()
        for _ in range(4):
            reply = client.messages.create(model="m-1", max_tokens=100, tools=tools, messages=messages)
            assert reply.stop_reason == "tool_use" and reply.content[0].input == {"command": "true"}
            ids.add(reply.id)
            result = {"type": "tool_result", "tool_use_id": reply.content[0].id, "content": ""}
            messages += [
                {"role": "assistant", "content": [c.model_dump() for c in reply.content]},
                {"role": "user", "content": [result]},
            ]
        assert len(ids) == 4
        assert len(server.tool_requests()) == 4
        client.messages.create(model="m-1", max_tokens=10, messages=[{"role": "user", "content": "title?"}])
        assert len(server.tool_requests()) == 4  # a side request without tools is not the agent's turn
