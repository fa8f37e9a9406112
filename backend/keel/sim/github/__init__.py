"""A fake GitHub inside the simulator, for Keel's runner tests and the demo.

It answers on the simulator's own port, as a GitHub Enterprise Server would: the REST
API under ``/api/v3`` (App JWT → installation token, runner groups, JIT configs, runner
list and delete, jobs), the Actions service under ``/_actions`` (runner scale sets,
message sessions, JIT for a scale set), each session's message queue under ``/_msgq``
(the long poll), and a control API under ``/_github`` for tests.  Its clock is the
cluster's: jobs run, tokens expire and sessions time out in simulated time.

When the guest agent writes a JIT config into a simulated VM, a fake runner agent
starts there (``agent``): it connects, takes one job, runs it and powers the VM off,
unless a fault says otherwise (never connects, crashes mid-job, becomes a ghost, boots
slowly).  Jobs are announced to a webhook URL with signatures (``hooks``).

| module | holds |
|---|---|
| ``scenario`` | the scenario's ``github:`` section |
| ``state`` | ``FakeGitHub``: apps, tokens, runners, jobs, scale sets, sessions, messages |
| ``agent`` | the runner inside a VM |
| ``hooks`` | webhook deliveries (a thread; never under the cluster lock) |
| ``rest`` | the REST endpoints |
| ``actions`` | the Actions service: scale sets, sessions, the message queue |
| ``http`` | routing, authentication, rate-limit faults, the long poll |
| ``control`` | ``/_github`` |
"""
