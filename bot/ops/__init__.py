"""Operator families: one module per family (pointwise, reduce, argreduce, softmax, norm, loss,
matmul), each owning its words, IR rule and shape check, PyTorch reference, Triton lowering,
config space, default rule and catalog entries. bot.ops.registry lists them; bot.ops.node is the
IR tree they share."""
