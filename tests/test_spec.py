"""Spec validation and its JSON form."""
from __future__ import annotations

import json
import re

import pytest

from bot import spec


def add_spec(**extra) -> dict:
    return {"name": "add", "expression": "x + b",
            "inputs": [{"name": "x", "dtypes": ["fp16", "float32"], "shapes": [[64, 128], [5, 7]]},
                       {"name": "b", "dtypes": ["fp16", "float32"], "shapes": [[128], [7]]}], **extra}


def test_dumps_round_trips_and_keeps_strings_untouched():
    s = spec.validate(add_spec(defaults_used=["b: [N] broadcast", "odd [1,2] text"], params={}))
    text = spec.dumps(s)
    assert json.loads(text) == s
    assert '"shapes": [[64, 128], [5, 7]]' in text and '"odd [1,2] text"' in text


def test_validate_normalises_dtypes_and_computes_outputs():
    s = spec.validate(add_spec())
    assert s["inputs"][0]["dtypes"] == ["float16", "float32"]
    assert s["outputs"][0]["shapes"] == [[64, 128], [5, 7]]


@pytest.mark.parametrize("change,message", [
    (lambda s: s["inputs"][0].update(dtypes=["int8", "fp32"]), "unsupported dtype 'int8'"),
    (lambda s: s["inputs"][0].update(shapes=[[0, 4], [5, 7]]), "dimension below 1"),
    (lambda s: s["inputs"][0].update(shapes=[[10**6, 10**6], [5, 7]]), "the limit is"),
    (lambda s: s["inputs"][0].update(shapes=[[1, 2, 3, 4, 5], [5, 7]]), "supported ranks are 1 to 4"),
    (lambda s: s["inputs"][1].update(shapes=[[128]]), "one shape per case"),
    (lambda s: s.update(expression="x + y"), "make them match"),
    (lambda s: s.update(name="1bad"), "Python identifier"),
    (lambda s: s.update(backend="gpu"), "cuda-NAME"),
    (lambda s: s["inputs"][0].update(parameter="fc.weight", shapes=[[5, 7]] * 2), "input b comes after a module parameter"),
    (lambda s: s["inputs"][1].update(parameter="fc.weight; import os"), "names a tensor of the pasted module"),
    (lambda s: s["inputs"][1].update(parameter="fc.bias"), "one shape in every case"),
])
def test_bad_specs_name_the_problem(change, message):
    s = add_spec()
    change(s)
    with pytest.raises(spec.SpecError, match=message.replace("(", r"\(").replace("[", r"\[")):
        spec.validate(s)


def mask_spec(expression: str = "x * b") -> dict:
    """add_spec with b a bool mask."""
    x, b = add_spec()["inputs"]
    return add_spec(expression=expression, inputs=[x, {**b, "dtypes": ["bool", "bool"]}])


def test_a_bool_input_is_a_mask_and_the_output_keeps_the_float_dtype():
    s = spec.validate(mask_spec())
    assert s["inputs"][1]["domain"] == "mask" and s["outputs"][0]["dtypes"] == ["float16", "float32"]
    assert spec.validate(mask_spec("where(b, x, 0.0)"))["inputs"][1]["domain"] == "mask"


@pytest.mark.parametrize("edit,message", [
    (lambda s: s["inputs"][1].update(dtypes=["bool", "fp32"]), "dtypes must all be bool"),
    (lambda s: s["inputs"][1].update(domain="mask", dtypes=["fp16", "fp32"]), "dtypes must all be bool"),
    (lambda s: s["inputs"][0].update(dtypes=["bool", "bool"]), "at least one input must be float16"),
    (lambda s: s.update(expression="x - b"), "(x - b): PyTorch refuses the bool mask b"),
    (lambda s: s.update(expression="x / b"), "(x / b): PyTorch refuses"),
    (lambda s: s.update(expression="sum(b, dim=-1) + x"), "sum(b, dim=-1): PyTorch refuses"),
    (lambda s: s.update(expression="where(x, b, b)"), "input x stands as where's condition"),
])
def test_bad_masks_name_the_problem(edit, message):
    s = mask_spec()
    edit(s)
    with pytest.raises(spec.SpecError, match=re.escape(message)):
        spec.validate(s)


def test_a_modules_learned_tensors_fix_their_sizes_whatever_an_edit_says():
    s = add_spec(fixed_sizes=[], least_size=1)
    s["inputs"][1].update(parameter="fc.bias", shapes=[[128], [128]])
    s["inputs"][0]["shapes"] = [[64, 128], [5, 128]]
    assert spec.validate(s)["fixed_sizes"] == [128] and "least_size" not in spec.validate(s)
    assert "fixed_sizes" not in spec.validate(add_spec(fixed_sizes=[64]))


@pytest.mark.parametrize("fields, message", [
    ({"dtypes": ["int64"], "range": [0, 2]}, None),
    ({"dtypes": ["float32"], "range": [0, 2]}, "domain whole is int64 in every variant"),
    ({"dtypes": ["int64"]}, "with \"range\": \\[low, high\\]"),
    ({"dtypes": ["int64"], "range": [3, 3]}, "low < high"),
    ({"dtypes": ["int64"], "range": [0, 2**30]}, "within 2\\*\\*24"),
])
def test_whole_numbers_are_int64_with_the_range_they_are_drawn_from(fields, message):
    validate, SpecError = spec.validate, spec.SpecError
    given = {"name": "op", "expression": "where(m == 0.0, -inf, x)",
             "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[4, 6]]},
                        {"name": "m", "shapes": [[4, 6]], "domain": "whole", **fields}]}
    if message is None:
        assert validate(given)["inputs"][1]["domain"] == "whole"      # compared with 0, it stays whole
    else:
        with pytest.raises(SpecError, match=message):
            validate(given)


def test_whole_numbers_past_what_the_float_dtype_holds_are_refused():
    given = {"name": "op", "expression": "where(m == 257.0, x, 0.0)",
             "inputs": [{"name": "x", "dtypes": ["float32", "bfloat16"], "shapes": [[4, 6]]},
                        {"name": "m", "dtypes": ["int64", "int64"], "shapes": [[4, 6]], "domain": "whole",
                         "range": [250, 260]}]}
    with pytest.raises(spec.SpecError, match="reach past 256, which bfloat16"):
        spec.validate(given)
    given["inputs"][0]["dtypes"] = ["float32", "float16"]
    assert spec.validate(given)["inputs"][1]["range"] == [250, 260]


def test_no_other_case_is_drawn_where_its_sizes_would_not_fit_the_expression():
    # a constant of 20 beside x.flatten(1) of x [3, 4, 5]: the odd case would change 4 and 5, not 20
    made = spec.validate({"name": "op", "expression": "x.flatten(1) + torch.ones(20)",
                          "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[3, 4, 5]]}]})
    assert made["fixed_sizes"] == [3, 4, 5, 20]
    made = spec.validate({"name": "op", "expression": "x + torch.ones(5)",
                          "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[3, 4, 5]]}]})
    assert made["fixed_sizes"] == [5]
