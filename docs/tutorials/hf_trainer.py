"""Tune a Hugging Face Trainer you already hold, then train with the result (CPU, ~1 minute).

The documentation's Hugging Face page shows this file as it is, and the test suite runs it
(tests/test_docs_examples.py), so it works as written. Nothing is downloaded: the model is
built from its config and the tokenizer from a word list.
"""

import random
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

import autotune
from autotune.adapters import hf

# --- your own code: a tokenizer, sentences of varying length, a small BERT, a Trainer ----------
WORDS = "the a movie film story plot was is very not good great bad poor dull fun slow".split()
vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS)}
tok_model = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok_model.pre_tokenizer = pre_tokenizers.Whitespace()
tok = PreTrainedTokenizerFast(tokenizer_object=tok_model, unk_token="[UNK]", pad_token="[PAD]",
                              cls_token="[CLS]", sep_token="[SEP]")


class Reviews(torch.utils.data.Dataset):
    def __init__(self, n=512, seed=0):
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 40))]
            label = int(words.count("good") + words.count("great") > words.count("bad"))
            self.items.append({**tok(" ".join(words)), "labels": label})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8,
                         max_steps=20, report_to="none", save_strategy="no", use_cpu=True)
trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                  train_dataset=Reviews(), data_collator=DataCollatorWithPadding(tok))

# --- autotune: tune the Trainer's settings, apply them, train -----------------------------------
# Tiny settings so that this example runs in about a minute on a CPU; for a real study drop
# the window.* overrides and raise n_trials.
short = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
         "window.min_measure_steps=2", "window.min_measure_seconds=1",
         "window.profile=false", "study.confirm_budget_s=20"]
try:
    tuned = hf.tune(trainer, overrides=short, device="cpu", n_trials=2, name="hf-trainer-docs")
except autotune.CouldNotMeasure as exc:  # a busy machine: the study says why, and its export
    print(exc)                            # keeps only what its intervals support
    tuned = exc.tuned
print("both answers:", tuned.best.document["training"]["words"])
# The answer that trains the same model as yours (your batch kept): best.yaml where the
# fastest configuration does, else best-same-training.yaml; None: yours measured fastest.
same = tuned.same_training()
if same is not None:
    hf.apply(trainer, same)  # your Trainer with every measured setting applied
trainer.train()
