"""Fine-tune a language model as teams run it: a Llama loaded with ``from_pretrained`` from a
folder, LoRA adapters from PEFT, TRL's ``SFTTrainer`` with gradient accumulation; then tune it
with autotune, apply the result and train.

Everything is built locally (nothing is downloaded): a small Llama from its config, saved with
``save_pretrained`` and loaded back by path (as a model from the Hub cache is), a word-level
tokenizer, texts of varying length (or prompt-completion pairs). The study ships the model as
its recipe (the path, the dtype, the LoRA config and the adapter weights): each trial loads the
base weights from the folder itself::

    python examples/hf_sft_lora.py [--trials 8] [--device cpu] [--packing] [--padding-free]
                                   [--hidden 64 --layers 2 --vocab 512] [--no-train]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

WORDS = [f"w{i}" for i in range(200)]
SPECIAL = ["<pad>", "<unk>", "<s>", "</s>"]


def tokenizer() -> PreTrainedTokenizerFast:
    """A real fast tokenizer (word level, built locally)."""
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")


def save_llama(folder: str | Path, hidden: int = 64, layers: int = 2, vocab: int = 256,
               seed: int = 0) -> str:
    """A small Llama and its tokenizer, saved with ``save_pretrained`` into ``folder`` (as a
    downloaded checkpoint is): the path to load it back from."""
    import torch

    torch.manual_seed(seed)
    tok = tokenizer()
    config = LlamaConfig(vocab_size=max(vocab, len(tok)), hidden_size=hidden,
                         intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, pad_token_id=0, bos_token_id=2,
                         eos_token_id=3)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def texts(n: int = 256, seed: int = 0, min_len: int = 4, max_len: int = 48,
          prompt_completion: bool = False) -> Any:
    """A ``datasets.Dataset`` of texts of ``min_len`` to ``max_len`` words (a "text" column),
    or of prompt-completion pairs."""
    from datasets import Dataset

    rng = random.Random(seed)

    def line(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    if prompt_completion:
        rows = [(line(min_len, max_len // 2), line(2, max_len // 2)) for _ in range(n)]
        return Dataset.from_dict({"prompt": [p for p, _ in rows],
                                  "completion": [c for _, c in rows]})
    return Dataset.from_dict({"text": [line(min_len, max_len) for _ in range(n)]})


def users_sft_trainer(model_path: str, output_dir: str, device: str = "cpu", *,
                      lora: bool = True, peft_model: bool = False, n: int = 256,
                      prompt_completion: bool = False, **sft: Any) -> Any:
    """The user's SFTTrainer as they built it: the model loaded by path, LoRA through
    ``peft_config`` (or, ``peft_model=True``, a PeftModel made with ``get_peft_model`` and passed
    as the model), ``per_device_train_batch_size=4, gradient_accumulation_steps=4`` (a global
    batch of 16) unless ``sft`` says otherwise."""
    import torch
    from peft import LoraConfig, get_peft_model
    from trl import SFTConfig, SFTTrainer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                        task_type="CAUSAL_LM")
    if peft_model:
        model = get_peft_model(model, config)
    fields = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,
              "max_length": 64, "num_train_epochs": 1, "logging_steps": 10, "bf16": False,
              "gradient_checkpointing": False, "report_to": "none", "save_strategy": "no",
              "use_cpu": device == "cpu", **sft}
    args = SFTConfig(output_dir=output_dir, **fields)
    data = texts(n, prompt_completion=prompt_completion)
    return SFTTrainer(model=model, args=args, train_dataset=data,
                      processing_class=tokenizer(),
                      peft_config=config if lora and not peft_model else None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--name", default="sft-lora-example")
    ap.add_argument("--packing", action="store_true", help="SFTConfig(packing=True)")
    ap.add_argument("--padding-free", action="store_true",
                    help="let the study search padding_free (TRL's collator packs each batch)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--no-train", action="store_true")
    a = ap.parse_args()

    from autotune.adapters import hf

    folder = tempfile.mkdtemp()
    path = save_llama(Path(folder) / "llama", a.hidden, a.layers, a.vocab)
    # padding_free needs max_length=None without packing (TRL's rule): the texts are short.
    sft: dict[str, Any] = {"packing": a.packing}
    if a.padding_free and not a.packing:
        sft["max_length"] = None
    trainer = users_sft_trainer(path, str(Path(folder) / "out"), a.device, **sft)
    knobs = {"padding_free": [False, True]} if a.padding_free else None
    tuned = hf.tune(trainer, device=a.device, n_trials=a.trials, name=a.name, knobs=knobs)
    print("tuned SFTConfig fields:", {k: getattr(tuned.training_args, k) for k in (
        "per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "padding_free")})
    if not a.no_train:
        tuned.apply(trainer).train()


if __name__ == "__main__":
    main()
