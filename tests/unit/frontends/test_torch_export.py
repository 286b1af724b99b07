"""xs.export and xs.mark_sharding: torch's names and PyTorch/XLA's marks in the StableHLO."""

import re
import warnings

import pytest
import torch

import stablehlo_spmd as ss
import stablehlo_spmd.torch as xs

MESH = xs.Mesh(list(range(8)), (4, 2), ("data", "model"))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _argument_shardings(text: str) -> dict[str, str | None]:
    """{argument name: its mhlo.sharding text, or None} from the module's signature."""
    signature = re.search(r"func\.func public @main\((.*?)\) ->", text).group(1)
    found = {}
    for argument in re.split(r"%arg\d+: ", signature)[1:]:
        name = re.search(r'loc\("([^"]+)"', argument).group(1)
        sharding = re.search(r'mhlo.sharding = "([^"]*)"', argument)
        found[name] = sharding.group(1) if sharding else None
    return found


def test_arguments_are_named_by_module_path_and_position():
    text = xs.export(Block(), torch.randn(8, 16))
    names = set(_argument_shardings(text))
    assert {"params['fc1.weight']", "params['fc2.bias']", "params['norm.weight']",
            "buffers['norm.running_mean']", "buffers['norm.num_batches_tracked']",
            "args[0]"} <= names


def test_marks_become_the_arguments_shardings():
    model = Block()
    x = torch.randn(8, 16)
    xs.mark_sharding(model.fc1.weight, MESH, ("model", None))
    xs.mark_sharding(x, MESH, ("data", None))
    shardings = _argument_shardings(xs.export(model, x))
    # fc1.weight is (32, 16): dim 0 over "model" (2 ways), replicated over "data".
    assert shardings["params['fc1.weight']"] == "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"
    assert shardings["args[0]"] == "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"
    xs.clear_sharding(model.fc1.weight)
    assert "params['fc1.weight']" not in {
        name for name, s in _argument_shardings(xs.export(model, x)).items() if s}


def test_a_mark_in_forward_is_a_constraint_located_in_the_model():
    class Constrained(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 32)

        def forward(self, x):
            h = torch.tanh(self.fc(x))
            xs.mark_sharding(h, MESH, ("data", "model"))
            return h.sum(dim=1)

    text = xs.export(Constrained(), torch.randn(8, 16))
    constraint = re.search(r'stablehlo.custom_call @Sharding\(%(\w+)\).*mhlo.sharding = "([^"]*)"'
                           r'.*loc\((#loc\d+)\)', text)
    assert constraint is not None, text
    assert constraint.group(2) == "{devices=[4,2]<=[8]}"
    # The constraint is named by the module whose forward marked it, at the mark's line.
    named = re.search(rf"^{constraint.group(3)} = loc\(\"[^\"]*Constrained\"\((#loc\d+)\)\)$",
                      text, re.M)
    assert named is not None, text
    position = re.search(rf"^{named.group(1)} = loc\(\"([^\"]+)\":(\d+):1\)$", text, re.M)
    assert position.group(1) == __file__
    assert "xs.mark_sharding(h, MESH" in open(__file__).read().splitlines()[int(position.group(2)) - 1]


def test_int64_inputs_are_i32_in_the_program():
    embedding = torch.nn.Embedding(10, 4)
    text = xs.export(embedding, torch.randint(0, 10, (2, 3)))
    assert re.search(r"%arg\d+: tensor<2x3xi32>.*loc\(\"args\[0\]\"", text)


def test_a_bad_spec_fails_at_the_mark():
    weight = torch.nn.Linear(4, 4).weight
    with pytest.raises(ss.ShardingError, match="rank"):
        xs.mark_sharding(weight, MESH, ("model",))
    with pytest.raises(ss.SpmdError, match="nope"):
        xs.mark_sharding(weight, MESH, ("nope", None))


def test_a_spec_may_name_axes_by_index_or_in_tuples():
    model = torch.nn.Linear(16, 8)
    xs.mark_sharding(model.weight, MESH, ((0, 1), None))
    shardings = _argument_shardings(xs.export(model, torch.randn(8, 16)))
    assert shardings["params['weight']"] == "{devices=[8,1]<=[8]}"


def test_marks_on_two_meshes_are_refused():
    model = torch.nn.Linear(16, 8)
    other = xs.Mesh(list(range(8)), (8,), ("data",))
    xs.mark_sharding(model.weight, MESH, ("model", None))
    xs.mark_sharding(model.bias, other, ("data",))
    with pytest.raises(ss.SpmdError, match="several meshes"):
        xs.export(model, torch.randn(8, 16))


def test_an_op_without_lowering_names_the_op_and_the_module():
    class Special(torch.nn.Module):
        def forward(self, x):
            return torch.special.airy_ai(x)

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.special = Special()

        def forward(self, x):
            return self.special(self.lin(x))

    with pytest.raises(ss.SpmdError) as error:
        xs.export(Outer(), torch.randn(2, 4))
    message = str(error.value)
    assert "special_airy_ai" in message and "module special" in message
    assert "test_torch_export.py:" in message


def test_a_parameter_the_function_cannot_name_is_refused():
    hidden = {"model": torch.nn.Linear(4, 4)}

    def uses_a_module_through_a_dict(x):
        return hidden["model"](x).sum()

    with pytest.raises(ss.SpmdError, match="modules="):
        xs.export(uses_a_module_through_a_dict, torch.randn(2, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = xs.export(uses_a_module_through_a_dict, torch.randn(2, 4),
                         modules=[hidden["model"]])
    assert "params['weight']" in text


def test_ops_are_located_in_the_models_code_not_the_lowerings():
    class Scan(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x).cumsum(dim=0)   # torchax lowers cumsum through a jax.jit

    text = xs.export(Scan(), torch.randn(4, 8))
    assert "torchax" not in text and "frontends/torch" not in text
    assert re.search(r'loc\("[^"]*test_torch_export.py":\d+:1\)', text)
    assert 'loc("fc"(' in text    # the module path names the ops it made


def test_an_output_that_is_not_a_tensor_is_refused_with_what_to_do():
    class Cached(torch.nn.Module):
        def forward(self, x):
            return x * 2, {"cache": object()}

    with pytest.raises(ss.SpmdError, match="returns a value of type object.*tensors only.*use_cache=False"):
        xs.export(Cached(), torch.randn(2, 3))
