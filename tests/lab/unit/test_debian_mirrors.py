"""The lab uses the controller's own Debian mirror, read from its apt sources."""

from k3ops_lab import debian


def test_reads_deb822_and_one_line_sources(tmp_path, monkeypatch):
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    (sources / "other.list").write_text("deb [arch=amd64] https://packages.example/apt cloud-sdk-bookworm main\n")
    monkeypatch.setattr(debian, "APT_SOURCES", (tmp_path / "sources.list", sources))
    mirrors = debian.controller_mirrors()
    assert mirrors.archive == "http://mirror.example/debian"
    assert mirrors.security == "http://mirror.example/debian-security"
    assert "URIs: http://mirror.example/debian-security\nSuites: bookworm-security" in mirrors.sources()


def test_falls_back_to_debian_when_no_source_matches(tmp_path, monkeypatch):
    (tmp_path / "sources.list").write_text("deb http://old.example/debian bullseye main\n")
    monkeypatch.setattr(debian, "APT_SOURCES", (tmp_path / "sources.list",))
    assert debian.controller_mirrors() == debian.Mirrors(debian.DEFAULT_ARCHIVE, debian.DEFAULT_SECURITY)
