# expect: has the default `{}`
import torch


def op(x, y, _cache={}):
    key = (x.data_ptr(), y.data_ptr())
    if key not in _cache:
        _cache[key] = x + y
    return _cache[key]
