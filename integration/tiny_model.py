"""Build a tiny random-weight Llama with the 32k SentencePiece tokenizer that mistral_common ships."""

from __future__ import annotations

import argparse
import os
import shutil

# A Hermes/Qwen-style template: tools in the system turn, calls as <tool_call>{json}</tool_call>.
CHAT_TEMPLATE = """{%- if tools %}<|system|>
You may call these tools:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Answer with <tool_call>{"name": NAME, "arguments": ARGS}</tool_call>.
{% endif %}
{%- for message in messages %}
{%- if message['role'] == 'tool' %}<|tool|>
{{ message['content'] }}
{% elif message['role'] == 'assistant' and message.get('tool_calls') %}<|assistant|>
{%- for call in message['tool_calls'] %}<tool_call>{"name": "{{ call['function']['name'] }}", "arguments": {{ call['function']['arguments'] if call['function']['arguments'] is string else call['function']['arguments'] | tojson }}}</tool_call>{%- endfor %}
{% else %}<|{{ message['role'] }}|>
{{ message['content'] if message['content'] is string else '' }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""


def mistral_tokenizer_model() -> str:
    """Path of the 32k SentencePiece model shipped inside the mistral_common package."""
    import mistral_common

    return os.path.join(os.path.dirname(mistral_common.__file__), "data", "tokenizer.model.v1")


# Messages only: for benchmarks whose prompt length must not grow with the number of tools.
PLAIN_TEMPLATE = """{%- for message in messages %}<|{{ message['role'] }}|>
{{ message['content'] if message['content'] is string else '' }}
{% endfor %}{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""


def build(out_dir: str, hidden: int = 64, layers: int = 2, head_dim: int = 32, seed: int = 0,
          chat_template: str = CHAT_TEMPLATE) -> str:
    """Write config, random weights and tokenizer to out_dir (reused if already complete)."""
    marker = os.path.join(out_dir, ".complete")
    if os.path.exists(marker):
        return out_dir
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(mistral_tokenizer_model(), os.path.join(out_dir, "tokenizer.model"))
    tok = LlamaTokenizer.from_pretrained(out_dir, legacy=False)
    tok.chat_template = chat_template
    tok.save_pretrained(out_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=hidden // head_dim, num_key_value_heads=hidden // head_dim, head_dim=head_dim,
        max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir)
    open(marker, "w").close()
    return out_dir


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    a = p.parse_args()
    print(build(a.out_dir, a.hidden, a.layers))
