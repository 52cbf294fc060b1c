"""Fine-tune a language model with LoRA through TRL's SFTTrainer, tuned by autotune (CPU, a few
minutes).

The documentation's fine-tuning page shows this file as it is, and the test suite runs it
(tests/test_docs_examples.py), so it works as written. Nothing is downloaded: a small Llama is
saved with save_pretrained and loaded back by path, as a checkpoint from the Hub cache is, and
the tokenizer is built from a word list.
"""

import os
import random
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)
from trl import SFTConfig, SFTTrainer  # noqa: E402

import autotune  # noqa: E402
from autotune.adapters import hf  # noqa: E402

# --- your own code: a checkpoint loaded by path, LoRA adapters, an SFTTrainer -----------------
WORDS = [f"w{i}" for i in range(200)]
vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<s>", "</s>"] + WORDS)}
tok_model = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok_model.pre_tokenizer = pre_tokenizers.Whitespace()
tok = PreTrainedTokenizerFast(tokenizer_object=tok_model, unk_token="<unk>", pad_token="<pad>",
                              bos_token="<s>", eos_token="</s>")
checkpoint = tempfile.mkdtemp()  # stands in for a downloaded model's folder
LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             pad_token_id=0, bos_token_id=2, eos_token_id=3)
                 ).save_pretrained(checkpoint)

model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
rng = random.Random(0)
texts = Dataset.from_dict({"text": [" ".join(rng.choices(WORDS, k=rng.randint(4, 48)))
                                    for _ in range(256)]})
args = SFTConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                 gradient_accumulation_steps=4,  # a global batch of 16
                 max_length=64, max_steps=4, report_to="none", save_strategy="no", use_cpu=True)
trainer = SFTTrainer(model=model, args=args, train_dataset=texts, processing_class=tok,
                     peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"],
                                            task_type="CAUSAL_LM"))

# --- autotune: tune the SFTTrainer, take the answer that keeps your training, train -----------
# Tiny settings so that this example runs in a few minutes on a CPU; for a real study drop
# the window.* overrides and raise n_trials.
short = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
         "window.min_measure_steps=2", "window.min_measure_seconds=1",
         "window.profile=false", "study.confirm_budget_s=20"]
try:
    tuned = hf.tune(trainer, overrides=short, device="cpu", n_trials=2, name="sft-lora-docs")
except autotune.CouldNotMeasure as exc:  # a busy machine: the study says why, and its export
    print(exc)                            # keeps only what its intervals support
    tuned = exc.tuned
print("both answers:", tuned.best.document["training"]["words"])
same = tuned.same_training()  # your global batch of 16 kept; None: your settings were fastest
if same is not None:
    hf.apply(trainer, same)
trainer.train()
