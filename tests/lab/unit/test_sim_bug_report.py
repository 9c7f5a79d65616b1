"""The lab's nvidia-bug-report.sh: the file name and flags of the real one, and a report of this host's own
commands, each within its time limit."""

from __future__ import annotations

import gzip

from k3ops_lab.sim import bug_report


def test_the_report_is_gzipped_under_the_output_file_name_with_gz_appended(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bug_report, "SECTIONS", (("kernel log", ("echo", "NVRM: Xid (PCI:0000:5d:00): 79, GPU has "
                                                                        "fallen off the bus")),))
    output = tmp_path / "nvidia-bug-report-xid79.log"
    assert bug_report.main(["--output-file", str(output), "--safe-mode"]) == 0
    text = gzip.open(f"{output}.gz", "rt").read()
    assert "*** kernel log\n\nNVRM: Xid (PCI:0000:5d:00): 79, GPU has fallen off the bus" in text
    assert not output.exists() and f"'{output}.gz'" in capsys.readouterr().out


def test_a_missing_or_hung_tool_is_named_in_its_section_and_the_rest_is_still_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(bug_report, "SECTION_SECONDS", 1)
    monkeypatch.setattr(bug_report, "SECTIONS", (("hung", ("sleep", "5")), ("absent", ("k3ops-no-such-tool",)),
                                                 ("uname", ("uname", "-s"))))
    monkeypatch.chdir(tmp_path)
    assert bug_report.main([]) == 0
    text = gzip.open(tmp_path / "nvidia-bug-report.log.gz", "rt").read()
    assert "hung: no answer within 1 s" in text and "k3ops-no-such-tool: not found" in text and "Linux" in text


def test_an_unknown_option_is_refused(capsys):
    assert bug_report.main(["--output", "x"]) == 1
    assert "unrecognized option '--output'" in capsys.readouterr().err
