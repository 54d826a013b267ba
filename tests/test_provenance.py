"""What code a run ran (issue 52, item 5): an untracked module under src/ or a config under
configs/ makes a run dirty, and the record's patch rebuilds the code on top of its commit."""

import subprocess

from pelab import provenance


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def checkout(path):
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    (path / "src").mkdir()
    (path / "src" / "model.py").write_text("A = 1\n")
    (path / "README.md").write_text("docs\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "first")
    return path


def test_a_clean_checkout_is_clean_and_a_doc_edit_does_not_make_it_dirty(tmp_path):
    repo = checkout(tmp_path / "repo")
    (repo / "README.md").write_text("more docs\n")  # not code: the same run
    state = provenance.code_of(repo / "src")
    assert state["git_dirty"] is False and len(state["git_commit"]) == 40
    assert provenance.summary(state) == f"{state['git_commit'][:7]} clean"


def test_untracked_code_makes_a_run_dirty_and_its_patch_rebuilds_the_code(tmp_path):
    repo = checkout(tmp_path / "repo")
    (repo / "src" / "model.py").write_text("A = 2\n")
    (repo / "src" / "mine.py").write_text("B = 'new encoding'\n")
    (repo / "configs" / "pe").mkdir(parents=True)
    (repo / "configs" / "pe" / "mine.yaml").write_text("name: mine")  # no final newline
    state = provenance.code_of(repo)
    assert state["git_dirty"] is True
    assert state["git_changes"] == ["M src/model.py", "?? configs/pe/mine.yaml", "?? src/mine.py"]
    summary = provenance.summary(state)
    assert "+ 3 changes" in summary and "patch kept" in summary
    rebuilt = tmp_path / "rebuilt"
    git(tmp_path, "clone", "-q", str(repo), str(rebuilt))
    git(rebuilt, "checkout", "-q", state["git_commit"])
    subprocess.run(["git", "apply"], cwd=rebuilt, input=state["git_patch"], text=True, check=True)
    for path in ("src/model.py", "src/mine.py", "configs/pe/mine.yaml"):
        assert (rebuilt / path).read_bytes() == (repo / path).read_bytes()


def test_a_patch_over_the_limit_keeps_its_hash_and_paths_only(tmp_path, monkeypatch):
    repo = checkout(tmp_path / "repo")
    (repo / "src" / "big.py").write_text("x = 1\n" * 100)
    monkeypatch.setattr(provenance, "PATCH_LIMIT", 100)
    state = provenance.code_of(repo)
    assert state["git_patch"] is None and len(state["git_patch_sha256"]) == 64
    assert "patch too large, not kept" in provenance.summary(state)


def test_outside_a_checkout_nothing_is_claimed(tmp_path):
    assert provenance.code_of(tmp_path) == {"git_commit": None, "git_dirty": None}
