"""Model egress without opening the sandbox: a per-phase NetworkPlan enforced through a real proxy.

``plan`` decides what each phase of an attempt may reach, ``tinyproxy`` renders the rules
for Debian's tinyproxy and reads its log back, ``relay`` sits in front of tinyproxy (bytes,
the SNI of TLS tunnels, DNS questions; ``wire`` parses what it reads), ``join`` makes one
event per request of the two, ``log`` keeps every connection attempt in the attempt's
``egress.log``, ``host`` runs the proxy for the local (bubblewrap) executor, and
``forwarder`` is what listens inside its sandboxes.
"""
