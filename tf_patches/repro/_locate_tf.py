"""The TF half of ``repro --locate``'s recorder (:mod:`.locate`): imported once TensorFlow has
loaded, in a process under ``repro --locate``. One op callback (``op_callbacks.add_op_callback``)
hashes eager ops' outputs in Python and instruments ops built into graphs with an in-graph digest
written by Debugger V2's ``DebugIdentityV2`` op; :meth:`Recorder.collect` reads the stream back."""

from __future__ import annotations

import glob
import hashlib
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

try:  # loaded by .locate once TF is; importable without it too (every module is: tests/test_without_tf.py)
    import numpy as np
    from tensorflow.core.protobuf import debug_event_pb2
    from tensorflow.python.debug.lib import debug_events_writer
    from tensorflow.python.framework import dtypes, op_callbacks, tensor_util
    from tensorflow.python.ops import array_ops, gen_debug_ops, gen_parsing_ops, gen_string_ops
except ImportError:  # no TensorFlow here: nothing of this module runs
    np = debug_event_pb2 = debug_events_writer = dtypes = op_callbacks = tensor_util = None
    array_ops = gen_debug_ops = gen_parsing_ops = gen_string_ops = None

from ._locate_budget import ByteBudget
from .recorders import _library, _where

_FUNCTION_PREFIXES = ("__inference", "__forward", "__backward", "__wrapped")
# Ops whose outputs cannot differ between runs of one program (or are not values): not recorded.
_SKIPPED_OPS = frozenset(("Const", "NoOp", "Identity", "IdentityN", "DebugIdentityV2", "VarHandleOp", "Placeholder", "PlaceholderWithDefault",
                          "_Arg", "_Retval", "StatefulPartitionedCall", "PartitionedCall"))
_BUCKETS = (1 << 63) - 1
_FULL_TENSOR = debug_event_pb2.TensorDebugMode.FULL_TENSOR if debug_event_pb2 is not None else None
_XLA_ATTR = "_XlaMustCompile"


