"""A pasted nn.Module called the way the judge calls a kernel: forward's tensors first, then the
module's learned tensors (the spec's inputs with a "parameter", e.g. "conv.weight"). The judge
makes those tensors like any other input, so the reference and the kernel see the same weights,
drawn by the judge, never by the module's own init.

The untrusted worker imports this file, and the runner writes it into every job directory (over any
file of that name a job brings) for the generated tests to import, so both call a pasted module
alike. It imports nothing but torch.
"""
from __future__ import annotations

import torch


def module_call(module, parameters, device=None, forward=None):
    # A function of forward's tensors followed by one tensor per name in `parameters`. A call binds
    # each of those into the module unless the module already holds that very memory (timed loops
    # pass the same tensors; a Parameter made of a tensor shares its memory, so a refilled input is
    # seen), and runs the module in the dtype of its first float argument (float64 for the ground
    # truth), on device where one is given. forward: the module, or torch.compile of it. Nothing
    # requires grad, so torch eager builds no autograd graph.
    forward = forward or module
    module.requires_grad_(False)
    if device is not None:
        module.to(device)
    owners = []         # (submodule, attribute, whether it is a Parameter) per name
    for name in parameters:
        owner = module.get_submodule(name.rpartition(".")[0])
        leaf = name.rpartition(".")[2]
        is_parameter = leaf in dict(owner.named_parameters(recurse=False))
        if not is_parameter and leaf not in dict(owner.named_buffers(recurse=False)):
            raise KeyError(f"the module has no parameter or buffer {name!r}")
        owners.append((owner, leaf, is_parameter))

    def call(*args):
        split = len(args) - len(parameters)
        dtype = next((t.dtype for t in args if t.is_floating_point()), None)
        held = [*module.parameters(), *module.buffers()]
        if dtype is not None and any(t.dtype != dtype for t in held if t.is_floating_point()):
            module.to(dtype)        # what no argument binds (a running mean) follows the call's dtype
        for (owner, leaf, is_parameter), tensor in zip(owners, args[split:]):
            held = getattr(owner, leaf)
            if held is None or held.data_ptr() != tensor.data_ptr() or held.shape != tensor.shape \
                    or held.dtype != tensor.dtype:
                setattr(owner, leaf, torch.nn.Parameter(tensor, requires_grad=False) if is_parameter else tensor)
        return forward(*args[:split])

    return call
