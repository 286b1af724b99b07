"""What a plan holds in memory: its buffers, the rows that bound them, its peak.

`_Memory` is the part of `Search` that lists the buffers a plan may hold
(`_memory_terms`: each value's, at the width the target holds it, and the
copies contractions make: transposed, or converted to the width a target
computes 16-bit floats in), writes the bytes live at a program point as a
row linear in the program's variables (`_memory_row`), and measures a
plan's peak (`_peak`) with the copies it makes of values read in other
layouts (`_copies`).  How the rows bound the peak is the package
docstring's *Memory*.
"""

from __future__ import annotations

import bisect
import collections

import numpy as np

from stablehlo_spmd.auto_sharding.strategies import _is_contraction, _shards
from stablehlo_spmd.op_graph import NO_VALUE
from stablehlo_spmd.op_rules import FactorKind, OpRule
from stablehlo_spmd.sharding import Sharding


class _Memory:
    """The memory terms and rows of a `Search`, over its attributes: `graph`,
    `layouts`, `nbytes`, `root`, `consumers`, `argument_roots`, `real_nodes`,
    `unit_of_node`, `node_strategy`, `free_sources` and `value_layouts`.
    `_memory_terms` sets `reads` and `read_sources`, which the rows and the
    copies read, and `live_out` and `lendable`, the results' allocations
    that `_peak` places temporaries in.  A plan that recomputes segments
    (`remat.py`) sets `recomputed` (each freed value: its last forward read,
    and where it is made again) and `held_until` (what a recomputation
    reads: held until it runs)."""

    recomputed: dict[int, tuple[int, int]]
    held_until: dict[int, int]

    def _memory_terms(self):
        """Per buffer: (class root, unit, bytes per device per strategy, born, last use).

        Tied values share a layout, but not always a buffer.  A function result
        and the value returned, a call's operand and the callee's argument, are
        one buffer: their spans touch at the tie.  A callee called from two
        layers ties both calls' values into one class, and those are two
        buffers, one per call: so a class holds one buffer per run of
        overlapping member spans, each member live from its definition (its
        first read, where nothing in the graph defines it) to its last use in
        program order.  ``spmd-auto-shard`` inlines calls first, as XLA
        does (`passes/inline_calls.py`), so calls reach here only where a
        callee keeps a sharding of its own; their values that overlap are
        one run, so one buffer.  Arguments and results live throughout: XLA gives each
        its own allocation, never shared with a temporary, and its memory
        analysis counts them so.  A value XLA fuses into its one reader (see
        `_fused`) is never a buffer of its own.
        """
        graph = self.graph
        end = len(graph.nodes)
        spans: dict[int, list[int]] = {}
        producer_of: dict[int, int] = {}
        # Per class: the ops (not ties) that write a value of it, and the ties.
        writers: dict[int, list[int]] = collections.defaultdict(list)
        ties: collections.Counter = collections.Counter()
        for index, node in enumerate(graph.nodes):
            for value in node.results:
                if value != NO_VALUE:
                    spans.setdefault(value, [index, index])
                    producer_of.setdefault(value, index)
                    if node.is_tie:
                        ties[self.root[value]] += 1
                    else:
                        writers[self.root[value]].append(index)
            for value in node.operands:
                if value != NO_VALUE:
                    span = spans.setdefault(value, [index, index])
                    held = self._held_to(node, index, span[0]) if node.loops else index
                    if held > span[1]:
                        span[1] = held
        # Each argument and each result is its own buffer for the whole
        # program (a step's updated parameter is tied to the parameter, but
        # without donation XLA holds both); a class's other values live in them.
        held_throughout = collections.Counter(self.root[v]
                                              for v in (*graph.outputs, *graph.arguments))
        # What a recomputation reads is held until it runs (`remat.Recomputation`).
        for value, until in self.held_until.items():
            span = spans.get(value)
            if span is not None:
                span[1] = max(span[1], until)
        remade = self._remade_in_readers(spans, producer_of, held_throughout)
        # Where each result is written: by the op (not a tie) that makes a
        # value of its class; its allocation is free before then.  Where a
        # function called from several places makes it, the graph holds the
        # function once, out of the calls' order: the result is taken as
        # written where the value returned is made (the tie of the call).
        births: dict[int, list[int]] = collections.defaultdict(list)
        for value in graph.outputs:
            root = self.root[value]
            if ties[root] > 1 or len(writers[root]) > 1:
                births[root].append(producer_of.get(value, end))
            else:
                births[root].append(min(writers[root], default=end))
        self.live_out: list[tuple[int, int]] = []   # (term index, where it is written)
        members: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
        for value, (first, last) in spans.items():
            if value in remade:
                continue
            recomputed = self.recomputed.get(value)
            if recomputed is not None and recomputed[1] <= last:
                # Freed after its last forward read, made again where the
                # recomputation runs: two buffers, one per span.
                forward_last, again = recomputed
                members[self.root[value]].append((first, max(first, forward_last), value))
                members[self.root[value]].append((again, last, value))
            else:
                members[self.root[value]].append((first, last, value))
        # A read in another layout than the value's is a copy; reads of one
        # value in one layout share it (CSE), from the first to the last.
        # It is as wide as the target computes: XLA's CPU backend moves a
        # narrow float in its collectives at f32 (every collective of the
        # compiled Mixtral step is), so the copy it delivers is f32.
        self.reads: dict[int, list] = collections.defaultdict(list)   # value -> reads
        self.read_sources: dict[int, tuple] = {}
        for value, read, found in self._every_read():
            # A value remade in its readers is remade in the layout each
            # reads: no copy of it is held between them.
            if value not in remade:
                self.reads[value].append(read)
                self.read_sources[value] = found
        terms, absorbed = self._contraction_copies(producer_of, spans)
        for root in sorted(members):
            found = self._layouts_of(root)
            if found is None:
                continue
            unit, layouts = found
            shards = self._root_shards(root, layouts)
            if held_throughout[root]:
                per_device = self.nbytes[root] / shards
                for birth in births[root]:
                    self.live_out.append((len(terms), birth))
                    terms.append((root, unit, per_device, 0, end))
                terms.extend([(root, unit, per_device, 0, end)]
                             * (held_throughout[root] - len(births[root])))
                continue
            for start, last, values in _merged(members[root]):
                if not absorbed.isdisjoint(values) or self._fused_once(values, producer_of):
                    continue
                wide = self.computed_nbytes[root]
                held = wide if self._computed_wide(values) else self.nbytes[root]
                if held < wide and last > start and \
                        self._computes_wide(producer_of.get(values[0], -1)):
                    # A product rounded narrow is written wide, and rounded
                    # into its narrow buffer before anything reads it.
                    terms.append((root, unit, wide / shards, start, start))
                    start += 1
                terms.append((root, unit, held / shards, start, last))
        # The most the results' allocations hold of the temporaries, on any plan.
        self.lendable = sum(float(terms[term][2].max()) for term, birth in self.live_out
                            if birth > 0)
        return terms

    def _every_read(self) -> list:
        """(value, (node, unit, the layout each strategy reads it in, its bytes
        in each), the value's unit and layouts) of every read a unit decides:
        the same for every plan, so made once (the memory terms are made
        again for each set of recomputations tried)."""
        found_reads = getattr(self, "_reads_made", None)
        if found_reads is not None:
            return found_reads
        found_reads = []
        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            for position, value in enumerate(self.graph.nodes[index].operands):
                if value == NO_VALUE or value in self.free_sources:
                    continue
                found = self.value_layouts(value)
                if found is None:
                    continue
                wanted = [s.operands[position] for s in self.node_strategy[index]]
                sizes = np.array([self.computed_nbytes[value] / _shards(self.layouts, l)
                                  for l in wanted])
                found_reads.append((value, (index, unit, wanted, sizes), found))
        self._reads_made = found_reads
        return found_reads

    @staticmethod
    def _held_to(node, index: int, made: int) -> int:
        """Where a value made at node `made` and read by `node` (at `index`)
        is held to: the read itself, or, inside a loop the value was made
        before, the loop's end, as every iteration reads it again (a scanned
        step's stacked weights and its carries)."""
        for first, last in node.loops:
            if made < first:
                return max(index, last)
        return index

    def _remade_in_readers(self, spans: dict[int, list[int]], producer_of: dict[int, int],
                           held_throughout) -> set[int]:
        """The values XLA makes again inside each of their readers instead of
        holding: a broadcast's or a cheap element-wise op's (not `_expensive`:
        XLA computes no exponential or quotient twice), read by several ops
        that all fuse it (`_fuses_producers`), where what it is made from is
        held until its last reader anyway (an argument, a constant, a value
        still read later, or another such value).  XLA's fusion duplicates a
        cheap producer into every consumer; holding its result would add a
        buffer where remaking it adds none.  A norm's ``x * rsqrt(mean)``,
        saved for the backward by autodiff, is the common case: x and the
        statistic are held for the backward already.  A rounded product
        (`_rounded`) widened again (bf16 to f32) is remade whatever its
        operand's span: XLA holds the narrow product until the widening's
        last reader instead (Mixtral's expert product, widened for a silu and
        its backward: its step's estimate at 8 layers went from 1.07x of
        XLA's figure to 1.00x).  Not every widening: a Llama's residual sum,
        widened for a norm a windowed reduction reads, XLA holds wide, and
        remade it took the 4-layer estimate from 1.00x to 0.95x.

        What it is made from is followed through cheap ops and layout-only
        ones (`_is_bitcast`), `_REMADE_DEPTH` deep; where that ends in
        values not held until the last reader, the value is still remade
        if those, held until then instead, take no more bytes than it:
        a Llama layer's attention mask, read by its softmax's select in the
        forward and again in the backward, is made from the padding mask
        and the causal one, nine cheap ops away.  Held per layer, it made
        Llama-3-8B's full-depth estimate 1.09x of XLA's figure on 256
        devices; remade, 1.03x.  (A value with one reader is `_fused`.)"""
        graph = self.graph
        remade: set[int] = set()

        def cheap(node) -> bool:
            return not node.is_tie and (node.rule.elementwise or node.is_broadcast
                                        or _is_bitcast(node.rule)) \
                and not self._expensive(node)

        def held(value: int, last: int) -> bool:
            span = spans.get(value)
            return value in self.free_sources or held_throughout[self.root[value]] \
                or (span is not None and span[1] >= last)

        def sources(value: int, last: int, depth: int, seen: set[int]) -> list[int]:
            """What `value` is made from through cheap ops (`depth` deep at
            most) and is not held until `last`."""
            if held(value, last) or value in seen:
                return []
            seen.add(value)
            node = graph.nodes[producer_of[value]] if value in producer_of else None
            if depth == 0 or node is None or not cheap(node):
                return [value]
            return [found for operand in node.operands if operand != NO_VALUE
                    for found in sources(operand, last, depth - 1, seen)]

        # Last first: a value remade stretches what it is made from, which may
        # be made for another.
        for index in reversed(self.real_nodes):
            node = graph.nodes[index]
            if len(node.results) != 1 or not cheap(node):
                continue
            value = node.results[0]
            if value == NO_VALUE or value not in spans or value in self.free_sources \
                    or self.class_size[self.root[value]] != 1:
                continue
            reads = self.consumers[value]
            if len({reader for reader, _ in reads}) < 2 or not all(
                    self._fuses_producers(reader) for reader, _ in reads):
                continue
            last = spans[value][1]
            operands = [operand for operand in node.operands if operand != NO_VALUE]
            if self._widening(node) and self._rounded(operands[0]):
                stretched = [operands[0]]
            else:
                # What it is made from, held longer instead, must cost no more
                # than holding it.
                seen = {value}
                stretched = [found for operand in operands
                             for found in sources(operand, last, _REMADE_DEPTH, seen)]
                if sum(self.computed_nbytes[v] for v in stretched) > self.computed_nbytes[value]:
                    continue
            for source in stretched:
                span = spans.get(source)
                if span is not None and source not in self.free_sources \
                        and not held_throughout[self.root[source]]:
                    span[1] = max(span[1], last)
            remade.add(value)
        return remade

    def _float_widths(self, node) -> tuple[int, int] | None:
        """(operand, result) element bytes of a convert between floats; else None."""
        floating = self.graph.floating
        if node.label != "stablehlo.convert" or not floating:
            return None
        source, result = node.operands[0], node.results[0]
        if source == NO_VALUE or result == NO_VALUE or not (floating[source] and
                                                            floating[result]):
            return None
        return self.graph.element_bytes[source], self.graph.element_bytes[result]

    def _widening(self, node) -> bool:
        widths = self._float_widths(node)
        return widths is not None and widths[1] > widths[0]

    def _narrowing(self, node) -> bool:
        widths = self._float_widths(node)
        return widths is not None and widths[1] < widths[0]

    def _expensive(self, node) -> bool:
        """Whether XLA's fusion keeps `node`'s value rather than compute it
        again in each reader: a transcendental function, a float quotient, or
        a rounding of a float to a narrower one (XLA's own list)."""
        if node.label in _EXPENSIVE_LABELS:
            return True
        floating = self.graph.floating
        result = node.results[0] if node.results else NO_VALUE
        if result == NO_VALUE or not floating or not floating[result]:
            return False   # an integer quotient: of index arithmetic, by a constant
        return node.label in _QUOTIENT_LABELS or self._narrowing(node)

    def _fuses_producers(self, index: int) -> bool:
        """Whether XLA's loop fusion computes node `index` with its operands'
        producers inside it: an element-wise op, a broadcast, a reduction
        or a data movement op; not a contraction, a gather or a scatter,
        which read their operands from memory."""
        node = self.graph.nodes[index]
        if node.is_tie or self._windowed(node):
            return False
        return node.rule.elementwise or node.is_broadcast or _is_bitcast(node.rule) \
            or node.label in _FUSING_LABELS

    def _windowed(self, node) -> bool:
        """Whether the target computes reduction `node` as a tree of windowed
        reductions, reading its operand from memory
        (`CostModel.windowed_reduction_above`)."""
        above = self.cost_model.windowed_reduction_above
        return bool(above) and node.label == "stablehlo.reduce" and any(
            kind is FactorKind.REDUCTION and size > above
            for kind, size in zip(node.rule.factor_kinds, node.rule.factor_sizes))

    def _computed_wide(self, buffer: list[int]) -> bool:
        """Whether the target holds the values of `buffer` at its computed
        width.  A narrow value is computed wide and kept wide where it is
        read wide (XLA drops the round trip through the narrow type between
        two ops it computes wide); a contraction with a wide result reads a
        narrow operand as it is, so a value only such contractions read is
        held narrow.  A product rounded to the narrow type (`_rounded`) is
        the exception: held narrow, and read so by element-wise readers,
        unless a contraction computed wide reads it (Mixtral's expert
        activations at full width, saved for the backward: bf16 in XLA's
        buffers; its step's estimate went from 1.13x of XLA's figure to
        1.03x at 8 layers on 64 devices)."""
        if self.computed_nbytes[buffer[0]] == self.nbytes[buffer[0]]:
            return False
        if any(self._rounded(value) for value in buffer):
            return any(self._read_by_wide_contraction(value) for value in buffer)
        if any(self._narrowed(value) for value in buffer):
            return any(self._read_by_wide_contraction(value, any_width=True) for value in buffer)
        readers = [index for value in buffer for index, _ in self.consumers[value]]
        return not readers or not all(self._reads_narrow(index) for index in readers)

    def _narrowed(self, value: int) -> bool:
        """Whether `value` is the program's own rounding of a float to a
        narrower one, held as a buffer: XLA counts that rounding expensive
        (`_expensive`), makes it once, and holds its narrow result where
        element-wise ops read it.  A contraction the target computes wide
        reads it through a widening of its own, and XLA drops the round trip:
        the wide value is held (a mixed-precision MLP's bf16 inputs to its
        f32 matmuls, a Llama's bf16 attention weights).  (Counted wide,
        Mixtral's silu output, rounded to bf16 and saved for the backward,
        took f32's bytes: 1.07x of XLA's figure at 8 layers, 1.01x narrow.)"""
        found = self.producers.get(self.root[value])
        if not found or len(found) != 1:
            return False
        return self._narrowing(self.graph.nodes[found[0][0]])

    def _rounded(self, value: int, depth: int = 3) -> bool:
        """Whether `value` is a narrow value rounded from a wide one in a
        buffer of its own: a contraction's product the target computes wide
        (a product is not fused into its readers), or a transpose or
        reshape of one.  (The program's own roundings are `_narrowed`.)"""
        found = self.producers.get(self.root[value])
        if not found or len(found) != 1 or depth == 0:
            return False
        index = found[0][0]
        node = self.graph.nodes[index]
        if node.label in _LAYOUT_LABELS and node.operands:
            return self._rounded(node.operands[0], depth - 1)
        return self._computes_wide(index)

    def _read_by_wide_contraction(self, value: int, depth: int = 3,
                                  any_width: bool = False) -> bool:
        """Whether a contraction computed wide (`any_width`: any contraction)
        reads `value`, or a transpose or reshape of it."""
        for index, _ in self.consumers[value]:
            node = self.graph.nodes[index]
            if self._computes_wide(index) or (any_width and _is_contraction(node.rule)
                                              and not node.rule.windows):
                return True
            if depth and node.label in _LAYOUT_LABELS and \
                    node.results and node.results[0] != NO_VALUE and \
                    self._read_by_wide_contraction(node.results[0], depth - 1, any_width):
                return True
        return False

    def _computes_wide(self, index: int) -> bool:
        """Whether node `index` is a contraction the target computes wider
        than its narrow result."""
        if index < 0:
            return False
        node = self.graph.nodes[index]
        result = node.results[0] if node.results else NO_VALUE
        return _is_contraction(node.rule) and not node.rule.windows and result != NO_VALUE \
            and self.computed_nbytes[result] > self.nbytes[result]

    def _reads_narrow(self, index: int) -> bool:
        """Whether node `index` is a contraction the target computes at its
        operands' width: its result is as wide as the target computes."""
        node = self.graph.nodes[index]
        if not _is_contraction(node.rule) or node.rule.windows:
            return False
        result = node.results[0]
        return result != NO_VALUE and self.computed_nbytes[result] == self.nbytes[result]

    def _contraction_copies(self, producer_of: dict[int, int],
                            spans: dict[int, list[int]]) -> tuple[list, set[int]]:
        """The copies contractions make of their operands, and the values
        that are one of those copies (below).

        A contraction transposes each operand whose dims are not in a matrix
        multiply's order (XLA's dot canonicalization: batch, free,
        contracting, or contracting before free) so that it reads as one
        batched matrix.  The copy is its operand's size in the layout the
        contraction reads, and lives at the contraction (a copy of an
        argument: from the start, see below).  Where the operand is computed
        by a loop fusion only the contraction reads, the fusion writes the
        transposed order itself and no copy is made.

        Where the target computes narrow floats wider, each contraction it
        computes wide (one with a narrow result, see `_reads_narrow`)
        converts a narrow argument it reads: XLA's CSE makes that one copy,
        at the computed width, for every contraction that reads it (the
        forward's and the backward's), live from the start to its last
        reader, and a transposing contraction converts and transposes in one
        copy.  The program's own converts of the argument to that width are
        the same copy to CSE: their values are not buffers of their own, and
        the copy lives from the first of them (or the start, where a
        contraction converts it) to the last read of any.  It is charged to
        its first reader's strategies."""
        graph = self.graph
        terms = []
        # argument value -> [unit, sizes, first use, last use]
        converted: dict[int, list] = {}
        absorbed: set[int] = set()
        wide = self.cost_model.float_compute_bytes

        def convert_to(value: int, index: int, position: int, born: int, last: int) -> None:
            copy = converted.get(value)
            if copy is None:
                converted[value] = [self.unit_of_node[index], self._read_sizes(
                    index, position, self.computed_nbytes[value]), born, last]
            else:
                copy[2] = min(copy[2], born)
                copy[3] = max(copy[3], last)

        for index in self.real_nodes:
            node = graph.nodes[index]
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            if node.label == "stablehlo.convert" and wide and self._widened_argument(
                    node.operands[0]):
                result = node.results[0]
                if result != NO_VALUE and self.graph.element_bytes[result] == wide \
                        and self.computed_nbytes[result] == self.nbytes[result]:
                    absorbed.add(result)
                    convert_to(node.operands[0], index, 0, index, spans[result][1])
                continue
            if not _is_contraction(node.rule) or node.rule.windows:
                continue
            any_layout, fixed_layout = _transposed_positions(node.rule)
            for position, value in enumerate(node.operands):
                if value == NO_VALUE or value in self.free_sources:
                    continue
                argument = self.root[value] in self.argument_roots
                if self._widened_argument(value) and not self._reads_narrow(index):
                    # Made at the start, as an argument's gathers are (below).
                    convert_to(value, index, position, 0, index)
                    continue
                if position not in (fixed_layout if argument else any_layout):
                    continue
                producer = graph.nodes[producer_of[value]] if value in producer_of else None
                if producer is not None and len(self.consumers[value]) == 1 and (
                        producer.rule.elementwise or producer.is_broadcast):
                    continue
                sizes = self._read_sizes(index, position, self.nbytes[value]
                                         if self._reads_narrow(index)
                                         else self.computed_nbytes[value])
                # A copy of an argument needs nothing else: XLA's schedule
                # makes it at the start, as it does an argument's gathers.
                terms.append((self.root[value], unit, sizes, 0 if argument else index, index))
        for value, (unit, sizes, born, last) in converted.items():
            terms.append((self.root[value], unit, sizes, born, last))
        return terms, absorbed

    def _widened_argument(self, value: int) -> bool:
        """Whether `value` is an argument's, held narrower than the target computes it."""
        return value != NO_VALUE and self.root[value] in self.argument_roots \
            and self.computed_nbytes[value] > self.nbytes[value]

    def _read_sizes(self, index: int, position: int, nbytes: float) -> np.ndarray:
        """Per strategy of node `index`, bytes per device of its operand at
        `position`, in the layout the strategy reads it in."""
        return np.array([nbytes / _shards(self.layouts, s.operands[position])
                         for s in self.node_strategy[index]])

    def _root_shards(self, root: int, layouts) -> np.ndarray:
        """How many pieces each of a class's layouts splits it into (kept per
        class, as `_fused_once` keeps its answers)."""
        kept = self.__dict__.setdefault("_shards_of_root", {})
        found = kept.get(root)
        if found is None:
            found = kept[root] = np.array([_shards(self.layouts, l) for l in layouts],
                                          dtype=float)
        return found

    def _fused_once(self, buffer: list[int], producer_of: dict[int, int]) -> bool:
        """`_fused`, kept per buffer: it reads only the graph, and the memory
        terms are made again for each set of recomputations tried."""
        kept = self.__dict__.setdefault("_fused_buffers", {})
        key = tuple(buffer)
        found = kept.get(key)
        if found is None:
            found = kept[key] = self._fused(buffer, producer_of)
        return found

    def _fused(self, buffer: list[int], producer_of: dict[int, int]) -> bool:
        """Whether XLA's loop fusion computes the values of `buffer` (tied
        values, one buffer) inside their one reader: an element-wise op, a
        broadcast, a reshape or transpose that keeps the elements' order, a
        transpose of an argument, or a value built from scalars, read by
        anything but a contraction or a windowed reduction (`_windowed`).
        XLA inlines calls before it fuses, so the ties of a call are seen
        through.

        An argument's layout is fixed, and the fusion reads it transposed
        in place.  A computed value's transpose is counted as a copy, where
        XLA may lay the value out so that the transpose reads it in place
        (two transformer blocks on 8 devices: 0.97 of XLA's figure, 0.89
        with the transpose free)."""
        producers = [producer_of[v] for v in buffer
                     if v in producer_of and not self.graph.nodes[producer_of[v]].is_tie]
        readers = [read for v in buffer for read in self.consumers[v]]
        if len(producers) != 1 or len(readers) != 1:
            return False
        node = self.graph.nodes[producers[0]]
        built_from_scalars = any(v in self.free_sources for v in buffer)
        if not (built_from_scalars or node.rule.elementwise or node.is_broadcast
                or _is_bitcast(node.rule) or (node.label == "stablehlo.transpose" and self.root[
                    node.operands[0]] in self.argument_roots)):
            return False
        reader = self.graph.nodes[readers[0][0]]
        return not _is_contraction(reader.rule) and not self._windowed(reader)

    def _layouts_of(self, value: int) -> tuple[int, list[Sharding]] | None:
        """`value_layouts`, and for a value built from scalars its consumer's reading."""
        reader = self.free_sources.get(value)
        if reader is None:
            return self.value_layouts(value)
        node, position = reader
        unit = self.unit_of_node.get(node, -1)
        if unit < 0:
            return None
        return unit, [s.operands[position] for s in self.node_strategy[node]]

    def _memory_row(self, memory, point: int, reference: list[int] | None) -> dict:
        """Bytes live at `point`, linear in the program's variables: a unit's
        bytes per strategy, keyed by the unit, and a read's copy per pair of
        strategies, keyed by (source unit, reader unit), which the solver
        prices on the pair's variables where the two units have them.

        A copy is made at the first read of a value in another layout and
        shared by its later reads in that layout, so whether one is live
        depends on several choices at once.  Around the `reference` plan
        (the previous round's) the row is exact: each of its copies live at
        `point` is charged to its first reader, as if the value kept its
        layout.  Each read the reference makes in place is charged by the
        pair, where a copy would be live at `point`: a plan that moves the
        value's layout under such a read pays for the copy it makes there,
        which the reader alone cannot see."""
        row: dict = {}
        for _value, unit, per_device, born, last in memory:
            if born <= point <= last:
                row[unit] = row.get(unit, 0) + per_device
        if reference is None:
            return row
        for value, (held, first, _size, start, end) in self._copies(reference):
            if start <= point <= end:
                _time, unit, wanted, sizes = first
                copies = np.array([0.0 if w is held else size
                                   for w, size in zip(wanted, sizes)])
                row[unit] = row.get(unit, 0) + copies
        for value, reads in self.reads.items():
            if max(read[0] for read in reads) < point:
                continue
            source_unit, source_layouts = self.read_sources[value]
            held = source_layouts[reference[source_unit]]
            # A copy lives from its first read, or, of an argument, from the start.
            argument = self.root[value] in self.argument_roots
            for time_, unit, wanted, sizes in reads:
                if wanted[reference[unit]] is not held or (time_ < point if argument
                                                           else time_ > point):
                    continue
                key = (source_unit, unit)
                copies = np.array([[0.0 if w is layout else size for w, size in zip(wanted, sizes)]
                                   for layout in source_layouts])
                row[key] = row.get(key, 0) + copies
        return row

    def _copies(self, strategies: list[int]):
        """(value, (its layout, first read, bytes, first time, last time)) for
        each copy of a value in another layout under the plan `strategies`."""
        for value, reads in self.reads.items():
            source_unit, source_layouts = self.read_sources[value]
            held = source_layouts[strategies[source_unit]]
            spans: dict[int, list] = {}
            for read in reads:
                time_, unit, wanted, sizes = read
                layout = wanted[strategies[unit]]
                if layout is held:
                    continue
                span = spans.get(id(layout))
                if span is None:
                    spans[id(layout)] = [held, read, sizes[strategies[unit]], time_, time_]
                else:
                    span[3] = min(span[3], time_)
                    span[4] = max(span[4], time_)
            for span in spans.values():
                if self.root[value] in self.argument_roots:
                    # XLA combines the independent gathers of arguments into
                    # one, at the start: each copy lives from there.
                    span[3] = 0
                yield value, tuple(span)

    def _in_free_results(self, memory, strategies: list[int], temporaries: list) -> list:
        """The temporaries XLA's buffer assignment places in results'
        allocations before the results are written: largest first, each in
        the first allocation of its size free for its whole span (written
        after it, holding no other such temporary then).  An AdamW step's
        f32 gradients and moments wait in the allocations of the moments it
        returns: 0.5 GiB of Llama-3-8B's four layers on 64 devices.

        XLA places any temporary that fits, smaller ones too; the estimate
        counts only those of the result's own size.  The partitioner's
        buffers (a collective's result, a sum's partial) are not values of
        the graph, and XLA places them too: counted with any that fit, two
        transformer blocks at toy width came out at 0.86 of XLA's figure,
        against 0.91 so (Llama-3-8B's AdamW step, four layers on 64
        devices: 1.01 and 1.04)."""
        free = sorted(((memory[term][2][strategies[memory[term][1]]], birth)
                       for term, birth in self.live_out if birth > 0), reverse=True)
        if not free:
            return []
        writes = [birth for _, birth in free]
        slots_of_size: dict[float, list[int]] = collections.defaultdict(list)
        for slot, (size, _birth) in enumerate(free):
            slots_of_size[size].append(slot)
        # Each slot's spans are disjoint: kept sorted, the one that starts
        # last at or before a span's end is the only one it can overlap.
        starts: list[list[int]] = [[] for _ in free]
        ends: list[list[int]] = [[] for _ in free]
        placed = []
        for size, born, last in sorted(temporaries, reverse=True):
            if size <= 0:
                continue
            for slot in slots_of_size.get(size, ()):
                if writes[slot] <= last:
                    continue
                at = bisect.bisect_right(starts[slot], last)
                if at == 0 or ends[slot][at - 1] < born:
                    starts[slot].insert(at, born)
                    ends[slot].insert(at, last)
                    placed.append((size, born, last))
                    break
        return placed

    def _floor(self, memory) -> float:
        """Bytes per device no plan goes under: at each program point, the
        sum over units of the fewest bytes any of a unit's strategies holds
        there, and the largest such sum over the points.  A plan holds at
        least its units' bytes at every point (its copies of values read in
        other layouts only add), and no plan does better than each unit's
        least at once, so a budget under the floor is one no plan fits; the
        0-1 program need not be asked."""
        # Before a result is written its allocation holds temporaries of its
        # size (`_in_free_results`), which are counted: the result is
        # counted from where it is written (at the end, every result is).
        written = dict(self.live_out)
        events: dict[int, list] = collections.defaultdict(list)
        for term, (_value, unit, per_device, born, last) in enumerate(memory):
            events[written.get(term, born)].append((unit, per_device))
            events[last + 1].append((unit, -per_device))
        held: dict[int, np.ndarray] = {}
        least: dict[int, float] = {}
        total = floor = 0.0
        for point in sorted(events):
            for unit, change in events[point]:
                bytes_held = held[unit] = held[unit] + change if unit in held else change
                fewest = max(0.0, float(bytes_held.min()))
                total += fewest - least.get(unit, 0.0)
                least[unit] = fewest
            floor = max(floor, total)
        return floor

    def _peak(self, memory, strategies: list[int], points: list[int],
              lend: bool = True) -> tuple[float, int]:
        """The plan's bytes per device at its fullest point, and the point.

        A result's allocation is held for the whole program (XLA's analysis
        counts it so), but before the result is written XLA's buffer
        assignment places temporaries in it (`_in_free_results`), which are
        then not counted again.  The rows (`_memory_row`) leave this out:
        they bound the plan from above, and are exact without `lend`."""
        delta = collections.defaultdict(float)
        temporaries = []
        for _value, unit, per_device, born, last in memory:
            size = per_device[strategies[unit]]
            delta[born] += size
            delta[last + 1] -= size
            if born > 0 or last < len(self.graph.nodes):
                temporaries.append((size, born, last))
        for _value, (_held, _first, size, start, end) in self._copies(strategies):
            delta[start] += size
            delta[end + 1] -= size
            temporaries.append((size, start, end))
        for size, born, last in (self._in_free_results(memory, strategies, temporaries)
                                 if lend else ()):
            delta[born] -= size
            delta[last + 1] += size
        live, peak, at = 0.0, 0.0, 0
        for point in sorted(delta):
            live += delta[point]
            if live > peak:
                peak, at = live, point
        return peak, at


