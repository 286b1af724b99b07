"""The PyTorch front end: PyTorch/XLA's SPMD surface over this project's pipeline.

Import it as PyTorch/XLA users import ``torch_xla.distributed.spmd``::

    import stablehlo_spmd.torch as xs

    mesh = xs.Mesh(device_ids, (4, 2), ("data", "model"))
    xs.mark_sharding(model.fc1.weight, mesh, (None, "model"))
    step = xs.compile(train_fn, x, y)      # train_fn: forward, backward, optimizer.step()
    loss = step(x, y)

How a torch function becomes a program, in the order the modules run:

    world        the modules and optimizers a function uses; names for their tensors
    marks        mark_sharding / clear_sharding; in a trace, sharding constraints
    capture      make_fx through autograd and the optimizer, then functionalize
    recompute    torch.utils.checkpoint's recomputations, each behind an optimization barrier
    lowering     the functional aten graph to a JAX function, with torchax's op table
    exported     the exported module finished: torch's locations, mesh size, donations
    compiled     export (StableHLO text) and compile (partition, PJRT, state kept on devices)
    torchax_compat   loading torchax on torch 2.13

Why this route: torchax alone lowers a module's forward, and ``jax.grad``
would differentiate it, but a PyTorch training step is written with
``loss.backward()`` and a ``torch.optim`` optimizer, whose semantics (the
gradients torch's autograd computes, the optimizers' exact update rules,
``zero_grad``) the user expects.  Tracing torch's own autograd engine and
optimizer with ``make_fx`` keeps those exactly, and torchax only has to
lower plain aten ops.  torch-mlir names no arguments and freezes weights
into constants; torch_xla needs CUDA packages here and exported the
GPT-2 step wrongly (see ``../shared/DESIGN.md``).
"""

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.frontends.torch.compiled import CompiledFunction, compile, export
from stablehlo_spmd.frontends.torch.marks import clear_sharding, mark_sharding
from stablehlo_spmd.mesh import Mesh

__all__ = ["CompiledFunction", "Mesh", "SpmdError", "clear_sharding", "compile", "export",
           "mark_sharding"]
