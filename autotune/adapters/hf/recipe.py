"""A Hugging Face model sent to the trials as its recipe: what ``from_pretrained`` loaded it from,
and what changed since (PEFT adapters, parameters frozen or cast, weights the checkpoint does
not hold).

``hf.tune(trainer)`` used to pickle the Trainer's model with its weights: a 7B model in bf16 is
~14 GB written per study and held twice in the user's process while it was serialized, for
weights every trial can read itself from where they came from. A model loaded with
``from_pretrained`` travels as ``ModelRecipe``: its path, class, config (by value: a few KB),
dtype, attention implementation (and quantization, in its config); its PEFT adapters as their
``PeftConfig`` and their own weights; the ``requires_grad`` and dtype of every parameter; and by
value only the weights its checkpoint files do not hold (a head initialized on loading). Each
trial rebuilds it (``ModelRecipe.build``). Everything else travels by value, its weights as a
safetensors file (core/tensor_file.py), and ``model_travel`` says why: a model with no path
(built from a config), a checkpoint not on this machine in safetensors form, weights changed
in memory since loading, merged PEFT adapters (then the model is a plain model whose base
weights changed), an instance whose ``forward`` was replaced (other than TRL's fused LM head,
which the recipe applies again), a PeftMixedModel.

Weights changed since loading are found cheaply, not proven absent: every tensor the
checkpoint holds is compared by shape, and by value on three rows (its first, middle and last
along the first dimension) read from the memory-mapped safetensors files. Training, resizing
the vocabulary, merging adapters or loading another state dict changes those rows; an edit
confined to other rows (a hand-set embedding row in the middle of the vocabulary, say) is not
seen, and a quantized model's weights are not compared at all (its checkpoint holds other
numbers than its memory). ``hf.tune(trainer, ship_weights=True)`` ships the model by value
whatever it is.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autotune.core.workload import WorkloadError, resolve_target

#: from_pretrained's dtype keyword: ``dtype`` from transformers 4.56 (``torch_dtype`` before it,
#: which 5.x warns about); the hf extra's floor is 4.46.
DTYPE_KEYWORD = ("dtype" if tuple(int(p) for p in
                           importlib.metadata.version("transformers").split(".")[:2]) >= (4, 56)
                 else "torch_dtype")
#: Above this share of the model's bytes held by weights its checkpoint lacks, the recipe
#: would ship most of the model anyway: it travels by value instead (its names are not the
#: checkpoint's, e.g. a checkpoint transformers renamed on loading).
EXTRA_SHARE = 0.5
#: The parameter names PEFT gives a layer it wraps, and the original module it keeps beside
#: a trainable copy: the checkpoint's name is the path without them.
_PEFT_WRAPPERS = {"base_layer", "original_module"}


@dataclasses.dataclass
class Adapter:
    """One PEFT adapter: its name, its ``PeftConfig`` and its own weights."""

    name: str
    config: Any
    weights: dict[str, torch.Tensor]


@dataclasses.dataclass
class ModelRecipe:
    """How a trial rebuilds the user's model (see the module's docstring)."""

    path: str
    model_class: str
    config: Any
    dtype: str
    attn_implementation: str | None
    #: (name, requires_grad, dtype) of every parameter of the user's model, adapters included.
    params: list[tuple[str, bool, str]]
    #: Weights the checkpoint does not hold (by their checkpoint name), by value.
    extra: dict[str, torch.Tensor]
    adapters: list[Adapter]
    active: Any = None
    #: TRL's fused LM head (add_fused_lm_head's arguments) where SFTTrainer had added one.
    fused_head: dict[str, Any] | None = None
    base_bytes: int = 0
    #: The checkpoint holds quantized weights (its own config.json has a quantization_config):
    #: the config carries it as it is. Otherwise a quantization_config was given on loading.
    pre_quantized: bool = False

    def build(self, patches: bool = True) -> nn.Module:
        """The model as the user's Trainer holds it. ``patches``: TRL's fused LM head too (a
        new SFTTrainer adds its own: verify builds without). Pinned: ``path`` is the folder
        the user's checkpoint was read from (absolute; a Hub model's snapshot of the revision
        it was loaded at), read with ``local_files_only`` so a trial never reaches the network;
        a model quantized on loading is quantized again by its quantization config, passed as
        the keyword (in the config it would read as a checkpoint already quantized)."""
        cls = resolve_target(self.model_class)
        config = copy.deepcopy(self.config)
        kwargs: dict[str, Any] = {"config": config, DTYPE_KEYWORD: getattr(torch, self.dtype),
                                  "local_files_only": True}
        if self.attn_implementation:
            kwargs["attn_implementation"] = self.attn_implementation
        quantization = getattr(config, "quantization_config", None)
        if quantization is not None and not self.pre_quantized:
            from transformers.quantizers.auto import AutoQuantizationConfig

            kwargs["quantization_config"] = (AutoQuantizationConfig.from_dict(quantization)
                                             if isinstance(quantization, dict) else quantization)
            del config.quantization_config
        model = cls.from_pretrained(self.path, **kwargs)
        if self.extra:
            taken: Any = model.load_state_dict(self.extra, strict=False)
            if taken.unexpected_keys:
                raise WorkloadError(
                    f"the model rebuilt from its recipe ({self.words()}) has no place for the "
                    f"weights {sorted(taken.unexpected_keys)[:3]} the Trainer's model held "
                    "beside its checkpoint: ship it by value instead, "
                    "hf.tune(trainer, ship_weights=True).")
        if self.adapters:
            model = self._with_adapters(model)
        if patches and self.fused_head is not None:
            from trl.trainer.utils import add_fused_lm_head

            base = model.get_base_model() if self.adapters else model
            add_fused_lm_head(base, **self.fused_head)
        self._as_the_users(model)
        return model  # type: ignore[no-any-return]

    def _with_adapters(self, model: nn.Module) -> nn.Module:
        from peft import get_peft_model, set_peft_model_state_dict

        first, *rest = self.adapters
        peft_model = get_peft_model(model, copy.deepcopy(first.config), adapter_name=first.name)
        for adapter in rest:
            peft_model.add_adapter(adapter.name, copy.deepcopy(adapter.config))
        for adapter in self.adapters:
            loaded: Any = set_peft_model_state_dict(peft_model, adapter.weights,
                                                    adapter_name=adapter.name)
            if loaded.unexpected_keys:
                raise WorkloadError(
                    f"the PEFT adapter {adapter.name!r} rebuilt from the Trainer's model's recipe "
                    f"did not take its weights {loaded.unexpected_keys[:3]}: ship the model by "
                    "value instead, hf.tune(trainer, ship_weights=True).")
        if isinstance(self.active, str):
            peft_model.set_adapter(self.active)
        elif self.active:
            peft_model.base_model.set_adapter(list(self.active))
        return peft_model  # type: ignore[no-any-return]

    def _as_the_users(self, model: nn.Module) -> None:
        """Each parameter frozen or trained, and of the dtype, as in the user's model; a model
        rebuilt with other parameters is refused, naming them."""
        params = dict(model.named_parameters())
        theirs = {name for name, _, _ in self.params}
        if set(params) != theirs:
            lost, new = sorted(theirs - set(params)), sorted(set(params) - theirs)
            raise WorkloadError(
                f"the model rebuilt from its recipe ({self.words()}) has other parameters than "
                f"the Trainer's model (missing: {lost[:3]}, not in it: {new[:3]}): ship it by "
                "value instead, hf.tune(trainer, ship_weights=True).")
        for name, requires_grad, dtype in self.params:
            param = params[name]
            if str(param.dtype) != dtype:
                param.data = param.data.to(getattr(torch, dtype.removeprefix("torch.")))
            param.requires_grad_(requires_grad)

    def words(self) -> str:
        quant = getattr(self.config, "quantization_config", None)
        method = (quant.get("quant_method") if isinstance(quant, dict)
                  else getattr(quant, "quant_method", None))
        loaded = (f"from_pretrained({self.path!r}, dtype={self.dtype}"
                  + (f", attn_implementation={self.attn_implementation}"
                     if self.attn_implementation else "")
                  + (f", quantization={getattr(method, 'value', method)}" if quant else "") + ")")
        kinds = {"LORA": "LoRA"}
        adapters = []
        for a in self.adapters:
            kind = str(getattr(a.config.peft_type, "value", a.config.peft_type))
            rank = f", r={a.config.r}" if getattr(a.config, "r", None) else ""
            adapters.append(f"{kinds.get(kind, kind)} adapter {a.name!r}{rank}")
        return " + ".join([loaded, *adapters])

    @property
    def shipped_bytes(self) -> int:
        tensors = [*self.extra.values(), *(t for a in self.adapters for t in a.weights.values())]
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclasses.dataclass
class Travel:
    """How the Trainer's model reaches the trials: ``part`` (a ModelRecipe, or the model
    itself by value) and ``words``, what the study says of it."""

    part: Any
    words: str
    by_value_why: str | None = None

    @property
    def is_recipe(self) -> bool:
        return isinstance(self.part, ModelRecipe)


def model_travel(model: nn.Module, by_value: bool = False) -> Travel:
    """The recipe of ``model`` where it has one (and ``by_value`` is not asked), else the model
    by value, with why."""
    recipe, why = (None, "ship_weights=True") if by_value else recipe_of(model)
    if recipe is not None:
        return Travel(recipe, f"the model travels as its recipe, {recipe.words()}: "
                              f"{size(recipe.shipped_bytes)} of weights shipped, its "
                              f"{size(recipe.base_bytes)} of base weights read by each trial "
                              "from there")
    return Travel(model, f"the model travels by value ({why}): {size(_bytes(model))} of weights "
                         "shipped as safetensors", why)


def recipe_of(model: nn.Module) -> tuple[ModelRecipe | None, str]:
    """``model``'s recipe, or None and why it has none."""
    peft_model, base = split_peft(model)
    if peft_model is not None:
        if type(peft_model).__name__ == "PeftMixedModel":
            return None, "a PeftMixedModel"
        if any(getattr(m, "merged", False) is True for m in peft_model.modules()):
            return None, "its PEFT adapters are merged into its base weights: a plain model"
    path = str(getattr(base, "name_or_path", "") or "")
    if not path or not hasattr(base, "config") or not hasattr(type(base), "from_pretrained"):
        return None, "it was not loaded with from_pretrained: no path to rebuild it from"
    fused = fused_head(base)
    if "forward" in vars(base) and fused is None:
        return None, "its forward was replaced on the instance"
    folder = _checkpoint_folder(path, getattr(base.config, "_commit_hash", None))
    if folder is None:
        return None, f"its checkpoint {path!r} is not on this machine in safetensors form"
    adapters = list(getattr(peft_model, "peft_config", {}) or {}) if peft_model else []
    _refuse_offloaded(model)
    rebuilds = _config_builds_it(base, set(adapters))
    if rebuilds:
        return None, rebuilds
    changed, extra = _changed_since_loading(base, folder, set(adapters))
    if changed:
        return None, f"its weights changed since loading: {changed}"
    recipe = ModelRecipe(
        path=str(folder.resolve()), model_class=f"{type(base).__module__}.{type(base).__qualname__}",
        config=base.config, dtype=str(base.dtype).removeprefix("torch."),
        attn_implementation=getattr(base.config, "_attn_implementation", None),
        params=[(n, bool(p.requires_grad), str(p.dtype)) for n, p in model.named_parameters()],
        extra=extra, adapters=[_adapter(peft_model, name) for name in adapters],
        active=getattr(peft_model, "active_adapters", None) if peft_model else None,
        fused_head=fused, base_bytes=_bytes(base), pre_quantized=_pre_quantized(folder))
    if recipe.active is not None and len(recipe.active) == 1:
        recipe.active = recipe.active[0]
    return recipe, ""


