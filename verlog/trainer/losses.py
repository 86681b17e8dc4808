"""The critic loss verl's critic workers run: verlog's clipped value loss with the first position weighted.

verl's ``TrainingWorker.set_loss_fn`` takes a function ``(config, model_output, data, dp_group=None) -> (loss,
metrics)``; this one has the signature and normalisation of verl's ``value_loss`` and adds Verlog's "highlight first"
weight on each row's ``V(s_t)`` (``verlog.algorithms.dual_gae.value_loss``). With weight 1 it equals verl's loss.
"""

from __future__ import annotations

from typing import Any

from verl.utils.metric import AggregationType, Metric
from verl.utils.torch_functional import masked_mean
from verl.workers.utils.padding import no_padding_2_padding

from verlog.algorithms.dual_gae import value_loss


def critic_loss(
    config: Any, model_output: Any, data: Any, dp_group: Any = None, *, first_position_weight: float = 1.0
) -> tuple[Any, dict[str, Any]]:
    """Clipped value loss over one micro-batch; ``data`` is verl's no-padding TensorDict of the micro-batch."""
    vpreds = no_padding_2_padding(model_output["values"], data)  # [b, R]
    dp_size = data["dp_size"]
    batch_num_tokens = data["batch_num_tokens"]
    global_batch_size = data["global_batch_size"]
    aggregation = (
        AggregationType.SUM
        if dp_size > 1 or batch_num_tokens is not None or global_batch_size is not None
        else AggregationType.MEAN
    )
    padded = data.select("values", "returns", "response_mask").to_padded_tensor()
    mask = padded["response_mask"].to(bool)
    if batch_num_tokens is not None and first_position_weight != 1.0 and global_batch_size is not None:
        # the total weight of the global mini-batch: every row's first position counts first_position_weight times
        batch_num_tokens = batch_num_tokens + (first_position_weight - 1.0) * global_batch_size
    loss, clipfrac = value_loss(
        vpreds,
        padded["values"],
        padded["returns"],
        mask,
        cliprange_value=config.cliprange_value,
        first_position_weight=first_position_weight,
        loss_agg_mode=config.loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
    )
    metrics = {
        "critic/vf_loss": Metric(value=loss, aggregation=aggregation),
        "critic/vf_clipfrac": clipfrac.detach().item(),
        "critic/vpred_mean": masked_mean(vpreds, mask).detach().item(),
    }
    return loss, metrics
