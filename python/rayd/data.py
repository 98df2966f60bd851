"""rayd Data in a command trainable's rank: the rank's shard of the run's datasets.

A run's ``datasets:`` (train.yaml, tune.yaml) are read, transformed and sharded by rayd, in
C++, exactly as for a C++ train loop; the rank's actor serves this process its batches over a
Unix socket (``RAYD_DATA_SOCKET``). A batch whose block is in the node's object store (made by
data tasks, ``execution: tasks``, or a transform stage) is mapped here where the store holds it:
its arrays view that shared memory, with no copy at all. Any other batch is copied once into one
of a few shared buffers the server reuses, each mapped here once (or, where the loop holds them
all, or for bytes columns, a block (data/FORMAT.md) written to a file in /dev/shm)::

    import rayd.train as rt

    shard = rt.get_dataset_shard("train")
    for epoch in range(start, epochs):
        for batch in shard.iter_batches(batch_size=64, epoch=epoch):
            x, y = batch["image"], batch["label"]      # numpy arrays
        rt.report({"loss": loss})                      # adds data_wait_s

Every ``iter_batches`` call is one pass over this rank's share of an epoch (the next one
unless ``epoch=`` says which): the same number of batches on every rank, a new order each
epoch. ``batch_format="torch"`` gives torch tensors (``torch.from_numpy``, no copy).
Needs NumPy; torch only for ``batch_format="torch"``.
"""

import ctypes
import json
import mmap
import os
import socket
import weakref
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["DatasetShard", "get_dataset_shard", "read_block"]

_MAGIC = b"RAYDBLK1"
# Map batches where the node's object store holds them (execution: tasks, transform stages)
# instead of receiving a copy in a file; RAYD_DATA_ZERO_COPY=0 turns it off.
_ZERO_COPY = os.environ.get("RAYD_DATA_ZERO_COPY", "1") != "0"
# Copy other batches into buffers the server reuses, each mapped here once, instead of a new
# file in /dev/shm per batch; RAYD_DATA_SLOTS=0 turns it off.
_SLOTS = os.environ.get("RAYD_DATA_SLOTS", "1") != "0"


def read_block(buffer: Any) -> Dict[str, Any]:
    """The columns of a block laid out as data/FORMAT.md says, as NumPy arrays viewing
    ``buffer`` (bytes, a memoryview or an mmap); bytes columns as lists of bytes."""
    import numpy as np

    view = memoryview(buffer)
    if len(view) < 16 or bytes(view[:8]) != _MAGIC:
        raise ValueError("not a rayd Data block (no RAYDBLK1 magic)")
    header_len = int.from_bytes(view[8:16], "little")
    header = json.loads(bytes(view[16:16 + header_len]))
    rows = header["num_rows"]
    out: Dict[str, Any] = {}
    for column in header["columns"]:
        offset, nbytes = column["data"]
        if column["dtype"] == "|S":
            at, count = column["offsets"]
            offsets = np.frombuffer(view, dtype="<i8", count=rows + 1, offset=at)
            data = view[offset:offset + nbytes]
            out[column["name"]] = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(rows)]
            continue
        shape = (rows, *column["shape"])
        count = 1
        for dim in shape:
            count *= dim
        array = np.frombuffer(view, dtype=column["dtype"], count=count, offset=offset)
        out[column["name"]] = array.reshape(shape)
    return out