def split_peft(model: Any) -> tuple[Any, Any]:
    """(the PeftModel, its base model), or (None, the model) for a model PEFT does not wrap."""
    if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
        return model, model.get_base_model()
    return None, model


def _adapter(peft_model: Any, name: str) -> Adapter:
    from peft import get_peft_model_state_dict

    weights = get_peft_model_state_dict(peft_model, adapter_name=name, save_embedding_layers=False)
    return Adapter(name, peft_model.peft_config[name], dict(weights))


def fused_head(base: nn.Module) -> dict[str, Any] | None:
    """TRL's fused LM head on ``base`` (SFTTrainer adds it), as add_fused_lm_head's arguments."""
    forward = vars(base).get("forward")
    func: Any = getattr(forward, "__func__", None)
    code = getattr(func, "__code__", None)  # functools.wraps gave it the model's own names
    if code is None or code.co_name != "_fused_forward" or "trl" not in code.co_filename:
        return None
    found = inspect.getclosurevars(func).nonlocals
    names = ("temperature", "cast_lm_head_to_fp32", "outputs")
    return {k: found[k] for k in names if k in found}


def _checkpoint_folder(path: str, revision: str | None = None) -> Path | None:
    """The folder of the checkpoint's safetensors files: the path itself, or the Hub cache's
    snapshot of a model id at ``revision`` (the commit from_pretrained read: config's
    ``_commit_hash``), so the trials read the weights the user loaded even after the cache
    took a newer revision (nothing is downloaded)."""
    folder = Path(path)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(path, revision=revision, local_files_only=True))
        except Exception:  # noqa: BLE001 - not a cached model id: no recipe, and said why
            return None
    return folder if any(folder.glob("*.safetensors")) else None


