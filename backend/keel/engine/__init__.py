"""keel-engine: the root service on every node.  It serves Keel's local API on a Unix
socket and, on the one node that holds the leader lease, runs the balancer and the
runners."""