class _Client:
    """One connection to the rank actor's data server, shared by the shards. Requests may be
    sent ahead of reading their replies (a shard asks for its next batch while the loop trains
    on the current one); the server answers in order, so replies are matched to requests by
    their place in the stream."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._sock: Optional[socket.socket] = None
        self._buffer = b""
        self._released: List[int] = []  # leases whose arrays are gone, told at the next request
        self._sent = 0  # requests sent on this connection
        self._read = 0  # replies read
        self._early: Dict[int, Dict[str, Any]] = {}  # replies read before their turn came
        # The server's reused batch buffers ("slots"), each mapped once, by slot id.
        self._slots: Dict[int, mmap.mmap] = {}

    def release(self, lease: int) -> None:
        self._released.append(lease)

    def request(self, message: Dict[str, Any]) -> Dict[str, Any]:
        return self.receive(self.send(message))

    def send(self, message: Dict[str, Any]) -> int:
        """Sends a request; returns its ticket for receive()."""
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self._path)
            except OSError as e:
                sock.close()
                raise RuntimeError(f"rayd data: cannot reach the rank's data server at "
                                   f"{self._path}: {e}") from e
            self._sock = sock
        if self._released:
            message = dict(message, release=self._released)
            self._released = []
        self._sock.sendall((json.dumps(message) + "\n").encode("utf-8"))
        self._sent += 1
        return self._sent

    def wait(self, ticket: int) -> None:
        """Returns once the reply to request ``ticket`` has come (the server has handled it),
        leaving it for receive()."""
        while ticket not in self._early:
            if self._sock is None or self._read >= self._sent:
                raise RuntimeError("rayd data: the rank's data server closed the connection")
            self._read += 1
            self._early[self._read] = self._read_line()

    def receive(self, ticket: int, check: bool = True) -> Dict[str, Any]:
        """The reply to request ``ticket``; with ``check``, a refusal raises RuntimeError."""
        self.wait(ticket)
        reply = self._early.pop(ticket)
        if check and reply.get("ok") is not True:
            raise RuntimeError(f"rayd data: {reply.get('error', 'request refused')}")
        return reply

    def slot(self, slot: Dict[str, Any], path: str) -> mmap.mmap:
        """The mapping of the server's slot ``slot`` (``{"id", "capacity"}``), made the first
        time it is used: shared and writable, as a batch in it is the loop's alone until its
        arrays are gone."""
        mapped = self._slots.get(slot["id"])
        if mapped is None:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError as e:
                raise RuntimeError(f"rayd data: cannot open the data server's batch buffer at "
                                   f"{path}: {e}") from e
            try:
                mapped = mmap.mmap(fd, slot["capacity"])
            finally:
                os.close(fd)
            self._slots[slot["id"]] = mapped
            # A slot made again bigger has a new id: forget the oldest (a batch still using
            # one keeps its mapping alive).
            while len(self._slots) > 32:
                del self._slots[next(iter(self._slots))]
        return mapped

    def _read_line(self) -> Dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                self._sock.close()
                self._sock = None
                raise RuntimeError("rayd data: the rank's data server closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


_client: Optional[_Client] = None
_shards: Dict[str, "DatasetShard"] = {}


def _settle_before_checkpoint() -> None:
    """Waits until the server has handled every batch request sent ahead: it learns from each
    that the loop took the batch before it, and a checkpoint must record the position after
    every batch the loop has taken (the report reaches the rank's actor by another way)."""
    for shard in _shards.values():
        if shard._ahead is not None:
            shard._client.wait(shard._ahead)


def _data_wait_since_report() -> float:
    """Seconds the shards waited for batches since the last call (rayd.train.report's
    data_wait_s)."""
    total = 0.0
    for shard in _shards.values():
        total += shard._waited - shard._waited_reported
        shard._waited_reported = shard._waited
    return total


class DatasetShard:
    """This rank's shard of one of the run's datasets (see the module's doc)."""

    def __init__(self, name: str, client: _Client) -> None:
        self.name = name
        self._client = client
        info = client.request({"op": "open", "dataset": name})
        self.num_rows: int = info["num_rows"]
        self.rows_per_epoch: int = info["rows_per_epoch"]
        # The epoch the next iter_batches() without epoch= is: after a restore, the checkpoint's
        # (going on from where it stood) or the one after it.
        self.next_epoch: int = info.get("next_epoch", 0)
        self.columns: List[Dict[str, Any]] = info["columns"]
        self._waited = 0.0
        self._waited_reported = 0.0
        # Batches mapped where the object store holds them, and batches copied to a file.
        self.shared_batches = 0
        self.copied_batches = 0
        self.slot_batches = 0  # of the copied ones, those in the server's reused buffers
        self._ahead: Optional[int] = None  # the ticket of the batch asked for ahead, if any

    def iter_batches(self, batch_size: int = 256, *, drop_last: bool = False,
                     epoch: Optional[int] = None,
                     local_shuffle_buffer_size: Optional[int] = None,
                     batch_format: str = "numpy") -> Iterator[Dict[str, Any]]:
        """One pass over this rank's share of an epoch, as dicts of column name to array.

        ``local_shuffle_buffer_size`` (rows, as Ray's) draws each batch at random from a buffer
        of at least that many rows: for datasets read in order (``shuffle: false``)."""
        if batch_format not in ("numpy", "torch"):
            raise ValueError(f"batch_format: expected 'numpy' or 'torch', got {batch_format!r}")
        self._drop_ahead()
        started = self._client.request({
            "op": "iter", "dataset": self.name, "batch_size": int(batch_size),
            "drop_last": bool(drop_last), "epoch": -1 if epoch is None else int(epoch),
            "local_shuffle_buffer_size": int(local_shuffle_buffer_size or 0)})
        self.next_epoch = started["epoch"] + 1
        # Each batch is asked for one ahead: the server makes it while the loop trains on the
        # one before, and the loop finds it waiting. `ahead` tells the server the loop has taken
        # every batch before this one (not this one), so a checkpoint holds what it took.
        ticket = self._ask_ahead()
        while True:
            self._ahead = None
            reply = self._client.receive(ticket)
            # The time the server's producer kept the batch waiting (not made yet).
            self._waited += reply.get("wait_s", 0.0)
            if reply.get("end"):
                return
            if "slot" in reply:
                batch = self._map_slot(reply)
                self.copied_batches += 1
                self.slot_batches += 1
            elif "shared" in reply:
                batch = self._map_shared(reply["shared"], reply["lease"])
                self.shared_batches += 1
            else:
                self.copied_batches += 1
                with open(reply["path"], "rb") as f:
                    # Private and copy-on-write: writable arrays (torch.from_numpy wants them)
                    # that view the shared pages until something writes to them.
                    mapped = mmap.mmap(f.fileno(), reply["size"], access=mmap.ACCESS_COPY)
                batch = read_block(mapped)
            ticket = self._ask_ahead()
            if batch_format == "torch":
                import torch
                batch = {k: torch.from_numpy(v) if hasattr(v, "dtype") else v
                         for k, v in batch.items()}
            yield batch

    def _ask_ahead(self) -> int:
        self._ahead = self._client.send({"op": "next", "dataset": self.name,
                                         "shared": _ZERO_COPY, "slots": _SLOTS, "ahead": True})
        return self._ahead

    def _drop_ahead(self) -> None:
        """Reads and drops the batch asked for ahead by a pass the loop left early."""
        if self._ahead is None:
            return
        ticket, self._ahead = self._ahead, None
        reply = self._client.receive(ticket, check=False)
        if "lease" in reply:
            self._client.release(reply["lease"])

    def _map_shared(self, shared: Dict[str, Any], lease: int) -> Dict[str, Any]:
        """A batch where the node's object store holds it: the store's pages mapped here
        (copy-on-write), the lease released once every array of the batch is gone."""
        try:
            fd = os.open(shared["path"], os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise RuntimeError(f"rayd data: cannot open the object store's pages at "
                               f"{shared['path']}: {e} (RAYD_DATA_ZERO_COPY=0 copies batches "
                               f"into files instead)") from e
        try:
            mapped = mmap.mmap(fd, shared["length"], access=mmap.ACCESS_COPY,
                               offset=shared["offset"])
        finally:
            os.close(fd)
        weakref.finalize(mapped, self._client.release, lease)
        return _columns(mapped, shared)

    def _map_slot(self, reply: Dict[str, Any]) -> Dict[str, Any]:
        """A batch the server copied into one of its reused buffers: viewed in this process's
        mapping of it, the lease released once every array of the batch is gone."""
        shared = reply["shared"]
        mapped = self._client.slot(reply["slot"], shared["path"])
        # The batch's own view of the slot: the arrays keep it alive, and its end is the lease's.
        owner = (ctypes.c_char * shared["length"]).from_buffer(mapped, shared["offset"])
        weakref.finalize(owner, self._client.release, reply["lease"])
        return _columns(owner, shared)


def _columns(buffer: Any, shared: Dict[str, Any]) -> Dict[str, Any]:
    """The columns ``shared["columns"]`` describes, as NumPy arrays viewing ``buffer``."""
    import numpy as np

    rows = shared["rows"]
    out: Dict[str, Any] = {}
    for column in shared["columns"]:
        shape = (rows, *column["shape"])
        count = 1
        for dim in shape:
            count *= dim
        out[column["name"]] = np.frombuffer(buffer, dtype=column["dtype"], count=count,
                                            offset=column["offset"]).reshape(shape)
    return out


def get_dataset_shard(name: str) -> DatasetShard:
    """This rank's shard of the run's dataset ``name``. Raises RuntimeError naming the
    datasets the run has when it has no such one, or outside a rayd rank."""
    global _client
    shard = _shards.get(name)
    if shard is not None:
        return shard
    path = os.environ.get("RAYD_DATA_SOCKET")
    if not path:
        raise RuntimeError("rayd data: this process is not a rank of a run with datasets "
                           "(RAYD_DATA_SOCKET is unset): add datasets: to its train.yaml or "
                           "tune.yaml")
    if _client is None:
        _client = _Client(path)
    shard = DatasetShard(name, _client)
    _shards[name] = shard
    return shard
