"""A scripted model of the OpenAI Agents SDK's own ``Model`` interface (the SDK's tests do the
same; it ships no fake model)."""

import json

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


class ScriptedModel(Model):
    """Makes ``calls`` (``(name, arguments, call_id)``) in its first turn, then answers
    "done"; remembers the tools it was given and what each call returned."""

    def __init__(self, calls):
        self.calls, self.shown, self.tools = calls, {}, None

    async def get_response(self, system_instructions, input, model_settings, tools, *args, **kwargs):
        outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            self.tools = sorted(t.name for t in tools)
            return ModelResponse(output=[ResponseFunctionToolCall(
                type="function_call", name=name, arguments=json.dumps(arguments), call_id=call_id, id=f"fc-{call_id}")
                for name, arguments, call_id in self.calls], usage=Usage(), response_id=None)
        self.shown.update({o["call_id"]: o["output"] for o in outputs})
        return ModelResponse(output=[ResponseOutputMessage(
            id="m", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text="done", annotations=[])])], usage=Usage(),
            response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError
