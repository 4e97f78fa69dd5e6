"""The book's character-level tokenizer: a real ``PreTrainedTokenizerFast`` built with ``tokenizers``.

Every printable ASCII character and the newline is one token, so a reader can see exactly what the
model sees. A few strings are whole tokens: the chat markers (``<|im_start|>``, ``<|im_end|>``),
padding, unknown, and the reasoning tags ``<think>``, ``</think>``, ``<answer>``, ``</answer>``.
``<|im_end|>`` ends every turn and is the end-of-sequence token. The chat template is the
ChatML layout that Qwen2 models use, so the same prompt code works for a hub model.

Simplified on purpose: a character vocabulary (about a hundred tokens) keeps the zoo models tiny
and every token readable; real models use byte-level BPE with ~150k tokens.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, UNK, IM_START, IM_END = "<|pad|>", "<|unk|>", "<|im_start|>", "<|im_end|>"
THINK, END_THINK, ANSWER, END_ANSWER = "<think>", "</think>", "<answer>", "</answer>"
SPECIAL_TOKENS = (PAD, UNK, IM_START, IM_END)
REASONING_TAGS = (THINK, END_THINK, ANSWER, END_ANSWER)
CHARACTERS = tuple("\n" + "".join(chr(c) for c in range(32, 127)))

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the character tokenizer from scratch (deterministic: same ids on every machine).

    Ids: the four special tokens first, then the four reasoning tags, then one id per character.
    """
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + REASONING_TAGS + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Split every character into its own piece (newline included).
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=IM_END,
        bos_token=None,
        additional_special_tokens=[IM_START],
        padding_side="left",
        model_max_length=1024,
    )
    # The reasoning tags are whole tokens but ordinary text: decoding keeps them.
    tokenizer.add_tokens(list(REASONING_TAGS))
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def is_printable(text: str) -> bool:
    """True when every character of ``text`` has its own id in the character tokenizer."""
    return all(ch in string.printable and ch not in "\t\r\x0b\x0c" for ch in text)
