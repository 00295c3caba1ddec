"""The web console: groups, offsets and topics of a kcoord broker in a browser.

It runs inside the broker process, on the broker's HTTP surface (``broker.http``), and acts
on the broker as a Kafka admin client (``admin.client``) over its own Kafka listener.
"""
