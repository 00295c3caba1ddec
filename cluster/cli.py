"""``kcoord cluster``: look at a cluster and move its partitions, through etcd.

``status`` shows the live nodes, the controller, and where every partition lives (its
leader, leader epoch, replicas, and any move under way). ``reassign`` moves partitions
(KIP-455) with the same checks the controller uses: a single replica to another node is
copied and handed over; a replicated partition gets its new replica set (``--to 2,3,4``):
the new replicas follow the leader and join the ISR, then the controller completes the move
and a removed leader gives its place to an in-sync target replica. ``--unclean`` places an
offline partition on a live node with an empty log.
Both read and write etcd's keys for the cluster, as the nodes do.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def register(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="a kcoord cluster's nodes and partition placement (etcd)")
    commands = cluster.add_subparsers(dest="cluster_command", required=True)
    for name, help_text in (("status", "nodes, controller and where each partition lives"),
                            ("reassign", "move partitions to another node")):
        parser = commands.add_parser(name, help=help_text)
        parser.add_argument("--etcd", required=True, metavar="ENDPOINTS",
                            help="the cluster's etcd endpoints (cluster.etcd.endpoints)")
        parser.add_argument("--cluster-name", default="kcoord", help="the cluster's name (cluster.name)")
        if name == "status":
            parser.add_argument("--json", action="store_true", help="one JSON document instead of tables")
            parser.add_argument("--topic", help="only this topic's partitions")
            parser.set_defaults(func=status_command)
        else:
            parser.add_argument("partitions", nargs="+", metavar="TOPIC:P[,P...]",
                                help="partitions to move, e.g. orders:0,1 __consumer_offsets:7")
            parser.add_argument("--to", type=_node_list, required=True, metavar="NODE[,NODE...]",
                                help="the replicas to move them to, the preferred leader first")
            parser.add_argument("--unclean", action="store_true",
                                help="the partition's leader is gone for good: place it on NODE with an empty log")
            parser.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                                help="wait up to this long for the moves to complete")
            parser.set_defaults(func=reassign_command)


def _node_list(text: str) -> list[int]:
    try:
        nodes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of node ids") from None
    if not nodes:
        raise argparse.ArgumentTypeError("no node given")
    return nodes


def _parse_partitions(items: list[str]) -> list[tuple[str, int]]:
    out = []
    for item in items:
        topic, sep, rest = item.rpartition(":")
        if not sep or not topic:
            raise ValueError(f"{item!r}: expected TOPIC:PARTITION[,PARTITION...]")
        for part in rest.split(","):
            if not part.strip().isdigit():
                raise ValueError(f"{item!r}: {part!r} is not a partition number")
            out.append((topic, int(part)))
    return out


async def _image(endpoints: str, name: str) -> Any:
    from cluster.etcd import EtcdClient
    from cluster.model import ClusterImage, Keys

    client = EtcdClient([e for e in endpoints.split(",") if e.strip()])
    image = ClusterImage(Keys(name))
    snapshot = await client.get_prefix(image.keys.prefix)
    image.load(snapshot.revision, [(kv.key, kv.value, kv.mod_revision, kv.lease) for kv in snapshot.kvs])
    return client, image


def status_command(args: argparse.Namespace) -> int:
    import trio

    from cluster.etcd import EtcdUnavailable

    async def read() -> Any:
        client, image = await _image(args.etcd, args.cluster_name)
        await client.aclose()
        return image

    try:
        image = trio.run(read)
    except EtcdUnavailable as exc:
        print(f"kcoord: {exc}", file=sys.stderr)
        return EXIT_FAILED
    document = describe(image, args.topic)
    if args.json:
        print(json.dumps(document, indent=1))
        return EXIT_OK
    print(f"cluster {args.cluster_name} (id {document['cluster_id']}), etcd revision {document['revision']}")
    print(f"controller: node {document['controller']}")
    print("nodes:")
    for node in document["nodes"]:
        listeners = " ".join(f"{n}={h}:{p}" for n, (h, p) in node["listeners"].items())
        print(f"  {node['id']:>4}  {listeners}  rack={node['rack'] or '-'}  leads={node['leads']}  "
              f"holds={node['holds']}")
    print("partitions:")
    print(f"  {'TOPIC':<28} {'PART':>4} {'LEADER':>6} {'EPOCH':>8}  {'REPLICAS':<10}{'ISR':<10}MOVE")
    for row in document["partitions"]:
        move = ""
        if row["adding"] or row["removing"]:
            move = f"adding {row['adding']} removing {row['removing']}"
        leader = "-" if row["leader"] < 0 else row["leader"]
        epoch = "-" if row["epoch"] < 0 else row["epoch"]
        replicas = ",".join(map(str, row["replicas"]))
        isr = ",".join(map(str, row["isr"]))
        print(f"  {row['topic']:<28} {row['partition']:>4} {leader!s:>6} {epoch!s:>8}  {replicas:<10}{isr:<10}{move}")
    offline = [r for r in document["partitions"] if r["leader"] < 0]
    if offline:
        print(f"{len(offline)} partitions have no live leader")
    under = [r for r in document["partitions"] if r["under_replicated"]]
    if under:
        print(f"{len(under)} partitions are under-replicated (ISR smaller than the replicas): "
              + " ".join(f"{r['topic']}-{r['partition']}" for r in under[:20]) + (" ..." if len(under) > 20 else ""))
    return EXIT_OK


def describe(image: Any, topic: str | None = None) -> dict[str, Any]:
    """The status document: nodes, controller, and every partition's placement."""
    leads: dict[int, int] = {}
    holds: dict[int, int] = {}
    rows = []
    for tp in sorted(set(image.assignments) | set(image.leaders)):
        if topic is not None and tp[0] != topic:
            continue
        assignment = image.assignments.get(tp)
        leadership = image.leader_of(tp)
        if leadership is not None:
            leads[leadership.leader] = leads.get(leadership.leader, 0) + 1
        replicas = list(assignment.replicas) if assignment is not None else []
        for replica in replicas:
            holds[replica] = holds.get(replica, 0) + 1
        isr = sorted(image.isr_of(tp))
        rows.append({"topic": tp[0], "partition": tp[1], "leader": leadership.leader if leadership else -1,
                     "epoch": leadership.epoch if leadership else -1, "replicas": replicas, "isr": isr,
                     "under_replicated": len(isr) < len(replicas),
                     "adding": list(assignment.adding) if assignment else [],
                     "removing": list(assignment.removing) if assignment else []})
    return {
        "cluster_id": image.cluster_id, "revision": image.revision, "controller": image.controller,
        "nodes": [{"id": n, "listeners": {k: list(v) for k, v in info.listeners.items()}, "rack": info.rack,
                   "leads": leads.get(n, 0), "holds": holds.get(n, 0)} for n, info in sorted(image.nodes.items())],
        "partitions": rows,
    }