def _refuse_offloaded(model: nn.Module) -> None:
    """A model whose parameters are not in memory (offloaded by a device_map to the CPU or the
    disk: accelerate leaves them on the meta device) cannot be compared with its checkpoint,
    shipped, or measured as it runs: said at ``tune``, not as a crash in the row check."""
    offloaded = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if offloaded:
        raise WorkloadError(
            f"the Trainer's model has {len(offloaded)} parameter(s) not in memory ({offloaded[0]}"
            f"{', ...' if len(offloaded) > 1 else ''} on the meta device: offloaded by a "
            "device_map, or never loaded): autotune measures trials with the whole model in "
            "memory, which is not how this model runs. Load it without offloading (device_map "
            "on one device, or none) to tune it.")


def _config_builds_it(base: nn.Module, adapters: set[str]) -> str:
    """Why ``base``'s config no longer builds ``base`` ("" where it does): the config built on
    the meta device (no memory, no weights) against the model's own parameters, by name and
    shape. A config edited after loading (fewer layers, another vocabulary) otherwise failed in
    every trial instead of here. A quantized model's packed shapes are not compared."""
    if getattr(base, "hf_quantizer", None) is not None:
        return ""
    with torch.device("meta"):
        try:
            built = type(base)(copy.deepcopy(base.config))
        except Exception as exc:  # noqa: BLE001 - any failure to build is the answer
            return f"its config no longer builds it ({type(exc).__name__}: {exc})"
    theirs = {n: tuple(p.shape) for n, p in built.named_parameters()}
    mine = {key: tuple(p.shape) for n, p in base.named_parameters()
            if (key := checkpoint_key(n, adapters)) is not None}
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if not differ:
        return ""
    key = differ[0]
    return (f"its config was edited since loading: built from it, {key} is "
            f"{theirs.get(key, 'absent')}, in the model {mine.get(key, 'absent')}")


