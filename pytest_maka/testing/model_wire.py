"""The four provider wire protocols the scripted model server speaks: parsing and replying.

Each wire reads a request body (which tools it offers, how many tool results the
conversation holds, its prompt text) and writes a reply either whole (JSON) or as the
provider's stream of server-sent events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import SplitResult, parse_qs

Event = tuple[str | None, Any]  # (SSE event name or None, data: a JSON value or a raw string)


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    text: str
    tool_call: ToolCall | None
    usage: tuple[int, int, int]  # input, output, cache-read tokens
    #: Unique per reply, as a provider's message ids are (agents key their usage by them).
    reply_id: str = "scripted"


def _properties(schema: Any) -> dict[str, Any]:
    """A tool's properties; each required one is marked ``"required": True`` (so replies can fill it)."""
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        required = set(schema.get("required") or [])
        return {
            k: {**v, "required": True} if k in required and isinstance(v, dict) else v
            for k, v in schema["properties"].items()
        }
    return {}


def _text_of(value: Any) -> str:
    """Every string inside a JSON value, joined: enough to search a prompt for a phrase."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_text_of(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_text_of(v) for v in value)
    return ""


class Wire:
    """One provider protocol."""

    name: ClassVar[str]

    def matches(self, path: str) -> bool:
        raise NotImplementedError

    def tools(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Offered tools: name -> JSON-schema properties."""
        raise NotImplementedError

    def tool_results(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def prompt_text(self, body: dict[str, Any]) -> str:
        return _text_of({k: v for k, v in body.items() if k != "tools"})

    def model(self, path: str, body: dict[str, Any]) -> str | None:
        value = body.get("model")
        return value if isinstance(value, str) else None

    def streams(self, split: SplitResult, body: dict[str, Any]) -> bool:
        return bool(body.get("stream"))

    def events(self, reply: Reply, model: str) -> Iterator[Event]:
        raise NotImplementedError

    def whole(self, reply: Reply, model: str) -> Any:
        raise NotImplementedError


class AnthropicMessages(Wire):
    name = "anthropic"

    def matches(self, path: str) -> bool:
        return path.endswith("/v1/messages")

    def tools(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {t["name"]: _properties(t.get("input_schema")) for t in body.get("tools") or [] if "name" in t}

    def tool_results(self, body: dict[str, Any]) -> int:
        return sum(
            1
            for m in body.get("messages") or []
            if isinstance(m.get("content"), list)
            for block in m["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        )

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        if reply.tool_call is None:
            return [{"type": "text", "text": reply.text}]
        call = reply.tool_call
        return [{"type": "tool_use", "id": f"toolu_{call.call_id}", "name": call.name, "input": call.arguments}]

    def _usage(self, reply: Reply) -> dict[str, int]:
        inp, out, cached = reply.usage
        return {
            "input_tokens": inp,
            "output_tokens": out,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        }

    def whole(self, reply: Reply, model: str) -> Any:
        return {
            "id": f"msg_{reply.reply_id}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": self._blocks(reply),
            "stop_reason": "tool_use" if reply.tool_call else "end_turn",
            "stop_sequence": None,
            "usage": self._usage(reply),
        }

    def events(self, reply: Reply, model: str) -> Iterator[Event]:
        start = {**self.whole(reply, model), "content": [], "stop_reason": None}
        start["usage"] = {**self._usage(reply), "output_tokens": 1}
        yield "message_start", {"type": "message_start", "message": start}
        for index, block in enumerate(self._blocks(reply)):
            if block["type"] == "text":
                opening, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
            else:
                opening = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
            yield "ping", {"type": "ping"}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        stop = "tool_use" if reply.tool_call else "end_turn"
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.usage[1]},
            },
        )
        yield "message_stop", {"type": "message_stop"}


class ChatCompletions(Wire):
    name = "openai-chat"

    def matches(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def tools(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        found = {}
        for tool in body.get("tools") or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and "name" in fn:
                found[fn["name"]] = _properties(fn.get("parameters"))
        return found

    def tool_results(self, body: dict[str, Any]) -> int:
        return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")

    def _usage(self, reply: Reply) -> dict[str, Any]:
        inp, out, cached = reply.usage
        return {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def _tool_calls(self, reply: Reply) -> list[dict[str, Any]]:
        call = reply.tool_call
        assert call is not None
        return [
            {
                "index": 0,
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
        ]

    def whole(self, reply: Reply, model: str) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_call:
            message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in self._tool_calls(reply)]
        return {
            "id": f"chatcmpl-{reply.reply_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_call else "stop"}],
            "usage": self._usage(reply),
        }

    def events(self, reply: Reply, model: str) -> Iterator[Event]:
        base = {
            "id": f"chatcmpl-{reply.reply_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield None, chunk({"role": "assistant", "content": ""})
        if reply.tool_call:
            yield None, chunk({"tool_calls": self._tool_calls(reply)})
            yield None, chunk({}, "tool_calls")
        else:
            yield None, chunk({"content": reply.text})
            yield None, chunk({}, "stop")
        yield None, {**base, "choices": [], "usage": self._usage(reply)}
        yield None, "[DONE]"


class Responses(Wire):
    name = "openai-responses"

    def matches(self, path: str) -> bool:
        return path.endswith("/responses")

    def tools(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {
            t["name"]: _properties(t.get("parameters"))
            for t in body.get("tools") or []
            if isinstance(t, dict) and t.get("type") == "function" and "name" in t
        }

    def tool_results(self, body: dict[str, Any]) -> int:
        items = body.get("input")
        kinds = ("function_call_output", "custom_tool_call_output")
        return sum(1 for i in items if isinstance(i, dict) and i.get("type") in kinds) if isinstance(items, list) else 0

    def _item(self, reply: Reply) -> dict[str, Any]:
        if reply.tool_call:
            call = reply.tool_call
            return {
                "id": f"fc_{call.call_id}",
                "type": "function_call",
                "status": "completed",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
            }
        part = {"type": "output_text", "text": reply.text, "annotations": []}
        message_id = f"msg_{reply.reply_id}"
        return {"id": message_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}

    def _response(self, reply: Reply, model: str, status: str) -> dict[str, Any]:
        inp, out, cached = reply.usage
        response: dict[str, Any] = {
            "id": f"resp_{reply.reply_id}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": model,
            "output": [],
        }
        if status == "completed":
            response["output"] = [self._item(reply)]
            response["usage"] = {
                "input_tokens": inp,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": inp + out,
            }
        return response

    def whole(self, reply: Reply, model: str) -> Any:
        return self._response(reply, model, "completed")

    def events(self, reply: Reply, model: str) -> Iterator[Event]:
        item = self._item(reply)
        numbers = iter(range(10_000))

        def event(kind: str, **fields: Any) -> Event:
            return kind, {"type": kind, "sequence_number": next(numbers), **fields}

        yield event("response.created", response=self._response(reply, model, "in_progress"))
        yield event("response.in_progress", response=self._response(reply, model, "in_progress"))
        if item["type"] == "function_call":
            yield event(
                "response.output_item.added", output_index=0, item={**item, "status": "in_progress", "arguments": ""}
            )
            yield event(
                "response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=item["arguments"]
            )
            yield event(
                "response.function_call_arguments.done", item_id=item["id"], output_index=0, arguments=item["arguments"]
            )
        else:
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            yield event(
                "response.output_item.added", output_index=0, item={**item, "status": "in_progress", "content": []}
            )
            yield event("response.content_part.added", **where, part={**part, "text": ""})
            yield event("response.output_text.delta", **where, delta=part["text"])
            yield event("response.output_text.done", **where, text=part["text"])
            yield event("response.content_part.done", **where, part=part)
        yield event("response.output_item.done", output_index=0, item=item)
        yield event("response.completed", response=self._response(reply, model, "completed"))


class Gemini(Wire):
    name = "gemini"

    def matches(self, path: str) -> bool:
        return ":generateContent" in path or ":streamGenerateContent" in path

    def tools(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        found = {}
        for tool in body.get("tools") or []:
            for decl in (tool.get("functionDeclarations") or []) if isinstance(tool, dict) else []:
                if isinstance(decl, dict) and "name" in decl:
                    schema = (
                        decl.get("parametersJsonSchema") or decl.get("parameters_json_schema") or decl.get("parameters")
                    )
                    found[decl["name"]] = _properties(schema)
        return found

    def tool_results(self, body: dict[str, Any]) -> int:
        return sum(
            1
            for content in body.get("contents") or []
            if isinstance(content, dict)
            for part in content.get("parts") or []
            if isinstance(part, dict) and "functionResponse" in part
        )

    def model(self, path: str, body: dict[str, Any]) -> str | None:
        tail = path.rsplit("/models/", 1)[-1]
        return tail.split(":", 1)[0] or None

    def streams(self, split: SplitResult, body: dict[str, Any]) -> bool:
        return ":streamGenerateContent" in split.path or parse_qs(split.query).get("alt") == ["sse"]

    def whole(self, reply: Reply, model: str) -> Any:
        inp, out, cached = reply.usage
        if reply.tool_call:
            part: dict[str, Any] = {"functionCall": {"name": reply.tool_call.name, "args": reply.tool_call.arguments}}
        else:
            part = {"text": reply.text}
        return {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {
                "promptTokenCount": inp,
                "candidatesTokenCount": out,
                "cachedContentTokenCount": cached,
                "totalTokenCount": inp + out,
            },
            "modelVersion": model,
        }

    def events(self, reply: Reply, model: str) -> Iterator[Event]:
        yield None, self.whole(reply, model)


WIRES: tuple[Wire, ...] = (AnthropicMessages(), ChatCompletions(), Responses(), Gemini())