class Recorder:
    def __init__(self, directory: str, limit: int, head: int, max_bytes: int, skipped_dtypes: frozenset) -> None:
        self.pid = os.getpid()
        self.directory, self.limit, self.head, self.max_bytes = directory, limit, head, max_bytes
        self.skipped_dtypes = skipped_dtypes
        os.makedirs(directory, exist_ok=True)
        self.run_id = f"tf-patches-{self.pid}"
        self.writer = debug_events_writer.DebugEventsWriter(directory, self.run_id, circular_buffer_size=0)
        self.urls = [f"file://{directory}"]
        self.lock = threading.Lock()
        self.tensors: List[list] = []  # graph tensors instrumented: [op_type, op_name, graph, site, slot, dtype, shape]
        self.eager: List[list] = []  # [op_type, site, slot, dtype, shape, digest, head]
        self.executions = 0  # eager executions (ops and function calls): the markers
        self.recorded = 0  # eager outputs hashed + graph outputs instrumented
        self.seconds = 0.0
        self.stopped = ""  # why recording stopped ("": it did not)
        self.xla: List[str] = []  # graphs left alone: XLA-compiled
        self.skipped_dtypes_seen: Dict[str, int] = {}
        self.user_frame = _library().user_frame
        self.consts: Dict[Tuple[int, int], Any] = {}
        self.budget = ByteBudget(self._traces_path, max_bytes, self._full)
        op_callbacks.add_op_callback(self.callback)

    def _traces_path(self) -> Optional[str]:
        found = glob.glob(os.path.join(self.directory, "*.graph_execution_traces"))
        return found[0] if found else None

    def _full(self, why: str) -> None:
        if not self.stopped or self.stopped == "exit":
            self.stopped = why

    # -- the callback ----------------------------------------------------------------------------
    def callback(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if self.stopped:
            return None
        started = time.perf_counter()
        try:
            if isinstance(op_type, bytes):  # TF 2.12's eager callbacks pass some op types as bytes
                op_type = op_type.decode("utf-8", "replace")
            if graph is None:
                self._eager(op_type, outputs)
            else:
                return self._graph(op_type, op_name, graph, outputs)
        except Exception as exc:  # a recorder never breaks the program: it stops, and says why
            self.stopped = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
        finally:
            self.seconds += time.perf_counter() - started
        return None

    def _site(self) -> str:
        frame = self.user_frame(sys._getframe(3))
        return _where(frame) if frame is not None else ""

    def _eager(self, op_type: str, outputs: Any) -> None:
        with self.lock:
            number = self.executions
            self.executions += 1
        # The marker: graph traces written before it ran in this execution (or before).
        self.writer.WriteGraphExecutionTrace(debug_event_pb2.GraphExecutionTrace(
            tfdbg_context_id="m", op_name=str(number)))
        if op_type.startswith(_FUNCTION_PREFIXES) or not outputs:
            return
        site = self._site()
        for slot, tensor in enumerate(outputs):
            dtype = tensor.dtype
            if dtype.name in self.skipped_dtypes:
                continue
            value = tensor.numpy()
            digest = _digest(value)
            self.eager.append([number, op_type, site, slot, dtype.name, list(value.shape), digest,
                               ["first", _head(value, self.head)]])
            self._count(1)

    def _graph(self, op_type: str, op_name: Optional[str], graph: Any, outputs: Any) -> Any:
        if op_type in _SKIPPED_OPS or op_type.startswith(_FUNCTION_PREFIXES) or not outputs:
            return None
        if _xla(graph):
            name = getattr(graph, "name", "")
            if name not in self.xla:
                self.xla.append(name)
            return None
        site = None
        for slot, tensor in enumerate(outputs):
            dtype = tensor.dtype
            if dtype.name in self.skipped_dtypes or not dtype.is_numpy_compatible:
                continue
            if site is None:
                site = self._site()
            with self.lock:
                number = len(self.tensors)
                self.tensors.append([op_type, op_name or "", getattr(graph, "name", ""), site, slot, dtype.name,
                                     _shape(tensor)])
            serialized = gen_parsing_ops.serialize_tensor(tensor)
            self._write(gen_string_ops.string_to_hash_bucket_fast(serialized, _BUCKETS), "d", number)
            if dtype != dtypes.string and self.head:
                elements = _elements(tensor)
                if elements:  # known: the last bytes of the serialized tensor are its last elements'
                    size = min(self.head, elements) * dtype.size
                    self._write(gen_string_ops.substr(serialized, self._const(graph, -size),
                                                      self._const(graph, size)), "t", number)
                elif elements is None:
                    self._write(array_ops.reshape(tensor, [-1])[:self.head], "h", number)
            self._count(1)
        return None

    def _const(self, graph: Any, value: int) -> Any:
        """One constant per graph and value, shared by the ops instrumented in it."""
        key = (id(graph), value)
        found = self.consts.get(key)
        if found is None or found[0] is not graph:
            from tensorflow.python.framework import constant_op

            with graph.as_default():
                found = self.consts[key] = (graph, constant_op.constant(value, dtypes.int32))
        return found[1]

    def _write(self, tensor: Any, kind: str, number: int) -> None:
        gen_debug_ops.debug_identity_v2(tensor, tfdbg_context_id=kind, op_name=str(number), output_slot=0,
                                        tensor_debug_mode=_FULL_TENSOR, debug_urls=self.urls,
                                        circular_buffer_size=0, tfdbg_run_id=self.run_id)

    def _count(self, number: int) -> None:
        self.recorded += number
        if self.recorded >= self.limit and not self.stopped:
            self.stopped = f"the limit: {self.limit} ops recorded (--locate-limit)"

    @staticmethod
    def _place_head(pending: List[list], number: int, head: list) -> None:
        """A head follows its digest closely, not always at once (threads): the latest digest of
        that tensor without a head takes it."""
        for item in reversed(pending):
            if item[1] == number and item[3] is None:
                item[3] = head
                return

    # -- at exit -------------------------------------------------------------------------------
    def collect(self) -> Dict[str, Any]:
        """What was recorded: the graph tensors, the eager records and the graph traces in order,
        each trace as [execution it ran in, tensor number, digest, head]."""
        self.stopped = self.stopped or "exit"
        try:
            self.writer.FlushExecutionFiles()
        except Exception:
            pass
        from tensorflow.python.lib.io import tf_record
        from tensorflow.python.util import deprecation

        with deprecation.silence():  # its iterator (deprecated, said on the program's stderr): no tf.data at exit
            return self._read(tf_record)

    def _read(self, tf_record: Any) -> Dict[str, Any]:
        path = self._traces_path()
        size = os.path.getsize(path) if path else 0
        traces: List[list] = []
        pending: List[list] = []  # traces not yet placed in an execution (their marker comes after)
        cut = ""
        read, last_marker = 0, -1
        for record in _records(tf_record, path):
            read += len(record) + 16
            if read > self.max_bytes:  # a file this system could not stop at the budget: its first bytes
                cut = f"the byte budget: the first {self.max_bytes >> 20} MiB of digests kept"
                break
            trace = debug_event_pb2.DebugEvent.FromString(record).graph_execution_trace
            kind = trace.tfdbg_context_id
            if kind == "m":
                execution = last_marker = int(trace.op_name)
                for item in pending:
                    item[0] = execution
                traces += pending
                pending = []
                continue
            number = int(trace.op_name)
            if kind == "d":  # most records: one int64, read without building an array (≈20 µs each)
                item = [-1, number, format(_int64(trace.tensor_proto) & ((1 << 64) - 1), "016x"), None]
                pending.append(item)
            elif kind == "t":  # the last elements' bytes (a known size)
                self._place_head(pending, number, ["last", _tail(_bytes(trace.tensor_proto), self.tensors[number][5])])
            elif kind == "h":  # the first elements (a size known only when it ran)
                self._place_head(pending, number, ["first", _head(tensor_util.MakeNdarray(trace.tensor_proto), self.head)])
        eager, through = self.eager, None
        if self.budget.reached or cut:
            # Cut at a byte count, where the watcher happened to look: kept are the executions
            # complete before the last marker read (the same in every run of the program).
            eager, through = [row for row in eager if row[0] <= last_marker], last_marker
        else:
            for item in pending:
                item[0] = self.executions  # after the last eager execution (a dataset's thread, exit)
            traces += pending
        return {"pid": self.pid, "limit": self.limit, "recorded": self.recorded, "executions": self.executions,
                "tensors": self.tensors, "eager": eager, "traces": traces, "through": through, "bytes": size,
                "seconds": self.seconds, "stopped": self.stopped if self.budget.reached else cut or self.stopped, "xla": self.xla,
                "tensorflow": _version()}


def _records(tf_record: Any, path: Optional[str]) -> Any:
    """The stream's records, up to the first one cut short (the byte budget's cut, or exit)."""
    if not path:
        return
    iterator = tf_record.tf_record_iterator(path)
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except Exception:  # DataLossError: a truncated record, where the budget cut the file
            return
        yield record


_INT64 = 9  # types_pb2.DT_INT64


def _int64(proto: Any) -> int:
    """A scalar int64 tensor's value: DebugIdentityV2 writes it as 8 bytes of ``tensor_content``
    in this machine's byte order; any other form through TF's own reader."""
    content = proto.tensor_content
    if proto.dtype == _INT64 and len(content) == 8:
        return int.from_bytes(content, sys.byteorder, signed=True)
    if proto.dtype == _INT64 and len(proto.int64_val) == 1:
        return int(proto.int64_val[0])
    return int(tensor_util.MakeNdarray(proto))


def _bytes(proto: Any) -> bytes:
    """A scalar string tensor's bytes: in ``string_val``, or (as DebugIdentityV2 writes it) in
    ``tensor_content`` after its length (a varint)."""
    if proto.string_val:
        return bytes(proto.string_val[0])
    content, shift, length, index = bytes(proto.tensor_content), 0, 0, 0
    while index < len(content):
        byte = content[index]
        index += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return content[index:index + length]


def _tail(data: bytes, dtype: str) -> list:
    """The last elements, from the last bytes of their serialized tensor."""
    try:
        return _head(np.frombuffer(data, dtype=np.dtype(dtype)), len(data))
    except TypeError:  # bfloat16 and others NumPy does not know: the bits alone
        return [[None, "0x" + data.hex()]]


def _xla(graph: Any) -> bool:
    """Whether ``graph`` (or one it is built inside) is compiled by XLA: instrumenting it would
    add ops XLA cannot compile."""
    try:
        from tensorflow.python.ops import control_flow_util

        if control_flow_util.GraphOrParentsInXlaContext(graph):
            return True
    except Exception:
        pass
    while graph is not None:
        attrs = getattr(graph, "_attributes", None) or getattr(graph, "attributes", None) or {}
        try:
            if _XLA_ATTR in attrs or "jit_compile" in attrs and attrs["jit_compile"]:
                return True
        except Exception:
            pass
        graph = getattr(graph, "outer_graph", None)
    return False


def _elements(tensor: Any) -> Optional[int]:
    """The number of elements where the static shape says it, else None."""
    try:
        shape = tensor.shape.as_list()
    except ValueError:
        return None
    if any(dim is None for dim in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _shape(tensor: Any) -> Optional[list]:
    try:
        return tensor.shape.as_list()
    except ValueError:  # unknown rank
        return None


def _digest(value: np.ndarray) -> str:
    if value.dtype == object:
        data = b"\0".join(item if isinstance(item, bytes) else str(item).encode() for item in value.ravel())
    else:
        data = np.ascontiguousarray(value).tobytes()
    header = f"{value.dtype.str}{value.shape}".encode()
    return hashlib.blake2b(header + data, digest_size=8).hexdigest()


def _head(value: np.ndarray, count: int) -> list:
    """The first ``count`` elements: [value, bits] each (bits in hex for numbers)."""
    flat = np.asarray(value).ravel()[:count]
    if flat.dtype == object or flat.dtype.kind in "SU":
        return [[repr(item)[:40], None] for item in flat.tolist()]
    if flat.dtype.kind in "fc" or flat.dtype.itemsize in (1, 2, 4, 8):
        unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(flat.dtype.itemsize)
        bits = flat.view(unsigned) if unsigned is not None and flat.dtype.kind != "c" else None
        return [[repr(item.item()), (f"0x{int(b):0{flat.dtype.itemsize * 2}x}" if bits is not None else None)]
                for item, b in zip(flat, bits if bits is not None else [None] * len(flat))]
    return [[repr(item), None] for item in flat.tolist()]


def _version() -> str:
    module = sys.modules.get("tensorflow")
    return str(getattr(module, "__version__", "")) if module is not None else ""
