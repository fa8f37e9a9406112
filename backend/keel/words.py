"""Every status word Keel shows, in one place: the CLI, the API and the UI use these.

Words are UPPER CASE for states and verdicts, lower case for reasons a move is made or
a guest is left alone.
"""

from __future__ import annotations

# What the balancer concluded this round.
BALANCED = "BALANCED"               # below the threshold and no hot node: nothing to do
HOLDING = "HOLDING"                 # above the threshold, waiting out the hold rounds
PLANNED = "PLANNED"                 # a plan is ready (dry run shows it, apply runs it)
NOT_WORTH_IT = "NOT WORTH IT"       # the best plan does not improve enough (margin)
OUTSIDE_SCHEDULE = "OUTSIDE SCHEDULE"   # balancing is not allowed at this hour
NO_QUORUM = "NO QUORUM"             # the cluster cannot take writes: do nothing
STUCK = "STUCK"                     # imbalanced, but no allowed move helps (see skipped)
MIGRATING = "MIGRATING"             # a plan is being executed
PAUSED = "PAUSED"                   # balancing is switched off (dry run only)
STANDBY = "STANDBY"                 # not the leader: another node acts

VERDICTS = (BALANCED, HOLDING, PLANNED, NOT_WORTH_IT, OUTSIDE_SCHEDULE, NO_QUORUM, STUCK,
            MIGRATING, PAUSED, STANDBY)

# Why a move is in a plan.
MAINTENANCE = "maintenance"         # its node is being emptied
RULE = "rule"                       # it breaks a rule where it is (pin, affinity, HA rule)
BALANCE = "balance"                 # it evens out the load
PARK = "park"                       # a temporary stop on a third node to break a swap cycle

# What stopped a plan's balancing (``Plan.stopped``).
LEVEL_REACHED = "level reached"     # the figure is at its target and no node is hot
NOTHING_WORTH_IT = "no move worth it"   # short of the level, no allowed move helps enough
DIMINISHING = "returns diminish"    # balanced already; the next move would do too little per GiB
BUDGET = "budget"                   # the plan's move or byte limit was reached
CLUSTER_FULL = "cluster full"       # the mean use is above the hotspot: no placement cools every node

# Why a guest stays where it is (``skipped``).
IGNORED = "ignored"                 # by config, tag or pool
NOT_PERMITTED = "not permitted"     # the user who asked may not migrate it (VM.Migrate)
PINNED_HERE = "pinned"              # allowed only where it is
TEMPLATE = "template"
RUNNER = "runner"                   # a Keel runner VM
STOPPED = "stopped"                 # stopped guests carry no load (moved only for maintenance)
LOCKED = "locked"                   # a PVE lock (backup, migrate, ...)
LOCAL_DISKS = "local disks"         # and with_local_disks is off
LOCAL_DEVICES = "local devices"     # PCI/USB passthrough and the like
VCPUS = "vCPUs"                     # the target has fewer threads than the guest has vCPUs
STORAGE = "storage"                 # a storage of the guest's volumes is missing on the target
CPU_TYPE = "CPU type"               # CPU type host, and the target's CPU model differs
CONTAINER = "container"             # containers restart to move; not enabled
NOT_HA = "not HA"                   # scope is HA guests only
HA_STATE = "HA state"               # HA resource not in state started (or ignored)
PVE_BALANCES = "PVE balances it"    # Proxmox's own auto-rebalance handles HA guests
COOLDOWN = "cooldown"               # moved recently
BLOCKED = "blocked"                 # PVE refused to migrate it recently
NO_ROOM = "no room"                 # no allowed node can take it
NODE_DOWN = "node down"
CONFLICT = "conflict"               # rules contradict each other
LIMIT = "limit"                     # the plan's move or byte budget is spent
NO_SAFE_ORDER = "no safe order"     # the moves cannot be ordered without overcommitting

# Runner scale sets and providers (`keel runners status`).
LISTENING = "LISTENING"             # holds its message session with GitHub: all is well
HOLDING_BACK = "HOLDING BACK"       # a higher-priority scale set keeps it off a provider it found full
BACKING_OFF = "BACKING OFF"         # skipping a provider that refused it, until a time
OFF_SCHEDULE = "OFF SCHEDULE"       # a schedule window with max_runners 0 is in force
STARTING = "STARTING"               # no session yet (GitHub not answered yet)
UNREACHABLE = "UNREACHABLE"         # GitHub, or the provider, cannot be reached
RATE_LIMITED = "RATE LIMITED"       # GitHub asked Keel to wait until a time: no call, no verdict till then
DEGRADED = "DEGRADED"               # GitHub is not answering (or failing): no runner is judged by its silence
DRAINING = "DRAINING"               # `keel runners drain`: the jobs it has, then no more
MISCONFIGURED = "MISCONFIGURED"     # GitHub answers, but lacks what the config names (a runner group)
HELD = "HELD"                       # provider: a scale set's hold keeps lower priorities off it
OK = "OK"                           # provider: taking runners
DISABLED = "DISABLED"               # provider: disabled in the config
RUNNER_STATES = ("creating", "starting", "idle", "busy", "removing")

# Power saving (issue 19): what a power plan concluded, and why a node stays awake (its gates).
SLEEP = "SLEEP"                     # nodes can be emptied and powered off now
ALL_AWAKE = "ALL AWAKE"             # no node can sleep now (each one's reason is given)
POWER_VERDICTS = (SLEEP, ALL_AWAKE, NO_QUORUM)
AWAKE = "awake"                     # a node's power state: online
ASLEEP = "asleep"                   # offline, and one of power.nodes (Keel cannot tell a sleep from a loss)
DOWN = "down"                       # offline, and not a node that may sleep
GATE_POLICY = "policy"              # not one of power.nodes
GATE_AWAKE = "not awake"            # already offline
GATE_MAINTENANCE = "maintenance"    # in maintenance: an admin is working on it
GATE_SCHEDULE = "schedule"          # a never_sleep window is open
GATE_QUORUM = "quorum"              # corosync would lose quorum, or keep a bare majority
GATE_MIN_AWAKE = "min awake"        # fewer nodes than min_awake would be awake
GATE_HEADROOM = "headroom"          # the awake nodes would pass the headroom line, or N+1
GATE_HA = "HA"                      # the HA stack is not in a state to let the node go
GATE_CEPH = "Ceph"                  # Ceph's pools, monitors or health do not allow it
GATE_GUESTS = "guests stay"         # a running guest cannot leave it
GATE_LEASE = "leader lease"         # it holds Keel's leader lease (hand it over first)
GATE_API_NODE = "API node"          # Keel talks to PVE through it, and wakes the others from it
GATE_WOL = "Wake-on-LAN"            # no wakeonlan MAC in its node config
