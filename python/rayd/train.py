"""The rank's side of a command trainable: config, context, checkpoint, report.

rayd starts a command trainable once per rank and describes the trial in the
rank's environment (``RAYD_*`` variables, docs/command-trainables.md). This
module reads them and speaks the report wire: one line of JSON per request to
``RAYD_REPORT_ADDR``, one line of JSON back.

Every function also works when the script is run by hand, without rayd:
:func:`get_config` returns ``{}``, :func:`get_context` falls back to
torchrun's variables (or a single process), :func:`get_checkpoint` returns
``None`` and :func:`report` prints its metrics as a JSON line.

Standard library only; Python 3.8 or later.
"""

import json
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = ["NodeDrain", "TrainContext", "get_config", "get_context", "get_checkpoint",
           "get_dataset_shard", "report"]

_CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class NodeDrain:
    """This rank's node is leaving the cluster (``rayd drain``: a preemption notice).

    The rank is stopped at ``deadline`` (SIGTERM, then SIGKILL after the grace
    period): report a checkpoint now, and the trial goes on from it on other
    nodes without counting a failure.
    """

    deadline: float
    """Unix time (seconds) at which this node's ranks are stopped."""
    reason: str
    """As given to ``rayd drain --reason``; may be empty."""

    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.time())


@dataclass(frozen=True)
class TrainContext:
    """Where this process sits in the trial's gang."""

    world_rank: int
    """This rank, 0 to world_size - 1. Only rank 0's reports are kept."""
    world_size: int
    """The number of ranks of the trial."""
    local_rank: int
    """This rank's index among the ranks on its node."""
    local_world_size: int
    """The number of the trial's ranks on this node."""
    node_rank: int
    """The index of this node among the trial's nodes."""
    trial_id: Optional[str] = None
    """The trial's id (``RAYD_TRIAL_ID``); None when run by hand."""
    trial_dir: Optional[str] = None
    """The trial's directory on the driver (``RAYD_TRIAL_DIR``); it may not exist on this
    node. None when run by hand."""
    drain: Optional[NodeDrain] = None
    """Set while this rank's node is draining; each :func:`get_context` call looks
    again (a stat of ``RAYD_DRAIN_FILE``), so a loop may ask once per step."""


