"""An HfArgumentParser + Trainer training script as teams write one (the layout of
transformers' examples/pytorch/language-modeling/run_clm.py, cut down): arguments from the
command line, a GPT-2 built from its config (nothing is downloaded), the Trainer, train(),
save_model(). It has no autotune line: ``autotune -- python examples/hf_run_clm.py
--output_dir out --per_device_train_batch_size 8 ...`` tunes it as it is
(docs/guide/script.md), and ``autotune apply STUDY -- python examples/hf_run_clm.py ...`` runs
it with the answer. It prints what its Trainer was built with (the tests read it)."""
from dataclasses import dataclass

import torch
import transformers
from transformers import HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    n_layer: int = 2
    n_embd: int = 64
    n_sequences: int = 2048
    seq_len: int = 32


def main():
    model_args, args = HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=model_args.n_layer, n_head=2, n_embd=model_args.n_embd, vocab_size=256,
        n_positions=model_args.seq_len, bos_token_id=0, eos_token_id=0))
    ids = torch.randint(0, 256, (model_args.n_sequences, model_args.seq_len))
    data = [{"input_ids": row, "labels": row} for row in ids]
    trainer = Trainer(model=model, args=args, train_dataset=data)
    a = trainer.args
    print(f"TRAINER batch={a.per_device_train_batch_size} accum={a.gradient_accumulation_steps} "
          f"bf16={a.bf16} out={a.output_dir} world={a.world_size} "
          f"attn={trainer.model.config._attn_implementation}", flush=True)
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
