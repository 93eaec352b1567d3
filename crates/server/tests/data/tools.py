"""Tool calls through the stock openai client (run by tests/server/tools.rs): a round trip with
two tools (call, tool result, final answer), named and `required` choices enforced on prompts
that ask for no tool, `none`, and a stream whose deltas reassemble into the same calls.
Prints one JSON object."""
import json
import os

import jsonschema
import openai

c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
MODEL = os.environ["MODEL"]
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40},
    "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather",
     "description": "The current weather in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time",
     "description": "The current local time in a city", "parameters": TIME}},
]
out = {}


def create(messages, **kw):
    return c.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                     temperature=0, max_tokens=200, **kw)


def calls_of(message):
    calls = []
    for t in message.tool_calls or []:
        args = json.loads(t.function.arguments)
        jsonschema.validate(args, SCHEMAS[t.function.name])
        calls.append({"id": t.id, "name": t.function.name, "arguments": args})
    return calls


ask = [{"role": "system", "content": "You are a helpful assistant. When a tool result "
          "arrives, answer the user in one plain sentence."},
       {"role": "user", "content": "What is the weather in Paris right now, in celsius?"}]
r = create(ask)
m = r.choices[0].message
out["auto"] = {"calls": calls_of(m), "content": m.content, "finish": r.choices[0].finish_reason}

# The tool's result goes back through the template; then the final answer.
if m.tool_calls:
    call = m.tool_calls[0]
    follow = ask + [
        {"role": "assistant", "content": m.content, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id,
         "content": json.dumps({"temperature": 18, "sky": "sunny"})},
    ]
    r = create(follow)
    out["final_auto"] = {"content": r.choices[0].message.content,
                         "calls": calls_of(r.choices[0].message),
                         "finish": r.choices[0].finish_reason}
    # The client asks for the answer now (a small model may call again under auto).
    r = create(follow, tool_choice="none")
    out["final"] = {"content": r.choices[0].message.content,
                    "calls": calls_of(r.choices[0].message),
                    "finish": r.choices[0].finish_reason}

joke = [{"role": "user", "content": "Tell me a short joke about cats."}]
r = create(joke, tool_choice={"type": "function", "function": {"name": "get_time"}})
out["named"] = {"calls": calls_of(r.choices[0].message), "finish": r.choices[0].finish_reason}
r = create([{"role": "user", "content": "Say hello."}], tool_choice="required")
out["required"] = {"calls": calls_of(r.choices[0].message), "finish": r.choices[0].finish_reason}
r = create(ask, tool_choice="none")
out["none"] = {"calls": calls_of(r.choices[0].message), "content": r.choices[0].message.content}

# A stream: deltas reassembled by index, as the stock client's helpers do; beside the same
# request unstreamed.
r = create(ask, tool_choice="required")
out["required_weather"] = {"calls": calls_of(r.choices[0].message)}
streamed, finish, text = {}, None, ""
for chunk in create(ask, stream=True, tool_choice="required"):
    for ch in chunk.choices:
        text += ch.delta.content or ""
        for d in ch.delta.tool_calls or []:
            s = streamed.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            if d.id:
                s["id"] = d.id
            if d.function and d.function.name:
                s["name"] += d.function.name
            if d.function and d.function.arguments:
                s["arguments"] += d.function.arguments
        finish = ch.finish_reason or finish
out["stream"] = {"calls": [{"name": s["name"], "arguments": json.loads(s["arguments"]),
                            "has_id": bool(s["id"])} for _, s in sorted(streamed.items())],
                 "content": text, "finish": finish}
for s in out["stream"]["calls"]:
    jsonschema.validate(s["arguments"], SCHEMAS[s["name"]])
print(json.dumps(out))
