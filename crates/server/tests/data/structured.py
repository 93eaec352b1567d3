"""Structured output through the stock openai client (run by tests/server/structured.rs).

Every schema of schemas.json, greedy or at temperature 0.8 (every other one), must give JSON that the
independent `jsonschema` validator accepts; `chat.completions.parse()` must fill a pydantic
model; a stream must reassemble into JSON; /v1/completions takes the regex and grammar fields.
Prints one JSON object: what passed and what failed.
"""
import json
import os
import re

import jsonschema
import openai
import pydantic

c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
MODEL = os.environ["MODEL"]
cases = json.load(open(os.path.join(os.environ["DATA"], "schemas.json")))
out = {"ok": 0, "failures": [], "answers": []}


def ask(case, temperature, seed):
    r = c.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": case["prompt"]}],
        max_tokens=400,
        temperature=temperature,
        seed=seed,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True},
        },
    )
    return r.choices[0]


# Each schema once, greedy and at temperature 0.8 in turn (every schema both ways took ~40 s
# more of CI for no other path).
for i, case in enumerate(cases):
    temperature, seed = ((0.0, None), (0.8, 7))[i % 2]
    choice = ask(case, temperature, seed)
    text = choice.message.content
    try:
        jsonschema.validate(json.loads(text), case["schema"])
        out["ok"] += 1
        out["answers"].append([case["name"], temperature, text])
    except Exception as e:  # noqa: BLE001 - every failure is reported
        out["failures"].append(
            [case["name"], temperature, text, choice.finish_reason, str(e)[:300]]
        )


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=30)
    country: str = pydantic.Field(max_length=30)
    population: int


parsed = c.chat.completions.parse(
    model=MODEL,
    messages=[{"role": "user", "content": "Tell me about Rome."}],
    response_format=City,
    max_tokens=200,
    temperature=0,
)
city = parsed.choices[0].message.parsed
out["parsed"] = city.model_dump() if city is not None else None

text = ""
for chunk in c.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "Two fruits and their colors, as JSON."}],
    max_tokens=200,
    temperature=0,
    stream=True,
    response_format={"type": "json_object"},
):
    for choice in chunk.choices:
        text += choice.delta.content or ""
out["stream_object"] = json.loads(text)

r = c.completions.create(
    model=MODEL, prompt="The Berlin wall fell in the year", max_tokens=10, temperature=0,
    extra_body={"regex": " [0-9]{4}"},
)
out["regex_text"] = r.choices[0].text
out["regex_ok"] = re.fullmatch(" [0-9]{4}", r.choices[0].text) is not None
r = c.completions.create(
    model=MODEL, prompt="Is water wet? Answer:", max_tokens=10, temperature=0,
    extra_body={"grammar": 'start: " " ("yes" | "no") "."'},
)
out["grammar_text"] = r.choices[0].text
print(json.dumps(out))
