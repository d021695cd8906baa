"""The request reader, stage 1 of the offline generator: request words -> operator spec.

A request is English, Chinese or pasted PyTorch (a function, or an nn.Module file). Reviewers'
corrections ("bf16 only", "also 1x32", "eps 1e-5", "make it gelu(x + y)") are read the same way
and applied on top, later ones winning. Reading is a series of small passes over the text;
each pass takes what it understands and blanks it out, so a later pass does not read the
same words again (the "x" of 4096x4096 is not an input, "log softmax" is not log). What no pass
placed must be filler (bot.request.residue), else the request is refused naming it; the order of
operation words and the operands they name are read by bot.request.order.

One module a job; each imports only modules to its left (the first four import none of the package):
    residue, order, messages, vocabulary < pasted_constants < pasted_layers < pasted_inputs
    < pasted_module < reading < words < torch_code < expression < operation < pasted < state
    < read < merge < describe < build < parse
"""
from bot.request.messages import ASK_OP, CORRECTION_HELP, SUPPORTED
from bot.request.parse import parse_request
from bot.request.pasted import pasted_class, pasted_source

__all__ = ["ASK_OP", "CORRECTION_HELP", "SUPPORTED", "parse_request", "pasted_class", "pasted_source"]
