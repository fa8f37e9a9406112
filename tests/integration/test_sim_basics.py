"""The simulator answers over real HTTPS as PVE does: envelope, status codes, schema checks."""

from __future__ import annotations

import requests

from conftest import DEMO_TOKEN


def test_version_over_https_with_a_token(shared_sim):
    pve = shared_sim.proxmox()
    version = pve.version.get()
    assert version["version"] == "9.1.4"
    assert version["release"] == "9.1"
    assert set(version) >= {"version", "release", "repoid"}


def test_password_login_gets_a_ticket_and_csrf_token(shared_sim):
    pve = shared_sim.proxmox(user="root@pam", password="keel-demo")
    ticket, csrf = pve.get_tokens()
    assert ticket.startswith("PVE:root@pam:")
    assert ":" in csrf
    assert pve.cluster.status.get()[0]["type"] == "cluster"


def test_unknown_path_is_501_with_pve_message(shared_sim):
    response = requests.get(f"{shared_sim.url}/api2/json/nodes/pve1/frobnicate",
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=shared_sim.cert)
    assert response.status_code == 501
    assert response.reason == "Method 'GET /nodes/pve1/frobnicate' not implemented"
    assert response.json() == {"data": None,
                               "message": "Method 'GET /nodes/pve1/frobnicate' not implemented\n"}


def test_unknown_parameter_is_400_with_errors(shared_sim):
    response = requests.get(f"{shared_sim.url}/api2/json/cluster/resources",
                            params={"type": "vm", "colour": "blue"},
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=shared_sim.cert)
    assert response.status_code == 400
    assert response.reason == "Parameter verification failed."
    assert "colour" in response.json()["errors"]


def test_ill_typed_parameter_is_400_naming_it(shared_sim):
    response = requests.get(f"{shared_sim.url}/api2/json/cluster/resources",
                            params={"type": "vms"},
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=shared_sim.cert)
    assert response.status_code == 400
    assert response.json()["errors"]["type"] == (
        "value 'vms' does not have a value in the enumeration 'vm, storage, node, sdn'")
