"""Tensor facts (`stablehlo_spmd.shapes`) and the costs built on them."""

import pytest
from jaxlib.mlir import ir

from stablehlo_spmd.ir import make_context
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.partitioning.strategy import reshard_bytes
from stablehlo_spmd.shapes import element_bytes, tensor_bytes
from stablehlo_spmd.sharding import Sharding


@pytest.mark.parametrize("element, size", [
    ("f32", 4), ("bf16", 2), ("f64", 8), ("i1", 1), ("i8", 1), ("i64", 8), ("ui32", 4),
    ("complex<f32>", 8), ("complex<f64>", 16), ("f8E4M3FN", 1), ("i4", 1), ("index", 8)])
def test_element_bytes_as_xla_stores_them(element, size):
    with make_context():
        assert element_bytes(ir.Type.parse(element)) == size


def test_tensor_bytes_of_complex_and_non_tensors():
    with make_context():
        assert tensor_bytes(ir.Type.parse("tensor<4x8xcomplex<f32>>")) == 4 * 8 * 8
        assert tensor_bytes(ir.Type.parse("!stablehlo.token")) == 0


def test_complex64_is_priced_at_eight_bytes():
    # The partitioner's cost model and the emitter must count the same
    # bytes: all-gathering an 8x8 complex64 split 2 ways brings each device
    # the other half, 32 elements of 8 bytes.
    mesh = Mesh.from_string("x=2")
    with make_context():
        module = ir.Module.parse("func.func @f(%a: tensor<8x8xcomplex<f32>>) { return }")
        value = module.body.operations[0].regions[0].blocks[0].arguments[0]
        split = Sharding(mesh, (("x",), ()))
        assert reshard_bytes(split, Sharding.replicated(mesh, 2), value) == 32 * 8

