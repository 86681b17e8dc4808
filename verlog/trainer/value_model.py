"""The critic on a vision-language model: a token-classification value model for Qwen2-VL and Qwen2.5-VL.

verl 0.9.1 loads its critic with ``verl.utils.model.load_valuehead_model``: first
``AutoModelForTokenClassification`` (a text model such as Qwen2 has ``Qwen2ForTokenClassification``: the language
model and a linear ``score`` head, one value per token), then, failing that, trl's value-head wrapper, which is not
installed here. transformers has no token-classification class for ``Qwen2VLConfig`` or ``Qwen2_5_VLConfig``; this
module defines one for each (the vision tower and the language model of the checkpoint, a linear ``score`` head of
``num_labels`` = 1 outputs) and registers it with ``AutoModelForTokenClassification``, so verl's loader builds the
VLM critic with no trl, with the weights of the policy's checkpoint (``lm_head`` is dropped, ``score`` starts
random as in the text critic). Its forward takes what verl's FSDP engine passes: ``input_ids``, ``attention_mask``,
``position_ids`` ``[4, B, L]`` (a text row and the three multimodal rotary rows, as verl's agent loop builds them;
``[3, B, L]`` works too) and the ``multi_modal_inputs`` (``pixel_values`` ``[patches, 1176]``, ``image_grid_thw``
``[images, 3]``), and returns ``logits`` ``[B, L, 1]``, which verl's value engine squeezes to the values ``[B, L]``.

The registration must run in the process that builds the critic (a Ray actor): :func:`install` arms it for the
moment verl's FSDP engine module is imported, and the launcher names this module in ``VERL_USE_EXTERNAL_MODULES``
for a vision-language model, so verl imports it in every process. Text-only runs never import it.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

VALUE_MODEL_MODULE = "verlog.trainer.value_model"
"""This module's name, for ``VERL_USE_EXTERNAL_MODULES``."""
FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"

_FAMILIES = {
    # class name: (transformers module, config class, base model class, pre-trained base class)
    "Qwen2VLForTokenClassification": (
        "transformers.models.qwen2_vl.modeling_qwen2_vl",
        "Qwen2VLConfig",
        "Qwen2VLModel",
        "Qwen2VLPreTrainedModel",
    ),
    "Qwen2_5_VLForTokenClassification": (
        "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLModel",
        "Qwen2_5_VLPreTrainedModel",
    ),
}
_CHECKPOINT_LAYOUT = "Qwen2VLForConditionalGeneration"
"""transformers' key renames for Qwen2-VL checkpoints written before 5.x (``visual.*``, ``model.layers.*``), which
hold for the value models too: their weights sit under ``model`` as in the conditional-generation class."""


def _define(name: str) -> type:
    """The token-classification value model class ``name`` of :data:`_FAMILIES`."""
    import importlib

    import torch
    from transformers.modeling_outputs import TokenClassifierOutput

    module_name, _, base_name, pretrained_name = _FAMILIES[name]
    module = importlib.import_module(module_name)
    base_cls, pretrained_cls = getattr(module, base_name), getattr(module, pretrained_name)

    class VisionValueModel(pretrained_cls):  # type: ignore[misc, valid-type]
        """A Qwen2-VL-family model (vision tower + language model) with a linear value head on every position."""

        _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"^lm_head\."]

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.num_labels = config.num_labels
            self.model = base_cls(config)
            self.score = torch.nn.Linear(config.get_text_config().hidden_size, config.num_labels)
            self.post_init()

        def get_input_embeddings(self) -> Any:
            return self.model.get_input_embeddings()

        def set_input_embeddings(self, value: Any) -> None:
            self.model.set_input_embeddings(value)

        def forward(
            self,
            input_ids: torch.Tensor | None = None,
            attention_mask: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None,
            pixel_values: torch.Tensor | None = None,
            image_grid_thw: torch.Tensor | None = None,
            inputs_embeds: torch.Tensor | None = None,
            use_cache: bool | None = None,
            **kwargs: Any,
        ) -> TokenClassifierOutput:
            """``logits`` ``[B, L, num_labels]``: the value head on the last hidden state of every position."""
            kwargs.pop("labels", None)
            outputs = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                pixel_values=pixel_values,
                image_grid_thw=image_grid_thw,
                inputs_embeds=inputs_embeds,
                use_cache=use_cache,
                **kwargs,
            )
            logits = self.score(outputs[0])
            return TokenClassifierOutput(logits=logits, hidden_states=getattr(outputs, "hidden_states", None))

    VisionValueModel.__name__ = VisionValueModel.__qualname__ = name
    VisionValueModel.__module__ = __name__
    return VisionValueModel


@functools.cache
def value_model_classes() -> dict[str, type]:
    """The value model classes by name (``Qwen2VLForTokenClassification``, ``Qwen2_5_VLForTokenClassification``)."""
    return {name: _define(name) for name in _FAMILIES}


def register_value_models() -> list[str]:
    """Register the value models with ``AutoModelForTokenClassification`` (and transformers' checkpoint key renames
    under their class names), for the configs transformers has no such class for; idempotent.

    Returns: the names of the classes ``AutoModelForTokenClassification`` now gives for the Qwen2-VL family."""
    import importlib

    from transformers import AutoModelForTokenClassification
    from transformers.conversion_mapping import (
        get_checkpoint_conversion_mapping,
        register_checkpoint_conversion_mapping,
    )
    from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING as mapping

    classes = value_model_classes()
    chosen = []
    for name, (module_name, config_name, _, _) in _FAMILIES.items():
        config_cls = getattr(importlib.import_module(module_name), config_name)
        if config_cls not in mapping:
            AutoModelForTokenClassification.register(config_cls, classes[name], exist_ok=True)
            layout = get_checkpoint_conversion_mapping(_CHECKPOINT_LAYOUT)
            if layout is not None:
                register_checkpoint_conversion_mapping(name, layout, overwrite=True)
        chosen.append(mapping[config_cls].__name__)
    return chosen


def install() -> None:
    """Register the value models once verl's FSDP engine module (which builds the critic) is imported here."""
    from verlog.platform.cpu import when_imported

    when_imported(FSDP_ENGINE_MODULE, lambda _module: register_value_models())


# verl imports this module in every process of a vision-language run (VERL_USE_EXTERNAL_MODULES, set by the launcher)
install()