def _env_int(names: Tuple[str, ...], default: int) -> int:
    """The first of ``names`` set in the environment, as an int; else ``default``."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"{name}={value!r}: expected an integer") from None
    return default


def _env_str(name: str) -> Optional[str]:
    value = os.environ.get(name)
    return value if value else None


def get_config() -> Dict[str, Any]:
    """The trial's config: the JSON object in ``RAYD_CONFIG_FILE``.

    Returns ``{}`` when ``RAYD_CONFIG_FILE`` is unset (the script was run by
    hand). Each call reads the file again and returns a fresh dict.
    """
    path = _env_str("RAYD_CONFIG_FILE")
    if path is None:
        return {}
    with open(path, "r", encoding="utf-8") as f:
        config = json.load(f)
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the trial's config is not a JSON object")
    return config


def get_context() -> TrainContext:
    """This rank's place in the trial.

    From rayd's ``RAYD_WORLD_RANK``, ``RAYD_WORLD_SIZE``, ``RAYD_LOCAL_RANK``,
    ``RAYD_LOCAL_WORLD_SIZE`` and ``RAYD_NODE_RANK``; run by hand, from
    torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``
    and ``GROUP_RANK``, or horovodrun's ``HOROVOD_RANK``, ``HOROVOD_SIZE``,
    ``HOROVOD_LOCAL_RANK``, ``HOROVOD_LOCAL_SIZE`` and ``HOROVOD_CROSS_RANK``;
    else a single process (0, 1, 0, 1, 0).
    """
    return TrainContext(
        world_rank=_env_int(("RAYD_WORLD_RANK", "RANK", "HOROVOD_RANK"), 0),
        world_size=_env_int(("RAYD_WORLD_SIZE", "WORLD_SIZE", "HOROVOD_SIZE"), 1),
        local_rank=_env_int(("RAYD_LOCAL_RANK", "LOCAL_RANK", "HOROVOD_LOCAL_RANK"), 0),
        local_world_size=_env_int(
            ("RAYD_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "HOROVOD_LOCAL_SIZE"), 1),
        node_rank=_env_int(("RAYD_NODE_RANK", "GROUP_RANK", "HOROVOD_CROSS_RANK"), 0),
        trial_id=_env_str("RAYD_TRIAL_ID"),
        trial_dir=_env_str("RAYD_TRIAL_DIR"),
        drain=_read_drain(_env_str("RAYD_DRAIN_FILE")),
    )


def _read_drain(path: Optional[str]) -> Optional[NodeDrain]:
    """The node's drain notice at ``path`` (written by rayd, atomically), or None."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            notice = json.load(f)
        return NodeDrain(deadline=float(notice["deadline_ms"]) / 1000.0,
                         reason=str(notice.get("reason", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # usually no file: the node is not draining


def get_checkpoint() -> Optional[str]:
    """The directory to resume from (``RAYD_CHECKPOINT_DIR``), or None to start afresh.

    Set when the trial restarts after a failure, resumes after a pause, or was
    given a donor's checkpoint by PBT. Read it; do not write into it.
    """
    return _env_str("RAYD_CHECKPOINT_DIR")


def _is_bool(value: Any) -> bool:
    """True for Python, numpy and torch booleans (float() would take them as 0/1)."""
    if isinstance(value, bool):
        return True
    if type(value).__name__ in ("bool_", "bool8"):  # numpy.bool_
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and str(dtype) in ("bool", "torch.bool")


def _check_metrics(metrics: Mapping[str, Any]) -> Dict[str, float]:
    """The metrics as floats (NaN and infinities included); ValueError naming the first
    value that is not a number."""
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics: expected a dict of name -> number, got {type(metrics).__name__}")
    checked: Dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise ValueError(f"metric {name!r}: the name is not a string")
        if _is_bool(value) or isinstance(value, (str, bytes, bytearray)):
            raise ValueError(f"metric {name!r}: {value!r} is not a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"metric {name!r}: {value!r} is not a number") from None
        checked[name] = number
    return checked


def _wire_number(value: float) -> Any:
    """A metric as the report wire carries it: a JSON number, or "nan", "inf", "-inf"."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _parse_addr(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RuntimeError(f"RAYD_REPORT_ADDR={addr!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class _Connection:
    """One connection to the rank's actor per process, shared by its threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._reader: Any = None
        self._pid = 0

    def _close(self) -> None:
        for closable in (self._reader, self._sock):
            if closable is not None:
                try:
                    closable.close()
                except OSError:
                    pass
        self._sock = None
        self._reader = None

    def _connect(self, addr: Tuple[str, int]) -> None:
        self._close()
        sock = socket.create_connection(addr, timeout=_CONNECT_TIMEOUT_S)
        # A reply to a report with a checkpoint comes after the copy: wait as long as it takes.
        sock.settimeout(None)
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._pid = os.getpid()

    def request(self, addr: Tuple[str, int], line: bytes) -> Dict[str, Any]:
        """Sends one request line and returns the parsed reply; reconnects once if the
        connection broke before any reply came."""
        with self._lock:
            if self._sock is not None and self._pid != os.getpid():
                self._sock = None  # inherited over fork(): the parent's, leave it alone
                self._reader = None
            for attempt in (0, 1):
                fresh = self._sock is None
                try:
                    if fresh:
                        self._connect(addr)
                    assert self._sock is not None
                    self._sock.sendall(line)
                    reply = self._reader.readline()
                    if not reply:
                        raise ConnectionError("the connection was closed before a reply")
                except OSError as e:
                    self._close()
                    # Retry once on a connection that was already open (the peer may have
                    # dropped it); a fresh connection that fails is a real failure.
                    if attempt == 0 and not fresh:
                        continue
                    raise RuntimeError(f"rayd report to {addr[0]}:{addr[1]} failed: {e}") from e
                try:
                    parsed = json.loads(reply.decode("utf-8"))
                except ValueError:
                    self._close()
                    raise RuntimeError(f"rayd report: a malformed reply {reply[:200]!r}") from None
                if not isinstance(parsed, dict) or "ok" not in parsed:
                    self._close()
                    raise RuntimeError(f"rayd report: a malformed reply {reply[:200]!r}")
                return parsed
            raise AssertionError("unreachable")


_connection = _Connection()


def get_dataset_shard(name: str):
    """This rank's shard of the run's dataset ``name`` (rayd.data.DatasetShard): each
    ``iter_batches(batch_size=...)`` call is one pass over this rank's share of an epoch,
    yielding dicts of NumPy arrays. Needs NumPy."""
    from . import data as _data
    return _data.get_dataset_shard(name)


def report(metrics: Mapping[str, Any], checkpoint: Optional[str] = None) -> None:
    """Reports one result of this rank, with an optional checkpoint directory.

    Every rank may call it; only rank 0's results (and checkpoints) are kept.
    Each value is converted with ``float()``, so Python, numpy and torch scalars
    all work; booleans, strings and other non-numbers raise a ValueError naming
    the metric, before anything is sent. NaN and infinities are results (a
    diverged run): the trial goes on, ranked below every other, and schedulers
    such as ASHA stop it where they stop anything.

    ``checkpoint`` is a directory; rayd has copied it by the time this returns,
    so the caller may then delete or overwrite it.

    Raises RuntimeError with rayd's reason when rayd refuses the report (the
    trial's attempt then ends), or when the rank's actor cannot be reached.
    Run by hand (``RAYD_REPORT_ADDR`` unset), prints the metrics as one JSON
    line to stdout and returns.
    """
    values = _check_metrics(metrics)
    # The time this rank waited for its datasets' batches since the last report.
    from . import data as _data
    if _data._shards and "data_wait_s" not in values:
        values["data_wait_s"] = _data._data_wait_since_report()
    checkpoint_path: Optional[str] = None
    if checkpoint is not None:
        checkpoint_path = os.path.abspath(os.fspath(checkpoint))
        if not os.path.isdir(checkpoint_path):
            raise ValueError(f"checkpoint {checkpoint_path!r} is not a directory")
        if _data._shards:
            _data._settle_before_checkpoint()

    addr = _env_str("RAYD_REPORT_ADDR")
    if addr is None:
        print(json.dumps(values), flush=True)
        return

    request = {"token": os.environ.get("RAYD_REPORT_TOKEN", ""),
               "metrics": {name: _wire_number(value) for name, value in values.items()},
               "checkpoint": checkpoint_path}
    # allow_nan=False: JSON has no NaN (_wire_number spells it); compact and ASCII, so the
    # request is one line.
    line = json.dumps(request, allow_nan=False, separators=(",", ":")) + "\n"
    reply = _connection.request(_parse_addr(addr), line.encode("utf-8"))
    if reply.get("ok") is not True:
        error = reply.get("error") or "the report was refused"
        raise RuntimeError(f"rayd report refused: {error}")

