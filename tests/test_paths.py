"""Where tally puts its files: the per-user runtime directory."""
import stat

from tally import paths


def test_runtime_dir_follows_xdg_runtime_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert paths.runtime_dir() == tmp_path / "tally"
    assert paths.default_socket() == tmp_path / "tally" / "server.sock"
    assert paths.default_socket(2) == tmp_path / "tally" / "server-2.sock"


def test_made_runtime_dir_exists_before_any_server_made_it(tmp_path, monkeypatch):
    # Benchmarks (chaos, fuzz, colocate) make their work directories there on a
    # machine where no tally-server ever ran.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "fresh"))
    made = paths.made_runtime_dir()
    assert made == tmp_path / "fresh" / "tally" and made.is_dir()
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert paths.made_runtime_dir() == made        # a second call finds it there
