"""kcoord as a cluster: several nodes, with membership and partition placement held in etcd.

``model`` (the keys and the image of etcd's state), ``assignment`` (where partitions go),
``roles`` (what this node is for each partition), ``handover`` (a leader giving a partition
to the replica that copied it), ``fencing`` (the lease, from the node's own clock) and
``routing`` (which requests this node serves, and Kafka's errors for the rest) are sans-IO.
``etcd`` is the only module that speaks to etcd; ``node`` is the trio shell that runs a
node; ``view`` answers the broker's placement questions from the image. docs/cluster.md.
"""
