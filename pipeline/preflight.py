"""Preflight: one forward and backward pass of a model on a built graph, before any real training.

Catches what the seed's runs only showed after hours: a non-finite loss or
output, parameters that received no gradient (a broken gradient graph, a layer
built but never used) and gradients that are not finite.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads when a model is checked, not when badpoints starts
    import torch
    from torch_geometric.data import HeteroData


@dataclass
class Preflight:
    """What one forward and backward pass found; ``ok`` when nothing."""

    loss: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _outputs(value) -> list[tuple[str, torch.Tensor]]:
    import torch

    if isinstance(value, torch.Tensor):
        return [("output", value)]
    if isinstance(value, dict):
        return [(f"output[{key!r}]", tensor) for key, tensor in value.items() if isinstance(tensor, torch.Tensor)]
    if isinstance(value, (tuple, list)):
        return [(f"output[{n}]", tensor) for n, tensor in enumerate(value) if isinstance(tensor, torch.Tensor)]
    return []


def default_loss(output, graph: HeteroData) -> torch.Tensor:
    """BCE against admission.y when the model returns admission logits of that shape, else the outputs' mean."""
    import torch

    logits = output.get("admission") if isinstance(output, dict) else output
    y = graph["admission"].get("y") if "admission" in graph.node_types else None
    if isinstance(logits, torch.Tensor) and y is not None and logits.shape == y.shape:
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
    return torch.stack([tensor.float().mean() for _, tensor in _outputs(output)]).mean()


def default_forward(model: torch.nn.Module, graph: HeteroData):
    """``model(x_dict, edge_index_dict)``, plus ``edge_attr_dict`` when the model's forward takes a third argument."""
    parameters = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(parameters) >= 3:
        return model(graph.x_dict, graph.edge_index_dict, graph.edge_attr_dict)
    return model(graph.x_dict, graph.edge_index_dict)


def preflight(model: torch.nn.Module, graph: HeteroData,
              loss_fn: Callable[[object, HeteroData], torch.Tensor] = default_loss,
              forward: Callable[[torch.nn.Module, HeteroData], object] = default_forward) -> Preflight:
    """One forward (``forward(model, graph)``) and backward pass; report what would poison training."""
    import torch

    problems = []
    for store in graph.stores:
        key = store._key if store._key is not None else "graph"
        name = "__".join(key) if isinstance(key, tuple) else key
        for attr, value in store.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
                problems.append(f"input {name}.{attr} has {int((~torch.isfinite(value)).sum())} non-finite values")
    model.train()
    model.zero_grad(set_to_none=True)
    output = forward(model, graph)
    problems += [f"{name} has {int((~torch.isfinite(t)).sum())} non-finite values"
                 for name, t in _outputs(output) if t.is_floating_point() and not torch.isfinite(t).all()]
    loss = loss_fn(output, graph)
    if not torch.isfinite(loss):
        problems.append(f"loss is {float(loss)}")
    if loss.requires_grad:
        loss.backward()
    else:
        problems.append("loss does not require grad: no parameter reaches it (is the gradient graph broken?)")
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if parameter.grad is None:
            problems.append(f"parameter {name} received no gradient (unused, or cut off by detach/no_grad)")
        elif not torch.isfinite(parameter.grad).all():
            problems.append(f"parameter {name} has a non-finite gradient")
    model.zero_grad(set_to_none=True)
    return Preflight(loss=float(loss.detach()), problems=problems)
