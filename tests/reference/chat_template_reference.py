#!/usr/bin/env python3
"""Reference for triad's chat templates (io/chat_template.h): what transformers'
apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders for templates
written in the styles of the common chat models' tokenizer_config.json (ChatML, Llama-2's
[INST] with its system block and alternation check, Llama-3's headers, a multi-line one that
relies on trim_blocks and lstrip_blocks, one with namespace(), methods, tests and comments).

    pip install torch transformers
    python3 tests/reference/chat_template_reference.py      (from the repository root)

Writes tests/data/io/chat_templates_reference.json:
    [{"name", "template", "bos_token", "eos_token",
      "cases": [{"messages", "add_generation_prompt", "text"} or {..., "error": the message
                 raise_exception gave}]}]
"""

import json
import os

import transformers
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "io")

TEMPLATES = {
    "chatml": (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
        " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama2": """{%- if messages[0]['role'] == 'system' -%}
  {%- set system = messages[0]['content'] -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set system = false -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if loop.index0 == 0 and system -%}
    {%- set content = '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + message['content'] -%}
  {%- else -%}
    {%- set content = message['content'] -%}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {{- bos_token + '[INST] ' + content | trim + ' [/INST]' -}}
  {%- elif message['role'] == 'assistant' -%}
    {{- ' ' + content | trim + ' ' + eos_token -}}
  {%- endif -%}
{%- endfor -%}""",
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{% endif %}"
    ),
    "multiline": """{% for message in messages %}
    {% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
    {% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
    {% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\\n'  + message['content'] + eos_token }}
    {% endif %}
    {% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
    {% endif %}
{% endfor %}""",
    "namespace": """{#- a system line unless the conversation has one -#}
{%- set ns = namespace(found=false, turns=0) -%}
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {%- set ns.found = true -%}
    {%- else -%}
        {%- set ns.turns = ns.turns + 1 -%}
    {%- endif -%}
{%- endfor -%}
{%- if not ns.found -%}
{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}
{%- endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message.role ~ (' name=' ~ message.name if message.name is defined else '') + '\\n' }}
{{- message.content.strip() + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt and messages[-1].role not in ['assistant'] %}
{{- '<|im_start|>assistant (turn ' ~ (ns.turns + 1) ~ ')\\n' }}
{%- endif %}""",
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "  What is 2 + 2?  "},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3 + 3?\n"},
    ],
    [
        {"role": "user", "content": "Héllo, 世界", "name": "ana"},
        {"role": "assistant", "content": " Hi there. "},
    ],
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
]


def main():
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(DATA, "hf_gpt2_tokenizer.json"), bos_token="<s>",
                                  eos_token="</s>")
    out = []
    for name, template in TEMPLATES.items():
        cases = []
        for messages in CONVERSATIONS:
            for generation in (False, True):
                case = {"messages": messages, "add_generation_prompt": generation}
                try:
                    case["text"] = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                           add_generation_prompt=generation)
                except Exception as e:  # raise_exception's TemplateError
                    case["error"] = str(e)
                cases.append(case)
        out.append({"name": name, "template": template, "bos_token": "<s>", "eos_token": "</s>", "cases": cases})
        print(name, [c.get("text", c.get("error"))[:40] for c in cases[:2]])
    with open(os.path.join(DATA, "chat_templates_reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