# Element-wise ops XLA's fusion does not duplicate into several readers
# (`InstructionFusion::IsExpensive`): transcendental functions (not sine,
# cosine and tangent of reals, which it counts cheap) and float division.
_EXPENSIVE_LABELS = frozenset(f"stablehlo.{name}" for name in (
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "power",
    "rsqrt", "sqrt", "cbrt", "tanh", "atan2", "erf", "erf_inv"))
_QUOTIENT_LABELS = frozenset({"stablehlo.divide", "stablehlo.remainder"})

# How many cheap ops deep a value remade in its readers is followed to what it is made
# from: a Llama's attention mask is nine (broadcasts, a bitcast transpose, a compare,
# a minimum) from the padding mask and the causal one.
_REMADE_DEPTH = 12

# Ops that only lay a value out again: what is true of a product is true of them.
_LAYOUT_LABELS = frozenset({"stablehlo.transpose", "stablehlo.reshape"})

# Ops XLA's loop and input fusions compute with their operands' producers inside.
_FUSING_LABELS = frozenset({
    "stablehlo.reduce", "stablehlo.transpose", "stablehlo.reshape", "stablehlo.slice",
    "stablehlo.concatenate", "stablehlo.pad", "stablehlo.reverse", "stablehlo.dynamic_slice"})


