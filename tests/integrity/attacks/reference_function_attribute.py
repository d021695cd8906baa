# expect: assigns op.last
import torch


def op(x, y):
    op.last = x + y
    return op.last
