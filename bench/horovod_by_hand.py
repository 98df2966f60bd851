"""Starts a Horovod Gloo job on this machine the way horovodrun's Gloo mode does, without rayd:
horovodrun's own HTTP rendezvous server (horovod.runner.http.http_server), then N rank
processes with the same variables rayd's horovod launcher gives (HOROVOD_RANK, LOCAL_/CROSS_,
HOROVOD_HOSTNAME, HOROVOD_GLOO_*), one CPU thread each. bench/horovod.sh uses it as the peer
that `rayd train --launcher horovod` is compared with.

    python3 bench/horovod_by_hand.py --np 2 -- /usr/bin/python3 examples/python/mlp_horovod.py

Horovod must be importable (PYTHONPATH). Exits with the first failing rank's status.
"""

import argparse
import os
import subprocess
import sys

from horovod.runner.common.util import hosts
from horovod.runner.http.http_server import RendezvousServer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    plan = hosts.get_host_assignments(hosts.parse_hosts(f"localhost:{args.np}"), args.np)
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(plan)
    ranks = []
    for slot in plan:
        env = dict(os.environ)
        env.update({
            "HOROVOD_RANK": str(slot.rank), "HOROVOD_SIZE": str(slot.size),
            "HOROVOD_LOCAL_RANK": str(slot.local_rank), "HOROVOD_LOCAL_SIZE": str(slot.local_size),
            "HOROVOD_CROSS_RANK": str(slot.cross_rank), "HOROVOD_CROSS_SIZE": str(slot.cross_size),
            "HOROVOD_HOSTNAME": slot.hostname, "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port), "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": "lo",
            "OMP_NUM_THREADS": "1",
        })
        ranks.append(subprocess.Popen(command, env=env))
    statuses = [rank.wait() for rank in ranks]
    server.stop()
    sys.exit(next((s for s in statuses if s != 0), 0))


if __name__ == "__main__":
    main()
