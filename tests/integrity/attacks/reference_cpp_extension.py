# expect: uses torch.utils
import torch


def op(x, y):
    torch.utils.cpp_extension.load_inline("slow", "")
    return x + y
