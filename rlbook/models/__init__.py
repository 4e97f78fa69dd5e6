"""Models and tokenizers: the character tokenizer, tiny Qwen2 models, one real pretrained LLM, one loader, LoRA."""

from rlbook.models.build import MODEL_SHAPES, build_tiny_model, count_parameters, tiny_qwen2_config
from rlbook.models.loading import checkpoint_location, load_model, load_tokenizer, resolve, zoo_names
from rlbook.models.lora import add_lora
from rlbook.models.pretrained import ensure_pretrained, pretrained_names
from rlbook.models.tokenizer import build_char_tokenizer

__all__ = [
    "MODEL_SHAPES", "add_lora", "build_char_tokenizer", "checkpoint_location", "build_tiny_model", "count_parameters", "ensure_pretrained",
    "load_model", "load_tokenizer", "pretrained_names", "resolve", "tiny_qwen2_config", "zoo_names",
]