def _merged(spans: list[tuple[int, int, int]]) -> list[tuple[int, int, list[int]]]:
    """The runs of overlapping (first, last, value) spans: (first, last, values)."""
    runs: list[tuple[int, int, list[int]]] = []
    for first, last, value in sorted(spans):
        if runs and first <= runs[-1][1]:
            start, end, values = runs[-1]
            values.append(value)
            runs[-1] = (start, max(end, last), values)
        else:
            runs.append((first, last, [value]))
    return runs


def _is_bitcast(rule: OpRule) -> bool:
    """A reshape, or a transpose that moves only dimensions of size one: the
    elements keep their order, so XLA reads the operand's buffer as is."""
    if len(rule.operands) != 1 or len(rule.results) != 1 or any(rule.windows) \
            or any(kind is not FactorKind.PASS_THROUGH for kind in rule.factor_kinds):
        return False

    def order(tensor) -> list[int]:
        return [f for dim in tensor for f in dim if rule.factor_sizes[f] > 1]

    return order(rule.operands[0]) == order(rule.results[0])


def _transposed_positions(rule: OpRule) -> tuple[list[int], list[int]]:
    """(the operands of a contraction a matrix multiply cannot read in place
    however they are laid out, and those it cannot read in place laid out
    as the arguments are, major to minor).

    The first are operands whose dims are not batch dims, then free and
    contracting dims in two runs, either first.  The second follow XLA's
    dot canonicalization (DotDecomposer) too: a dot is rewritten unless each
    operand has its batch dims first, one contracting dim and at most one
    free dim; each operand is then transposed to its batch, free and
    contracting dims (the rhs: batch, contracting, free) and reshaped to a
    matrix.  A transpose that swaps two single dims folds into the matrix
    multiply, and a computed value is laid out so that its transpose reads
    it in place; an argument whose free or contracting dims are several is
    copied (the attention projections' backward, dq x k[d, h, k] summed
    over h and k, copies the weight to [h, k, d]).  A batch factor is in
    every operand; dims of size one are placed anywhere."""
    in_all = set.intersection(*({f for dim in tensor for f in dim} for tensor in rule.operands))

    def kind(factor: int) -> str:
        if factor in in_all and rule.factor_kinds[factor] is FactorKind.PASS_THROUGH:
            return "batch"
        return "contracting" if rule.factor_kinds[factor] is FactorKind.REDUCTION else "free"

    orders = [[f for dim in tensor for f in dim if rule.factor_sizes[f] > 1]
              for tensor in rule.operands]
    kinds = [[kind(f) for f in order] for order in orders]
    any_layout = []
    for position, operand_kinds in enumerate(kinds):
        runs = [k for i, k in enumerate(operand_kinds) if i == 0 or operand_kinds[i - 1] != k]
        runs = runs[1:] if runs[:1] == ["batch"] else runs
        if "batch" in runs or len(runs) > 2:
            any_layout.append(position)
    if len(orders) != 2:
        return any_layout, any_layout
    batch = [f for f in orders[0] if kind(f) == "batch"]
    contracting = [f for f in orders[0] if kind(f) == "contracting"]
    if all(k.count("contracting") == 1 and k.count("free") <= 1
           and k[:len(batch)] == ["batch"] * len(batch) for k in kinds):
        return any_layout, any_layout
    fixed_layout = list(any_layout)
    for position, order in enumerate(orders):
        free = [f for f in order if kind(f) == "free"]
        wanted = batch + (free + contracting if position == 0 else contracting + free)
        if order != wanted and max(len(free), len(contracting)) > 1 \
                and position not in fixed_layout:
            fixed_layout.append(position)
    return any_layout, fixed_layout
