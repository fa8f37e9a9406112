import pytest

from keel.errors import InvalidError
from keel.pve.upid import parse_upid


def test_parse_upid():
    upid = parse_upid("UPID:pve1:0002A1B4:01C2F3D5:6A1B2C3D:qmigrate:100:root@pam:")
    assert (upid.node, upid.pid, upid.type, upid.id, upid.user) == ("pve1", 0x2A1B4, "qmigrate", "100", "root@pam")
    assert upid.starttime == 0x6A1B2C3D
    assert str(upid).startswith("UPID:pve1:")


def test_parse_upid_of_a_token_task():
    upid = parse_upid("UPID:pve2:00001000:00000010:6A1B2C3D:qmclone:9000:keel@pve!keel:")
    assert upid.user == "keel@pve!keel"


@pytest.mark.parametrize("bad", ["", "UPID:pve1", "TASK:pve1:1:1:1:x:1:u:", "UPID:pve1:zz:1:1:x:1:u:"])
def test_bad_upids_are_refused_by_name(bad):
    with pytest.raises(InvalidError, match="UPID"):
        parse_upid(bad)
