"""stablehlo-spmd: GSPMD-style SPMD partitioning of StableHLO, in Python.

The data flows through the package in this order:

    frontends/                                 a user's program (a JAX function, a PyTorch
                                               module) to StableHLO text, arguments named
    mesh, hlo_sharding, tile_axes, sharding    named meshes and sharding values, XLA's text
    rules                                      (regex, partition spec) rules
    ir, diagnostics, module_shardings          MLIR plumbing, located errors, sharding attrs
    passes/                                    one pass per file (spmd-annotate, ...)
    pipeline, api, cli/                        textual pipelines, Python API, CLIs
    runtime/                                   compile and run partitioned modules on PJRT,
                                               in one process or several

Each layer imports the value types (mesh, sharding, rules, ir, errors) and
otherwise only the layers before it, with two exceptions at the top, which
drive the whole flow: `api` (`partition`, `spmd_jit`) and its PyTorch
counterpart, `frontends/torch/compiled.py` (`xs.compile`), call the
pipeline and the runtime.  `stablehlo_spmd.torch` is the PyTorch front
end's public name (``import stablehlo_spmd.torch as xs``); this package does
not import it, so ``import stablehlo_spmd`` never loads torch.
"""

import os as _os

# XLA's C++ logging reads TF_CPP_MIN_LOG_LEVEL once, when jaxlib first loads.
# `import jax` defaults it to 1 (no INFO lines), but this package loads
# jaxlib's MLIR bindings before jax, so that default would come too late and
# every PJRT client start would print its device list on stderr.  Same
# default, set before anything loads jaxlib; a level the user chose is kept.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from stablehlo_spmd.api import (
    annotate, as_mesh, auto_shard, format_sharding, parse_sharding, partition, propagate, run_passes, spmd_jit)
from stablehlo_spmd.diagnostics import Diagnostic, SpmdWarning
from stablehlo_spmd.errors import (
    MeshError, PipelineError, RulesError, ShardingError, ShardingSyntaxError, SpmdError)
from stablehlo_spmd.frontends.jax import export
from stablehlo_spmd.hlo_sharding import HloSharding, TileAssignment
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.rules import Rule, RuleSet, load_rules, parse_rules
from stablehlo_spmd.runtime import (
    DeviceError, Executable, RuntimeCompileError, RuntimeInputError, compile, distributed,
    ensure_host_devices, run, run_single_device)
from stablehlo_spmd.sharding import Sharding

__all__ = [
    "DeviceError", "Executable", "RuntimeCompileError", "RuntimeInputError", "compile",
    "ensure_host_devices", "run", "run_single_device",
    "Diagnostic", "HloSharding", "Mesh", "MeshError", "PipelineError", "Rule", "RuleSet",
    "RulesError", "Sharding", "ShardingError", "ShardingSyntaxError", "SpmdError", "SpmdWarning",
    "TileAssignment", "annotate", "as_mesh", "auto_shard", "distributed", "export", "format_sharding", "load_rules",
    "parse_rules", "parse_sharding", "partition", "propagate", "run_passes", "spmd_jit",
]