def _pre_quantized(folder: Path) -> bool:
    """Whether the checkpoint's own config.json says its weights are quantized."""
    import json

    try:
        return "quantization_config" in json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False


def checkpoint_key(name: str, adapters: set[str]) -> str | None:
    """The checkpoint's name for a parameter of a model PEFT may have wrapped: None for an
    adapter's own tensor (a path through an adapter's name)."""
    parts = name.split(".")
    if adapters & set(parts):
        return None
    return ".".join(p for p in parts if p not in _PEFT_WRAPPERS)


def _changed_since_loading(base: nn.Module, folder: Path,
                           adapters: set[str]) -> tuple[str | None, dict[str, torch.Tensor]]:
    """Why ``base``'s weights are not its checkpoint's any more (None: they are, as far as
    three rows of each tensor tell), and the weights the checkpoint does not hold."""
    from safetensors import safe_open

    where: dict[str, Any] = {}
    for file in sorted(folder.glob("*.safetensors")):
        handle = safe_open(str(file), framework="pt")
        where.update(dict.fromkeys(handle.keys(), handle))
    quantized = getattr(base, "hf_quantizer", None) is not None
    state = {checkpoint_key(n, adapters): t for n, t in base.state_dict().items()}
    state.pop(None, None)
    held = {t.data_ptr() for k, t in state.items() if k in where}
    for key, tensor in state.items():
        if key not in where or quantized:
            continue
        stored = list(where[key].get_slice(key).get_shape())
        if list(tensor.shape) != stored:
            return f"{key} is {tuple(tensor.shape)} in memory, {tuple(stored)} in {folder}", {}
        if not _rows_equal(tensor, where[key], key):
            return f"{key} differs from {folder}'s", {}
    extra = {k: t for k, t in state.items() if k is not None and k not in where
             and t.data_ptr() not in held and not quantized}
    if sum(_nbytes(t) for t in extra.values()) > EXTRA_SHARE * max(_bytes(base), 1):
        return (f"most of its weights have names {folder}'s checkpoint does not hold "
                f"(e.g. {next(iter(extra))})"), {}
    return None, extra


def _rows_equal(tensor: torch.Tensor, handle: Any, key: str) -> bool:
    """A small tensor whole, a larger one on its first, middle and last rows, read from the
    memory-mapped file: equal to the checkpoint's, cast as from_pretrained cast it."""
    mine = tensor.detach()
    if mine.dim() == 0 or mine.numel() <= 4096:
        pairs = [(handle.get_tensor(key), mine)]
    else:
        sliced, rows = handle.get_slice(key), mine.shape[0]
        pairs = [(sliced[i:i + 1], mine[i:i + 1]) for i in sorted({0, rows // 2, rows - 1})]
    return all(torch.equal(stored.to(ours.dtype), ours.to("cpu")) for stored, ours in pairs)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _bytes(model: nn.Module) -> int:
    """The bytes of a module's tensors, each storage once (tied weights count once)."""
    seen: dict[int, int] = {}
    for t in [*model.parameters(), *model.buffers()]:
        seen.setdefault(t.data_ptr(), _nbytes(t))
    return sum(seen.values())


def size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.1f} MB" if n >= 2**18 \
        else f"{n / 2**10:.0f} KB"
