"""Ephemeral GitHub Actions runners as VMs on the cluster, in scale sets.

A scale set is a size of runner (cores and memory) that GitHub assigns jobs to by
name.  Keel holds a message session with GitHub for each scale set, learns how many
jobs are assigned, clones one VM per job from a template, hands it a one-use (JIT)
registration through the QEMU guest agent, and deletes the VM when its one job is
done.  Parts:

| module | holds |
|---|---|
| ``settings`` | the ``runners:`` section of keel.yaml (Rungar's keys) |
| ``github`` | every call to GitHub: App auth, REST, the scale-set API and its long poll |
| ``proxmox`` | the Proxmox VE provider: node choice, clone/start/agent, delete (through ``keel.pve``) |
| ``placement`` | pure: provider order, backoff, priority holds |
| ``scaler`` | pure: desired runners from assigned jobs, ``min_runners`` and schedules |
| ``lifecycle`` | a runner's steps from registration to deletion |
| ``service`` | ``RunnerService``: the reconcile loop the engine hosts |
| ``store`` | runner state, job waits and events in SQLite |

This package never talks to Proxmox VE except through ``keel.pve``, and only
``github.py`` talks to GitHub.
"""
