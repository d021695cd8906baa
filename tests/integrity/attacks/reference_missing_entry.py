# expect: no module-level `def op(...)`
import torch


def other(x, y):
    return x + y
