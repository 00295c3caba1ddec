"""Kafka's security model, sans-IO: who a connection is, and what it may do.

- ``principal``: ``User:name`` principals, and the SSL certificate mapping rules;
- ``acl``: resource patterns, ACL bindings, filters and their matching;
- ``authorizer``: the pure decision (principal, host, operation, resource) -> allow/deny;
- ``scram`` and ``plain``: the SASL mechanisms' server sides and SCRAM credentials;
- ``authenticator``: a connection's SASL state machine (frames in, replies and a principal out);
- ``records`` and ``state``: credentials and ACLs as log records, and their replay;
- ``access``: the operations each API needs, one table the router consults.

Nothing here touches a socket, a file or a clock: time comes in as arguments.
"""
