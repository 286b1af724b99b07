"""Tensor facts every layer needs: shapes, element and tensor bytes, zeros.

One module owns them so that the cost model, the emitter and the reports
count the same bytes (a complex64 is 8 bytes everywhere, an i1 one byte, as
XLA stores them) and so that a zero of any element type is spelled once.
Nothing here knows about meshes or shardings.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.ir import cached_attr

# Element types without a bit width of their own (index) are stored as 64-bit.
_DEFAULT_BITS = 64


def shape_of(value: ir.Value) -> tuple[int, ...] | None:
    """The static shape of a ranked tensor value; None for tokens, tuples, ..."""
    value_type = value.type
    if isinstance(value_type, ir.RankedTensorType):
        return tuple(value_type.shape)
    return None


def rank_of(value: ir.Value) -> int:
    """The rank of a ranked tensor value; 0 for anything else."""
    shape = shape_of(value)
    return len(shape) if shape is not None else 0


def element_bytes(element_type: ir.Type) -> int:
    """Bytes one element of `element_type` takes in device memory."""
    return _element_bytes(str(element_type), element_type)


_BYTES_BY_TEXT: dict[str, int] = {}


def _element_bytes(text: str, element_type: ir.Type) -> int:
    # Keyed by the type's text, not the type: an ir.Type keeps its context alive.
    found = _BYTES_BY_TEXT.get(text)
    if found is None:
        if isinstance(element_type, ir.ComplexType):
            found = 2 * element_bytes(element_type.element_type)
        else:
            bits = (element_type.width if isinstance(element_type, (ir.IntegerType, ir.FloatType))
                    else _DEFAULT_BITS)
            found = max(1, -(-bits // 8))  # i1 and 4-bit types take a whole byte
        _BYTES_BY_TEXT[text] = found
    return found


def tensor_bytes(tensor_type: ir.Type) -> int:
    """Bytes a whole ranked tensor of `tensor_type` takes (0 for other types)."""
    if not isinstance(tensor_type, ir.RankedTensorType):
        return 0
    shaped = ir.RankedTensorType(tensor_type)
    return math.prod(shaped.shape) * element_bytes(shaped.element_type)


def value_bytes(value: ir.Value) -> int:
    """`tensor_bytes` of a value's type."""
    return tensor_bytes(value.type)


def zero_literal(element_type: ir.Type) -> str:
    """A zero of `element_type` as it is written in a dense attribute."""
    if isinstance(element_type, ir.ComplexType):
        return "(0.0, 0.0)"
    if isinstance(element_type, ir.FloatType):
        return "0.0"
    if isinstance(element_type, ir.IntegerType) and element_type.width == 1:
        return "false"
    return "0"


def zero_attr(tensor_type: ir.Type) -> ir.Attribute:
    """A splat zero of `tensor_type`, built once per type."""
    element = ir.RankedTensorType(tensor_type).element_type
    return cached_attr(f"dense<{zero_literal(element)}> : {tensor_type}", tensor_type.context)


def zeros(tensor_type: ir.Type) -> ir.Value:
    """A constant zero tensor of `tensor_type`, at the current insertion point."""
    return stablehlo.ConstantOp(zero_attr(tensor_type)).result


def scalar_zero(element_type: ir.Type) -> ir.Value:
    """A rank-0 constant zero of `element_type`."""
    return zeros(ir.RankedTensorType.get([], element_type))


def local_type(value_type: ir.Type, sharding) -> ir.Type:
    """The per-device type of a value of `value_type` laid out as `sharding`
    (a `Sharding`; padded shards are ceil-sized); other types are unchanged."""
    if not isinstance(value_type, ir.RankedTensorType):
        return value_type
    shaped = ir.RankedTensorType(value_type)
    return ir.RankedTensorType.get(sharding.shard_shape(tuple(shaped.shape)), shaped.element_type)


def int_constant(value: int, tensor_type: ir.Type) -> ir.Value:
    """A splat integer constant of `tensor_type` (an index, a size, an offset)."""
    element = ir.RankedTensorType(tensor_type).element_type
    return stablehlo.ConstantOp(ir.DenseElementsAttr.get_splat(
        tensor_type, ir.IntegerAttr.get(element, value))).result