def reassign_command(args: argparse.Namespace) -> int:
    import trio

    from cluster.etcd import EtcdUnavailable

    try:
        partitions = _parse_partitions(args.partitions)
    except ValueError as exc:
        print(f"kcoord: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return trio.run(_reassign, args, partitions)
    except EtcdUnavailable as exc:
        print(f"kcoord: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def _reassign(args: argparse.Namespace, partitions: list[tuple[str, int]]) -> int:
    import trio

    from cluster.assignment import reassign
    from cluster.etcd import Compare, Put

    client, image = await _image(args.etcd, args.cluster_name)
    failed = 0
    try:
        for tp in partitions:
            assignment, problem = reassign(image, tp, args.to, unclean=args.unclean)
            if assignment is None:
                print(f"{tp[0]}-{tp[1]}: not moved: {problem}")
                failed += 1
                continue
            key = image.keys.assignment(*tp)
            compares = [Compare(key, "MOD", image.revision_of(key))]
            if args.unclean:
                compares.append(Compare(image.keys.leader(*tp), "CREATE", 0))
            result = await client.txn(compares, [Put(key, assignment.encode())])
            if not result.succeeded:
                print(f"{tp[0]}-{tp[1]}: not moved: it changed while this command ran; run it again")
                failed += 1
                continue
            where = f"node {args.to[0]}" if len(args.to) == 1 else f"nodes {','.join(map(str, args.to))}"
            print(f"{tp[0]}-{tp[1]}: moving to {where}" + (" (unclean: empty log)" if args.unclean else ""))
        if args.wait > 0 and not failed:
            deadline = time.monotonic() + args.wait
            while True:
                _, image = await _image(args.etcd, args.cluster_name)
                pending = [tp for tp in partitions
                           if (leader := image.leader_of(tp)) is None or leader.leader not in args.to
                           or image.assignments[tp].moving or set(image.assignments[tp].replicas) != set(args.to)]
                if not pending:
                    print("every move completed")
                    break
                if time.monotonic() > deadline:
                    print(f"{len(pending)} moves still under way after {args.wait:g}s")
                    return EXIT_FAILED
                await trio.sleep(0.1)
    finally:
        await client.aclose()
    return EXIT_FAILED if failed else EXIT_OK
