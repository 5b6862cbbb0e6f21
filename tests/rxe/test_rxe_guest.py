"""The rxe guest harness's host side, without booting a guest: how it recognises a static
busybox, names a missing prerequisite, and refuses bad input (the guest itself: test_rxe.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from verbspec.refimpl.rxe import guest as rg


def test_a_dynamically_linked_interpreter_is_not_taken_for_a_static_busybox():
    assert not rg._is_static_elf(Path(sys.executable).resolve())


def test_a_static_busybox_is_recognised():
    if not rg.BUSYBOX.exists():
        pytest.skip(f"no {rg.BUSYBOX} here to look at")
    # Debian's busybox (dynamic) and busybox-static install the same path; tell them apart
    # by the package that owns it
    owner = Path("/var/lib/dpkg/info/busybox-static.list")
    expected = owner.exists() and str(rg.BUSYBOX) in owner.read_text().split()
    assert rg._is_static_elf(rg.BUSYBOX) == expected


def test_a_missing_qemu_is_named_with_its_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(rg.MissingPrerequisite, match="qemu-system-x86_64 .*qemu-system-x86"):
        rg.check_host()


def test_a_work_dir_that_is_not_a_directory_is_refused_by_name(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(rg.RxeGuestError, match=f"work dir {missing} is not a directory"):
        rg.RxeGuest.start(missing)


def test_the_cli_without_a_command_says_so(capsys):
    with pytest.raises(SystemExit) as exc:
        rg.main([])
    assert exc.value.code == 2
    assert "no command given" in capsys.readouterr().err
